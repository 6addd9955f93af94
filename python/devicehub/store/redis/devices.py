"""Device records and their lexicographic indexes on Redis (the queries that read them: device_queries.py).

A device's record, snapshot, subscriptions and queue are in the device's slot; its account's lexicographic indexes,
with `devix` (which indexes hold each device), in the account's slot; the endpoint name's ids per account in the
name's slot; the last-seen index is bucketed (keys.py). A write is the device's slot (one script, which hands back
the record it replaced) with the name and the last-seen entry in the same pipeline (index entries first or beside the
record, keys.py; readers skip what they do not find), then, when the indexes a device belongs to changed,
`_reindex`: the account's indexes made to match the records as they stand, in a script that checks `devix`'s
generation is the one it read first, so that of two nodes writing one device the index follows whichever record is
the newest. On one Redis (no slots to keep apart) a
registration batch's device scripts, names and last-seen entries are one script call per group of devices
(writes.py `WriteGroups`, issue 30 #5), the names and last-seen entries first.

Beside each record, in the device's slot and written by the same script call, is its directory summary
(`device_dir`): the record without its resources, which a directory page and a filtered count read instead of the
whole record (issue 30 #5: the resources were ~60 % of a page's bytes and none of what it shows). A record a
previous release wrote has no summary: a page reads those devices' records whole instead (device_queries.py).
"""

from __future__ import annotations

import asyncio
import heapq
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import msgspec

from devicehub.domain.model import Device, ReportedValue
from devicehub.errors import Unavailable
from devicehub.store.redis.codec import SEP, encode, text
from devicehub.store.redis.connection import WATCH_ATTEMPTS
from devicehub.store.redis.device_queries import VALUE_INDEXED, RedisDeviceQueries
from devicehub.store.redis.writes import WriteGroups, Writes

# EVAL: in a pipeline beside other slots' commands
_FORGET_NAME = (Path(__file__).with_name("lua") / "forget_name.lua").read_text()

_DEVICE_INDEX_VERSION = "3"  # the account-slot indexes with `devix` (issue 31 #2)


def _summary(device: Device) -> bytes:
    """The device's directory summary: its record without the resources (every field a page shows or a filter
    names, and `last_seen_at`, which its last contact counts from)."""
    return encode(msgspec.structs.replace(device, resources=()))


class RedisDevices(RedisDeviceQueries):
    """`DeviceStore` on Redis."""

    def _write_record(self, writes: Writes, device: Device, blob: bytes) -> None:
        """Queue the device's record (a SWAP: the script hands back the one it replaced) and its directory summary,
        in one script call: a page never reads a summary of another record than the one stored."""
        writes.swap(self.keys.dev("device", device.id), blob)
        writes.set(self.keys.dev("device_dir", device.id), _summary(device))

    def _device_indexes(self, device: Device) -> list[str]:
        """The lexicographic id indexes a device belongs to: its account's, and one per filterable value."""
        k, account = self.keys, device.account_id
        return [
            k.acc("devices", account),
            k.acc("devices", account, device.state),
            *(k.acc("devices_by", account, f, getattr(device, f)) for f in VALUE_INDEXED),
        ]

    async def _index_existing_devices(self) -> None:
        """Fill the indexes for devices whose records are there without them (once per database: a migrated one, or
        one whose indexes were lost). The mark is set once every device is indexed: a node stopped midway leaves the
        fill to the next node to open; two nodes filling at once add the same entries."""
        mark = self._p + "device_indexes"
        if await self.redis.exists(mark):
            return
        keys = [text(k) async for k in self.redis.scan_iter(match=self._p + "device:{dev:*", count=1000)]
        for start in range(0, len(keys), 500):
            devices = await self._devices(keys[start : start + 500])
            by_account: dict[str, list[str]] = {}
            for device in devices:
                by_account.setdefault(device.account_id, []).append(device.id)
            for account_id, ids in by_account.items():
                await self._reindex_now(account_id, ids, refill=True)
        await self.redis.set(mark, _DEVICE_INDEX_VERSION)

    async def _reindex(self, account_id: str, device_ids: Sequence[str]) -> None:
        """`_reindex_now` for these devices, coalesced per account on this node: one transaction at a time, over
        every device whose writer waits meanwhile (a burst of writes to one account makes few index writes, not one each
        that all but one find `devix`'s generation moved)."""
        pending = self._reindex_pending.setdefault(account_id, set())
        pending.update(device_ids)
        async with self._reindex_locks.setdefault(account_id, asyncio.Lock()):
            waiting = self._reindex_pending.get(account_id, set())
            if waiting.isdisjoint(device_ids):
                return  # a run that started after they were added has indexed them
            batch = self._reindex_pending.pop(account_id)
            try:
                await self._reindex_now(account_id, sorted(batch))
            except BaseException:
                self._reindex_pending.setdefault(account_id, set()).update(batch)  # their writers retry or hear it
                raise

    async def _reindex_now(self, account_id: str, device_ids: Sequence[str], *, refill: bool = False) -> None:
        """Make the account's indexes hold `device_ids` as their records stand now (none for a device gone or in
        another account). `devix` (device -> the index keys that hold it) has a generation (its field "") that every
        index write raises: the write is a script that first checks the generation is the one read with `devix`'s
        entries, before the records were read, and otherwise writes nothing and reads again. A record written after
        that read is reindexed by its writer, whose script then comes after this one or makes it read again.

        Issue 30 #5: two round trips on one Redis (the generation, entries and records in one pipeline; the script),
        three on a cluster (the records are read after the generation, on their own servers), where a WATCH, an
        HMGET, an MGET and the MULTI were four."""
        membership = self.keys.acc("devix", account_id)
        ids = list(dict.fromkeys(device_ids))
        records = [self.keys.dev("device", i) for i in ids]
        for _ in range(WATCH_ATTEMPTS):
            if self.cluster:  # the records on their servers, after the generation (a read before it could be stale)
                generation, *held = await self.redis.hmget(membership, ["", *ids])
                found = await self._mget(records)
            else:  # one connection: Redis runs them in order
                async with self.redis.pipeline(transaction=False) as pipe:
                    pipe.hmget(membership, ["", *ids])
                    pipe.mget(records)
                    (generation, *held), found = await pipe.execute()
            writes = Writes()
            writes.check(membership, "", "" if generation is None else text(generation))
            added: dict[str, list[str]] = {}  # index → its new members, one argument each (issue 30 #5)
            for device_id, was, data in zip(ids, held, found, strict=True):
                device = None if data is None else self._device_record(data)
                old = set(text(was).split(SEP)) if was else set()
                new = set(self._device_indexes(device)) if device and device.account_id == account_id else set()
                for index in sorted(old - new):
                    writes.zrem(index, device_id)
                for index in new if refill else new - old:
                    added.setdefault(index, []).append(device_id)
                if new:
                    writes.hset(membership, device_id, SEP.join(sorted(new)))
                elif was is not None:
                    writes.hdel(membership, device_id)
            for index in sorted(added):  # lexicographic indexes: every score is 0, so NX adds the same
                writes.zadd_new(index, added[index])
            writes.hincr(membership, "")  # the generation moves even when no entry changes
            if await self._write_checked(writes):
                return
        raise Unavailable(f"other clients kept changing the indexes of account {account_id}; retry later")

    async def _write_checked(self, writes: Writes) -> bool:
        """Run writes that begin with a `check` (one script call in the account's slot); False: the check failed and
        nothing was written."""
        (reply,) = await self._eval_each([writes.script_args()])
        return not isinstance(reply, int)

    def _name_and_seen(self, pipe: Any, devices: Sequence[Device]) -> None:
        """Queue the devices' name entries and last-seen entries (one ZADD per bucket, not one per device) on a
        pipeline, or on a `Writes` (one Redis: in the batch's script)."""
        k = self.keys
        seen: dict[str, dict[str, float]] = {}
        for device in devices:
            pipe.hset(k.ep("device_ep", device.endpoint_name), device.account_id, device.id)
            seen.setdefault(k.bucket("seen", device.id), {})[device.id] = device.last_seen_at
        for bucket, members in seen.items():
            if isinstance(pipe, Writes):
                pipe.zadd_many(bucket, members)
            else:
                pipe.zadd(bucket, members)

    async def _after_device_writes(self, written: Sequence[Device], replaced: Sequence[Any]) -> None:
        """What depends on the records the devices' writes replaced (their scripts' replies): a name no longer theirs
        forgotten, the indexes of devices that joined or left some made to match. The name and last-seen entries
        went in the scripts' pipeline (`_name_and_seen`): they need no reply."""
        stale: dict[str, list[str]] = {}
        forget = []
        for device, data in zip(written, replaced, strict=True):
            previous = None if data is None else self._device_record(data)
            if previous is None or self._device_indexes(previous) != self._device_indexes(device):
                stale.setdefault(device.account_id, []).append(device.id)
            if previous is not None and previous.account_id != device.account_id:
                stale.setdefault(previous.account_id, []).append(device.id)
            if previous is not None and (previous.account_id, previous.endpoint_name) != (
                device.account_id,
                device.endpoint_name,
            ):
                forget.append(previous)
        if forget:
            async with self.redis.pipeline(transaction=False) as pipe:
                for previous in forget:
                    self._forget_name(pipe, previous)
                await pipe.execute()
        for account_id, ids in stale.items():
            await self._reindex(account_id, ids)

    def _forget_name(self, pipe: Any, device: Device) -> None:
        pipe.eval(_FORGET_NAME, 1, self.keys.ep("device_ep", device.endpoint_name), device.account_id, device.id)

    async def put_device(self, device: Device) -> None:
        writes = Writes()
        self._write_record(writes, device, encode(device))
        ((replaced,),) = await self._eval_each([writes.script_args()], also=lambda p: self._name_and_seen(p, [device]))
        await self._after_device_writes([device], [replaced])

    async def get_device(self, device_id: str) -> Device | None:
        data = await self.redis.get(self.keys.dev("device", device_id))
        return None if data is None else self._device_record(data)

    async def get_devices(self, device_ids: Sequence[str]) -> list[Device]:
        return await self._devices([self.keys.dev("device", i) for i in device_ids])

    async def _devices(self, keys: Sequence[str]) -> list[Device]:
        """The records under these keys (those that exist), decoded once per distinct blob (codec.DecodedRecords)."""
        decoded = self._device_record
        return [decoded(data) for data in await self._mget(keys) if data is not None]

    async def put_registered_devices(
        self,
        devices: Sequence[Device],
        unchanged: Sequence[str] = (),
        reported: Sequence[tuple[str, str, ReportedValue]] = (),
    ) -> None:
        """What `put_device`, `ensure_resources`, `remove_device_subscriptions` and `clear_subscribed` do for one
        device, for a batch in one round trip per server whatever its size (a registration storm writes thousands
        a second), and a transaction for an account whose devices changed indexes: one script step per device writes
        its slot (for `unchanged` devices only the subscriptions are dropped), the names and last-seen entries beside
        them, then the indexes. A step is a call of its own on a cluster; on one Redis a group's steps are one call."""
        if not devices and not unchanged:
            for device_id, path, value in reported:
                await self.set_reported(device_id, path, value)
            return
        # a value goes in its device's script, unless the write-behind holds an older value of it: then it goes
        # after that one, as set_reported
        free, later = self._reported.split_held(reported)
        valued: dict[str, dict[str, bytes]] = {}
        for device_id, path, value in free:
            valued.setdefault(device_id, {})[path] = encode(value)
        k = self.keys
        groups = WriteGroups(merged=not self.cluster)
        if not self.cluster:  # one server: the names and last-seen entries go in the first script, before the records
            self._name_and_seen(groups.next(), devices)
        for device in devices:
            writes = groups.next()
            blob = encode(device)
            self._device_record.keep(blob, device)  # the index step reads it back
            self._write_record(writes, device, blob)
            values = valued.pop(device.id, {})
            # its resources' paths and its values' (the same, as a rule) in one ZADD
            paths = dict.fromkeys(resource.path for resource in device.resources)
            paths.update(dict.fromkeys(values))
            writes.zadd_new(k.dev("snap_paths", device.id), paths)
            self._drop_subscriptions(writes, device.id)
            writes.hset_many(k.dev("snap_rep", device.id), values)
        for device_id in unchanged:
            writes = groups.next()
            self._drop_subscriptions(writes, device_id)
            self._write_values(writes, device_id, valued.pop(device_id, {}))
        for device_id, values in valued.items():
            self._write_values(groups.next(), device_id, values)
        # a cluster: the names and last-seen entries in their own slots, beside the scripts
        also = (lambda pipe: self._name_and_seen(pipe, devices)) if self.cluster else None
        replies = await self._eval_each(groups.calls(), also=also)
        replaced = [record for reply in replies for record in reply]  # the SWAPs' replies, the devices' in order
        await self._after_device_writes(devices, replaced[: len(devices)])
        for device_id, path, value in later:
            await self.set_reported(device_id, path, value)

    def _write_values(self, writes: Writes, device_id: str, values: dict[str, bytes]) -> None:
        """Queue the values with their paths (the path before or with its value: one script, one step)."""
        writes.zadd_new(self.keys.dev("snap_paths", device_id), values)
        writes.hset_many(self.keys.dev("snap_rep", device_id), values)

    def _drop_subscriptions(self, writes: Writes, device_id: str) -> None:
        """Queue the removal of the device's subscriptions and marks (its slot)."""
        writes.delete(self.keys.dev("subscribers", device_id), self.keys.dev("snap_sub", device_id))

    async def find_device(self, account_id: str, endpoint_name: str) -> Device | None:
        device_id = await self.redis.hget(self.keys.ep("device_ep", endpoint_name), account_id)
        return None if device_id is None else await self.get_device(text(device_id))

    # Directory queries (domain/storage/device_query.py). Candidates come from the narrowest index an `eq` condition
    # names (a state, endpoint type or host gateway value; an id or endpoint name is one device), else the
    # account's index; they are walked in id order a bounded page at a time and the remaining conditions are
    # checked on the records. A page costs one ZRANGEBYLEX and one MGET; a list stops as soon as it has
    # `limit` devices, so paging a selective filter over a large account walks more pages (time, not memory).
    # An exact total is one ZCARD when a single indexed `eq` is the whole query, else one walk of the index.
    async def delete_device(self, device_id: str) -> None:
        # a flush in flight holding the device's values is waited for (its HSET after the DEL below would make the
        # snapshot keys again: orphans no delete removes), and values reported since are dropped with the device
        await self._reported.settle(device_id)
        self._reported.discard(device_id)
        k = self.keys
        # the device's slot in one script (what it read comes back), then what names it from other slots
        data, queued = await self._delete(
            keys=[k.dev(part, device_id) for part in _DEVICE_PARTS],
        )
        device = None if data is None else self._device_record(data)
        async with self.redis.pipeline(transaction=False) as pipe:
            for member in (text(m) for m in queued):
                key_id, _, async_id = member.partition(SEP)
                pipe.zrem(k.bucket("reqs", device_id), member)
                pipe.delete(k.key("req", key_id, async_id))
            pipe.zrem(k.bucket("seen", device_id), device_id)
            if device is not None:
                self._forget_name(pipe, device)
            await pipe.execute()
        if device is not None:
            await self._reindex(device.account_id, [device_id])

    async def devices_last_seen_before(self, cutoff: float, limit: int = 1000) -> list[str]:
        async with self.redis.pipeline(transaction=False) as reads:  # every bucket at once; the earliest `limit`
            for bucket in self.keys.buckets("seen"):
                reads.zrangebyscore(bucket, "-inf", f"({cutoff}", start=0, num=limit, withscores=True)
            replies = await reads.execute()
        return [text(i) for _, i in heapq.nsmallest(limit, ((s, i) for reply in replies for i, s in reply))]


# the device's own keys; the first is the record, the second its request queue (delete_device.lua)
_DEVICE_PARTS = ("device", "reqs", "device_dir", "subscribers", "snap_paths", "snap_rep", "snap_des", "snap_sub")

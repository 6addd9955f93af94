"""Device records, their lexicographic indexes and directory queries on Redis."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Sequence
from typing import Any

from redis.asyncio.client import Pipeline

from devicehub.domain.model import Device, ReportedValue
from devicehub.domain.storage.device_query import Condition, DeviceQuery
from devicehub.store.redis.codec import SEP, decode, encode, text
from devicehub.store.redis.snapshot import RedisSnapshot
from devicehub.store.redis.writes import Writes

_VALUE_INDEXED = ("endpoint_type", "host_gateway")  # besides `state`, which has its own index since the start

_DEVICE_INDEX_VERSION = "2"

_MIN_PAGE = 100

_MAX_PAGE = 1000


class RedisDevices(RedisSnapshot):
    """`DeviceStore` on Redis."""

    def _device_indexes(self, device: Device) -> list[str]:
        """The lexicographic id indexes a device belongs to: its account's, and one per filterable value."""
        return [
            self._k("devices", device.account_id),
            self._k("devices", device.account_id, device.state),
            *(self._k("devices_by", device.account_id, f, getattr(device, f)) for f in _VALUE_INDEXED),
        ]

    def _value_index(self, account_id: str, condition: Condition) -> str | None:
        if condition.op != "eq":
            return None
        if condition.field == "state":
            return self._k("devices", account_id, str(condition.values[0]))
        if condition.field in _VALUE_INDEXED:
            return self._k("devices_by", account_id, condition.field, str(condition.values[0]))
        return None

    async def _index_existing_devices(self) -> None:
        """Fill the value indexes for devices written before they existed (once per database). The mark is set
        once every device is indexed: a node stopped midway (or given up on by `_transact`) leaves the fill to the
        next node to open, instead of marking it done; two nodes filling at once add the same entries."""
        mark = self._k("device_index_version")
        if await self.redis.exists(mark):
            return
        keys = [text(k) async for k in self.redis.scan_iter(match=self._k("device", "*"), count=1000)]
        for start in range(0, len(keys), 500):
            await self._index_devices(keys[start : start + 500])
        await self.redis.set(mark, _DEVICE_INDEX_VERSION)

    async def _index_devices(self, record_keys: list[str]) -> None:
        """Add the devices of `record_keys` to their indexes as the records stand when the entries are added: a
        record another node rewrote or deleted after the read (its own write indexed it anew) is read again, so no
        entry of a value the device no longer has is added back."""

        async def records(tx: Pipeline) -> list[Device]:
            return [decode(Device, data) for data in await tx.mget(record_keys) if data is not None]

        def index(tx: Pipeline, devices: list[Device]) -> None:
            for device in devices:
                for device_index in self._device_indexes(device):
                    tx.zadd(device_index, {device.id: 0})

        await self._transact(record_keys, records, index)

    async def put_device(self, device: Device) -> None:
        key = self._k("device", device.id)

        async def previous(tx: Pipeline) -> Device | None:
            data = await tx.get(key)
            return None if data is None else decode(Device, data)

        def write(tx: Pipeline, replaced: Device | None) -> None:
            writes = Writes()
            self._write_device(writes, device, replaced)
            writes.queue_on(tx)

        await self._transact([key], previous, write)

    def _write_device(self, writes: Writes, device: Device, previous: Device | None) -> None:
        """Queue the record, its endpoint-name key and its indexes, replacing `previous`'s."""
        if previous is not None:
            writes.delete(self._k("device_ep", previous.account_id, previous.endpoint_name))
            for index in self._device_indexes(previous):
                writes.zrem(index, device.id)
        writes.set(self._k("device", device.id), encode(device))
        writes.set(self._k("device_ep", device.account_id, device.endpoint_name), device.id)
        for index in self._device_indexes(device):
            writes.zadd(index, device.id)
        writes.zadd(self._k("seen"), device.id, device.last_seen_at)

    async def get_device(self, device_id: str) -> Device | None:
        return await self._blob(Device, self._k("device", device_id))

    async def get_devices(self, device_ids: Sequence[str]) -> list[Device]:
        return await self._blobs(Device, [self._k("device", i) for i in device_ids])

    async def put_registered_devices(
        self,
        devices: Sequence[Device],
        unchanged: Sequence[str] = (),
        reported: Sequence[tuple[str, str, ReportedValue]] = (),
    ) -> None:
        """What `put_device`, `ensure_resources`, `remove_device_subscriptions` and `clear_subscribed` do for one
        device, for a batch in three round trips whatever its size (a registration storm writes thousands a second):
        one WATCHes the records and subscriber sets, one script reads them, one MULTI writes everything (for
        `unchanged` devices only the subscriptions are dropped); again if another node changed one meanwhile."""
        if not devices and not unchanged:
            for device_id, path, value in reported:
                await self.set_reported(device_id, path, value)
            return
        record_keys = [self._k("device", d.id) for d in devices]
        subscribed_ids = [*(d.id for d in devices), *unchanged]
        subscriber_keys = [self._k("subscribers", i) for i in subscribed_ids]
        # a value goes in this MULTI with its entry, unless the write-behind holds an older value of it: then it goes
        # after that one, as set_reported
        free, later = self._reported.split_held(reported)
        valued: dict[str, dict[str, bytes]] = {}
        for device_id, path, value in free:
            valued.setdefault(device_id, {})[path] = encode(value)

        async def replaced(tx: Pipeline) -> list[Any]:
            # the records, then the subscriber sets: one round trip, on the connection that watches them
            return list(await self._run_now(tx, self._read_replaced, [*record_keys, *subscriber_keys], [len(devices)]))

        def write(tx: Pipeline, found: list[Any]) -> None:
            writes = Writes()
            for device, previous_blob in zip(devices, found[: len(devices)], strict=True):
                self._write_device(writes, device, None if previous_blob is None else decode(Device, previous_blob))
                paths = self._k("snap_paths", device.id)
                for resource in device.resources:
                    writes.zadd(paths, resource.path, only_new=True)
            for device_id, members in zip(subscribed_ids, found[len(devices) :], strict=True):
                self._drop_subscriptions(writes, device_id, map(text, members))
            for device_id, values in valued.items():
                paths, reported = self._k("snap_paths", device_id), self._k("snap_rep", device_id)
                for path, value in values.items():
                    writes.zadd(paths, path)
                    writes.hset(reported, path, value)
            writes.queue_on(tx)

        await self._transact([*record_keys, *subscriber_keys], replaced, write)
        for device_id, path, value in later:
            await self.set_reported(device_id, path, value)

    def _drop_subscriptions(self, writes: Writes, device_id: str, members: Iterable[str]) -> None:
        """Queue the removal of the device's subscriptions (`members` of its subscriber set) and marks."""
        for member in members:
            writes.srem(self._k("subs", member.partition(SEP)[0], device_id), member.partition(SEP)[2])
            writes.srem(self._k("subscribers", device_id), member)
        writes.delete(self._k("snap_sub", device_id))

    async def find_device(self, account_id: str, endpoint_name: str) -> Device | None:
        device_id = await self.redis.get(self._k("device_ep", account_id, endpoint_name))
        return None if device_id is None else await self.get_device(text(device_id))

    # Directory queries (domain/storage/device_query.py). Candidates come from the narrowest index an `eq` condition
    # names (a state, endpoint type or host gateway value; an id or endpoint name is one device), else the
    # account's index; they are walked in id order a bounded page at a time and the remaining conditions are
    # checked on the records. A page costs one ZRANGEBYLEX and one MGET; a list stops as soon as it has
    # `limit` devices, so paging a selective filter over a large account walks more pages (time, not memory).
    # An exact total is one ZCARD when a single indexed `eq` is the whole query, else one walk of the index.
    async def _direct_ids(self, account_id: str, query: DeviceQuery) -> list[str] | None:
        for condition in query.conditions:
            if condition.field == "id" and condition.op in ("eq", "in"):
                return sorted({str(v) for v in condition.values})
            if condition.field == "endpoint_name" and condition.op == "eq":
                found = await self.redis.get(self._k("device_ep", account_id, str(condition.values[0])))
                return [] if found is None else [text(found)]
        return None

    async def _narrowest_index(self, account_id: str, query: DeviceQuery) -> str:
        indexes = [i for i in (self._value_index(account_id, c) for c in query.conditions) if i is not None]
        if not indexes:
            return self._k("devices", account_id)
        async with self.redis.pipeline(transaction=False) as tx:
            for index in indexes:
                tx.zcard(index)
            sizes = await tx.execute()
        return min(zip(sizes, indexes, strict=True))[1]

    async def _walk(self, index: str, after: str | None, descending: bool, page: int) -> AsyncIterator[list[Device]]:
        cursor = after
        while True:
            if descending:
                high = f"({cursor}" if cursor is not None else "+"
                raw = await self.redis.zrevrangebylex(index, high, "-", start=0, num=page)
            else:
                low = f"({cursor}" if cursor is not None else "-"
                raw = await self.redis.zrangebylex(index, low, "+", start=0, num=page)
            ids = [text(i) for i in raw]
            if ids:
                yield await self._blobs(Device, [self._k("device", i) for i in ids])
            if len(ids) < page:
                return
            cursor = ids[-1]

    async def list_devices(
        self,
        account_id: str,
        *,
        state: str | None = None,
        query: DeviceQuery | None = None,
        after: str | None = None,
        limit: int = 50,
        descending: bool = False,
    ) -> list[Device]:
        full = DeviceQuery.of(query, state)
        direct = await self._direct_ids(account_id, full)
        if direct is not None:
            ids = sorted(direct, reverse=descending)
            if after is not None:
                ids = [i for i in ids if (i < after if descending else i > after)]
            devices = await self._blobs(Device, [self._k("device", i) for i in ids])
            return [d for d in devices if d.account_id == account_id and full.matches(d)][:limit]
        index = await self._narrowest_index(account_id, full)
        found: list[Device] = []
        async for devices in self._walk(index, after, descending, min(max(limit, _MIN_PAGE), _MAX_PAGE)):
            found.extend(d for d in devices if full.matches(d))
            if len(found) >= limit:
                break
        return found[:limit]

    async def count_devices(
        self, account_id: str, *, state: str | None = None, query: DeviceQuery | None = None
    ) -> int:
        full = DeviceQuery.of(query, state)
        if await self._direct_ids(account_id, full) is not None:
            return len(await self.list_devices(account_id, query=full, limit=1 << 31))  # ids named by the query
        index = await self._narrowest_index(account_id, full)
        if not full.conditions or (len(full.conditions) == 1 and self._value_index(account_id, full.conditions[0])):
            return int(await self.redis.zcard(index))
        count = 0
        async for devices in self._walk(index, None, False, _MAX_PAGE):
            count += sum(1 for d in devices if full.matches(d))
        return count

    async def delete_device(self, device_id: str) -> None:
        await self._reported.flush()
        record_key, subscriber_key, queue_key = (self._k(part, device_id) for part in ("device", "subscribers", "reqs"))

        async def attached(tx: Pipeline) -> tuple[Device | None, list[str], list[str]]:
            # what names the device from elsewhere (indexes, name, subscriptions, queued requests): read where watched,
            # so that what another node adds meanwhile makes the delete read again, not stay behind
            data = await tx.get(record_key)
            members = await tx.smembers(subscriber_key)
            queued = await tx.zrange(queue_key, 0, -1)
            device = None if data is None else decode(Device, data)
            return device, [text(m) for m in members], [text(m) for m in queued]

        def delete(tx: Pipeline, found: tuple[Device | None, list[str], list[str]]) -> None:
            self._delete_device(tx, device_id, *found)

        await self._transact([record_key, subscriber_key, queue_key], attached, delete)

    def _delete_device(
        self, tx: Pipeline, device_id: str, device: Device | None, subscribers: list[str], requests: list[str]
    ) -> None:
        """Queue on `tx` the removal of the device, its snapshot and everything that names it (as read)."""
        if device is not None:
            tx.delete(self._k("device_ep", device.account_id, device.endpoint_name))
            for index in self._device_indexes(device):
                tx.zrem(index, device_id)
        tx.delete(self._k("device", device_id), self._k("subscribers", device_id), self._k("reqs", device_id))
        tx.zrem(self._k("seen"), device_id)
        for member in subscribers:
            tx.delete(self._k("subs", member.partition(SEP)[0], device_id))
        for member in requests:
            key_id, _, async_id = member.partition(SEP)
            tx.delete(self._k("req", key_id, async_id))
            tx.zrem(self._k("reqs"), member)
        tx.delete(*(self._k(part, device_id) for part in ("snap_paths", "snap_rep", "snap_des", "snap_sub")))

    async def devices_last_seen_before(self, cutoff: float, limit: int = 1000) -> list[str]:
        ids = await self.redis.zrangebyscore(self._k("seen"), "-inf", f"({cutoff}", start=0, num=limit)
        return [text(i) for i in ids]

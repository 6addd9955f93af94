"""Device lifecycle history on Redis (issue 32 #3), in the hash-tagged layout (keys.py):
- `dev_log:{dev:<id>}`: the device's events, a sorted set of records scored by their time in milliseconds, cut to
  its newest MAX_PER_DEVICE by the same pipeline that adds one;
- `dev_log:{acc:<id>}`: the account's index, a sorted set of event ids, all of score 0 so that they sort by id (time,
  then device) and a page is a ZRANGEBYLEX;
- `dev_log_accounts:{dev_log_accounts:NN}`: the accounts that have an index (bucketed), which the sweep walks.
A registration batch adds a device's records and cuts its set in the device's own script (put_registration.lua), and
the index entries (two commands per account) in its last pipeline (registrations.py); a removal in its pipeline: no
round trip of its own. An index entry whose record was cut is skipped by readers and removed as they meet it; the sweep
removes what is older than the retention from both.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from devicehub.domain.device_log import MAX_PER_DEVICE, DeviceEventRecord, device_of, time_bound
from devicehub.store.record_upgrades import decode
from devicehub.store.redis.codec import encode, text
from devicehub.store.redis.connection import RedisConnection
from devicehub.store.redis.writes import Writes

_SWEEP_BATCH = 1000


def _bounds(after: str | None, since: float | None, until: float | None, descending: bool) -> tuple[str, str]:
    """ZRANGEBYLEX bounds of ids: `since` (a time prefix, inclusive), `until` (the next millisecond's prefix,
    exclusive) and the cursor (exclusive, on the side the page moves to); a full id beats a prefix it starts
    with, as text."""
    low = "-" if since is None else "[" + time_bound(since)
    high = "+" if until is None else "(" + time_bound(until + 0.001)
    if after is not None and not descending and (low == "-" or after >= low[1:]):
        low = "(" + after
    if after is not None and descending and (high == "+" or after < high[1:]):
        high = "(" + after
    return low, high


def index_events(keys: Any, pipe: Any, events: Sequence[DeviceEventRecord]) -> None:
    """Queue the events' account index entries on the caller's pipeline, or on a `Writes`, two commands per account
    whatever their number (keys: the store's `Keys`)."""
    by_account: dict[str, dict[str, float]] = {}
    for event in events:
        by_account.setdefault(event.account_id, {})[event.id] = 0
    for account_id, ids in by_account.items():
        if isinstance(pipe, Writes):  # one Redis: in a script call of the batch (registrations.py)
            pipe.zadd_many(keys.acc("dev_log", account_id), ids)
        else:
            pipe.zadd(keys.acc("dev_log", account_id), ids)
        pipe.sadd(keys.bucket("dev_log_accounts", account_id), account_id)  # the sweep's to-do list


def add_events(keys: Any, pipe: Any, events: Sequence[DeviceEventRecord]) -> None:
    """Queue the events' writes on the caller's pipeline: each device's records and its cut, then the index entries.
    (The registration batch writes the records in its per-device script instead, put_registration.lua.)"""
    by_device: dict[str, dict[bytes, int]] = {}
    for event in events:
        by_device.setdefault(event.device_id, {})[encode(event)] = event.ms
    for device_id, records in by_device.items():
        device_key = keys.dev("dev_log", device_id)
        pipe.zadd(device_key, records)
        pipe.zremrangebyrank(device_key, 0, -(MAX_PER_DEVICE + 1))
    index_events(keys, pipe, events)


class RedisDeviceLog(RedisConnection):
    """`DeviceLogStore` on Redis."""

    async def put_device_events(self, events: Sequence[DeviceEventRecord]) -> None:
        if events:
            async with self.redis.pipeline(transaction=False) as pipe:
                add_events(self.keys, pipe, events)
                await pipe.execute()

    async def _records(self, ids: Sequence[str]) -> dict[str, DeviceEventRecord]:
        """The records of these event ids that are still kept (one round trip)."""
        async with self.redis.pipeline(transaction=False) as reads:
            for event_id in ids:
                ms = int(event_id[:12], 16)
                reads.zrangebyscore(self.keys.dev("dev_log", event_id[12:44]), ms, ms)
            replies = await reads.execute()
        found: dict[str, DeviceEventRecord] = {}
        for reply in replies:
            for blob in reply:
                record = decode(DeviceEventRecord, blob)
                found[record.id] = record
        return found

    async def list_device_events(
        self,
        account_id: str,
        *,
        device_ids: Sequence[str] | None = None,
        after: str | None = None,
        since: float | None = None,
        until: float | None = None,
        limit: int = 50,
        descending: bool = False,
    ) -> list[DeviceEventRecord]:
        low, high = _bounds(after, since, until, descending)
        if device_ids is not None:
            return await self._of_devices(account_id, device_ids, low, high, limit, descending)
        index = self.keys.acc("dev_log", account_id)
        page: list[DeviceEventRecord] = []
        while len(page) < limit:
            want = limit - len(page)
            if descending:
                ids = [text(i) for i in await self.redis.zrevrangebylex(index, high, low, start=0, num=want)]
            else:
                ids = [text(i) for i in await self.redis.zrangebylex(index, low, high, start=0, num=want)]
            if not ids:
                break
            records = await self._records(ids)
            gone = [i for i in ids if i not in records]
            if gone:  # cut by the device's cap: no longer an event
                await self.redis.zrem(index, *gone)
            page += [records[i] for i in ids if i in records and records[i].account_id == account_id]
            if descending:
                high = "(" + ids[-1]
            else:
                low = "(" + ids[-1]
            if len(ids) < want:
                break
        return page

    async def _of_devices(
        self, account_id: str, device_ids: Sequence[str], low: str, high: str, limit: int, descending: bool
    ) -> list[DeviceEventRecord]:
        """A few devices' events: each device's set is small (MAX_PER_DEVICE), read whole and merged here."""
        async with self.redis.pipeline(transaction=False) as reads:
            for device_id in device_ids:
                reads.zrange(self.keys.dev("dev_log", device_id), 0, -1)
            replies = await reads.execute()
        records = [decode(DeviceEventRecord, blob) for reply in replies for blob in reply]
        lo, hi = low[1:] if low != "-" else "", high[1:] if high != "+" else None

        def inside(record: DeviceEventRecord) -> bool:
            above = record.id > lo if low.startswith("(") else record.id >= lo
            below = hi is None or (record.id < hi if high.startswith("(") else record.id <= hi)
            return record.account_id == account_id and above and below

        chosen = sorted((r for r in records if inside(r)), key=lambda r: r.id, reverse=descending)
        return chosen[:limit]

    async def get_device_event(self, account_id: str, event_id: str) -> DeviceEventRecord | None:
        if device_of(event_id) is None:
            return None
        record = (await self._records([event_id])).get(event_id)
        return record if record is not None and record.account_id == account_id else None

    async def sweep_device_events(self, before: float) -> int:
        """Per account: the index entries older than `before` name the devices whose sets to cut, then both go."""
        bound = "(" + time_bound(before)
        removed = 0
        for account in sorted(await self._members(self.keys.buckets("dev_log_accounts"))):
            index = self.keys.acc("dev_log", account)
            while ids := [text(i) for i in await self.redis.zrangebylex(index, "-", bound, start=0, num=_SWEEP_BATCH)]:
                devices = dict.fromkeys(event_id[12:44] for event_id in ids)
                async with self.redis.pipeline(transaction=False) as pipe:
                    for device_id in devices:
                        pipe.zremrangebyscore(self.keys.dev("dev_log", device_id), "-inf", f"({int(before * 1000)}")
                    pipe.zrem(index, *ids)
                    await pipe.execute()
                removed += len(ids)
        return removed

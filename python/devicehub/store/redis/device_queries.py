"""Directory queries on Redis: a page of an account's devices by their lexicographic indexes, filtered and counted.

A query walks the narrowest index its conditions name (the account's, a state's, or a filterable value's), reads the
listed devices in pages of `_MIN_PAGE` to `_MAX_PAGE`, and keeps those the whole query matches. A page (and a
filtered count's walk) reads each device's directory summary (`device_dir`, written beside its record by
devices.py), not the whole record; a record a previous release wrote has none and is read whole in its place
(`_read_page`).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any, cast

from devicehub.domain.model import Device
from devicehub.domain.storage.device_query import Condition, DeviceQuery
from devicehub.store.redis.codec import text
from devicehub.store.redis.snapshot import RedisSnapshot

VALUE_INDEXED = ("endpoint_type", "host_gateway")  # besides `state`, which has its own index since the start

_MIN_PAGE = 100

# the API's largest page (1 000) and the one more row it fetches to know whether more follow (api/body.py PageQuery):
# `limit=1000` is one ZRANGEBYLEX and one MGET, not a second page of 1 000 records read for that one row (issue 30 #5)
_MAX_PAGE = 1001


class RedisDeviceQueries(RedisSnapshot):
    """The directory's reads of `DeviceStore` on Redis (devices.py writes what they read)."""

    def _value_index(self, account_id: str, condition: Condition) -> str | None:
        if condition.op != "eq":
            return None
        if condition.field == "state":
            return self.keys.acc("devices", account_id, str(condition.values[0]))
        if condition.field in VALUE_INDEXED:
            return self.keys.acc("devices_by", account_id, condition.field, str(condition.values[0]))
        return None

    async def _direct_ids(self, account_id: str, query: DeviceQuery) -> list[str] | None:
        for condition in query.conditions:
            if condition.field == "id" and condition.op in ("eq", "in"):
                return sorted({str(v) for v in condition.values})
            if condition.field == "endpoint_name" and condition.op == "eq":
                found = await self.redis.hget(self.keys.ep("device_ep", str(condition.values[0])), account_id)
                return [] if found is None else [text(found)]
        return None

    async def _narrowest_index(self, account_id: str, query: DeviceQuery) -> str:
        indexes = [i for i in (self._value_index(account_id, c) for c in query.conditions) if i is not None]
        if not indexes:
            return self.keys.acc("devices", account_id)
        async with self.redis.pipeline(transaction=False) as tx:  # one account: one slot
            for index in indexes:
                tx.zcard(index)
            sizes = await tx.execute()
        return min(zip(sizes, indexes, strict=True))[1]

    async def _walk(
        self,
        index: str,
        after: str | None,
        descending: bool,
        size: Callable[[], int],
        contacts_of: str | None = None,
        *,
        summaries: bool = False,
    ) -> AsyncIterator[tuple[list[Device], dict[str, float]]]:
        """The index's devices from `after` on, a page at a time (`_read_page`'s devices and contacts); `size()` is
        the next page's length."""
        cursor = after
        while True:
            page = size()
            if descending:
                high = f"({cursor}" if cursor is not None else "+"
                raw = await self.redis.zrevrangebylex(index, high, "-", start=0, num=page)
            else:
                low = f"({cursor}" if cursor is not None else "-"
                raw = await self.redis.zrangebylex(index, low, "+", start=0, num=page)
            # bytes (decode_responses=False): decoded here, not through text() each (0.35 ms a page against 0.04)
            ids = [i.decode() for i in cast(list[bytes], raw)]
            if ids:
                yield await self._read_page(ids, contacts_of, summaries=summaries)
            if len(ids) < page:
                return
            cursor = ids[-1]

    async def _read_page(
        self, ids: list[str], contacts_of: str | None, *, summaries: bool = False
    ) -> tuple[list[Device], dict[str, float]]:
        """The records of these ids (those that exist), or with `summaries` their directory summaries (records
        without resources); with `contacts_of` (their account) also the ids' stored last contacts, read in the same
        round trip: one pipeline (a cluster: the records' servers and the account's at once), not a second round
        trip after the page (issue 30 #5)."""
        keys = self.keys.devs("device_dir" if summaries else "device", ids)
        stamps: list[Any]
        if contacts_of is None:
            records, stamps = await self._mget(keys), [None] * len(ids)
        elif self.cluster:
            contacts = self.keys.acc("contacts", contacts_of)
            records, stamps = await asyncio.gather(self._mget(keys), self.redis.hmget(contacts, ids))
        else:
            async with self.redis.pipeline(transaction=False) as pipe:
                pipe.mget(keys)
                pipe.hmget(self.keys.acc("contacts", contacts_of), ids)
                records, stamps = await pipe.execute()
        decoded = self._device_summary if summaries else self._device_record
        kept = decoded.kept
        listed: list[Any] = []  # Devices, and the ids of those without a summary (a previous release's record, or gone)
        missing: list[str] = []
        found: dict[str, float] = {}
        for device_id, data, stamp in zip(ids, records, stamps, strict=True):
            if data is not None:
                listed.append(kept(data) or decoded(data))
            elif summaries:
                listed.append(device_id)
                missing.append(device_id)
            else:  # gone since the index was read: neither listed nor its contact
                continue
            if stamp is not None:
                found[device_id] = float(stamp)  # contacts.py: a time as its text
        if not missing:
            return listed, found
        devices = await self._with_records(listed, missing)
        return devices, {d.id: found[d.id] for d in devices if d.id in found}

    async def _with_records(self, listed: list[Any], missing: list[str]) -> list[Device]:
        """`listed` with each of the `missing` ids (in it) replaced by its record read whole, or left out when there
        is none (gone since the index was read): a record written before summaries were (issue 30 #5's upgrade
        path), at one more round trip for its page."""
        whole = dict(zip(missing, await self._mget(self.keys.devs("device", missing)), strict=True))
        devices = []
        for entry in listed:
            if isinstance(entry, str):
                data = whole[entry]
                if data is None:
                    continue
                entry = self._device_record(data)
            devices.append(entry)
        return devices

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
        devices, _ = await self._list(account_id, DeviceQuery.of(query, state), after, limit, descending, None)
        return devices

    async def list_devices_and_contacts(
        self,
        account_id: str,
        *,
        query: DeviceQuery | None = None,
        after: str | None = None,
        limit: int = 50,
        descending: bool = False,
    ) -> tuple[list[Device], dict[str, float]]:
        return await self._list(
            account_id, DeviceQuery.of(query, None), after, limit, descending, account_id, summaries=True
        )

    async def _list(
        self,
        account_id: str,
        full: DeviceQuery,
        after: str | None,
        limit: int,
        descending: bool,
        contacts_of: str | None,
        *,
        summaries: bool = False,
    ) -> tuple[list[Device], dict[str, float]]:
        direct = await self._direct_ids(account_id, full)
        if direct is not None:
            ids = sorted(direct, reverse=descending)
            if after is not None:
                ids = [i for i in ids if (i < after if descending else i > after)]
            devices, stamps = await self._read_page(ids, contacts_of, summaries=summaries)
            devices = [d for d in devices if d.account_id == account_id and full.matches(d)][:limit]
            return devices, {d.id: stamps[d.id] for d in devices if d.id in stamps}
        index = await self._narrowest_index(account_id, full)
        found: list[Device] = []
        stamps = {}

        def size() -> int:  # what is still wanted, read in pages no smaller than _MIN_PAGE (a filter may skip some)
            return min(max(limit - len(found), _MIN_PAGE), _MAX_PAGE)

        async for devices, page_stamps in self._walk(index, after, descending, size, contacts_of, summaries=summaries):
            if full.conditions:  # no condition: the index is the account's, every record of it is listed
                devices = [d for d in devices if full.matches(d)]
                page_stamps = {d.id: page_stamps[d.id] for d in devices if d.id in page_stamps}
            found.extend(devices)
            stamps.update(page_stamps)
            if len(found) >= limit:
                break
        if len(found) > limit:  # a page read past what is listed: its last devices' contacts go with them
            found = found[:limit]
            stamps = {d.id: stamps[d.id] for d in found if d.id in stamps}
        return found, stamps

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
        async for devices, _ in self._walk(index, None, False, lambda: _MAX_PAGE, summaries=True):
            count += sum(1 for d in devices if full.matches(d))
        return count

"""Directory queries over devices on both stores: filters, pages and exact counts, also over older data."""

from __future__ import annotations

import sqlite3
from typing import Any

import msgspec

from devicehub.domain.model import (
    ApiKey,
    Device,
    ResourceLink,
)
from devicehub.domain.storage.device_query import Condition, DeviceQuery
from devicehub.domain.storage.store import Store
from devicehub.store import is_shared
from devicehub.store.sqlite.store import SqliteStore
from support.stores import A, B, StoreFactory, device, reopen, run


def directory_device(n: int, *, account: str = A) -> Device:
    """d00…d11: types alternate sensor/light/gateway, every third is behind gateway g1, odd ones deregistered."""
    return Device(
        id=f"d{n:02d}",
        account_id=account,
        endpoint_name=f"ep{n:02d}",
        endpoint_type=("sensor", "light", "gateway")[n % 3],
        state="registered" if n % 2 == 0 else "deregistered",
        host_gateway="g1" if n % 3 == 1 else "",
        created_at=1000.0 + n,
        updated_at=2000.0 - n,
        last_seen_at=100.0,
    )


def where(*conditions: tuple[str, str, tuple[str, ...] | tuple[float, ...]]) -> DeviceQuery:
    return DeviceQuery(tuple(Condition(f, op, v) for f, op, v in conditions))


def test_device_filters_select_page_and_count_exactly(make_store: StoreFactory) -> None:
    async def ids(store: Store, query: DeviceQuery, **options: Any) -> list[str]:
        return [d.id for d in await store.list_devices(A, query=query, **options)]

    async def scenario(store: Store) -> None:
        for n in range(12):
            await store.put_device(directory_device(n))
        await store.put_device(directory_device(99, account=B))  # another account's sensor stays out
        sensors = where(("endpoint_type", "eq", ("sensor",)))
        assert await ids(store, sensors) == ["d00", "d03", "d06", "d09"]
        assert await store.count_devices(A, query=sensors) == 4
        registered_sensors = where(("endpoint_type", "eq", ("sensor",)), ("state", "eq", ("registered",)))
        assert await ids(store, registered_sensors) == ["d00", "d06"]
        assert await store.count_devices(A, query=registered_sensors) == 2
        not_gateways = where(("endpoint_type", "nin", ("gateway",)), ("host_gateway", "neq", ("g1",)))
        assert await ids(store, not_gateways) == ["d00", "d03", "d06", "d09"]
        lights_or_gateways = where(("endpoint_type", "in", ("light", "gateway")))
        assert await store.count_devices(A, query=lights_or_gateways) == 8
        window = where(("created_at", "gte", (1003.0,)), ("created_at", "lte", (1005.0,)))
        assert await ids(store, window) == ["d03", "d04", "d05"]
        assert await ids(store, where(("updated_at", "lte", (1990.0,)))) == ["d10", "d11"]
        by_name = where(("endpoint_name", "eq", ("ep07",)))
        assert await ids(store, by_name) == ["d07"] and await store.count_devices(A, query=by_name) == 1
        by_ids = where(("id", "in", ("d01", "d02", "d99", "zz")), ("state", "eq", ("registered",)))
        assert await ids(store, by_ids) == ["d02"] and await store.count_devices(A, query=by_ids) == 1
        assert await ids(store, where(("id", "in", ()))) == []
        assert await store.count_devices(A, query=where(("endpoint_type", "eq", ("nothing",)))) == 0
        # pages follow the cursor in both orders and add up to the count
        pages: list[str] = []
        after = None
        while True:
            page = await ids(store, lights_or_gateways, after=after, limit=3)
            pages += page
            if len(page) < 3:
                break
            after = page[-1]
        assert pages == ["d01", "d02", "d04", "d05", "d07", "d08", "d10", "d11"]
        assert await ids(store, lights_or_gateways, descending=True, limit=3) == ["d11", "d10", "d08"]
        assert await ids(store, lights_or_gateways, descending=True, after="d08", limit=3) == ["d07", "d05", "d04"]
        assert await ids(store, by_ids, descending=True, after="d03") == ["d02"]
        # an update moves the device between indexes; a delete takes it out of all of them
        await store.put_device(msgspec.structs.replace(directory_device(0), endpoint_type="light"))
        assert await ids(store, sensors) == ["d03", "d06", "d09"] and await store.count_devices(A, query=sensors) == 3
        await store.delete_device("d03")
        assert await ids(store, sensors) == ["d06", "d09"] and await store.count_devices(A, query=sensors) == 2
        assert await store.count_devices(A, query=where(("host_gateway", "eq", ("g1",)))) == 4

    run(make_store, scenario)


def test_directory_fields_and_administrator_keys_survive_a_reopen(make_store: StoreFactory) -> None:
    """issue 11: `PUT /v3/devices/{id}` fields and a key's Administrators membership are persisted."""
    named = msgspec.structs.replace(
        device("d1", "ep-1"),
        name="Boiler",
        description="basement",
        custom_attributes={"room": "b1", "floor": "-1"},
        auto_update=True,
        ca_id="ca-1",
        device_key="fp:00",
    )
    admin = ApiKey(id="k9", account_id=A, name="ops", key_hash="h9", created_at=1.0, admin=True)

    async def write(store: Store) -> None:
        await store.put_device(named)
        await store.create_key(admin)

    async def check(store: Store) -> None:
        assert await store.get_device("d1") == named
        assert await store.find_device(A, "ep-1") == named
        assert await store.find_key_by_hash("h9") == admin
        assert [k.admin for k in await store.list_keys(A)] == [True]
        await store.delete_device("d1")
        assert await store.get_device("d1") is None and await store.get_snapshot("d1") == []

    run(make_store, write)
    reopen(make_store, check)


def test_devices_stored_before_the_filter_indexes_are_found_by_filters(make_store: StoreFactory) -> None:
    """A database written by the previous release (no filter columns in SQLite, no value indexes in Redis)
    answers filters correctly once reopened: the open fills what is missing from the records."""

    async def write(store: Store) -> None:
        for n in range(4):
            await store.put_device(directory_device(n))
        await _forget_filter_indexes(store)

    async def check(store: Store) -> None:
        sensors = where(("endpoint_type", "eq", ("sensor",)))
        assert [d.id for d in await store.list_devices(A, query=sensors)] == ["d00", "d03"]
        assert await store.count_devices(A, query=where(("host_gateway", "eq", ("g1",)))) == 1
        assert await store.count_devices(A, query=where(("created_at", "gte", (1002.0,)))) == 2

    run(make_store, write)
    reopen(make_store, check)


async def _forget_filter_indexes(store: Store) -> None:
    """Turn the data into what the previous release wrote."""
    if is_shared(store):
        # the value indexes lost (keys.py: in the account's slot), and the mark that they were filled
        for key in [k async for k in store.redis.scan_iter(match=store.prefix + "devices_by:*")]:
            await store.redis.delete(key)
        await store.redis.delete(store.prefix + "device_indexes")
    else:
        assert isinstance(store, SqliteStore)

        def old_schema(db: sqlite3.Connection) -> None:
            for index in ("devices_type", "devices_gateway", "devices_created", "devices_updated"):
                db.execute(f"DROP INDEX {index}")
            for column in ("endpoint_type", "host_gateway", "created_at", "updated_at"):
                db.execute(f"ALTER TABLE devices DROP COLUMN {column}")

        await store._write(old_schema)


# a registered device's object list: a Redis page reads the record without it (its directory summary, issue 30 #5)
LINKS = (ResourceLink(path="/3/0"), ResourceLink(path="/3/0/0"), ResourceLink(path="/3303/0/5700", obs=True, rt="t"))


def shown(devices: list[Device]) -> list[Device]:
    """The devices as a directory page shows them: every field but the resources."""
    return [msgspec.structs.replace(d, resources=()) for d in devices]


async def assert_page_lists_as_list_devices(store: Store, query: DeviceQuery, **options: Any) -> list[Device]:
    listed, contacts = await store.list_devices_and_contacts(A, query=query, **options)
    whole = await store.list_devices(A, query=query, **options)
    assert shown(listed) == shown(whole), (query, options)
    assert contacts == await store.get_contacts(A, [d.id for d in listed]), (query, options)
    return whole


def test_a_page_with_contacts_lists_as_list_devices_with_the_stored_contact_of_each_listed_device(
    make_store: StoreFactory,
) -> None:
    """issue 30 #5: `list_devices_and_contacts` (what a directory page reads) lists what `list_devices` lists (but
    the resources), in pages longer and shorter than a store's read, and gives `get_contacts` of exactly the devices
    it lists."""
    sensors = where(("endpoint_type", "eq", ("sensor",)))
    queries: list[tuple[DeviceQuery, dict[str, Any]]] = [
        (DeviceQuery(), {"limit": 1001}),
        (DeviceQuery(), {"limit": 7}),
        (DeviceQuery(), {"limit": 120, "after": "d0100"}),
        (DeviceQuery(), {"limit": 5, "descending": True, "after": "d0200"}),
        (sensors, {"limit": 60}),
        (sensors, {"limit": 3, "descending": True}),
        (where(("state", "eq", ("registered",)), ("host_gateway", "eq", ("g1",))), {"limit": 1001}),
        (where(("id", "in", ("d0001", "d0002", "d0003", "zz"))), {"limit": 2}),
        (where(("endpoint_name", "eq", ("ep0009",))), {}),
        (where(("endpoint_type", "eq", ("nothing",))), {}),
    ]

    async def scenario(store: Store) -> None:
        devices = [
            msgspec.structs.replace(
                directory_device(n % 12), id=f"d{n:04d}", endpoint_name=f"ep{n:04d}", resources=LINKS[: n % 4]
            )
            for n in range(250)
        ]
        await store.put_registered_devices(devices)
        await store.put_registered_devices([directory_device(99, account=B)])
        # every third device has a stored contact; B's device too, and an id without a record
        await store.put_contacts([(A, f"d{n:04d}", 5000.0 + n) for n in range(0, 250, 3)])
        await store.put_contacts([(B, "d99", 1.0), (A, "zz", 2.0)])
        for query, options in queries:
            await assert_page_lists_as_list_devices(store, query, **options)
        everything, contacts = await store.list_devices_and_contacts(A, limit=1001)
        assert len(everything) == 250 and len(contacts) == 84 and contacts["d0249"] == 5249.0
        assert shown(everything) == shown(devices)

    run(make_store, scenario)


def test_every_write_of_a_device_shows_on_the_next_page_and_in_filtered_counts(make_store: StoreFactory) -> None:
    """issue 30 #5: each store write that changes what the directory shows (a first registration and a registration
    again: `put_registered_devices`; a registration update, a deregistration and `PUT /v3/devices/{id}`'s fields:
    `put_device`; `DELETE`: `delete_device`) is on the next page and in the next filtered count (on Redis both read
    the devices' directory summaries, which the record's own write keeps)."""
    lights = where(("endpoint_type", "eq", ("light",)))
    registered = where(("state", "eq", ("registered",)), ("endpoint_name", "nin", ("nothing",)))

    async def page(store: Store) -> list[Device]:
        for query in (DeviceQuery(), lights, registered):
            await assert_page_lists_as_list_devices(store, query, limit=1001)
        listed, _ = await store.list_devices_and_contacts(A, limit=1001)
        return shown(listed)

    async def scenario(store: Store) -> None:
        first = [msgspec.structs.replace(directory_device(n), state="registered", resources=LINKS) for n in range(4)]
        await store.put_registered_devices(first)
        assert await page(store) == shown(first)
        again = msgspec.structs.replace(first[0], endpoint_type="light", host_gateway="g2", updated_at=3000.0)
        await store.put_registered_devices([again], unchanged=["d01"])
        assert (await page(store))[0] == shown([again])[0]
        assert await store.count_devices(A, query=lights) == 2
        update = msgspec.structs.replace(first[1], lifetime=60, updated_at=3001.0, resources=LINKS[:1])
        await store.put_device(update)
        assert (await page(store))[1] == shown([update])[0]
        gone = msgspec.structs.replace(first[2], state="deregistered", updated_at=3002.0, last_seen_at=3002.0)
        await store.put_device(gone)
        assert (await page(store))[2] == shown([gone])[0]
        assert await store.count_devices(A, query=registered) == 3
        edited = msgspec.structs.replace(
            first[3], name="Boiler", description="basement", custom_attributes={"room": "b1"}, ca_id="ca-1"
        )
        await store.put_device(edited)
        assert (await page(store))[3] == shown([edited])[0]
        await store.delete_device("d01")
        assert await page(store) == shown([again, gone, edited])
        assert await store.count_devices(A, query=registered) == 2

    run(make_store, scenario)

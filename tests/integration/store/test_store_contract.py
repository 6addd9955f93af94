"""The Store contract (store/base.py), checked on SQLite and on a real Redis with the same tests."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable, Coroutine
from typing import Any

import msgspec
import pytest

from devicehub.domain.model import (
    Account,
    ApiKey,
    ChannelConfig,
    ChannelDrops,
    DesiredValue,
    Device,
    DeviceRequest,
    LastSuccess,
    PresubscriptionRule,
    ReportedValue,
    SnapshotResource,
    StoredEvent,
)
from devicehub.domain.storage.device_query import Condition, DeviceQuery
from devicehub.domain.storage.store import Store
from devicehub.errors import DuplicateAsyncId, QueueFull
from devicehub.store.redis.store import RedisStore
from devicehub.store.sqlite.store import SqliteStore
from support.stores import StoreFactory, minting, run

A = "a" * 32
B = "b" * 32


def reopen(make_store: StoreFactory, check: Callable[[Store], Coroutine[Any, Any, None]]) -> None:
    run(make_store, check)


def device(device_id: str, name: str, *, account: str = A, state: str = "registered", seen: float = 100.0) -> Device:
    return Device(
        id=device_id,
        account_id=account,
        endpoint_name=name,
        state=state,
        created_at=1.0,
        updated_at=2.0,
        last_seen_at=seen,
    )


def request(async_id: str, device_id: str = "d1", key: str = "k1") -> DeviceRequest:
    return DeviceRequest(
        async_id=async_id,
        key_id=key,
        account_id=A,
        device_id=device_id,
        method="GET",
        uri="/3/0/0",
        created_at=1.0,
        expires_at=9.0,
    )


def test_accounts_and_keys(make_store: StoreFactory) -> None:
    async def scenario(store: Store) -> None:
        await store.create_account(Account(id=A, name="zeta", created_at=1.0))
        await store.create_account(Account(id=B, name="alpha", tier="free", created_at=2.0))
        assert [a.name for a in await store.list_accounts()] == ["alpha", "zeta"]
        assert (await store.find_account_by_name("alpha")) == Account(id=B, name="alpha", tier="free", created_at=2.0)
        assert await store.get_account("c" * 32) is None
        key = ApiKey(id="k1", account_id=A, name="app", key_hash="h1", created_at=5.0)
        await store.create_key(key)
        await store.create_key(ApiKey(id="k0", account_id=A, name="old", key_hash="h0", created_at=4.0))
        assert [k.id for k in await store.list_keys(A)] == ["k0", "k1"]
        assert await store.find_key_by_hash("h1") == key
        assert await store.revoke_key("k1", 7.0)
        assert not await store.revoke_key("nope", 7.0)
        revoked = await store.find_key_by_hash("h1")
        assert revoked is not None and revoked.revoked_at == 7.0

    run(make_store, scenario)


def test_devices_are_unique_per_endpoint_and_listed_by_id_with_cursor_and_state(make_store: StoreFactory) -> None:
    async def scenario(store: Store) -> None:
        for n in range(5):
            await store.put_device(device(f"d{n}", f"ep{n}", state="registered" if n % 2 == 0 else "deregistered"))
        await store.put_device(device("z9", "other", account=B))
        assert [d.id for d in await store.list_devices(A)] == ["d0", "d1", "d2", "d3", "d4"]
        assert [d.id for d in await store.list_devices(A, after="d1", limit=2)] == ["d2", "d3"]
        assert [d.id for d in await store.list_devices(A, state="registered")] == ["d0", "d2", "d4"]
        assert await store.count_devices(A) == 5 and await store.count_devices(A, state="deregistered") == 2
        await store.put_device(device("d1", "ep1", state="registered"))  # replaced in place, index follows
        assert await store.count_devices(A, state="deregistered") == 1
        found = await store.find_device(A, "ep1")
        assert found is not None and found.state == "registered"
        assert await store.find_device(B, "ep1") is None

    async def listed_after_reopen(store: Store) -> None:  # nothing cached yet: every record is read from disk
        listed = await store.list_devices(A, state="registered")
        assert [(d.id, d.state) for d in listed] == [
            ("d0", "registered"),
            ("d1", "registered"),
            ("d2", "registered"),
            ("d4", "registered"),
        ]
        assert [d.endpoint_name for d in await store.list_devices(A, after="d0", limit=2)] == ["ep1", "ep2"]

    run(make_store, scenario)
    reopen(make_store, listed_after_reopen)


def test_a_listing_follows_every_device_change(make_store: StoreFactory) -> None:
    """The same page asked again after each kind of device write lists what that write left (SQLite keeps pages
    in memory until a device record changes: issue 15)."""

    async def scenario(store: Store) -> None:
        async def page() -> list[tuple[str, str]]:
            return [(d.id, d.state) for d in await store.list_devices(A, limit=10)]

        await store.put_device(device("d1", "ep1"))
        assert await page() == [("d1", "registered")] and await page() == [("d1", "registered")]
        await store.put_device(device("d2", "ep2"))
        assert await page() == [("d1", "registered"), ("d2", "registered")]
        await store.put_device(device("d1", "ep1", state="deregistered"))
        assert await page() == [("d1", "deregistered"), ("d2", "registered")]
        await store.put_registered_devices([device("d0", "ep0"), device("d1", "ep1")])
        assert await page() == [("d0", "registered"), ("d1", "registered"), ("d2", "registered")]
        await store.delete_device("d2")
        assert await page() == [("d0", "registered"), ("d1", "registered")]

    run(make_store, scenario)


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


def test_delete_device_removes_snapshot_subscriptions_and_requests(make_store: StoreFactory) -> None:
    async def scenario(store: Store) -> None:
        await store.put_device(device("d1", "ep1"))
        await store.add_subscription("k1", "d1", "/3/0/0")
        await store.ensure_resources("d1", ["/3/0/0"])
        await store.enqueue_request(request("r1"))
        await store.delete_device("d1")
        assert await store.get_device("d1") is None and await store.find_device(A, "ep1") is None
        assert await store.subscribers("d1") == [] and await store.list_subscriptions("k1", "d1") == []
        assert await store.pending_requests("d1") == [] and await store.all_pending_requests() == []
        assert await store.get_snapshot("d1") == []
        assert await store.count_devices(A) == 0

    run(make_store, scenario)


def test_devices_last_seen_before_a_cutoff(make_store: StoreFactory) -> None:
    async def scenario(store: Store) -> None:
        await store.put_device(device("old", "e1", seen=10.0))
        await store.put_device(device("new", "e2", seen=50.0))
        assert await store.devices_last_seen_before(50.0) == ["old"]

    run(make_store, scenario)


def test_a_subscription_added_again_after_each_kind_of_removal_is_stored_again(make_store: StoreFactory) -> None:
    """SQLite answers a repeated add of a stored subscription from memory (issue 15): every removal forgets that."""

    async def scenario(store: Store) -> None:
        async def stored() -> list[tuple[str, str]]:
            return await store.subscribers("d1")

        await store.put_device(device("d1", "ep1"))
        for _ in range(2):
            await store.add_subscription("k1", "d1", "/3/0/0")
        assert await stored() == [("k1", "/3/0/0")]
        assert await store.remove_subscription("k1", "d1", "/3/0/0")
        await store.add_subscription("k1", "d1", "/3/0/0")
        assert await stored() == [("k1", "/3/0/0")]
        assert await store.remove_device_subscriptions("d1", "k1") == 1
        await store.add_subscription("k1", "d1", "/3/0/0")
        assert await stored() == [("k1", "/3/0/0")]
        await store.put_registered_devices([device("d1", "ep1")])  # a full registration drops them (spec §2.1)
        assert await stored() == []
        await store.add_subscription("k1", "d1", "/3/0/0")
        assert await stored() == [("k1", "/3/0/0")]
        await store.delete_device("d1")
        await store.add_subscription("k1", "d1", "/3/0/0")
        assert await stored() == [("k1", "/3/0/0")]

    run(make_store, scenario)

    async def kept(store: Store) -> None:  # and what was answered from memory is on disk
        assert await store.subscribers("d1") == [("k1", "/3/0/0")]

    reopen(make_store, kept)


def test_subscriptions_are_per_key_idempotent_and_removable(make_store: StoreFactory) -> None:
    async def scenario(store: Store) -> None:
        await store.add_subscription("k1", "d1", "/3303/0/5700")
        await store.add_subscription("k1", "d1", "/3303/0/5700")
        await store.add_subscription("k1", "d1", "/3/0/0")
        await store.add_subscription("k2", "d1", "/3/0/0")
        assert await store.list_subscriptions("k1", "d1") == ["/3/0/0", "/3303/0/5700"]
        assert await store.subscribers("d1") == [("k1", "/3/0/0"), ("k1", "/3303/0/5700"), ("k2", "/3/0/0")]
        assert await store.remove_subscription("k1", "d1", "/3/0/0")
        assert not await store.remove_subscription("k1", "d1", "/3/0/0")
        assert await store.remove_device_subscriptions("d1", "k2") == 1
        assert await store.remove_device_subscriptions("d1") == 1
        assert await store.subscribers("d1") == []

    run(make_store, scenario)


def test_presubscriptions_replace_clear_and_list_per_account(make_store: StoreFactory) -> None:
    async def scenario(store: Store) -> None:
        rules = [PresubscriptionRule(endpoint_name="node-*", resource_path=("/3303/0/5700",))]
        await store.set_presubscriptions("k1", A, rules)
        await store.set_presubscriptions("k2", A, [PresubscriptionRule(endpoint_type="sensor")])
        await store.set_presubscriptions("k3", B, rules)
        assert await store.get_presubscriptions("k1") == rules
        assert [k for k, _ in await store.account_presubscriptions(A)] == ["k1", "k2"]
        await store.set_presubscriptions("k2", A, [])
        assert await store.get_presubscriptions("k2") == []
        assert await store.account_presubscriptions(A) == [("k1", rules)]

    run(make_store, scenario)


def test_channel_replace_and_delete_takes_its_events(make_store: StoreFactory) -> None:
    async def scenario(store: Store) -> None:
        await store.put_channel(ChannelConfig(key_id="k1", account_id=A, kind="websocket", created_at=1.0))
        await store.put_channel(
            ChannelConfig(
                key_id="k1", account_id=A, kind="callback", url="https://x", headers={"a": "b"}, created_at=2.0
            )
        )
        await store.put_channel(ChannelConfig(key_id="k2", account_id=B, kind="pull", created_at=1.0))
        channel = await store.get_channel("k1")
        assert channel is not None and channel.kind == "callback" and channel.headers == {"a": "b"}
        assert [c.key_id for c in await store.list_channels()] == ["k1", "k2"]
        assert [c.key_id for c in await store.list_channels(B)] == ["k2"]
        await store.append_events("k1", [StoredEvent(0, b"{}", 1)])
        assert await store.delete_channel("k1")
        assert not await store.delete_channel("k1")
        assert await store.load_events("k1") == [] and await store.get_channel("k1") is None

    run(make_store, scenario)


def test_channel_drop_counters_add_up_and_go_with_the_channel(make_store: StoreFactory) -> None:
    async def scenario(store: Store) -> None:
        assert await store.get_channel_drops("k1") == ChannelDrops()
        await store.put_channel(ChannelConfig(key_id="k1", account_id=A, kind="websocket", created_at=1.0))
        await store.add_channel_drops("k1", ChannelDrops(overflow=3))
        await store.add_channel_drops("k1", ChannelDrops(overflow=1, expired=2, failed=5))
        await store.add_channel_drops("k2", ChannelDrops(failed=1))
        assert await store.get_channel_drops("k1") == ChannelDrops(overflow=4, expired=2, failed=5)
        assert await store.delete_channel("k1")
        assert await store.get_channel_drops("k1") == ChannelDrops()
        assert await store.get_channel_drops("k2") == ChannelDrops(failed=1)

    run(make_store, scenario)


def test_event_journal_appends_at_the_tail_and_drops_from_the_head(make_store: StoreFactory) -> None:
    async def scenario(store: Store) -> None:
        await store.append_events("k1", [StoredEvent(0, f"{n}".encode(), n) for n in range(3)])
        await store.append_events("k1", [StoredEvent(5, b"3", 3)])
        await store.drop_head_events("k1", 2)
        assert await store.load_events("k1") == [StoredEvent(0, b"2", 2), StoredEvent(5, b"3", 3)]
        await store.drop_head_events("k1", 10)
        assert await store.load_events("k1") == []

    run(make_store, scenario)


def test_request_queue_keeps_enqueue_order_and_updates(make_store: StoreFactory) -> None:
    async def scenario(store: Store) -> None:
        await store.enqueue_request(request("b", "d1"))
        await store.enqueue_request(request("a", "d2"))
        await store.enqueue_request(request("c", "d1"))
        assert [r.async_id for r in await store.pending_requests("d1")] == ["b", "c"]
        assert [r.async_id for r in await store.all_pending_requests()] == ["b", "a", "c"]
        assert await store.count_pending_requests() == 3
        updated = DeviceRequest(
            **{**{f: getattr(request("b"), f) for f in DeviceRequest.__struct_fields__}, "retries_left": 3}
        )
        await store.update_request(updated)
        assert await store.find_request("k1", "b") == updated
        assert await store.remove_request("k1", "b")
        assert not await store.remove_request("k1", "b")
        assert [r.async_id for r in await store.all_pending_requests()] == ["a", "c"]
        assert await store.count_pending_requests() == 2

    run(make_store, scenario)


def test_devices_with_pending_requests_names_only_those_with_a_queued_request(make_store: StoreFactory) -> None:
    """Issue 16: a batch of registrations asks once which of its devices have requests waiting (a storm
    re-registers thousands of devices with empty queues); more ids than SQLite takes in one statement."""

    async def scenario(store: Store) -> None:
        await store.enqueue_request(request("a", "d1"))
        await store.enqueue_request(request("b", "d1"))
        await store.enqueue_request(request("c", "d3"))
        many = [f"x{n}" for n in range(1200)]
        assert await store.devices_with_pending_requests(["d1", "d2", *many, "d3", "d1"]) == {"d1", "d3"}
        assert await store.devices_with_pending_requests([]) == set()
        assert await store.remove_request("k1", "c")
        assert await store.devices_with_pending_requests(["d1", "d3"]) == {"d1"}

    run(make_store, scenario)


def test_enqueue_refuses_a_pending_async_id_and_a_full_queue_in_the_step_that_queues(make_store: StoreFactory) -> None:
    """Issue 15: the duplicate and queue-length checks are the store's, in one step with the insert, so concurrent
    submits of one async-id queue it once and the others get DuplicateAsyncId (not a storage error)."""

    async def scenario(store: Store) -> None:
        outcomes = await asyncio.gather(
            *(store.enqueue_request(request("same"), 3) for _ in range(5)), return_exceptions=True
        )
        assert outcomes.count(None) == 1
        assert all(isinstance(o, DuplicateAsyncId) for o in outcomes if o is not None)
        await store.enqueue_request(request("same", key="k2"), 3)  # the async-id is per key
        await store.enqueue_request(request("two"), 3)
        with pytest.raises(QueueFull):
            await store.enqueue_request(request("three"), 3)
        await store.enqueue_request(request("elsewhere", "d2"), 3)  # the bound is per device
        await store.enqueue_request(request("unbounded"))
        assert [r.async_id for r in await store.pending_requests("d1")] == ["same", "same", "two", "unbounded"]
        assert await store.remove_request("k1", "same")
        await store.enqueue_request(request("same"), 4)  # no longer pending: accepted again
        assert [r.async_id for r in await store.all_pending_requests()][-1] == "same"

    run(make_store, scenario)


def test_snapshot_fields_merge_and_new_resources_do_not_overwrite(make_store: StoreFactory) -> None:
    async def scenario(store: Store) -> None:
        reported = ReportedValue(value=b"21.5", content_type="text/plain", reported_at=3.0)
        desired = DesiredValue(value=b"1", desired_at=4.0, status=0, status_updated_at=4.0)
        await store.set_reported("d1", "/3303/0/5700", reported)
        await store.set_desired("d1", "/3303/0/5700", desired)
        await store.set_subscribed("d1", "/3303/0/5700", True)
        await store.ensure_resources("d1", ["/3303/0/5700", "/3/0/0"])
        assert await store.get_snapshot("d1") == [
            SnapshotResource(path="/3/0/0"),
            SnapshotResource(path="/3303/0/5700", reported=reported, desired=desired, subscribed=True),
        ]
        await store.clear_subscribed("d1")
        assert [r.subscribed for r in await store.get_snapshot("d1")] == [False, False]

    run(make_store, scenario)


def test_reported_values_set_together_are_read_as_set_one_by_one_the_later_of_a_path_winning(
    make_store: StoreFactory,
) -> None:
    """`set_reported_many` (a receive batch's values, issue 15 #2): several devices and paths at once, a path given
    twice keeps the later value; read back at once and after a reopen (the write-behind flushes on close)."""

    def value(text: bytes, at: float) -> ReportedValue:
        return ReportedValue(value=text, content_type="text/plain", reported_at=at)

    expected = {
        "d1": [
            SnapshotResource(path="/3/0/9", reported=value(b"88", 1.0)),
            SnapshotResource(path="/3303/0/5700", reported=value(b"21.5", 2.0)),
        ],
        "d2": [SnapshotResource(path="/3303/0/5700", reported=value(b"7", 1.0))],
    }

    async def check(store: Store) -> None:
        for device_id, resources in expected.items():
            assert await store.get_snapshot(device_id) == resources

    async def scenario(store: Store) -> None:
        await store.set_reported_many(
            [
                ("d1", "/3303/0/5700", value(b"20.5", 1.0)),
                ("d2", "/3303/0/5700", value(b"7", 1.0)),
                ("d1", "/3/0/9", value(b"88", 1.0)),
                ("d1", "/3303/0/5700", value(b"21.5", 2.0)),
            ]
        )
        await check(store)

    run(make_store, scenario)
    reopen(make_store, check)


def test_desired_value_keeps_content_type_request_and_last_success(make_store: StoreFactory) -> None:
    async def scenario(store: Store) -> None:
        desired = DesiredValue(
            value=b"\xa1\x01\xf5",
            desired_at=9.0,
            status=2,
            status_updated_at=9.5,
            content_type="application/vnd.oma.lwm2m+cbor",
            request_id="k1/w2",
            last_success=LastSuccess(value=b"0", content_type="text/plain", desired_at=5.0),
        )
        assert await store.get_desired("d1", "/3311/0/5850") is None
        await store.set_desired("d1", "/3311/0/5850", desired)
        assert await store.get_snapshot("d1") == [SnapshotResource(path="/3311/0/5850", desired=desired)]
        # one resource's desired value on its own (a write request reads only that)
        assert await store.get_desired("d1", "/3311/0/5850") == desired
        await store.ensure_resources("d1", ["/3311/0/5851"])
        assert await store.get_desired("d1", "/3311/0/5851") is None
        assert await store.get_desired("d2", "/3311/0/5850") is None

    run(make_store, scenario)


def test_leases_are_exclusive_until_expiry_and_released_only_by_their_owner(make_store: StoreFactory) -> None:
    async def scenario(store: Store) -> None:
        assert await store.acquire_lease("sweep", "node-a", 10, now=100.0)
        assert await store.acquire_lease("sweep", "node-a", 10, now=105.0)  # renew
        assert not await store.acquire_lease("sweep", "node-b", 10, now=114.0)
        await store.release_lease("sweep", "node-b")  # not the owner: no effect
        assert not await store.acquire_lease("sweep", "node-b", 10, now=114.0)
        assert await store.acquire_lease("sweep", "node-b", 10, now=115.0)  # node-a's lease ran out
        await store.release_lease("sweep", "node-b")
        assert await store.acquire_lease("sweep", "node-a", 10, now=116.0)

    run(make_store, scenario)


def test_data_survives_close_and_reopen(make_store: StoreFactory) -> None:
    async def write(store: Store) -> None:
        await store.put_device(device("d1", "ep1"))
        await store.set_reported("d1", "/3/0/0", ReportedValue(value=b"x", content_type="text/plain", reported_at=1))
        await store.append_events("k1", [StoredEvent(0, b"{}", 1)])
        await store.enqueue_request(request("b"), 20)
        await store.enqueue_request(request("a"), 20)

    async def check(store: Store) -> None:
        assert await store.get_device("d1") is not None
        (resource,) = await store.get_snapshot("d1")
        assert resource.reported is not None
        assert await store.load_events("k1") == [StoredEvent(0, b"{}", 1)]
        assert [r.async_id for r in await store.pending_requests("d1")] == ["b", "a"]

    run(make_store, write)
    reopen(make_store, check)


def test_concurrent_claims_of_one_endpoint_name_agree_on_one_device_id(make_store: StoreFactory) -> None:
    async def scenario(store: Store) -> None:
        claims = await asyncio.gather(
            *(store.claim_device_id(A, f"ep-{i % 3}", minting(f"{i:032x}")) for i in range(60)),
            store.claim_device_id(B, "ep-0", minting("f" * 32)),
        )
        assert len(set(claims[:-1])) == 3 and claims[-1] == "f" * 32  # one id per (account, name)
        assert [claims[i] for i in range(3)] == [claims[i + 3] for i in range(3)]
        await store.put_device(device(claims[0], "ep-0"))
        assert await store.claim_device_id(A, "ep-0", minting("e" * 32)) == claims[0]
        await store.delete_device(claims[0])  # six months unseen: the name may mint a new id
        assert await store.claim_device_id(A, "ep-0", minting("e" * 32)) == "e" * 32

    run(make_store, scenario)


def test_a_claimed_id_stored_with_its_registered_device_survives_a_reopen(make_store: StoreFactory) -> None:
    """issue 16 #1: the embedded store writes a new name's claim with the device's record, not on its own; either
    way the id is one and the same after a restart."""

    async def write(store: Store) -> None:
        (_, claimed) = await store.admit_endpoint("ep-kept", A, minting("c" * 32)) or ("", "")
        assert claimed == "c" * 32
        assert await store.claim_device_id(A, "ep-kept", minting("d" * 32)) == claimed  # reserved: one name, one id
        await store.put_registered_devices([device(claimed, "ep-kept")])

    async def check(store: Store) -> None:
        assert await store.admit_endpoint("ep-kept", A, minting("e" * 32)) == (A, "c" * 32)

    run(make_store, write)
    reopen(make_store, check)


def test_admitting_an_endpoint_takes_its_enrolment_else_the_default_account_and_claims_one_id(
    make_store: StoreFactory,
) -> None:
    async def scenario(store: Store) -> None:
        assert await store.admit_endpoint("stray", None, minting("a" * 32)) is None  # not enrolled, no default: refused
        await store.enroll(B, "enrolled")
        assert await store.admit_endpoint("enrolled", A, minting("b" * 32)) == (B, "b" * 32)  # the enrolment wins
        assert await store.admit_endpoint("enrolled", A, minting("c" * 32)) == (B, "b" * 32)  # one id per name
        assert await store.claim_device_id(B, "enrolled", minting("d" * 32)) == "b" * 32  # the same claim
        assert await store.admit_endpoint("open", A, minting("e" * 32)) == (A, "e" * 32)  # the default account

    run(make_store, scenario)


def test_registrations_and_observations_survive_a_reopen_and_expire_once(make_store: StoreFactory) -> None:
    from devicehub.domain.model import ObservationRecord, RegistrationLink, RegistrationRecord

    first = RegistrationRecord(
        device_id="d1",
        account_id=A,
        endpoint_name="ep-1",
        lifetime=60,
        links=(RegistrationLink("/3/0"), RegistrationLink("/3303/0/5700", obs=True, aobs=7)),
        host="127.0.0.1",
        port=5000,
        registered_at=100.0,
        updated_at=100.25,
        expires_at=253.25,
    )
    second = msgspec.structs.replace(first, device_id="d2", endpoint_name="ep-2", updated_at=150.5, expires_at=303.5)
    observation = ObservationRecord(token=b"\x00\x07", device_id="d1", path="/3303/0/5700", auto=True)

    async def write(store: Store) -> None:
        await store.put_registration(first)
        await store.put_registration(second)
        await store.put_observation(observation)
        await store.put_observation(ObservationRecord(token=b"\xff" * 8, device_id="d2", path="/3/0/0", last_seq=9))

    async def check(store: Store) -> None:
        assert await store.get_registration("d1") == first
        assert [r.device_id for r in await store.list_registrations()] == ["d1", "d2"]
        assert await store.get_observation(b"\x00\x07") == observation
        assert [o.path for o in await store.device_observations("d2")] == ["/3/0/0"]
        assert [r.device_id for r in await store.registrations_expiring(300.0)] == ["d1"]
        assert not await store.remove_registration("d1", updated_at=99.0)  # updated meanwhile: not ours to expire
        assert await store.remove_registration("d1", updated_at=100.25)
        assert not await store.remove_registration("d1", updated_at=100.25)  # a second node loses
        assert await store.get_registration("d1") is None and await store.get_observation(b"\x00\x07") is None
        await store.remove_observation(b"\xff" * 8)
        assert await store.device_observations("d2") == []
        assert await store.remove_registration("d2")


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
    if isinstance(store, RedisStore):
        keys = [k async for k in store.redis.scan_iter(match=store.prefix + "devices_by:*")]
        await store.redis.delete(*keys, store.prefix + "device_index_version")
    else:
        assert isinstance(store, SqliteStore)

        def old_schema(db: sqlite3.Connection) -> None:
            for index in ("devices_type", "devices_gateway", "devices_created", "devices_updated"):
                db.execute(f"DROP INDEX {index}")
            for column in ("endpoint_type", "host_gateway", "created_at", "updated_at"):
                db.execute(f"ALTER TABLE devices DROP COLUMN {column}")

        await store._write(old_schema)


def test_a_batch_of_registrations_is_written_at_once_and_a_fresh_one_ends_earlier_observations(
    make_store: StoreFactory,
) -> None:
    """issue 16 #1: registrations are stored in batches; a Register in the batch drops the device's observations."""
    from devicehub.domain.model import ObservationRecord, RegistrationLink, RegistrationRecord

    def record(n: int, updated_at: float) -> RegistrationRecord:
        return RegistrationRecord(
            device_id=f"d{n}",
            account_id=A,
            endpoint_name=f"ep-{n}",
            lifetime=60,
            links=(RegistrationLink("/3/0"),),
            host="127.0.0.1",
            port=5000 + n,
            registered_at=100.0,
            updated_at=updated_at,
            expires_at=updated_at + 153,
        )

    old = ObservationRecord(token=b"\x01", device_id="d1", path="/3/0/0")
    kept = ObservationRecord(token=b"\x02", device_id="d2", path="/3/0/0", last_seq=4)
    new = ObservationRecord(token=b"\x03", device_id="d1", path="/3/0/1", auto=True)

    async def write(store: Store) -> None:
        await store.put_registrations([record(1, 100.0), record(2, 100.0)], [old, kept])
        assert await store.put_registrations([]) is None  # an empty batch is no error
        await store.put_registrations([record(1, 200.0), record(3, 200.0)], [new], fresh=["d1", "d3"])

    async def check(store: Store) -> None:
        assert [r.device_id for r in await store.list_registrations()] == ["d1", "d2", "d3"]
        assert await store.get_registration("d1") == record(1, 200.0)
        assert await store.device_observations("d1") == [new]
        assert await store.get_observation(b"\x01") is None
        assert await store.device_observations("d2") == [kept]
        assert [r.device_id for r in await store.registrations_expiring(300.0)] == ["d2"]
        assert await store.remove_registration("d1", updated_at=200.0)
        assert await store.get_observation(b"\x03") is None

    run(make_store, write)
    reopen(make_store, check)


def test_a_batch_of_full_registrations_stores_devices_and_drops_their_subscriptions(make_store: StoreFactory) -> None:
    """issue 16 #1: `put_registered_devices` does for many devices what a full registration does for one."""
    from devicehub.domain.model import ResourceInfo

    def registered(device_id: str, name: str, *paths: str) -> Device:
        return msgspec.structs.replace(
            device(device_id, name), resources=tuple(ResourceInfo(path=p) for p in paths), lifetime=60
        )

    async def scenario(store: Store) -> None:
        await store.put_device(device("d1", "ep-1"))
        await store.add_subscription("k1", "d1", "/3/0/0")
        await store.set_subscribed("d1", "/3/0/0", True)
        await store.add_subscription("k1", "d9", "/3/0/0")  # another device's: kept
        await store.add_subscription("k2", "d1", "/3/0/1")  # a second key's subscription to d1: dropped too
        await store.put_device(msgspec.structs.replace(device("d2", "ep-old"), state="deregistered"))
        assert await store.get_devices([]) == []
        await store.put_registered_devices([])
        batch = [registered("d1", "ep-1", "/3/0/0", "/3/0/1"), registered("d2", "ep-2", "/1/0/1")]
        await store.put_registered_devices(batch)
        assert sorted(await store.get_devices(["d2", "d1", "nope"]), key=lambda d: d.id) == batch
        assert await store.list_subscriptions("k1", "d1") == []
        assert await store.list_subscriptions("k1", "d9") == ["/3/0/0"]
        snapshot = await store.get_snapshot("d1")
        assert [(e.path, e.subscribed) for e in snapshot] == [("/3/0/0", False), ("/3/0/1", False)]
        assert [e.path for e in await store.get_snapshot("d2")] == ["/1/0/1"]
        assert await store.count_devices(A) == 2
        assert await store.list_subscriptions("k2", "d1") == [] and await store.subscribers("d1") == []
        # a device that comes back under another name, in another state, leaves no trace of the old ones
        assert await store.find_device(A, "ep-old") is None and (await store.find_device(A, "ep-2")) == batch[1]
        assert await store.list_devices(A, state="deregistered") == []
        # registered again as it was (`unchanged`): its record stays, its subscriptions and marks go
        await store.add_subscription("k1", "d2", "/1/0/1")
        await store.set_subscribed("d2", "/1/0/1", True)
        await store.put_registered_devices([], unchanged=["d2"])
        assert await store.get_device("d2") == batch[1] and await store.subscribers("d2") == []
        assert [(e.path, e.subscribed) for e in await store.get_snapshot("d2")] == [("/1/0/1", False)]

    run(make_store, scenario)


def test_values_announced_in_a_batch_of_registrations_are_stored_with_it(make_store: StoreFactory) -> None:
    """issue 16: the `v=` values of a batch of Registers are written with the snapshot entries (one write, not the
    empty entry and then the value), read back as `set_reported` would leave them; a value the write-behind still
    holds for the same resource (reported before) is older and does not win over the registration's."""
    from devicehub.domain.model import ResourceInfo

    def registered(device_id: str, name: str, *paths: str) -> Device:
        return msgspec.structs.replace(device(device_id, name), resources=tuple(ResourceInfo(path=p) for p in paths))

    def value(text: bytes, at: float) -> ReportedValue:
        return ReportedValue(value=text, content_type="text/plain", reported_at=at)

    async def write(store: Store) -> None:
        await store.set_reported("d1", "/3/0/0", value(b"old", 1.0))  # held by the write-behind, not written yet
        batch = [registered("d1", "ep-1", "/3/0/0", "/3/0/1", "/3/0/2"), registered("d2", "ep-2", "/1/0/1")]
        reported = [("d1", "/3/0/0", value(b"new", 2.0)), ("d1", "/3/0/1", value(b"7", 2.0))]
        await store.put_registered_devices(batch, reported=reported)
        await store.put_registered_devices([], unchanged=["d2"], reported=[("d2", "/1/0/1", value(b"60", 3.0))])
        await check(store)

    async def check(store: Store) -> None:
        assert [(e.path, e.reported) for e in await store.get_snapshot("d1")] == [
            ("/3/0/0", value(b"new", 2.0)),
            ("/3/0/1", value(b"7", 2.0)),
            ("/3/0/2", None),
        ]
        assert [(e.path, e.reported) for e in await store.get_snapshot("d2")] == [("/1/0/1", value(b"60", 3.0))]

    run(make_store, write)
    reopen(make_store, check)


def test_a_burst_of_concurrent_calls_is_served_not_refused(make_store: StoreFactory) -> None:
    """A registration storm or a busy API makes hundreds of store calls at once: each waits its turn for a
    connection (Redis: a bounded pool) and none fails for want of one."""

    async def scenario(store: Store) -> None:
        devices = [device(f"burst-{i:03d}", f"ep-burst-{i}") for i in range(400)]
        await asyncio.gather(*(store.put_device(d) for d in devices))
        found = await asyncio.gather(*(store.get_device(d.id) for d in devices))
        assert found == devices
        await store.put_registered_devices(devices)
        assert await store.count_devices(A) == 400

    run(make_store, scenario)

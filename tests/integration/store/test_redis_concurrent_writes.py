"""Two nodes writing one device at once through one Redis: whichever writes last, the indexes and the
endpoint-name key left behind are those of the record left behind.

Each race holds node A's write after it has read what the account's indexes hold (`devix`) and the records, and before
its index write reaches Redis (issue 31 #2: the record is written first, in the device's slot; the indexes after, in the
account's), lets node B change the device meanwhile, then lets A finish: the interleaving in which A would make the
indexes follow a record that is no longer the one stored."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import AsyncIterator, Awaitable, Callable

import msgspec
import pytest

from devicehub.domain.model import Device, DeviceRequest, ObservationRecord, Registration, ReportedValue
from devicehub.domain.storage.device_query import Condition, DeviceQuery
from devicehub.errors import Unavailable
from devicehub.store.redis.connection import WATCH_ATTEMPTS
from devicehub.store.redis.store import RedisStore
from devicehub.store.redis.writes import Writes
from support.waiting import eventually

pytestmark = pytest.mark.redis

A = "a" * 32
_prefixes = itertools.count()

BASE = Device(
    id="d1",
    account_id=A,
    endpoint_name="ep-1",
    state="registered",
    created_at=1.0,
    updated_at=2.0,
    last_seen_at=2.0,
)


class HeldBeforeMulti:
    """Holds the first index write a store sends (its checked script, `_write_checked`) until `release` is set: the
    store has read what it replaces and written no index yet. Later writes (a retry, another call) pass once it is
    released."""

    def __init__(self, store: RedisStore) -> None:
        self.reached = asyncio.Event()
        self.release = asyncio.Event()
        write = store._write_checked

        async def held_write(writes: Writes) -> bool:
            self.reached.set()
            await self.release.wait()
            return await write(writes)

        store._write_checked = held_write  # type: ignore[method-assign]  # this store only: node B's pass


Race = Callable[[RedisStore, RedisStore], Awaitable[None]]


@contextlib.asynccontextmanager
async def two_nodes(redis_url: str) -> AsyncIterator[tuple[RedisStore, RedisStore]]:
    """Two stores on one Redis and one key prefix, as two service nodes hold them."""
    prefix = f"race{next(_prefixes)}:"
    node_a, node_b = RedisStore(redis_url, prefix=prefix), RedisStore(redis_url, prefix=prefix)
    await node_a.open()
    await node_b.open()
    try:
        yield node_a, node_b
    finally:
        await node_a.close()
        await node_b.close()


def race(
    redis_url: str,
    node_a_writes: Race,
    node_b_writes: Race,
    check: Race,
    *,
    start: Device = BASE,
    prepare: Race | None = None,
) -> None:
    """Store `start` (and what `prepare` writes); start A's write and hold it before its index write; run B's write to
    the end; release A; check."""

    async def main() -> None:
        async with two_nodes(redis_url) as (node_a, node_b):
            await node_b.put_device(start)
            if prepare is not None:
                await prepare(node_a, node_b)
            hold = HeldBeforeMulti(node_a)
            writing = asyncio.ensure_future(node_a_writes(node_a, node_b))
            await asyncio.wait({writing, asyncio.ensure_future(hold.reached.wait())}, return_when="FIRST_COMPLETED")
            assert hold.reached.is_set() and not writing.done(), "node A wrote no index"
            await node_b_writes(node_a, node_b)
            hold.release.set()
            await writing
            await check(node_a, node_b)

    asyncio.run(asyncio.wait_for(main(), 20))


async def indexes_holding(store: RedisStore, device_id: str) -> set[str]:
    """Every id index (sorted set) that lists the device."""
    keys = [k.decode() async for k in store.redis.scan_iter(match=store.prefix + "devices*")]
    return {k for k in keys if await store.redis.zscore(k, device_id) is not None}


async def names_pointing_at(store: RedisStore, device_id: str) -> set[str]:
    """Every endpoint name's ids per account whose entry for the account is the device's id."""
    keys = [k.decode() async for k in store.redis.scan_iter(match=store.prefix + "device_ep:*")]
    return {k for k in keys if await store.redis.hget(k, A) == device_id.encode()}


async def assert_indexes_follow(store: RedisStore, device_id: str) -> None:
    """The device is in exactly the indexes, and named by exactly the endpoint-name key, its stored record implies
    (none of either once it is deleted)."""
    stored = await store.get_device(device_id)
    expected_indexes = set() if stored is None else set(store._device_indexes(stored))
    expected_names = set() if stored is None else {store.keys.ep("device_ep", stored.endpoint_name)}
    assert await indexes_holding(store, device_id) == expected_indexes
    assert await names_pointing_at(store, device_id) == expected_names


def gateway_is(value: str) -> DeviceQuery:
    return DeviceQuery((Condition("host_gateway", "eq", (value,)),))


def test_a_device_written_by_two_nodes_at_once_is_indexed_as_the_last_write_left_it(redis_url: str) -> None:
    """Node A expires the device (state deregistered) while node B stores its Update naming gateway g1: B's record
    is written last, so the device is registered behind g1, and A's index write, which read A's record, does not
    leave it found as deregistered."""
    expired = msgspec.structs.replace(BASE, state="deregistered", updated_at=3.0)
    behind_g1 = msgspec.structs.replace(BASE, host_gateway="g1", updated_at=3.0)

    async def a_writes(node_a: RedisStore, _: RedisStore) -> None:
        await node_a.put_device(expired)

    async def b_writes(_: RedisStore, node_b: RedisStore) -> None:
        await node_b.put_device(behind_g1)

    async def check(_: RedisStore, node_b: RedisStore) -> None:
        assert await node_b.get_device("d1") == behind_g1
        assert await node_b.count_devices(A, query=gateway_is("g1")) == 1
        assert await node_b.count_devices(A, state="deregistered") == 0
        await assert_indexes_follow(node_b, "d1")

    race(redis_url, a_writes, b_writes, check)


def test_a_batch_of_registrations_racing_another_nodes_write_leaves_no_stale_index_or_name(redis_url: str) -> None:
    """Node A stores a batch of registrations (`put_registered_devices`) with the device as it first was and a new
    one, while node B stores the device under another endpoint name behind gateway g1: B's record is the last, so
    A's name and A's indexes no longer lead to the device; B's do."""
    renamed = msgspec.structs.replace(BASE, endpoint_name="ep-2", host_gateway="g1", updated_at=3.0)
    registered = msgspec.structs.replace(BASE, lifetime=60, updated_at=4.0)
    other = msgspec.structs.replace(BASE, id="d2", endpoint_name="ep-other", updated_at=4.0)

    async def a_writes(node_a: RedisStore, _: RedisStore) -> None:
        await node_a.put_registered_devices([registered, other])

    async def b_writes(_: RedisStore, node_b: RedisStore) -> None:
        await node_b.put_device(renamed)

    async def check(_: RedisStore, node_b: RedisStore) -> None:
        assert await node_b.get_device("d1") == renamed
        assert await node_b.find_device(A, "ep-2") == renamed
        assert await node_b.find_device(A, "ep-1") is None
        assert await node_b.count_devices(A, query=gateway_is("g1")) == 1
        await assert_indexes_follow(node_b, "d1")
        await assert_indexes_follow(node_b, "d2")

    race(redis_url, a_writes, b_writes, check)


def test_a_registration_batch_drops_a_subscription_with_its_mark_whatever_runs_between(redis_url: str) -> None:
    """A full registration drops the device's subscriptions and their snapshot marks in one step (issue 31 #2: one
    script in the device's slot, so there is no read to race): however another node's subscription interleaves,
    a subscription is never left without its mark."""
    registered = msgspec.structs.replace(BASE, lifetime=60, updated_at=4.0)

    async def main() -> None:
        async with two_nodes(redis_url) as (node_a, node_b):
            await node_b.put_device(BASE)

            async def subscribe() -> None:
                await node_b.add_subscription("k1", "d1", "/3/0/0")
                await node_b.set_subscribed("d1", "/3/0/0", True)

            for _ in range(20):
                await asyncio.gather(node_a.put_registered_devices([registered]), subscribe())
                marks = {e.path: e.subscribed for e in await node_b.get_snapshot("d1")}
                for _, path in await node_b.subscribers("d1"):
                    assert marks.get(path) is True

    asyncio.run(asyncio.wait_for(main(), 20))


def test_a_device_deleted_while_another_node_writes_it_leaves_nothing_behind(redis_url: str) -> None:
    """`DELETE /v3/devices/{id}` on node A while node B stores an Update naming gateway g1, adds a subscription and
    queues a request for the device: B's record comes after the delete, so the device is back with B's values, and
    A's index write (after its delete) does not take it out of the indexes its record names."""
    behind_g1 = msgspec.structs.replace(BASE, host_gateway="g1", updated_at=3.0)
    queued = DeviceRequest(
        async_id="r1",
        key_id="k1",
        account_id=A,
        device_id="d1",
        method="GET",
        uri="/3/0/0",
        created_at=3.0,
        expires_at=9.0,
    )

    async def a_deletes(node_a: RedisStore, _: RedisStore) -> None:
        await node_a.delete_device("d1")

    async def b_writes(_: RedisStore, node_b: RedisStore) -> None:
        await node_b.put_device(behind_g1)
        await node_b.add_subscription("k1", "d1", "/3/0/0")
        await node_b.enqueue_request(queued)

    async def check(_: RedisStore, node_b: RedisStore) -> None:
        assert await node_b.get_device("d1") == behind_g1
        assert await node_b.count_devices(A, query=gateway_is("g1")) == 1
        assert await node_b.list_subscriptions("k1", "d1") == ["/3/0/0"]
        assert await node_b.all_pending_requests() == [queued]
        await assert_indexes_follow(node_b, "d1")

    race(redis_url, a_deletes, b_writes, check)


def test_a_deleted_device_leaves_nothing_behind(redis_url: str) -> None:
    """A delete takes the device out of its slot, its indexes, its name, the last-seen index and the queue."""
    behind_g1 = msgspec.structs.replace(BASE, host_gateway="g1", updated_at=3.0)
    queued = DeviceRequest(
        async_id="r1", key_id="k1", account_id=A, device_id="d1", method="GET", uri="/3/0/0", created_at=3.0,
        expires_at=9.0,
    )  # fmt: skip

    async def main() -> None:
        async with two_nodes(redis_url) as (node_a, node_b):
            await node_b.put_device(behind_g1)
            await node_b.add_subscription("k1", "d1", "/3/0/0")
            await node_b.enqueue_request(queued)
            await node_a.delete_device("d1")
            assert await node_b.get_device("d1") is None
            assert await node_b.count_devices(A, query=gateway_is("g1")) == 0
            assert await node_b.list_subscriptions("k1", "d1") == []
            assert await node_b.all_pending_requests() == [] and await node_b.find_request("k1", "r1") is None
            assert await node_b.devices_last_seen_before(1e9) == []
            await assert_indexes_follow(node_b, "d1")

    asyncio.run(asyncio.wait_for(main(), 20))


def registration(updated_at: float) -> Registration:
    return Registration(
        device_id="d1",
        account_id=A,
        endpoint_name="ep-1",
        lifetime=60,
        host="127.0.0.1",
        port=5001,
        registered_at=updated_at,
        updated_at=updated_at,
        expires_at=updated_at + 153,
    )


async def observation_keys(store: RedisStore) -> set[str]:
    """Every stored observation record's key (`obs:{obs:<token>}`), pointed to by a registration's token set or not."""
    return {k.decode() async for k in store.redis.scan_iter(match=store.prefix + "obs:*")}


def test_a_register_and_another_nodes_observation_leave_no_record_that_no_token_names(redis_url: str) -> None:
    """A Register (`put_registrations(fresh=...)`) ends the device's earlier observations, record and token alike,
    while node B stores an observation at the same time: whichever comes first, every `obs` record left is named by
    the device's token set and every token names a record (a record no token names is a key leak, found again by a
    notification's token lookup)."""
    earlier = ObservationRecord(token=b"\x01", device_id="d1", path="/3/0/0")
    after_register = ObservationRecord(token=b"\x03", device_id="d1", path="/3/0/0", auto=True)

    async def main() -> None:
        async with two_nodes(redis_url) as (node_a, node_b):
            for n in range(20):
                await node_b.put_registrations([registration(100.0 + n)], [earlier])
                meanwhile = ObservationRecord(token=bytes([0x10 + n]), device_id="d1", path="/3/0/1")
                await asyncio.gather(
                    node_a.put_registrations([registration(200.0 + n)], [after_register], fresh=["d1"]),
                    node_b.put_observation(meanwhile),
                )
                named = {node_b.keys.named("obs", o.token.hex()) for o in await node_b.device_observations("d1")}
                tokens = await node_b.redis.smembers(node_b.keys.dev("reg_obs", "d1"))
                assert len(named) == len(tokens)
                assert await observation_keys(node_b) == named
                assert after_register in await node_b.device_observations("d1")
                assert await node_b.get_observation(earlier.token) is None

    asyncio.run(asyncio.wait_for(main(), 20))


def test_the_index_backfill_adds_no_entry_of_a_value_another_node_replaced_meanwhile(redis_url: str) -> None:
    """The one-time fill of the value indexes (a database of the previous release, opened by this one) reads the
    records and then indexes them: node B moving the device from gateway g1 to g2 in between (B's write indexes
    it under g2) does not leave the device found behind g1."""
    behind_g1 = msgspec.structs.replace(BASE, host_gateway="g1")
    behind_g2 = msgspec.structs.replace(BASE, host_gateway="g2", updated_at=3.0)

    async def as_the_previous_release_left_it(_: RedisStore, node_b: RedisStore) -> None:
        value_indexes = [k async for k in node_b.redis.scan_iter(match=node_b.prefix + "devices_by:*")]
        await node_b.redis.delete(*value_indexes, node_b.prefix + "device_indexes")

    async def a_backfills(node_a: RedisStore, _: RedisStore) -> None:
        await node_a._index_existing_devices()  # what `open` runs first on such a database

    async def b_writes(_: RedisStore, node_b: RedisStore) -> None:
        await node_b.put_device(behind_g2)

    async def check(_: RedisStore, node_b: RedisStore) -> None:
        assert await node_b.count_devices(A, query=gateway_is("g1")) == 0
        assert await node_b.count_devices(A, query=gateway_is("g2")) == 1
        await assert_indexes_follow(node_b, "d1")

    race(redis_url, a_backfills, b_writes, check, start=behind_g1, prepare=as_the_previous_release_left_it)


def test_a_write_that_loses_every_race_gives_up_with_unavailable(redis_url: str) -> None:
    """A write whose device another node changes before each of its index attempts gives up after `WATCH_ATTEMPTS`
    with `Unavailable` (503, retry later) instead of looping; the record and indexes are the other node's, whose
    writes came after."""

    async def main() -> None:
        async with two_nodes(redis_url) as (node_a, node_b):
            await node_b.put_device(BASE)
            attempts = itertools.count(1)
            write = node_a._write_checked

            async def write_after_b_wrote(writes: Writes) -> bool:
                n = next(attempts)  # a gateway of its own each time: B's write changes the indexes too
                await node_b.put_device(msgspec.structs.replace(BASE, host_gateway=f"g{n}", updated_at=float(n)))
                return await write(writes)

            node_a._write_checked = write_after_b_wrote  # type: ignore[method-assign]
            with pytest.raises(Unavailable):
                await node_a.put_device(msgspec.structs.replace(BASE, state="deregistered"))
            assert next(attempts) == WATCH_ATTEMPTS + 1
            stored = await node_b.get_device("d1")
            assert stored is not None and stored.state == "registered"
            await assert_indexes_follow(node_b, "d1")

    asyncio.run(asyncio.wait_for(main(), 20))


def test_a_batch_of_registrations_is_read_after_redis_forgot_its_script(redis_url: str) -> None:
    """A Redis restarted since the store opened has no scripts: the batch's read sends the script itself."""

    async def main() -> None:
        store = RedisStore(redis_url, prefix=f"race{next(_prefixes)}:")
        await store.open()
        try:
            await store.put_device(msgspec.structs.replace(BASE, host_gateway="g1"))
            await store.redis.script_flush()
            await store.put_registered_devices([BASE])
            assert await store.get_device("d1") == BASE
            await assert_indexes_follow(store, "d1")
        finally:
            await store.close()

    asyncio.run(asyncio.wait_for(main(), 20))


def test_a_delete_racing_a_flush_in_flight_leaves_no_snapshot_keys(redis_url: str) -> None:
    """The delete's `flush()` did not wait for a flush already in flight: its HSET of the device's values reached
    Redis after the delete's DEL and made the snapshot keys again, orphans that no later delete removed. The flush is
    held before it writes until the delete either ended (the race) or waits for it."""

    async def scenario(store: RedisStore) -> tuple[int, list[object]]:
        await store.put_registered_devices([BASE], [], [])
        gate = asyncio.Event()
        write = store._reported._write

        async def held(pending: dict[str, dict[str, ReportedValue]]) -> None:
            await gate.wait()
            await write(pending)

        store._reported._write = held
        await store.set_reported("d1", "/3/0/9", ReportedValue(value=b"gone", content_type="text/plain", reported_at=1))
        in_flight = asyncio.ensure_future(store._reported.flush())
        await eventually(lambda: len(store._reported._writing) == 1)
        deleting = asyncio.ensure_future(store.delete_device("d1"))
        await eventually(lambda: deleting.done() or getattr(store._reported, "_completion", None) is not None)
        gate.set()
        await asyncio.gather(in_flight, deleting)
        keys = [store.keys.dev(part, "d1") for part in ("snap_paths", "snap_rep")]
        return int(await store.redis.exists(*keys)), list(await store.get_snapshot("d1"))

    async def main() -> tuple[int, list[object]]:
        async with two_nodes(redis_url) as (store, _):
            return await scenario(store)

    assert asyncio.run(asyncio.wait_for(main(), 20)) == (0, [])

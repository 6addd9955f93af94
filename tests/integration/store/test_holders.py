"""Redis mode: device holders and work handed to them through their work streams (store/redis/holders.py, issue 31 #1),
on a real Redis and on a Redis Cluster of three primaries (the fixtures of this directory): nodes here are
`HolderLink`s on one database, as `devicehub serve` nodes have one each."""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from contextlib import asynccontextmanager
from typing import Any

import msgspec
import pytest
import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster

from devicehub.domain.handover import CANCEL, OBSERVE, REQUESTS, DeviceWork
from devicehub.store.redis.connection import is_cluster
from devicehub.store.redis.holders import GROUP, SWEEP_GRACE_S, HolderLink
from devicehub.store.redis.writes import GROUP_DEVICES
from support.waiting import eventually

Handler = Callable[[DeviceWork], Awaitable[None]]


@pytest.fixture(params=["redis", "redis-cluster"])
def redis_url(request: pytest.FixtureRequest) -> str:
    """This directory's single Redis, or its Redis Cluster (issue 31 #2: a node's heartbeat and stream share a slot)."""
    return str(request.getfixturevalue("redis_cluster_url" if request.param == "redis-cluster" else "single_redis_url"))


_prefixes = iter(range(1_000_000))


class Node:
    """One node's link and the work it was handed."""

    def __init__(self, client: Any, prefix: str, node_id: str) -> None:
        self.link = HolderLink(client, prefix, node_id)
        self.done: list[DeviceWork] = []
        self.arrived = asyncio.Event()

    async def handle(self, work: DeviceWork) -> None:
        self.done.append(work)
        self.arrived.set()

    async def received(self, count: int) -> list[DeviceWork]:
        async with asyncio.timeout(5):
            while len(self.done) < count:
                self.arrived.clear()
                await self.arrived.wait()
        return self.done


@asynccontextmanager
async def database(redis_url: str) -> AsyncIterator[tuple[Any, str]]:
    client: Any = (
        RedisCluster.from_url(redis_url) if await is_cluster(redis_url) else aioredis.Redis.from_url(redis_url)
    )
    try:
        yield client, f"holders{next(_prefixes)}:"
    finally:
        await client.aclose()


def run(scenario: Callable[[], Coroutine[Any, Any, None]]) -> None:
    asyncio.run(asyncio.wait_for(scenario(), 20))


def test_work_taken_by_another_node_reaches_the_holder_and_is_acknowledged(redis_url: str) -> None:
    async def scenario() -> None:
        async with database(redis_url) as (client, prefix):
            a, b = Node(client, prefix, "node-a"), Node(client, prefix, "node-b")
            for node in (a, b):
                await node.link.start(node.handle)
            try:
                await b.link.took(["d1"])
                assert b.link.holds("d1") and not a.link.holds("d1")
                assert not await b.link.hand_over(DeviceWork(REQUESTS, "d1"))  # its own device: done where it is
                observe = DeviceWork(OBSERVE, "d1", key_id="k1", pattern="/3/0/9", async_id="x1")
                assert await a.link.hand_over(observe)
                assert await b.received(1) == [observe]
                assert a.done == []
                await eventually(lambda: b.link.taken == 1)
                pending = await client.xpending(f"{prefix}work:{{node:node-b}}", GROUP)
                assert pending["pending"] == 0  # acknowledged once done
                assert (a.link.sent, a.link.orphaned, b.link.taken) == (1, 0, 1)
                assert not await a.link.hand_over(DeviceWork(REQUESTS, "unknown"))  # held by no node
            finally:
                for node in (a, b):
                    await node.link.close()

    run(scenario)


def test_a_device_taken_by_another_node_is_released_by_its_old_holder(redis_url: str) -> None:
    async def scenario() -> None:
        async with database(redis_url) as (client, prefix):
            a, b = Node(client, prefix, "node-a"), Node(client, prefix, "node-b")
            for node in (a, b):
                await node.link.start(node.handle)
            try:
                await a.link.took(["d1"])
                await b.link.took(["d1"])  # the device's Update reached node B (a NAT rebinding, a balancer)
                await eventually(lambda: not a.link.holds("d1"))
                assert await a.link.hand_over(DeviceWork(REQUESTS, "d1"))  # so A hands its work to B now
                assert await b.received(1) == [DeviceWork(REQUESTS, "d1")]
                await a.link.released("d1")  # no longer A's: B's record stays
                assert await client.get(f"{prefix}holder:{{dev:d1}}") == b"node-b"
                await b.link.released("d1")
                assert await client.get(f"{prefix}holder:{{dev:d1}}") is None
            finally:
                for node in (a, b):
                    await node.link.close()

    run(scenario)


def test_work_for_a_holder_that_is_gone_is_not_handed_over_and_is_counted(redis_url: str) -> None:
    async def scenario() -> None:
        async with database(redis_url) as (client, prefix):
            a, b = Node(client, prefix, "node-a"), Node(client, prefix, "node-b")
            await a.link.start(a.handle)
            await b.link.start(b.handle)
            await b.link.took(["d1"])
            await b.link.close()  # a graceful stop ends its heartbeat at once (a killed node's runs out)
            try:
                assert not await a.link.hand_over(DeviceWork(REQUESTS, "d1"))
                assert (a.link.sent, a.link.orphaned) == (0, 1)
                await a.link.took(["d1"])  # the device's next contact, on node A
                assert a.link.holds("d1")
                assert not await client.exists(
                    f"{prefix}work:{{node:node-b}}"
                )  # nothing is left for a node that is gone
            finally:
                await a.link.close()

    run(scenario)


@asynccontextmanager
async def holder_of_d1_d2_gone(redis_url: str) -> AsyncIterator[tuple[Any, str, Node, Node]]:
    """Nodes A and C on one database, devices d1 and d2 held by node B, which is gone (a graceful stop ends its
    heartbeat at once; a killed node's runs out the same way, ALIVE_TTL_S later)."""
    async with database(redis_url) as (client, prefix):
        a, b, c = Node(client, prefix, "node-a"), Node(client, prefix, "node-b"), Node(client, prefix, "node-c")
        for node in (a, b, c):
            await node.link.start(node.handle)
        await b.link.took(["d1", "d2"])
        await b.link.close()
        try:
            yield client, prefix, a, c
        finally:
            for node in (a, c):
                await node.link.close()


def test_an_observe_for_a_device_whose_holder_is_gone_waits_for_the_node_that_takes_the_device_next(
    redis_url: str,
) -> None:
    """Issue 31 #1/#4: an observe and a cancel taken once the holder is gone wait in the device's slot, in order, and
    come with the device to the node it reaches next (not to the node that took them, nor to another node)."""

    async def scenario() -> None:
        async with holder_of_d1_d2_gone(redis_url) as (client, prefix, a, c):
            observe = DeviceWork(
                OBSERVE, "d1", key_id="k1", pattern="/3/0/9", async_id="x1", expires_at=time.time() + 60
            )
            cancel = DeviceWork(CANCEL, "d1", key_id="k1", pattern="/3/0/7")
            assert await a.link.hand_over(observe)  # taken: it waits for the device, not done at A
            assert await a.link.hand_over(cancel)
            assert not await a.link.hand_over(DeviceWork(REQUESTS, "d1"))  # a request's queue waits in the store
            assert (a.link.sent, a.link.orphaned) == (0, 3)
            # kept as long as its latest work may wait: the cancel's default (a device request's, 2 h), and the
            # sweep's grace
            assert 60_000 < await client.pttl(f"{prefix}pending:{{dev:d1}}") <= (7200 + SWEEP_GRACE_S) * 1000
            assert await c.link.took(["d2"]) == []  # another device brings nothing
            assert await c.link.took(["d1"]) == [observe, cancel]  # d1's next contact reached node C
            assert not await client.exists(f"{prefix}pending:{{dev:d1}}")  # taken once
            assert await client.get(f"{prefix}holder:{{dev:d1}}") == b"node-c"
            assert (a.done, c.done, c.link.waited) == ([], [], 2)  # returned to the caller, not handed
            await c.link.released("d1")
            await c.link.took(["d1"])
            assert await a.link.hand_over(observe)  # held by a live node again: handed to C
            assert await c.received(1) == [observe]

    run(scenario)


def test_an_observe_that_waited_past_its_expiry_is_taken_out_of_the_wait_by_exactly_one_node(redis_url: str) -> None:
    """Issue 31 #4's leftover: a device that never comes back left its waiting observe unanswered. Past the observe's
    expiry the nodes' expiry passes take it out of the device's list, one node only however many sweep at once; what
    has not expired (or names no expiry) keeps waiting for the device, and an observe the device's next node took
    first is not returned by the sweep as well."""

    async def scenario() -> None:
        async with holder_of_d1_d2_gone(redis_url) as (client, prefix, a, c):
            now = time.time()
            soon = DeviceWork(OBSERVE, "d1", key_id="k1", pattern="/3/0/9", async_id="x1", expires_at=now + 60)
            later = DeviceWork(OBSERVE, "d1", key_id="k1", pattern="/3/0/7", async_id="x2", expires_at=now + 600)
            cancel = DeviceWork(CANCEL, "d1", key_id="k1", pattern="/3/0/8")  # no expiry of its own
            other = DeviceWork(OBSERVE, "d2", key_id="k2", pattern="/3/0/9", async_id="x3", expires_at=now + 60)
            for work in (soon, later, cancel, other):
                assert await a.link.hand_over(work)
            assert await a.link.expired_waiting(now + 59) == []  # nothing expired yet
            assert await c.link.took(["d2"]) == [other]  # d2 came back first: its observe is made there
            swept = await asyncio.gather(a.link.expired_waiting(now + 61), c.link.expired_waiting(now + 61))
            assert sorted(swept, key=len) == [[], [soon]]  # one node has it, whichever swept first
            assert (a.link.expired + c.link.expired) == 1
            assert await a.link.expired_waiting(now + 61) == []  # once
            waiting = f"{prefix}pending:{{dev:d1}}"
            assert [msgspec.msgpack.decode(e, type=DeviceWork) for e in await client.lrange(waiting, 0, -1)] == [
                later,
                cancel,
            ]
            assert await c.link.took(["d1"]) == [later, cancel]  # the rest comes with the device
            assert await a.link.expired_waiting(now + 601) == []  # taken with the device: not answered twice
            assert await client.zcard(f"{prefix}waiting:{{waiting}}") == 0  # and the index is left empty

    run(scenario)


def test_work_that_would_wait_for_a_device_taken_meanwhile_goes_to_the_node_that_took_it(redis_url: str) -> None:
    """The holder record is checked when the work is left waiting (park_work.lua): a device a live node took between
    the reads gets its work handed to that node, never left in a list nobody takes."""

    async def scenario() -> None:
        async with database(redis_url) as (client, prefix):
            a, c = Node(client, prefix, "node-a"), Node(client, prefix, "node-c")
            for node in (a, c):
                await node.link.start(node.handle)
            await client.set(f"{prefix}holder:{{dev:d1}}", "node-b")  # a node that never beat: gone
            try:
                real_park = a.link._park

                async def took_meanwhile(**kwargs: Any) -> Any:
                    await c.link.took(["d1"])  # the device reached node C between A's reads
                    a.link._park = real_park
                    return await real_park(**kwargs)

                a.link._park = took_meanwhile  # type: ignore[assignment]
                observe = DeviceWork(OBSERVE, "d1", key_id="k1", pattern="/3/0/9", async_id="x1")
                assert await a.link.hand_over(observe)
                assert await c.received(1) == [observe]
                assert (a.link.sent, a.link.orphaned) == (1, 0)
                assert not await client.exists(f"{prefix}pending:{{dev:d1}}")
            finally:
                for node in (a, c):
                    await node.link.close()

    run(scenario)


def test_work_handed_over_while_the_holder_was_cut_off_or_unacknowledged_at_a_crash_is_done_at_its_return(
    redis_url: str,
) -> None:
    async def scenario() -> None:
        async with database(redis_url) as (client, prefix):
            a = Node(client, prefix, "node-a")
            await a.link.start(a.handle)
            # node B as it stands cut off from Redis: it holds d1, its group exists, its heartbeat has not run out
            # yet, and nothing reads its stream
            await client.set(f"{prefix}holder:{{dev:d1}}", "node-b")
            await client.xgroup_create(f"{prefix}work:{{node:node-b}}", GROUP, id="0", mkstream=True)
            await client.set(f"{prefix}alive:{{node:node-b}}", "1", px=5000)
            first, second = DeviceWork(REQUESTS, "d1"), DeviceWork(OBSERVE, "d1", "k1", "/3/0/9", "x2")
            assert await a.link.hand_over(first)
            assert await a.link.hand_over(second)
            # the first is read and never acknowledged (B crashed while doing it)
            read = await client.xreadgroup(GROUP, "node-b", {f"{prefix}work:{{node:node-b}}": ">"}, count=1)
            assert len(read[0][1]) == 1
            back = Node(client, prefix, "node-b")  # node B back, same node id
            await back.link.start(back.handle)
            try:
                assert await back.received(2) == [first, second]
                await eventually(lambda: back.link.taken == 2)
                assert (await client.xpending(f"{prefix}work:{{node:node-b}}", GROUP))["pending"] == 0
            finally:
                await back.link.close()
                await a.link.close()
            # all done: the streams went with their nodes (a node id made per process is never seen again)
            assert await client.exists(f"{prefix}work:{{node:node-a}}", f"{prefix}work:{{node:node-b}}") == 0

    run(scenario)


def test_work_handed_to_a_holder_that_died_before_doing_it_is_done_by_the_node_that_takes_the_device(
    redis_url: str,
) -> None:
    """issue 31 #4: a node killed with work in its stream (handed while its heartbeat still ran, or read and never
    acknowledged) leaves it to the device's next node: the node that takes the device claims, once the dead node's
    heartbeat has run out, the entries of that device it had not done (not the ones done, nor other devices')."""

    async def scenario() -> None:
        async with database(redis_url) as (client, prefix):
            a, c = Node(client, prefix, "node-a"), Node(client, prefix, "node-c")
            for node in (a, c):
                await node.link.start(node.handle)
            stream = f"{prefix}work:{{node:node-b}}"
            # node B as a kill leaves it: it holds d1 and d2, its heartbeat runs out soon
            await client.set(f"{prefix}holder:{{dev:d1}}", "node-b")
            await client.set(f"{prefix}holder:{{dev:d2}}", "node-b")
            await client.xgroup_create(stream, GROUP, id="0", mkstream=True)
            await client.set(f"{prefix}alive:{{node:node-b}}", "1", px=300)
            done = DeviceWork(REQUESTS, "d1")
            in_hand = DeviceWork(OBSERVE, "d1", "k1", "/3/0/9", "x1")
            waiting = DeviceWork(OBSERVE, "d1", "k1", "/3/0/13", "x2")
            other = DeviceWork(OBSERVE, "d2", "k1", "/3/0/9", "x3")
            for work in (done, in_hand, waiting, other):
                assert await a.link.hand_over(work)
            read = await client.xreadgroup(GROUP, "node-b", {stream: ">"}, count=2)
            await client.xack(stream, GROUP, read[0][1][0][0])  # B did the first, died doing the second
            try:
                await c.link.took(["d1"])  # d1's next contact reached node C
                assert await c.received(2) == [in_hand, waiting]
                await eventually(lambda: c.link.salvaged == 2)
                left = [
                    msgspec.msgpack.decode(fields[b"w"], type=DeviceWork) for _, fields in await client.xrange(stream)
                ]
                # the entry done, d2's (left for d2's next node), and the word that B holds d1 no more
                assert [(w.kind, w.device_id) for w in left] == [(REQUESTS, "d1"), (OBSERVE, "d2"), ("release", "d1")]
            finally:
                for node in (a, c):
                    await node.link.close()

    run(scenario)


def test_devices_taken_in_one_batch_each_bring_their_waiting_work_in_few_script_calls(redis_url: str) -> None:
    """Issue 30 #5: a registration batch's devices are taken at once: on one Redis a group of `GROUP_DEVICES` devices
    is one script call (INFO commandstats), on a cluster one per device (its slot); whichever group a device is in, its
    holder record names the node and the work that waited for it comes with it."""

    async def scenario() -> None:
        async with database(redis_url) as (client, prefix):
            b, c = Node(client, prefix, "node-b"), Node(client, prefix, "node-c")
            for node in (b, c):
                await node.link.start(node.handle)
            ids = [f"d{n:03d}" for n in range(2 * GROUP_DEVICES + 22)]
            late = ids[-3]  # in the last group
            await b.link.took([late])
            await b.link.close()  # gone: an observe for its device waits for the device
            try:
                observe = DeviceWork(OBSERVE, late, key_id="k1", pattern="/3/0/9", async_id="x1")
                assert await c.link.hand_over(observe)
                one_redis = not isinstance(client, RedisCluster)
                before = (await client.info("commandstats")).get("cmdstat_eval", {}).get("calls", 0)
                assert await c.link.took(ids) == [observe]
                calls = (await client.info("commandstats")).get("cmdstat_eval", {}).get("calls", 0) - before
                assert [await client.get(f"{prefix}holder:{{dev:{d}}}") for d in ids] == [b"node-c"] * len(ids)
                if one_redis:  # the groups, and the release told to the device's previous holder (hand_over.lua)
                    assert calls == math.ceil(len(ids) / GROUP_DEVICES) + 1
            finally:
                await c.link.close()

    run(scenario)

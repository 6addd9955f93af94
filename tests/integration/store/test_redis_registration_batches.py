"""Issue 30 #5: a batch of first registrations in Redis mode, on a real redis-server. On one Redis the device records
of a group of `GROUP_DEVICES` devices are one script call, and so are their registrations with their observation
records (there are no slots to keep apart), where each device used to take two script calls and an observation SET
of its own; counted in the server's own command statistics. On the 3-primary cluster each device keeps a call of
its own in its slot. On both, a batch of several groups reads back whole."""

from __future__ import annotations

import asyncio
import itertools
import math
from typing import Any

import pytest
import redis.asyncio as aioredis

from devicehub.domain.device_log import new_event
from devicehub.domain.model import Device, ObservationRecord, Registration, ReportedValue, ResourceLink
from devicehub.store.redis.codec import encode
from devicehub.store.redis.store import RedisStore
from devicehub.store.redis.writes import GROUP_DEVICES
from support.stores import A

pytestmark = pytest.mark.redis

_prefixes = itertools.count()
COUNT = 2 * GROUP_DEVICES + 22  # three groups on one Redis
LINKS = (ResourceLink("/3/0/0"), ResourceLink("/3/0/9"), ResourceLink("/3303/0/5700"))


def _batch(
    tag: str,
) -> tuple[list[Device], list[tuple[str, str, ReportedValue]], list[Registration], list[ObservationRecord]]:
    ids = [f"{tag}{n:05d}".ljust(32, "0") for n in range(COUNT)]
    devices = [
        Device(
            id=i,
            account_id=A,
            endpoint_name=f"ep-{i}",
            endpoint_type="sensor",
            resources=LINKS,
            created_at=1.0,
            updated_at=2.0,
            last_seen_at=3.0,
        )
        for i in ids
    ]
    values = [
        (i, "/3/0/0", ReportedValue(value=i.encode() + b"\xff\x00", content_type="text/plain", reported_at=3.0))
        for i in ids
    ]
    registrations = [
        Registration(
            device_id=i,
            account_id=A,
            endpoint_name=f"ep-{i}",
            lifetime=60,
            links=LINKS,
            host="127.0.0.1",
            port=5683,
            registered_at=2.0,
            updated_at=2.0,
            expires_at=62.0,
        )
        for i in ids
    ]
    observations = [
        ObservationRecord(token=n.to_bytes(2, "big") + tag.encode(), device_id=i, path="/3/0/9", auto=True)
        for n, i in enumerate(ids)
    ]
    return devices, values, registrations, observations


async def _write_and_check(store: RedisStore, tag: str) -> None:
    devices, values, registrations, observations = _batch(tag)
    events = [new_event(A, d.id, "registered", 2.0) for d in devices]
    await store.put_registered_devices(devices, (), values)
    await store.put_registrations(registrations, observations, [d.id for d in devices], events)
    ids = [d.id for d in devices]
    assert await store.get_devices(ids) == devices
    for device, (_, _, value), registration, observation in zip(
        devices, values, registrations, observations, strict=True
    ):
        snapshot = {r.path: r.reported for r in await store.get_snapshot(device.id)}
        assert snapshot == {"/3/0/0": value, "/3/0/9": None, "/3303/0/5700": None}
        assert await store.find_device(A, device.endpoint_name) == device
        assert await store.get_registration(device.id) == registration
        assert await store.device_observations(device.id) == [observation]
    expiring = await store.registrations_expiring(63.0, limit=10 * COUNT)
    assert {r.device_id for r in expiring} >= set(ids)
    listed = await store.list_device_events(A, device_ids=ids, limit=COUNT + 1)
    assert sorted(e.id for e in listed) == sorted(e.id for e in events)
    assert [d.id for d in await store.list_devices(A, limit=COUNT + 1)] == ids


@pytest.mark.parametrize("server", ["redis", "redis-cluster"])
def test_a_batch_of_several_groups_reads_back_whole(server: str, request: pytest.FixtureRequest) -> None:
    url = request.getfixturevalue("redis_cluster_url" if server == "redis-cluster" else "redis_url")

    async def main() -> None:
        store = RedisStore(url, prefix=f"batches{next(_prefixes)}:")
        await store.open()
        try:
            await _write_and_check(store, "b")
        finally:
            await store.close()

    asyncio.run(asyncio.wait_for(main(), 60))


async def _script_calls(client: aioredis.Redis) -> int:
    stats = await client.info("commandstats")
    return sum(int(stats.get(f"cmdstat_{c}", {}).get("calls", 0)) for c in ("evalsha", "eval"))


def test_a_batch_of_first_registrations_is_a_script_call_per_group_on_one_redis(redis_url: str) -> None:
    async def main() -> None:
        store = RedisStore(redis_url, prefix=f"batches{next(_prefixes)}:")
        client = aioredis.Redis.from_url(redis_url)
        await store.open()
        try:
            await _write_and_check(store, "w")  # the scripts loaded, the account's indexes made
            devices, values, registrations, observations = _batch("c")
            before = await _script_calls(client)
            await store.put_registered_devices(devices, (), values)
            records = await _script_calls(client) - before
            # the batch kept what it wrote: its index step read the records back without decoding them
            assert all(store._device_record(encode(d)) is d for d in devices)
            await store.put_registrations(registrations, observations, [d.id for d in devices])
            written = await _script_calls(client) - before - records
        finally:
            await store.close()
            await client.aclose()
        groups = math.ceil(COUNT / GROUP_DEVICES)
        assert records == groups + 1  # the groups, and the account's index step (one for the batch)
        assert written == groups + 1  # the groups, and the expiry and index entries' call (one for the batch)

    asyncio.run(asyncio.wait_for(main(), 60))


def test_a_registration_batch_sends_its_expiry_and_index_entries_in_one_script_call_on_one_redis(
    redis_url: str,
) -> None:
    """Fifteenth session: the expiry entries (a ZADD per bucket of the batch's devices, up to 16) and the events'
    account index entries (a ZADD and an SADD per account) went as commands of their own in the batch's pipeline,
    each costing the node redis-py's per-command work; on one Redis they are one script call after the groups. The
    commands the store sends are read from MONITOR (a script's own commands are marked `lua` there)."""

    async def main() -> None:
        store = RedisStore(redis_url, prefix=f"batches{next(_prefixes)}:")
        client = aioredis.Redis.from_url(redis_url)
        await store.open()
        try:
            await _write_and_check(store, "v")  # the scripts loaded
            devices, _, registrations, observations = _batch("m")
            events = [new_event(A, d.id, "registered", 2.0) for d in devices]
            sent: list[str] = []
            async with client.monitor() as monitor:
                listening = asyncio.ensure_future(_commands(monitor, sent))
                await client.echo("start")
                await store.put_registrations(registrations, observations, [d.id for d in devices], events)
                await client.echo("end")
                await asyncio.wait_for(listening, 10)
        finally:
            await store.close()
            await client.aclose()
        groups = math.ceil(COUNT / GROUP_DEVICES)
        assert sent == ["EVALSHA"] * (groups + 1), sent

    asyncio.run(asyncio.wait_for(main(), 60))


async def _commands(monitor: Any, sent: list[str]) -> None:
    """The names of the commands clients (not scripts) sent between ECHO start and ECHO end."""
    started = False
    async for entry in monitor.listen():
        command = str(entry["command"])
        if command == "ECHO start":
            started = True
        elif command == "ECHO end":
            return
        elif started and entry.get("client_type") != "lua":
            sent.append(command.split(" ", 1)[0].upper())

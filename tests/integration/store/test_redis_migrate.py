"""Issue 31 #2: data in the untagged key layout of before Redis Cluster support is refused in one line (exit 2) and
`devicehub store migrate` converts it, after which the store reads everything it held.

The old data is written as raw keys, as the previous release laid them out (its `_k`: prefix + ':'-joined parts,
msgpack records), on a Redis of its own (the command works on the default prefix)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Iterator

import msgspec
import pytest
import redis.asyncio as aioredis

from devicehub.domain.model import (
    Account,
    ApiKey,
    BootstrapConfig,
    ChannelConfig,
    Device,
    DeviceRequest,
    DeviceSharedKey,
    ObservationRecord,
    Registration,
    ReportedValue,
    StoredEvent,
)
from devicehub.store.redis.store import RedisStore
from support.redis_server import redis_server

pytestmark = pytest.mark.redis

A = "a" * 32
KEY = "k" * 32
DEV = "d" * 32
P = "devicehub:"
SEP = "\x1f"
encode = msgspec.msgpack.Encoder().encode

ACCOUNT = Account(id=A, name="acme", tier="commercial", created_at=1.0)
API_KEY = ApiKey(id=KEY, account_id=A, name="ops", key_hash="h" * 64, created_at=2.0)
DEVICE = Device(
    id=DEV, account_id=A, endpoint_name="ep-1", state="registered", created_at=1.0, updated_at=2.0, last_seen_at=50.0,
    host_gateway="g1",
)  # fmt: skip
PSK = DeviceSharedKey(endpoint_name="ep-1", account_id=A, sealed_secret=b"\x00\x01sealed", created_at=3.0)
REGISTRATION = Registration(
    device_id=DEV, account_id=A, endpoint_name="ep-1", lifetime=60, host="127.0.0.1", port=5001,
    registered_at=10.0, updated_at=10.0, expires_at=163.0,
)  # fmt: skip
OBSERVATION = ObservationRecord(token=b"\x0a\x0b", device_id=DEV, path="/3/0/0")
REQUEST = DeviceRequest(
    async_id="r1", key_id=KEY, account_id=A, device_id=DEV, method="GET", uri="/3/0/0", created_at=4.0,
    expires_at=90.0,
)  # fmt: skip
REPORTED = ReportedValue(value=b"42", content_type="text/plain", reported_at=5.0)
CHANNEL = ChannelConfig(key_id=KEY, account_id=A, kind="websocket", created_at=6.0)
EVENT = StoredEvent(0, b"{}", 1)
BOOTSTRAP = BootstrapConfig(
    endpoint_name="ep-boot", account_id=A, server_uri="coap://127.0.0.1:5683", security_mode=3, short_server_id=1,
    lifetime=86400, binding="U", created_at=7.0, updated_at=7.0,
)  # fmt: skip


async def _write_old_layout(url: str) -> None:
    client = aioredis.Redis.from_url(url)
    try:
        await client.set(P + f"account:{A}", encode(ACCOUNT))
        await client.set(P + "account_name:acme", A)
        await client.sadd(P + "accounts", A)
        await client.set(P + f"key:{KEY}", encode(API_KEY))
        await client.set(P + f"key_hash:{API_KEY.key_hash}", KEY)
        await client.zadd(P + f"keys:{A}", {KEY: 2.0})
        await client.set(P + f"device:{DEV}", encode(DEVICE))
        await client.set(P + f"device_ep:{A}:ep-1", DEV)
        for index in (f"devices:{A}", f"devices:{A}:registered", f"devices_by:{A}:host_gateway:g1"):
            await client.zadd(P + index, {DEV: 0})
        await client.zadd(P + "seen", {DEV: 50.0})
        await client.set(P + "device_index_version", "2")
        await client.set(P + "enroll:ep-1", A)
        await client.set(P + "psk:ep-1", encode(PSK))
        await client.sadd(P + "psks", "ep-1")
        await client.sadd(P + f"psks:{A}", "ep-1")
        await client.sadd(P + f"subs:{KEY}:{DEV}", "/3/0/0")
        await client.sadd(P + f"subscribers:{DEV}", f"{KEY}{SEP}/3/0/0")
        await client.set(P + f"reg:{DEV}", encode(REGISTRATION))
        await client.zadd(P + "reg_expiry", {DEV: 163.0})
        await client.set(P + "obs:0a0b", encode(OBSERVATION))
        await client.sadd(P + f"reg_obs:{DEV}", "0a0b")
        await client.set(P + f"req:{KEY}:r1", encode(REQUEST))
        await client.zadd(P + f"reqs:{DEV}", {f"{KEY}{SEP}r1": 1})
        await client.zadd(P + "reqs", {f"{KEY}{SEP}r1": 1})
        await client.set(P + "reqseq", 1)
        await client.zadd(P + f"snap_paths:{DEV}", {"/3/0/0": 0})
        await client.hset(P + f"snap_rep:{DEV}", "/3/0/0", encode(REPORTED))
        await client.set(P + f"channel:{KEY}", encode(CHANNEL))
        await client.sadd(P + "channels", KEY)
        await client.sadd(P + f"channels:{A}", KEY)
        await client.rpush(P + f"events:{KEY}", encode(EVENT))
        await client.hset(P + "bootstrap:ep-boot", mapping={"account": A, "data": encode(BOOTSTRAP)})
        await client.zadd(P + f"bootstraps:{A}", {"ep-boot": 0})
    finally:
        await client.aclose()


async def _read_through_the_store(url: str) -> None:
    store = RedisStore(url)
    await store.open()
    try:
        assert await store.get_account(A) == ACCOUNT
        assert await store.find_account_by_name("acme") == ACCOUNT
        assert await store.list_accounts() == [ACCOUNT]
        assert await store.find_key_by_hash(API_KEY.key_hash) == API_KEY
        assert await store.list_keys(A) == [API_KEY]
        assert await store.get_device(DEV) == DEVICE
        assert await store.find_device(A, "ep-1") == DEVICE
        assert await store.list_devices(A) == [DEVICE]
        assert await store.count_devices(A, state="registered") == 1
        assert await store.count_devices(A, state="deregistered") == 0
        assert await store.devices_last_seen_before(60.0) == [DEV]
        assert await store.enrolled_account("ep-1") == A
        assert await store.get_shared_key("ep-1") == PSK
        assert await store.list_shared_keys(None) == [PSK] and await store.list_shared_keys(A) == [PSK]
        assert await store.create_shared_key(PSK) == "exists"  # the name's owner is known in its slot
        assert await store.list_subscriptions(KEY, DEV) == ["/3/0/0"]
        assert await store.get_registration(DEV) == REGISTRATION
        assert await store.registrations_expiring(200.0) == [REGISTRATION]
        assert await store.get_observation(OBSERVATION.token) == OBSERVATION
        assert await store.device_observations(DEV) == [OBSERVATION]
        assert await store.find_request(KEY, "r1") == REQUEST
        assert await store.pending_requests(DEV) == [REQUEST]
        assert await store.all_pending_requests() == [REQUEST]
        (resource,) = await store.get_snapshot(DEV)
        assert resource.path == "/3/0/0" and resource.reported == REPORTED
        assert await store.get_channel(KEY) == CHANNEL
        assert await store.list_channels() == [CHANNEL] and await store.list_channels(A) == [CHANNEL]
        assert await store.load_events(KEY) == [EVENT]
        assert await store.get_bootstrap_config("ep-boot") == BOOTSTRAP
        assert await store.list_bootstrap_configs(A) == [BOOTSTRAP]
        old = [k async for k in store.redis.scan_iter(match=P + "*") if b"{" not in k]
        assert sorted(old) == [(P + "accounts").encode(), (P + "device_indexes").encode(), (P + "layout").encode()]
    finally:
        await store.close()


def _devicehub(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "devicehub", *args], capture_output=True, text=True, timeout=60, env=os.environ.copy()
    )


@pytest.fixture
def old_data() -> Iterator[str]:
    with redis_server() as url:
        asyncio.run(_write_old_layout(url))
        yield url


def test_data_of_the_old_key_layout_is_refused_in_one_line_then_migrated_and_read(old_data: str) -> None:
    refused = _devicehub("accounts", "list", "--redis-url", old_data)
    assert refused.returncode == 2
    (line,) = refused.stderr.strip().splitlines()
    assert "key layout 1" in line and "devicehub store migrate --redis-url" in line

    migrated = _devicehub("store", "migrate", "--redis-url", old_data)
    assert migrated.returncode == 0, migrated.stderr
    assert "converted 34 key(s)" in migrated.stdout
    asyncio.run(_read_through_the_store(old_data))

    again = _devicehub("store", "migrate", "--redis-url", old_data)  # a second run finds nothing old
    assert again.returncode == 0 and "converted 0 key(s)" in again.stdout
    listed = _devicehub("accounts", "list", "--redis-url", old_data)
    assert listed.returncode == 0 and listed.stdout.split() == [A, "acme", "commercial"]

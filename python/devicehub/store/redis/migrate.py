"""`devicehub store migrate`: data of the untagged key layout (before issue 31 #2) turned into the tagged one (keys.py).

The old layout ran on one Redis only, so the conversion runs there, in place, with every node stopped: a key that
keeps its type is renamed to its tagged name; what changed shape is rewritten: the endpoint-name claims
(`device_ep:<account>:<name>` strings, now one hash per name), the global indexes (one key each, now `BUCKETS` keys),
a key's subscriptions to a device (now members of the device's subscriber set). The account indexes of devices are
dropped and refilled from the records at the next open (`_index_existing_devices`). Transient coordination (holders'
streams and heartbeats) is dropped: nodes make it anew. Running it twice is harmless: the second finds nothing old.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import redis.asyncio as aioredis

from devicehub.domain.model import DeviceSharedKey
from devicehub.store.record_upgrades import decode
from devicehub.store.redis.codec import text
from devicehub.store.redis.connection import is_cluster
from devicehub.store.redis.keys import LAYOUT, Keys

# old kind -> the tagged name of a key that keeps its type, from the rest of the old name
_RENAMED: dict[str, Callable[[Keys, str], str]] = {
    "account": lambda k, rest: k.acc("account", rest),
    "account_name": lambda k, rest: k.named("account_name", rest),
    "key": lambda k, rest: k.key("key", rest),
    "key_hash": lambda k, rest: k.named("key_hash", rest),
    "keys": lambda k, rest: k.acc("keys", rest),
    "bootstrap": lambda k, rest: k.ep("bootstrap", rest),
    "bootstraps": lambda k, rest: k.acc("bootstraps", rest),
    "enroll": lambda k, rest: k.ep("enroll", rest),
    "psk": lambda k, rest: k.ep("psk", rest),
    "psks": lambda k, rest: k.acc("psks", rest),
    "ca": lambda k, rest: k.named("ca", rest),
    "cas": lambda k, rest: k.acc("cas", rest),
    "channel": lambda k, rest: k.key("channel", rest),
    "channels": lambda k, rest: k.acc("channels", rest),
    "events": lambda k, rest: k.key("events", rest),
    "drops": lambda k, rest: k.key("drops", rest),
    "inbox": lambda k, rest: k.key("inbox", rest),
    "presub": lambda k, rest: k.key("presub", rest),
    "presub_keys": lambda k, rest: k.acc("presub_keys", rest),
    "lease": lambda k, rest: k.named("lease", rest),
    "obs": lambda k, rest: k.named("obs", rest),
    "req": lambda k, rest: k.key("req", *rest.split(":", 1)),
}
_DEVICE_KINDS = frozenset(
    ("device", "subscribers", "reqs", "reg", "reg_obs", "holder", "snap_paths", "snap_rep", "snap_des", "snap_sub")
)

_GLOBAL_SETS = ("psks", "cas", "channels")  # one set each before, BUCKETS sets now
_GLOBAL_ZSETS = ("seen", "reg_expiry")
_DROPPED = ("devices", "devices_by", "device_index_version", "reqseq", "work", "alive")


async def migrate(url: str, prefix: str = "devicehub:") -> int:
    """Convert the data under `prefix` at `url` to the tagged layout; the number of old keys converted."""
    if await is_cluster(url):
        raise ValueError("the old key layout ran on a single Redis only; point --redis-url at that Redis")
    keys = Keys(prefix)
    client = aioredis.Redis.from_url(url)
    try:
        layout = await client.get(keys.layout)
        if layout is not None and text(layout) == LAYOUT:
            return 0
        old = [
            name
            async for name in (text(k) async for k in client.scan_iter(match=prefix + "*", count=1000))
            if "{" not in name and name not in (keys.layout, keys.accounts)
        ]
        for name in old:
            await _convert(client, keys, name[len(prefix) :])
        await client.delete(prefix + "device_indexes")  # the next open fills the account indexes from the records
        await client.set(keys.layout, LAYOUT)
        return len(old)
    finally:
        await client.aclose()


async def _convert(client: aioredis.Redis, keys: Keys, name: str) -> None:
    kind, _, rest = name.partition(":")
    old = keys.p + name
    if kind in _DROPPED:
        await client.delete(old)
    elif not rest and kind in _GLOBAL_SETS:
        for member in (text(m) for m in await client.smembers(old)):
            await client.sadd(keys.bucket(kind, member), member)
        await client.delete(old)
    elif not rest and kind in _GLOBAL_ZSETS:
        entries: Any = await client.zrange(old, 0, -1, withscores=True)
        for member, score in entries:
            await client.zadd(keys.bucket(kind, text(member)), {member: score})
        await client.delete(old)
    elif not rest and kind == "reqs":  # bucketed by device: filled from the devices' queues (below)
        await client.delete(old)
    elif kind == "device_ep":  # <account>:<name> -> the name's hash of ids per account
        account_id, _, endpoint_name = rest.partition(":")
        device_id = await client.get(old)
        if device_id is not None:
            await client.hset(keys.ep("device_ep", endpoint_name), account_id, device_id)
        await client.delete(old)
    elif kind == "subs":  # <key>:<device> set of paths -> members of the device's subscriber set
        await client.delete(old)  # `subscribers:<device>` holds the same pairs already
    elif kind == "psk" and rest:  # the account holding it beside the record (create_shared_key.lua reads it)
        data = await client.get(old)
        if data is not None:
            owner = decode(DeviceSharedKey, data).account_id
            await client.set(keys.ep("psk_account", rest), owner)
        await client.rename(old, keys.ep("psk", rest))
    elif kind in _RENAMED and rest:
        await client.rename(old, _RENAMED[kind](keys, rest))
    elif kind in _DEVICE_KINDS and rest:
        if kind == "reqs":  # a device's queue: its members go to the global index's bucket of that device too
            queued: Any = await client.zrange(old, 0, -1, withscores=True)
            for member, score in queued:
                await client.zadd(keys.bucket("reqs", rest), {member: score})
        await client.rename(old, keys.dev(kind, rest))

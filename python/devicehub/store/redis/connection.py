"""The connection machinery: a bounded pool, the Lua scripts, optimistic transactions (WATCH/MULTI) and blob reads.

The URL names one Redis, or any node of a Redis Cluster: the server says which (`INFO cluster`), and the store then
talks to the cluster through redis-py's `RedisCluster`, which sends each command to the primary of its key's slot.
A transaction (WATCH/MULTI) runs on one connection to one primary, so it goes through `shard(key)`, a plain client of
the primary holding that key's slot; every transaction and script touches keys of one slot only (keys.py).
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import redis.asyncio as aioredis
from redis.asyncio import BlockingConnectionPool
from redis.asyncio.client import Pipeline
from redis.asyncio.cluster import RedisCluster
from redis.asyncio.connection import Connection, parse_url
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff
from redis.exceptions import NoScriptError, WatchError

from devicehub.domain.model import Device
from devicehub.errors import StartupFailed, Unavailable
from devicehub.store.record_upgrades import decode
from devicehub.store.redis.codec import DecodedRecords, T, encode, text
from devicehub.store.redis.keys import LAYOUT, Keys
from devicehub.store.redis.packing import packing
from devicehub.store.redis.script_calls import ScriptCalls
from devicehub.store.write_behind import DEFAULT_INTERVAL_S, Pending, ReportedWriteBehind

_LUA = Path(__file__).with_name("lua")
_ADMIT_EACH = (_LUA / "admit_each.lua").read_text()


WATCH_ATTEMPTS = 16  # reads and writes of one call before it gives up on keys other nodes keep changing (503)

POOL_CONNECTIONS = 64  # per node: Redis is single-threaded, more connections add no throughput

# per primary, for redis-py's cluster client, whose pool cannot make a call wait for a free connection (it raises at
# its cap): a burst opens what it needs, up to this, and keeps them
CLUSTER_CONNECTIONS = 1024

Client = aioredis.Redis | RedisCluster  # one Redis, or a Redis Cluster


async def is_cluster(url: str, timeout: float | None = 5.0) -> bool:
    """Whether the server at `url` is a node of a Redis Cluster (`cluster_enabled:1` in `INFO cluster`)."""
    probe = aioredis.Redis.from_url(url, socket_timeout=timeout, socket_connect_timeout=timeout)
    try:
        info = await probe.info("cluster")
    finally:
        await probe.aclose()
    return bool(info.get("cluster_enabled"))


@functools.cache
def _sha(script: str) -> str:
    return hashlib.sha1(script.encode()).hexdigest()  # Redis names a script by its SHA-1


# decoded device records a node keeps (codec.DecodedRecords): ten directory pages of 1 000, about 30 MB at most
DEVICE_RECORDS_KEPT = 10_000


class RedisConnection:
    """One Redis database under a key prefix, shared by every node of a cluster."""

    def __init__(
        self,
        url: str,
        *,
        prefix: str = "devicehub:",
        timeout: float = 5.0,
        reported_flush_s: float = DEFAULT_INTERVAL_S,
    ) -> None:
        self._url = url
        self._timeout = timeout
        self._p = prefix
        self._redis: Client | None = None
        self._shards: dict[str, aioredis.Redis] = {}  # cluster: a client per primary, for transactions
        self.keys = Keys(prefix)
        self.cluster = False
        self._remove_reg: Any = None
        self._put_bootstrap: Any = None
        self._delete_bootstrap: Any = None
        self._reindex_pending: dict[str, set[str]] = {}  # devices.py: account -> devices whose indexes are due
        self._reindex_locks: dict[str, asyncio.Lock] = {}
        self._device_record = DecodedRecords(Device, DEVICE_RECORDS_KEPT)  # devices.py
        self._device_summary = DecodedRecords(Device, DEVICE_RECORDS_KEPT)  # devices.py: directory summaries
        # enrolment.py: the Registers arriving together
        self._admissions = ScriptCalls(self._eval_each, _ADMIT_EACH, merged=lambda: not self.cluster)
        self._reported = ReportedWriteBehind(self._write_reported, reported_flush_s)

    @property
    def redis(self) -> Client:
        if self._redis is None:
            raise RuntimeError("store is not open")
        return self._redis

    def shard(self, key: str) -> aioredis.Redis:
        """A client of the server holding `key`'s slot: the Redis itself, or that slot's primary in a cluster. A
        transaction on keys of that slot, or a sharded pub/sub channel named like it, goes through it."""
        if not isinstance(self._redis, RedisCluster):
            return self.redis  # type: ignore[return-value]  # not a cluster: the one server
        node = self._redis.get_node_from_key(key)
        if node is None:
            raise Unavailable("the cluster has no primary for this key's slot; retry later")
        client = self._shards.get(node.name)
        if client is None:
            client = self._shards[node.name] = aioredis.Redis.from_pool(self._pool(host=node.host, port=node.port))
        return client

    @property
    def prefix(self) -> str:
        """What every key of this store starts with (channels/cluster.py keeps its keys beside them)."""
        return self._p

    def _pool(self, **where: Any) -> BlockingConnectionPool:
        # a stopped or frozen Redis fails a command within the time-out (503) instead of holding it forever;
        # one quick retry on a fresh connection carries a command over a Redis restart
        # a burst of calls (a registration storm, a busy API) waits for one of a bounded set of connections, up to
        # the time-out, instead of failing at the pool's cap (redis-py's default pool raises "Too many connections")
        # `where` (a cluster primary's host and port) replaces the URL's; its credentials and TLS stay
        options: dict[str, Any] = {**parse_url(self._url), **where}
        return BlockingConnectionPool(
            connection_class=packing(options.pop("connection_class", Connection)),
            max_connections=POOL_CONNECTIONS,
            timeout=self._timeout or None,
            decode_responses=False,
            socket_timeout=self._timeout or None,
            socket_connect_timeout=self._timeout or None,
            retry=Retry(ExponentialBackoff(cap=0.2, base=0.02), 1),
            **options,
        )

    async def _connect(self, *, check_layout: bool = True) -> None:
        timeout = self._timeout or None
        self.cluster = await is_cluster(self._url, timeout)
        if self.cluster:
            self._redis = RedisCluster.from_url(
                self._url,
                max_connections=CLUSTER_CONNECTIONS,
                decode_responses=False,
                socket_timeout=timeout,
                socket_connect_timeout=timeout,
                retry=Retry(ExponentialBackoff(cap=0.2, base=0.02), 1),
            )
            # redis-py's cluster client takes no connection class: its nodes are made with this one (theirs and those
            # found later, the kwargs are shared)
            kwargs = self._redis.connection_kwargs
            kwargs["connection_class"] = packing(kwargs["connection_class"])
            for node in self._redis.startup_nodes:
                node.connection_class = kwargs["connection_class"]
            await self._redis.initialize()
        else:
            self._redis = aioredis.Redis.from_pool(self._pool())  # closing the client closes the pool
        await self._redis.ping()
        if check_layout:
            await self._check_layout()
        self._remove_reg = self._redis.register_script((_LUA / "remove_registration.lua").read_text())
        self._put_bootstrap = self._redis.register_script((_LUA / "put_bootstrap_config.lua").read_text())
        self._delete_bootstrap = self._redis.register_script((_LUA / "delete_bootstrap_config.lua").read_text())
        self._enqueue = self._redis.register_script((_LUA / "enqueue_request.lua").read_text())
        self._claim = self._redis.register_script((_LUA / "claim_device_id.lua").read_text())
        self._create_shared_key = self._redis.register_script((_LUA / "create_shared_key.lua").read_text())
        self._create_account = self._redis.register_script((_LUA / "create_account.lua").read_text())
        self._delete = self._redis.register_script((_LUA / "delete_device.lua").read_text())

    async def _check_layout(self) -> None:
        """Refuse data written in the untagged key layout of before (issue 31 #2): this code would not find it and
        would write beside it. An empty database is marked with today's layout."""
        found = await self.redis.get(self.keys.layout)
        if found is None and await self.redis.exists(self._p + "device_index_version"):  # every old open set it
            found = b"1"
        if found is None:
            await self.redis.set(self.keys.layout, LAYOUT, nx=True)
        elif text(found) != LAYOUT:
            raise StartupFailed(
                f"the Redis data under {self._p!r} is in key layout {text(found)}, this version reads layout {LAYOUT}:"
                " convert it once with `devicehub store migrate --redis-url URL` (all nodes stopped)"
            )

    async def close(self) -> None:
        await self._reported.close()
        for client in self._shards.values():
            await client.aclose()
        self._shards.clear()
        if self._redis is not None:
            await self._redis.aclose()
            self._redis = None

    async def _transact(
        self, watched: Sequence[str], read: Callable[[Pipeline], Awaitable[T]], write: Callable[[Pipeline, T], None]
    ) -> None:
        """Queue `write` on what `read` found in one MULTI that Redis refuses if another client changed a `watched`
        key since the WATCH; then read again and write again. A write derived from a stale read (the previous
        record's index entries) would leave the other node's entries behind."""
        async with self.shard(watched[0]).pipeline(transaction=True) as tx:
            for _ in range(WATCH_ATTEMPTS):
                try:
                    await tx.watch(*watched)
                    found = await read(tx)  # commands run at once on the watching connection until multi()
                    tx.multi()  # type: ignore[no-untyped-call]  # redis-py leaves it unannotated
                    write(tx, found)
                    await tx.execute()
                    return
                except WatchError:
                    continue  # execute() has reset the pipeline: no WATCH or queued command is left
        raise Unavailable(f"other clients kept changing {len(watched)} key(s) this write replaces; retry later")

    async def _eval_each(
        self,
        calls: Sequence[tuple[Any, ...]],
        *,
        raise_errors: bool = True,
        also: Callable[[Any], None] | None = None,  # on a Pipeline or a ClusterPipeline
    ) -> list[Any]:
        """Each call's EVAL arguments (script text, key count, keys, arguments; its keys in one slot) as EVALSHA, all
        in one pipeline (a round trip per server): a script's text (apply_writes.lua is 2 kB) travels only to a
        server that does not know it yet (a restart, a new primary), then as EVAL. A call is one atomic step. With
        `raise_errors` false, a call's error is its reply (the others' stand). `also` queues more commands on the same
        pipeline, after the calls (issue 30 #5: writes that need no reply of theirs save a round trip); their errors
        are raised, their replies dropped."""
        if not calls and also is None:
            return []
        async with self.redis.pipeline(transaction=False) as pipe:
            for script, *rest in calls:
                pipe.execute_command("EVALSHA", _sha(script), *rest)  # redis-py bars evalsha() on a cluster pipeline
            if also is not None:
                also(pipe)
            everything = list(await pipe.execute(raise_on_error=False))
        replies = everything[: len(calls)]
        for reply in everything[len(calls) :]:
            if isinstance(reply, Exception):
                raise reply
        missing = [i for i, reply in enumerate(replies) if isinstance(reply, NoScriptError)]
        if missing:  # not run: sent again with the text
            async with self.redis.pipeline(transaction=False) as pipe:
                for i in missing:
                    pipe.eval(*calls[i])
                for i, reply in zip(missing, await pipe.execute(raise_on_error=False), strict=True):
                    replies[i] = reply
        for reply in replies if raise_errors else ():
            if isinstance(reply, Exception):
                raise reply
        return replies

    def _multi(self, key: str) -> Pipeline:
        """A MULTI/EXEC on the server of `key`'s slot; every command queued on it names a key of that slot."""
        return self.shard(key).pipeline(transaction=True)

    async def _blob(self, kind: type[T], key: str) -> T | None:
        data = await self.redis.get(key)
        return None if data is None else decode(kind, data)

    async def _blobs(self, kind: type[T], keys: Sequence[str]) -> list[T]:
        if not keys:
            return []
        return [decode(kind, data) for data in await self._mget(keys) if data is not None]

    async def _members(self, sets: Sequence[str]) -> set[str]:
        """The members of several sets (the buckets of a global index), asked at once: one round trip per server."""
        async with self.redis.pipeline(transaction=False) as reads:
            for key in sets:
                reads.smembers(key)
            replies = await reads.execute()
        return {text(m) for reply in replies for m in reply}

    async def _mget(self, keys: Sequence[str]) -> list[Any]:
        """GET of many keys in one round trip per server (a cluster answers an MGET only for keys of one slot)."""
        if not keys:
            return []
        if isinstance(self._redis, RedisCluster):
            return list(await self._redis.mget_nonatomic(keys))
        return list(await self.redis.mget(keys))

    async def _write_reported(self, pending: Pending) -> None:
        # the write-behind keys values by path (write_behind.py): a device's go together, two commands a device
        by_device: dict[str, dict[Any, bytes]] = {}  # device id → path → encoded (Any: redis-py types keys wide)
        for path, devices in pending.items():
            for device_id, value in devices.items():
                values = by_device.get(device_id)
                if values is None:
                    by_device[device_id] = {path: encode(value)}
                else:
                    values[path] = encode(value)
        # not one MULTI: the devices' keys lie in as many slots (the path goes in before its value)
        async with self.redis.pipeline(transaction=False) as tx:
            for device_id, encoded in by_device.items():
                tx.zadd(self.keys.dev("snap_paths", device_id), dict.fromkeys(encoded, 0))
                tx.hset(self.keys.dev("snap_rep", device_id), mapping=encoded)
            await tx.execute()

"""The connection machinery: a bounded pool, the Lua scripts, optimistic transactions (WATCH/MULTI) and blob reads."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import redis.asyncio as aioredis
from redis.asyncio import BlockingConnectionPool
from redis.asyncio.client import Pipeline
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff
from redis.exceptions import NoScriptError, WatchError

from devicehub.errors import Unavailable
from devicehub.store.redis.codec import T, decode, encode
from devicehub.store.write_behind import DEFAULT_INTERVAL_S, Pending, ReportedWriteBehind

_LUA = Path(__file__).with_name("lua")

WATCH_ATTEMPTS = 16  # reads and writes of one call before it gives up on keys other nodes keep changing (503)

POOL_CONNECTIONS = 64  # per node: Redis is single-threaded, more connections add no throughput


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
        self._redis: aioredis.Redis | None = None
        self._remove_reg: Any = None
        self._put_bootstrap: Any = None
        self._delete_bootstrap: Any = None
        self._reported = ReportedWriteBehind(self._write_reported, reported_flush_s)

    @property
    def redis(self) -> aioredis.Redis:
        if self._redis is None:
            raise RuntimeError("store is not open")
        return self._redis

    @property
    def prefix(self) -> str:
        """What every key of this store starts with (channels/cluster.py keeps its keys beside them)."""
        return self._p

    def _k(self, *parts: str) -> str:
        return self._p + ":".join(parts)

    async def _connect(self) -> None:
        # a stopped or frozen Redis fails a command within the time-out (503) instead of holding it forever;
        # one quick retry on a fresh connection carries a command over a Redis restart
        # a burst of calls (a registration storm, a busy API) waits for one of a bounded set of connections, up to
        # the time-out, instead of failing at the pool's cap (redis-py's default pool raises "Too many connections")
        pool = BlockingConnectionPool.from_url(
            self._url,
            max_connections=POOL_CONNECTIONS,
            timeout=self._timeout or None,
            decode_responses=False,
            socket_timeout=self._timeout or None,
            socket_connect_timeout=self._timeout or None,
            retry=Retry(ExponentialBackoff(cap=0.2, base=0.02), 1),
        )
        self._redis = aioredis.Redis.from_pool(pool)  # closing the client closes the pool
        await self._redis.ping()
        self._remove_reg = self._redis.register_script((_LUA / "remove_registration.lua").read_text())
        self._put_bootstrap = self._redis.register_script((_LUA / "put_bootstrap_config.lua").read_text())
        self._delete_bootstrap = self._redis.register_script((_LUA / "delete_bootstrap_config.lua").read_text())
        self._enqueue = self._redis.register_script((_LUA / "enqueue_request.lua").read_text())
        self._admit = self._redis.register_script((_LUA / "admit_endpoint.lua").read_text())
        self._claim = self._redis.register_script((_LUA / "claim_device_id.lua").read_text())
        self._admit_authenticated = self._redis.register_script((_LUA / "admit_authenticated.lua").read_text())
        self._create_shared_key = self._redis.register_script((_LUA / "create_shared_key.lua").read_text())
        self._read_replaced = self._redis.register_script((_LUA / "read_replaced.lua").read_text())
        self._create_account = self._redis.register_script((_LUA / "create_account.lua").read_text())

    async def close(self) -> None:
        await self._reported.close()
        if self._redis is not None:
            await self._redis.aclose()
            self._redis = None

    async def _transact(
        self, watched: Sequence[str], read: Callable[[Pipeline], Awaitable[T]], write: Callable[[Pipeline, T], None]
    ) -> None:
        """Queue `write` on what `read` found in one MULTI that Redis refuses if another client changed a `watched`
        key since the WATCH; then read again and write again. A write derived from a stale read (the previous
        record's index entries) would leave the other node's entries behind."""
        async with self.redis.pipeline(transaction=True) as tx:
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

    async def _run_now(self, tx: Pipeline, script: Any, keys: Sequence[str], args: Sequence[Any]) -> Any:
        """`script` on the watching connection before its MULTI: EVALSHA, not `script(client=tx)`, which would add a
        SCRIPT EXISTS round trip to the EXEC; a Redis that restarted since `open` is sent the script itself."""
        try:
            return await tx.evalsha(script.sha, len(keys), *keys, *args)
        except NoScriptError:
            return await tx.eval(script.script, len(keys), *keys, *args)

    async def _blob(self, kind: type[T], key: str) -> T | None:
        data = await self.redis.get(key)
        return None if data is None else decode(kind, data)

    async def _blobs(self, kind: type[T], keys: Sequence[str]) -> list[T]:
        if not keys:
            return []
        return [decode(kind, data) for data in await self.redis.mget(keys) if data is not None]

    async def _write_reported(self, pending: Pending) -> None:
        async with self.redis.pipeline(transaction=True) as tx:
            for device_id, values in pending.items():
                tx.zadd(self._k("snap_paths", device_id), dict.fromkeys(values, 0))
                tx.hset(self._k("snap_rep", device_id), mapping={p: encode(v) for p, v in values.items()})
            await tx.execute()

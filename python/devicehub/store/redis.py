"""`RedisStore`: all shared state in Redis, so that several `devicehub serve` nodes act as one service.

Records are msgpack blobs (the same msgspec Structs as SQLite); indexes are sets and sorted sets beside them.
Every write that touches more than one key runs in one MULTI/EXEC transaction, so a failing call leaves nothing
half-written; the lease is one Lua script (compare-and-set on the owner). A write derived from what it replaces
(a device's indexes from its previous record, the observations a Register ends) WATCHes the keys it reads, reads
them on that connection and retries if another node changed them before its EXEC (`_transact`). Key names all
start with `prefix`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, TypeVar, cast

import msgspec
import redis.asyncio as aioredis
from redis.asyncio import BlockingConnectionPool
from redis.asyncio.client import Pipeline
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff
from redis.exceptions import NoScriptError, WatchError

from devicehub.domain.model import (
    Account,
    ApiKey,
    BootstrapConfig,
    ChannelConfig,
    ChannelDrops,
    DesiredValue,
    Device,
    DeviceRequest,
    DeviceSharedKey,
    ObservationRecord,
    PresubscriptionRule,
    RegistrationRecord,
    ReportedValue,
    SnapshotResource,
    StoredEvent,
    TrustedCa,
)
from devicehub.domain.storage.credentials import KeyClaim
from devicehub.domain.storage.device_query import Condition, DeviceQuery
from devicehub.errors import Unavailable
from devicehub.store import revocations
from devicehub.store.enqueue import check_enqueued
from devicehub.store.failures import unavailable
from devicehub.store.redis_writes import Writes
from devicehub.store.write_behind import DEFAULT_INTERVAL_S, Pending, ReportedWriteBehind

T = TypeVar("T")

_encode = msgspec.msgpack.Encoder().encode
_DECODERS: dict[type[Any], msgspec.msgpack.Decoder[Any]] = {}
_LUA = Path(__file__).with_name("lua")
_VALUE_INDEXED = ("endpoint_type", "host_gateway")  # besides `state`, which has its own index since the start
_DEVICE_INDEX_VERSION = "2"
_MIN_PAGE = 100
_MAX_PAGE = 1000
WATCH_ATTEMPTS = 16  # reads and writes of one call before it gives up on keys other nodes keep changing (503)
POOL_CONNECTIONS = 64  # per node: Redis is single-threaded, more connections add no throughput
SEP = "\x1f"  # joins two ids inside one member; never part of an id, path or key


def _decode(kind: type[T], data: Any) -> T:  # redis-py types replies loosely; they are bytes here
    decoder = _DECODERS.get(kind)
    if decoder is None:
        decoder = _DECODERS[kind] = msgspec.msgpack.Decoder(kind)
    value: T = decoder.decode(data)
    return value


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else value


class RedisStore:
    """The `Store` protocol on one Redis database."""

    shared = True  # every node of a cluster reads and writes this server

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
        self._acquire: Any = None
        self._release: Any = None
        self._remove_reg: Any = None
        self._put_bootstrap: Any = None
        self._delete_bootstrap: Any = None
        self._reported = ReportedWriteBehind(self._write_reported, reported_flush_s)

    def unavailable(self, error: BaseException) -> bool:
        return unavailable(error)

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

    async def open(self) -> None:
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
        self._acquire = self._redis.register_script((_LUA / "acquire_lease.lua").read_text())
        self._release = self._redis.register_script((_LUA / "release_lease.lua").read_text())
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
        await self._index_existing_devices()

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
        return None if data is None else _decode(kind, data)

    async def _blobs(self, kind: type[T], keys: Sequence[str]) -> list[T]:
        if not keys:
            return []
        return [_decode(kind, data) for data in await self.redis.mget(keys) if data is not None]

    # ---- accounts and keys ---------------------------------------------------------------------
    async def _claim_account_name(self, account: Account) -> str:
        keys = [self._k("account_name", account.name), self._k("account", account.id), self._k("accounts")]
        return _text(await self._create_account(keys=keys, args=[account.id, _encode(account)]))

    async def create_account(self, account: Account) -> None:
        if await self._claim_account_name(account) != account.id:
            raise ValueError(f"account name {account.name!r} exists")

    async def ensure_account(self, account: Account) -> Account:
        winner = await self._claim_account_name(account)
        if winner == account.id:
            return account
        found = await self.get_account(winner)  # written with its name, in the same script
        if found is None:
            raise ValueError(f"account name {account.name!r} names no account record")
        return found

    async def get_account(self, account_id: str) -> Account | None:
        return await self._blob(Account, self._k("account", account_id))

    async def find_account_by_name(self, name: str) -> Account | None:
        account_id = await self.redis.get(self._k("account_name", name))
        return None if account_id is None else await self.get_account(_text(account_id))

    async def list_accounts(self) -> list[Account]:
        ids = sorted(_text(i) for i in await self.redis.smembers(self._k("accounts")))
        accounts = await self._blobs(Account, [self._k("account", i) for i in ids])
        return sorted(accounts, key=lambda a: a.name)

    async def create_key(self, key: ApiKey) -> None:
        async with self.redis.pipeline(transaction=True) as tx:
            tx.set(self._k("key", key.id), _encode(key))
            tx.set(self._k("key_hash", key.key_hash), key.id)
            tx.zadd(self._k("keys", key.account_id), {key.id: key.created_at})
            await tx.execute()

    async def find_key_by_hash(self, key_hash: str) -> ApiKey | None:
        key_id = await self.redis.get(self._k("key_hash", key_hash))
        return None if key_id is None else await self._blob(ApiKey, self._k("key", _text(key_id)))

    async def list_keys(self, account_id: str) -> list[ApiKey]:
        ids = [_text(i) for i in await self.redis.zrange(self._k("keys", account_id), 0, -1)]
        return await self._blobs(ApiKey, [self._k("key", i) for i in ids])

    async def revoke_key(self, key_id: str, at: float) -> bool:
        key = await self._blob(ApiKey, self._k("key", key_id))
        if key is None:
            return False
        if key.revoked_at is None:
            await self.redis.set(self._k("key", key_id), _encode(msgspec.structs.replace(key, revoked_at=at)))
        await self.redis.publish(revocations.channel(self._p), key_id)  # every node's key cache drops it now
        return True

    # ---- enrollment and devices ----------------------------------------------------------------
    async def enroll(self, account_id: str, endpoint_name: str) -> None:
        await self.redis.set(self._k("enroll", endpoint_name), account_id)

    async def enrolled_account(self, endpoint_name: str) -> str | None:
        account_id = await self.redis.get(self._k("enroll", endpoint_name))
        return None if account_id is None else _text(account_id)

    async def claim_device_id(self, account_id: str, endpoint_name: str, mint: Callable[[], str]) -> str:
        # the name index put_device keeps is the claim (claim_device_id.lua)
        claimed = await self._claim(keys=[self._k("device_ep", account_id, endpoint_name)], args=[mint()])
        return _text(claimed)

    async def admit_authenticated(self, account_id: str, endpoint_name: str, mint: Callable[[], str]) -> str | None:
        admitted = await self._admit_authenticated(
            keys=[self._k("enroll", endpoint_name), self._k("device_ep", account_id, endpoint_name)],
            args=[account_id, mint()],
        )
        return None if not admitted else _text(admitted)

    async def admit_endpoint(
        self, endpoint_name: str, default_account_id: str | None, mint: Callable[[], str]
    ) -> tuple[str, str] | None:
        admitted = await self._admit(
            keys=[self._k("enroll", endpoint_name)],
            args=[default_account_id or "", self._k("device_ep", ""), endpoint_name, mint()],
        )
        if not admitted:
            return None
        account_id, device_id = admitted
        return _text(account_id), _text(device_id)

    def _device_indexes(self, device: Device) -> list[str]:
        """The lexicographic id indexes a device belongs to: its account's, and one per filterable value."""
        return [
            self._k("devices", device.account_id),
            self._k("devices", device.account_id, device.state),
            *(self._k("devices_by", device.account_id, f, getattr(device, f)) for f in _VALUE_INDEXED),
        ]

    def _value_index(self, account_id: str, condition: Condition) -> str | None:
        if condition.op != "eq":
            return None
        if condition.field == "state":
            return self._k("devices", account_id, str(condition.values[0]))
        if condition.field in _VALUE_INDEXED:
            return self._k("devices_by", account_id, condition.field, str(condition.values[0]))
        return None

    async def _index_existing_devices(self) -> None:
        """Fill the value indexes for devices written before they existed (once per database). The mark is set
        once every device is indexed: a node stopped midway (or given up on by `_transact`) leaves the fill to the
        next node to open, instead of marking it done; two nodes filling at once add the same entries."""
        mark = self._k("device_index_version")
        if await self.redis.exists(mark):
            return
        keys = [_text(k) async for k in self.redis.scan_iter(match=self._k("device", "*"), count=1000)]
        for start in range(0, len(keys), 500):
            await self._index_devices(keys[start : start + 500])
        await self.redis.set(mark, _DEVICE_INDEX_VERSION)

    async def _index_devices(self, record_keys: list[str]) -> None:
        """Add the devices of `record_keys` to their indexes as the records stand when the entries are added: a
        record another node rewrote or deleted after the read (its own write indexed it anew) is read again, so no
        entry of a value the device no longer has is added back."""

        async def records(tx: Pipeline) -> list[Device]:
            return [_decode(Device, data) for data in await tx.mget(record_keys) if data is not None]

        def index(tx: Pipeline, devices: list[Device]) -> None:
            for device in devices:
                for device_index in self._device_indexes(device):
                    tx.zadd(device_index, {device.id: 0})

        await self._transact(record_keys, records, index)

    async def put_device(self, device: Device) -> None:
        key = self._k("device", device.id)

        async def previous(tx: Pipeline) -> Device | None:
            data = await tx.get(key)
            return None if data is None else _decode(Device, data)

        def write(tx: Pipeline, replaced: Device | None) -> None:
            writes = Writes()
            self._write_device(writes, device, replaced)
            writes.queue_on(tx)

        await self._transact([key], previous, write)

    def _write_device(self, writes: Writes, device: Device, previous: Device | None) -> None:
        """Queue the record, its endpoint-name key and its indexes, replacing `previous`'s."""
        if previous is not None:
            writes.delete(self._k("device_ep", previous.account_id, previous.endpoint_name))
            for index in self._device_indexes(previous):
                writes.zrem(index, device.id)
        writes.set(self._k("device", device.id), _encode(device))
        writes.set(self._k("device_ep", device.account_id, device.endpoint_name), device.id)
        for index in self._device_indexes(device):
            writes.zadd(index, device.id)
        writes.zadd(self._k("seen"), device.id, device.last_seen_at)

    async def get_device(self, device_id: str) -> Device | None:
        return await self._blob(Device, self._k("device", device_id))

    async def get_devices(self, device_ids: Sequence[str]) -> list[Device]:
        return await self._blobs(Device, [self._k("device", i) for i in device_ids])

    async def put_registered_devices(
        self,
        devices: Sequence[Device],
        unchanged: Sequence[str] = (),
        reported: Sequence[tuple[str, str, ReportedValue]] = (),
    ) -> None:
        """What `put_device`, `ensure_resources`, `remove_device_subscriptions` and `clear_subscribed` do for one
        device, for a batch in three round trips whatever its size (a registration storm writes thousands a second):
        one WATCHes the records and subscriber sets, one script reads them, one MULTI writes everything (for
        `unchanged` devices only the subscriptions are dropped); again if another node changed one meanwhile."""
        if not devices and not unchanged:
            for device_id, path, value in reported:
                await self.set_reported(device_id, path, value)
            return
        record_keys = [self._k("device", d.id) for d in devices]
        subscribed_ids = [*(d.id for d in devices), *unchanged]
        subscriber_keys = [self._k("subscribers", i) for i in subscribed_ids]
        # a value goes in this MULTI with its entry, unless the write-behind holds an older value of it: then it goes
        # after that one, as set_reported
        free, later = self._reported.split_held(reported)
        valued: dict[str, dict[str, bytes]] = {}
        for device_id, path, value in free:
            valued.setdefault(device_id, {})[path] = _encode(value)

        async def replaced(tx: Pipeline) -> list[Any]:
            # the records, then the subscriber sets: one round trip, on the connection that watches them
            return list(await self._run_now(tx, self._read_replaced, [*record_keys, *subscriber_keys], [len(devices)]))

        def write(tx: Pipeline, found: list[Any]) -> None:
            writes = Writes()
            for device, previous_blob in zip(devices, found[: len(devices)], strict=True):
                self._write_device(writes, device, None if previous_blob is None else _decode(Device, previous_blob))
                paths = self._k("snap_paths", device.id)
                for resource in device.resources:
                    writes.zadd(paths, resource.path, only_new=True)
            for device_id, members in zip(subscribed_ids, found[len(devices) :], strict=True):
                self._drop_subscriptions(writes, device_id, map(_text, members))
            for device_id, values in valued.items():
                paths, reported = self._k("snap_paths", device_id), self._k("snap_rep", device_id)
                for path, value in values.items():
                    writes.zadd(paths, path)
                    writes.hset(reported, path, value)
            writes.queue_on(tx)

        await self._transact([*record_keys, *subscriber_keys], replaced, write)
        for device_id, path, value in later:
            await self.set_reported(device_id, path, value)

    def _drop_subscriptions(self, writes: Writes, device_id: str, members: Iterable[str]) -> None:
        """Queue the removal of the device's subscriptions (`members` of its subscriber set) and marks."""
        for member in members:
            writes.srem(self._k("subs", member.partition(SEP)[0], device_id), member.partition(SEP)[2])
            writes.srem(self._k("subscribers", device_id), member)
        writes.delete(self._k("snap_sub", device_id))

    async def find_device(self, account_id: str, endpoint_name: str) -> Device | None:
        device_id = await self.redis.get(self._k("device_ep", account_id, endpoint_name))
        return None if device_id is None else await self.get_device(_text(device_id))

    # Directory queries (store/device_query.py). Candidates come from the narrowest index an `eq` condition
    # names (a state, endpoint type or host gateway value; an id or endpoint name is one device), else the
    # account's index; they are walked in id order a bounded page at a time and the remaining conditions are
    # checked on the records. A page costs one ZRANGEBYLEX and one MGET; a list stops as soon as it has
    # `limit` devices, so paging a selective filter over a large account walks more pages (time, not memory).
    # An exact total is one ZCARD when a single indexed `eq` is the whole query, else one walk of the index.
    async def _direct_ids(self, account_id: str, query: DeviceQuery) -> list[str] | None:
        for condition in query.conditions:
            if condition.field == "id" and condition.op in ("eq", "in"):
                return sorted({str(v) for v in condition.values})
            if condition.field == "endpoint_name" and condition.op == "eq":
                found = await self.redis.get(self._k("device_ep", account_id, str(condition.values[0])))
                return [] if found is None else [_text(found)]
        return None

    async def _narrowest_index(self, account_id: str, query: DeviceQuery) -> str:
        indexes = [i for i in (self._value_index(account_id, c) for c in query.conditions) if i is not None]
        if not indexes:
            return self._k("devices", account_id)
        async with self.redis.pipeline(transaction=False) as tx:
            for index in indexes:
                tx.zcard(index)
            sizes = await tx.execute()
        return min(zip(sizes, indexes, strict=True))[1]

    async def _walk(self, index: str, after: str | None, descending: bool, page: int) -> AsyncIterator[list[Device]]:
        cursor = after
        while True:
            if descending:
                high = f"({cursor}" if cursor is not None else "+"
                raw = await self.redis.zrevrangebylex(index, high, "-", start=0, num=page)
            else:
                low = f"({cursor}" if cursor is not None else "-"
                raw = await self.redis.zrangebylex(index, low, "+", start=0, num=page)
            ids = [_text(i) for i in raw]
            if ids:
                yield await self._blobs(Device, [self._k("device", i) for i in ids])
            if len(ids) < page:
                return
            cursor = ids[-1]

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
        full = DeviceQuery.of(query, state)
        direct = await self._direct_ids(account_id, full)
        if direct is not None:
            ids = sorted(direct, reverse=descending)
            if after is not None:
                ids = [i for i in ids if (i < after if descending else i > after)]
            devices = await self._blobs(Device, [self._k("device", i) for i in ids])
            return [d for d in devices if d.account_id == account_id and full.matches(d)][:limit]
        index = await self._narrowest_index(account_id, full)
        found: list[Device] = []
        async for devices in self._walk(index, after, descending, min(max(limit, _MIN_PAGE), _MAX_PAGE)):
            found.extend(d for d in devices if full.matches(d))
            if len(found) >= limit:
                break
        return found[:limit]

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
        async for devices in self._walk(index, None, False, _MAX_PAGE):
            count += sum(1 for d in devices if full.matches(d))
        return count

    async def delete_device(self, device_id: str) -> None:
        await self._reported.flush()
        record_key, subscriber_key, queue_key = (self._k(part, device_id) for part in ("device", "subscribers", "reqs"))

        async def attached(tx: Pipeline) -> tuple[Device | None, list[str], list[str]]:
            # what names the device from elsewhere (indexes, name, subscriptions, queued requests): read where watched,
            # so that what another node adds meanwhile makes the delete read again, not stay behind
            data = await tx.get(record_key)
            members = await tx.smembers(subscriber_key)
            queued = await tx.zrange(queue_key, 0, -1)
            device = None if data is None else _decode(Device, data)
            return device, [_text(m) for m in members], [_text(m) for m in queued]

        def delete(tx: Pipeline, found: tuple[Device | None, list[str], list[str]]) -> None:
            self._delete_device(tx, device_id, *found)

        await self._transact([record_key, subscriber_key, queue_key], attached, delete)

    def _delete_device(
        self, tx: Pipeline, device_id: str, device: Device | None, subscribers: list[str], requests: list[str]
    ) -> None:
        """Queue on `tx` the removal of the device, its snapshot and everything that names it (as read)."""
        if device is not None:
            tx.delete(self._k("device_ep", device.account_id, device.endpoint_name))
            for index in self._device_indexes(device):
                tx.zrem(index, device_id)
        tx.delete(self._k("device", device_id), self._k("subscribers", device_id), self._k("reqs", device_id))
        tx.zrem(self._k("seen"), device_id)
        for member in subscribers:
            tx.delete(self._k("subs", member.partition(SEP)[0], device_id))
        for member in requests:
            key_id, _, async_id = member.partition(SEP)
            tx.delete(self._k("req", key_id, async_id))
            tx.zrem(self._k("reqs"), member)
        tx.delete(*(self._k(part, device_id) for part in ("snap_paths", "snap_rep", "snap_des", "snap_sub")))

    async def devices_last_seen_before(self, cutoff: float, limit: int = 1000) -> list[str]:
        ids = await self.redis.zrangebyscore(self._k("seen"), "-inf", f"({cutoff}", start=0, num=limit)
        return [_text(i) for i in ids]

    # ---- live registrations and observations: a blob per record, a sorted set of expiry times -------
    async def put_registration(self, registration: RegistrationRecord) -> None:
        async with self.redis.pipeline(transaction=True) as tx:
            tx.set(self._k("reg", registration.device_id), _encode(registration))
            tx.zadd(self._k("reg_expiry"), {registration.device_id: registration.expires_at})
            await tx.execute()

    async def put_registrations(
        self,
        registrations: Sequence[RegistrationRecord],
        observations: Sequence[ObservationRecord] = (),
        fresh: Sequence[str] = (),
    ) -> None:
        """Without `fresh` ids one MULTI. With them three round trips whatever the batch size: one WATCHes their
        observation-token sets, one script reads them, one MULTI deletes the tokens' records and writes the batch;
        again if an observation of one was stored meanwhile (its record would stay behind, named by no token set)."""
        if not fresh:  # nothing read, nothing to watch
            async with self.redis.pipeline(transaction=True) as tx:
                writes = Writes()
                self._write_registrations(writes, registrations, observations)
                writes.queue_on(tx)
                await tx.execute()
            return
        token_sets = [self._k("reg_obs", device_id) for device_id in fresh]

        async def ended_tokens(tx: Pipeline) -> list[list[str]]:
            # all sets in one round trip on the watching connection (SMEMBERS there would be one each)
            found = await self._run_now(tx, self._read_replaced, token_sets, [0])
            return [[_text(t) for t in members] for members in found]

        def write(tx: Pipeline, ended: list[list[str]]) -> None:
            writes = Writes()
            for token_set, tokens in zip(token_sets, ended, strict=True):
                writes.delete(token_set)
                for token in tokens:
                    writes.delete(self._k("obs", token))
            self._write_registrations(writes, registrations, observations)
            writes.queue_on(tx)

        await self._transact(token_sets, ended_tokens, write)

    def _write_registrations(
        self, writes: Writes, registrations: Sequence[RegistrationRecord], observations: Sequence[ObservationRecord]
    ) -> None:
        """Queue the registrations, their expiry times and the observations with their token-set entries."""
        expiry = self._k("reg_expiry")
        for registration in registrations:
            writes.set(self._k("reg", registration.device_id), _encode(registration))
            writes.zadd(expiry, registration.device_id, registration.expires_at)
        for observation in observations:
            token = observation.token.hex()
            writes.set(self._k("obs", token), _encode(observation))
            writes.sadd(self._k("reg_obs", observation.device_id), token)

    async def get_registration(self, device_id: str) -> RegistrationRecord | None:
        return await self._blob(RegistrationRecord, self._k("reg", device_id))

    async def list_registrations(self) -> list[RegistrationRecord]:
        ids = sorted(_text(i) for i in await self.redis.zrange(self._k("reg_expiry"), 0, -1))
        return await self._blobs(RegistrationRecord, [self._k("reg", i) for i in ids])

    async def registrations_expiring(self, now: float, limit: int = 1000) -> list[RegistrationRecord]:
        ids = await self.redis.zrangebyscore(self._k("reg_expiry"), "-inf", f"({now}", start=0, num=limit)
        return await self._blobs(RegistrationRecord, [self._k("reg", _text(i)) for i in ids])

    async def remove_registration(self, device_id: str, updated_at: float | None = None) -> bool:
        removed = await self._remove_reg(
            keys=[self._k("reg", device_id), self._k("reg_expiry"), self._k("reg_obs", device_id)],
            args=[device_id, "" if updated_at is None else repr(updated_at), self._k("obs", "")],
        )
        return bool(removed)

    async def put_observation(self, observation: ObservationRecord) -> None:
        async with self.redis.pipeline(transaction=True) as tx:
            tx.set(self._k("obs", observation.token.hex()), _encode(observation))
            tx.sadd(self._k("reg_obs", observation.device_id), observation.token.hex())
            await tx.execute()

    async def get_observation(self, token: bytes) -> ObservationRecord | None:
        return await self._blob(ObservationRecord, self._k("obs", token.hex()))

    async def device_observations(self, device_id: str) -> list[ObservationRecord]:
        tokens = sorted(_text(t) for t in await self.redis.smembers(self._k("reg_obs", device_id)))
        return await self._blobs(ObservationRecord, [self._k("obs", t) for t in tokens])

    async def remove_observation(self, token: bytes) -> None:
        observation = await self.get_observation(token)
        async with self.redis.pipeline(transaction=True) as tx:
            tx.delete(self._k("obs", token.hex()))
            if observation is not None:
                tx.srem(self._k("reg_obs", observation.device_id), token.hex())
            await tx.execute()

    # ---- resource subscriptions ------------------------------------------------------------------
    async def add_subscription(self, key_id: str, device_id: str, path: str) -> None:
        async with self.redis.pipeline(transaction=True) as tx:
            tx.sadd(self._k("subs", key_id, device_id), path)
            tx.sadd(self._k("subscribers", device_id), f"{key_id}{SEP}{path}")
            await tx.execute()

    async def remove_subscription(self, key_id: str, device_id: str, path: str) -> bool:
        async with self.redis.pipeline(transaction=True) as tx:
            tx.srem(self._k("subs", key_id, device_id), path)
            tx.srem(self._k("subscribers", device_id), f"{key_id}{SEP}{path}")
            removed, _ = await tx.execute()
        return bool(removed)

    async def list_subscriptions(self, key_id: str, device_id: str) -> list[str]:
        return sorted(_text(p) for p in await self.redis.smembers(self._k("subs", key_id, device_id)))

    async def remove_device_subscriptions(self, device_id: str, key_id: str | None = None) -> int:
        pairs = await self.subscribers(device_id)
        doomed = [(k, p) for k, p in pairs if key_id is None or k == key_id]
        if not doomed:
            return 0
        async with self.redis.pipeline(transaction=True) as tx:
            for k, p in doomed:
                tx.srem(self._k("subs", k, device_id), p)
                tx.srem(self._k("subscribers", device_id), f"{k}{SEP}{p}")
            await tx.execute()
        return len(doomed)

    async def subscribers(self, device_id: str) -> list[tuple[str, str]]:
        members = [_text(m) for m in await self.redis.smembers(self._k("subscribers", device_id))]
        return sorted((m.partition(SEP)[0], m.partition(SEP)[2]) for m in members)

    # ---- presubscriptions ------------------------------------------------------------------------
    async def set_presubscriptions(self, key_id: str, account_id: str, rules: Sequence[PresubscriptionRule]) -> None:
        async with self.redis.pipeline(transaction=True) as tx:
            if rules:
                tx.set(self._k("presub", key_id), _encode(list(rules)))
                tx.sadd(self._k("presub_keys", account_id), key_id)
            else:
                tx.delete(self._k("presub", key_id))
                tx.srem(self._k("presub_keys", account_id), key_id)
            await tx.execute()

    async def get_presubscriptions(self, key_id: str) -> list[PresubscriptionRule]:
        data = await self.redis.get(self._k("presub", key_id))
        return [] if data is None else _decode(list[PresubscriptionRule], data)

    async def account_presubscriptions(self, account_id: str) -> list[tuple[str, list[PresubscriptionRule]]]:
        keys = sorted(_text(k) for k in await self.redis.smembers(self._k("presub_keys", account_id)))
        result = []
        for key_id in keys:
            rules = await self.get_presubscriptions(key_id)
            if rules:
                result.append((key_id, rules))
        return result

    # ---- channels and their event journal ---------------------------------------------------------
    # ---- device credentials: a blob per record, a set per account --------------------------------------
    async def create_shared_key(self, key: DeviceSharedKey) -> KeyClaim:
        name = key.endpoint_name
        claim = await self._create_shared_key(
            keys=[
                self._k("psk", name),
                self._k("enroll", name),
                self._k("bootstrap", name),
                self._k("psks"),
                self._k("psks", key.account_id),
            ],
            args=[key.account_id, _encode(key), name],
        )
        return cast(KeyClaim, _text(claim))

    async def get_shared_key(self, endpoint_name: str) -> DeviceSharedKey | None:
        return await self._blob(DeviceSharedKey, self._k("psk", endpoint_name))

    async def list_shared_keys(
        self, account_id: str | None, *, after: str | None = None, limit: int = 1000
    ) -> list[DeviceSharedKey]:
        index = self._k("psks") if account_id is None else self._k("psks", account_id)
        names = sorted(n for n in (_text(m) for m in await self.redis.smembers(index)) if n > (after or ""))
        return await self._blobs(DeviceSharedKey, [self._k("psk", n) for n in names[:limit]])

    async def delete_shared_key(self, endpoint_name: str) -> bool:
        key = await self.get_shared_key(endpoint_name)
        if key is None:
            return False
        async with self.redis.pipeline(transaction=True) as tx:
            tx.delete(self._k("psk", endpoint_name))
            tx.srem(self._k("psks"), endpoint_name)
            tx.srem(self._k("psks", key.account_id), endpoint_name)
            await tx.execute()
        return True

    async def put_trusted_ca(self, ca: TrustedCa) -> None:
        async with self.redis.pipeline(transaction=True) as tx:
            tx.set(self._k("ca", ca.id), _encode(ca))
            tx.sadd(self._k("cas"), ca.id)
            tx.sadd(self._k("cas", ca.account_id), ca.id)
            await tx.execute()

    async def list_trusted_cas(self, account_id: str | None = None) -> list[TrustedCa]:
        index = self._k("cas") if account_id is None else self._k("cas", account_id)
        ids = sorted(_text(m) for m in await self.redis.smembers(index))
        return await self._blobs(TrustedCa, [self._k("ca", i) for i in ids])

    async def delete_trusted_ca(self, ca_id: str) -> bool:
        ca = await self._blob(TrustedCa, self._k("ca", ca_id))
        if ca is None:
            return False
        async with self.redis.pipeline(transaction=True) as tx:
            tx.delete(self._k("ca", ca_id))
            tx.srem(self._k("cas"), ca_id)
            tx.srem(self._k("cas", ca.account_id), ca_id)
            await tx.execute()
        return True

    async def put_channel(self, channel: ChannelConfig) -> None:
        async with self.redis.pipeline(transaction=True) as tx:
            tx.set(self._k("channel", channel.key_id), _encode(channel))
            tx.sadd(self._k("channels"), channel.key_id)
            tx.sadd(self._k("channels", channel.account_id), channel.key_id)
            await tx.execute()

    async def get_channel(self, key_id: str) -> ChannelConfig | None:
        return await self._blob(ChannelConfig, self._k("channel", key_id))

    async def delete_channel(self, key_id: str) -> bool:
        channel = await self.get_channel(key_id)
        async with self.redis.pipeline(transaction=True) as tx:
            tx.delete(self._k("channel", key_id), self._k("events", key_id), self._k("drops", key_id))
            tx.srem(self._k("channels"), key_id)
            if channel is not None:
                tx.srem(self._k("channels", channel.account_id), key_id)
            await tx.execute()
        return channel is not None

    async def list_channels(self, account_id: str | None = None) -> list[ChannelConfig]:
        index = self._k("channels") if account_id is None else self._k("channels", account_id)
        keys = sorted(_text(k) for k in await self.redis.smembers(index))
        return await self._blobs(ChannelConfig, [self._k("channel", k) for k in keys])

    async def add_channel_drops(self, key_id: str, drops: ChannelDrops) -> None:
        async with self.redis.pipeline(transaction=True) as tx:
            for field, count in (("overflow", drops.overflow), ("expired", drops.expired), ("failed", drops.failed)):
                if count:
                    tx.hincrby(self._k("drops", key_id), field, count)
            await tx.execute()

    async def get_channel_drops(self, key_id: str) -> ChannelDrops:
        counts = {_text(k): int(v) for k, v in (await self.redis.hgetall(self._k("drops", key_id))).items()}
        return ChannelDrops(counts.get("overflow", 0), counts.get("expired", 0), counts.get("failed", 0))

    async def append_events(self, key_id: str, events: Sequence[StoredEvent]) -> None:
        if events:
            await self.redis.rpush(self._k("events", key_id), *(_encode(e) for e in events))

    async def load_events(self, key_id: str) -> list[StoredEvent]:
        return [_decode(StoredEvent, data) for data in await self.redis.lrange(self._k("events", key_id), 0, -1)]

    async def drop_head_events(self, key_id: str, count: int) -> None:
        if count > 0:
            await self.redis.ltrim(self._k("events", key_id), count, -1)

    # ---- device-request queue -----------------------------------------------------------------------
    async def enqueue_request(self, request: DeviceRequest, max_pending: int = 0) -> None:
        # one round trip, and the checks and the insert cannot interleave with another node's (enqueue_request.lua)
        outcome = await self._enqueue(
            keys=[
                self._k("req", request.key_id, request.async_id),
                self._k("reqs", request.device_id),
                self._k("reqs"),
                self._k("reqseq"),
            ],
            args=[_encode(request), f"{request.key_id}{SEP}{request.async_id}", max_pending],
        )
        check_enqueued(int(outcome), request, max_pending)

    async def _requests(self, index: str) -> list[DeviceRequest]:
        members = [_text(m) for m in await self.redis.zrange(index, 0, -1)]
        keys = [self._k("req", m.partition(SEP)[0], m.partition(SEP)[2]) for m in members]
        return await self._blobs(DeviceRequest, keys)

    async def pending_requests(self, device_id: str) -> list[DeviceRequest]:
        return await self._requests(self._k("reqs", device_id))

    async def devices_with_pending_requests(self, device_ids: Sequence[str]) -> set[str]:
        ids = list(dict.fromkeys(device_ids))
        async with self.redis.pipeline(transaction=False) as reads:
            for device_id in ids:
                reads.exists(self._k("reqs", device_id))
            found = await reads.execute()
        return {device_id for device_id, exists in zip(ids, found, strict=True) if exists}

    async def all_pending_requests(self) -> list[DeviceRequest]:
        return await self._requests(self._k("reqs"))

    async def count_pending_requests(self) -> int:
        return int(await self.redis.zcard(self._k("reqs")))

    async def find_request(self, key_id: str, async_id: str) -> DeviceRequest | None:
        return await self._blob(DeviceRequest, self._k("req", key_id, async_id))

    async def update_request(self, request: DeviceRequest) -> None:
        await self.redis.set(self._k("req", request.key_id, request.async_id), _encode(request), xx=True)

    async def remove_request(self, key_id: str, async_id: str) -> bool:
        request = await self.find_request(key_id, async_id)
        if request is None:
            return False
        member = f"{key_id}{SEP}{async_id}"
        async with self.redis.pipeline(transaction=True) as tx:
            tx.delete(self._k("req", key_id, async_id))
            tx.zrem(self._k("reqs", request.device_id), member)
            tx.zrem(self._k("reqs"), member)
            await tx.execute()
        return True

    # ---- state snapshot: one hash per column, so each setter is one field write ------------------------
    async def _set_field(self, column: str, device_id: str, path: str, value: bytes) -> None:
        async with self.redis.pipeline(transaction=True) as tx:
            tx.zadd(self._k("snap_paths", device_id), {path: 0})
            tx.hset(self._k(column, device_id), path, value)
            await tx.execute()

    async def set_reported(self, device_id: str, path: str, reported: ReportedValue) -> None:
        self._reported.put(device_id, path, reported)

    async def set_reported_many(self, values: Sequence[tuple[str, str, ReportedValue]]) -> None:
        put = self._reported.put
        for device_id, path, reported in values:
            put(device_id, path, reported)

    async def _write_reported(self, pending: Pending) -> None:
        async with self.redis.pipeline(transaction=True) as tx:
            for device_id, values in pending.items():
                tx.zadd(self._k("snap_paths", device_id), dict.fromkeys(values, 0))
                tx.hset(self._k("snap_rep", device_id), mapping={p: _encode(v) for p, v in values.items()})
            await tx.execute()

    async def set_desired(self, device_id: str, path: str, desired: DesiredValue) -> None:
        await self._set_field("snap_des", device_id, path, _encode(desired))

    async def set_subscribed(self, device_id: str, path: str, subscribed: bool) -> None:
        await self._set_field("snap_sub", device_id, path, b"1" if subscribed else b"0")

    async def clear_subscribed(self, device_id: str) -> None:
        await self.redis.delete(self._k("snap_sub", device_id))

    async def ensure_resources(self, device_id: str, paths: Sequence[str]) -> None:
        if paths:
            await self.redis.zadd(self._k("snap_paths", device_id), dict.fromkeys(paths, 0), nx=True)

    async def get_desired(self, device_id: str, path: str) -> DesiredValue | None:
        data = await self.redis.hget(self._k("snap_des", device_id), path)
        return None if data is None else _decode(DesiredValue, data)

    async def get_snapshot(self, device_id: str) -> list[SnapshotResource]:
        await self._reported.flush()
        async with self.redis.pipeline(transaction=True) as tx:
            tx.zrange(self._k("snap_paths", device_id), 0, -1)
            tx.hgetall(self._k("snap_rep", device_id))
            tx.hgetall(self._k("snap_des", device_id))
            tx.hgetall(self._k("snap_sub", device_id))
            paths, reported, desired, subscribed = await tx.execute()
        return [
            SnapshotResource(
                path=_text(path),
                reported=_decode(ReportedValue, reported[path]) if path in reported else None,
                desired=_decode(DesiredValue, desired[path]) if path in desired else None,
                subscribed=subscribed.get(path) == b"1",
            )
            for path in paths
        ]

    # ---- cluster coordination -------------------------------------------------------------------------
    async def acquire_lease(self, name: str, owner: str, ttl_seconds: float, now: float) -> bool:
        result = await self._acquire(keys=[self._k("lease", name)], args=[owner, repr(now), repr(now + ttl_seconds)])
        return bool(result)

    async def release_lease(self, name: str, owner: str) -> None:
        await self._release(keys=[self._k("lease", name)], args=[owner])

    # ---- bootstrap configurations -------------------------------------------------------------------
    async def put_bootstrap_config(self, config: BootstrapConfig) -> bool:
        name = config.endpoint_name
        keys = [self._k("bootstrap", name), self._k("enroll", name), self._k("bootstraps", config.account_id)]
        return bool(await self._put_bootstrap(keys=keys, args=[config.account_id, _encode(config), name]))

    async def get_bootstrap_config(self, endpoint_name: str) -> BootstrapConfig | None:
        data = await self.redis.hget(self._k("bootstrap", endpoint_name), "data")
        return None if data is None else _decode(BootstrapConfig, data)

    async def list_bootstrap_configs(
        self, account_id: str, *, after: str | None = None, limit: int = 50
    ) -> list[BootstrapConfig]:
        low = f"({after}" if after is not None else "-"
        index = self._k("bootstraps", account_id)
        names = [_text(n) for n in await self.redis.zrangebylex(index, low, "+", start=0, num=limit)]
        configs = []
        for name in names:
            config = await self.get_bootstrap_config(name)
            if config is not None and config.account_id == account_id:
                configs.append(config)
        return configs

    async def delete_bootstrap_config(self, account_id: str, endpoint_name: str) -> bool:
        keys = [self._k("bootstrap", endpoint_name), self._k("bootstraps", account_id)]
        return bool(await self._delete_bootstrap(keys=keys, args=[account_id, endpoint_name]))

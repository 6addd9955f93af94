"""`RedisStore`: all shared state in Redis, so that several `devicehub serve` nodes act as one service.

Records are msgpack blobs (the same msgspec Structs as SQLite); indexes are sets and sorted sets beside them. The
same code runs on one Redis and on a Redis Cluster (connection.py detects which): every key carries a hash tag
naming what its writes go with (keys.py), so each transaction or Lua script (lua/) touches one slot, and a write that
spans tags is one step per slot in an order readers tolerate. Claims that must be atomic across nodes are scripts in
one slot; a write derived from what it replaces WATCHes the keys it reads on the server of their slot and retries if
another node changed them before its EXEC (`_transact`). Key names all start with `prefix`. One module per aggregate
over one connection (connection.py).
"""

from __future__ import annotations

from devicehub.outages import unavailable
from devicehub.store.redis.accounts import RedisAccounts
from devicehub.store.redis.bootstrap import RedisBootstrapConfigs
from devicehub.store.redis.channels import RedisChannels
from devicehub.store.redis.contacts import RedisContacts
from devicehub.store.redis.credentials import RedisCredentials
from devicehub.store.redis.device_log import RedisDeviceLog
from devicehub.store.redis.devices import RedisDevices
from devicehub.store.redis.enrolment import RedisEnrolment
from devicehub.store.redis.firmware import RedisFirmware
from devicehub.store.redis.leases import RedisLeases
from devicehub.store.redis.objects import RedisAccountObjects
from devicehub.store.redis.registrations import RedisRegistrations
from devicehub.store.redis.requests import RedisRequests
from devicehub.store.redis.saved_queries import RedisSavedQueries
from devicehub.store.redis.snapshot import RedisSnapshot
from devicehub.store.redis.subscriptions import RedisSubscriptions
from devicehub.store.redis.usage import RedisUsage


class RedisStore(
    RedisAccounts,
    RedisEnrolment,
    RedisDevices,
    RedisRegistrations,
    RedisDeviceLog,
    RedisSavedQueries,
    RedisUsage,
    RedisSubscriptions,
    RedisRequests,
    RedisChannels,
    RedisCredentials,
    RedisBootstrapConfigs,
    RedisAccountObjects,
    RedisContacts,
    RedisLeases,
    RedisFirmware,
    RedisSnapshot,  # after the aggregates that write the snapshot too (devices, requests)
):
    """The domain's `Store` on one Redis database that every node of a cluster shares."""

    shared = True  # several nodes: key revocations, channel ownership and held devices go through this server

    def unavailable(self, error: BaseException) -> bool:
        return unavailable(error)

    async def open(self) -> None:
        await self._connect()
        await self._index_existing_devices()

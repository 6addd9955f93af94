"""Saved device directory filters on Redis: per account a hash of records and a hash of names, in the account's slot,
written by one script (lua/put_saved_query.lua) so that a name is claimed once across nodes."""

from __future__ import annotations

from pathlib import Path

from devicehub.domain.saved_queries import MAX_PER_ACCOUNT, Saved, SavedQuery
from devicehub.store.record_upgrades import decode
from devicehub.store.redis.codec import encode, text
from devicehub.store.redis.connection import RedisConnection

_PUT = (Path(__file__).with_name("lua") / "put_saved_query.lua").read_text()
_DELETE = """
local old = redis.call('HGET', KEYS[1], ARGV[1])
if not old then return 0 end
redis.call('HDEL', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[2], cmsgpack.unpack(old)['name'])
return 1
"""


class RedisSavedQueries(RedisConnection):
    """`SavedQueryStore` on Redis."""

    def _saved_keys(self, account_id: str) -> tuple[str, str]:
        return self.keys.acc("queries", account_id), self.keys.acc("query_names", account_id)

    async def put_saved_query(self, query: SavedQuery, *, create: bool) -> Saved:
        records, names = self._saved_keys(query.account_id)
        args = (query.id, query.name, encode(query), "1" if create else "0", MAX_PER_ACCOUNT)
        (outcome,) = await self._eval_each([(_PUT, 2, records, names, *args)])
        return Saved(text(outcome))

    async def get_saved_query(self, account_id: str, query_id: str) -> SavedQuery | None:
        data = await self.redis.hget(self._saved_keys(account_id)[0], query_id)
        return None if data is None else decode(SavedQuery, data)

    async def list_saved_queries(self, account_id: str) -> list[SavedQuery]:
        stored = await self.redis.hgetall(self._saved_keys(account_id)[0])
        return sorted((decode(SavedQuery, v) for v in stored.values()), key=lambda q: q.id)

    async def delete_saved_query(self, account_id: str, query_id: str) -> bool:
        (removed,) = await self._eval_each([(_DELETE, 2, *self._saved_keys(account_id), query_id)])
        return bool(removed)

"""Last contact times on Redis: one hash per account (field: the device id), a batch in one pipeline. The later
time wins (Lua: HSET only when newer), so two nodes writing the same device cannot move it back."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from devicehub.store.redis.connection import RedisConnection

_LATER = """
for i = 1, #ARGV, 2 do
  local old = tonumber(redis.call('HGET', KEYS[1], ARGV[i]) or '-1')
  if tonumber(ARGV[i + 1]) > old then redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1]) end
end
return 0
"""


class RedisContacts(RedisConnection):
    """`ContactStore` on Redis."""

    async def put_contacts(self, contacts: Sequence[tuple[str, str, float]]) -> None:
        by_account: dict[str, list[str]] = defaultdict(list)
        for account_id, device_id, at in contacts:
            by_account[account_id] += [device_id, repr(at)]
        async with self.redis.pipeline(transaction=False) as pipe:
            for account_id, args in by_account.items():
                pipe.eval(_LATER, 1, self.keys.acc("contacts", account_id), *args)
            await pipe.execute()

    async def get_contacts(self, account_id: str, device_ids: Sequence[str]) -> dict[str, float]:
        if not device_ids:
            return {}
        values = await self.redis.hmget(self.keys.acc("contacts", account_id), list(device_ids))
        return {d: float(v) for d, v in zip(device_ids, values, strict=True) if v is not None}

    async def delete_contacts(self, account_id: str, device_ids: Sequence[str]) -> None:
        if device_ids:
            await self.redis.hdel(self.keys.acc("contacts", account_id), *device_ids)

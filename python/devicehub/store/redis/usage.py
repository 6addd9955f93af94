"""Per-account usage counters on Redis: a hash per account and day (`usage:{acc:<id>}:<day>`, field
`<hour>:<metric>`), HINCRBY so that every node's sums add up, each day's hash expiring KEEP_S after its last write.
A flush is one pipeline; a read asks the days of its range at once."""

from __future__ import annotations

from collections.abc import Sequence

from devicehub.domain.usage import KEEP_S, UsageRow
from devicehub.store.redis.codec import text
from devicehub.store.redis.connection import RedisConnection

DAY = 86_400


class RedisUsage(RedisConnection):
    """`UsageStore` on Redis."""

    def _day(self, account_id: str, day: int) -> str:
        return self.keys.acc("usage", account_id, str(day))

    async def add_usage(self, rows: Sequence[UsageRow]) -> None:
        await self._write_usage(rows, add=True)

    async def set_usage(self, rows: Sequence[UsageRow]) -> None:
        await self._write_usage(rows, add=False)

    async def _write_usage(self, rows: Sequence[UsageRow], *, add: bool) -> None:
        """Each row's count added to (`add`) or put in place of its hour's field, the day kept KEEP_S past its end."""
        if not rows:
            return
        async with self.redis.pipeline(transaction=False) as pipe:
            for account_id, hour, metric, n in rows:
                key = self._day(account_id, hour // DAY)
                (pipe.hincrby if add else pipe.hset)(key, f"{hour}:{metric}", n)
                pipe.expire(key, KEEP_S + DAY)
            await pipe.execute()

    async def get_usage(self, account_id: str, start: float, end: float) -> dict[int, dict[str, int]]:
        days = range(int(start) // DAY, int(end - 1) // DAY + 1) if end > start else range(0)
        async with self.redis.pipeline(transaction=False) as reads:
            for day in days:
                reads.hgetall(self._day(account_id, day))
            replies = await reads.execute()
        found: dict[int, dict[str, int]] = {}
        for reply in replies:
            for field, n in reply.items():
                hour, _, metric = text(field).partition(":")
                if start <= int(hour) < end:
                    found.setdefault(int(hour), {})[metric] = int(n)
        return found

    async def sweep_usage(self, before: float) -> None:
        """Nothing to do: each day's hash expires by itself."""

"""The device state snapshot on Redis: one hash per column, so each setter is one field write."""

from __future__ import annotations

from collections.abc import Sequence

from devicehub.domain.model import DesiredValue, ReportedValue, SnapshotResource
from devicehub.store.record_upgrades import decode
from devicehub.store.redis.codec import encode, text
from devicehub.store.redis.connection import RedisConnection


class RedisSnapshot(RedisConnection):
    """`SnapshotStore` on Redis."""

    async def _set_field(self, column: str, device_id: str, path: str, value: bytes) -> None:
        async with self._multi(self.keys.dev("snap_paths", device_id)) as tx:
            tx.zadd(self.keys.dev("snap_paths", device_id), {path: 0})
            tx.hset(self.keys.dev(column, device_id), path, value)
            await tx.execute()

    async def set_reported(self, device_id: str, path: str, reported: ReportedValue) -> None:
        self._reported.put(device_id, path, reported)

    async def set_reported_many(self, values: Sequence[tuple[str, str, ReportedValue]]) -> None:
        put = self._reported.put
        for device_id, path, reported in values:
            put(device_id, path, reported)

    async def set_desired(self, device_id: str, path: str, desired: DesiredValue) -> None:
        await self._set_field("snap_des", device_id, path, encode(desired))

    async def set_subscribed(self, device_id: str, path: str, subscribed: bool) -> None:
        await self._set_field("snap_sub", device_id, path, b"1" if subscribed else b"0")

    async def clear_subscribed(self, device_id: str) -> None:
        await self.redis.delete(self.keys.dev("snap_sub", device_id))

    async def ensure_resources(self, device_id: str, paths: Sequence[str]) -> None:
        if paths:
            await self.redis.zadd(self.keys.dev("snap_paths", device_id), dict.fromkeys(paths, 0), nx=True)

    async def get_desired(self, device_id: str, path: str) -> DesiredValue | None:
        data = await self.redis.hget(self.keys.dev("snap_des", device_id), path)
        return None if data is None else decode(DesiredValue, data)

    async def get_snapshot(self, device_id: str) -> list[SnapshotResource]:
        await self._reported.flush()
        async with self._multi(self.keys.dev("snap_paths", device_id)) as tx:
            tx.zrange(self.keys.dev("snap_paths", device_id), 0, -1)
            tx.hgetall(self.keys.dev("snap_rep", device_id))
            tx.hgetall(self.keys.dev("snap_des", device_id))
            tx.hgetall(self.keys.dev("snap_sub", device_id))
            paths, reported, desired, subscribed = await tx.execute()
        return [
            SnapshotResource(
                path=text(path),
                reported=decode(ReportedValue, reported[path]) if path in reported else None,
                desired=decode(DesiredValue, desired[path]) if path in desired else None,
                subscribed=subscribed.get(path) == b"1",
            )
            for path in paths
        ]

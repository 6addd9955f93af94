"""The device state snapshot on SQLite; reported values through the write-behind."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

import msgspec

from devicehub.domain.model import DesiredValue, ReportedValue, SnapshotResource
from devicehub.errors import StorageUnavailable
from devicehub.store.record_upgrades import decode
from devicehub.store.sqlite.codec import encode
from devicehub.store.sqlite.writer import SqliteWriter


class SqliteSnapshot(SqliteWriter):
    """`SnapshotStore` on SQLite."""

    async def set_reported(self, device_id: str, path: str, reported: ReportedValue) -> None:
        self._reported.put(device_id, path, reported)
        self._cache.set_reported(device_id, path, reported)

    async def set_reported_many(self, values: Sequence[tuple[str, str, ReportedValue]]) -> None:
        put, cache = self._reported.put, self._cache.set_reported
        for device_id, path, reported in values:
            put(device_id, path, reported)
            cache(device_id, path, reported)

    async def set_desired(self, device_id: str, path: str, desired: DesiredValue) -> None:
        self._cache.touch(device_id)
        await self._write(
            lambda db: db.execute(
                "INSERT INTO snapshot (device_id, path, desired) VALUES (?, ?, ?)"
                " ON CONFLICT (device_id, path) DO UPDATE SET desired = excluded.desired",
                (device_id, path, encode(desired)),
            )
        )
        self._cache.update(device_id, path, desired=desired)

    async def set_subscribed(self, device_id: str, path: str, subscribed: bool) -> None:
        self._cache.touch(device_id)
        await self._write(
            lambda db: db.execute(
                "INSERT INTO snapshot (device_id, path, subscribed) VALUES (?, ?, ?)"
                " ON CONFLICT (device_id, path) DO UPDATE SET subscribed = excluded.subscribed",
                (device_id, path, int(subscribed)),
            )
        )
        self._cache.update(device_id, path, subscribed=subscribed)

    async def clear_subscribed(self, device_id: str) -> None:
        self._cache.touch(device_id)
        await self._write(lambda db: db.execute("UPDATE snapshot SET subscribed = 0 WHERE device_id = ?", (device_id,)))
        self._cache.clear_subscribed(device_id)

    async def ensure_resources(self, device_id: str, paths: Sequence[str]) -> None:
        self._cache.touch(device_id)
        await self._write(
            lambda db: db.executemany(
                "INSERT OR IGNORE INTO snapshot (device_id, path) VALUES (?, ?)", [(device_id, p) for p in paths]
            )
        )
        self._cache.ensure(device_id, paths)

    async def get_desired(self, device_id: str, path: str) -> DesiredValue | None:
        cached = self._cache.resource(device_id, path)
        if cached is not None:
            return cached.desired
        # desired values are written through (set_desired awaits its commit): a reader connection sees them
        return await self._one(
            DesiredValue,
            "SELECT desired FROM snapshot WHERE device_id = ? AND path = ? AND desired IS NOT NULL",
            (device_id, path),
            reader=True,
        )

    async def get_snapshot(self, device_id: str) -> list[SnapshotResource]:
        cached = self._cache.snapshot(device_id)
        if cached is not None:
            return cached
        epoch = self._cache.epoch(device_id)

        def work(db: sqlite3.Connection) -> list[SnapshotResource]:
            rows = db.execute(
                "SELECT path, reported, desired, subscribed FROM snapshot WHERE device_id = ? ORDER BY path",
                (device_id,),
            )
            return [
                SnapshotResource(
                    path=str(path),
                    reported=None if reported is None else decode(ReportedValue, reported),
                    desired=None if desired is None else decode(DesiredValue, desired),
                    subscribed=bool(subscribed),
                )
                for path, reported, desired, subscribed in rows
            ]

        # read-your-writes without flushing: the values not committed yet are laid over the rows read; when a
        # flush completed during the read, its values may have been committed after the read began: read again
        for _ in range(3):
            completed = self._reported.completed
            snapshot = await self._query(work)
            if self._reported.completed == completed:
                break
        else:  # flushes keep completing under this read (a store far behind): take the slow, certain way
            try:
                await self._reported.flush()
            except StorageUnavailable:
                pass  # served from memory: the values the store could not take are laid over what it holds
            snapshot = await self._read(work)
        # appended to the log and not folded yet (reported_log.py), then pending and in flight: newest last
        unwritten = {**self._log.values_for(device_id), **self._reported.pending_for(device_id)}
        if unwritten:  # laid over the rows; a value of a path with no row yet is the row its fold will insert
            rows = {r.path: r for r in snapshot}
            for path, value in unwritten.items():
                row = rows.get(path)
                rows[path] = (
                    SnapshotResource(path=path, reported=value)
                    if row is None
                    else (msgspec.structs.replace(row, reported=value))
                )
            snapshot = [rows[path] for path in sorted(rows)]
        self._cache.fill_snapshot(device_id, snapshot, epoch)
        return snapshot

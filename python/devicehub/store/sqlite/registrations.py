"""Live LwM2M registrations and observations on SQLite."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from devicehub.domain.device_log import DeviceEventRecord
from devicehub.domain.model import ObservationRecord, Registration
from devicehub.store.sqlite.codec import encode
from devicehub.store.sqlite.device_log import insert_events
from devicehub.store.sqlite.writer import SqliteWriter


class SqliteRegistrations(SqliteWriter):
    """`RegistrationStore` on SQLite."""

    async def put_registration(self, registration: Registration) -> None:
        await self._write(
            lambda db: db.execute(
                "INSERT OR REPLACE INTO registrations (device_id, updated_at, expires_at, data) VALUES (?, ?, ?, ?)",
                (registration.device_id, registration.updated_at, registration.expires_at, encode(registration)),
            )
        )

    async def put_registrations(
        self,
        registrations: Sequence[Registration],
        observations: Sequence[ObservationRecord] = (),
        fresh: Sequence[str] = (),
        events: Sequence[DeviceEventRecord] = (),
    ) -> None:
        def work(db: sqlite3.Connection) -> None:
            db.executemany("DELETE FROM observations WHERE device_id = ?", [(device_id,) for device_id in fresh])
            db.executemany(
                "INSERT OR REPLACE INTO registrations (device_id, updated_at, expires_at, data) VALUES (?, ?, ?, ?)",
                [(r.device_id, r.updated_at, r.expires_at, encode(r)) for r in registrations],
            )
            db.executemany(
                "INSERT OR REPLACE INTO observations (token, device_id, data) VALUES (?, ?, ?)",
                [(o.token, o.device_id, encode(o)) for o in observations],
            )
            insert_events(db, events)  # issue 32 #3: the lifecycle history rides in the batch's transaction

        await self._write(work)

    async def get_registration(self, device_id: str) -> Registration | None:
        return await self._one(Registration, "SELECT data FROM registrations WHERE device_id = ?", (device_id,))

    async def list_registrations(self) -> list[Registration]:
        return await self._all(Registration, "SELECT data FROM registrations ORDER BY device_id", ())

    async def registrations_expiring(self, now: float, limit: int = 1000) -> list[Registration]:
        return await self._all(
            Registration,
            "SELECT data FROM registrations WHERE expires_at < ? ORDER BY expires_at LIMIT ?",
            (now, limit),
        )

    async def remove_registration(
        self, device_id: str, updated_at: float | None = None, event: DeviceEventRecord | None = None
    ) -> bool:
        def work(db: sqlite3.Connection) -> bool:
            sql = "DELETE FROM registrations WHERE device_id = ?"
            args: tuple[object, ...] = (device_id,)
            if updated_at is not None:
                sql, args = sql + " AND updated_at = ?", (device_id, updated_at)
            if db.execute(sql, args).rowcount == 0:
                return False
            db.execute("DELETE FROM observations WHERE device_id = ?", (device_id,))
            if event is not None:
                insert_events(db, [event])
            return True

        return await self._read(work)

    async def put_observation(self, observation: ObservationRecord) -> None:
        await self._write(
            lambda db: db.execute(
                "INSERT OR REPLACE INTO observations (token, device_id, data) VALUES (?, ?, ?)",
                (observation.token, observation.device_id, encode(observation)),
            )
        )

    async def get_observation(self, token: bytes) -> ObservationRecord | None:
        return await self._one(ObservationRecord, "SELECT data FROM observations WHERE token = ?", (token,))

    async def device_observations(self, device_id: str) -> list[ObservationRecord]:
        return await self._all(
            ObservationRecord, "SELECT data FROM observations WHERE device_id = ? ORDER BY token", (device_id,)
        )

    async def remove_observation(self, token: bytes) -> None:
        await self._write(lambda db: db.execute("DELETE FROM observations WHERE token = ?", (token,)))

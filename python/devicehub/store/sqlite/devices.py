"""Device records and directory queries on SQLite."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any

from devicehub.domain.model import Device, ReportedValue
from devicehub.domain.storage.device_query import DeviceQuery
from devicehub.store.record_upgrades import decode
from devicehub.store.sqlite.codec import encode
from devicehub.store.sqlite.reported_log import TOMBSTONE
from devicehub.store.sqlite.snapshot import SqliteSnapshot

_SQL_OPS = {"eq": "=", "neq": "!=", "gte": ">=", "lte": "<=", "in": "IN", "nin": "NOT IN"}


def _where(account_id: str, query: DeviceQuery) -> tuple[str, list[object]]:
    """SQL for the query's conditions; column names come from device_query's fixed lists, values are bound."""
    clauses = ["account_id = ?"]
    args: list[object] = [account_id]
    for condition in query.conditions:
        op = _SQL_OPS[condition.op]
        if condition.op in ("in", "nin"):
            marks = ", ".join("?" * len(condition.values))
            clauses.append(f"{condition.field} {op} ({marks})")
        else:
            clauses.append(f"{condition.field} {op} ?")
        args.extend(condition.values)
    return " AND ".join(clauses), args


def _rows_in(db: sqlite3.Connection, sql: str, values: Sequence[str]) -> list[tuple[Any, ...]]:
    """The rows of `sql`, whose `IN ({})` takes `values`, asked in chunks below SQLite's bound on host
    parameters."""
    rows: list[tuple[Any, ...]] = []
    for start in range(0, len(values), 500):
        chunk = tuple(values[start : start + 500])
        rows.extend(db.execute(sql.format(",".join("?" * len(chunk))), chunk))
    return rows


class SqliteDevices(SqliteSnapshot):  # a registration writes the snapshot's entries and values with the device
    """`DeviceStore` on SQLite."""

    async def put_device(self, device: Device) -> None:
        self._cache.touch(device.id)
        self._cache.directory_changed()
        await self._write(
            lambda db: db.execute(
                "INSERT OR REPLACE INTO devices (id, account_id, endpoint_name, state, last_seen_at, data,"
                " endpoint_type, host_gateway, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    device.id,
                    device.account_id,
                    device.endpoint_name,
                    device.state,
                    device.last_seen_at,
                    encode(device),
                    device.endpoint_type,
                    device.host_gateway,
                    device.created_at,
                    device.updated_at,
                ),
            )
        )
        self._directory.stored(device.account_id, device.endpoint_name, device.id)
        self._cache.put_device(device)

    async def get_device(self, device_id: str) -> Device | None:
        device = self._cache.device(device_id)
        if device is None:
            epoch = self._cache.epoch(device_id)
            device = await self._one(Device, "SELECT data FROM devices WHERE id = ?", (device_id,), reader=True)
            if device is not None:
                self._cache.fill_device(device, epoch)
        return device

    async def get_devices(self, device_ids: Sequence[str]) -> list[Device]:
        # issue 16: a registration batch reads its devices here. Ids claimed for new names are in no table yet, and
        # devices in the read cache need no query: a storm of known devices reads nothing from SQLite
        found: list[Device] = []
        missing: list[str] = []
        for device_id in device_ids:
            if not self._directory.is_reserved(device_id):
                cached = self._cache.device(device_id)
                if cached is None:
                    missing.append(device_id)
                else:
                    found.append(cached)
        if not missing:
            return found

        def work(db: sqlite3.Connection) -> list[bytes]:
            return [row[0] for row in _rows_in(db, "SELECT data FROM devices WHERE id IN ({})", missing)]

        return found + [decode(Device, data) for data in await self._read(work)]

    async def put_registered_devices(
        self,
        devices: Sequence[Device],
        unchanged: Sequence[str] = (),
        reported: Sequence[tuple[str, str, ReportedValue]] = (),
    ) -> None:
        # a value is written with its entry (one row write, not the empty row now and the value a flush later),
        # unless the write-behind holds an older value of it: then it goes after that one, as set_reported
        valued, later = self._reported.split_held(reported)
        if valued and self._log.holds_any():  # and unless the log holds one the fold would put back over it
            logged = self._log.holds
            later += [item for item in valued if logged(item[0], item[1])]
            valued = [item for item in valued if not logged(item[0], item[1])]
        with_value = {(device_id, path) for device_id, path, _ in valued} if devices else set()

        def work(db: sqlite3.Connection) -> None:
            db.executemany(
                "INSERT OR REPLACE INTO devices (id, account_id, endpoint_name, state, last_seen_at, data,"
                " endpoint_type, host_gateway, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    (
                        d.id,
                        d.account_id,
                        d.endpoint_name,
                        d.state,
                        d.last_seen_at,
                        encode(d),
                        d.endpoint_type,
                        d.host_gateway,
                        d.created_at,
                        d.updated_at,
                    )
                    for d in devices
                ],
            )
            db.executemany(
                "INSERT OR IGNORE INTO snapshot (device_id, path) VALUES (?, ?)",
                [(d.id, r.path) for d in devices for r in d.resources if (d.id, r.path) not in with_value],
            )
            if valued:
                db.executemany(
                    "INSERT INTO snapshot (device_id, path, reported) VALUES (?, ?, ?)"
                    " ON CONFLICT (device_id, path) DO UPDATE SET reported = excluded.reported",
                    [(device_id, path, encode(value)) for device_id, path, value in valued],
                )
            # the device ids claimed for them (`_claim`) are stored with them
            db.executemany(
                "INSERT OR IGNORE INTO device_ids (account_id, endpoint_name, id) VALUES (?, ?, ?)",
                [(d.account_id, d.endpoint_name, d.id) for d in devices],
            )
            ids = [(d.id,) for d in devices] + [(device_id,) for device_id in unchanged]
            db.executemany("DELETE FROM subscriptions WHERE device_id = ?", ids)
            db.executemany("UPDATE snapshot SET subscribed = 0 WHERE device_id = ? AND subscribed != 0", ids)

        for device_id in (*(d.id for d in devices), *unchanged):  # the read cache (read_cache.py): loads racing
            self._cache.drop_subscriptions(device_id)  # this write must not fill it
        if devices:
            self._cache.directory_changed()
        await self._write(work)
        for device in devices:
            self._directory.stored(device.account_id, device.endpoint_name, device.id)  # its claim is in the tables
            self._cache.drop_subscriptions(device.id)  # the registration's write removed them (spec §2.1)
            self._cache.put_device(device)
            self._cache.ensure(device.id, [r.path for r in device.resources])
            self._cache.clear_subscribed(device.id)
        for device_id in unchanged:
            self._cache.drop_subscriptions(device_id)
            self._cache.clear_subscribed(device_id)
        for device_id, path, value in valued:
            self._cache.set_reported(device_id, path, value)
        for device_id, path, value in later:
            await self.set_reported(device_id, path, value)

    async def find_device(self, account_id: str, endpoint_name: str) -> Device | None:
        return await self._one(
            Device, "SELECT data FROM devices WHERE account_id = ? AND endpoint_name = ?", (account_id, endpoint_name)
        )

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
        where, args = _where(account_id, DeviceQuery.of(query, state))
        if after is not None:
            where += " AND id < ?" if descending else " AND id > ?"
            args.append(after)
        key = (account_id, where, tuple(args), limit, descending)
        page = self._cache.listing(key)  # a page no device change has touched since it was read
        if page is not None:
            return list(page)
        epoch = self._cache.directory_epoch()
        sql = f"SELECT id FROM devices WHERE {where} ORDER BY id {'DESC' if descending else 'ASC'} LIMIT ?"
        cached = self._cache.device

        def work(db: sqlite3.Connection) -> list[Device]:
            # a cached record is what the device's last completed write stored (the cache follows each commit):
            # reading and decoding records is the listing's main cost, so only what the cache lacks is read
            devices = []
            for (device_id,) in db.execute(sql, (*args, limit)).fetchall():
                device = cached(device_id)
                if device is None:
                    row = db.execute("SELECT data FROM devices WHERE id = ?", (device_id,)).fetchone()
                    if row is None:  # deleted since the page was read
                        continue
                    device = decode(Device, row[0])
                devices.append(device)
            return devices

        devices = await self._query(work)
        self._cache.fill_listing(key, devices, epoch)
        return list(devices)

    async def count_devices(
        self, account_id: str, *, state: str | None = None, query: DeviceQuery | None = None
    ) -> int:
        where, args = _where(account_id, DeviceQuery.of(query, state))
        return await self._query(
            lambda db: int(db.execute(f"SELECT COUNT(*) FROM devices WHERE {where}", args).fetchone()[0])
        )

    async def delete_device(self, device_id: str) -> None:
        self._cache.drop_subscriptions(device_id)
        self._cache.directory_changed()
        await self._requests.remove_device(device_id)  # first: a crash between leaves a device, never its orphans

        def work(db: sqlite3.Connection) -> list[tuple[str, str]]:
            names = [
                (str(account_id), str(name))
                for table in ("device_ids", "devices")
                for account_id, name in db.execute(
                    f"SELECT account_id, endpoint_name FROM {table} WHERE id = ?", (device_id,)
                )
            ]
            for table in ("device_ids", "devices", "subscriptions", "snapshot"):
                column = "id" if table in ("devices", "device_ids") else "device_id"
                db.execute(f"DELETE FROM {table} WHERE {column} = ?", (device_id,))
            if logged:  # the log holds the device's values: a tombstone after them, or a fold would put them back
                db.execute(TOMBSTONE, (device_id,))
            return names

        # decided as the work is queued, with nothing awaited between: the device's values the write-behind holds
        # are dropped, and a flush in flight (its append queued before this work) counts as logged as the appended
        # ones do. The `flush()` awaited here before did not wait for one in flight, which then appended after
        # `logged` was read: no tombstone followed its row, and a fold from the rows put the values back (a leak)
        self._reported.discard(device_id)
        logged = self._log.logged(device_id) or self._reported.writing(device_id)
        names = await self._read(work)
        self._log.forget(device_id)
        self._directory.deleted(device_id, names)  # its name may mint a new id
        self._cache.forget(device_id)

    async def devices_last_seen_before(self, cutoff: float, limit: int = 1000) -> list[str]:
        return await self._read(
            lambda db: [
                str(r[0])
                for r in db.execute(
                    "SELECT id FROM devices WHERE last_seen_at < ? ORDER BY last_seen_at LIMIT ?", (cutoff, limit)
                )
            ]
        )

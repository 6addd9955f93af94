"""The SQLite store's contacts table (issue 30 #1): one B-tree keyed by device id (WITHOUT ROWID), and a data directory
made before it, whose `device_contacts` is a rowid table with rows in it, moved over at open with every row kept."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

from devicehub.store.sqlite.store import SqliteStore
from devicehub.store.sqlite.writer import DB_FILE

A = "a" * 32
B = "b" * 32
# the table as every release before issue 30 made it
OLD_TABLE = (
    "CREATE TABLE device_contacts (device_id TEXT PRIMARY KEY, account_id TEXT NOT NULL, contact_at REAL NOT NULL)"
)


def _open_and_close(data_dir: Path) -> None:
    async def scenario() -> None:
        store = SqliteStore(data_dir)
        await store.open()
        await store.close()

    asyncio.run(asyncio.wait_for(scenario(), 20))


def _keyed(db: sqlite3.Connection) -> bool:
    """The table is WITHOUT ROWID, and no index of its own holds its key."""
    (wr,) = db.execute("SELECT wr FROM pragma_table_list WHERE name = 'device_contacts'").fetchone()
    indexes = db.execute("SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'device_contacts'")
    return bool(wr) and not indexes.fetchall()


def test_a_new_data_directory_has_the_keyed_table(tmp_path: Path) -> None:
    _open_and_close(tmp_path)
    with sqlite3.connect(tmp_path / DB_FILE) as db:
        assert _keyed(db)


def test_an_old_data_directorys_contacts_move_to_the_keyed_table_and_keep_their_rules(tmp_path: Path) -> None:
    _open_and_close(tmp_path)  # every other table as today
    old = [(f"{n:032x}", A if n % 3 else B, 1_800_000_000.0 + n / 7) for n in range(3000)]
    db = sqlite3.connect(tmp_path / DB_FILE)
    with db:
        db.execute("DROP TABLE device_contacts")
        db.execute(OLD_TABLE)
        db.executemany("INSERT INTO device_contacts (device_id, account_id, contact_at) VALUES (?, ?, ?)", old)
    assert not _keyed(db)
    db.close()

    async def scenario() -> None:
        store = SqliteStore(tmp_path)
        await store.open()
        try:
            in_a = [d for d, account, _ in old if account == A]
            assert await store.get_contacts(A, in_a) == {d: t for d, account, t in old if account == A}
            assert await store.get_contacts(B, in_a) == {}  # each row kept its account
            d, account, t = old[1]
            await store.put_contacts([(account, d, t - 1.0), (account, "new", 5.0)])  # an earlier time moves nothing
            assert await store.get_contacts(account, [d, "new"]) == {d: t, "new": 5.0}
            await store.put_contacts([(account, d, t + 1.0)])
            await store.delete_contacts(account, ["new"])
            assert await store.get_contacts(account, [d, "new"]) == {d: t + 1.0}
        finally:
            await store.close()

    asyncio.run(asyncio.wait_for(scenario(), 20))
    with sqlite3.connect(tmp_path / DB_FILE) as db:
        assert _keyed(db)
        assert db.execute("SELECT count(*) FROM device_contacts").fetchone() == (3000,)
    _open_and_close(tmp_path)  # once moved, a later open leaves it


def test_an_earlier_release_reads_and_writes_the_keyed_table(tmp_path: Path) -> None:
    """A downgrade: the statements every release before issue 30 ran, on the new table."""
    _open_and_close(tmp_path)
    with sqlite3.connect(tmp_path / DB_FILE) as db:
        db.execute(
            "INSERT INTO device_contacts (device_id, account_id, contact_at) VALUES (?2, ?1, ?3)"
            " ON CONFLICT (device_id) DO UPDATE SET contact_at = max(contact_at, excluded.contact_at)",
            (A, "d1", 10.0),
        )
        rows = db.execute(
            "SELECT device_id, contact_at FROM device_contacts WHERE account_id = ? AND device_id IN (?)", (A, "d1")
        ).fetchall()
        assert rows == [("d1", 10.0)]

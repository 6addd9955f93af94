"""The main database file's tables and indexes, and the columns added to devices since the first release."""

from __future__ import annotations

import sqlite3

from devicehub.domain.model import Device
from devicehub.store.record_upgrades import decode

SCHEMA = """
CREATE TABLE IF NOT EXISTS accounts (id TEXT PRIMARY KEY, name TEXT NOT NULL UNIQUE, data BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS api_keys (
    id TEXT PRIMARY KEY, account_id TEXT NOT NULL, key_hash TEXT NOT NULL UNIQUE, created_at REAL NOT NULL,
    data BLOB NOT NULL);
CREATE INDEX IF NOT EXISTS api_keys_account ON api_keys (account_id, created_at);
CREATE TABLE IF NOT EXISTS enrollments (endpoint_name TEXT PRIMARY KEY, account_id TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS devices (
    id TEXT PRIMARY KEY, account_id TEXT NOT NULL, endpoint_name TEXT NOT NULL, state TEXT NOT NULL,
    last_seen_at REAL NOT NULL, data BLOB NOT NULL, UNIQUE (account_id, endpoint_name));
CREATE INDEX IF NOT EXISTS devices_seen ON devices (last_seen_at);
CREATE TABLE IF NOT EXISTS device_ids (
    account_id TEXT NOT NULL, endpoint_name TEXT NOT NULL, id TEXT NOT NULL, PRIMARY KEY (account_id, endpoint_name));
CREATE TABLE IF NOT EXISTS subscriptions (
    key_id TEXT NOT NULL, device_id TEXT NOT NULL, path TEXT NOT NULL, PRIMARY KEY (key_id, device_id, path));
CREATE INDEX IF NOT EXISTS subscriptions_device ON subscriptions (device_id);
CREATE TABLE IF NOT EXISTS presubscriptions (key_id TEXT PRIMARY KEY, account_id TEXT NOT NULL, rules BLOB NOT NULL);
CREATE INDEX IF NOT EXISTS presubscriptions_account ON presubscriptions (account_id);
CREATE TABLE IF NOT EXISTS channels (key_id TEXT PRIMARY KEY, account_id TEXT NOT NULL, data BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS channel_drops (
    key_id TEXT PRIMARY KEY, overflow INTEGER NOT NULL, expired INTEGER NOT NULL, failed INTEGER NOT NULL,
    delivered INTEGER NOT NULL DEFAULT 0);
CREATE TABLE IF NOT EXISTS channel_events (
    key_id TEXT NOT NULL, seq INTEGER NOT NULL, kind INTEGER NOT NULL, data BLOB NOT NULL,
    queued_at_ms INTEGER NOT NULL, device TEXT NOT NULL DEFAULT '', PRIMARY KEY (key_id, seq)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS snapshot (
    device_id TEXT NOT NULL, path TEXT NOT NULL, reported BLOB, desired BLOB, subscribed INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (device_id, path)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS reported_log (device_id TEXT NOT NULL, path TEXT NOT NULL, reported BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS reported_batches (data BLOB, deleted TEXT);
CREATE TABLE IF NOT EXISTS registrations (
    device_id TEXT PRIMARY KEY, updated_at REAL NOT NULL, expires_at REAL NOT NULL, data BLOB NOT NULL);
CREATE INDEX IF NOT EXISTS registrations_expiry ON registrations (expires_at);
CREATE TABLE IF NOT EXISTS observations (token BLOB PRIMARY KEY, device_id TEXT NOT NULL, data BLOB NOT NULL);
CREATE INDEX IF NOT EXISTS observations_device ON observations (device_id);
CREATE TABLE IF NOT EXISTS shared_keys (endpoint_name TEXT PRIMARY KEY, account_id TEXT NOT NULL, data BLOB NOT NULL);
CREATE INDEX IF NOT EXISTS shared_keys_account ON shared_keys (account_id, endpoint_name);
CREATE TABLE IF NOT EXISTS trusted_cas (id TEXT PRIMARY KEY, account_id TEXT NOT NULL, data BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS leases (name TEXT PRIMARY KEY, owner TEXT NOT NULL, expires_at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS bootstrap_configs (
    endpoint_name TEXT PRIMARY KEY, account_id TEXT NOT NULL, data BLOB NOT NULL);
CREATE INDEX IF NOT EXISTS bootstrap_configs_account ON bootstrap_configs (account_id, endpoint_name);
CREATE TABLE IF NOT EXISTS lwm2m_objects (
    account_id TEXT NOT NULL, object_id INTEGER NOT NULL, data BLOB NOT NULL, PRIMARY KEY (account_id, object_id));
CREATE TABLE IF NOT EXISTS device_contacts (
    device_id TEXT PRIMARY KEY, account_id TEXT NOT NULL, contact_at REAL NOT NULL) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS firmware_images (
    account_id TEXT NOT NULL, id TEXT NOT NULL, data BLOB NOT NULL, PRIMARY KEY (account_id, id));
CREATE TABLE IF NOT EXISTS firmware_manifests (
    account_id TEXT NOT NULL, id TEXT NOT NULL, data BLOB NOT NULL, PRIMARY KEY (account_id, id));
CREATE TABLE IF NOT EXISTS campaigns (
    account_id TEXT NOT NULL, id TEXT NOT NULL, phase TEXT NOT NULL, data BLOB NOT NULL, PRIMARY KEY (account_id, id));
CREATE INDEX IF NOT EXISTS campaigns_phase ON campaigns (phase);
CREATE TABLE IF NOT EXISTS campaign_devices (
    campaign_id TEXT NOT NULL, device_id TEXT NOT NULL, data BLOB NOT NULL, PRIMARY KEY (campaign_id, device_id))
    WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS device_log (
    id TEXT PRIMARY KEY, account_id TEXT NOT NULL, device_id TEXT NOT NULL, at REAL NOT NULL, data BLOB NOT NULL)
    WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS device_log_account ON device_log (account_id, id);
CREATE INDEX IF NOT EXISTS device_log_device ON device_log (device_id, id);
CREATE INDEX IF NOT EXISTS device_log_at ON device_log (at);
CREATE TABLE IF NOT EXISTS saved_queries (
    account_id TEXT NOT NULL, id TEXT NOT NULL, name TEXT NOT NULL, data BLOB NOT NULL, PRIMARY KEY (account_id, id),
    UNIQUE (account_id, name));
CREATE TABLE IF NOT EXISTS account_usage (
    account_id TEXT NOT NULL, hour INTEGER NOT NULL, metric TEXT NOT NULL, n INTEGER NOT NULL,
    PRIMARY KEY (account_id, hour, metric)) WITHOUT ROWID;
"""

# Directory columns the device list filters on (domain/storage/device_query.py), added to databases made before them
# and filled from the records; each filter has an index led by the account.
_DEVICE_COLUMNS = {
    "endpoint_type": "TEXT NOT NULL DEFAULT ''",
    "host_gateway": "TEXT NOT NULL DEFAULT ''",
    "created_at": "REAL NOT NULL DEFAULT 0",
    "updated_at": "REAL NOT NULL DEFAULT 0",
}

DEVICE_INDEXES = """
CREATE INDEX IF NOT EXISTS devices_account ON devices (account_id, id);
CREATE INDEX IF NOT EXISTS devices_state ON devices (account_id, state, id);
CREATE INDEX IF NOT EXISTS devices_type ON devices (account_id, endpoint_type, id);
CREATE INDEX IF NOT EXISTS devices_gateway ON devices (account_id, host_gateway, id);
CREATE INDEX IF NOT EXISTS devices_created ON devices (account_id, created_at);
CREATE INDEX IF NOT EXISTS devices_updated ON devices (account_id, updated_at);
"""


# issue 34 #1: columns the channel journal gained for cursors (delivered events; each event's device)
_CHANNEL_COLUMNS = {
    ("channel_drops", "delivered"): "INTEGER NOT NULL DEFAULT 0",
    ("channel_events", "device"): "TEXT NOT NULL DEFAULT ''",
}


def add_channel_columns(db: sqlite3.Connection) -> None:
    for (table, name), spec in _CHANNEL_COLUMNS.items():
        if name not in {str(row[1]) for row in db.execute(f"PRAGMA table_info({table})")}:
            db.execute(f"ALTER TABLE {table} ADD COLUMN {name} {spec}")


def add_device_columns(db: sqlite3.Connection) -> None:
    present = {str(row[1]) for row in db.execute("PRAGMA table_info(devices)")}
    missing = [name for name in _DEVICE_COLUMNS if name not in present]
    if not missing:
        return
    db.execute("BEGIN IMMEDIATE")  # the connection is in autocommit mode here: one explicit transaction
    try:
        for name in missing:
            db.execute(f"ALTER TABLE devices ADD COLUMN {name} {_DEVICE_COLUMNS[name]}")
        for device_id, data in db.execute("SELECT id, data FROM devices").fetchall():
            device = decode(Device, data)
            db.execute(
                "UPDATE devices SET endpoint_type = ?, host_gateway = ?, created_at = ?, updated_at = ? WHERE id = ?",
                (device.endpoint_type, device.host_gateway, device.created_at, device.updated_at, device_id),
            )
    except BaseException:
        db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")


# issue 30 #1: `device_contacts` was a rowid table with its primary key in an index of its own, so each contact
# upserted looked the device up in the index, then its row in the table, and dirtied a page of each. WITHOUT ROWID
# keeps the rows in one B-tree keyed by device id (contacts.py). The same columns and key: an earlier release reads
# and writes the new table unchanged.
_CONTACTS_COPY = (
    "CREATE TABLE device_contacts_keyed ("
    " device_id TEXT PRIMARY KEY, account_id TEXT NOT NULL, contact_at REAL NOT NULL) WITHOUT ROWID",
    "INSERT INTO device_contacts_keyed (device_id, account_id, contact_at)"
    " SELECT device_id, account_id, contact_at FROM device_contacts ORDER BY device_id",
    "DROP TABLE device_contacts",
    "ALTER TABLE device_contacts_keyed RENAME TO device_contacts",
)


def key_contacts_by_device(db: sqlite3.Connection) -> None:
    """A database made before issue 30 has the rowid table: its rows move to the keyed one in one transaction, so a
    crash midway leaves the old table whole and the next open moves them again."""
    keyed = db.execute("SELECT wr FROM pragma_table_list WHERE name = 'device_contacts' AND schema = 'main'").fetchone()
    if keyed is None or keyed[0]:
        return
    db.execute("BEGIN IMMEDIATE")  # the connection is in autocommit mode here: one explicit transaction
    try:
        for statement in _CONTACTS_COPY:
            db.execute(statement)
    except BaseException:
        db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")

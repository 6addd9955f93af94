//! The queue's rules in SQL: its schema, what each job does (an enqueue refused for a pending async-id or a full
//! device queue), and how a batch commits: in one transaction, or each job alone when that one fails.

use rusqlite::{params, Connection, OptionalExtension};

use super::{Enqueued, Job, Outcome, Row, StoreError, Value};

pub(super) const SCHEMA: &str = "
PRAGMA journal_mode=WAL;
PRAGMA synchronous=NORMAL;
CREATE TABLE IF NOT EXISTS requests (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, key_id TEXT NOT NULL, async_id TEXT NOT NULL, device_id TEXT NOT NULL,
    data BLOB NOT NULL, UNIQUE (key_id, async_id));
CREATE INDEX IF NOT EXISTS requests_device ON requests (device_id, seq);
";

/// One transaction for the batch; when it fails, each job runs again in a transaction of its own, so an error
/// is the outcome of the job that met it and the others' work stands.
pub fn run_batch(connection: &mut Connection, batch: &[(u64, Job)]) -> Vec<(u64, Outcome)> {
    if batch.len() > 1 {
        if let Ok(values) = transaction(connection, batch.iter().map(|(_, job)| job)) {
            return batch
                .iter()
                .zip(values)
                .map(|((ticket, _), value)| (*ticket, Ok(value)))
                .collect();
        }
    }
    batch
        .iter()
        .map(|(ticket, job)| {
            let outcome =
                transaction(connection, std::iter::once(job)).map(|mut values| values.remove(0));
            (*ticket, outcome)
        })
        .collect()
}

fn transaction<'a>(
    connection: &mut Connection,
    jobs: impl Iterator<Item = &'a Job>,
) -> Result<Vec<Value>, StoreError> {
    let tx = connection.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
    let values = jobs
        .map(|job| execute(&tx, job))
        .collect::<Result<Vec<_>, _>>()?;
    tx.commit()?; // a failed commit or an early return rolls back when `tx` drops
    Ok(values)
}

fn execute(db: &Connection, job: &Job) -> Result<Value, StoreError> {
    Ok(match job {
        Job::Enqueue { row, max_pending } => Value::Enqueued(enqueue(db, row, *max_pending)?),
        Job::Update {
            key_id,
            async_id,
            data,
        } => {
            db.prepare_cached("UPDATE requests SET data = ?1 WHERE key_id = ?2 AND async_id = ?3")?
                .execute(params![data, key_id, async_id])?;
            Value::Done
        }
        Job::Remove { key_id, async_id } => Value::Removed(
            db.prepare_cached("DELETE FROM requests WHERE key_id = ?1 AND async_id = ?2")?
                .execute(params![key_id, async_id])?
                > 0,
        ),
        Job::RemoveDevice { device_id } => {
            db.prepare_cached("DELETE FROM requests WHERE device_id = ?1")?
                .execute(params![device_id])?;
            Value::Done
        }
        Job::Pending { device_id } => Value::Rows(
            db.prepare_cached("SELECT data FROM requests WHERE device_id = ?1 ORDER BY seq")?
                .query_map(params![device_id], |row| row.get(0))?
                .collect::<Result<_, _>>()?,
        ),
        Job::DevicesWithPending { device_ids } => {
            let mut statement =
                db.prepare_cached("SELECT 1 FROM requests WHERE device_id = ?1 LIMIT 1")?;
            let mut found = Vec::new();
            for device_id in device_ids {
                if statement.exists(params![device_id])? {
                    found.push(device_id.clone());
                }
            }
            Value::Devices(found)
        }
        Job::All => Value::Rows(
            db.prepare_cached("SELECT data FROM requests ORDER BY seq")?
                .query_map([], |row| row.get(0))?
                .collect::<Result<_, _>>()?,
        ),
        Job::Count => Value::Count(
            db.prepare_cached("SELECT count(*) FROM requests")?
                .query_row([], |row| row.get(0))?,
        ),
        Job::Find { key_id, async_id } => Value::Found(
            db.prepare_cached("SELECT data FROM requests WHERE key_id = ?1 AND async_id = ?2")?
                .query_row(params![key_id, async_id], |row| row.get(0))
                .optional()?,
        ),
        Job::Import { rows } => {
            let mut insert = db.prepare_cached(
                "INSERT OR IGNORE INTO requests (key_id, async_id, device_id, data) VALUES (?1, ?2, ?3, ?4)",
            )?;
            for row in rows {
                insert.execute(params![row.key_id, row.async_id, row.device_id, row.data])?;
            }
            Value::Done
        }
    })
}

fn enqueue(db: &Connection, row: &Row, max_pending: u32) -> Result<Enqueued, StoreError> {
    if db
        .prepare_cached("SELECT 1 FROM requests WHERE key_id = ?1 AND async_id = ?2")?
        .exists(params![row.key_id, row.async_id])?
    {
        return Ok(Enqueued::Duplicate);
    }
    if max_pending > 0 {
        let queued: i64 = db
            .prepare_cached("SELECT count(*) FROM requests WHERE device_id = ?1")?
            .query_row(params![row.device_id], |r| r.get(0))?;
        if queued >= i64::from(max_pending) {
            return Ok(Enqueued::Full);
        }
    }
    db.prepare_cached(
        "INSERT INTO requests (key_id, async_id, device_id, data) VALUES (?1, ?2, ?3, ?4)",
    )?
    .execute(params![row.key_id, row.async_id, row.device_id, row.data])?;
    Ok(Enqueued::Queued)
}

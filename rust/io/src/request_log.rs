//! The device-request queue (spec §4.3) in a SQLite file of its own, written by a thread of its own.
//!
//! Issue 15: a device request's 202 waits for the commit of its enqueue. Python's writer thread could start a
//! batch only once the busy event loop let go of the GIL (about a millisecond, then again between statements),
//! which held device requests at a quarter of the HTTP framework's rate. This thread needs no GIL: jobs arrive
//! on a channel, a batch of them runs in one transaction, and the outcomes wait in a list until the event loop
//! takes them; a byte on a socket pair the loop watches says when there are some. The file holds nothing but the queue, so
//! this connection is its only writer and never waits for another.

use rusqlite::{params, Connection, ErrorCode, OptionalExtension};
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

/// Jobs run in one transaction at most (what waits beyond it goes in the next).
pub const MAX_BATCH: usize = 256;

const SCHEMA: &str = "
PRAGMA journal_mode=WAL;
PRAGMA synchronous=NORMAL;
CREATE TABLE IF NOT EXISTS requests (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, key_id TEXT NOT NULL, async_id TEXT NOT NULL, device_id TEXT NOT NULL,
    data BLOB NOT NULL, UNIQUE (key_id, async_id));
CREATE INDEX IF NOT EXISTS requests_device ON requests (device_id, seq);
";

/// A request as stored: who queued it, under which async-id, for which device, and its encoded record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    pub key_id: String,
    pub async_id: String,
    pub device_id: String,
    pub data: Vec<u8>,
}

/// One piece of work for the queue's thread.
#[derive(Debug, Clone)]
pub enum Job {
    /// Queue a request unless its async-id is pending for the key or (`max_pending` > 0) the device has that many.
    Enqueue {
        row: Row,
        max_pending: u32,
    },
    /// Replace a pending request's record (its retries left).
    Update {
        key_id: String,
        async_id: String,
        data: Vec<u8>,
    },
    /// Take a request off the queue; `Value::Removed` says whether it was there.
    Remove {
        key_id: String,
        async_id: String,
    },
    /// Take every request of a device off the queue.
    RemoveDevice {
        device_id: String,
    },
    /// A device's requests, oldest first.
    Pending {
        device_id: String,
    },
    /// Which of these devices have a request queued.
    DevicesWithPending {
        device_ids: Vec<String>,
    },
    /// Every request, oldest first.
    All,
    Count,
    Find {
        key_id: String,
        async_id: String,
    },
    /// Rows moved here from an older layout, kept in their order; a row whose async-id is queued already is skipped.
    Import {
        rows: Vec<Row>,
    },
}

/// What an enqueue did; the numbers are the ones both stores report (python/devicehub/store/enqueue.py).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Enqueued {
    Queued = 0,
    Duplicate = 1,
    Full = 2,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    Done,
    Enqueued(Enqueued),
    Removed(bool),
    Count(i64),
    Rows(Vec<Vec<u8>>),
    Devices(Vec<String>),
    Found(Option<Vec<u8>>),
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    /// The disk is full or failed (SQLITE_FULL, SQLITE_IOERR): the request was not at fault.
    #[error("the request queue's disk failed: {0}")]
    Disk(String),
    #[error("the request queue failed: {0}")]
    Sqlite(String),
    #[error("the request queue is closed")]
    Closed,
    #[error("the request queue's wake-up descriptor failed: {0}")]
    Wake(String),
}

impl From<rusqlite::Error> for StoreError {
    fn from(error: rusqlite::Error) -> Self {
        match error.sqlite_error_code() {
            Some(ErrorCode::DiskFull | ErrorCode::SystemIoFailure) => Self::Disk(error.to_string()),
            _ => Self::Sqlite(error.to_string()),
        }
    }
}

pub type Outcome = Result<Value, StoreError>;

/// Outcomes the event loop has not taken yet, and the end of the socket pair that wakes it for them.
struct Finished {
    outcomes: Mutex<Vec<(u64, Outcome)>>,
    wake: UnixStream,
}

impl Finished {
    fn push(&self, outcomes: Vec<(u64, Outcome)>) {
        let mut waiting = self.outcomes.lock().unwrap_or_else(|e| e.into_inner());
        let was_empty = waiting.is_empty();
        waiting.extend(outcomes);
        if was_empty {
            // a byte per list the loop had emptied: a take comes between two, so the pair never fills
            let _ = (&self.wake).write(&[1]);
        }
    }
}

/// The queue's file, its thread and the channel to it. Jobs carry a ticket chosen by the caller, and the outcome
/// comes back with it from [`RequestLog::take`].
pub struct RequestLog {
    jobs: Option<Sender<(u64, Job)>>,
    finished: Arc<Finished>,
    woken: UnixStream,
    thread: Option<JoinHandle<()>>,
}

impl RequestLog {
    /// Opens (creating) the queue's database at `path` and starts its thread.
    pub fn open(path: &Path) -> Result<Self, StoreError> {
        let connection = Connection::open(path)?;
        connection.busy_timeout(std::time::Duration::from_secs(5))?;
        connection.execute_batch(SCHEMA)?;
        let (wake, woken) = UnixStream::pair().map_err(wake_error)?;
        wake.set_nonblocking(true).map_err(wake_error)?;
        woken.set_nonblocking(true).map_err(wake_error)?;
        let finished = Arc::new(Finished {
            outcomes: Mutex::new(Vec::new()),
            wake,
        });
        let (jobs, received) = mpsc::channel();
        let for_thread = Arc::clone(&finished);
        let thread = std::thread::Builder::new()
            .name("request-queue".into())
            .spawn(move || run(connection, &received, &for_thread))
            .map_err(|e| StoreError::Sqlite(format!("cannot start the queue's thread: {e}")))?;
        Ok(Self {
            jobs: Some(jobs),
            finished,
            woken,
            thread: Some(thread),
        })
    }

    /// The descriptor that becomes readable when outcomes wait to be taken.
    pub fn wake_fd(&self) -> RawFd {
        self.woken.as_raw_fd()
    }

    /// Hands a job to the thread; its outcome comes back with `ticket`.
    pub fn submit(&self, ticket: u64, job: Job) -> Result<(), StoreError> {
        let jobs = self.jobs.as_ref().ok_or(StoreError::Closed)?;
        jobs.send((ticket, job)).map_err(|_| StoreError::Closed)
    }

    /// The outcomes finished since the last call, in the order the jobs ran. Resets the wake-up first, so an
    /// outcome pushed meanwhile is either taken now or wakes the caller again.
    pub fn take(&self) -> Vec<(u64, Outcome)> {
        let mut bytes = [0u8; 16];
        while matches!((&self.woken).read(&mut bytes), Ok(n) if n > 0) {} // until WouldBlock: nothing left
        let mut waiting = self
            .finished
            .outcomes
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        std::mem::take(&mut *waiting)
    }

    /// Refuses new jobs, lets the thread finish the ones handed over (their outcomes stay to be taken) and joins it.
    pub fn close(&mut self) {
        self.jobs = None;
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for RequestLog {
    fn drop(&mut self) {
        self.close();
    }
}

fn wake_error(error: std::io::Error) -> StoreError {
    StoreError::Wake(error.to_string())
}

/// The thread: waits for a job, takes every other one already waiting (up to MAX_BATCH) and runs them together.
fn run(mut connection: Connection, jobs: &Receiver<(u64, Job)>, finished: &Finished) {
    while let Ok(first) = jobs.recv() {
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH {
            match jobs.try_recv() {
                Ok(job) => batch.push(job),
                Err(_) => break,
            }
        }
        finished.push(run_batch(&mut connection, &batch));
    }
}

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

#[cfg(test)]
mod tests {
    use super::*;

    fn row(key: &str, async_id: &str, device: &str) -> Row {
        Row {
            key_id: key.into(),
            async_id: async_id.into(),
            device_id: device.into(),
            data: format!("{key}/{async_id}").into_bytes(),
        }
    }

    fn memory() -> Connection {
        let db = Connection::open_in_memory().unwrap();
        db.execute_batch(SCHEMA).unwrap();
        db
    }

    fn values(outcomes: Vec<(u64, Outcome)>) -> Vec<Value> {
        outcomes.into_iter().map(|(_, o)| o.unwrap()).collect()
    }

    #[test]
    fn a_batch_queues_in_order_and_refuses_a_pending_async_id_and_a_full_queue() {
        let mut db = memory();
        let batch = vec![
            (
                1,
                Job::Enqueue {
                    row: row("k", "a", "d"),
                    max_pending: 2,
                },
            ),
            (
                2,
                Job::Enqueue {
                    row: row("k", "a", "d"),
                    max_pending: 2,
                },
            ),
            (
                3,
                Job::Enqueue {
                    row: row("k", "b", "d"),
                    max_pending: 2,
                },
            ),
            (
                4,
                Job::Enqueue {
                    row: row("k", "c", "d"),
                    max_pending: 2,
                },
            ),
            (
                5,
                Job::Enqueue {
                    row: row("k", "c", "e"),
                    max_pending: 2,
                },
            ),
            (
                6,
                Job::Pending {
                    device_id: "d".into(),
                },
            ),
        ];
        let outcomes = run_batch(&mut db, &batch);
        assert_eq!(
            outcomes.iter().map(|(t, _)| *t).collect::<Vec<_>>(),
            [1, 2, 3, 4, 5, 6]
        );
        assert_eq!(
            values(outcomes),
            [
                Value::Enqueued(Enqueued::Queued),
                Value::Enqueued(Enqueued::Duplicate),
                Value::Enqueued(Enqueued::Queued),
                Value::Enqueued(Enqueued::Full),
                Value::Enqueued(Enqueued::Queued),
                Value::Rows(vec![b"k/a".to_vec(), b"k/b".to_vec()]),
            ]
        );
    }

    #[test]
    fn remove_update_find_count_and_devices_with_pending() {
        let mut db = memory();
        let queue = |r: Row| Job::Enqueue {
            row: r,
            max_pending: 0,
        };
        run_batch(
            &mut db,
            &[
                (1, queue(row("k", "a", "d"))),
                (2, queue(row("k", "b", "e"))),
            ],
        );
        let outcomes = run_batch(
            &mut db,
            &[
                (
                    3,
                    Job::Update {
                        key_id: "k".into(),
                        async_id: "a".into(),
                        data: b"new".to_vec(),
                    },
                ),
                (
                    4,
                    Job::Find {
                        key_id: "k".into(),
                        async_id: "a".into(),
                    },
                ),
                (
                    5,
                    Job::Remove {
                        key_id: "k".into(),
                        async_id: "b".into(),
                    },
                ),
                (
                    6,
                    Job::Remove {
                        key_id: "k".into(),
                        async_id: "b".into(),
                    },
                ),
                (
                    7,
                    Job::DevicesWithPending {
                        device_ids: vec!["d".into(), "e".into(), "f".into()],
                    },
                ),
                (8, Job::Count),
                (
                    9,
                    Job::Find {
                        key_id: "k".into(),
                        async_id: "b".into(),
                    },
                ),
                (
                    10,
                    Job::RemoveDevice {
                        device_id: "d".into(),
                    },
                ),
                (11, Job::All),
            ],
        );
        assert_eq!(
            values(outcomes),
            [
                Value::Done,
                Value::Found(Some(b"new".to_vec())),
                Value::Removed(true),
                Value::Removed(false),
                Value::Devices(vec!["d".into()]),
                Value::Count(1),
                Value::Found(None),
                Value::Done,
                Value::Rows(vec![]),
            ]
        );
    }

    #[test]
    fn a_failing_job_fails_alone_and_the_rest_of_its_batch_stands() {
        let mut db = memory();
        db.execute_batch("CREATE TRIGGER refuse BEFORE INSERT ON requests WHEN NEW.device_id = 'bad' BEGIN SELECT RAISE(ABORT, 'refused'); END;")
            .unwrap();
        let queue = |r: Row| Job::Enqueue {
            row: r,
            max_pending: 0,
        };
        let outcomes = run_batch(
            &mut db,
            &[
                (1, queue(row("k", "a", "d"))),
                (2, queue(row("k", "b", "bad"))),
                (3, queue(row("k", "c", "d"))),
            ],
        );
        assert_eq!(outcomes[0].1, Ok(Value::Enqueued(Enqueued::Queued)));
        assert!(matches!(&outcomes[1].1, Err(StoreError::Sqlite(m)) if m.contains("refused")));
        assert_eq!(outcomes[2].1, Ok(Value::Enqueued(Enqueued::Queued)));
        assert_eq!(
            values(run_batch(&mut db, &[(4, Job::Count)])),
            [Value::Count(2)]
        );
    }

    #[test]
    fn a_full_disk_is_the_disk_fault_of_the_job_that_met_it() {
        let mut db = memory();
        let pages: i64 = db.query_row("PRAGMA page_count", [], |r| r.get(0)).unwrap();
        db.execute_batch(&format!("PRAGMA max_page_count = {}", pages + 2))
            .unwrap();
        let mut big = row("k", "big", "d");
        big.data = vec![0; 64 * 1024];
        let outcomes = run_batch(
            &mut db,
            &[
                (
                    1,
                    Job::Enqueue {
                        row: row("k", "a", "d"),
                        max_pending: 0,
                    },
                ),
                (
                    2,
                    Job::Enqueue {
                        row: big,
                        max_pending: 0,
                    },
                ),
            ],
        );
        assert_eq!(outcomes[0].1, Ok(Value::Enqueued(Enqueued::Queued)));
        assert!(
            matches!(&outcomes[1].1, Err(StoreError::Disk(_))),
            "{:?}",
            outcomes[1].1
        );
    }

    #[test]
    fn import_keeps_the_order_and_skips_what_is_queued() {
        let mut db = memory();
        run_batch(
            &mut db,
            &[(
                1,
                Job::Enqueue {
                    row: row("k", "b", "d"),
                    max_pending: 0,
                },
            )],
        );
        let rows = vec![row("k", "a", "d"), row("k", "b", "d"), row("k", "c", "d")];
        run_batch(&mut db, &[(2, Job::Import { rows })]);
        assert_eq!(
            values(run_batch(
                &mut db,
                &[(
                    3,
                    Job::Pending {
                        device_id: "d".into()
                    }
                )]
            )),
            [Value::Rows(vec![
                b"k/b".to_vec(),
                b"k/a".to_vec(),
                b"k/c".to_vec()
            ])]
        );
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn the_thread_runs_jobs_in_order_wakes_the_taker_and_finishes_what_it_was_given_on_close() {
        let dir = std::env::temp_dir().join(format!("request-log-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("requests.db");
        let _ = std::fs::remove_file(&path);
        let mut log = RequestLog::open(&path).unwrap();
        for i in 0..500u64 {
            log.submit(
                i,
                Job::Enqueue {
                    row: row("k", &i.to_string(), "d"),
                    max_pending: 0,
                },
            )
            .unwrap();
        }
        log.close();
        assert!(matches!(
            log.submit(999, Job::Count),
            Err(StoreError::Closed)
        ));
        let mut poll = libc::pollfd {
            fd: log.wake_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd, no timeout.
        assert_eq!(
            unsafe { libc::poll(&mut poll, 1, 0) },
            1,
            "the outcomes woke the taker"
        );
        let outcomes = log.take();
        assert_eq!(
            outcomes.iter().map(|(t, _)| *t).collect::<Vec<_>>(),
            (0..500).collect::<Vec<_>>()
        );
        assert!(outcomes
            .iter()
            .all(|(_, o)| *o == Ok(Value::Enqueued(Enqueued::Queued))));
        // SAFETY: as above.
        assert_eq!(
            unsafe { libc::poll(&mut poll, 1, 0) },
            0,
            "taking reset the wake-up"
        );
        drop(log);
        let reopened = RequestLog::open(&path).unwrap();
        reopened.submit(1, Job::Count).unwrap();
        let counted = loop {
            let mut poll = libc::pollfd {
                fd: reopened.wake_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: as above; waits for the thread's wake-up, no sleep.
            unsafe { libc::poll(&mut poll, 1, 10_000) };
            let taken = reopened.take();
            if !taken.is_empty() {
                break taken;
            }
        };
        assert_eq!(
            counted,
            [(1, Ok(Value::Count(500)))],
            "committed before close: durable"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

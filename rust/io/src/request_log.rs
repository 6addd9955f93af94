//! The device-request queue (spec §4.3) in a SQLite file of its own, written by a thread of its own.
//!
//! Issue 15: a device request's 202 waits for the commit of its enqueue. Python's writer thread could start a
//! batch only once the busy event loop let go of the GIL (about a millisecond, then again between statements),
//! which held device requests at a quarter of the HTTP framework's rate. This thread needs no GIL: jobs arrive
//! on a channel, a batch of them runs in one transaction, and the outcomes wait in a list until the event loop
//! takes them; a byte on a socket pair the loop watches says when there are some. The file holds nothing but the queue, so
//! this connection is its only writer and never waits for another.
//!
//! Its parts: the jobs and their outcomes (here), `rules` (the queue's rules in SQL and how a batch commits) and
//! `worker` (the thread, its channel and the wake-up).

use rusqlite::ErrorCode;

mod rules;
mod worker;

#[cfg(test)]
mod tests;

pub use rules::run_batch;
pub use worker::{RequestLog, MAX_BATCH};

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

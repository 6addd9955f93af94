//! The queue's writer thread: jobs in on a channel, batches run through `rules`, outcomes kept until the
//! event loop takes them, and a byte on a socket pair to wake it for them.

use rusqlite::Connection;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use super::rules::{run_batch, SCHEMA};
use super::{Job, Outcome, StoreError};

/// Jobs run in one transaction at most (what waits beyond it goes in the next).
pub const MAX_BATCH: usize = 256;

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

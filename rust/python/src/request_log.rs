//! `RequestLog`: conversions around `devicehub_io::request_log` (Unix: its wake-up is a socket pair).

use pyo3::prelude::*;

#[cfg(unix)]
use devicehub_io::request_log::{Job, RequestLog, Row, StoreError, Value};
#[cfg(unix)]
use pyo3::types::PyBytes;

/// The device-request queue's file and its writer thread. Every job method hands the job over and returns at
/// once; `take()` returns `[(ticket, ok, value), ...]` once `wake_fd()` is readable: `value` is the job's
/// result when `ok`, else `(disk_fault, message)`.
#[cfg(unix)]
#[pyclass(module = "devicehub._core", name = "RequestLog")]
pub struct PyRequestLog {
    log: RequestLog,
}

#[cfg(unix)]
fn refused(error: StoreError) -> PyErr {
    pyo3::exceptions::PyOSError::new_err(error.to_string())
}

#[cfg(unix)]
impl PyRequestLog {
    fn submit(&self, ticket: u64, job: Job) -> PyResult<()> {
        self.log.submit(ticket, job).map_err(refused)
    }
}

#[cfg(unix)]
#[pymethods]
impl PyRequestLog {
    #[new]
    fn new(py: Python<'_>, path: std::path::PathBuf) -> PyResult<Self> {
        let log = py.detach(|| RequestLog::open(&path)).map_err(refused)?;
        Ok(Self { log })
    }

    fn wake_fd(&self) -> i32 {
        self.log.wake_fd()
    }

    fn enqueue(
        &self,
        ticket: u64,
        key_id: String,
        async_id: String,
        device_id: String,
        data: Vec<u8>,
        max_pending: u32,
    ) -> PyResult<()> {
        let row = Row {
            key_id,
            async_id,
            device_id,
            data,
        };
        self.submit(ticket, Job::Enqueue { row, max_pending })
    }

    fn update(&self, ticket: u64, key_id: String, async_id: String, data: Vec<u8>) -> PyResult<()> {
        self.submit(
            ticket,
            Job::Update {
                key_id,
                async_id,
                data,
            },
        )
    }

    fn remove(&self, ticket: u64, key_id: String, async_id: String) -> PyResult<()> {
        self.submit(ticket, Job::Remove { key_id, async_id })
    }

    fn remove_device(&self, ticket: u64, device_id: String) -> PyResult<()> {
        self.submit(ticket, Job::RemoveDevice { device_id })
    }

    fn pending(&self, ticket: u64, device_id: String) -> PyResult<()> {
        self.submit(ticket, Job::Pending { device_id })
    }

    fn devices_with_pending(&self, ticket: u64, device_ids: Vec<String>) -> PyResult<()> {
        self.submit(ticket, Job::DevicesWithPending { device_ids })
    }

    fn all(&self, ticket: u64) -> PyResult<()> {
        self.submit(ticket, Job::All)
    }

    fn count(&self, ticket: u64) -> PyResult<()> {
        self.submit(ticket, Job::Count)
    }

    fn find(&self, ticket: u64, key_id: String, async_id: String) -> PyResult<()> {
        self.submit(ticket, Job::Find { key_id, async_id })
    }

    fn import_rows(
        &self,
        ticket: u64,
        rows: Vec<(String, String, String, Vec<u8>)>,
    ) -> PyResult<()> {
        let rows = rows
            .into_iter()
            .map(|(key_id, async_id, device_id, data)| Row {
                key_id,
                async_id,
                device_id,
                data,
            })
            .collect();
        self.submit(ticket, Job::Import { rows })
    }

    fn take<'py>(&self, py: Python<'py>) -> PyResult<Vec<(u64, bool, Bound<'py, PyAny>)>> {
        self.log
            .take()
            .into_iter()
            .map(|(ticket, outcome)| {
                Ok(match outcome {
                    Ok(value) => (ticket, true, value_object(py, value)?),
                    Err(error) => {
                        let disk = matches!(error, StoreError::Disk(_));
                        (
                            ticket,
                            false,
                            (disk, error.to_string()).into_pyobject(py)?.into_any(),
                        )
                    }
                })
            })
            .collect()
    }

    /// Refuses new jobs and waits (without the GIL) for the thread to finish those handed over.
    fn close(&mut self, py: Python<'_>) {
        py.detach(|| self.log.close());
    }
}

#[cfg(unix)]
fn value_object(py: Python<'_>, value: Value) -> PyResult<Bound<'_, PyAny>> {
    Ok(match value {
        Value::Done => py.None().into_bound(py),
        Value::Enqueued(outcome) => (outcome as u8).into_pyobject(py)?.into_any(),
        Value::Removed(removed) => pyo3::types::PyBool::new(py, removed).to_owned().into_any(),
        Value::Count(count) => count.into_pyobject(py)?.into_any(),
        Value::Rows(rows) => {
            pyo3::types::PyList::new(py, rows.iter().map(|r| PyBytes::new(py, r)))?.into_any()
        }
        Value::Devices(ids) => ids.into_pyobject(py)?.into_any(),
        Value::Found(found) => match found {
            Some(data) => PyBytes::new(py, &data).into_any(),
            None => py.None().into_bound(py),
        },
    })
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    #[cfg(unix)]
    m.add_class::<PyRequestLog>()?;
    let _ = m;
    Ok(())
}

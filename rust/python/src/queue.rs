//! `ChannelQueue` and `Batch`: conversions around `devicehub_codec::queue`.

use std::sync::atomic::{AtomicBool, Ordering};

use devicehub_codec::queue::{self, Event};
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::errors::QueueError;

/// Carries a core queue error to Python; the orphan rule forbids `From<queue::QueueError> for PyErr`.
pub struct PyQueueError(queue::QueueError);

impl From<PyQueueError> for PyErr {
    fn from(err: PyQueueError) -> Self {
        QueueError::new_err(err.0.to_string())
    }
}

/// Python ints are unbounded: a negative or huge argument is an invalid queue argument (QueueError),
/// not the OverflowError PyO3's own conversion would raise.
fn in_range<T: TryFrom<i64>>(what: &str, value: i64) -> PyResult<T> {
    T::try_from(value).map_err(|_| QueueError::new_err(format!("{what} out of range: {value}")))
}

fn as_tuples<'py>(py: Python<'py>, events: &[Event]) -> Vec<(u8, Bound<'py, PyBytes>, u64)> {
    events
        .iter()
        .map(|e| (e.kind, PyBytes::new(py, &e.data), e.queued_at_ms))
        .collect()
}

/// A taken batch; kept whole so that `put_back` restores exactly what was taken.
#[pyclass(module = "devicehub._core", name = "Batch", frozen)]
pub struct PyBatch {
    batch: queue::Batch,
    /// Set by the first `put_back`: a second one would deliver the events twice.
    returned: AtomicBool,
}

#[pymethods]
impl PyBatch {
    #[getter]
    fn body<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, &self.batch.body)
    }
    #[getter]
    fn count(&self) -> usize {
        self.batch.events.len()
    }
    fn events<'py>(&self, py: Python<'py>) -> Vec<(u8, Bound<'py, PyBytes>, u64)> {
        as_tuples(py, &self.batch.events)
    }
    /// Count the events' waits until `now_ms` into `counts` (per upper bound of `bounds_ms`, then longer);
    /// returns the updated counts and the waits' sum in ms.
    fn count_waits(
        &self,
        now_ms: u64,
        bounds_ms: Vec<u64>,
        mut counts: Vec<u64>,
    ) -> PyResult<(Vec<u64>, u64)> {
        if counts.len() != bounds_ms.len() + 1 {
            return Err(QueueError::new_err(
                "counts needs one slot per bound and one more",
            ));
        }
        let sum = self.batch.count_waits(now_ms, &bounds_ms, &mut counts);
        Ok((counts, sum))
    }
}

#[pyclass(module = "devicehub._core", name = "ChannelQueue")]
pub struct PyChannelQueue {
    queue: queue::ChannelQueue,
}

#[pymethods]
impl PyChannelQueue {
    #[new]
    #[pyo3(signature = (max_bytes = queue::DEFAULT_MAX_BYTES as i64, lifetime_ms = queue::DEFAULT_LIFETIME_MS as i64))]
    fn new(max_bytes: i64, lifetime_ms: i64) -> PyResult<Self> {
        let max_bytes = in_range("max_bytes", max_bytes)?;
        let lifetime_ms = in_range("lifetime_ms", lifetime_ms)?;
        let queue = queue::ChannelQueue::new(max_bytes, lifetime_ms).map_err(PyQueueError)?;
        Ok(Self { queue })
    }
    fn push(&mut self, kind: i64, event: Vec<u8>, now_ms: u64) -> PyResult<usize> {
        let kind = in_range("event kind", kind)?;
        Ok(self.queue.push(kind, event, now_ms).map_err(PyQueueError)?)
    }
    #[pyo3(signature = (max_items, now_ms, max_body_bytes = None))]
    fn take_batch(
        &mut self,
        max_items: i64,
        now_ms: u64,
        max_body_bytes: Option<i64>,
    ) -> PyResult<Option<PyBatch>> {
        let max_items = in_range("max_items", max_items)?;
        let max_body_bytes = match max_body_bytes {
            Some(limit) => in_range("max_body_bytes", limit)?,
            None => usize::MAX,
        };
        let batch = self
            .queue
            .take_batch_bounded(max_items, max_body_bytes, now_ms)
            .map_err(PyQueueError)?;
        Ok(batch.map(|batch| PyBatch {
            batch,
            returned: AtomicBool::new(false),
        }))
    }
    /// The batch stays readable afterwards; only a second `put_back` of it is refused.
    fn put_back(&mut self, batch: &Bound<'_, PyBatch>) -> PyResult<usize> {
        let batch = batch.get();
        if batch.returned.swap(true, Ordering::Relaxed) {
            return Err(QueueError::new_err("batch was already put back"));
        }
        Ok(self.queue.put_back(batch.batch.clone()))
    }
    fn expire(&mut self, now_ms: u64) -> usize {
        self.queue.expire(now_ms)
    }
    /// issue 34 #5: the events the cap or the lifetime removed since the last call, as (kind, encoded event,
    /// queued-at epoch ms, cause) in the order they left.
    fn take_dropped<'py>(
        &mut self,
        py: Python<'py>,
    ) -> Vec<(u8, Bound<'py, PyBytes>, u64, &'static str)> {
        self.queue
            .take_dropped()
            .into_iter()
            .map(|(e, cause)| {
                (
                    e.kind,
                    PyBytes::new(py, &e.data),
                    e.queued_at_ms,
                    cause.name(),
                )
            })
            .collect()
    }
    fn clear(&mut self) -> usize {
        self.queue.clear()
    }
    fn snapshot<'py>(&self, py: Python<'py>) -> Vec<(u8, Bound<'py, PyBytes>, u64)> {
        let events: Vec<Event> = self.queue.iter().cloned().collect();
        as_tuples(py, &events)
    }
    fn __len__(&self) -> usize {
        self.queue.len()
    }
    #[getter]
    fn bytes_used(&self) -> usize {
        self.queue.bytes_used()
    }
    #[getter]
    fn max_bytes(&self) -> usize {
        self.queue.max_bytes()
    }
    #[getter]
    fn lifetime_ms(&self) -> u64 {
        self.queue.lifetime_ms()
    }
    #[getter]
    fn dropped_overflow(&self) -> u64 {
        self.queue.dropped_overflow
    }
    #[getter]
    fn dropped_expired(&self) -> u64 {
        self.queue.dropped_expired
    }
    #[getter]
    fn pushed_total(&self) -> u64 {
        self.queue.pushed_total
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("KIND_NOTIFICATION", queue::KIND_NOTIFICATION)?;
    m.add("KIND_REGISTRATION", queue::KIND_REGISTRATION)?;
    m.add("KIND_REG_UPDATE", queue::KIND_REG_UPDATE)?;
    m.add("KIND_DE_REGISTRATION", queue::KIND_DE_REGISTRATION)?;
    m.add(
        "KIND_REGISTRATIONS_EXPIRED",
        queue::KIND_REGISTRATIONS_EXPIRED,
    )?;
    m.add("KIND_ASYNC_RESPONSE", queue::KIND_ASYNC_RESPONSE)?;
    m.add("KIND_FIRMWARE_UPDATE", queue::KIND_FIRMWARE_UPDATE)?;
    m.add("EVENT_OVERHEAD_BYTES", queue::EVENT_OVERHEAD_BYTES)?;
    m.add("DEFAULT_MAX_BYTES", queue::DEFAULT_MAX_BYTES)?;
    m.add("DEFAULT_LIFETIME_MS", queue::DEFAULT_LIFETIME_MS)?;
    m.add("DEFAULT_CHUNK_SIZE", queue::DEFAULT_CHUNK_SIZE)?;
    m.add("MAX_CHUNK_SIZE", queue::MAX_CHUNK_SIZE)?;
    m.add_class::<PyBatch>()?;
    m.add_class::<PyChannelQueue>()?;
    Ok(())
}

//! `LatencyHistogram`: conversions around `devicehub_codec::histogram`.

use devicehub_codec::histogram::Histogram;
use pyo3::prelude::*;

/// Values (the simulator records latencies in microseconds) in log buckets: percentiles within
/// 1.6 % of the value, fixed memory. Mutable: `record` adds to it.
#[pyclass(module = "devicehub._core", name = "LatencyHistogram")]
#[derive(Default)]
pub struct PyLatencyHistogram {
    histogram: Histogram,
}

#[pymethods]
impl PyLatencyHistogram {
    #[new]
    fn new() -> Self {
        Self::default()
    }

    /// Record one value (negative values count as 0).
    fn record(&mut self, value: i64) {
        self.histogram.record(value.max(0) as u64);
    }

    /// Add every value of `other`.
    fn merge(&mut self, other: PyRef<'_, Self>) {
        self.histogram.merge(&other.histogram);
    }

    /// The value below or at which `percentile` % of the values lie (0 when empty).
    fn percentile(&self, percentile: f64) -> u64 {
        self.histogram.percentile(percentile)
    }

    #[getter]
    fn count(&self) -> u64 {
        self.histogram.count()
    }

    #[getter]
    fn min(&self) -> u64 {
        self.histogram.min()
    }

    #[getter]
    fn max(&self) -> u64 {
        self.histogram.max()
    }

    #[getter]
    fn mean(&self) -> f64 {
        self.histogram.mean()
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyLatencyHistogram>()
}

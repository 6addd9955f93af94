//! `ObserveOrder`: `devicehub_codec::observe_order::ObserveOrder` as the one object both notification paths ask
//! (issue 29 #6). The server's observation holds it; an armed lane holds the same object and moves it on itself.

use pyo3::prelude::*;

use devicehub_codec::observe_order::ObserveOrder;

/// The order of one observation's notifications (RFC 7641 §3.4): the last Observe number taken and when.
#[pyclass(module = "devicehub._core", name = "ObserveOrder")]
pub struct PyObserveOrder {
    pub order: ObserveOrder,
}

#[pymethods]
impl PyObserveOrder {
    #[new]
    #[pyo3(signature = (last_seq=None, last_at=0.0))]
    fn new(last_seq: Option<u32>, last_at: f64) -> Self {
        Self {
            order: ObserveOrder::new(last_seq, last_at),
        }
    }

    #[getter]
    fn last_seq(&self) -> Option<u32> {
        self.order.last()
    }

    #[getter]
    fn last_at(&self) -> f64 {
        self.order.last_at()
    }

    fn advance(&mut self, seq: u32, now: f64) -> bool {
        self.order.advance(seq, now)
    }

    #[pyo3(signature = (seq, now))]
    fn restart(&mut self, seq: Option<u32>, now: f64) {
        self.order.restart(seq, now);
    }

    fn __repr__(&self) -> String {
        match self.order.last() {
            Some(seq) => format!("ObserveOrder({seq}, {:?})", self.order.last_at()),
            None => format!("ObserveOrder(None, {:?})", self.order.last_at()),
        }
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyObserveOrder>()
}

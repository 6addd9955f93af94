//! The `devicehub._core` extension module: converts and registers, nothing more.

use pyo3::prelude::*;

mod cbor;
mod coap;
mod dtls;
mod errors;
mod histogram;
mod links;
mod observe_lane;
mod observe_order;
mod queue;
mod request_log;
mod tls;
mod tlv;
mod udp;

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    errors::register(m)?;
    queue::register(m)?;
    request_log::register(m)?;
    tlv::register(m)?;
    coap::register(m)?;
    cbor::register(m)?;
    links::register(m)?;
    histogram::register(m)?;
    udp::register(m)?;
    observe_order::register(m)?;
    observe_lane::register(m)?;
    dtls::register(m)?;
    tls::register(m)?;
    Ok(())
}

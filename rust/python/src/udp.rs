//! `udp_send_batch`: conversions around `devicehub_core::udp` (Linux; elsewhere it raises OSError).

use pyo3::prelude::*;

#[cfg(target_os = "linux")]
use pyo3::exceptions::PyValueError;
#[cfg(target_os = "linux")]
use std::net::{IpAddr, SocketAddr};

/// Sends every (payload, (host, port)) on the socket `fd` in as few `sendmmsg` calls as it takes, without
/// blocking; returns how many went out, in order from the first. Raises ValueError (before sending any) for a
/// host that is not an IP address literal, OSError when not even the first could be sent.
#[cfg(target_os = "linux")]
#[pyfunction]
fn udp_send_batch(fd: i32, datagrams: Vec<(Vec<u8>, (String, u16))>) -> PyResult<usize> {
    let mut batch = Vec::with_capacity(datagrams.len());
    for (data, (host, port)) in &datagrams {
        let ip: IpAddr = host
            .parse()
            .map_err(|_| PyValueError::new_err(format!("not an IP address: {host:?}")))?;
        batch.push((data.as_slice(), SocketAddr::new(ip, *port)));
    }
    Ok(devicehub_core::udp::send_batch(fd, &batch)?)
}

#[cfg(not(target_os = "linux"))]
#[pyfunction]
fn udp_send_batch(fd: i32, datagrams: Vec<(Vec<u8>, (String, u16))>) -> PyResult<usize> {
    let _ = (fd, datagrams);
    Err(pyo3::exceptions::PyOSError::new_err(
        "sendmmsg is Linux only",
    ))
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(udp_send_batch, m)?)?;
    Ok(())
}

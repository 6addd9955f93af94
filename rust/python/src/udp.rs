//! `udp_send_batch` and `UdpReceiver`: conversions around `devicehub_io::udp` (Linux; elsewhere they raise
//! OSError).

use pyo3::prelude::*;

#[cfg(target_os = "linux")]
use pyo3::exceptions::PyValueError;
#[cfg(target_os = "linux")]
use pyo3::types::{PyBytes, PyList, PyTuple};
#[cfg(target_os = "linux")]
use std::collections::HashMap;
#[cfg(target_os = "linux")]
use std::net::{IpAddr, SocketAddr};

#[cfg(target_os = "linux")]
use crate::observe_lane::{Offered, PyObserveLane, Sifting, Tally};
#[cfg(target_os = "linux")]
use devicehub_codec::observe_lane::empty_ack;

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
    devicehub_io::udp::send_batch(fd, &batch).map_err(os_error)
}

/// `OSError(errno, strerror)`, which Python turns into its subclass (ConnectionRefusedError, BlockingIOError…)
/// with `errno` set; PyO3's own conversion leaves `errno` None.
#[cfg(target_os = "linux")]
fn os_error(error: std::io::Error) -> PyErr {
    match error.raw_os_error() {
        Some(code) => pyo3::exceptions::PyOSError::new_err((code, error.to_string())),
        None => error.into(),
    }
}

#[cfg(not(target_os = "linux"))]
#[pyfunction]
fn udp_send_batch(fd: i32, datagrams: Vec<(Vec<u8>, (String, u16))>) -> PyResult<usize> {
    let _ = (fd, datagrams);
    Err(pyo3::exceptions::PyOSError::new_err(
        "sendmmsg is Linux only",
    ))
}

/// Address tuples handed out are kept (up to this many peers) and handed out again: the same `(host, port)`
/// object for every datagram of a peer, its host string hashed once.
#[cfg(target_os = "linux")]
const ADDRESS_CACHE: usize = 4096;

/// `recvmmsg` into buffers kept across calls; `receive(fd)` returns the waiting datagrams as
/// `[(payload, (host, port)), ...]`.
#[cfg(target_os = "linux")]
#[pyclass(module = "devicehub._core", name = "UdpReceiver")]
pub struct PyUdpReceiver {
    receiver: devicehub_io::udp::Receiver,
    addresses: HashMap<SocketAddr, Py<PyTuple>>,
}

#[cfg(target_os = "linux")]
#[pymethods]
impl PyUdpReceiver {
    #[new]
    fn new(max_datagrams: usize, max_size: usize) -> PyResult<Self> {
        if max_datagrams == 0 || max_datagrams > devicehub_io::udp::MAX_BATCH || max_size == 0 {
            return Err(PyValueError::new_err(format!(
                "max_datagrams must be 1-{}, max_size at least 1",
                devicehub_io::udp::MAX_BATCH
            )));
        }
        Ok(Self {
            receiver: devicehub_io::udp::Receiver::new(max_datagrams, max_size),
            addresses: HashMap::new(),
        })
    }

    #[getter]
    fn capacity(&self) -> usize {
        self.receiver.capacity()
    }

    fn receive<'py>(&mut self, py: Python<'py>, fd: i32) -> PyResult<Bound<'py, PyList>> {
        self.receiver.receive(fd).map_err(os_error)?;
        let out = PyList::empty(py);
        for (data, addr) in self.receiver.datagrams() {
            let address = address_tuple(py, &mut self.addresses, addr)?;
            out.append((PyBytes::new(py, data), address))?;
        }
        Ok(out)
    }

    /// `receive`, with each datagram offered to `lane` first (issue 15 #2). Returns `(others, values, acks,
    /// (taken, duplicates, stale))`: the datagrams the lane left, as `receive` gives them; the armed observations'
    /// new values as `(device_id, path, content_format, payload, observe)`, each observation's `ObserveOrder`
    /// moved on (a number not newer is dropped as stale, RFC 7641 §3.4); and the empty ACKs of the CON
    /// notifications and retransmissions taken, as `(ack, (host, port))`, for the caller to send.
    fn receive_sifting<'py>(
        &mut self,
        py: Python<'py>,
        fd: i32,
        lane: &Bound<'py, PyObserveLane>,
        now: f64,
    ) -> PyResult<Sifting<'py>> {
        self.receiver.receive(fd).map_err(os_error)?;
        let mut lane = lane.borrow_mut();
        let others = PyList::empty(py);
        let values = PyList::empty(py);
        let acks = PyList::empty(py);
        let mut tally = Tally::default();
        for (data, addr) in self.receiver.datagrams() {
            match lane.offer(py, data, addr, now, &values, &mut tally)? {
                Offered::Slow => {
                    let address = address_tuple(py, &mut self.addresses, addr)?;
                    others.append((PyBytes::new(py, data), address))?;
                }
                Offered::Taken {
                    ack: Some(mid),
                    armed_at,
                } => {
                    let address = match armed_at {
                        Some(address) => address.into_bound(py),
                        None => address_tuple(py, &mut self.addresses, addr)?,
                    };
                    acks.append((PyBytes::new(py, &empty_ack(mid)), address))?;
                }
                Offered::Taken { ack: None, .. } => {}
            }
        }
        Ok((others, values, acks, tally.counts()))
    }
}

/// The `(host, port)` tuple of `addr`, the same object for every datagram of a peer while it is in `cache`.
#[cfg(target_os = "linux")]
fn address_tuple<'py>(
    py: Python<'py>,
    cache: &mut HashMap<SocketAddr, Py<PyTuple>>,
    addr: SocketAddr,
) -> PyResult<Bound<'py, PyTuple>> {
    if let Some(address) = cache.get(&addr) {
        return Ok(address.bind(py).clone());
    }
    let host = match addr {
        SocketAddr::V6(v6) if v6.scope_id() != 0 => format!("{}%{}", v6.ip(), v6.scope_id()),
        _ => addr.ip().to_string(),
    };
    let address = PyTuple::new(
        py,
        [
            host.into_pyobject(py)?.into_any(),
            addr.port().into_pyobject(py)?.into_any(),
        ],
    )?;
    if cache.len() >= ADDRESS_CACHE {
        cache.clear();
    }
    cache.insert(addr, address.clone().unbind());
    Ok(address)
}

#[cfg(not(target_os = "linux"))]
#[pyclass(module = "devicehub._core", name = "UdpReceiver")]
pub struct PyUdpReceiver {}

#[cfg(not(target_os = "linux"))]
#[pymethods]
impl PyUdpReceiver {
    #[new]
    fn new(max_datagrams: usize, max_size: usize) -> PyResult<Self> {
        let _ = (max_datagrams, max_size);
        Err(pyo3::exceptions::PyOSError::new_err(
            "recvmmsg is Linux only",
        ))
    }

    #[getter]
    fn capacity(&self) -> usize {
        0
    }

    fn receive<'py>(
        &mut self,
        py: Python<'py>,
        fd: i32,
    ) -> PyResult<Bound<'py, pyo3::types::PyList>> {
        let _ = (py, fd);
        Err(pyo3::exceptions::PyOSError::new_err(
            "recvmmsg is Linux only",
        ))
    }
    fn receive_sifting(
        &mut self,
        fd: i32,
        lane: &Bound<'_, crate::observe_lane::PyObserveLane>,
        now: f64,
    ) -> PyResult<()> {
        let _ = (fd, lane, now);
        Err(pyo3::exceptions::PyOSError::new_err(
            "recvmmsg is Linux only",
        ))
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(udp_send_batch, m)?)?;
    m.add_class::<PyUdpReceiver>()?;
    Ok(())
}

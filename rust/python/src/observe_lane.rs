//! `ObserveLane`: `devicehub_codec::observe_lane` holding the server's own objects as handles; the receiver's
//! `receive_sifting` (udp.rs) runs it over each batch. Each armed observation's order is the `ObserveOrder` the
//! server's observation holds (observe_order.rs): the lane moves it on in Rust, no attribute of a Python object
//! is read or written per value.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyString, PyTuple};
use std::net::{IpAddr, SocketAddr, SocketAddrV6};

use devicehub_codec::observe_lane::{empty_ack, ObserveLane, Sifted};

use crate::observe_order::PyObserveOrder;

/// What an armed observation hands back: the device's id and the observed path (given to the core as they
/// are), the observation's order, shared with the server's Python path, and the `(host, port)` it was armed at,
/// which a CON notification's ACK is addressed to: no tuple made per ACK, however many devices there are
/// (issue 30 #2).
pub struct Armed {
    pub device_id: Py<PyString>,
    pub path: Py<PyString>,
    pub order: Py<PyObserveOrder>,
    pub address: Py<PyTuple>,
}

/// The armed observations of the plain UDP listener and the CON notifications it acknowledged.
#[pyclass(module = "devicehub._core", name = "ObserveLane")]
pub struct PyObserveLane {
    pub lane: ObserveLane<Armed>,
}

/// The `SocketAddr` of a `(host, port)` the receiver handed out (an IP literal, IPv6 with a numeric `%scope`),
/// None for anything else.
pub fn socket_address(host: &str, port: u16) -> Option<SocketAddr> {
    if let Some((ip, scope)) = host.split_once('%') {
        let ip: std::net::Ipv6Addr = ip.parse().ok()?;
        return Some(SocketAddr::V6(SocketAddrV6::new(
            ip,
            port,
            0,
            scope.parse().ok()?,
        )));
    }
    Some(SocketAddr::new(host.parse::<IpAddr>().ok()?, port))
}

/// What a datagram offered to the lane came to.
pub enum Offered {
    /// For the Python path, as it came.
    Slow,
    /// Taken (a value, a stale number or a retransmission); a CON one's message ID to acknowledge, and for a
    /// notification the address its observation was armed at (the datagram's own).
    Taken {
        ack: Option<u16>,
        armed_at: Option<Py<PyTuple>>,
    },
}

/// Datagrams taken, retransmissions among them, stale numbers among them.
#[derive(Default)]
pub struct Tally {
    pub taken: usize,
    pub duplicates: usize,
    pub stale: usize,
}

impl Tally {
    pub fn counts(&self) -> (usize, usize, usize) {
        (self.taken, self.duplicates, self.stale)
    }
}

impl PyObserveLane {
    /// Offer one datagram from `addr`: a new value of an armed observation is appended to `values` as
    /// `(device_id, path, content_format, payload, observe)`, the observation's order moved on (a number not
    /// newer is counted stale and dropped, RFC 7641 §3.4).
    pub fn offer(
        &mut self,
        py: Python<'_>,
        data: &[u8],
        addr: SocketAddr,
        now: f64,
        values: &Bound<'_, PyList>,
        tally: &mut Tally,
    ) -> PyResult<Offered> {
        match self.lane.sift(data, addr, now) {
            Sifted::Slow => Ok(Offered::Slow),
            Sifted::Duplicate { mid } => {
                tally.taken += 1;
                tally.duplicates += 1;
                Ok(Offered::Taken {
                    ack: Some(mid),
                    armed_at: None,
                })
            }
            Sifted::Notification {
                handle,
                seq,
                content_format,
                payload,
                ack,
            } => {
                tally.taken += 1;
                if handle
                    .order
                    .bind(py)
                    .try_borrow_mut()?
                    .order
                    .advance(seq, now)
                {
                    values.append((
                        handle.device_id.bind(py),
                        handle.path.bind(py),
                        content_format,
                        PyBytes::new(py, payload),
                        seq,
                    ))?;
                } else {
                    tally.stale += 1;
                }
                Ok(Offered::Taken {
                    ack,
                    armed_at: ack.map(|_| handle.address.clone_ref(py)),
                })
            }
        }
    }
}

/// What a sifting returns: the datagrams left, the values, the `(ack, address)` pairs to send, and the tally.
pub type Sifting<'py> = (
    Bound<'py, PyList>,
    Bound<'py, PyList>,
    Bound<'py, PyList>,
    (usize, usize, usize),
);

#[pymethods]
impl PyObserveLane {
    #[new]
    fn new(max_acked: usize, lifetime: f64, max_datagram: usize) -> PyResult<Self> {
        if max_acked == 0 || !(lifetime.is_finite() && lifetime > 0.0) {
            return Err(PyValueError::new_err(
                "max_acked must be at least 1, lifetime positive",
            ));
        }
        Ok(Self {
            lane: ObserveLane::new(max_acked, lifetime, max_datagram),
        })
    }

    /// Arm `token` of `device_id` at `(host, port)`; False (nothing armed) for an address that is not an IP literal
    /// or a token longer than CoAP's 8 bytes.
    fn arm(
        &mut self,
        device_id: Bound<'_, PyString>,
        address: Bound<'_, PyTuple>,
        token: &[u8],
        path: Bound<'_, PyString>,
        order: Bound<'_, PyObserveOrder>,
    ) -> PyResult<bool> {
        let (host, port): (String, u16) = address.extract()?;
        let Some(remote) = socket_address(&host, port) else {
            return Ok(false);
        };
        let device = device_id.to_str()?.to_owned();
        let armed = Armed {
            device_id: device_id.unbind(),
            path: path.unbind(),
            order: order.unbind(),
            address: address.unbind(),
        };
        Ok(self.lane.arm(&device, remote, token, armed))
    }

    fn disarm_device(&mut self, device_id: &str) {
        self.lane.disarm_device(device_id);
    }

    fn disarm_remote(&mut self, address: (String, u16)) {
        if let Some(remote) = socket_address(&address.0, address.1) {
            self.lane.disarm_remote(&remote);
        }
    }

    fn disarm_token(&mut self, address: (String, u16), token: &[u8]) {
        if let Some(remote) = socket_address(&address.0, address.1) {
            self.lane.disarm_token(&remote, token);
        }
    }

    /// Offer datagrams that came from `address` by other means than `UdpReceiver.receive_sifting` (a DTLS
    /// session's decrypted records); returns what `receive_sifting` does, the datagrams left being the objects
    /// given and the ACKs addressed to `address`.
    fn sift<'py>(
        &mut self,
        py: Python<'py>,
        datagrams: Vec<Bound<'py, PyBytes>>,
        address: Bound<'py, PyTuple>,
        now: f64,
    ) -> PyResult<Sifting<'py>> {
        let others = PyList::empty(py);
        let values = PyList::empty(py);
        let acks = PyList::empty(py);
        let mut tally = Tally::default();
        let (host, port): (String, u16) = address.extract()?;
        let Some(remote) = socket_address(&host, port) else {
            for datagram in datagrams {
                others.append(datagram)?;
            }
            return Ok((others, values, acks, tally.counts()));
        };
        for datagram in datagrams {
            match self.offer(py, datagram.as_bytes(), remote, now, &values, &mut tally)? {
                Offered::Slow => others.append(datagram)?,
                Offered::Taken { ack: Some(mid), .. } => {
                    acks.append((PyBytes::new(py, &empty_ack(mid)), &address))?
                }
                Offered::Taken { ack: None, .. } => {}
            }
        }
        Ok((others, values, acks, tally.counts()))
    }

    fn clear(&mut self) {
        self.lane.clear();
    }

    fn prune(&mut self, now: f64) {
        self.lane.prune(now);
    }

    #[getter]
    fn armed(&self) -> usize {
        self.lane.armed()
    }

    #[getter]
    fn acked(&self) -> usize {
        self.lane.acked()
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyObserveLane>()?;
    Ok(())
}

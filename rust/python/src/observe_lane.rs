//! `ObserveLane`: `devicehub_core::observe_lane` holding the server's own objects as handles; the receiver's
//! `receive_sifting` (udp.rs) runs it over each batch.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyString;
use std::net::{IpAddr, SocketAddr, SocketAddrV6};

use devicehub_core::observe_lane::ObserveLane;

/// What an armed observation hands back: the device's id and the observed path (given to the core as they
/// are), and the server's observation object, whose `last_seq`/`last_at` the lane reads and moves on.
pub struct Armed {
    pub device_id: Py<PyString>,
    pub path: Py<PyString>,
    pub observation: Py<PyAny>,
}

/// The armed observations of the plain UDP listener and the CON notifications it acknowledged.
#[pyclass(module = "devicehub._core", name = "ObserveLane")]
pub struct PyObserveLane {
    pub lane: ObserveLane<Armed>,
    /// RFC 7641 §3.4's 128 s: after it any Observe number is taken as newer.
    pub freshness: f64,
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

#[pymethods]
impl PyObserveLane {
    #[new]
    fn new(max_acked: usize, lifetime: f64, max_datagram: usize, freshness: f64) -> PyResult<Self> {
        let positive = |value: f64| value.is_finite() && value > 0.0;
        if max_acked == 0 || !positive(lifetime) || !positive(freshness) {
            return Err(PyValueError::new_err(
                "max_acked must be at least 1, lifetime and freshness positive",
            ));
        }
        Ok(Self {
            lane: ObserveLane::new(max_acked, lifetime, max_datagram),
            freshness,
        })
    }

    /// Arm `token` of `device_id` at `(host, port)`; False (nothing armed) for an address that is not an IP literal.
    fn arm(
        &mut self,
        device_id: Bound<'_, PyString>,
        address: (String, u16),
        token: &[u8],
        path: Bound<'_, PyString>,
        observation: Bound<'_, PyAny>,
    ) -> PyResult<bool> {
        let Some(remote) = socket_address(&address.0, address.1) else {
            return Ok(false);
        };
        let device = device_id.to_str()?.to_owned();
        let armed = Armed {
            device_id: device_id.unbind(),
            path: path.unbind(),
            observation: observation.unbind(),
        };
        self.lane.arm(&device, remote, token, armed);
        Ok(true)
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

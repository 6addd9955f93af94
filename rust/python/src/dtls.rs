//! `DtlsServer`, `DtlsSession`: conversions around `devicehub_io::dtls`.

use devicehub_io::dtls::{self, Accepted, Peer, PskServer};
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::errors::DtlsError;

pub(crate) fn to_py(err: dtls::DtlsError) -> PyErr {
    DtlsError::new_err(err.to_string())
}

pub(crate) fn datagrams<'py>(py: Python<'py>, out: Vec<Vec<u8>>) -> Vec<Bound<'py, PyBytes>> {
    out.iter().map(|d| PyBytes::new(py, d)).collect()
}

/// A DTLS 1.2 server: suites, certificate, PSK table, cookies, session cache.
#[pyclass(module = "devicehub._core", name = "DtlsServer", frozen)]
struct PyDtlsServer {
    inner: dtls::DtlsServer,
}

#[pymethods]
impl PyDtlsServer {
    #[new]
    #[pyo3(signature = (certificate, key, *, cache_size = 20_000, cache_timeout = 86_400))]
    fn new(certificate: &[u8], key: &[u8], cache_size: u32, cache_timeout: u32) -> PyResult<Self> {
        let inner =
            dtls::DtlsServer::new(certificate, key, cache_size, cache_timeout).map_err(to_py)?;
        Ok(PyDtlsServer { inner })
    }

    fn set_psk(&self, identity: &[u8], key: &[u8]) -> PyResult<()> {
        self.inner.set_psk(identity, key).map_err(to_py)
    }

    fn remove_psk(&self, identity: &[u8]) -> bool {
        self.inner.remove_psk(identity)
    }

    fn psk_count(&self) -> usize {
        self.inner.psk_count()
    }

    fn set_ticket_issuers(&self, subjects: Vec<Vec<u8>>) {
        let subjects: Vec<&[u8]> = subjects.iter().map(Vec::as_slice).collect();
        self.inner.set_ticket_issuers(&subjects);
    }

    fn set_ticket_keys(&self, keys: Vec<Vec<u8>>) -> PyResult<()> {
        let keys: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
        self.inner.set_ticket_keys(&keys).map_err(to_py)
    }

    fn ticket_key_count(&self) -> usize {
        self.inner.ticket_key_count()
    }

    fn forget(&self, tag: &str) -> usize {
        self.inner.forget(tag)
    }

    fn tagged_count(&self) -> usize {
        self.inner.tagged_count()
    }

    fn accept<'py>(
        &self,
        py: Python<'py>,
        peer: &[u8],
        datagram: &[u8],
    ) -> (Option<PyDtlsSession>, Vec<Bound<'py, PyBytes>>) {
        match self.inner.accept(peer, datagram) {
            Accepted::HelloVerify(out) => (None, datagrams(py, out)),
            Accepted::Session(inner, out) => (Some(PyDtlsSession { inner }), datagrams(py, out)),
            Accepted::Dropped => (None, Vec::new()),
        }
    }
}

/// One peer's DTLS session.
#[pyclass(module = "devicehub._core", name = "DtlsSession")]
pub(crate) struct PyDtlsSession {
    pub(crate) inner: Box<dtls::DtlsSession>,
}

#[pymethods]
impl PyDtlsSession {
    #[allow(clippy::type_complexity)]
    fn feed<'py>(
        &mut self,
        py: Python<'py>,
        datagram: &[u8],
    ) -> (Vec<Bound<'py, PyBytes>>, Vec<Bound<'py, PyBytes>>) {
        let fed = self.inner.feed(datagram);
        (datagrams(py, fed.records), datagrams(py, fed.output))
    }

    fn send<'py>(&mut self, py: Python<'py>, data: &[u8]) -> PyResult<Vec<Bound<'py, PyBytes>>> {
        Ok(datagrams(py, self.inner.send(data).map_err(to_py)?))
    }

    fn shutdown<'py>(&mut self, py: Python<'py>) -> Vec<Bound<'py, PyBytes>> {
        datagrams(py, self.inner.shutdown())
    }

    fn handle_timeout<'py>(&mut self, py: Python<'py>) -> Vec<Bound<'py, PyBytes>> {
        datagrams(py, self.inner.handle_timeout())
    }

    fn timeout(&self) -> Option<f64> {
        self.inner.timeout().map(|left| left.as_secs_f64())
    }

    #[getter]
    fn established(&self) -> bool {
        self.inner.established()
    }

    #[getter]
    fn failure(&self) -> Option<&str> {
        self.inner.failure()
    }

    #[getter]
    fn closed(&self) -> bool {
        self.inner.closed()
    }

    fn session_reused(&self) -> bool {
        self.inner.session_reused()
    }

    #[getter]
    fn cipher(&self) -> Option<&'static str> {
        self.inner.cipher()
    }

    #[getter]
    fn psk_identity(&self) -> Option<String> {
        psk_identity(self.inner.as_ref())
    }

    #[getter]
    fn peer_certificate<'py>(&self, py: Python<'py>) -> Option<Bound<'py, PyBytes>> {
        peer_certificate(py, self.inner.as_ref())
    }

    /// A client's established session as DER, to offer again (`DtlsConnector.connect(session=...)`).
    fn resumable<'py>(&self, py: Python<'py>) -> Option<Bound<'py, PyBytes>> {
        self.inner.resumable().map(|der| PyBytes::new(py, &der))
    }

    fn remember(&self, server: PyRef<'_, PyDtlsServer>, tag: &str) {
        self.inner.remember(&server.inner, tag);
    }

    fn discard(&self, server: PyRef<'_, PyDtlsServer>) {
        self.inner.discard(&server.inner);
    }
}

/// A session's PSK identity as text (the getters of `DtlsSession` and `TlsSession`).
pub(crate) fn psk_identity(session: &impl Peer) -> Option<String> {
    session
        .psk_identity()
        .map(|identity| String::from_utf8_lossy(identity).into_owned())
}

/// A session's peer certificate as DER bytes (the getters of `DtlsSession` and `TlsSession`).
pub(crate) fn peer_certificate<'py>(
    py: Python<'py>,
    session: &impl Peer,
) -> Option<Bound<'py, PyBytes>> {
    session.peer_certificate().map(|der| PyBytes::new(py, &der))
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyDtlsServer>()?;
    m.add_class::<PyDtlsSession>()?;
    Ok(())
}

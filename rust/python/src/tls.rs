//! `TlsServer`, `TlsSession`, `TlsConnector`, `DtlsConnector`: conversions around `devicehub_io::tls`.

use devicehub_io::tls::{self, ClientCredential, Peer, PskServer};
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::dtls::{datagrams, peer_certificate, psk_identity, to_py, PyDtlsSession};

/// A TLS 1.2 server context for CoAP over TLS.
#[pyclass(module = "devicehub._core", name = "TlsServer", frozen)]
struct PyTlsServer {
    inner: tls::TlsServer,
}

#[pymethods]
impl PyTlsServer {
    #[new]
    fn new(certificate: &[u8], key: &[u8]) -> PyResult<Self> {
        let inner = tls::TlsServer::new(certificate, key).map_err(to_py)?;
        Ok(PyTlsServer { inner })
    }

    fn set_ticket_issuers(&self, subjects: Vec<Vec<u8>>) {
        let subjects: Vec<&[u8]> = subjects.iter().map(Vec::as_slice).collect();
        self.inner.set_ticket_issuers(&subjects);
    }

    fn set_ticket_keys(&self, keys: Vec<Vec<u8>>) -> PyResult<()> {
        let keys: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
        self.inner.set_ticket_keys(&keys).map_err(to_py)
    }

    fn accept(&self) -> PyResult<PyTlsSession> {
        let inner = self.inner.accept().map_err(to_py)?;
        Ok(PyTlsSession { inner })
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
}

/// One TLS connection, server or client side.
#[pyclass(module = "devicehub._core", name = "TlsSession")]
struct PyTlsSession {
    inner: tls::TlsSession,
}

#[pymethods]
impl PyTlsSession {
    fn start<'py>(&mut self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, &self.inner.start())
    }

    fn feed<'py>(
        &mut self,
        py: Python<'py>,
        data: &[u8],
    ) -> (Bound<'py, PyBytes>, Bound<'py, PyBytes>) {
        let fed = self.inner.feed(data);
        (
            PyBytes::new(py, &fed.plaintext),
            PyBytes::new(py, &fed.output),
        )
    }

    fn send<'py>(&mut self, py: Python<'py>, data: &[u8]) -> Bound<'py, PyBytes> {
        PyBytes::new(py, &self.inner.send(data))
    }

    fn shutdown<'py>(&mut self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, &self.inner.shutdown())
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

    #[getter]
    fn cipher(&self) -> Option<&'static str> {
        self.inner.cipher()
    }

    #[getter]
    fn psk_identity(&self) -> Option<String> {
        psk_identity(&self.inner)
    }

    #[getter]
    fn peer_certificate<'py>(&self, py: Python<'py>) -> Option<Bound<'py, PyBytes>> {
        peer_certificate(py, &self.inner)
    }

    fn session_reused(&self) -> bool {
        self.inner.session_reused()
    }

    /// A client's established session as DER, to offer again (`TlsConnector.connect(session=...)`).
    fn resumable<'py>(&self, py: Python<'py>) -> Option<Bound<'py, PyBytes>> {
        self.inner.resumable().map(|der| PyBytes::new(py, &der))
    }
}

fn credential<'a>(
    psk_identity: &'a [u8],
    psk_key: &'a [u8],
    certificate: &'a [u8],
    key: &'a [u8],
) -> ClientCredential<'a> {
    if certificate.is_empty() {
        ClientCredential::Psk {
            identity: psk_identity,
            key: psk_key,
        }
    } else {
        ClientCredential::Certificate {
            certificate_pem: certificate,
            key_pem: key,
        }
    }
}

/// A TLS 1.2 client: a PSK or a certificate per connection.
#[pyclass(module = "devicehub._core", name = "TlsConnector", frozen)]
struct PyTlsConnector {
    inner: tls::TlsConnector,
}

#[pymethods]
impl PyTlsConnector {
    #[new]
    fn new() -> PyResult<Self> {
        let inner = tls::TlsConnector::new().map_err(to_py)?;
        Ok(PyTlsConnector { inner })
    }

    #[pyo3(
        signature = (*, psk_identity = b"".as_slice(), psk_key = b"".as_slice(), certificate = b"".as_slice(), key = b"".as_slice(), session = None),
        text_signature = "(self, *, psk_identity=b'', psk_key=b'', certificate=b'', key=b'', session=None)"
    )]
    fn connect(
        &self,
        psk_identity: &[u8],
        psk_key: &[u8],
        certificate: &[u8],
        key: &[u8],
        session: Option<&[u8]>,
    ) -> PyResult<PyTlsSession> {
        let credential = credential(psk_identity, psk_key, certificate, key);
        let inner = self
            .inner
            .connect_offering(&credential, session)
            .map_err(to_py)?;
        Ok(PyTlsSession { inner })
    }
}

/// A DTLS 1.2 client: a PSK or a certificate per session.
#[pyclass(module = "devicehub._core", name = "DtlsConnector", frozen)]
struct PyDtlsConnector {
    inner: tls::DtlsConnector,
}

#[pymethods]
impl PyDtlsConnector {
    #[new]
    fn new() -> PyResult<Self> {
        let inner = tls::DtlsConnector::new().map_err(to_py)?;
        Ok(PyDtlsConnector { inner })
    }

    #[pyo3(
        signature = (*, psk_identity = b"".as_slice(), psk_key = b"".as_slice(), certificate = b"".as_slice(), key = b"".as_slice(), session = None),
        text_signature = "(self, *, psk_identity=b'', psk_key=b'', certificate=b'', key=b'', session=None)"
    )]
    fn connect<'py>(
        &self,
        py: Python<'py>,
        psk_identity: &[u8],
        psk_key: &[u8],
        certificate: &[u8],
        key: &[u8],
        session: Option<&[u8]>,
    ) -> PyResult<(PyDtlsSession, Vec<Bound<'py, PyBytes>>)> {
        let credential = credential(psk_identity, psk_key, certificate, key);
        let (inner, hello) = self.inner.connect(&credential, session).map_err(to_py)?;
        Ok((PyDtlsSession { inner }, datagrams(py, hello)))
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyTlsServer>()?;
    m.add_class::<PyTlsSession>()?;
    m.add_class::<PyTlsConnector>()?;
    m.add_class::<PyDtlsConnector>()?;
    Ok(())
}

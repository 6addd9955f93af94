//! `CoapMessage` and the `coap_*` functions: conversions around `devicehub_codec::coap`.

use devicehub_codec::coap::{self, options, Block, MessageType};
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::errors::CoapError;

/// Carries a core CoAP error to Python; the orphan rule forbids `From<coap::CoapError> for PyErr`.
pub struct PyCoapError(coap::CoapError);

impl From<coap::CoapError> for PyCoapError {
    fn from(err: coap::CoapError) -> Self {
        Self(err)
    }
}

impl From<PyCoapError> for PyErr {
    fn from(err: PyCoapError) -> Self {
        CoapError::new_err(err.0.to_string())
    }
}

/// Arguments outside what the header fields can hold (mtype 4, mid 70000) are CoAP errors too.
fn ranged<T: TryFrom<i64>>(name: &str, value: i64, max: u32) -> PyResult<T> {
    T::try_from(value)
        .map_err(|_| CoapError::new_err(format!("{name} must be 0-{max}, got {value}")))
}

fn block_tuple(block: Option<Block>) -> Option<(u32, bool, u8)> {
    block.map(|b| (b.num, b.more, b.szx))
}

/// A decoded message. Only `coap_decode` makes one, and decoding has already checked every
/// pre-parsed option, so the accessors below cannot fail in practice.
#[pyclass(module = "devicehub._core", name = "CoapMessage", frozen)]
pub struct PyCoapMessage {
    message: coap::Message,
}

#[pymethods]
impl PyCoapMessage {
    #[getter]
    fn mtype(&self) -> u8 {
        self.message.mtype as u8
    }

    #[getter]
    fn code(&self) -> u8 {
        self.message.code
    }

    #[getter]
    fn mid(&self) -> u16 {
        self.message.mid
    }

    #[getter]
    fn token<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, &self.message.token)
    }

    #[getter]
    fn options<'py>(&self, py: Python<'py>) -> Vec<(u16, Bound<'py, PyBytes>)> {
        self.message
            .options
            .iter()
            .map(|option| (option.number, PyBytes::new(py, &option.value)))
            .collect()
    }

    /// Whether an option numbered `number` is present: a check that builds no option list.
    fn has_option(&self, number: u16) -> bool {
        self.message.first_option(number).is_some()
    }

    #[getter]
    fn payload<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, &self.message.payload)
    }

    #[getter]
    fn uri_path(&self) -> Result<String, PyCoapError> {
        Ok(self.message.uri_path()?)
    }

    #[getter]
    fn uri_query(&self) -> Result<Vec<&str>, PyCoapError> {
        Ok(self.message.uri_query()?)
    }

    #[getter]
    fn location_path(&self) -> Result<Vec<&str>, PyCoapError> {
        Ok(self.message.location_path()?)
    }

    #[getter]
    fn unrecognised_critical(&self) -> Option<u16> {
        self.message.unrecognised_critical()
    }

    #[getter]
    fn observe(&self) -> Result<Option<u32>, PyCoapError> {
        Ok(self.message.observe()?)
    }

    #[getter]
    fn content_format(&self) -> Result<Option<u16>, PyCoapError> {
        Ok(self.message.content_format()?)
    }

    #[getter]
    fn accept(&self) -> Result<Option<u16>, PyCoapError> {
        Ok(self.message.accept()?)
    }

    #[getter]
    fn block1(&self) -> Result<Option<(u32, bool, u8)>, PyCoapError> {
        Ok(block_tuple(self.message.block1()?))
    }

    #[getter]
    fn block2(&self) -> Result<Option<(u32, bool, u8)>, PyCoapError> {
        Ok(block_tuple(self.message.block2()?))
    }

    /// `CoapMessage(CON 0.02, mid=28058, token=b'…', path='/rd', 4 options, 139 B payload)`.
    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        let m = &self.message;
        Ok(format!(
            "CoapMessage({} {}.{:02}, mid={}, token={}, path={:?}, {} options, {} B payload)",
            m.mtype,
            m.code >> 5,
            m.code & 0x1F,
            m.mid,
            PyBytes::new(py, &m.token).repr()?,
            m.uri_path().unwrap_or_default(),
            m.options.len(),
            m.payload.len(),
        ))
    }
}

/// Decode one datagram; raises CoapError on malformed input.
#[pyfunction]
fn coap_decode(data: &[u8]) -> Result<PyCoapMessage, PyCoapError> {
    Ok(PyCoapMessage {
        message: coap::decode(data)?,
    })
}

/// Encode one message; options are sorted by number (stable), delta-encoded.
#[pyfunction]
#[pyo3(
    signature = (mtype, code, mid, token, options, payload = &[] as &[u8]),
    text_signature = "(mtype, code, mid, token, options, payload=b'')"
)]
fn coap_encode(
    mtype: i64,
    code: i64,
    mid: i64,
    token: &[u8],
    options: Vec<(i64, Bound<'_, PyBytes>)>,
    payload: &[u8],
) -> PyResult<Vec<u8>> {
    let mtype =
        MessageType::try_from(ranged::<u8>("CoAP message type", mtype, 3)?).map_err(PyCoapError)?;
    let code = ranged::<u8>("CoAP code", code, 0xFF)?;
    let mid = ranged::<u16>("CoAP message ID", mid, 0xFFFF)?;
    let mut refs = Vec::with_capacity(options.len());
    for (number, value) in &options {
        refs.push((
            ranged::<u16>("CoAP option number", *number, 0xFFFF)?,
            value.as_bytes(),
        ));
    }
    let mut out = Vec::new();
    coap::encode_parts_into(&mut out, mtype, code, mid, token, &mut refs, payload)
        .map_err(PyCoapError)?;
    Ok(out)
}

/// Minimal big-endian unsigned option value (0 → empty).
#[pyfunction]
fn coap_encode_uint(value: &Bound<'_, PyAny>) -> PyResult<Vec<u8>> {
    match value.extract::<u64>() {
        Ok(value) => Ok(options::encode_uint(value)),
        Err(err) if err.is_instance_of::<pyo3::exceptions::PyOverflowError>(value.py()) => {
            Err(CoapError::new_err(format!(
                "CoAP uint option value {value} is outside 0-2**64-1"
            )))
        }
        Err(err) => Err(err),
    }
}

/// One observation's notification encoded once; `encode` fills in the message ID, Observe value
/// and payload (the simulator's hot path: no options list is built per notification).
#[pyclass(module = "devicehub._core", name = "CoapNotification", frozen)]
pub struct PyCoapNotification {
    template: coap::NotificationTemplate,
}

#[pymethods]
impl PyCoapNotification {
    #[new]
    #[pyo3(text_signature = "(mtype, code, token, options)")]
    fn new(
        mtype: i64,
        code: i64,
        token: &[u8],
        options: Vec<(i64, Bound<'_, PyBytes>)>,
    ) -> PyResult<Self> {
        let mtype = MessageType::try_from(ranged::<u8>("CoAP message type", mtype, 3)?)
            .map_err(PyCoapError)?;
        let code = ranged::<u8>("CoAP code", code, 0xFF)?;
        let mut refs = Vec::with_capacity(options.len());
        for (number, value) in &options {
            refs.push((
                ranged::<u16>("CoAP option number", *number, 0xFFFF)?,
                value.as_bytes(),
            ));
        }
        let template =
            coap::NotificationTemplate::new(mtype, code, token, &refs).map_err(PyCoapError)?;
        Ok(Self { template })
    }

    /// The datagram of one notification.
    fn encode<'py>(
        &self,
        py: Python<'py>,
        mid: i64,
        observe: i64,
        payload: &[u8],
    ) -> PyResult<Bound<'py, PyBytes>> {
        let mid = ranged::<u16>("CoAP message ID", mid, 0xFFFF)?;
        let observe = ranged::<u32>("Observe value", observe, 0xFF_FFFF)?;
        let mut out = Vec::new();
        self.template
            .encode_into(&mut out, mid, observe, payload)
            .map_err(PyCoapError)?;
        Ok(PyBytes::new(py, &out))
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyCoapMessage>()?;
    m.add_class::<PyCoapNotification>()?;
    m.add_function(wrap_pyfunction!(coap_decode, m)?)?;
    m.add_function(wrap_pyfunction!(coap_encode, m)?)?;
    m.add_function(wrap_pyfunction!(coap_encode_uint, m)?)?;
    Ok(())
}

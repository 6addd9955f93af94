//! The `lwm2m_cbor_*` and `senml_cbor_*` functions: conversions around `devicehub_codec::cbor`.

use devicehub_codec::cbor::{self, lwm2m, senml, Value};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyFloat, PyInt, PyString, PyTuple};

use crate::errors::CborError;

/// Carries a core CBOR error to Python; the orphan rule forbids `From<cbor::CborError> for PyErr`.
pub struct PyCborError(cbor::CborError);

impl From<cbor::CborError> for PyCborError {
    fn from(err: cbor::CborError) -> Self {
        Self(err)
    }
}

impl From<PyCborError> for PyErr {
    fn from(err: PyCborError) -> Self {
        CborError::new_err(err.0.to_string())
    }
}

fn to_py<'py>(py: Python<'py>, value: &Value) -> Bound<'py, PyAny> {
    match value {
        Value::Int(i) => PyInt::new(py, *i).into_any(),
        Value::Uint(u) => PyInt::new(py, *u).into_any(),
        Value::Float(f) => PyFloat::new(py, *f).into_any(),
        Value::Bool(b) => PyBool::new(py, *b).to_owned().into_any(),
        Value::Text(s) | Value::ObjLnk(s) => PyString::new(py, s).into_any(),
        Value::Bytes(b) => PyBytes::new(py, b).into_any(),
    }
}

/// bool before int (bool is an int in Python); ints beyond 64 bits and other types are errors.
fn from_py(value: &Bound<'_, PyAny>) -> PyResult<Value> {
    if let Ok(b) = value.cast::<PyBool>() {
        return Ok(Value::Bool(b.is_true()));
    }
    if value.is_instance_of::<PyInt>() {
        if let Ok(i) = value.extract::<i64>() {
            return Ok(Value::Int(i));
        }
        return value.extract::<u64>().map(Value::Uint).map_err(|_| {
            CborError::new_err(format!("integer {value} is outside the 64-bit range"))
        });
    }
    if let Ok(f) = value.cast::<PyFloat>() {
        return Ok(Value::Float(f.value()));
    }
    if let Ok(s) = value.cast::<PyString>() {
        return Ok(Value::Text(s.to_str()?.to_owned()));
    }
    if let Ok(b) = value.cast::<PyBytes>() {
        return Ok(Value::Bytes(b.as_bytes().to_vec()));
    }
    Err(CborError::new_err(format!(
        "{} is not a resource value (int, float, bool, str or bytes)",
        value.get_type().name()?
    )))
}

/// Decode LwM2M CBOR (11544) into (path ids, value) pairs; raises CborError.
#[pyfunction]
fn lwm2m_cbor_decode<'py>(
    py: Python<'py>,
    data: &[u8],
) -> PyResult<Vec<(Bound<'py, PyTuple>, Bound<'py, PyAny>)>> {
    let entries = lwm2m::decode(data).map_err(PyCborError::from)?;
    entries
        .iter()
        .map(|(path, value)| Ok((PyTuple::new(py, path)?, to_py(py, value))))
        .collect()
}

/// Encode (path ids, value) pairs as LwM2M CBOR nested maps; raises CborError.
#[pyfunction]
fn lwm2m_cbor_encode(entries: Vec<(Vec<i64>, Bound<'_, PyAny>)>) -> PyResult<Vec<u8>> {
    let mut converted = Vec::with_capacity(entries.len());
    for (path, value) in &entries {
        let ids = path
            .iter()
            .map(|&id| {
                u16::try_from(id)
                    .map_err(|_| CborError::new_err(format!("path id {id} is not 0-65534")))
            })
            .collect::<PyResult<Vec<u16>>>()?;
        converted.push((ids, from_py(value)?));
    }
    Ok(lwm2m::encode(&converted).map_err(PyCborError::from)?)
}

/// Decode SenML CBOR (112) into (bn + n, value) pairs, bv applied; raises CborError.
#[pyfunction]
fn senml_cbor_decode<'py>(
    py: Python<'py>,
    data: &[u8],
) -> PyResult<Vec<(String, Bound<'py, PyAny>)>> {
    let entries = senml::decode(data).map_err(PyCborError::from)?;
    Ok(entries
        .into_iter()
        .map(|(name, value)| {
            let value = to_py(py, &value);
            (name, value)
        })
        .collect())
}

/// Encode (name, value) pairs as SenML CBOR records, `bn` on the first; raises CborError.
#[pyfunction]
#[pyo3(signature = (entries, base_name = ""))]
fn senml_cbor_encode(
    entries: Vec<(String, Bound<'_, PyAny>)>,
    base_name: &str,
) -> PyResult<Vec<u8>> {
    let converted = entries
        .iter()
        .map(|(name, value)| Ok((name.clone(), from_py(value)?)))
        .collect::<PyResult<Vec<_>>>()?;
    Ok(senml::encode(&converted, base_name))
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(lwm2m_cbor_decode, m)?)?;
    m.add_function(wrap_pyfunction!(lwm2m_cbor_encode, m)?)?;
    m.add_function(wrap_pyfunction!(senml_cbor_decode, m)?)?;
    m.add_function(wrap_pyfunction!(senml_cbor_encode, m)?)?;
    Ok(())
}

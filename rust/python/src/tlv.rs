//! `TlvNode` and the `tlv_*` functions: conversions around `devicehub_codec::tlv`.

use devicehub_codec::tlv::{self, value, Tlv, TlvBody, TlvKind};
use pyo3::exceptions::PyOverflowError;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::errors::TlvError;

/// Carries a core TLV error to Python; the orphan rule forbids `From<tlv::TlvError> for PyErr`.
pub struct PyTlvError(tlv::TlvError);

impl From<tlv::TlvError> for PyTlvError {
    fn from(err: tlv::TlvError) -> Self {
        Self(err)
    }
}

impl From<PyTlvError> for PyErr {
    fn from(err: PyTlvError) -> Self {
        TlvError::new_err(err.0.to_string())
    }
}

/// Arguments the core types cannot even hold (kind 7, id 70000) are TLV errors too.
fn invalid(message: String) -> PyErr {
    TlvError::new_err(message)
}

fn kind_from_int(kind: i64) -> PyResult<TlvKind> {
    match kind {
        0..=3 => Ok(TlvKind::from_bits(kind as u8)),
        _ => Err(invalid(format!("TLV kind must be 0-3, got {kind}"))),
    }
}

fn u16_arg(name: &str, value: i64) -> PyResult<u16> {
    u16::try_from(value).map_err(|_| invalid(format!("{name} must be 0-65535, got {value}")))
}

/// One TLV node; wraps a whole core subtree so decoding creates Python objects only for the
/// top level, and equality and hashing are those of the tree.
#[pyclass(module = "devicehub._core", name = "TlvNode", frozen, eq, hash)]
#[derive(PartialEq, Eq, Hash)]
pub struct PyTlvNode {
    tlv: Tlv,
}

#[pymethods]
impl PyTlvNode {
    #[new]
    #[pyo3(signature = (kind, id, value = Vec::new(), children = None), text_signature = "(kind, id, value=b'', children=None)")]
    fn new(
        kind: i64,
        id: i64,
        value: Vec<u8>,
        children: Option<Vec<Bound<'_, PyTlvNode>>>,
    ) -> PyResult<Self> {
        let kind = kind_from_int(kind)?;
        let id = u16_arg("TLV id", id)?;
        let children = children.unwrap_or_default();
        if kind.is_container() && !value.is_empty() {
            return Err(invalid(format!("a {kind} TLV holds children, not a value")));
        }
        if !kind.is_container() && !children.is_empty() {
            return Err(invalid(format!("a {kind} TLV holds a value, not children")));
        }
        let mut nested = Vec::with_capacity(children.len());
        for child in &children {
            let child = &child.get().tlv;
            if !kind.may_contain(child.kind()) {
                return Err(PyTlvError(tlv::TlvError::BadNesting {
                    parent: kind,
                    child: child.kind(),
                })
                .into());
            }
            nested.push(child.clone());
        }
        let body = match kind {
            TlvKind::ObjectInstance => TlvBody::ObjectInstance(nested),
            TlvKind::MultipleResource => TlvBody::MultipleResource(nested),
            TlvKind::ResourceInstance => TlvBody::ResourceInstance(value),
            TlvKind::Resource => TlvBody::Resource(value),
        };
        Ok(Self {
            tlv: Tlv { id, body },
        })
    }

    #[getter]
    fn kind(&self) -> u8 {
        self.tlv.kind() as u8
    }

    #[getter]
    fn id(&self) -> u16 {
        self.tlv.id
    }

    #[getter]
    fn value<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, self.tlv.value().unwrap_or_default())
    }

    #[getter]
    fn children(&self) -> Vec<PyTlvNode> {
        self.tlv
            .children()
            .iter()
            .map(|child| PyTlvNode { tlv: child.clone() })
            .collect()
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        repr(py, &self.tlv)
    }
}

/// `TlvNode(kind=3, id=1, value=b'\x14')` or `TlvNode(kind=0, id=10, children=[…])`.
fn repr(py: Python<'_>, node: &Tlv) -> PyResult<String> {
    let head = format!("TlvNode(kind={}, id={}", node.kind() as u8, node.id);
    match node.value() {
        Some(value) => Ok(format!(
            "{head}, value={})",
            PyBytes::new(py, value).repr()?
        )),
        None => {
            let children = node
                .children()
                .iter()
                .map(|child| repr(py, child))
                .collect::<PyResult<Vec<_>>>()?;
            Ok(format!("{head}, children=[{}])", children.join(", ")))
        }
    }
}

/// Decode a TLV run; raises TlvError on malformed input.
#[pyfunction]
fn tlv_decode(data: &[u8]) -> Result<Vec<PyTlvNode>, PyTlvError> {
    Ok(tlv::decode(data)?
        .into_iter()
        .map(|tlv| PyTlvNode { tlv })
        .collect())
}

/// Encode nodes with the shortest headers; raises TlvError for invalid trees.
#[pyfunction]
fn tlv_encode(nodes: Vec<Bound<'_, PyTlvNode>>) -> Result<Vec<u8>, PyTlvError> {
    let refs: Vec<&Tlv> = nodes.iter().map(|node| &node.get().tlv).collect();
    Ok(tlv::encode(&refs)?)
}

/// Two's-complement integer in the shortest of 1/2/4/8 bytes (also used for Time).
#[pyfunction]
fn tlv_int(value: &Bound<'_, PyAny>) -> PyResult<Vec<u8>> {
    match value.extract::<i64>() {
        Ok(value) => Ok(value::encode_int(value)),
        Err(err) if err.is_instance_of::<PyOverflowError>(value.py()) => Err(invalid(format!(
            "TLV integer {value} is outside the 64-bit range"
        ))),
        Err(err) => Err(err),
    }
}

/// Read a 1/2/4/8-byte integer or Time.
#[pyfunction]
fn tlv_read_int(data: &[u8]) -> Result<i64, PyTlvError> {
    Ok(value::read_int(data)?)
}

/// 4 bytes when the value survives binary32 exactly, else 8.
#[pyfunction]
fn tlv_float(value: f64) -> Vec<u8> {
    value::encode_float(value)
}

/// Read a 4- or 8-byte float.
#[pyfunction]
fn tlv_read_float(data: &[u8]) -> Result<f64, PyTlvError> {
    Ok(value::read_float(data)?)
}

/// One byte, 0 or 1.
#[pyfunction]
fn tlv_bool(value: bool) -> Vec<u8> {
    value::encode_bool(value)
}

/// Read a one-byte boolean (0 or 1).
#[pyfunction]
fn tlv_read_bool(data: &[u8]) -> Result<bool, PyTlvError> {
    Ok(value::read_bool(data)?)
}

/// Object ID then Object Instance ID, two big-endian u16.
#[pyfunction]
fn tlv_objlnk(object_id: i64, instance_id: i64) -> PyResult<Vec<u8>> {
    let object_id = u16_arg("object_id", object_id)?;
    let instance_id = u16_arg("instance_id", instance_id)?;
    Ok(value::encode_objlnk(object_id, instance_id).to_vec())
}

/// Read a 4-byte objlnk as (object_id, instance_id).
#[pyfunction]
fn tlv_read_objlnk(data: &[u8]) -> Result<(u16, u16), PyTlvError> {
    Ok(value::read_objlnk(data)?)
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("TLV_OBJECT_INSTANCE", TlvKind::ObjectInstance as u8)?;
    m.add("TLV_RESOURCE_INSTANCE", TlvKind::ResourceInstance as u8)?;
    m.add("TLV_MULTIPLE_RESOURCE", TlvKind::MultipleResource as u8)?;
    m.add("TLV_RESOURCE", TlvKind::Resource as u8)?;
    m.add_class::<PyTlvNode>()?;
    m.add_function(wrap_pyfunction!(tlv_decode, m)?)?;
    m.add_function(wrap_pyfunction!(tlv_encode, m)?)?;
    m.add_function(wrap_pyfunction!(tlv_int, m)?)?;
    m.add_function(wrap_pyfunction!(tlv_read_int, m)?)?;
    m.add_function(wrap_pyfunction!(tlv_float, m)?)?;
    m.add_function(wrap_pyfunction!(tlv_read_float, m)?)?;
    m.add_function(wrap_pyfunction!(tlv_bool, m)?)?;
    m.add_function(wrap_pyfunction!(tlv_read_bool, m)?)?;
    m.add_function(wrap_pyfunction!(tlv_objlnk, m)?)?;
    m.add_function(wrap_pyfunction!(tlv_read_objlnk, m)?)?;
    Ok(())
}

//! `parse_links`: conversions around `devicehub_core::links`.

use devicehub_core::links::{self, LinkError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyString};

use crate::errors::LinkFormatError;

/// The fields of one link in `ResourceLink` order: path, rt, ct, obs, if, value, aobs, deleted.
type LinkTuple<'py> = (
    String,
    Option<String>,
    Option<u64>,
    bool,
    Option<String>,
    Option<Bound<'py, PyBytes>>,
    Option<u16>,
    bool,
);

/// Carries a core link error to Python; a bad target is quoted with Python's `repr`, as the
/// pure-Python parser quotes it.
fn to_py(py: Python<'_>, err: LinkError) -> PyErr {
    match err {
        LinkError::Target(target) => match PyString::new(py, &target).repr() {
            Ok(shown) => LinkFormatError::new_err(format!("link target must be <…>: {shown}")),
            Err(err) => err,
        },
        other => LinkFormatError::new_err(other.to_string()),
    }
}

/// Every object, instance or resource link of a Register/Update payload as tuples in
/// `ResourceLink` field order; raises `LinkFormatError` with the pure parser's message.
#[pyfunction]
fn parse_links<'py>(py: Python<'py>, payload: &[u8]) -> PyResult<Vec<LinkTuple<'py>>> {
    let parsed = links::parse_links(payload).map_err(|err| to_py(py, err))?;
    Ok(parsed
        .into_iter()
        .map(|l| {
            let value = l.value.map(|v| PyBytes::new(py, &v));
            (l.path, l.rt, l.ct, l.obs, l.iface, value, l.aobs, l.deleted)
        })
        .collect())
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(parse_links, m)?)?;
    Ok(())
}

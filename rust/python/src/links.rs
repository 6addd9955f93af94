//! `parse_links`: conversions around `devicehub_codec::links`.

use std::collections::HashMap;
use std::sync::Mutex;

use devicehub_codec::links::{self, Link, LinkError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyString, PyTuple};

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

fn fields<'py>(py: Python<'py>, l: &Link) -> PyResult<Bound<'py, PyTuple>> {
    let value = l.value.as_ref().map(|v| PyBytes::new(py, v));
    (
        l.path.as_str(),
        l.rt.as_deref(),
        l.ct,
        l.obs,
        l.iface.as_deref(),
        value,
        l.aobs,
        l.deleted,
    )
        .into_pyobject(py)
}

/// Parsed links as shared objects (issue 16: a fleet registers the same links over and over): the
/// one object `make(*fields)` built for an equal link since the table last started afresh. Looked
/// up by the parsed link in Rust, so a link seen before costs no Python string, tuple or call; a
/// full table starts afresh (objects already handed out stay shared), so unique values such as
/// serial numbers never pin more than `capacity` entries.
#[pyclass(module = "devicehub._core", name = "LinkTable", frozen)]
pub struct PyLinkTable {
    make: Py<PyAny>,
    capacity: usize,
    // not held while `make` runs: Python code there may let another thread in
    built: Mutex<HashMap<Link, Py<PyAny>>>,
}

impl PyLinkTable {
    fn shared(&self, py: Python<'_>, link: Link) -> PyResult<Py<PyAny>> {
        if let Some(found) = self.lock().get(&link) {
            return Ok(found.clone_ref(py));
        }
        let made = self.make.call1(py, fields(py, &link)?)?;
        let mut built = self.lock();
        if built.len() >= self.capacity {
            built.clear();
        }
        Ok(built.entry(link).or_insert(made).clone_ref(py))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Link, Py<PyAny>>> {
        // a panic while held cannot leave the map half-changed (insert and clear are whole)
        self.built
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

#[pymethods]
impl PyLinkTable {
    #[new]
    #[pyo3(signature = (make, capacity = 65_536))]
    fn new(make: Py<PyAny>, capacity: usize) -> Self {
        Self {
            make,
            capacity: capacity.max(1),
            built: Mutex::new(HashMap::new()),
        }
    }

    /// Every object, instance or resource link of a Register/Update payload, shared as above;
    /// raises `LinkFormatError` as `parse_links` does.
    fn parse(&self, py: Python<'_>, payload: &[u8]) -> PyResult<Vec<Py<PyAny>>> {
        let parsed = links::parse_links(payload).map_err(|err| to_py(py, err))?;
        parsed
            .into_iter()
            .map(|link| self.shared(py, link))
            .collect()
    }

    /// The shared object of one link given by its fields (a stored registration's links).
    #[allow(clippy::too_many_arguments)]
    #[pyo3(signature = (path, rt, ct, obs, iface, value, aobs, deleted))]
    fn get(
        &self,
        py: Python<'_>,
        path: String,
        rt: Option<String>,
        ct: Option<u64>,
        obs: bool,
        iface: Option<String>,
        value: Option<Vec<u8>>,
        aobs: Option<u16>,
        deleted: bool,
    ) -> PyResult<Py<PyAny>> {
        self.shared(
            py,
            Link {
                path,
                rt,
                ct,
                obs,
                iface,
                value,
                aobs,
                deleted,
            },
        )
    }

    fn __len__(&self) -> usize {
        self.lock().len()
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(parse_links, m)?)?;
    m.add_class::<PyLinkTable>()?;
    Ok(())
}

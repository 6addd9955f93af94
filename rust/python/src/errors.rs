//! The Python exception types raised by `devicehub._core`; each core error enum maps to one of
//! them in a single `From<…> for PyErr` next to its binding.

use pyo3::create_exception;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

create_exception!(
    devicehub._core,
    CoreError,
    PyValueError,
    "Base class of every error raised by devicehub._core."
);
create_exception!(
    devicehub._core,
    TlvError,
    CoreError,
    "Malformed or unencodable OMA-TLV."
);
create_exception!(
    devicehub._core,
    CborError,
    CoreError,
    "Malformed or unencodable SenML CBOR or LwM2M CBOR."
);
create_exception!(
    devicehub._core,
    CoapError,
    CoreError,
    "Malformed or unencodable CoAP message."
);
create_exception!(
    devicehub._core,
    LinkFormatError,
    CoreError,
    "A payload that is not CoRE link format devicehub can read."
);
create_exception!(
    devicehub._core,
    DtlsError,
    CoreError,
    "A DTLS server that cannot be set up, or a record too large to send."
);
create_exception!(
    devicehub._core,
    QueueError,
    CoreError,
    "Invalid channel queue operation."
);

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("CoreError", py.get_type::<CoreError>())?;
    m.add("TlvError", py.get_type::<TlvError>())?;
    m.add("CborError", py.get_type::<CborError>())?;
    m.add("CoapError", py.get_type::<CoapError>())?;
    m.add("QueueError", py.get_type::<QueueError>())?;
    m.add("LinkFormatError", py.get_type::<LinkFormatError>())?;
    m.add("DtlsError", py.get_type::<DtlsError>())?;
    Ok(())
}

//! HCCL errors as Python exceptions.
//!
//! The exception classes are defined in Python (`hccl_rs/errors.py`:
//! `HcclError` and one subclass per family, some also deriving from the
//! matching built-in, e.g. `ParameterError(HcclError, ValueError)`), so
//! this module only picks the class for a code and fills in what the
//! error knows: code, message, rank, peer, op tag.

use hccl_adapter::HcclError;
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyTuple;

/// `hccl_rs.errors._from_native`, looked up once.
static FACTORY: PyOnceLock<Py<PyAny>> = PyOnceLock::new();

/// `err` as the Python exception of its family.
pub(crate) fn to_py(py: Python<'_>, err: HcclError) -> PyErr {
    let factory = FACTORY.get_or_try_init(py, || -> PyResult<Py<PyAny>> {
        Ok(py
            .import("hccl_rs.errors")?
            .getattr("_from_native")?
            .unbind())
    });
    let ctx = err.context();
    let made = factory.and_then(|f| {
        let args = (
            err.code().code(),
            err.to_string(),
            ctx.message.clone(),
            ctx.rank,
            ctx.peer,
            ctx.tag.clone(),
        )
            .into_pyobject(py)?;
        f.bind(py).call1(args.cast_into::<PyTuple>()?)
    });
    match made {
        Ok(exc) => PyErr::from_value(exc),
        // the package is broken (hccl_rs.errors missing): still say what failed
        Err(e) => PyRuntimeError::new_err(format!("{err} (and hccl_rs.errors failed: {e})")),
    }
}

/// A parameter error (`HCCL_E_PARA`) raised by the Python shim itself,
/// before anything is enqueued.
pub(crate) fn para(py: Python<'_>, message: impl Into<String>) -> PyErr {
    to_py(py, HcclError::para(message))
}

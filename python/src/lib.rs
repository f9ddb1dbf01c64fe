//! `hccl_rs._native`: the Rust half of the `hccl_rs` Python package.
//!
//! Python sees [`Comm`](comm::Comm) (a rank's communicator with every
//! collective, blocking and `*_async`), [`Work`](work::Work) (the handle
//! of an async op), [`RawBuffer`](buffer::RawBuffer) (memory given by
//! address, for tensors without the buffer protocol) and
//! `get_root_info()`, and `_fused_op` (the fused compute/communication
//! ops, see `fused`). The Python half (`hccl_rs/*.py`) adds the error
//! classes, the torch view of tensors and the torch.distributed backend.
//!
//! The per-call path is kept lean: buffers come in through the buffer
//! protocol with no copy, their `DeviceMem` wrappers are cached per
//! communicator, and the GIL is released once per call around enqueue and
//! wait together.

mod buffer;
mod comm;
mod dtype;
mod errors;
mod fused;
mod lane;
mod ops;
mod shared;
mod work;

use pyo3::prelude::*;
use pyo3::types::PyBytes;

/// HCCL's `HcclGetRootInfo`: call on the root rank and hand the bytes to
/// every rank (a store, MPI, a file); each then builds
/// `Comm(n_ranks, root_info, rank)`. The root rank serves the rendezvous
/// until every rank has joined.
#[pyfunction]
fn get_root_info(py: Python<'_>) -> PyResult<Py<PyBytes>> {
    let root = py
        .detach(hccl_adapter::HcclComm::get_root_info)
        .map_err(|e| errors::to_py(py, e))?;
    Ok(PyBytes::new(py, &root.0).unbind())
}

/// The Python module `hccl_rs._native`.
#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<comm::Comm>()?;
    m.add_class::<work::Work>()?;
    m.add_class::<buffer::RawBuffer>()?;
    m.add_function(wrap_pyfunction!(get_root_info, m)?)?;
    m.add_function(wrap_pyfunction!(fused::_fused_op, m)?)?;
    m.add("ROOT_INFO_BYTES", hccl_adapter::HCCL_ROOT_INFO_BYTES)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}

//! Python memory as [`DeviceMem`]: buffer-protocol objects (NumPy arrays,
//! `bytearray`, `memoryview`, ...) and [`RawBuffer`]s (memory given by
//! address, e.g. a torch tensor's `data_ptr()`), the way the C ABI wraps
//! the raw pointers it is given (`DeviceMem::from_raw`).
//!
//! A [`Buf`] holds the Python side alive — the buffer export (which also
//! stops `bytearray` / NumPy resizes) or the owner object — for as long as
//! an op may touch the memory. The wrappers themselves are cached per
//! communicator by (address, length) ([`MemCache`]), so a call repeated on
//! the same arrays allocates nothing for them.

use crate::dtype::{self, Elem};
use crate::errors;
use hccl_adapter::DeviceMem;
use pyo3::buffer::PyUntypedBuffer;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use std::ptr::NonNull;
use std::sync::Mutex;

/// Memory given by address, for objects without the buffer protocol
/// (torch tensors: bfloat16 and bool ones have none).
///
/// `RawBuffer(address, nbytes, dtype, owner, readonly=False)`: `nbytes`
/// bytes of contiguous `dtype` elements (`"float32"`, `"bfloat16"`,
/// `"bool"`, ...) at `address`, which stay valid and unmoved while `owner`
/// (kept referenced by every op using the buffer) is alive and not resized.
#[pyclass(frozen, module = "hccl_rs._native")]
pub struct RawBuffer {
    addr: usize,
    nbytes: usize,
    elem: Elem,
    readonly: bool,
    owner: Py<PyAny>,
}

#[pymethods]
impl RawBuffer {
    #[new]
    #[pyo3(signature = (address, nbytes, dtype, owner, readonly = false))]
    fn new(
        py: Python<'_>,
        address: usize,
        nbytes: usize,
        dtype: &str,
        owner: Py<PyAny>,
        readonly: bool,
    ) -> PyResult<RawBuffer> {
        let elem = dtype::from_name(dtype)
            .ok_or_else(|| errors::para(py, format!("unsupported element type '{dtype}'")))?;
        if nbytes % elem.size() != 0 {
            return Err(errors::para(
                py,
                format!("{nbytes} bytes is not a whole number of {dtype} elements"),
            ));
        }
        if address == 0 && nbytes != 0 {
            return Err(errors::para(py, "address is null"));
        }
        Ok(RawBuffer {
            addr: address,
            nbytes,
            elem,
            readonly,
            owner,
        })
    }

    /// The address.
    #[getter]
    fn address(&self) -> usize {
        self.addr
    }

    /// Length in bytes.
    #[getter]
    fn nbytes(&self) -> usize {
        self.nbytes
    }

    /// The element type's name.
    #[getter]
    fn dtype(&self) -> &'static str {
        self.elem.name()
    }

    /// The object that owns the memory.
    #[getter]
    fn owner(&self, py: Python<'_>) -> Py<PyAny> {
        self.owner.clone_ref(py)
    }

    fn __repr__(&self) -> String {
        format!(
            "RawBuffer(address={:#x}, nbytes={}, dtype='{}')",
            self.addr,
            self.nbytes,
            self.elem.name()
        )
    }
}

impl RawBuffer {
    /// Address, length in bytes, element type and whether it is read-only.
    pub(crate) fn view(&self) -> (usize, usize, Elem, bool) {
        (self.addr, self.nbytes, self.elem, self.readonly)
    }

    /// The owner, referenced once more.
    pub(crate) fn owner_ref(&self, py: Python<'_>) -> Py<PyAny> {
        self.owner.clone_ref(py)
    }
}

/// What keeps a buffer's memory valid.
enum Keep {
    /// A buffer-protocol export (released on drop).
    View(#[allow(dead_code)] PyUntypedBuffer),
    /// A reference to the object owning memory given by address.
    Owner(#[allow(dead_code)] Py<PyAny>),
}

/// One buffer argument of a call, resolved and held.
pub(crate) struct Buf {
    /// Start address.
    pub addr: usize,
    /// Length in bytes.
    pub len: usize,
    /// Element type.
    pub elem: Elem,
    _keep: Keep,
}

impl Buf {
    /// Elements it holds.
    pub fn count(&self) -> u64 {
        (self.len / self.elem.size()) as u64
    }
}

/// `hccl_rs._tensors.raw_buffer`: the fallback for objects without the
/// buffer protocol (torch tensors).
static RAW_BUFFER_OF: PyOnceLock<Py<PyAny>> = PyOnceLock::new();

/// Resolves `obj` (argument `what` of a call) to a [`Buf`]; `writable`
/// when the op writes it. Refuses non-contiguous memory, unknown element
/// types and read-only memory an op would write (`ParameterError`).
pub(crate) fn get(obj: &Bound<'_, PyAny>, what: &str, writable: bool) -> PyResult<Buf> {
    let py = obj.py();
    // SAFETY: `obj` is a valid object reference (a `Bound`) and the GIL is
    // held; PyObject_CheckBuffer only reads its type's slots.
    if unsafe { pyo3::ffi::PyObject_CheckBuffer(obj.as_ptr()) } != 0 {
        let view = PyUntypedBuffer::get(obj)?;
        let elem =
            dtype::from_format(view.format().to_bytes(), view.item_size()).ok_or_else(|| {
                errors::para(
                    py,
                    format!(
                        "{what}: unsupported element format '{}' ({} bytes per item)",
                        view.format().to_string_lossy(),
                        view.item_size()
                    ),
                )
            })?;
        if !view.is_c_contiguous() {
            return Err(errors::para(
                py,
                format!("{what} is not contiguous (pass a C-contiguous array or a copy)"),
            ));
        }
        if writable && view.readonly() {
            return Err(errors::para(
                py,
                format!("{what} is read-only but the op writes it"),
            ));
        }
        return Ok(Buf {
            addr: view.buf_ptr() as usize,
            len: view.len_bytes(),
            elem,
            _keep: Keep::View(view),
        });
    }
    let raw_obj;
    let raw = match obj.cast::<RawBuffer>() {
        Ok(r) => r,
        Err(_) => {
            let f = RAW_BUFFER_OF.get_or_try_init(py, || -> PyResult<Py<PyAny>> {
                Ok(py
                    .import("hccl_rs._tensors")?
                    .getattr("raw_buffer")?
                    .unbind())
            })?;
            raw_obj = f.bind(py).call1((obj, what))?;
            raw_obj.cast::<RawBuffer>()?
        }
    };
    let r = raw.get();
    if writable && r.readonly {
        return Err(errors::para(
            py,
            format!("{what} is read-only but the op writes it"),
        ));
    }
    Ok(Buf {
        addr: r.addr,
        len: r.nbytes,
        elem: r.elem,
        _keep: Keep::Owner(r.owner.clone_ref(py)),
    })
}

/// Most wrappers a communicator keeps.
const CACHE_SLOTS: usize = 32;

/// `DeviceMem` wrappers of Python memory by (address, length).
///
/// A wrapper is only ever handed to an op while the call holds the memory
/// it describes (a [`Buf`] of that address and length), and the library
/// touches caller memory only through the ops given it, so a wrapper
/// outliving one array is harmless: it is reused only for memory that is
/// again valid at that address and length.
#[derive(Default)]
pub(crate) struct MemCache {
    slots: Mutex<Vec<(usize, usize, DeviceMem)>>,
}

impl MemCache {
    /// The wrapper of `b`'s memory.
    pub fn mem(&self, b: &Buf) -> DeviceMem {
        if b.len == 0 {
            return DeviceMem::null();
        }
        let mut slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(i) = slots
            .iter()
            .rposition(|(a, l, _)| *a == b.addr && *l == b.len)
        {
            let hit = slots[i].2.clone();
            if i + 8 < slots.len() {
                // keep the recently used near the end (searched first)
                let e = slots.remove(i);
                slots.push(e);
            }
            return hit;
        }
        let mem = wrap(b.addr, b.len);
        if slots.len() == CACHE_SLOTS {
            slots.remove(0);
        }
        slots.push((b.addr, b.len, mem.clone()));
        mem
    }

    /// The wrappers of a call's send and receive buffers: the same handle
    /// when they are the same memory (in place), ranges of one wrapper of
    /// their union when they partly overlap (so the library sees the
    /// overlap and refuses it), cached wrappers otherwise.
    pub fn pair(&self, send: &Buf, recv: &Buf) -> (DeviceMem, DeviceMem) {
        let (s0, s1) = (send.addr, send.addr + send.len);
        let (r0, r1) = (recv.addr, recv.addr + recv.len);
        if send.len == 0 || recv.len == 0 || s1 <= r0 || r1 <= s0 || (s0, s1) == (r0, r1) {
            let s = self.mem(send);
            let r = if (s0, s1) == (r0, r1) {
                s.clone()
            } else {
                self.mem(recv)
            };
            return (s, r);
        }
        let (lo, hi) = (s0.min(r0), s1.max(r1));
        let u = wrap(lo, hi - lo);
        let s = u.range(s0 - lo, send.len).expect("inside the union");
        let r = u.range(r0 - lo, recv.len).expect("inside the union");
        (s, r)
    }
}

/// A wrapper of `len` bytes at `addr` (non-zero length); the caller
/// keeps that memory valid while any op uses the wrapper (see below).
pub(crate) fn wrap(addr: usize, len: usize) -> DeviceMem {
    let ptr = NonNull::new(addr as *mut u8).expect("a non-empty Python buffer has an address");
    // SAFETY: `addr` comes from a buffer export or a RawBuffer whose owner
    // vouches for `len` bytes there; every op given this wrapper (or any
    // handle derived from it, see `MemCache`) is handed a `Buf` that keeps
    // that memory valid until the op has completed on its stream — or, for
    // the fused ops (`fused.rs`, synchronous), a `MatDesc` holding the
    // RawBuffer's owner until the call returns — and the library touches
    // caller memory only through the ops given it.
    unsafe { DeviceMem::from_raw(ptr, len) }
}

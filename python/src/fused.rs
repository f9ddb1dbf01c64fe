//! The fused compute/communication ops (hccl-fused) for Python:
//! `_fused_op(comm, op, a, b, out, gathered)`, which `hccl_rs/fused.py`
//! calls with each matrix described as `(RawBuffer, rows, cols, ld)` —
//! row-major, `ld` elements between row starts — or as a string saying
//! why this rank's argument is unusable.
//!
//! A rank with an unusable argument still joins the op's agreement with
//! operands the fused layer refuses, so every rank fails together: it
//! raises its own `ParameterError`, its peers one naming it. The op is
//! synchronous: it waits for the ops this communicator still has in
//! flight (earlier `*_async` calls), runs with the GIL released and
//! returns when its output is written.

use crate::buffer::{self, RawBuffer};
use crate::comm::Comm;
use crate::errors;
use crate::lane;
use crate::shared::{LaneId, Shared};
use hccl_adapter::{DataType, DeviceMem, HcclError, Result};
use hccl_fused::{Fused, Mat};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use std::sync::Arc;

/// Which op.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    MatmulReduceScatter,
    AllGatherMatmul,
    MatmulAllReduce,
}

/// One matrix argument, as Python described it.
struct MatDesc {
    addr: usize,
    nbytes: usize,
    dtype: DataType,
    readonly: bool,
    rows: usize,
    cols: usize,
    ld: usize,
    /// Keeps the memory alive for the call.
    _owner: Py<PyAny>,
}

/// An argument this rank cannot use: the error it raises.
type Refused = PyErr;

fn describe(obj: &Bound<'_, PyAny>, what: &str) -> std::result::Result<MatDesc, Refused> {
    let py = obj.py();
    if let Ok(reason) = obj.extract::<String>() {
        return Err(errors::para(py, reason));
    }
    let (raw, rows, cols, ld): (Bound<'_, RawBuffer>, usize, usize, usize) =
        obj.extract().map_err(|_| {
            errors::para(
                py,
                format!("{what}: expected a (RawBuffer, rows, cols, ld) description"),
            )
        })?;
    let r = raw.get();
    let (addr, nbytes, elem, readonly) = r.view();
    if elem.boolean {
        return Err(errors::para(
            py,
            format!("{what}: bool matrices are not supported"),
        ));
    }
    Ok(MatDesc {
        addr,
        nbytes,
        dtype: elem.dtype,
        readonly,
        rows,
        cols,
        ld,
        _owner: r.owner_ref(py),
    })
}

impl MatDesc {
    /// The matrix over the described memory (checked: the memory holds it).
    fn mat(&self, what: &str) -> Result<Mat> {
        let need = if self.rows == 0 || self.cols == 0 {
            Some(0)
        } else {
            (self.rows - 1)
                .checked_mul(self.ld)
                .and_then(|x| x.checked_add(self.cols))
                .and_then(|x| x.checked_mul(self.dtype.size()))
        };
        match need {
            Some(n) if n <= self.nbytes => {}
            _ => {
                return Err(HcclError::para(format!(
                    "{what}: a {}×{} matrix with leading dimension {} does not fit its {} bytes",
                    self.rows, self.cols, self.ld, self.nbytes
                )))
            }
        }
        let mem = if self.nbytes == 0 {
            // an empty matrix reads nothing: no address to check
            DeviceMem::null()
        } else {
            buffer::wrap(self.addr, self.nbytes)
        };
        Mat::new(&mem, self.dtype, self.rows, self.cols, self.ld).map_err(|e| e.during(what))
    }
}

/// The communicator's fused ops, made at the first call.
fn fused_of(sh: &Shared) -> Result<&Fused> {
    if let Some(f) = sh.fused.get() {
        return Ok(f);
    }
    let f = Fused::new(&sh.comm)?;
    // a racing first call may have set it first: either is as good
    let _ = sh.fused.set(f);
    Ok(sh.fused.get().expect("set above"))
}

/// Waits for the ops the communicator's lanes still have in flight (their
/// outcomes go to their `Work` handles).
fn drain(py: Python<'_>, sh: &Arc<Shared>) -> PyResult<()> {
    for id in [LaneId::Main, LaneId::Recv] {
        let l = sh.lane(id);
        let seq = l.last();
        if seq == 0 || l.completed(seq) {
            continue;
        }
        match lane::wait(py, l, &sh.comm, seq, None, None) {
            Ok(_) => {}
            Err(i) => return Err(i.err),
        }
    }
    Ok(())
}

/// `_fused_op(comm, op, a, b, out, gathered=None)`: runs `op`
/// (`"matmul_reduce_scatter"`, `"all_gather_matmul"`,
/// `"matmul_all_reduce"`) and returns its report (`path`, `blocks`,
/// `block_rows`, `stages`, `threads`, `waited` in seconds).
#[pyfunction]
#[pyo3(signature = (comm, op, a, b, out, gathered = None))]
pub(crate) fn _fused_op<'py>(
    py: Python<'py>,
    comm: &Comm,
    op: &str,
    a: &Bound<'py, PyAny>,
    b: &Bound<'py, PyAny>,
    out: &Bound<'py, PyAny>,
    gathered: Option<&Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyDict>> {
    let kind = match op {
        "matmul_reduce_scatter" => Kind::MatmulReduceScatter,
        "all_gather_matmul" => Kind::AllGatherMatmul,
        "matmul_all_reduce" => Kind::MatmulAllReduce,
        _ => return Err(errors::para(py, format!("unknown fused op '{op}'"))),
    };
    let sh = comm.shared(py)?;
    sh.pin_driver();
    let fused = fused_of(&sh).map_err(|e| errors::to_py(py, e))?;
    drain(py, &sh)?;
    let gathered = gathered.filter(|g| !g.is_none());
    // this rank's operands, or the error it raises after joining the op
    let local = (|| -> PyResult<Vec<Mat>> {
        let mut descs = vec![
            (describe(a, "a")?, "a", false),
            (describe(b, "b")?, "b", false),
            (describe(out, "out")?, "out", true),
        ];
        if let Some(g) = gathered {
            descs.push((describe(g, "gathered")?, "gathered", true));
        }
        descs
            .iter()
            .map(|(d, what, written)| {
                if *written && d.readonly {
                    return Err(errors::para(
                        py,
                        format!("{what} is read-only but the op writes it"),
                    ));
                }
                d.mat(what).map_err(|e| errors::to_py(py, e))
            })
            .collect()
    })();
    let ops = match local {
        Ok(ops) => ops,
        Err(e) => {
            // join the agreement with operands it refuses (no rank runs
            // the op), then raise this rank's own error
            let z = Mat::new(&DeviceMem::null(), DataType::Int8, 0, 0, 0)
                .map_err(|e| errors::to_py(py, e))?;
            let _ = py.detach(|| match kind {
                Kind::MatmulReduceScatter => fused.matmul_reduce_scatter(&z, &z, &z),
                Kind::AllGatherMatmul => fused.all_gather_matmul(&z, &z, &z, None),
                Kind::MatmulAllReduce => fused.matmul_all_reduce(&z, &z, &z),
            });
            return Err(e);
        }
    };
    let report = py
        .detach(|| match kind {
            Kind::MatmulReduceScatter => fused.matmul_reduce_scatter(&ops[0], &ops[1], &ops[2]),
            Kind::AllGatherMatmul => fused.all_gather_matmul(&ops[0], &ops[1], &ops[2], ops.get(3)),
            Kind::MatmulAllReduce => fused.matmul_all_reduce(&ops[0], &ops[1], &ops[2]),
        })
        .map_err(|e| errors::to_py(py, e))?;
    let d = PyDict::new(py);
    d.set_item("path", report.path.name())?;
    d.set_item("blocks", report.blocks)?;
    d.set_item("block_rows", report.block_rows)?;
    d.set_item("stages", report.stages)?;
    d.set_item("threads", report.threads)?;
    d.set_item("waited", report.waited.as_secs_f64())?;
    Ok(d)
}

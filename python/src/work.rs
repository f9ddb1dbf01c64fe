//! [`Work`]: the handle of an op started by a `*_async` call.

use crate::buffer::Buf;
use crate::lane::{self, Waited};
use crate::shared::{LaneId, Shared};
use hccl_adapter::Result;
use pyo3::prelude::*;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The handle of an async op: `wait()` blocks until it completed (raising
/// its error), `is_completed()` asks without blocking.
///
/// The op's buffers stay referenced (and exported) until it completed, so
/// no op ever outlives the memory it uses. A handle dropped before that
/// abandons the op without waiting (an application that gave up on it,
/// e.g. after `wait(timeout)` returned False, must not hang in the drop):
/// the communicator keeps the buffers until the op ends — it completes,
/// or fails by the exec timeout, a revocation, an abort or `destroy()` —
/// and drives it there meanwhile (see `Shared::abandon`). Ops of a
/// communicator complete in the order they were issued (point-to-point
/// receives have their own order).
#[pyclass(frozen, module = "hccl_rs._native")]
pub struct Work {
    shared: Arc<Shared>,
    lane: LaneId,
    seq: u64,
    state: Mutex<WorkState>,
}

struct WorkState {
    /// The op's buffers, until it completed.
    held: Option<Vec<Buf>>,
    /// Its outcome, once known.
    outcome: Option<Result<()>>,
}

impl Work {
    /// The handle of op `seq` on `lane` of `shared`, holding `bufs`.
    pub(crate) fn new(shared: Arc<Shared>, lane: LaneId, seq: u64, bufs: Vec<Buf>) -> Work {
        Work {
            shared,
            lane,
            seq,
            state: Mutex::new(WorkState {
                held: Some(bufs),
                outcome: None,
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, WorkState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records the outcome and lets go of the buffers.
    fn settle(&self, r: Result<()>) -> Option<Vec<Buf>> {
        let mut st = self.lock();
        st.outcome.get_or_insert(r);
        st.held.take()
    }

    fn outcome(&self) -> Option<Result<()>> {
        self.lock().outcome.clone()
    }
}

#[pymethods]
impl Work {
    /// Waits until the op completed and raises its error, if any
    /// (`HcclError`). With `timeout` (seconds), returns False if it had
    /// not completed by then; True once it has. Ctrl-C aborts the
    /// communicator and raises `KeyboardInterrupt`.
    #[pyo3(signature = (timeout = None))]
    fn wait(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<bool> {
        if let Some(r) = self.outcome() {
            return lane::raise(py, r).map(|_| true);
        }
        let timeout = match timeout {
            Some(t) if t.is_finite() && t >= 0.0 => Some(Duration::from_secs_f64(t)),
            Some(t) if t.is_finite() => {
                return Err(crate::errors::para(py, format!("timeout {t} is negative")))
            }
            _ => None,
        };
        let l = self.shared.lane(self.lane);
        match lane::wait(py, l, &self.shared.comm, self.seq, timeout, None) {
            Ok(Waited::Done(r)) => {
                drop(self.settle(r.clone()));
                self.shared.reap();
                lane::raise(py, r).map(|_| true)
            }
            Ok(Waited::TimedOut) => Ok(false),
            Err(i) => {
                let held = self.lock().held.take();
                if i.stranded {
                    // an op may still write there: keep it alive for good
                    std::mem::forget(held);
                }
                Err(i.err)
            }
        }
    }

    /// Whether the op completed (drives it a little, never blocks). A
    /// failed op counts as completed: `wait()` raises its error.
    fn is_completed(&self, py: Python<'_>) -> bool {
        if self.outcome().is_some() {
            return true;
        }
        let l = self.shared.lane(self.lane);
        match py.detach(|| l.poll(self.seq, Some(Instant::now()))) {
            Some(r) => {
                drop(self.settle(r));
                self.shared.reap();
                true
            }
            None => false,
        }
    }

    /// Whether the op completed without an error (False while running).
    fn is_success(&self, py: Python<'_>) -> bool {
        self.is_completed(py) && matches!(self.outcome(), Some(Ok(())))
    }

    /// The op's error as an exception object, or None (also while running).
    fn exception(&self, py: Python<'_>) -> Option<Py<PyAny>> {
        match self.outcome() {
            Some(Err(e)) => Some(crate::errors::to_py(py, e).into_value(py).into_any()),
            _ => None,
        }
    }

    fn __repr__(&self) -> String {
        let state = match self.outcome() {
            None if self.shared.lane(self.lane).completed(self.seq) => "completed",
            None => "pending",
            Some(Ok(())) => "completed",
            Some(Err(_)) => "failed",
        };
        format!("<hccl_rs.Work op {} {state}>", self.seq)
    }
}

impl Drop for Work {
    fn drop(&mut self) {
        let Some(held) = self.lock().held.take() else {
            return;
        };
        if self.shared.lane(self.lane).completed(self.seq) {
            drop(held);
        } else {
            // the caller's memory must outlive the op, and this thread must
            // not wait for it (it may never end): the communicator keeps it
            self.shared.abandon(self.lane, self.seq, held);
        }
    }
}

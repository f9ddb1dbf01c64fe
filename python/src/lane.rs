//! A stream of a communicator with its ops numbered, so that each op's
//! handle can tell whether it completed and with which error.
//!
//! A stream reports the first error since its last synchronize to
//! whoever synchronizes next. A lane numbers its ops as they are enqueued
//! and, after each synchronize, records which numbers it covered and the
//! error it returned, so the handle of every op in that range — whoever
//! waited — learns the outcome.
//!
//! Waiting is done in slices ([`SLICE`]) with the GIL released, looking
//! for Python signals between slices: Ctrl-C aborts the communicator (the
//! op in flight ends at once on every rank), and raises once the op has
//! let go of the caller's memory.
//!
//! A lane also keeps the buffers of *abandoned* ops — whose handle was
//! dropped before they completed — until they have ([`Lane::park`],
//! [`Lane::reap`]): the memory outlives every op that may touch it, and
//! the thread that dropped the handle does not wait.

use crate::buffer::Buf;
use crate::errors;
use hccl_adapter::{HcclComm, HcclError, Result, Stream};
use pyo3::prelude::*;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long a wait runs between looks for Python signals (Ctrl-C).
pub(crate) const SLICE: Duration = Duration::from_millis(100);

/// Most failures remembered per lane (handles of older ones still see
/// their op completed, but as succeeded: waiting that late is unlikely).
const FAILURES_KEPT: usize = 64;

/// A stream and the numbering of the ops enqueued on it.
pub(crate) struct Lane {
    stream: Stream,
    state: Mutex<State>,
    /// The buffers of abandoned ops, by op number, until those completed.
    parked: Mutex<Vec<(u64, Vec<Buf>)>>,
    /// `parked.len()`, read without the lock on every op.
    n_parked: AtomicUsize,
}

struct State {
    /// Ops enqueued so far (the last one's number).
    submitted: u64,
    /// Every op up to this number has completed.
    synced: u64,
    /// Ops `from..=to` completed with `err` (reported by one synchronize).
    failures: VecDeque<(u64, u64, HcclError)>,
}

impl State {
    fn outcome(&self, seq: u64) -> Result<()> {
        match self
            .failures
            .iter()
            .find(|(from, to, _)| (*from..=*to).contains(&seq))
        {
            Some((_, _, e)) => Err(e.clone()),
            None => Ok(()),
        }
    }
}

impl Lane {
    /// A lane on `stream`.
    pub fn new(stream: Stream) -> Lane {
        Lane {
            stream,
            state: Mutex::new(State {
                submitted: 0,
                synced: 0,
                failures: VecDeque::new(),
            }),
            parked: Mutex::new(Vec::new()),
            n_parked: AtomicUsize::new(0),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Enqueues an op with `f` and returns its number (nothing is numbered
    /// when `f` refuses).
    pub fn submit(&self, f: impl FnOnce(&Stream) -> Result<()>) -> Result<u64> {
        let mut st = self.state();
        f(&self.stream)?;
        st.submitted += 1;
        Ok(st.submitted)
    }

    /// Drives the stream until op `seq` completed or `deadline` passed:
    /// `Some(outcome)` or `None` (not yet). Call without the GIL.
    pub fn poll(&self, seq: u64, deadline: Option<Instant>) -> Option<Result<()>> {
        let target = {
            let st = self.state();
            if st.synced >= seq {
                return Some(st.outcome(seq));
            }
            st.submitted
        };
        let r = self.stream.synchronize_until(deadline);
        if let Ok(false) = r {
            return None;
        }
        let mut st = self.state();
        if let Err(e) = r {
            let from = st.synced + 1;
            st.failures.push_back((from.min(target), target, e));
            if st.failures.len() > FAILURES_KEPT {
                st.failures.pop_front();
            }
        }
        st.synced = st.synced.max(target);
        if st.synced >= seq {
            Some(st.outcome(seq))
        } else {
            // another thread enqueued and we waited for less than `seq`
            // (cannot happen: `seq` was numbered before `target` was read)
            None
        }
    }

    /// The number of the last op enqueued (0: none yet).
    pub fn last(&self) -> u64 {
        self.state().submitted
    }

    /// Whether op `seq` is known to have completed (no driving).
    pub fn completed(&self, seq: u64) -> bool {
        self.state().synced >= seq
    }

    fn parked(&self) -> std::sync::MutexGuard<'_, Vec<(u64, Vec<Buf>)>> {
        self.parked.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Keeps `bufs`, the memory of op `seq` whose handle is gone, until
    /// [`reap`](Self::reap) finds the op completed.
    pub fn park(&self, seq: u64, bufs: Vec<Buf>) {
        let mut p = self.parked();
        p.push((seq, bufs));
        self.n_parked.store(p.len(), Ordering::Release);
    }

    /// The highest-numbered abandoned op not known to have completed.
    pub fn abandoned(&self) -> Option<u64> {
        if self.n_parked.load(Ordering::Acquire) == 0 {
            return None;
        }
        let top = self.parked().iter().map(|(s, _)| *s).max()?;
        (!self.completed(top)).then_some(top)
    }

    /// Takes the buffers of the abandoned ops that have completed, for the
    /// caller to drop (outside the lane's locks: releasing a buffer export
    /// takes the GIL). Cheap when none are parked.
    #[must_use]
    pub fn reap(&self) -> Vec<Vec<Buf>> {
        if self.n_parked.load(Ordering::Acquire) == 0 {
            return Vec::new();
        }
        let synced = self.state().synced;
        let mut p = self.parked();
        let mut done = Vec::new();
        p.retain_mut(|(seq, bufs)| {
            if *seq <= synced {
                done.push(std::mem::take(bufs));
                false
            } else {
                true
            }
        });
        self.n_parked.store(p.len(), Ordering::Release);
        done
    }

    /// Takes every parked buffer, whatever its op's state (the
    /// communicator is going away: the caller decides their fate).
    pub fn take_parked(&self) -> Vec<(u64, Vec<Buf>)> {
        let mut p = self.parked();
        self.n_parked.store(0, Ordering::Release);
        std::mem::take(&mut *p)
    }
}

/// How a wait ended.
pub(crate) enum Waited {
    /// The op completed: its outcome.
    Done(Result<()>),
    /// `timeout` passed first.
    TimedOut,
}

/// Waits for op `seq` of `lane` with the GIL released, in [`SLICE`]s,
/// raising pending Python signals between them. On a signal (Ctrl-C) the
/// communicator is aborted, the op is waited out (it ends at once once
/// aborted), and the signal's exception is returned; `stranded` is told
/// if the op still had not ended after [`DRAIN`], so the caller keeps its
/// memory alive for good rather than free memory an op may still touch.
pub(crate) fn wait(
    py: Python<'_>,
    lane: &Lane,
    comm: &HcclComm,
    seq: u64,
    timeout: Option<Duration>,
    first_slice_done: Option<Option<Result<()>>>,
) -> std::result::Result<Waited, Interrupted> {
    let end = timeout.map(|t| Instant::now() + t);
    if let Some(Some(r)) = first_slice_done {
        return Ok(Waited::Done(r));
    }
    let mut first = first_slice_done.is_some();
    loop {
        if !first {
            let slice_end = Instant::now() + SLICE;
            let deadline = end.map_or(slice_end, |e| e.min(slice_end));
            if let Some(r) = py.detach(|| lane.poll(seq, Some(deadline))) {
                return Ok(Waited::Done(r));
            }
        }
        first = false;
        if let Err(sig) = py.check_signals() {
            let reason = format!("interrupted while waiting: {sig}");
            comm.abort(&reason);
            tracing::warn!(rank = comm.rank(), "{reason}; communicator aborted");
            let drained = py.detach(|| {
                let until = Instant::now() + DRAIN;
                loop {
                    if lane.poll(seq, Some(Instant::now() + SLICE)).is_some() {
                        return true;
                    }
                    if Instant::now() >= until {
                        return false;
                    }
                }
            });
            return Err(Interrupted {
                err: sig,
                stranded: !drained,
            });
        }
        if end.is_some_and(|e| Instant::now() >= e) {
            return Ok(Waited::TimedOut);
        }
    }
}

/// The longest an interrupted wait waits for the aborted op to end.
pub(crate) const DRAIN: Duration = Duration::from_secs(5);

/// A wait ended by a Python signal.
pub(crate) struct Interrupted {
    /// The signal handler's exception (`KeyboardInterrupt`).
    pub err: PyErr,
    /// The op had not ended: its memory must stay alive.
    pub stranded: bool,
}

/// `r` with its error as a Python exception.
pub(crate) fn raise(py: Python<'_>, r: Result<()>) -> PyResult<()> {
    r.map_err(|e| errors::to_py(py, e))
}

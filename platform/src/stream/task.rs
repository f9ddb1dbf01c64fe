//! Tasks: the units of work a stream runs in order.

use crate::dtype::{DataType, ReduceOp};
use crate::error::{HcclError, Result};
use crate::link::{Link, LinkOp, LinkOpState};
use crate::mem::{copy_mem, reduce_mem, PinnedMem};
use crate::notify::Notify;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

/// A host function run in stream order.
pub type HostCallback = Box<dyn FnOnce() -> Result<()> + Send>;

/// What a task does.
pub enum TaskKind {
    /// `dst <- src`.
    Memcpy {
        /// Destination.
        dst: PinnedMem,
        /// Source.
        src: PinnedMem,
    },
    /// `dst <- dst op src`.
    Reduce {
        /// Destination and first operand.
        dst: PinnedMem,
        /// Second operand.
        src: PinnedMem,
        /// Element type.
        dtype: DataType,
        /// Reduction.
        op: ReduceOp,
    },
    /// Record a notify (wakes a waiter on another stream).
    NotifyRecord(Notify),
    /// Wait for the next record of a notify.
    NotifyWait {
        /// The notify.
        notify: Notify,
        /// Which record this waits for, assigned at first poll.
        seq: Option<u64>,
    },
    /// A link verb.
    Link {
        /// The link.
        link: Arc<dyn Link>,
        /// The verb.
        op: LinkOp,
        /// Progress kept by the link between polls.
        state: LinkOpState,
    },
    /// A host function.
    Callback(Option<HostCallback>),
}

impl std::fmt::Debug for TaskKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.describe())
    }
}

impl TaskKind {
    /// A short description for logs and errors.
    pub fn describe(&self) -> String {
        match self {
            TaskKind::Memcpy { dst, .. } => format!("memcpy of {} bytes", dst.mem().len()),
            TaskKind::Reduce { dst, dtype, op, .. } => {
                format!("{op} reduce of {} bytes of {dtype}", dst.mem().len())
            }
            TaskKind::NotifyRecord(_) => "notify record".into(),
            TaskKind::NotifyWait { .. } => "notify wait".into(),
            TaskKind::Link { link, op, .. } => format!(
                "{} with peer rank {} over the {} link",
                op.verb(),
                link.remote_rank(),
                link.transport()
            ),
            TaskKind::Callback(_) => "host callback".into(),
        }
    }
}

/// The op a task belongs to, for error messages: tag, algorithm, rank.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OpLabel {
    /// The op tag.
    pub tag: String,
    /// The executor / algorithm name.
    pub algorithm: String,
    /// The rank issuing the op.
    pub rank: u32,
}

/// A queued task with its label.
#[derive(Debug)]
pub struct Task {
    pub(crate) kind: TaskKind,
    pub(crate) label: Option<Arc<OpLabel>>,
    pub(crate) step: u32,
}

impl Task {
    pub(crate) fn poll(&mut self) -> Poll<Result<()>> {
        let r = match &mut self.kind {
            TaskKind::Memcpy { dst, src } => Poll::Ready(copy_mem(dst.mem(), src.mem())),
            TaskKind::Reduce {
                dst,
                src,
                dtype,
                op,
            } => Poll::Ready(reduce_mem(dst.mem(), src.mem(), *dtype, *op)),
            TaskKind::NotifyRecord(n) => {
                n.record();
                Poll::Ready(Ok(()))
            }
            TaskKind::NotifyWait { notify, seq } => {
                let s = *seq.get_or_insert_with(|| notify.next_wait_seq());
                if notify.is_recorded(s) {
                    Poll::Ready(Ok(()))
                } else {
                    Poll::Pending
                }
            }
            TaskKind::Link { link, op, state } => link.poll(op, state),
            TaskKind::Callback(f) => match f.take() {
                Some(f) => Poll::Ready(f()),
                None => Poll::Ready(Err(HcclError::internal("host callback polled twice"))),
            },
        };
        match r {
            Poll::Ready(Err(e)) => Poll::Ready(Err(self.locate(e))),
            other => other,
        }
    }

    fn locate(&self, mut e: HcclError) -> HcclError {
        if let TaskKind::Link { link, .. } = &self.kind {
            e = e.peer(link.remote_rank());
        }
        if let Some(l) = &self.label {
            e = e.rank(l.rank).tag(l.tag.clone());
        }
        e
    }

    /// The error a task gets when it has waited longer than the exec timeout.
    pub(crate) fn timeout_error(&self, waited: Duration) -> HcclError {
        let (algo, what) = match &self.label {
            Some(l) => (l.algorithm.as_str(), self.kind.describe()),
            None => ("(none)", self.kind.describe()),
        };
        let e = HcclError::timeout(format!(
            "waited {:.1}s (HCCL_EXEC_TIMEOUT) for {what} at step {} of algorithm {algo}; \
             the peer may have issued a different op, be slow, or be gone",
            waited.as_secs_f64(),
            self.step
        ));
        self.locate(e)
    }

    /// Tells the peer of a failed link task that this side gave up.
    pub(crate) fn abort_peer(&self, reason: &str) {
        if let TaskKind::Link { link, .. } = &self.kind {
            link.abort(reason);
        }
    }
}

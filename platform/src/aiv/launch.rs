//! Launching an AIV kernel: [`AivLaunch`], the kernel as an executor
//! builds it (borrowing the op's memory), and [`Stream::aiv_launch`] — an
//! inherent method of `Stream` defined here, beside what it launches: the
//! stream knows kernels, not AIV, and executors keep calling
//! `stream.aiv_launch(kernel)`.
//!
//! The stream's launch path (run at once in the launching thread when it
//! can, queue otherwise, back-pressure) is the stream's generic kernel
//! launch; what is AIV's is how the borrowed kernel polls and spins, its
//! queued form, and the bounds below.

use super::board::{window, AivBoards, AIV_MAX_BYTES, DESC_LEN};
use super::kernel::{poll_kernel, AivKind, AivTask, Progress};
use super::settle::AivSettle;
use crate::error::{HcclError, Result};
use crate::link::OpDesc;
use crate::mem::DeviceMem;
use crate::stream::{Kernel, Launch, Relaunch, Stream};
use crate::sync::Arc;
use std::task::Poll;

/// Re-reads of a missing peer entry a launch makes before queueing its
/// kernel, when ranks have cores of their own (about a microsecond: a
/// peer running the same loop publishes within that, and fewer than the
/// polls between liveness checks, so no liveness check runs in the
/// launch).
pub const LAUNCH_SPINS: u32 = 200;

/// One small collective, built by an executor and handed to
/// [`Stream::aiv_launch`](crate::Stream::aiv_launch), which runs it at once
/// when it can (see there) and otherwise queues it as an `AivTask`. It
/// borrows the op's memory: a kernel that completes inside the launch
/// never touches a reference count.
#[derive(Debug)]
pub struct AivLaunch<'a> {
    progress: Progress,
    boards: &'a Arc<AivBoards>,
    input: &'a DeviceMem,
    output: &'a DeviceMem,
}

impl<'a> AivLaunch<'a> {
    /// A kernel of `kind` over blocks of `block` bytes: `input` is what
    /// this rank publishes and `output` what it writes, exactly
    /// [`AivKind::publish_len`] and [`AivKind::output_len`] bytes (at most
    /// [`AIV_MAX_BYTES`] published). `desc` is this rank's op descriptor,
    /// compared with every peer's.
    pub fn new(
        kind: AivKind,
        boards: &'a Arc<AivBoards>,
        (input, output): (&'a DeviceMem, &'a DeviceMem),
        block: usize,
        desc: &OpDesc,
    ) -> Result<AivLaunch<'a>> {
        let (me, p) = (boards.rank, boards.ranks());
        let what = kind.name();
        if let AivKind::AllReduce { dtype, .. }
        | AivKind::ReduceScatter { dtype, .. }
        | AivKind::Reduce { dtype, .. } = kind
        {
            if block % dtype.size() != 0 {
                return Err(HcclError::para(format!(
                    "AIV {what}: a block of {block} bytes is not a whole number of {dtype} elements"
                )));
            }
        }
        for (name, got, want) in [
            ("input", input.len(), kind.publish_len(me, p, block)),
            ("output", output.len(), kind.output_len(me, p, block)),
        ] {
            if got != want {
                return Err(HcclError::para(format!(
                    "AIV {what} on rank {me} of {p}: the {name} is {got} bytes, not {want} \
                     (blocks of {block} bytes)"
                )));
            }
        }
        if input.len() > AIV_MAX_BYTES {
            return Err(HcclError::para(format!(
                "an AIV kernel carries at most {AIV_MAX_BYTES} bytes per rank, not {}",
                input.len()
            )));
        }
        let mut d = [0u8; DESC_LEN];
        d.copy_from_slice(&desc.to_bytes()[..DESC_LEN]);
        Ok(AivLaunch {
            progress: Progress {
                kind,
                len: input.len(),
                block,
                desc: d,
                seq: 0,
                next: 0,
                polls: 0,
                takes_all: kind.takes_from_all(me, p),
            },
            boards,
            input,
            output,
        })
    }

    /// Advances the kernel in the launching thread. The caller holds the
    /// device's driver lock with nothing queued on the stream, so no task
    /// of the stream runs concurrently, and the launching call holds the
    /// memory.
    fn poll(&mut self) -> Poll<Result<()>> {
        poll_kernel(
            &mut self.progress,
            self.boards,
            Some(self.input),
            self.output,
        )
    }

    /// Like [`poll`](Self::poll), then re-polls up to `spins` more times
    /// while the kernel waits to publish (a peer's completion frees the
    /// entry) or for an entry its output needs. A rank with a core of its
    /// own usually sees a peer move within a few hundred nanoseconds, and
    /// completing the kernel here is cheaper than queueing it (a box,
    /// pins, and a later poll from the queue).
    fn poll_spinning(&mut self, spins: u32) -> Poll<Result<()>> {
        let mut r = self.poll();
        let mut left = spins;
        while r.is_pending() && left > 0 {
            crate::sync::spin_loop();
            r = self.poll();
            left -= 1;
        }
        r
    }

    /// The queued form: holds its memory pinned (the input only until it
    /// is published), keeps its progress.
    fn into_task(self) -> AivTask {
        AivTask {
            input: (self.progress.seq == 0).then(|| self.input.pin()),
            progress: self.progress,
            boards: self.boards.clone(),
            output: self.output.pin(),
        }
    }
}

impl Launch for AivLaunch<'_> {
    fn poll_now(&mut self, spins: u32) -> Poll<Result<()>> {
        self.poll_spinning(spins)
    }

    fn spins(&self) -> u32 {
        LAUNCH_SPINS
    }

    /// Twice the ops the boards let this rank publish ahead of its
    /// slowest peer ([`window`]): past that, queued kernels cannot even
    /// publish.
    fn max_outstanding(&self) -> u64 {
        2 * window(self.progress.len)
    }

    fn into_kernel(self) -> Box<dyn Kernel> {
        Box::new(self.into_task())
    }

    /// The kernel before its first poll, holding its memory (not pinned:
    /// a graph is not queued work).
    fn capture(&self) -> Box<dyn Relaunch> {
        Box::new(AivRelaunch {
            plan: self.plan(),
            input: self.input.clone(),
            output: self.output.clone(),
        })
    }
}

impl AivLaunch<'_> {
    /// This kernel, fresh (before its first poll) and without its memory:
    /// an [`AivPlan`] that launches the same kernel again on the memory
    /// it is handed.
    pub fn plan(&self) -> AivPlan {
        AivPlan {
            progress: Progress {
                seq: 0,
                next: 0,
                polls: 0,
                ..self.progress
            },
            boards: self.boards.clone(),
            output_len: self.output.len(),
        }
    }
}

/// An AIV kernel prepared once and launched any number of times, each
/// launch a fresh kernel: what an executor hands the framework for an op
/// repeated with the same arguments (the repeat path: no validation, no
/// descriptor, no allocation per launch), and, with its memory, what a
/// captured graph replays. It holds no memory: every launch is handed
/// the op's input and output, of which the kernel uses the first bytes
/// (as many as when it was built). Every launch goes through
/// [`Stream::aiv_launch`], so a kernel whose peers have published
/// completes inside the launch, never boxed, and takes the next sequence
/// number on the boards when it publishes, like any kernel: the ranks
/// launch the same ops in the same order.
#[derive(Debug)]
pub struct AivPlan {
    progress: Progress,
    boards: Arc<AivBoards>,
    output_len: usize,
}

impl AivPlan {
    /// Launches the kernel once more on `stream`, publishing the first
    /// bytes of `input` and writing the first bytes of `output` (as many
    /// as the kernel it was made from; `HCCL_E_PARA` if either is
    /// shorter). See [`Stream::aiv_launch`].
    pub fn launch(&self, stream: &Stream, input: &DeviceMem, output: &DeviceMem) -> Result<()> {
        let input = input.prefix(self.progress.len)?;
        let output = output.prefix(self.output_len)?;
        stream.aiv_launch(AivLaunch {
            progress: self.progress,
            boards: &self.boards,
            input: &input,
            output: &output,
        })
    }
}

/// A captured AIV kernel: its plan and the memory it runs on, launched
/// again at every replay through the same inline launch path as the
/// original (so a replayed kernel whose peers have published completes
/// inside the launch, never boxed).
#[derive(Debug)]
struct AivRelaunch {
    plan: AivPlan,
    input: DeviceMem,
    output: DeviceMem,
}

impl Relaunch for AivRelaunch {
    fn relaunch(&self, stream: &Stream) -> Result<()> {
        self.plan.launch(stream, &self.input, &self.output)
    }

    fn references(&self, m: &DeviceMem) -> bool {
        self.input.same_region(m) || self.output.same_region(m)
    }
}

impl Stream {
    /// Launches an AIV kernel: a whole small collective as one task (see
    /// `aiv/PROTOCOL.md`).
    ///
    /// Under the inline driver, when no other thread drives the device
    /// and nothing but kernels is queued ahead of it, the kernel runs
    /// in this call: earlier kernels are completed first (stream order),
    /// then this one publishes this rank's part and folds in the peers'.
    /// If every peer has already published, it completes here without
    /// being queued at all; otherwise it is queued (already published) and
    /// completes at the next launch or synchronize. So a rank that launches
    /// after its peers finishes the op inside the launch, and none of them
    /// spins at synchronize. Nothing but kernels (a few hundred
    /// nanoseconds each) runs in the caller's thread here, and the launch
    /// waits only when this rank is more than twice the boards' window
    /// of ops ahead of a peer (back-pressure: it then drives the stream as
    /// synchronize would, with the same timeouts).
    pub fn aiv_launch(&self, kernel: AivLaunch<'_>) -> Result<()> {
        let b = kernel.boards;
        if !kernel.progress.takes_all {
            // this rank may complete before checking every peer's
            // arguments: a synchronize finishes the checks (`settle.rs`)
            self.settle_at_sync(b.group(), || Arc::new(AivSettle(Arc::downgrade(b))));
        }
        self.launch(kernel)
    }
}

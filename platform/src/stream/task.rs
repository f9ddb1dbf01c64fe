//! Tasks: the units of work a stream runs in order.

use super::kernel::Kernel;
use crate::dtype::{DataType, ReduceOp};
use crate::error::{HcclError, Result};
use crate::link::{Link, LinkOp, LinkOpState, Verb};
use crate::mem::{copy_mem, copy_view, reduce_mem, reduce_view, DeviceMem, MemView};
use crate::mem::{PinnedMem, Region};
use crate::notify::Notify;
use crate::sync::{Arc, Weak};
use std::collections::HashMap;
use std::task::Poll;

/// A host function run in stream order.
pub type HostCallback = Box<dyn FnOnce() -> Result<()> + Send>;

/// A host function run in stream order that may run any number of times:
/// what a captured graph keeps of a host callback (see
/// [`Stream::host_fn`](super::Stream::host_fn)), replayed by every launch
/// without boxing it again.
pub type HostFn = Arc<dyn Fn() -> Result<()> + Send + Sync>;

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
    /// A link verb.
    Link {
        /// The link.
        link: Arc<dyn Link>,
        /// The verb.
        op: LinkOp,
        /// Progress kept by the link between polls.
        state: LinkOpState,
    },
    /// A kernel: a whole piece of work (e.g. a small collective) in one
    /// task (see [`Kernel`]).
    Kernel(Box<dyn Kernel>),
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
            TaskKind::Link { link, op, .. } => format!(
                "{} with peer rank {} over the {} link",
                op.verb(),
                link.remote_rank(),
                link.transport()
            ),
            TaskKind::Kernel(k) => k.describe(),
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

/// What a queued task does. Copies, reductions and link verbs — nearly
/// every task of a collective — are stored compactly: their link and
/// regions are indices into the queue's [`Pools`] (which hold one reference
/// per resource instead of one per task), offsets and lengths are `u32`
/// (larger ones keep the public form), and the progress of a waiting verb
/// lives in the queue, because only the head task is ever polled. Anything
/// else keeps its public [`TaskKind`]. Every variant carries the task's
/// algorithm step, which fills what would otherwise be padding: a task is
/// 32 bytes, two per cache line (a 1,024-rank ring AllReduce queues 12.7 M
/// of them before any runs).
pub(crate) enum Op {
    Copy {
        dst: u32,
        src: u32,
        dst_off: u32,
        src_off: u32,
        len: u32,
        step: u32,
    },
    Reduce {
        dst: u32,
        src: u32,
        dtype: u8,
        op: u8,
        dst_off: u32,
        src_off: u32,
        len: u32,
        step: u32,
    },
    Link {
        link: u32,
        /// Region of the local memory operand (unused by signal verbs).
        mem: u32,
        verb: Verb,
        /// Offset in the peer's buffer.
        remote_off: u32,
        mem_off: u32,
        len: u32,
        step: u32,
    },
    Record {
        notify: Notify,
        step: u32,
    },
    Wait {
        notify: Notify,
        step: u32,
    },
    Callback {
        f: Option<HostCallback>,
        step: u32,
    },
    /// A host function that may run again (a replayed graph's callback).
    HostFn {
        f: HostFn,
        step: u32,
    },
    /// A link verb in its public form shared by every replay of a graph
    /// (the descriptor verbs: no memory operand, so nothing to pin); its
    /// progress lives in the queue as a compact verb's does.
    SharedLink {
        link: u32,
        op: Arc<LinkOp>,
        step: u32,
    },
    Other {
        kind: Box<TaskKind>,
        step: u32,
    },
    Kernel {
        kernel: Box<dyn Kernel>,
        step: u32,
    },
}

impl Op {
    fn step_mut(&mut self) -> &mut u32 {
        match self {
            Op::Copy { step, .. }
            | Op::Reduce { step, .. }
            | Op::Link { step, .. }
            | Op::Record { step, .. }
            | Op::Wait { step, .. }
            | Op::Callback { step, .. }
            | Op::HostFn { step, .. }
            | Op::SharedLink { step, .. }
            | Op::Other { step, .. }
            | Op::Kernel { step, .. } => step,
        }
    }
}

/// A copy, reduction or link verb as a captured graph keeps it (see
/// `graph.rs`): [`Op`]'s compact forms, their link and regions slots of the
/// capture's pools, without the step (kept beside it). Plain data, so a
/// graph shared between threads needs no lock to replay it.
#[derive(Clone, Copy, Debug)]
pub(crate) enum RecOp {
    Copy {
        dst: u32,
        src: u32,
        dst_off: u32,
        src_off: u32,
        len: u32,
    },
    Reduce {
        dst: u32,
        src: u32,
        dtype: u8,
        op: u8,
        dst_off: u32,
        src_off: u32,
        len: u32,
    },
    Link {
        link: u32,
        mem: u32,
        verb: Verb,
        remote_off: u32,
        mem_off: u32,
        len: u32,
    },
}

impl RecOp {
    /// The recorded form of a compact `op`; `None` for the other forms.
    pub(crate) fn of(op: &Op) -> Option<RecOp> {
        Some(match *op {
            Op::Copy {
                dst,
                src,
                dst_off,
                src_off,
                len,
                ..
            } => RecOp::Copy {
                dst,
                src,
                dst_off,
                src_off,
                len,
            },
            Op::Reduce {
                dst,
                src,
                dtype,
                op,
                dst_off,
                src_off,
                len,
                ..
            } => RecOp::Reduce {
                dst,
                src,
                dtype,
                op,
                dst_off,
                src_off,
                len,
            },
            Op::Link {
                link,
                mem,
                verb,
                remote_off,
                mem_off,
                len,
                ..
            } => RecOp::Link {
                link,
                mem,
                verb,
                remote_off,
                mem_off,
                len,
            },
            _ => return None,
        })
    }

    /// The link slot and the region slots the op uses (in the pools it
    /// was recorded with).
    pub(crate) fn slots(&self) -> (Option<u32>, [Option<u32>; 2]) {
        match *self {
            RecOp::Copy { dst, src, .. } | RecOp::Reduce { dst, src, .. } => {
                (None, [Some(dst), Some(src)])
            }
            RecOp::Link {
                link, mem, verb, ..
            } => (Some(link), [verb.has_mem().then_some(mem), None]),
        }
    }

    /// The queued form at `step`, its slots mapped through `links` and
    /// `regions` (recorded slot → the queue's slot).
    #[inline]
    pub(crate) fn to_op(self, links: &[u32], regions: &[u32], step: u32) -> Op {
        let r = |s: u32| regions[s as usize];
        match self {
            RecOp::Copy {
                dst,
                src,
                dst_off,
                src_off,
                len,
            } => Op::Copy {
                dst: r(dst),
                src: r(src),
                dst_off,
                src_off,
                len,
                step,
            },
            RecOp::Reduce {
                dst,
                src,
                dtype,
                op,
                dst_off,
                src_off,
                len,
            } => Op::Reduce {
                dst: r(dst),
                src: r(src),
                dtype,
                op,
                dst_off,
                src_off,
                len,
                step,
            },
            RecOp::Link {
                link,
                mem,
                verb,
                remote_off,
                mem_off,
                len,
            } => Op::Link {
                link: links[link as usize],
                mem: if verb.has_mem() { r(mem) } else { 0 },
                verb,
                remote_off,
                mem_off,
                len,
                step,
            },
        }
    }
}

/// A queued task: what it does and the algorithm step it belongs to (its
/// op label is kept per run of tasks by the queue).
pub struct Task {
    pub(crate) op: Op,
}

impl Task {
    /// A task doing `op` at algorithm step `step`.
    pub(crate) fn new(mut op: Op, step: u32) -> Task {
        *op.step_mut() = step;
        Task { op }
    }

    /// The algorithm step the task belongs to.
    pub(crate) fn step(&self) -> u32 {
        match &self.op {
            Op::Copy { step, .. }
            | Op::Reduce { step, .. }
            | Op::Link { step, .. }
            | Op::Record { step, .. }
            | Op::Wait { step, .. }
            | Op::Callback { step, .. }
            | Op::HostFn { step, .. }
            | Op::SharedLink { step, .. }
            | Op::Other { step, .. }
            | Op::Kernel { step, .. } => *step,
        }
    }
}

impl std::fmt::Debug for Task {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Task").field("step", &self.step()).finish()
    }
}

/// One slot of a [`Pool`].
struct Slot<T: ?Sized> {
    /// The item while queued tasks use it.
    item: Option<Arc<T>>,
    /// The item, weakly, while the slot is indexed: an idle slot keeps its
    /// address (a weak reference keeps the allocation, so no other item can
    /// appear at that address) without keeping the item alive.
    weak: Option<Weak<T>>,
    key: usize,
    /// Queued tasks that reference the item.
    uses: usize,
}

/// Idle slots a pool keeps indexed before it sweeps them.
const IDLE_MAX: usize = 64;

/// Resources (links, regions) that a stream's queued tasks reference, held
/// once each however many tasks use them: a task stores a `u32` slot
/// instead of an `Arc` (16 or 24 bytes and two atomic operations fewer per
/// task). An item's strong reference is released when its last task is
/// retired, so a queue keeps nothing alive that no queued task needs; the
/// slot stays indexed (weakly) so the next op on the same buffers and links
/// finds it again without touching the hash map — a stream that is drained
/// after every op would otherwise remove and re-insert every entry per op.
pub(crate) struct Pool<T: ?Sized> {
    slots: Vec<Slot<T>>,
    free: Vec<u32>,
    /// Slot by the item's address, for lookups that miss `recent`.
    index: HashMap<usize, u32>,
    /// The last few (address, slot) pairs: a collective alternates between
    /// two links and a few buffers, so most lookups end here.
    recent: [(usize, u32); 4],
    next: usize,
    /// Indexed slots with no use.
    idle: usize,
}

impl<T: ?Sized> Default for Pool<T> {
    fn default() -> Self {
        Pool {
            slots: Vec::new(),
            free: Vec::new(),
            index: HashMap::new(),
            recent: [(0, 0); 4],
            next: 0,
            idle: 0,
        }
    }
}

impl<T: ?Sized> Pool<T> {
    /// The slot of `item` with one more use, pooling it if needed.
    fn acquire(&mut self, item: &Arc<T>) -> u32 {
        self.acquire_n(item, 1)
    }

    /// The slot of `item` with `n` (at least 1) more uses, pooling it if
    /// needed: a replayed graph takes all the uses of its tasks at once.
    fn acquire_n(&mut self, item: &Arc<T>, n: usize) -> u32 {
        let key = Arc::as_ptr(item) as *const () as usize;
        let hit = self
            .recent
            .iter()
            .find(|&&(k, _)| k == key)
            .map(|&(_, s)| s)
            .or_else(|| self.index.get(&key).copied());
        let s = match hit {
            Some(s) => {
                if self.recent.iter().all(|&(k, _)| k != key) {
                    self.remember(key, s);
                }
                s
            }
            None => {
                let slot = Slot {
                    item: None,
                    weak: Some(Arc::downgrade(item)),
                    key,
                    uses: 0,
                };
                let s = match self.free.pop() {
                    Some(s) => {
                        self.slots[s as usize] = slot;
                        s
                    }
                    None => {
                        self.slots.push(slot);
                        (self.slots.len() - 1) as u32
                    }
                };
                self.index.insert(key, s);
                self.idle += 1;
                self.remember(key, s);
                s
            }
        };
        let slot = &mut self.slots[s as usize];
        if slot.uses == 0 {
            slot.item = Some(item.clone());
            self.idle -= 1;
        }
        slot.uses += n;
        s
    }

    /// Slots ever made (indices below this may be in use).
    pub(crate) fn len(&self) -> usize {
        self.slots.len()
    }

    /// Slot `s`'s item and its number of uses, if in use.
    fn used(&self, s: u32) -> Option<(&Arc<T>, usize)> {
        let slot = self.slots.get(s as usize)?;
        Some((slot.item.as_ref()?, slot.uses))
    }

    fn remember(&mut self, key: usize, s: u32) {
        self.recent[self.next] = (key, s);
        self.next = (self.next + 1) % self.recent.len();
    }

    fn get(&self, s: u32) -> &Arc<T> {
        self.slots[s as usize]
            .item
            .as_ref()
            .expect("a queued task's pooled item is alive")
    }

    /// Drops one use of slot `s`; returns the item's strong reference if
    /// that was the last use.
    fn release(&mut self, s: u32) -> Option<Arc<T>> {
        let slot = &mut self.slots[s as usize];
        slot.uses -= 1;
        if slot.uses > 0 {
            return None;
        }
        let item = slot.item.take();
        self.idle += 1;
        if self.idle > IDLE_MAX {
            self.sweep();
        }
        item
    }

    /// Forgets every idle slot.
    fn sweep(&mut self) {
        for (s, slot) in self.slots.iter_mut().enumerate() {
            if slot.uses == 0 && slot.weak.take().is_some() {
                self.index.remove(&slot.key);
                self.free.push(s as u32);
            }
        }
        self.recent = [(0, 0); 4];
        self.idle = 0;
    }
}

/// A queue's pooled links and regions (see [`Pool`]).
#[derive(Default)]
pub(crate) struct Pools {
    links: Pool<dyn Link>,
    regions: Pool<Region>,
    /// A capture's pools (see `graph.rs`): they keep what recorded tasks
    /// reference alive but pin nothing — a graph is not queued work, and
    /// the host must be able to rewrite its buffers between launches.
    recording: bool,
}

/// Items released by retired tasks, dropped once the queue lock is released
/// (dropping a link or a host callback may run arbitrary code).
#[derive(Default)]
pub(crate) struct Released {
    links: Vec<Arc<dyn Link>>,
    regions: Vec<Arc<Region>>,
    other: Vec<Task>,
}

impl Released {
    pub(crate) fn is_empty(&self) -> bool {
        self.links.is_empty() && self.regions.is_empty() && self.other.is_empty()
    }
}

impl Pools {
    /// A pooled link for a new task.
    pub(crate) fn link(&mut self, link: &Arc<dyn Link>) -> u32 {
        self.links.acquire(link)
    }

    /// A pooled region for a new task's memory operand. The region is
    /// pinned while any queued task of this stream uses it (once per
    /// stream, not per task: a pin is an atomic read-modify-write on a
    /// line shared with every other user of the region, and it only has to
    /// say "in use").
    pub(crate) fn mem(&mut self, m: &DeviceMem) -> u32 {
        let region = m.region();
        let s = self.regions.acquire(region);
        if self.regions.slots[s as usize].uses == 1 && !self.recording {
            region.pin();
        }
        s
    }

    /// Pools for a capture: nothing they take is pinned.
    pub(crate) fn recording() -> Pools {
        Pools {
            recording: true,
            ..Pools::default()
        }
    }

    /// Takes `uses` uses of link slot `s` of the recording pools `from`
    /// into these pools (a graph's lane being queued); returns the slot here.
    pub(crate) fn adopt_link(&mut self, from: &Pools, s: u32, uses: usize) -> u32 {
        let (link, _) = from.links.used(s).expect("a recorded link is held");
        self.links.acquire_n(link, uses)
    }

    /// As [`adopt_link`](Self::adopt_link) for a region, pinning it here
    /// if these pools did not use it yet.
    pub(crate) fn adopt_region(&mut self, from: &Pools, s: u32, uses: usize) -> u32 {
        let (region, _) = from.regions.used(s).expect("a recorded region is held");
        let t = self.regions.acquire_n(region, uses);
        if self.regions.slots[t as usize].uses == uses && !self.recording {
            region.pin();
        }
        t
    }

    /// Whether a task of these pools references `m`'s region.
    pub(crate) fn holds_region(&self, m: &DeviceMem) -> bool {
        let key = Arc::as_ptr(m.region()) as usize;
        self.regions
            .index
            .get(&key)
            .is_some_and(|&s| self.regions.slots[s as usize].uses > 0)
    }

    /// How many link and region slots these pools have made.
    pub(crate) fn slot_counts(&self) -> (usize, usize) {
        (self.links.len(), self.regions.len())
    }

    fn view(&self, s: u32, offset: u32, len: u32) -> MemView<'_> {
        MemView {
            region: self.regions.get(s),
            offset: offset as usize,
            len: len as usize,
        }
    }

    fn release_mem(&mut self, s: u32, out: &mut Released) {
        if let Some(r) = self.regions.release(s) {
            r.unpin();
            // only the last reference's drop unmaps: others drop here
            // without a deferred list (and its allocation)
            if Arc::strong_count(&r) > 1 {
                drop(r);
            } else {
                out.regions.push(r);
            }
        }
    }

    /// Releases what `task` holds; tasks that own more than indices go to
    /// `out` whole, to be dropped outside the lock.
    pub(crate) fn retire(&mut self, task: Task, out: &mut Released) {
        match task.op {
            Op::Copy { dst, src, .. } | Op::Reduce { dst, src, .. } => {
                self.release_mem(dst, out);
                self.release_mem(src, out);
            }
            Op::Link {
                link, mem, verb, ..
            } => {
                if verb.has_mem() {
                    self.release_mem(mem, out);
                }
                if let Some(l) = self.links.release(link) {
                    out.links.push(l);
                }
            }
            Op::SharedLink { link, .. } => {
                if let Some(l) = self.links.release(link) {
                    out.links.push(l);
                }
            }
            Op::Record { .. } | Op::Wait { .. } => {}
            // a kernel that drops nothing but pins and reference counts
            // (its resources are kept elsewhere) needs no deferral
            Op::Kernel { kernel, .. } if kernel.cheap_drop() => drop(kernel),
            Op::Callback { .. } | Op::HostFn { .. } | Op::Other { .. } | Op::Kernel { .. } => {
                out.other.push(task)
            }
        }
    }

    /// The link of a link task.
    pub(crate) fn link_of<'a>(&'a self, task: &'a Task) -> Option<&'a Arc<dyn Link>> {
        match &task.op {
            Op::Link { link, .. } | Op::SharedLink { link, .. } => Some(self.links.get(*link)),
            Op::Other { kind, .. } => match &**kind {
                TaskKind::Link { link, .. } => Some(link),
                TaskKind::Kernel(k) => k.waiting_link(),
                _ => None,
            },
            Op::Kernel { kernel, .. } => kernel.waiting_link(),
            _ => None,
        }
    }
}

/// Per-queue progress of the head task (only the head is ever polled, so
/// one copy serves the whole queue instead of one per task).
#[derive(Default)]
pub(crate) struct HeadState {
    pub(crate) link: LinkOpState,
    pub(crate) wait: Option<u64>,
}

impl Task {
    /// Whether this is a host callback (run with the queue lock released).
    pub(crate) fn is_callback(&self) -> bool {
        matches!(self.op, Op::Callback { .. } | Op::HostFn { .. })
    }

    /// Whether this is a kernel.
    pub(crate) fn is_kernel(&self) -> bool {
        matches!(self.op, Op::Kernel { .. })
    }

    /// The kernel, if this is one.
    pub(crate) fn kernel(&self) -> Option<&dyn Kernel> {
        match &self.op {
            Op::Kernel { kernel, .. } => Some(&**kernel),
            _ => None,
        }
    }

    /// The kernel, mutably, if this is one.
    pub(crate) fn kernel_mut(&mut self) -> Option<&mut (dyn Kernel + 'static)> {
        match &mut self.op {
            Op::Kernel { kernel, .. } => Some(&mut **kernel),
            _ => None,
        }
    }

    /// Bytes (reduced, copied) for the device's statistics.
    pub(crate) fn stat_bytes(&self) -> (u64, u64) {
        match &self.op {
            Op::Reduce { len, .. } => (*len as u64, 0),
            Op::Copy { len, .. } => (0, *len as u64),
            Op::Other { kind, .. } => match &**kind {
                TaskKind::Reduce { dst, .. } => (dst.mem().len() as u64, 0),
                TaskKind::Memcpy { dst, .. } => (0, dst.mem().len() as u64),
                // a fused read-reduce out of a peer's buffer reduces too
                TaskKind::Link {
                    op: LinkOp::RxReduce { dst, .. },
                    ..
                } => (dst.mem().len() as u64, 0),
                _ => (0, 0),
            },
            _ => (0, 0),
        }
    }

    /// Advances the task; `head` is its progress between polls. Errors come
    /// back without rank and peer (see [`Task::locate`]).
    pub(crate) fn poll(&mut self, pools: &Pools, head: &mut HeadState) -> Poll<Result<()>> {
        match &mut self.op {
            Op::Copy {
                dst,
                src,
                dst_off,
                src_off,
                len,
                ..
            } => Poll::Ready(copy_view(
                pools.view(*dst, *dst_off, *len),
                pools.view(*src, *src_off, *len),
            )),
            Op::Reduce {
                dst,
                src,
                dtype,
                op,
                dst_off,
                src_off,
                len,
                ..
            } => Poll::Ready(reduce_view(
                pools.view(*dst, *dst_off, *len),
                pools.view(*src, *src_off, *len),
                DataType::of_byte(*dtype),
                ReduceOp::of_byte(*op),
            )),
            Op::Link {
                link,
                mem,
                verb,
                remote_off,
                mem_off,
                len,
                ..
            } => {
                let view = verb.has_mem().then(|| pools.view(*mem, *mem_off, *len));
                let op = verb.materialize(view, *remote_off as usize);
                pools.links.get(*link).poll(&op, &mut head.link)
            }
            Op::Record { notify, .. } => {
                notify.record();
                Poll::Ready(Ok(()))
            }
            Op::Wait { notify, .. } => {
                let s = *head.wait.get_or_insert_with(|| notify.next_wait_seq());
                if notify.is_recorded(s) {
                    Poll::Ready(Ok(()))
                } else {
                    Poll::Pending
                }
            }
            Op::Callback { f, .. } => match f.take() {
                Some(f) => Poll::Ready(f()),
                None => Poll::Ready(Err(HcclError::internal("host callback polled twice"))),
            },
            Op::HostFn { f, .. } => Poll::Ready(f()),
            Op::SharedLink { link, op, .. } => pools.links.get(*link).poll(op, &mut head.link),
            Op::Other { kind, .. } => {
                if let TaskKind::Link { state, .. } = &mut **kind {
                    state.stream = head.link.stream;
                }
                poll_kind(kind)
            }
            Op::Kernel { kernel, .. } => kernel.poll(),
        }
    }

    /// What this task did, for a [`TaskObserver`](super::TaskObserver).
    pub(crate) fn done(&self) -> super::TaskDone {
        use super::TaskDone;
        match &self.op {
            Op::Copy { len, .. } => TaskDone::Copy { bytes: *len as u64 },
            Op::Reduce { len, .. } => TaskDone::Reduce { bytes: *len as u64 },
            Op::Record { notify, .. } => TaskDone::Record {
                notify: notify.id(),
            },
            Op::Wait { notify, .. } => TaskDone::Wait {
                notify: notify.id(),
            },
            Op::Link { .. } | Op::SharedLink { .. } => TaskDone::Link,
            Op::Other { kind, .. } => match &**kind {
                TaskKind::Memcpy { dst, .. } => TaskDone::Copy {
                    bytes: dst.mem().len() as u64,
                },
                TaskKind::Reduce { dst, .. } => TaskDone::Reduce {
                    bytes: dst.mem().len() as u64,
                },
                TaskKind::Link { .. } => TaskDone::Link,
                TaskKind::Kernel(_) => TaskDone::Other,
            },
            Op::Callback { .. } | Op::HostFn { .. } | Op::Kernel { .. } => TaskDone::Other,
        }
    }

    /// Adds the peer (link tasks), the rank and the op tag to an error.
    pub(crate) fn locate(
        &self,
        pools: &Pools,
        label: Option<&OpLabel>,
        mut e: HcclError,
    ) -> HcclError {
        // a peer failed or is gone: say what this rank was doing, as a
        // timeout does (the message names the peer already)
        if e.code() == crate::error::HcclResult::ERemote {
            let algo = label.map_or("(none)", |l| l.algorithm.as_str());
            let note = format!(
                "; rank {} was waiting for {} at step {} of algorithm {algo}",
                label.map_or_else(|| "?".into(), |l| l.rank.to_string()),
                self.describe(pools),
                self.step()
            );
            let ctx = e.context().clone();
            e = HcclError::from_code(e.code(), format!("{}{note}", ctx.message));
            if let Some(r) = ctx.rank {
                e = e.rank(r);
            }
            if let Some(t) = ctx.tag {
                e = e.tag(t);
            }
            if let Some(p) = ctx.peer {
                e = e.peer(p);
            }
        }
        if let Some(link) = pools.link_of(self) {
            e = e.peer(link.remote_rank());
        }
        if let Some(l) = label {
            e = e.rank(l.rank).tag(l.tag.clone());
        }
        e
    }

    /// A short description for logs and errors (as [`TaskKind::describe`]).
    pub(crate) fn describe(&self, pools: &Pools) -> String {
        match &self.op {
            Op::Copy { len, .. } => format!("memcpy of {len} bytes"),
            Op::Reduce { dtype, op, len, .. } => {
                format!(
                    "{} reduce of {len} bytes of {}",
                    ReduceOp::of_byte(*op),
                    DataType::of_byte(*dtype)
                )
            }
            Op::Link { link, verb, .. } => {
                let link = pools.links.get(*link);
                format!(
                    "{} with peer rank {} over the {} link",
                    verb.name(),
                    link.remote_rank(),
                    link.transport()
                )
            }
            Op::SharedLink { link, op, .. } => {
                let link = pools.links.get(*link);
                format!(
                    "{} with peer rank {} over the {} link",
                    op.verb(),
                    link.remote_rank(),
                    link.transport()
                )
            }
            Op::Record { .. } => "notify record".into(),
            Op::Wait { .. } => "notify wait".into(),
            Op::Callback { .. } | Op::HostFn { .. } => "host callback".into(),
            Op::Other { kind, .. } => kind.describe(),
            Op::Kernel { kernel, .. } => kernel.describe(),
        }
    }

    /// The link verb's name, for link tasks.
    pub(crate) fn verb(&self) -> Option<&'static str> {
        match &self.op {
            Op::Link { verb, .. } => Some(verb.name()),
            Op::SharedLink { op, .. } => Some(op.verb()),
            Op::Other { kind, .. } => match &**kind {
                TaskKind::Link { op, .. } => Some(op.verb()),
                _ => None,
            },
            _ => None,
        }
    }
}

/// Polls a task kept in its public form.
fn poll_kind(kind: &mut TaskKind) -> Poll<Result<()>> {
    match kind {
        TaskKind::Memcpy { dst, src } => Poll::Ready(copy_mem(dst.mem(), src.mem())),
        TaskKind::Reduce {
            dst,
            src,
            dtype,
            op,
        } => Poll::Ready(reduce_mem(dst.mem(), src.mem(), *dtype, *op)),
        TaskKind::Link { link, op, state } => link.poll(op, state),
        TaskKind::Kernel(k) => k.poll(),
    }
}

impl TaskKind {
    /// The compact form of this task where one exists (pooling its link and
    /// regions), else the task itself.
    pub(crate) fn into_op(self, pools: &mut Pools) -> Op {
        match self {
            TaskKind::Memcpy { dst, src } => copy_op(pools, dst.mem(), src.mem()),
            TaskKind::Reduce {
                dst,
                src,
                dtype,
                op,
            } => reduce_op(pools, dst.mem(), src.mem(), dtype, op),
            TaskKind::Kernel(kernel) => Op::Kernel { kernel, step: 0 },
            TaskKind::Link { link, op, state } if state.seq.is_none() && state.progress == 0 => {
                let Some((verb, m, remote_off)) = Verb::of(&op) else {
                    return Op::Other {
                        kind: Box::new(TaskKind::Link { link, op, state }),
                        step: 0,
                    };
                };
                link_op(pools, &link, verb, m.map(PinnedMem::mem), remote_off)
            }
            kind => Op::Other {
                kind: Box::new(kind),
                step: 0,
            },
        }
    }
}

/// `x` as a compact task's offset or length, if it fits.
fn small(x: usize) -> Option<u32> {
    u32::try_from(x).ok()
}

/// A copy task (lengths already checked equal by the public callers; a
/// mismatch keeps the public form, which reports it when run).
pub(crate) fn copy_op(pools: &mut Pools, dst: &DeviceMem, src: &DeviceMem) -> Op {
    match (small(dst.offset()), small(src.offset()), small(dst.len())) {
        (Some(dst_off), Some(src_off), Some(len)) if dst.len() == src.len() => Op::Copy {
            dst: pools.mem(dst),
            src: pools.mem(src),
            dst_off,
            src_off,
            len,
            step: 0,
        },
        _ => Op::Other {
            kind: Box::new(TaskKind::Memcpy {
                dst: dst.pin(),
                src: src.pin(),
            }),
            step: 0,
        },
    }
}

/// A reduce task (see [`copy_op`]).
pub(crate) fn reduce_op(
    pools: &mut Pools,
    dst: &DeviceMem,
    src: &DeviceMem,
    dtype: DataType,
    op: ReduceOp,
) -> Op {
    match (small(dst.offset()), small(src.offset()), small(dst.len())) {
        (Some(dst_off), Some(src_off), Some(len)) if dst.len() == src.len() => Op::Reduce {
            dst: pools.mem(dst),
            src: pools.mem(src),
            dtype: dtype.code() as u8,
            op: op.code() as u8,
            dst_off,
            src_off,
            len,
            step: 0,
        },
        _ => Op::Other {
            kind: Box::new(TaskKind::Reduce {
                dst: dst.pin(),
                src: src.pin(),
                dtype,
                op,
            }),
            step: 0,
        },
    }
}

/// A link task: `verb` on `link`, with local memory `mem` and the peer's
/// offset `remote_off` for transfer verbs.
pub(crate) fn link_op(
    pools: &mut Pools,
    link: &Arc<dyn Link>,
    verb: Verb,
    mem: Option<&DeviceMem>,
    remote_off: usize,
) -> Op {
    let fits = match mem {
        Some(m) => (small(m.offset()), small(m.len()), small(remote_off)),
        None => (Some(0), Some(0), Some(0)),
    };
    let (Some(mem_off), Some(len), Some(remote_off_small)) = fits else {
        return Op::Other {
            kind: Box::new(TaskKind::Link {
                link: link.clone(),
                op: verb.to_link_op(mem, remote_off),
                state: LinkOpState::default(),
            }),
            step: 0,
        };
    };
    Op::Link {
        link: pools.link(link),
        mem: mem.map_or(0, |m| pools.mem(m)),
        verb,
        remote_off: remote_off_small,
        mem_off,
        len,
        step: 0,
    }
}

#[cfg(test)]
mod size_tests {
    use super::*;

    /// The simulator queues millions of tasks before any runs (a 1,024-rank
    /// ring AllReduce: 12.7 M); their size is most of its memory traffic.
    #[test]
    fn a_task_stays_small() {
        assert!(
            std::mem::size_of::<Task>() <= 32,
            "Task grew to {} bytes",
            std::mem::size_of::<Task>()
        );
    }
}

//! Streams: ordered, asynchronous task queues.
//!
//! Enqueueing returns at once; tasks run later, in order, driven by the
//! stream's [`Device`] (see `device.rs` for who drives). [`Stream::synchronize`]
//! waits until everything enqueued so far has run and returns the first task
//! error, if any. After an error the stream's remaining queued tasks are
//! discarded (they belong to the failed op or depend on it).
//!
//! The hand-off between an enqueuer and a device's worker driver (the
//! queue lock and counts here, the wake in `Stream::push`, the worker's
//! look–register–look turn in `device.rs`) has a loom model,
//! `loom_tests.rs`: the production [`Stream`] on a worker-mode device
//! whose worker runs the production turn in a loom thread and parks with
//! no deadline. It checks that every task runs once, in order, and that
//! the worker never sleeps with a task queued (a lost wake-up is a
//! deadlock loom reports); 2 tasks, bounded to 5 preemptions (under a
//! second). Two deliberate bugs make it fail (`sync/mutation.rs`): an
//! enqueue that does not wake the worker (`StreamSkipWake`) and a worker
//! that parks without its second look (`StreamNoRecheck`). Run it with
//! the other models: `RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom
//! cargo test -p hccl-platform --release --lib loom_tests`.

mod device;
mod graph;
mod kernel;
mod observer;
mod task;
mod timeline;
mod verbs;

pub use device::{
    BlockedTask, Device, DeviceConfig, DeviceStats, ExecMode, FailureHook, QuietWaits,
};
pub use graph::{CaptureDeferred, CaptureMode, CaptureStatus, Graph};
pub use kernel::{Kernel, Settle};
pub(crate) use kernel::{Launch, Relaunch};
pub use observer::{TaskDone, TaskObserver};
pub use task::{HostCallback, HostFn, OpLabel};
pub(crate) use task::{Task, TaskKind};
use timeline::TaskEvent;
pub use timeline::{OpArgs, Timeline, DEFAULT_TIMELINE_EVENTS};

use task::{HeadState, Op, Pools, Released};

use crate::dtype::{DataType, ReduceOp};
use crate::error::{HcclError, Result};
use crate::mem::DeviceMem;
use crate::notify::Notify;
use crate::sync::mutation::{self, Mutation};
use crate::sync::process;
use crate::sync::{Arc, AtomicBool, AtomicU64, AtomicUsize, Mutex, MutexGuard, Ordering};
use std::collections::VecDeque;
use std::task::Poll;
use std::time::{Duration, Instant};

pub(crate) struct StreamInner {
    id: u64,
    queue: Mutex<Queue>,
    enqueued: AtomicU64,
    completed: AtomicU64,
    error: Mutex<Option<HcclError>>,
    /// The `completed` count when the stream failed (`u64::MAX`: it has
    /// not): tasks up to it completed, the one after it failed, the rest
    /// were discarded (see [`StreamProgress`]).
    failed_at: AtomicU64,
    /// Whether `error` may hold an error: `synchronize` reads this flag
    /// instead of locking the mutex on every call.
    has_error: AtomicBool,
    /// The address of the queue's label while its step is 0, else 0:
    /// `set_label_to` with the label already in place (an op repeated on
    /// a stream) returns without taking the queue lock. Written only
    /// under the queue lock; the label it names is kept alive by the queue.
    label_at_step0: AtomicUsize,
    /// What the kernel groups that ran here leave to settle before a
    /// synchronize returns, by group (see [`Settle`]).
    settlers: Mutex<Vec<(usize, Arc<dyn Settle>)>>,
    /// The group registered last in `settlers` (0: none yet): a launch
    /// of the same group registers nothing, without locking.
    settler_hint: AtomicUsize,
    /// Whether `Queue::capture` is set (see `graph.rs`): read without the
    /// lock on paths that take none (a kernel launch, synchronize).
    capturing: AtomicBool,
}

/// A stream's queued tasks and the label new tasks get: one lock covers
/// both, so an enqueue takes a single lock.
struct Queue {
    tasks: VecDeque<Task>,
    /// Links and regions the queued tasks reference (see [`task::Pools`]).
    pools: Pools,
    /// The label of the queued tasks, as runs: `(sequence number of the
    /// run's first task, label)`, oldest first. Labels change once per op,
    /// so a run per label change replaces a reference count per task.
    labels: VecDeque<(u64, Option<Arc<OpLabel>>)>,
    /// Sequence number of the head task (tasks ever popped).
    head_seq: u64,
    /// Progress of the head task between polls.
    head: HeadState,
    label: Option<Arc<OpLabel>>,
    step: u32,
    /// Since when the head task has been waiting (only the head can wait,
    /// so one field serves the queue instead of one per task).
    head_since: Option<Instant>,
    /// When the head task was first polled, while a timeline is on
    /// (see `timeline.rs`).
    head_began: Option<crate::clock::Stamp>,
    /// How many tasks right behind the head are kernels already started
    /// ahead (so a waiting head's every poll does not walk them again).
    started_ahead: usize,
    /// How many tasks right behind the head are kernels whose input no
    /// kernel in front of them writes, all of the head's group (checked
    /// once: tasks in front of a queued one only ever leave). Kernels
    /// past `started_ahead` but within this wait only for the boards.
    ahead_clear: usize,
    /// A range covering what the head and those `ahead_clear` kernels
    /// write (`None`: unknown), so the next kernel is checked against all
    /// of them at once.
    ahead_written: Option<std::ops::Range<usize>>,
    /// The capture this stream records into, if any (see `graph.rs`):
    /// tasks enqueued meanwhile are recorded there instead of queued.
    capture: Option<graph::CaptureSlot>,
}

fn same_label(a: &Option<Arc<OpLabel>>, b: &Option<Arc<OpLabel>>) -> bool {
    match (a, b) {
        (Some(a), Some(b)) => Arc::ptr_eq(a, b),
        (None, None) => true,
        _ => false,
    }
}

impl Queue {
    fn push(&mut self, op: Op) {
        let seq = self.head_seq + self.tasks.len() as u64;
        if !self
            .labels
            .back()
            .is_some_and(|(_, l)| same_label(l, &self.label))
        {
            self.labels.push_back((seq, self.label.clone()));
        }
        self.tasks.push_back(Task::new(op, self.step));
    }

    /// Lets the kernels queued behind a started kernel head start ahead
    /// of their turn (see [`kernel`]), in queue order, as far as the
    /// kernels allow and no earlier queued kernel writes their input or
    /// belongs to another group.
    fn start_ahead(&mut self) {
        let Some(head) = self.tasks.front().and_then(Task::kernel) else {
            return;
        };
        if head.unstarted_input().is_some() {
            return;
        }
        let (head_group, head_written) = (head.group(), head.written());
        let limit = self.tasks.len().min(head.ahead_limit());
        for i in 1 + self.started_ahead..limit {
            let Some(k) = self.tasks[i].kernel() else {
                return;
            };
            if let Some(input) = k.unstarted_input() {
                if i > self.ahead_clear {
                    // every task in front of `i` is the head or one of
                    // the `ahead_clear` kernels behind it
                    if self.ahead_clear == 0 {
                        self.ahead_written = head_written.clone();
                    }
                    let group = k.group();
                    let at = input.ptr() as usize;
                    let reads = at..at + input.len();
                    let apart = |w: &std::ops::Range<usize>| {
                        reads.is_empty() || reads.end <= w.start || w.end <= reads.start
                    };
                    let quick = group.is_some()
                        && group == head_group
                        && self.ahead_written.as_ref().is_some_and(apart);
                    let clash = !quick
                        && (group.is_none()
                            || self.tasks.iter().take(i).any(|t| {
                                t.kernel()
                                    .is_none_or(|e| e.group() != group || e.writes(input))
                            }));
                    if clash {
                        return;
                    }
                    let mine = k.written();
                    self.ahead_written = match (self.ahead_written.take(), mine) {
                        (Some(a), Some(b)) if b.is_empty() => Some(a),
                        (Some(a), Some(b)) if a.is_empty() => Some(b),
                        (Some(a), Some(b)) => Some(a.start.min(b.start)..a.end.max(b.end)),
                        _ => None,
                    };
                    self.ahead_clear = i;
                }
                if !self.tasks[i].kernel_mut().is_some_and(|k| k.start_ahead()) {
                    return;
                }
            }
            self.started_ahead = i;
        }
    }

    /// The head task's label.
    fn head_label(&self) -> Option<&OpLabel> {
        self.labels.front().and_then(|(_, l)| l.as_deref())
    }

    /// The timeline event of the head task, which just completed (or
    /// failed); it began when first polled.
    fn head_event(&self, stream: u64, failed: bool) -> TaskEvent {
        let head = self.tasks.front().expect("head exists");
        let label = self.labels.front().and_then(|(_, l)| l.as_ref());
        let began = self.head_began.unwrap_or_else(crate::clock::stamp);
        let mut ev = TaskEvent::of(stream, self.head_seq, head, &self.pools, label, began);
        ev.failed = failed;
        ev
    }

    /// Removes the head task (its resources go to `out`) and forgets its
    /// progress; returns whether there was one.
    fn pop(&mut self, out: &mut Released) -> bool {
        match self.pop_task() {
            Some(t) => {
                self.pools.retire(t, out);
                true
            }
            None => false,
        }
    }

    /// Removes the head task without releasing what it holds (the caller
    /// retires it).
    fn pop_task(&mut self) -> Option<Task> {
        let t = self.tasks.pop_front()?;
        self.head_seq += 1;
        self.started_ahead = self.started_ahead.saturating_sub(1);
        self.ahead_clear = self.ahead_clear.saturating_sub(1);
        self.head = HeadState::default();
        self.head_since = None;
        self.head_began = None;
        if self.tasks.is_empty() {
            self.labels.clear();
        } else {
            while self.labels.len() > 1 && self.labels[1].0 <= self.head_seq {
                self.labels.pop_front();
            }
        }
        Some(t)
    }

    /// Removes the tasks from index `keep` on (the newest ones).
    fn truncate(&mut self, keep: usize, out: &mut Released) {
        while self.tasks.len() > keep {
            let t = self.tasks.pop_back().expect("longer than keep");
            self.pools.retire(t, out);
        }
        let tail = self.head_seq + keep as u64;
        while self.labels.back().is_some_and(|(s, _)| *s >= tail) {
            self.labels.pop_back();
        }
        self.started_ahead = self.started_ahead.min(keep.saturating_sub(1));
        self.ahead_clear = self.ahead_clear.min(keep.saturating_sub(1));
        if keep == 0 {
            self.head = HeadState::default();
            self.head_since = None;
        }
    }

    /// Polls the head task in place. `None` if the queue is empty.
    fn poll_head(&mut self) -> Option<Poll<Result<()>>> {
        let Queue {
            tasks,
            pools,
            head,
            labels,
            ..
        } = self;
        let task = tasks.front_mut()?;
        Some(match task.poll(pools, head) {
            Poll::Ready(Err(e)) => {
                let label = labels.front().and_then(|(_, l)| l.as_deref());
                Poll::Ready(Err(task.locate(pools, label, e)))
            }
            other => other,
        })
    }
}

impl Drop for Queue {
    fn drop(&mut self) {
        // unpin the regions of tasks that will never run
        let mut out = Released::default();
        self.truncate(0, &mut out);
    }
}

/// `d` as a wait reads best: `2.0s`, or `300ms` under a second (a
/// communicator's exec timeout may be set in milliseconds).
fn seconds_or_ms(d: Duration) -> String {
    if d >= Duration::from_secs(1) {
        format!("{:.1}s", d.as_secs_f64())
    } else {
        format!("{}ms", d.as_millis())
    }
}

/// Most tasks a stream's queue reserves room for at once when a kernel
/// launch queues (see `Stream::launch`): the launch back-pressure bound
/// of the smallest kernels (twice the AIV window) with room to spare.
const MAX_RESERVED_TASKS: usize = 4096;

static NEXT_STREAM: process::AtomicU64 = process::AtomicU64::new(1);

impl StreamInner {
    /// Records the queue's label and step for `set_label_to`'s lock-free
    /// check; called under the queue lock after every change of either.
    fn note_label(&self, q: &Queue) {
        let at = match &q.label {
            Some(l) if q.step == 0 => Arc::as_ptr(l) as usize,
            _ => 0,
        };
        self.label_at_step0.store(at, Ordering::Relaxed);
    }

    fn lock_queue(&self) -> MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Counts `n` more completed tasks. Only the device's driver completes
    /// tasks (it holds the driver lock), so a load and a release store do.
    fn complete(&self, n: u64) {
        let c = self.completed.load(Ordering::Relaxed);
        self.completed.store(c + n, Ordering::Release);
    }

    #[inline]
    pub(crate) fn is_idle(&self) -> bool {
        self.outstanding() == 0
    }

    /// Tasks enqueued and not yet completed.
    pub(crate) fn outstanding(&self) -> u64 {
        let done = self.completed.load(Ordering::Acquire);
        self.enqueued.load(Ordering::Acquire).saturating_sub(done)
    }

    /// Queues `op` on the locked queue `q` (this stream's) and counts it
    /// enqueued, under the same lock so a synchronizer never waits for a
    /// count that no queued task will complete.
    fn push_locked(&self, q: &mut Queue, op: Op, dev: &device::DeviceInner) {
        q.push(op);
        self.count_enqueued(1, dev);
    }

    /// Counts `n` more tasks enqueued on this stream of `dev`; called under
    /// the queue lock, after queueing them.
    fn count_enqueued(&self, n: u64, dev: &device::DeviceInner) {
        if n > 0 {
            let early = mutation::active(Mutation::StreamBitEarly);
            if early {
                dev.active.fetch_or(self.active_bit(), Ordering::Release);
            }
            // only written under the queue lock: a load and a store do
            let c = self.enqueued.load(Ordering::Relaxed);
            self.enqueued.store(c + n, Ordering::Release);
            // after the count: a driver that takes the bit sees the task
            if !early {
                dev.active.fetch_or(self.active_bit(), Ordering::Release);
            }
        }
    }

    /// The stream's bit in its device's set of busy streams
    /// (`DeviceInner::active`).
    pub(crate) fn active_bit(&self) -> u64 {
        1 << (self.id % 64)
    }

    /// Runs tasks from the head until one must wait. Returns whether any ran.
    ///
    /// Tasks are polled in place under the queue lock (one lock per run of
    /// tasks rather than two per poll); host callbacks are the exception —
    /// they may enqueue on this very stream — and run with the lock released.
    #[inline]
    pub(crate) fn run_ready(&self, dev: &device::DeviceInner) -> bool {
        self.run_ready_while(dev, |_| true)
    }

    /// Like [`run_ready`](Self::run_ready), stopping at the first head task
    /// `runnable` refuses.
    #[inline]
    pub(crate) fn run_ready_while(
        &self,
        dev: &device::DeviceInner,
        runnable: impl Fn(&Task) -> bool,
    ) -> bool {
        // an idle stream costs two loads in the driver's loop, not a call,
        // a lock and a run's set-up: a multi-channel plan keeps dozens of
        // streams a device, most idle for a small op (an enqueue after
        // this look wakes the driver)
        !self.is_idle() && self.run_queue_while(dev, runnable)
    }

    /// The body of [`run_ready_while`](Self::run_ready_while), for a stream
    /// with tasks outstanding.
    fn run_queue_while(&self, dev: &device::DeviceInner, runnable: impl Fn(&Task) -> bool) -> bool {
        let mut done = 0u64;
        let mut bytes = (0u64, 0u64);
        let mut released = Released::default();
        // a timeline, if on: the events of this run go to it in one batch
        let timeline = dev.timeline.get();
        let observer = dev.observer.get();
        let mut traced: Vec<TaskEvent> = Vec::new();
        let mut q = self.lock_queue();
        let failure = loop {
            let Some(head) = q.tasks.front() else {
                break None;
            };
            if !runnable(head) {
                break None;
            }
            if head.is_callback() {
                let label = q.head_label().cloned();
                let index = q.head_seq;
                let traced_label = timeline.as_ref().map(|_| {
                    let l = q.labels.front().and_then(|(_, l)| l.clone());
                    (l, crate::clock::stamp())
                });
                let mut task = q.pop_task().expect("head exists");
                drop(q);
                let r = task.poll(&Pools::default(), &mut HeadState::default());
                if let Some((label, began)) = traced_label {
                    let pools = Pools::default();
                    let mut ev =
                        TaskEvent::of(self.id, index, &task, &pools, label.as_ref(), began);
                    ev.failed = matches!(r, Poll::Ready(Err(_)));
                    traced.push(ev);
                }
                drop(task);
                q = self.lock_queue();
                match r {
                    Poll::Ready(Ok(())) | Poll::Pending => {
                        // a callback runs once: Pending cannot happen
                        done += 1;
                        continue;
                    }
                    Poll::Ready(Err(e)) => {
                        let e = match label {
                            Some(l) => e.rank(l.rank).tag(l.tag),
                            None => e,
                        };
                        break Some((None, e, true));
                    }
                }
            }
            if timeline.is_some() && q.head_began.is_none() {
                q.head_began = Some(crate::clock::stamp());
            }
            q.head.link.stream = self.id;
            match q.poll_head().expect("head exists") {
                Poll::Ready(Ok(())) => {
                    if let Some(o) = observer {
                        o.task_done(self.id, q.tasks.front().expect("head exists").done());
                    }
                    let (r, m) = q.tasks.front().expect("head exists").stat_bytes();
                    bytes.0 += r;
                    bytes.1 += m;
                    if timeline.is_some() {
                        traced.push(q.head_event(self.id, false));
                    }
                    q.pop(&mut released);
                    done += 1;
                }
                Poll::Ready(Err(e)) => {
                    let head = q.tasks.front().expect("head exists");
                    let relay = head.kernel().is_none_or(|k| k.relays_failure(&e));
                    let link = q.pools.link_of(head).cloned();
                    if timeline.is_some() {
                        traced.push(q.head_event(self.id, true));
                    }
                    q.pop(&mut released);
                    break Some((link, e, relay));
                }
                Poll::Pending => {
                    // the clock is read only when a timeout can use it (the
                    // plan simulator runs without one, millions of times)
                    if q.head_since.is_none() && dev.exec_timeout().is_some() {
                        q.head_since = Some(Instant::now());
                    }
                    if q.tasks.len() > 1 && q.tasks.front().is_some_and(Task::is_kernel) {
                        q.start_ahead();
                    }
                    break None;
                }
            }
        };
        drop(q);
        if let Some(tl) = &timeline {
            tl.push(&mut traced);
        }
        if !released.is_empty() {
            drop(released);
        }
        if done > 0 {
            dev.stats.record(done, bytes.0, bytes.1);
            self.complete(done);
        }
        if let Some((link, e, relay)) = failure {
            tracing::error!(error = %e, "stream task failed; discarding the stream's queued tasks");
            if relay {
                if let Some(link) = link {
                    link.abort(&e.to_string());
                }
                dev.abort_links(&e.to_string());
            }
            self.fail(e, dev);
            return true;
        }
        done > 0
    }

    /// Fails the stream with `e` (the first error is kept), discards its
    /// queued tasks, and tells `dev`'s failure hooks.
    fn fail(&self, e: HcclError, dev: &device::DeviceInner) {
        {
            let mut err = self.error.lock().unwrap_or_else(|p| p.into_inner());
            if err.is_none() {
                *err = Some(e.clone());
                let done = self.completed.load(Ordering::Acquire);
                self.failed_at.store(done, Ordering::Release);
            }
            self.has_error.store(true, Ordering::Release);
        }
        dev.stream_failed(self.id, &e);
        let mut dropped = Released::default();
        let n = {
            let mut q = self.lock_queue();
            let n = q.tasks.len() as u64;
            q.truncate(0, &mut dropped);
            n
        } + 1;
        drop(dropped);
        self.complete(n);
    }

    /// The head task, if it has started waiting.
    pub(crate) fn blocked_head(&self) -> Option<BlockedTask> {
        let q = self.lock_queue();
        let head = q.tasks.front()?;
        Some(BlockedTask {
            stream: self.id,
            what: head.describe(&q.pools),
            verb: head.verb(),
            peer: q.pools.link_of(head).map(|l| l.remote_rank()),
            step: head.step(),
            label: q.head_label().cloned(),
            queued: q.tasks.len(),
        })
    }

    /// Fails the head task if it has waited past `timeout`. Returns the head's
    /// deadline if it is waiting, `Err` if it was failed.
    pub(crate) fn check_timeout(
        &self,
        dev: &device::DeviceInner,
        now: Instant,
        timeout: Option<Duration>,
    ) -> std::result::Result<Option<Instant>, ()> {
        let Some(timeout) = timeout else {
            return Ok(None);
        };
        let mut q = self.lock_queue();
        let Some(head) = q.tasks.front() else {
            return Ok(None);
        };
        let Some(since) = q.head_since else {
            return Ok(None);
        };
        let deadline = since + timeout;
        if now < deadline {
            return Ok(Some(deadline));
        }
        let waited = now - since;
        let label = q.head_label();
        let (algo, what) = (
            label.map_or("(none)", |l| l.algorithm.as_str()),
            head.describe(&q.pools),
        );
        let e = HcclError::timeout(format!(
            "waited {} (HCCL_EXEC_TIMEOUT) for {what} at step {} of algorithm {algo}; \
             the peer may have issued a different op, be slow, or be gone",
            seconds_or_ms(waited),
            head.step()
        ));
        let e = head.locate(&q.pools, label, e);
        let link = q.pools.link_of(head).cloned();
        let mut released = Released::default();
        q.pop(&mut released);
        drop(q);
        drop(released);
        tracing::error!(error = %e, "task timed out");
        if let Some(link) = link {
            link.abort(&e.to_string());
        }
        dev.abort_links(&e.to_string());
        self.fail(e, dev);
        Err(())
    }
}

/// How far a stream got (see [`Stream::progress`]). Counts are of tasks
/// since the stream was made; an op's tasks are those enqueued between two
/// [`Stream::mark`]s.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StreamProgress {
    /// Tasks enqueued.
    pub enqueued: u64,
    /// Tasks completed (a failure counts the failed and discarded tasks
    /// as completed too: see `failed_at`).
    pub completed: u64,
    /// `completed` when the stream failed: the task after it failed, the
    /// later ones were discarded.
    pub failed_at: Option<u64>,
}

/// A position in a stream's queue (see [`Stream::mark`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EnqueueMark(u64);

/// An ordered task queue on a [`Device`]. Cloning gives another handle to the
/// same stream.
#[derive(Clone)]
pub struct Stream {
    inner: Arc<StreamInner>,
    device: Device,
}

impl std::fmt::Debug for Stream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stream")
            .field("id", &self.inner.id)
            .field("device", &self.device.id())
            .finish()
    }
}

impl Stream {
    /// A new, empty stream on `device`.
    pub fn new(device: &Device) -> Stream {
        let inner = Arc::new(StreamInner {
            id: NEXT_STREAM.fetch_add(1, Ordering::Relaxed),
            queue: Mutex::new(Queue {
                tasks: VecDeque::with_capacity(64),
                pools: Pools::default(),
                labels: VecDeque::new(),
                head_seq: 0,
                head: HeadState::default(),
                label: None,
                step: 0,
                head_since: None,
                head_began: None,
                started_ahead: 0,
                ahead_clear: 0,
                ahead_written: None,
                capture: None,
            }),
            enqueued: AtomicU64::new(0),
            completed: AtomicU64::new(0),
            error: Mutex::new(None),
            failed_at: AtomicU64::new(u64::MAX),
            has_error: AtomicBool::new(false),
            label_at_step0: AtomicUsize::new(0),
            settlers: Mutex::new(Vec::new()),
            settler_hint: AtomicUsize::new(0),
            capturing: AtomicBool::new(false),
        });
        device.register(&inner);
        Stream {
            inner,
            device: device.clone(),
        }
    }

    /// The device this stream belongs to.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// A process-unique stream id.
    pub fn id(&self) -> u64 {
        self.inner.id
    }

    /// Labels the tasks enqueued from now on with `label` (op tag, algorithm,
    /// rank), for errors and timeouts.
    pub fn set_label(&self, label: Option<Arc<OpLabel>>) {
        let mut q = self.inner.lock_queue();
        q.label = label;
        q.step = 0;
        self.inner.note_label(&q);
    }

    /// Like [`set_label`](Self::set_label) with `Some(label)`, without
    /// touching the label's reference count when it is already set, nor
    /// the queue lock when the step is still 0 (an op repeated on a
    /// stream: the per-op path of small ops).
    pub fn set_label_to(&self, label: &Arc<OpLabel>) {
        // Relaxed: only the thread enqueueing on this stream sets labels;
        // a stale read can only take the lock below.
        if self.inner.label_at_step0.load(Ordering::Relaxed) == Arc::as_ptr(label) as usize {
            return;
        }
        let mut q = self.inner.lock_queue();
        if !q.label.as_ref().is_some_and(|l| Arc::ptr_eq(l, label)) {
            q.label = Some(label.clone());
        }
        q.step = 0;
        self.inner.note_label(&q);
    }

    /// Sets the algorithm step of tasks enqueued from now on.
    pub fn set_step(&self, step: u32) {
        let mut q = self.inner.lock_queue();
        q.step = step;
        self.inner.note_label(&q);
    }

    /// Enqueues a task. Returns at once.
    pub(crate) fn enqueue(&self, kind: TaskKind) -> Result<()> {
        self.push(|pools| kind.into_op(pools))
    }

    /// Enqueues the task `make` builds with the queue's pools (or, while
    /// the stream is capturing, records it: see `graph.rs`).
    pub(crate) fn push(&self, make: impl FnOnce(&mut Pools) -> Op) -> Result<()> {
        // work a capture held back goes before this task
        self.flush_capture_deferred()?;
        // enqueued is bumped under the queue lock so a synchronizer never
        // waits for a count that no queued task will complete.
        {
            let mut q = self.inner.lock_queue();
            if let Some(slot) = q.capture.clone() {
                return self.record(&q, &slot, make);
            }
            let op = make(&mut q.pools);
            self.inner.push_locked(&mut q, op, &self.device.0);
        }
        if self.device.0.config.mode == ExecMode::Worker
            && !mutation::active(Mutation::StreamSkipWake)
        {
            self.device.0.events.notify();
        }
        Ok(())
    }

    /// How far the stream got: tasks enqueued and completed so far, and
    /// where it failed, if it did (what a flight recorder turns into op
    /// states without a task of its own per op).
    pub fn progress(&self) -> StreamProgress {
        let failed_at = self.inner.failed_at.load(Ordering::Acquire);
        StreamProgress {
            enqueued: self.inner.enqueued.load(Ordering::Acquire),
            completed: self.inner.completed.load(Ordering::Acquire),
            failed_at: (failed_at != u64::MAX).then_some(failed_at),
        }
    }

    /// The current end of the queue, for [`Stream::rollback`].
    pub fn mark(&self) -> EnqueueMark {
        EnqueueMark(self.inner.enqueued.load(Ordering::Acquire))
    }

    /// Removes every task enqueued after `mark` that has not started, so a
    /// call that fails half-way leaves nothing behind. Returns `true` if all
    /// of them were removed. If some had already started (a worker thread
    /// was driving the stream), the stream is failed with `reason` instead,
    /// so the next `synchronize` reports it.
    ///
    /// While the stream is capturing, the half-recorded call invalidates
    /// the capture instead (its tasks were recorded, not queued).
    pub fn rollback(&self, mark: EnqueueMark, reason: &HcclError) -> bool {
        if self.is_capturing() {
            self.invalidate_capture(reason);
        }
        let mut q = self.inner.lock_queue();
        let after = self
            .inner
            .enqueued
            .load(Ordering::Acquire)
            .saturating_sub(mark.0) as usize;
        let removable = after.min(q.tasks.len());
        let keep = q.tasks.len() - removable;
        let mut removed = Released::default();
        q.truncate(keep, &mut removed);
        self.inner
            .enqueued
            .fetch_sub(removable as u64, Ordering::AcqRel);
        drop(q);
        drop(removed);
        if removable < after {
            let mut err = self.inner.error.lock().unwrap_or_else(|p| p.into_inner());
            if err.is_none() {
                *err = Some(reason.clone());
            }
            self.inner.has_error.store(true, Ordering::Release);
            return false;
        }
        true
    }

    /// Enqueues `dst <- src` (equal lengths).
    pub fn memcpy_async(&self, dst: &DeviceMem, src: &DeviceMem) -> Result<()> {
        if dst.len() != src.len() {
            return Err(self.refuse(HcclError::para(format!(
                "memcpy_async: destination of {} bytes, source of {} bytes",
                dst.len(),
                src.len()
            ))));
        }
        self.push(|pools| task::copy_op(pools, dst, src))
    }

    /// Enqueues `dst <- dst op src` over elements of `dtype`.
    pub fn reduce_async(
        &self,
        dst: &DeviceMem,
        src: &DeviceMem,
        dtype: DataType,
        op: ReduceOp,
    ) -> Result<()> {
        if dst.len() != src.len() || dst.len() % dtype.size() != 0 {
            return Err(self.refuse(HcclError::para(format!(
                "reduce_async: destination of {} bytes and source of {} bytes must be equal multiples of {} ({dtype})",
                dst.len(),
                src.len(),
                dtype.size()
            ))));
        }
        if dst.overlaps(src) {
            return Err(self.refuse(HcclError::para(
                "reduce_async: source and destination overlap",
            )));
        }
        self.push(|pools| task::reduce_op(pools, dst, src, dtype, op))
    }

    /// Enqueues a record of `notify`.
    pub fn notify_record(&self, notify: &Notify) -> Result<()> {
        self.push(|_| Op::Record {
            notify: notify.clone(),
            step: 0,
        })
    }

    /// Enqueues a wait for the next record of `notify`.
    pub fn notify_wait(&self, notify: &Notify) -> Result<()> {
        self.push(|_| Op::Wait {
            notify: notify.clone(),
            step: 0,
        })
    }

    /// Launches a kernel: a whole piece of work as one task (see
    /// [`Kernel`]).
    ///
    /// Under the inline driver, when no other thread drives the device
    /// and nothing but kernels is queued ahead of it, the kernel runs in
    /// this call: earlier kernels are completed first (stream order), then
    /// this one is polled (spinning up to [`Launch::spins`] re-polls where
    /// an idle driver would spin too). If it completes, it is never queued
    /// at all; otherwise it is queued as it is (started or not) and
    /// completes at the next launch or synchronize. Nothing but kernels
    /// runs in the caller's thread here, and the launch waits only when
    /// the stream has more than [`Launch::max_outstanding`] tasks
    /// outstanding (back-pressure: it then drives the stream as
    /// synchronize would, with the same timeouts). Elsewhere the kernel is
    /// simply enqueued.
    ///
    /// While the stream is capturing, the kernel is recorded instead (its
    /// [`Launch::capture`] form, launched again by every replay).
    pub(crate) fn launch(&self, mut kernel: impl Launch) -> Result<()> {
        self.flush_capture_deferred()?;
        if self.is_capturing() && self.record_launch(|| kernel.capture())? {
            return Ok(());
        }
        let dev = &self.device.0;
        if dev.config.mode == ExecMode::Inline {
            if let Ok(mut snap) = dev.driver.try_lock() {
                // spin a moment for the peers only where an idle driver
                // would spin too (a core per rank)
                let spins = if dev.spin().is_zero() {
                    0
                } else {
                    kernel.spins()
                };
                let max_outstanding = kernel.max_outstanding();
                // tasks completed off the queue (synchronizers may wait)
                let mut dequeued = false;
                let timeline = dev.timeline.get();
                let began = timeline.as_ref().map(|_| crate::clock::stamp());
                let trace_inline = |q: Option<&Queue>| {
                    if let (Some(tl), Some(began)) = (&timeline, began) {
                        let label = match q {
                            Some(q) => q.label.clone(),
                            None => self.inner.lock_queue().label.clone(),
                        };
                        tl.push_inline(TaskEvent::inline_kernel(
                            self.inner.id,
                            label.as_ref(),
                            began,
                        ));
                    }
                };
                let (mut q, now) = if self.inner.is_idle() {
                    // The common case, a rank that launches after its
                    // peers: nothing queued. Only the driver completes
                    // tasks, and we hold it, so "every enqueued task
                    // completed" means the queue is empty without locking
                    // it (a task another thread pushes meanwhile is
                    // concurrent with this launch and may run after it).
                    let now = kernel.poll_now(spins);
                    if let Poll::Ready(Ok(())) = now {
                        dev.stats.record(1, 0, 0);
                        trace_inline(None);
                        return Ok(());
                    }
                    (self.inner.lock_queue(), now)
                } else {
                    let mut q = self.inner.lock_queue();
                    if !q.tasks.is_empty() {
                        drop(q);
                        dequeued = self.inner.run_ready_while(dev, Task::is_kernel);
                        q = self.inner.lock_queue();
                    }
                    let now = if q.tasks.is_empty() {
                        kernel.poll_now(spins)
                    } else {
                        Poll::Pending
                    };
                    (q, now)
                };
                if let Poll::Ready(Ok(())) = now {
                    trace_inline(Some(&q));
                    drop(q);
                    dev.stats.record(1, 0, 0);
                } else {
                    // Room for every kernel back-pressure lets queue, made
                    // once: the queue then never grows while ops run (its
                    // four doublings from 64 to 1024 tasks each took fresh
                    // pages mid-run, ~40 page faults under load). A kernel
                    // box itself comes from the allocator's per-thread
                    // cache (~10 ns a box and free on this machine, about
                    // as much as copying it into a slot would cost).
                    let room = usize::try_from(max_outstanding).unwrap_or(usize::MAX) + 2;
                    if q.tasks.capacity() < room && room <= MAX_RESERVED_TASKS {
                        let extra = room - q.tasks.len();
                        q.tasks.reserve_exact(extra);
                    }
                    self.queue_kernel(&mut q, kernel.into_kernel());
                    drop(q);
                    if now.is_ready() {
                        dequeued |= self.inner.run_ready_while(dev, Task::is_kernel);
                    }
                    if self.inner.outstanding() > max_outstanding {
                        // Back-pressure: this stream is so far ahead that
                        // its newest kernels cannot even start (they wait
                        // for peers that are behind). Queueing more would
                        // only grow the heap (fresh pages fault, which on
                        // a virtual machine can stall for milliseconds);
                        // drive the stream down to half instead, as
                        // synchronize would (same timeouts).
                        let target = max_outstanding / 2;
                        dev.drive_until(&mut snap, &|| self.inner.outstanding() <= target);
                        dequeued = true;
                    }
                }
                drop(snap);
                if dequeued {
                    dev.done.notify();
                }
                return Ok(());
            }
        }
        self.enqueue(TaskKind::Kernel(kernel.into_kernel()))
    }

    /// Registers what kernels of `group` (a non-zero key) may leave to
    /// settle before a synchronize returns ([`Settle`]); `make` builds it
    /// the first time the group launches on this stream.
    pub(crate) fn settle_at_sync(&self, group: usize, make: impl FnOnce() -> Arc<dyn Settle>) {
        if self.inner.settler_hint.load(Ordering::Relaxed) == group {
            return;
        }
        let mut settlers = self
            .inner
            .settlers
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if !settlers.iter().any(|(g, _)| *g == group) {
            settlers.push((group, make()));
        }
        self.inner.settler_hint.store(group, Ordering::Relaxed);
    }

    /// Queues, behind everything queued, a kernel for each registered
    /// group that has something left to settle.
    fn queue_settles(&self) -> Result<()> {
        let tasks: Vec<Box<dyn Kernel>> = self
            .inner
            .settlers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .filter_map(|(_, s)| s.settle_task())
            .collect();
        for k in tasks {
            self.enqueue(TaskKind::Kernel(k))?;
        }
        Ok(())
    }

    /// Queues `kernel` on the locked queue as it is, started or not (a
    /// kernel that failed at once fails the stream the way any failed task
    /// does, reported at synchronize), and lets the queued kernels behind
    /// the head start ahead.
    fn queue_kernel(&self, q: &mut Queue, kernel: Box<dyn Kernel>) {
        let op = TaskKind::Kernel(kernel).into_op(&mut q.pools);
        self.inner.push_locked(q, op, &self.device.0);
        if q.tasks.len() > 1 {
            q.start_ahead();
        }
    }

    /// Enqueues a host function; an error it returns fails the stream.
    /// It runs once, so a capturing stream refuses it (and the capture is
    /// invalidated): capture [`host_fn`](Self::host_fn)s instead.
    pub fn host_callback(&self, f: impl FnOnce() -> Result<()> + Send + 'static) -> Result<()> {
        self.push(|_| Op::Callback {
            f: Some(Box::new(f)),
            step: 0,
        })
    }

    /// Enqueues a host function that may run any number of times: on a
    /// capturing stream it is recorded and runs on every launch of the
    /// graph. An error it returns fails the stream.
    pub fn host_fn(&self, f: impl Fn() -> Result<()> + Send + Sync + 'static) -> Result<()> {
        let f: HostFn = Arc::new(f);
        self.push(|_| Op::HostFn { f, step: 0 })
    }

    /// Whether everything enqueued so far has run.
    pub fn query(&self) -> bool {
        self.inner.is_idle()
    }

    /// Waits until every task enqueued so far has run; returns the first task
    /// error since the last synchronize (and clears it).
    ///
    /// A capturing stream refuses (`HCCL_E_NOT_SUPPORT`) and its capture is
    /// invalidated: nothing it recorded has run, or will before a launch.
    pub fn synchronize(&self) -> Result<()> {
        self.synchronize_until(None).map(|_| ())
    }

    /// [`synchronize`](Self::synchronize) bounded by `deadline`: `Ok(true)`
    /// once everything enqueued so far has run (the first task error since
    /// the last synchronize, if any, is returned instead and cleared, as
    /// `synchronize` does), `Ok(false)` if `deadline` passed first — the
    /// tasks go on, a later call drives them further. A caller that must
    /// stay responsive (Python's Ctrl-C) waits in slices of this.
    pub fn synchronize_until(&self, deadline: Option<Instant>) -> Result<bool> {
        if self.is_capturing() && self.capture_status() != CaptureStatus::None {
            return Err(self.refuse(HcclError::not_support(format!(
                "stream {} is capturing: its tasks are recorded, not run, so it cannot be                  synchronized before the capture ends (launch the graph, then synchronize)",
                self.id()
            ))));
        }
        if self.inner.settler_hint.load(Ordering::Relaxed) != 0 {
            self.queue_settles()?;
        }
        let target = self.inner.enqueued.load(Ordering::Acquire);
        let reached = || self.inner.completed.load(Ordering::Acquire) >= target;
        let dev = &self.device.0;
        // past the deadline (checked after each drive or wait, so even a
        // deadline already due drives one round)
        let overdue = || deadline.is_some_and(|d| Instant::now() >= d);
        while !reached() {
            if dev.config.mode == ExecMode::Inline {
                if let Ok(mut snap) = dev.driver.try_lock() {
                    dev.drive_until_or(&mut snap, &reached, deadline);
                    drop(snap);
                    dev.done.notify();
                    if !reached() && overdue() {
                        return Ok(false);
                    }
                    continue;
                }
            }
            let waiter = dev.done.prepare_wait();
            if reached() {
                break;
            }
            let slice = Instant::now() + Duration::from_millis(50);
            waiter.wait_until(deadline.map_or(slice, |d| d.min(slice)));
            if !reached() && overdue() {
                return Ok(false);
            }
        }
        if !self.inner.has_error.load(Ordering::Acquire) {
            return Ok(true);
        }
        let mut err = self.inner.error.lock().unwrap_or_else(|p| p.into_inner());
        self.inner.has_error.store(false, Ordering::Release);
        match err.take() {
            Some(e) => Err(e),
            None => Ok(true),
        }
    }
}

#[cfg(test)]
mod graph_tests;
#[cfg(all(test, loom))]
mod loom_tests;
#[cfg(test)]
mod tests;

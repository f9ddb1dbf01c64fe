//! Streams: ordered, asynchronous task queues.
//!
//! Enqueueing returns at once; tasks run later, in order, driven by the
//! stream's [`Device`] (see `device.rs` for who drives). [`Stream::synchronize`]
//! waits until everything enqueued so far has run and returns the first task
//! error, if any. After an error the stream's remaining queued tasks are
//! discarded (they belong to the failed op or depend on it).

mod device;
mod task;

pub use device::{BlockedTask, Device, DeviceConfig, DeviceStats, ExecMode};
pub use task::{HostCallback, OpLabel, Task, TaskKind};

use crate::dtype::{DataType, ReduceOp};
use crate::error::{HcclError, Result};
use crate::mem::DeviceMem;
use crate::notify::Notify;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::Poll;
use std::time::{Duration, Instant};

pub(crate) struct StreamInner {
    id: u64,
    queue: Mutex<Queue>,
    enqueued: AtomicU64,
    completed: AtomicU64,
    error: Mutex<Option<HcclError>>,
    /// The device's count of outstanding tasks (kept equal to the sum of
    /// `enqueued - completed` over its live streams).
    outstanding: Arc<AtomicU64>,
}

/// A stream's queued tasks and the label new tasks get: one lock covers
/// both, so an enqueue takes a single lock.
struct Queue {
    tasks: VecDeque<Task>,
    label: Option<Arc<OpLabel>>,
    step: u32,
    /// Since when the head task has been waiting (only the head can wait,
    /// so one field serves the queue instead of one per task).
    head_since: Option<Instant>,
}

impl std::ops::Deref for Queue {
    type Target = VecDeque<Task>;
    fn deref(&self) -> &VecDeque<Task> {
        &self.tasks
    }
}

impl std::ops::DerefMut for Queue {
    fn deref_mut(&mut self) -> &mut VecDeque<Task> {
        &mut self.tasks
    }
}

impl Drop for StreamInner {
    fn drop(&mut self) {
        // tasks of a dropped stream never run: stop counting them
        let left = self
            .enqueued
            .load(Ordering::Acquire)
            .saturating_sub(self.completed.load(Ordering::Acquire));
        if left > 0 {
            self.outstanding.fetch_sub(left, Ordering::AcqRel);
        }
    }
}

static NEXT_STREAM: AtomicU64 = AtomicU64::new(1);

impl StreamInner {
    fn lock_queue(&self) -> std::sync::MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn is_idle(&self) -> bool {
        self.completed.load(Ordering::Acquire) >= self.enqueued.load(Ordering::Acquire)
    }

    /// Runs tasks from the head until one must wait. Returns whether any ran.
    ///
    /// Tasks are polled in place under the queue lock (one lock per run of
    /// tasks rather than two per poll); host callbacks are the exception —
    /// they may enqueue on this very stream — and run with the lock released.
    pub(crate) fn run_ready(&self, dev: &device::DeviceInner) -> bool {
        let mut done = 0u64;
        let mut q = self.lock_queue();
        let failure = loop {
            let Some(head) = q.front_mut() else {
                break None;
            };
            let r = if matches!(head.kind, TaskKind::Callback(_)) {
                let mut task = q.pop_front().expect("head exists");
                drop(q);
                let r = device::poll_task(&mut task);
                q = self.lock_queue();
                match r {
                    Poll::Ready(Ok(())) => {
                        q.head_since = None;
                        dev.stats.record(&task);
                        done += 1;
                        continue;
                    }
                    Poll::Ready(Err(e)) => break Some((task, e)),
                    Poll::Pending => {
                        q.push_front(task);
                        break None;
                    }
                }
            } else {
                device::poll_task(head)
            };
            match r {
                Poll::Ready(Ok(())) => {
                    let task = q.pop_front().expect("head exists");
                    q.head_since = None;
                    dev.stats.record(&task);
                    drop(task);
                    done += 1;
                }
                Poll::Ready(Err(e)) => break Some((q.pop_front().expect("head exists"), e)),
                Poll::Pending => {
                    // the clock is read only when a timeout can use it (the
                    // plan simulator runs without one, millions of times)
                    if q.head_since.is_none() && dev.config.exec_timeout.is_some() {
                        q.head_since = Some(Instant::now());
                    }
                    break None;
                }
            }
        };
        drop(q);
        if done > 0 {
            self.completed.fetch_add(done, Ordering::AcqRel);
            self.outstanding.fetch_sub(done, Ordering::AcqRel);
        }
        if let Some((task, e)) = failure {
            tracing::error!(error = %e, "stream task failed; discarding the stream's queued tasks");
            task.abort_peer(&e.to_string());
            drop(task);
            dev.abort_links(&e.to_string());
            self.fail(e);
            return true;
        }
        done > 0
    }

    fn fail(&self, e: HcclError) {
        {
            let mut err = self.error.lock().unwrap_or_else(|p| p.into_inner());
            if err.is_none() {
                *err = Some(e);
            }
        }
        let dropped: Vec<Task> = {
            let mut q = self.lock_queue();
            q.head_since = None;
            q.drain(..).collect()
        };
        let n = dropped.len() as u64 + 1;
        drop(dropped);
        self.completed.fetch_add(n, Ordering::AcqRel);
        self.outstanding.fetch_sub(n, Ordering::AcqRel);
    }

    /// The head task, if it has started waiting.
    pub(crate) fn blocked_head(&self) -> Option<BlockedTask> {
        let q = self.lock_queue();
        let head = q.front()?;
        let (verb, peer) = match &head.kind {
            TaskKind::Link { link, op, .. } => (Some(op.verb()), Some(link.remote_rank())),
            _ => (None, None),
        };
        Some(BlockedTask {
            stream: self.id,
            what: head.kind.describe(),
            verb,
            peer,
            step: head.step,
            label: head.label.as_deref().cloned(),
            queued: q.len(),
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
        if q.is_empty() {
            return Ok(None);
        }
        let Some(since) = q.head_since else {
            return Ok(None);
        };
        let deadline = since + timeout;
        if now < deadline {
            return Ok(Some(deadline));
        }
        let task = q.pop_front().expect("head exists");
        q.head_since = None;
        drop(q);
        let e = task.timeout_error(now - since);
        tracing::error!(error = %e, "task timed out");
        task.abort_peer(&e.to_string());
        drop(task);
        dev.abort_links(&e.to_string());
        self.fail(e);
        Err(())
    }
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
                label: None,
                step: 0,
                head_since: None,
            }),
            enqueued: AtomicU64::new(0),
            completed: AtomicU64::new(0),
            error: Mutex::new(None),
            outstanding: device.0.outstanding.clone(),
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
    }

    /// Sets the algorithm step of tasks enqueued from now on.
    pub fn set_step(&self, step: u32) {
        self.inner.lock_queue().step = step;
    }

    /// Enqueues a task. Returns at once.
    pub fn enqueue(&self, kind: TaskKind) -> Result<()> {
        // enqueued is bumped under the queue lock so a synchronizer never
        // waits for a count that no queued task will complete.
        {
            let mut q = self.inner.lock_queue();
            let task = Task {
                kind,
                label: q.label.clone(),
                step: q.step,
            };
            q.push_back(task);
            self.inner.outstanding.fetch_add(1, Ordering::AcqRel);
            self.inner.enqueued.fetch_add(1, Ordering::AcqRel);
        }
        if self.device.0.config.mode == ExecMode::Worker {
            self.device.0.events.notify();
        }
        Ok(())
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
    pub fn rollback(&self, mark: EnqueueMark, reason: &HcclError) -> bool {
        let mut q = self.inner.lock_queue();
        let after = self
            .inner
            .enqueued
            .load(Ordering::Acquire)
            .saturating_sub(mark.0) as usize;
        let removable = after.min(q.len());
        let keep = q.len() - removable;
        let removed: Vec<Task> = q.drain(keep..).collect();
        if keep == 0 {
            q.head_since = None;
        }
        self.inner
            .enqueued
            .fetch_sub(removable as u64, Ordering::AcqRel);
        self.inner
            .outstanding
            .fetch_sub(removable as u64, Ordering::AcqRel);
        drop(q);
        drop(removed);
        if removable < after {
            let mut err = self.inner.error.lock().unwrap_or_else(|p| p.into_inner());
            if err.is_none() {
                *err = Some(reason.clone());
            }
            return false;
        }
        true
    }

    /// Enqueues `dst <- src` (equal lengths).
    pub fn memcpy_async(&self, dst: &DeviceMem, src: &DeviceMem) -> Result<()> {
        if dst.len() != src.len() {
            return Err(HcclError::para(format!(
                "memcpy_async: destination of {} bytes, source of {} bytes",
                dst.len(),
                src.len()
            )));
        }
        self.enqueue(TaskKind::Memcpy {
            dst: dst.pin(),
            src: src.pin(),
        })
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
            return Err(HcclError::para(format!(
                "reduce_async: destination of {} bytes and source of {} bytes must be equal multiples of {} ({dtype})",
                dst.len(),
                src.len(),
                dtype.size()
            )));
        }
        if dst.overlaps(src) {
            return Err(HcclError::para(
                "reduce_async: source and destination overlap",
            ));
        }
        self.enqueue(TaskKind::Reduce {
            dst: dst.pin(),
            src: src.pin(),
            dtype,
            op,
        })
    }

    /// Enqueues a record of `notify`.
    pub fn notify_record(&self, notify: &Notify) -> Result<()> {
        self.enqueue(TaskKind::NotifyRecord(notify.clone()))
    }

    /// Enqueues a wait for the next record of `notify`.
    pub fn notify_wait(&self, notify: &Notify) -> Result<()> {
        self.enqueue(TaskKind::NotifyWait {
            notify: notify.clone(),
            seq: None,
        })
    }

    /// Enqueues a host function; an error it returns fails the stream.
    pub fn host_callback(&self, f: impl FnOnce() -> Result<()> + Send + 'static) -> Result<()> {
        self.enqueue(TaskKind::Callback(Some(Box::new(f))))
    }

    /// Whether everything enqueued so far has run.
    pub fn query(&self) -> bool {
        self.inner.is_idle()
    }

    /// Waits until every task enqueued so far has run; returns the first task
    /// error since the last synchronize (and clears it).
    pub fn synchronize(&self) -> Result<()> {
        let target = self.inner.enqueued.load(Ordering::Acquire);
        let reached = || self.inner.completed.load(Ordering::Acquire) >= target;
        let dev = &self.device.0;
        while !reached() {
            if dev.config.mode == ExecMode::Inline {
                if let Ok(mut snap) = dev.driver.try_lock() {
                    dev.drive_until(&mut snap, &reached);
                    drop(snap);
                    dev.done.notify();
                    continue;
                }
            }
            let key = dev.done.key();
            if reached() {
                break;
            }
            dev.done
                .wait_until(key, Instant::now() + Duration::from_millis(50));
        }
        match self
            .inner
            .error
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
        {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests;

//! Stream capture and replay: [`Graph`] (ACL's `aclmdlRI`, CUDA's graphs).
//!
//! Between [`Stream::begin_capture`] and [`Stream::end_capture`] the tasks
//! enqueued on a stream are not queued but *recorded*: nothing runs, and
//! [`Stream::end_capture`] returns them as a [`Graph`], which
//! [`Graph::launch`] enqueues again, as often as wanted, on the capture
//! stream or another stream of the same device. Collectives issued on a
//! capturing stream are recorded like any task, so a loop of ops becomes a
//! plan replayed without validation, executor selection, descriptor
//! building or per-op allocation.
//!
//! **What is recorded.** Every task kind: copies, reductions and link
//! verbs in their compact form (their links and regions held once each
//! by the capture's own [`Pools`], which pin nothing — the host may
//! rewrite a graph's buffers between launches, and a launch pins them
//! while its tasks are queued, as any enqueue does), notify records and
//! waits, host functions that may run again ([`Stream::host_fn`]; a
//! run-once [`Stream::host_callback`] is refused), the public forms (the
//! descriptor verbs, transfers at offsets past 4 GiB) without their pins,
//! kernels that can copy themselves for a replay ([`Kernel::replay`]), and
//! kernels launched through `Stream::launch` (the AIV kernels) as a
//! [`Relaunch`], which a replay launches again through the same inline
//! path, so a kernel that completes at once is never boxed. Each task
//! keeps its algorithm step and op label.
//!
//! **Lanes.** An executor may issue part of an op on slave streams, ordered
//! with the op's stream by notifies. Such a stream *joins* the capture
//! ([`Stream::join_capture`], done by the framework around an op's
//! orchestration) and records into a lane of its own; a launch queues the
//! first lane on the launch stream and every other lane on the stream it
//! was recorded from. Notifies count (each record satisfies the next wait,
//! counts only grow), and every launch replays the same records and
//! waits, so the lanes stay ordered replay after replay.
//!
//! **Errors.** A failed enqueue while capturing (bad arguments, a task
//! that cannot be recorded), a rollback of a half-issued op, a
//! synchronize of the capturing stream or a launch into it invalidates the
//! capture: [`Stream::capture_status`] says so, and `end_capture` returns
//! the error that invalidated it and no graph.

use super::kernel::{Kernel, Relaunch};
use super::task::{copy_op, link_op, reduce_op, HostFn, Op, OpLabel, Pools, RecOp, TaskKind};
use super::{Device, ExecMode, Queue, Stream};
use crate::dtype::{DataType, ReduceOp};
use crate::error::{HcclError, Result};
use crate::link::{Link, LinkOp, LinkOpState, Verb};
use crate::mem::{DeviceMem, MemKind};
use crate::notify::Notify;
use crate::sync::mutation::{self, Mutation};
use crate::sync::{Arc, Mutex, MutexGuard, Ordering};
use smallvec::SmallVec;
use std::thread::ThreadId;

/// Which threads a capture restricts (ACL's `aclmdlRICaptureMode`): the
/// C shim refuses ACL's "unsafe" calls (synchronous copies) accordingly;
/// the platform uses it for who may end the capture.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CaptureMode {
    /// Every thread is restricted; only the thread that began the capture
    /// may end it (`ACL_MODEL_RI_CAPTURE_MODE_GLOBAL`).
    Global,
    /// Only the beginning thread is restricted, and only it may end the
    /// capture (`ACL_MODEL_RI_CAPTURE_MODE_THREAD_LOCAL`).
    ThreadLocal,
    /// Nothing is restricted; any thread may end the capture
    /// (`ACL_MODEL_RI_CAPTURE_MODE_RELAXED`).
    Relaxed,
}

/// Where a stream stands with capturing (ACL's `aclmdlRICaptureStatus`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CaptureStatus {
    /// Not capturing: tasks are queued and run.
    None,
    /// Capturing: tasks are recorded.
    Active,
    /// Capturing, but an error invalidated the capture: ending it returns
    /// that error and no graph.
    Invalidated,
}

/// A recorded task and the algorithm step it belongs to.
struct Recorded {
    rec: Rec,
    step: u32,
}

/// What a recorded task does (see the module docs).
enum Rec {
    Op(RecOp),
    Record(Notify),
    Wait(Notify),
    HostFn(HostFn),
    Kind(RecKind),
    /// A descriptor verb (no memory operand), queued by every replay as
    /// the same shared `LinkOp`: no allocation per replay.
    SharedLink {
        link: u32,
        op: Arc<LinkOp>,
    },
    /// A kernel that copies itself for each replay; the lock only makes
    /// the template shareable (`Kernel` is not `Sync`).
    Kernel(Mutex<Box<dyn Kernel>>),
    Launch(Box<dyn Relaunch>),
}

/// A task kept in its public form, without pins or per-run state.
enum RecKind {
    Memcpy {
        dst: DeviceMem,
        src: DeviceMem,
    },
    Reduce {
        dst: DeviceMem,
        src: DeviceMem,
        dtype: DataType,
        op: ReduceOp,
    },
    Link {
        link: Arc<dyn Link>,
        op: RecLinkOp,
    },
}

/// A link verb with a memory operand in its public form (transfers at
/// offsets past 4 GiB, the fused receive-and-reduce), without its pin.
enum RecLinkOp {
    Verb {
        verb: Verb,
        mem: Option<DeviceMem>,
        remote_off: usize,
    },
    RxReduce {
        src_kind: MemKind,
        src_offset: usize,
        dst: DeviceMem,
        dtype: DataType,
        op: ReduceOp,
    },
}

impl Rec {
    /// The recorded form of `op`, as `make` built it with the capture's
    /// `pools`; an error for a task that cannot be replayed.
    fn of(op: Op, pools: &mut Pools) -> Result<Rec> {
        if let Some(r) = RecOp::of(&op) {
            return Ok(Rec::Op(r));
        }
        Ok(match op {
            Op::Record { notify, .. } => Rec::Record(notify),
            Op::Wait { notify, .. } => Rec::Wait(notify),
            Op::HostFn { f, .. } => Rec::HostFn(f),
            Op::Callback { .. } => {
                return Err(HcclError::not_support(
                    "a host callback that runs once (Stream::host_callback) cannot be captured: \
                     a graph runs its tasks on every launch; enqueue a replayable one with \
                     Stream::host_fn",
                ))
            }
            Op::Kernel { kernel, .. } => Self::kernel(kernel)?,
            Op::Other { kind, .. } => match *kind {
                TaskKind::Memcpy { dst, src } => Rec::Kind(RecKind::Memcpy {
                    dst: dst.mem().clone(),
                    src: src.mem().clone(),
                }),
                TaskKind::Reduce {
                    dst,
                    src,
                    dtype,
                    op,
                } => Rec::Kind(RecKind::Reduce {
                    dst: dst.mem().clone(),
                    src: src.mem().clone(),
                    dtype,
                    op,
                }),
                TaskKind::Link { link, op, .. } => {
                    let verb =
                        Verb::of(&op).map(|(v, m, off)| (v, m.map(|m| m.mem().clone()), off));
                    match (verb, op) {
                        (Some((verb, mem, remote_off)), _) => Rec::Kind(RecKind::Link {
                            link,
                            op: RecLinkOp::Verb {
                                verb,
                                mem,
                                remote_off,
                            },
                        }),
                        (
                            None,
                            LinkOp::RxReduce {
                                src_kind,
                                src_offset,
                                dst,
                                dtype,
                                op,
                            },
                        ) => Rec::Kind(RecKind::Link {
                            link,
                            op: RecLinkOp::RxReduce {
                                src_kind,
                                src_offset,
                                dst: dst.mem().clone(),
                                dtype,
                                op,
                            },
                        }),
                        // the descriptor verbs: no memory operand, shared
                        // by every replay
                        (None, op) => Rec::SharedLink {
                            link: pools.link(&link),
                            op: Arc::new(op),
                        },
                    }
                }
                TaskKind::Kernel(kernel) => Self::kernel(kernel)?,
            },
            // built with the capture's pools: its slot is theirs
            Op::SharedLink { link, op, .. } => Rec::SharedLink { link, op },
            Op::Copy { .. } | Op::Reduce { .. } | Op::Link { .. } => {
                return Err(HcclError::internal(
                    "a compact task was not recorded as one",
                ))
            }
        })
    }

    fn kernel(kernel: Box<dyn Kernel>) -> Result<Rec> {
        if kernel.replay().is_none() {
            return Err(HcclError::not_support(format!(
                "{} cannot be captured: the kernel cannot copy itself for a replay \
                 (Kernel::replay)",
                kernel.describe()
            )));
        }
        Ok(Rec::Kernel(Mutex::new(kernel)))
    }
}

impl RecKind {
    /// The task to queue for a replay, with fresh pins and per-run state.
    fn to_op(&self, pools: &mut Pools) -> Op {
        match self {
            RecKind::Memcpy { dst, src } => copy_op(pools, dst, src),
            RecKind::Reduce {
                dst,
                src,
                dtype,
                op,
            } => reduce_op(pools, dst, src, *dtype, *op),
            RecKind::Link { link, op } => {
                let public = |op| Op::Other {
                    kind: Box::new(TaskKind::Link {
                        link: link.clone(),
                        op,
                        state: LinkOpState::default(),
                    }),
                    step: 0,
                };
                match op {
                    RecLinkOp::Verb {
                        verb,
                        mem,
                        remote_off,
                    } => link_op(pools, link, *verb, mem.as_ref(), *remote_off),
                    RecLinkOp::RxReduce {
                        src_kind,
                        src_offset,
                        dst,
                        dtype,
                        op,
                    } => public(LinkOp::RxReduce {
                        src_kind: *src_kind,
                        src_offset: *src_offset,
                        dst: dst.pin(),
                        dtype: *dtype,
                        op: *op,
                    }),
                }
            }
        }
    }
}

/// One stream's share of a capture.
struct LaneRec {
    stream_id: u64,
    /// The stream a joined lane was recorded from (`None` for the first
    /// lane: the capturing stream itself, replayed on the launch stream).
    stream: Option<Stream>,
    tasks: Vec<Recorded>,
    /// Label runs: (index of the run's first task, label).
    labels: Vec<(u32, Option<Arc<OpLabel>>)>,
}

impl LaneRec {
    fn push(&mut self, rec: Rec, step: u32, label: &Option<Arc<OpLabel>>) {
        let same = match (self.labels.last(), label) {
            (Some((_, Some(a))), Some(b)) => Arc::ptr_eq(a, b),
            (Some((_, None)), None) => true,
            _ => false,
        };
        if !same {
            self.labels.push((self.tasks.len() as u32, label.clone()));
        }
        self.tasks.push(Recorded { rec, step });
    }
}

/// What a capture has recorded so far.
struct Body {
    /// The error that invalidated the capture, if one did.
    invalid: Option<HcclError>,
    lanes: Vec<LaneRec>,
    pools: Pools,
    notes: Vec<Arc<OpLabel>>,
}

/// A capture in progress, shared by the streams recording into it.
pub(crate) struct Capture {
    body: Mutex<Body>,
    /// Work held back to merge with what follows (see
    /// [`CaptureDeferred`]); its own lock, because flushing it records
    /// tasks into `body`.
    deferred: Mutex<Option<Box<dyn CaptureDeferred>>>,
    mode: CaptureMode,
    thread: ThreadId,
    /// The capturing stream's id.
    origin: u64,
    device_uid: u64,
}

/// Work a capture holds back so that what is issued next can merge with
/// it (the adapter's consecutive small AllReduces, fused into one): it is
/// flushed — recorded — before any other task is recorded on the capture,
/// on any of its streams, and before the capture ends, so stream order
/// is kept.
pub trait CaptureDeferred: Send {
    /// Records the held-back work (on the capture's streams).
    fn flush(self: Box<Self>) -> Result<()>;
    /// The concrete type, for the owner to extend the work it deferred.
    fn as_any_mut(&mut self) -> &mut dyn std::any::Any;
}

impl Capture {
    fn take_deferred(&self) -> Option<Box<dyn CaptureDeferred>> {
        self.deferred
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
    }

    fn lock(&self) -> MutexGuard<'_, Body> {
        self.body.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Marks the capture invalid with `e` (the first error is kept).
    fn invalidate(&self, e: &HcclError) {
        let mut b = self.lock();
        if b.invalid.is_none() {
            tracing::warn!(stream = self.origin, error = %e, "stream capture invalidated");
            b.invalid = Some(e.clone());
        }
    }

    fn invalid_error(&self, e: &HcclError) -> HcclError {
        HcclError::from_code(
            e.code(),
            format!(
                "the capture of stream {} was invalidated: {}",
                self.origin,
                e.message()
            ),
        )
    }
}

/// A stream's part in a capture: which capture, which lane.
#[derive(Clone)]
pub(crate) struct CaptureSlot {
    capture: Arc<Capture>,
    lane: usize,
}

/// One lane of a graph, ready to replay.
struct Lane {
    stream: Option<Stream>,
    tasks: Vec<Recorded>,
    labels: Vec<(u32, Option<Arc<OpLabel>>)>,
    /// (slot in the graph's pools, tasks of this lane using it).
    link_uses: Vec<(u32, usize)>,
    region_uses: Vec<(u32, usize)>,
}

impl Lane {
    fn of(rec: LaneRec, slots: (usize, usize)) -> Lane {
        let (mut links, mut regions) = (vec![0usize; slots.0], vec![0usize; slots.1]);
        for t in &rec.tasks {
            let (link, mems) = match &t.rec {
                Rec::Op(op) => op.slots(),
                Rec::SharedLink { link, .. } => (Some(*link), [None, None]),
                _ => continue,
            };
            if let Some(l) = link {
                links[l as usize] += 1;
            }
            for m in mems.into_iter().flatten() {
                regions[m as usize] += 1;
            }
        }
        let used = |v: Vec<usize>| {
            v.into_iter()
                .enumerate()
                .filter(|&(_, n)| n > 0)
                .map(|(s, n)| (s as u32, n))
                .collect()
        };
        Lane {
            stream: rec.stream,
            tasks: rec.tasks,
            labels: rec.labels,
            link_uses: used(links),
            region_uses: used(regions),
        }
    }
}

struct GraphInner {
    device: Device,
    device_uid: u64,
    device_id: u32,
    origin: u64,
    lanes: Vec<Lane>,
    /// Holds every link and region the recorded tasks reference (no pins).
    pools: Pools,
    notes: Vec<Arc<OpLabel>>,
}

/// A captured sequence of tasks, replayable on streams of its device (see
/// the module docs). Cloning is cheap (one reference count); the links,
/// buffers and streams it references stay alive until its last handle is
/// dropped, and a dropped graph cannot be launched:
///
/// ```compile_fail
/// # use hccl_platform::{CaptureMode, Device, Stream};
/// let s = Stream::new(&Device::new(0, Default::default()));
/// s.begin_capture(CaptureMode::Global).unwrap();
/// let g = s.end_capture().unwrap();
/// drop(g);
/// g.launch(&s).unwrap(); // use of a moved value
/// ```
#[derive(Clone)]
pub struct Graph(Arc<GraphInner>);

impl std::fmt::Debug for Graph {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Graph")
            .field("device", &self.0.device_id)
            .field("captured_on_stream", &self.0.origin)
            .field("ops", &self.op_count())
            .field("tasks", &self.task_count())
            .field("lanes", &self.0.lanes.len())
            .finish()
    }
}

impl Graph {
    /// Enqueues the graph's tasks on `stream` (a stream of the device it
    /// was captured on), in their recorded order, with fresh per-run
    /// state: the first lane on `stream`, every joined lane on the stream
    /// it was recorded from. Returns at once, like any enqueue; a later
    /// `stream.synchronize()` waits for the replay and reports its errors.
    /// A graph may be launched again while earlier launches are still
    /// queued (they run in stream order).
    pub fn launch(&self, stream: &Stream) -> Result<()> {
        let g = &*self.0;
        if stream.device().uid() != g.device_uid {
            return Err(HcclError::para(format!(
                "the graph was captured on device {} (uid {}); stream {} belongs to device {} \
                 (uid {}): launch it on a stream of its own device",
                g.device_id,
                g.device_uid,
                stream.id(),
                stream.device().id(),
                stream.device().uid()
            )));
        }
        if stream.is_capturing() {
            let e = HcclError::not_support(format!(
                "stream {} is capturing: a graph cannot be launched into a capture",
                stream.id()
            ));
            stream.invalidate_capture(&e);
            return Err(e);
        }
        if g.lanes[1..]
            .iter()
            .any(|l| l.stream.as_ref().is_some_and(|s| s.id() == stream.id()))
        {
            return Err(HcclError::para(format!(
                "stream {} runs one of the graph's joined lanes (a slave stream of a captured \
                 op); launch the graph on another stream",
                stream.id()
            )));
        }
        stream.replay(g, &g.lanes[0])?;
        for lane in &g.lanes[1..] {
            if let Some(s) = &lane.stream {
                s.replay(g, lane)?;
            }
        }
        Ok(())
    }

    /// Collective ops the graph holds (the framework notes one per op
    /// issued while capturing, [`Stream::capture_note`]).
    pub fn op_count(&self) -> usize {
        self.0.notes.len()
    }

    /// The op labels noted while capturing, in order.
    pub fn ops(&self) -> impl Iterator<Item = &OpLabel> {
        self.0.notes.iter().map(|l| &**l)
    }

    /// Tasks a launch enqueues, over all lanes.
    pub fn task_count(&self) -> usize {
        self.0.lanes.iter().map(|l| l.tasks.len()).sum()
    }

    /// Streams the graph's tasks run on per launch (1 + the slave streams
    /// that joined the capture).
    pub fn lane_count(&self) -> usize {
        self.0.lanes.len()
    }

    /// The id of the device the graph was captured on.
    pub fn device_id(&self) -> u32 {
        self.0.device_id
    }

    /// The device the graph was captured on (and runs on).
    pub fn device(&self) -> &Device {
        &self.0.device
    }

    /// Whether the graph references memory of `m`'s region (then that
    /// memory must outlive the graph: the C shim refuses to free it).
    /// Kernels that cannot say what they touch count as referencing it.
    pub fn references(&self, m: &DeviceMem) -> bool {
        let g = &*self.0;
        if g.pools.holds_region(m) {
            return true;
        }
        g.lanes.iter().flat_map(|l| &l.tasks).any(|t| match &t.rec {
            Rec::Kind(RecKind::Memcpy { dst, src } | RecKind::Reduce { dst, src, .. }) => {
                dst.same_region(m) || src.same_region(m)
            }
            Rec::Kind(RecKind::Link {
                op: RecLinkOp::Verb { mem: Some(x), .. },
                ..
            })
            | Rec::Kind(RecKind::Link {
                op: RecLinkOp::RxReduce { dst: x, .. },
                ..
            }) => x.same_region(m),
            Rec::Launch(k) => k.references(m),
            Rec::Kernel(k) => k.lock().unwrap_or_else(|p| p.into_inner()).writes(m),
            _ => false,
        })
    }
}

impl Stream {
    /// Starts capturing: from now on the tasks enqueued on this stream
    /// (and on streams that join the capture) are recorded, not run, until
    /// [`end_capture`](Self::end_capture) returns them as a [`Graph`].
    /// Tasks queued before keep running. A stream that is capturing
    /// already (or has joined a capture) is refused with `HCCL_E_PARA`.
    pub fn begin_capture(&self, mode: CaptureMode) -> Result<()> {
        let mut q = self.inner.lock_queue();
        if q.capture.is_some() {
            return Err(HcclError::para(format!(
                "stream {} is already capturing; end that capture first",
                self.id()
            )));
        }
        let capture = Arc::new(Capture {
            body: Mutex::new(Body {
                invalid: None,
                lanes: vec![LaneRec {
                    stream_id: self.id(),
                    stream: None,
                    tasks: Vec::new(),
                    labels: Vec::new(),
                }],
                pools: Pools::recording(),
                notes: Vec::new(),
            }),
            deferred: Mutex::new(None),
            mode,
            thread: std::thread::current().id(),
            origin: self.id(),
            device_uid: self.device().uid(),
        });
        q.capture = Some(CaptureSlot { capture, lane: 0 });
        self.inner.capturing.store(true, Ordering::Relaxed);
        tracing::debug!(stream = self.id(), ?mode, "stream capture begun");
        Ok(())
    }

    /// Whether the stream is capturing (or has joined a capture): one
    /// relaxed load, cheap enough for every op's path. Only the thread that
    /// begins or ends a capture changes it, so that thread reads it exactly.
    #[inline]
    pub fn is_capturing(&self) -> bool {
        self.inner.capturing.load(Ordering::Relaxed)
    }

    /// Where the stream stands with capturing.
    pub fn capture_status(&self) -> CaptureStatus {
        let slot = self.inner.lock_queue().capture.clone();
        match slot {
            None => CaptureStatus::None,
            Some(s) if s.capture.lock().invalid.is_some() => CaptureStatus::Invalidated,
            Some(_) => CaptureStatus::Active,
        }
    }

    /// The mode of the capture this stream is in, if any.
    pub fn capture_mode(&self) -> Option<CaptureMode> {
        self.inner
            .lock_queue()
            .capture
            .as_ref()
            .map(|s| s.capture.mode)
    }

    /// Ends the capture this stream began and returns what it recorded.
    /// Streams that joined the capture leave it. Refused (`HCCL_E_PARA`,
    /// the capture going on) when the stream is not capturing, only joined
    /// another stream's capture, or — unless the capture is
    /// [`CaptureMode::Relaxed`] — is called from another thread than the
    /// one that began it. If an error invalidated the capture, the capture
    /// ends and that error is returned, with no graph.
    pub fn end_capture(&self) -> Result<Graph> {
        // held-back work belongs in the graph (an error invalidates it)
        if let Err(e) = self.flush_capture_deferred() {
            self.invalidate_capture(&e);
        }
        let slot = {
            let mut q = self.inner.lock_queue();
            let Some(slot) = &q.capture else {
                return Err(HcclError::para(format!(
                    "stream {} is not capturing (end_capture without begin_capture)",
                    self.id()
                )));
            };
            if slot.lane != 0 {
                return Err(HcclError::para(format!(
                    "stream {} only joined the capture of stream {}; end it there",
                    self.id(),
                    slot.capture.origin
                )));
            }
            let c = &slot.capture;
            if c.mode != CaptureMode::Relaxed && c.thread != std::thread::current().id() {
                return Err(HcclError::para(format!(
                    "the capture of stream {} was begun by another thread in {:?} mode; end it \
                     on that thread (or begin it in Relaxed mode)",
                    self.id(),
                    c.mode
                )));
            }
            let slot = q.capture.take().expect("checked above");
            self.inner.capturing.store(false, Ordering::Relaxed);
            slot
        };
        let body = std::mem::replace(
            &mut *slot.capture.lock(),
            Body {
                invalid: None,
                lanes: Vec::new(),
                pools: Pools::default(),
                notes: Vec::new(),
            },
        );
        // joined streams leave (an op that failed half-way may not have
        // taken them out)
        for lane in &body.lanes[1..] {
            if let Some(s) = &lane.stream {
                s.leave(&slot.capture);
            }
        }
        if let Some(e) = &body.invalid {
            return Err(slot.capture.invalid_error(e));
        }
        let slots = body.pools.slot_counts();
        let lanes: Vec<Lane> = body.lanes.into_iter().map(|l| Lane::of(l, slots)).collect();
        let g = Graph(Arc::new(GraphInner {
            device: self.device().clone(),
            device_uid: slot.capture.device_uid,
            device_id: self.device().id(),
            origin: self.id(),
            lanes,
            pools: body.pools,
            notes: body.notes,
        }));
        tracing::debug!(stream = self.id(), graph = ?g, "stream capture ended");
        Ok(g)
    }

    /// Makes this stream record into the capture of `origin` (a capturing
    /// stream of the same device) as a lane of its own, until
    /// [`leave_capture`](Self::leave_capture): how an op's slave streams
    /// take part in a capture. Joining the same capture again is a no-op;
    /// a stream capturing for another capture is refused (`HCCL_E_PARA`).
    pub fn join_capture(&self, origin: &Stream) -> Result<()> {
        if self.device().uid() != origin.device().uid() {
            return Err(HcclError::para(format!(
                "stream {} cannot join the capture of stream {}: they are on different devices",
                self.id(),
                origin.id()
            )));
        }
        let Some(slot) = origin.inner.lock_queue().capture.clone() else {
            return Err(HcclError::para(format!(
                "stream {} is not capturing: there is no capture to join",
                origin.id()
            )));
        };
        if let Some(mine) = &self.inner.lock_queue().capture {
            if Arc::ptr_eq(&mine.capture, &slot.capture) {
                return Ok(());
            }
            return Err(HcclError::para(format!(
                "stream {} is already in the capture of stream {}",
                self.id(),
                mine.capture.origin
            )));
        }
        let lane = {
            let mut b = slot.capture.lock();
            match b.lanes.iter().position(|l| l.stream_id == self.id()) {
                Some(i) => i,
                None => {
                    b.lanes.push(LaneRec {
                        stream_id: self.id(),
                        stream: Some(self.clone()),
                        tasks: Vec::new(),
                        labels: Vec::new(),
                    });
                    b.lanes.len() - 1
                }
            }
        };
        let mut q = self.inner.lock_queue();
        if q.capture.is_some() {
            return Err(HcclError::para(format!(
                "stream {} began capturing while joining another capture",
                self.id()
            )));
        }
        q.capture = Some(CaptureSlot {
            capture: slot.capture,
            lane,
        });
        self.inner.capturing.store(true, Ordering::Relaxed);
        Ok(())
    }

    /// Stops recording into the capture this stream joined
    /// ([`join_capture`](Self::join_capture)); later tasks run as usual.
    /// No-op if it is not in a joined capture; the stream that began a
    /// capture ends it with [`end_capture`](Self::end_capture).
    pub fn leave_capture(&self) {
        let mut q = self.inner.lock_queue();
        if q.capture.as_ref().is_some_and(|s| s.lane != 0) {
            q.capture = None;
            self.inner.capturing.store(false, Ordering::Relaxed);
        }
    }

    /// Leaves `capture` if this stream is in it.
    fn leave(&self, capture: &Arc<Capture>) {
        let mut q = self.inner.lock_queue();
        if q.capture
            .as_ref()
            .is_some_and(|s| Arc::ptr_eq(&s.capture, capture))
        {
            q.capture = None;
            self.inner.capturing.store(false, Ordering::Relaxed);
        }
    }

    /// Holds `work` back in the capture this stream is in, to be flushed
    /// before anything else is recorded on it (see [`CaptureDeferred`]).
    /// Work deferred before is flushed first. `HCCL_E_PARA` (and `work`
    /// dropped) when the stream is not capturing.
    pub fn capture_defer(&self, work: Box<dyn CaptureDeferred>) -> Result<()> {
        self.flush_capture_deferred()?;
        let slot = self.inner.lock_queue().capture.clone();
        let Some(slot) = slot else {
            return Err(HcclError::para(format!(
                "stream {} is not capturing: there is no capture to defer work in",
                self.id()
            )));
        };
        *slot
            .capture
            .deferred
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = Some(work);
        Ok(())
    }

    /// Takes the work deferred in this stream's capture back (to extend
    /// it and defer it again), if any.
    pub fn take_capture_deferred(&self) -> Option<Box<dyn CaptureDeferred>> {
        let slot = self.inner.lock_queue().capture.clone()?;
        slot.capture.take_deferred()
    }

    /// Records the work deferred in this stream's capture now, if any
    /// (every enqueue on a capturing stream does this first).
    pub fn flush_capture_deferred(&self) -> Result<()> {
        if !self.is_capturing() {
            return Ok(());
        }
        match self.take_capture_deferred() {
            Some(work) => work.flush(),
            None => Ok(()),
        }
    }

    /// Notes one collective op issued on this capturing stream (the
    /// framework calls it once per op), so the graph can say how many it
    /// holds ([`Graph::op_count`]). No-op when not capturing.
    pub fn capture_note(&self, label: &Arc<OpLabel>) {
        let slot = self.inner.lock_queue().capture.clone();
        if let Some(s) = slot {
            s.capture.lock().notes.push(label.clone());
        }
    }

    /// Invalidates the capture this stream is in (if any) with `e`: for
    /// callers whose own failure leaves the capture incomplete (e.g. an op
    /// that could not be recorded on this stream). No-op when not
    /// capturing.
    pub fn invalidate_capture(&self, e: &HcclError) {
        let slot = self.inner.lock_queue().capture.clone();
        if let Some(s) = slot {
            s.capture.invalidate(e);
        }
    }

    /// `e`, having invalidated the capture this stream is in, if any: for
    /// enqueue calls that fail while capturing.
    pub(crate) fn refuse(&self, e: HcclError) -> HcclError {
        if self.is_capturing() {
            self.invalidate_capture(&e);
        }
        e
    }

    /// Records the task `make` builds into the capture `slot` (this
    /// stream's), with the queue's current label and step. `q` is this
    /// stream's locked queue.
    pub(super) fn record(
        &self,
        q: &Queue,
        slot: &CaptureSlot,
        make: impl FnOnce(&mut Pools) -> Op,
    ) -> Result<()> {
        let c = &slot.capture;
        let mut b = c.lock();
        if let Some(e) = &b.invalid {
            return Err(c.invalid_error(e));
        }
        let op = make(&mut b.pools);
        match Rec::of(op, &mut b.pools) {
            Ok(rec) => {
                b.lanes[slot.lane].push(rec, q.step, &q.label);
                Ok(())
            }
            Err(e) => {
                drop(b);
                c.invalidate(&e);
                Err(e)
            }
        }
    }

    /// Records a kernel launch (`Stream::launch` while capturing); `false`
    /// if the stream stopped capturing meanwhile (then the caller launches
    /// it).
    pub(super) fn record_launch(
        &self,
        capture: impl FnOnce() -> Box<dyn Relaunch>,
    ) -> Result<bool> {
        let q = self.inner.lock_queue();
        let Some(slot) = q.capture.clone() else {
            return Ok(false);
        };
        let c = &slot.capture;
        let mut b = c.lock();
        if let Some(e) = &b.invalid {
            return Err(c.invalid_error(e));
        }
        b.lanes[slot.lane].push(Rec::Launch(capture()), q.step, &q.label);
        Ok(true)
    }

    /// Queues `lane` of graph `g` on this stream (see [`Graph::launch`]):
    /// its links and regions are taken into the queue's pools once per
    /// lane, then every task is queued under the same lock, except kernel
    /// launches, which go through `Stream::launch` (and may complete at
    /// once).
    fn replay(&self, g: &GraphInner, lane: &Lane) -> Result<()> {
        if lane.tasks.is_empty() {
            return Ok(());
        }
        let (nl, nr) = g.pools.slot_counts();
        let mut links: SmallVec<[u32; 16]> = SmallVec::from_elem(0, nl);
        let mut regions: SmallVec<[u32; 16]> = SmallVec::from_elem(0, nr);
        let mut q = self.inner.lock_queue();
        for &(s, n) in &lane.link_uses {
            links[s as usize] = q.pools.adopt_link(&g.pools, s, n);
        }
        for &(s, n) in &lane.region_uses {
            regions[s as usize] = q.pools.adopt_region(&g.pools, s, n);
        }
        q.tasks.reserve(lane.tasks.len());
        // the label and step new tasks get; restored when the lane is queued
        let saved = (q.label.take(), q.step);
        let mut run = 0;
        let mut pushed = 0u64;
        let mut result = Ok(());
        for (i, t) in lane.tasks.iter().enumerate() {
            while run < lane.labels.len() && lane.labels[run].0 as usize <= i {
                q.label = lane.labels[run].1.clone();
                run += 1;
            }
            q.step = t.step;
            let op = match &t.rec {
                Rec::Op(r) => r.to_op(&links, &regions, t.step),
                Rec::Record(n) => Op::Record {
                    notify: n.clone(),
                    step: 0,
                },
                Rec::Wait(n) => Op::Wait {
                    notify: n.clone(),
                    step: 0,
                },
                Rec::HostFn(f) => Op::HostFn {
                    f: f.clone(),
                    step: 0,
                },
                Rec::Kind(k) => k.to_op(&mut q.pools),
                Rec::SharedLink { link, op } => Op::SharedLink {
                    link: links[*link as usize],
                    op: op.clone(),
                    step: 0,
                },
                Rec::Kernel(k) => {
                    let k = k.lock().unwrap_or_else(|p| p.into_inner()).replay();
                    match k {
                        Some(kernel) => Op::Kernel { kernel, step: 0 },
                        None => {
                            result = Err(HcclError::internal(
                                "a captured kernel could not copy itself for a replay",
                            ));
                            break;
                        }
                    }
                }
                Rec::Launch(k) => {
                    // queue what came before, then launch as any launch:
                    // the launch sees the tasks in front of it
                    self.inner
                        .count_enqueued(std::mem::take(&mut pushed), &self.device.0);
                    self.inner.note_label(&q);
                    drop(q);
                    self.wake_worker();
                    let r = k.relaunch(self);
                    q = self.inner.lock_queue();
                    if let Err(e) = r {
                        result = Err(e);
                        break;
                    }
                    continue;
                }
            };
            q.push(op);
            pushed += 1;
        }
        self.inner.count_enqueued(pushed, &self.device.0);
        (q.label, q.step) = saved;
        self.inner.note_label(&q);
        drop(q);
        self.wake_worker();
        result
    }

    /// Wakes a worker-mode device's driver after an enqueue.
    pub(super) fn wake_worker(&self) {
        if self.device.0.config.mode == ExecMode::Worker
            && !mutation::active(Mutation::StreamSkipWake)
        {
            self.device.0.events.notify();
        }
    }
}

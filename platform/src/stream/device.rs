//! The device: a rank's set of streams and the driver that runs them.
//!
//! Streams do not own threads. A device's streams are driven cooperatively
//! by one driver at a time: in [`ExecMode::Inline`] (the default) that is the
//! thread calling `synchronize`; in [`ExecMode::Worker`] it is one parked
//! worker thread per device. The driver polls the head task of every stream;
//! a task that waits for a peer stays at its head. When nothing can progress
//! the driver spins briefly, yields, then parks on the device's event count,
//! which links and notifies bump when something the device may wait for
//! changes.
//!
//! Dead peers: a peer process that dies cannot wake anyone. Once the
//! device's tasks have made no progress for [`WATCH_AFTER`], its driver
//! parks for at most [`WATCH_EVERY`] at a time and asks, between parks,
//! whether any watched peer process (a pidfd each, see
//! [`PeerProcess`](crate::link::PeerProcess)) or any link's peer is gone
//! ([`Link::peer_lost`](crate::link::Link::peer_lost)), or has reported a
//! failure of its own ([`Link::health`](crate::link::Link::health)). If so, every
//! stream's waiting task fails with an error naming the lost rank, its
//! process and host, and what this rank was waiting for (op tag,
//! algorithm, step), and peers are told. A healthy op never waits that
//! long, so its repeat path makes no extra system call.

use super::task::OpLabel;
use super::timeline::Timeline;
use super::StreamInner;
use crate::error::HcclError;
use crate::link::PeerProcess;
use crate::notify::Notify;
use crate::sync::mutation::{self, Mutation};
use crate::sync::{process, Arc, AtomicBool, AtomicU64, EventCount, Mutex, Ordering, Waiter, Weak};
use std::time::{Duration, Instant};

/// Yields an idle driver makes (after spinning) before it parks, by
/// default ([`DeviceConfig::yields`]).
const YIELDS_BEFORE_PARK: u32 = 64;
/// How long the device's tasks make no progress before its driver starts
/// checking that its peers are alive.
pub const WATCH_AFTER: Duration = Duration::from_millis(100);
/// How often, from then on, at most: also the longest park, since a dead
/// peer wakes no one.
pub const WATCH_EVERY: Duration = Duration::from_millis(150);
/// [`WATCH_AFTER`] once a peer was said gone ([`Device::peer_gone`]).
pub const SUSPECT_AFTER: Duration = Duration::from_millis(10);

/// Who runs a device's queued tasks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExecMode {
    /// The thread that synchronizes runs the tasks (no extra thread; lowest latency).
    Inline,
    /// A parked worker thread per device runs tasks as soon as they are enqueued.
    Worker,
}

impl ExecMode {
    /// Reads `HCCL_RS_EXEC_MODE` (`inline` or `worker`); default inline.
    pub fn from_env() -> crate::Result<ExecMode> {
        match std::env::var("HCCL_RS_EXEC_MODE") {
            Err(_) => Ok(ExecMode::Inline),
            Ok(v) => match v.trim().to_ascii_lowercase().as_str() {
                "" | "inline" => Ok(ExecMode::Inline),
                "worker" => Ok(ExecMode::Worker),
                _ => Err(HcclError::para(format!(
                    "environment variable HCCL_RS_EXEC_MODE='{v}' is invalid: expected 'inline' or 'worker'"
                ))),
            },
        }
    }
}

/// How a device runs and bounds its waits.
#[derive(Clone, Debug)]
pub struct DeviceConfig {
    /// Longest a task may wait for a peer before failing; `None` = forever
    /// (HCCL_EXEC_TIMEOUT=0).
    pub exec_timeout: Option<Duration>,
    /// How long an idle driver spins before yielding and parking.
    pub spin: Duration,
    /// How many times an idle driver then yields its core before it
    /// parks (with more ranks than cores, a yield hands the core to the
    /// peer that will unblock it for less than a park and a wake cost).
    pub yields: u32,
    /// Who drives the streams.
    pub mode: ExecMode,
}

impl Default for DeviceConfig {
    fn default() -> Self {
        DeviceConfig {
            exec_timeout: Some(Duration::from_secs(1836)),
            spin: Duration::from_micros(20),
            yields: YIELDS_BEFORE_PARK,
            mode: ExecMode::Inline,
        }
    }
}

/// A task at the head of a stream that cannot progress (for deadlock reports).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BlockedTask {
    /// The stream's id.
    pub stream: u64,
    /// What the task does (e.g. "RxWaitDone with peer rank 3 over the in-process link").
    pub what: String,
    /// The link verb, for link tasks.
    pub verb: Option<&'static str>,
    /// The peer, for link tasks.
    pub peer: Option<u32>,
    /// The algorithm step it belongs to.
    pub step: u32,
    /// The op it belongs to.
    pub label: Option<OpLabel>,
    /// Tasks queued on the stream, this one included.
    pub queued: usize,
}

/// Work a device has completed since it was created.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DeviceStats {
    /// Tasks completed.
    pub tasks: u64,
    /// Bytes reduced by local reduce tasks (destination bytes).
    pub reduce_bytes: u64,
    /// Bytes copied by local memcpy tasks.
    pub memcpy_bytes: u64,
}

#[derive(Debug, Default)]
pub(crate) struct DeviceStatsInner {
    tasks: AtomicU64,
    reduce_bytes: AtomicU64,
    memcpy_bytes: AtomicU64,
}

impl DeviceStatsInner {
    /// Counts `tasks` completed tasks that reduced and copied the given
    /// bytes (added once per run of tasks, not per task). Only the device's
    /// driver records, holding the driver lock, so a load and a store do
    /// (no locked read-modify-write on every poll of a simulated rank).
    pub(crate) fn record(&self, tasks: u64, reduce_bytes: u64, memcpy_bytes: u64) {
        let add = |c: &AtomicU64, n: u64| c.store(c.load(Ordering::Relaxed) + n, Ordering::Relaxed);
        add(&self.tasks, tasks);
        if reduce_bytes > 0 {
            add(&self.reduce_bytes, reduce_bytes);
        }
        if memcpy_bytes > 0 {
            add(&self.memcpy_bytes, memcpy_bytes);
        }
    }
}

pub(crate) struct DeviceInner {
    pub(crate) stats: DeviceStatsInner,
    /// Links of this rank's communicators: when any task fails, all of them
    /// are aborted so peers fail fast instead of waiting out their timeouts.
    links: Mutex<Vec<Weak<dyn crate::link::Link>>>,
    /// Told when the driver parks and wakes (transports whose sockets the
    /// driver reads while it runs).
    park_hooks: Mutex<Vec<Weak<dyn crate::link::ParkHook>>>,
    /// Whether any park hook was ever added (a driver that stops driving
    /// tells them, see [`ParkHook::released`](crate::link::ParkHook::released);
    /// devices without any skip the lock).
    has_park_hooks: AtomicBool,
    /// Raised by a park hook that gathered frames to write after the round.
    flush: crate::link::FlushRequest,
    /// Told when a stream of this device fails (see
    /// [`Device::on_stream_failure`]).
    failure_hooks: Mutex<Vec<FailureHook>>,
    /// The timeline of this device's tasks, when one is on (see
    /// `timeline.rs`).
    pub(crate) timeline: super::timeline::TimelineSlot,
    /// Told of every task that completes, when set
    /// ([`Device::set_task_observer`]).
    pub(crate) observer: std::sync::OnceLock<std::sync::Arc<dyn super::TaskObserver>>,
    /// Peer processes on this host, watched while a wait lasts (see the
    /// module docs), whether or not this rank has a link to them.
    watched: Mutex<Vec<Arc<PeerProcess>>>,
    pub(crate) id: u32,
    pub(crate) uid: u64,
    pub(crate) config: DeviceConfig,
    /// The spin actually used (ns): `config.spin` until the communicator
    /// knows where its ranks run ([`Device::set_spin`]) or a transport
    /// asks for less ([`Device::limit_spin`]).
    spin_ns: AtomicU64,
    /// The most a transport allows `spin_ns` to be ([`Device::limit_spin`];
    /// `u64::MAX`: no limit), kept so a later `set_spin` cannot lift it.
    spin_cap_ns: AtomicU64,
    /// The exec timeout in force (ns; `u64::MAX`: none): `config.exec_timeout`
    /// until [`Device::set_exec_timeout`] changes it.
    exec_timeout_ns: AtomicU64,
    /// Set by [`Device::fail_all`]: every task of this device's streams
    /// fails with this error (first one wins) the next time a driver runs.
    failed_all: Mutex<Option<HcclError>>,
    /// Whether `failed_all` is set (read by every driver round).
    has_failed_all: AtomicBool,
    /// Set by [`Device::peer_gone`]: drivers look for a lost peer after
    /// [`SUSPECT_AFTER`] of stall instead of [`WATCH_AFTER`].
    peers_suspect: AtomicBool,
    /// Ranks another part of the rank said are gone ([`Device::peer_gone`]),
    /// with their process and host where known.
    declared_gone: Mutex<Vec<GonePeer>>,
    /// Live [`QuietWaits`] guards: while non-zero, an idle driver neither
    /// spins nor yields before it parks.
    quiet: AtomicU64,
    streams: Mutex<Vec<Weak<StreamInner>>>,
    /// Bumped when a stream registers, so drivers re-read `streams` only
    /// then (the driver loop otherwise reuses its snapshot).
    streams_gen: AtomicU64,
    /// Bumped by anything that may unblock a task of this device.
    pub(crate) events: Arc<EventCount>,
    /// Bumped when tasks complete, for synchronizers that are not driving.
    pub(crate) done: EventCount,
    /// Held by whoever is driving: its snapshot of the live streams.
    pub(crate) driver: Mutex<Vec<Driven>>,
    /// Streams that may have tasks outstanding, as bits ([`Driven::bit`]:
    /// a stream's bit is shared by every 64th stream). Every enqueue sets
    /// its stream's bit after counting the task; only
    /// [`Device::poll_once`] clears bits: it takes them all and sets back
    /// those of the streams it leaves with tasks, before it lets go of the
    /// driver lock. So whoever holds that lock finds every stream with
    /// tasks among the set bits, and the simulator's poll of a rank with
    /// dozens of streams, most idle, reads only the busy ones.
    pub(crate) active: AtomicU64,
    /// Whether a task of any stream of the device ever failed.
    any_failed: AtomicBool,
    /// The stream generation the driver's snapshot holds between
    /// `poll_once` calls (`u64::MAX`: none). Only touched under `driver`.
    poll_gen: AtomicU64,
    /// The worker thread's kernel thread id, once it has started.
    worker_tid: std::sync::OnceLock<i32>,
}

/// A rank's execution context: its streams and their driver. Cheap to clone.
#[derive(Clone)]
pub struct Device(pub(crate) Arc<DeviceInner>);

impl std::fmt::Debug for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Device")
            .field("id", &self.0.id)
            .field("uid", &self.0.uid)
            .field("mode", &self.0.config.mode)
            .finish()
    }
}

static NEXT_UID: process::AtomicU64 = process::AtomicU64::new(1);

impl Device {
    /// Calls `hook` whenever a stream of this device fails (a task's
    /// error, a timeout, a lost peer), with the stream's id and the error,
    /// on the thread that found the failure — after the stream has failed,
    /// so `Stream::progress` shows it. For recorders that dump what was in
    /// flight (the framework's flight recorder); a hook must not wait on
    /// the device's streams.
    pub fn on_stream_failure(&self, hook: FailureHook) {
        self.0
            .failure_hooks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(hook);
    }

    /// Starts recording a timeline of this device's tasks (keeping at
    /// most `capacity` task events), unless one is on already. Returns the
    /// timeline and whether this call started it (the starter stops it
    /// and writes it out: [`Device::stop_timeline`],
    /// [`Timeline::to_chrome_json`]).
    pub fn start_timeline(&self, capacity: usize) -> (std::sync::Arc<Timeline>, bool) {
        self.0.timeline.start(self.0.id, capacity)
    }

    /// Stops the timeline, if one is on, and returns it.
    pub fn stop_timeline(&self) -> Option<std::sync::Arc<Timeline>> {
        self.0.timeline.stop()
    }

    /// The timeline being recorded, if one is on.
    pub fn timeline(&self) -> Option<std::sync::Arc<Timeline>> {
        self.0.timeline.get()
    }

    /// Tells `observer` of every task of this device's streams that
    /// completes, on the driving thread, right after it completed and
    /// before the stream's next task runs (the plan simulator keeps its
    /// logical clocks with it). One observer per device: a second call
    /// fails with `HCCL_E_PARA`. Drivers of a device without one pay a
    /// load per run of tasks.
    pub fn set_task_observer(
        &self,
        observer: std::sync::Arc<dyn super::TaskObserver>,
    ) -> crate::Result<()> {
        self.0.observer.set(observer).map_err(|_| {
            HcclError::para(format!("device {} has a task observer already", self.0.id))
        })
    }

    /// A device with logical id `id` (HCCL's device / rank index).
    pub fn new(id: u32, config: DeviceConfig) -> Device {
        Self::with_waker(id, config, Arc::new(EventCount::new()))
    }

    /// A device whose driver parks on `waker` — e.g. an event count in
    /// shared memory, so that processes on the same host can wake it.
    pub fn with_waker(id: u32, config: DeviceConfig, waker: Arc<EventCount>) -> Device {
        let spin_ns = config.spin.as_nanos().min(u128::from(u64::MAX)) as u64;
        let exec_timeout_ns = timeout_ns(config.exec_timeout);
        let mode = config.mode;
        let dev = Device(Arc::new(DeviceInner {
            stats: DeviceStatsInner::default(),
            links: Mutex::new(Vec::new()),
            park_hooks: Mutex::new(Vec::new()),
            has_park_hooks: AtomicBool::new(false),
            flush: Default::default(),
            watched: Mutex::new(Vec::new()),
            failure_hooks: Mutex::new(Vec::new()),
            timeline: Default::default(),
            observer: Default::default(),
            id,
            uid: NEXT_UID.fetch_add(1, Ordering::Relaxed),
            config,
            streams: Mutex::new(Vec::new()),
            streams_gen: AtomicU64::new(0),
            events: waker,
            done: EventCount::new(),
            driver: Mutex::new(Vec::new()),
            active: AtomicU64::new(0),
            any_failed: AtomicBool::new(false),
            poll_gen: AtomicU64::new(u64::MAX),
            spin_ns: AtomicU64::new(spin_ns),
            spin_cap_ns: AtomicU64::new(u64::MAX),
            exec_timeout_ns: AtomicU64::new(exec_timeout_ns),
            failed_all: Mutex::new(None),
            has_failed_all: AtomicBool::new(false),
            peers_suspect: AtomicBool::new(false),
            declared_gone: Mutex::new(Vec::new()),
            quiet: AtomicU64::new(0),
            worker_tid: std::sync::OnceLock::new(),
        }));
        if mode == ExecMode::Worker {
            spawn_worker(&dev);
        }
        dev
    }

    /// The kernel thread id of this device's worker thread
    /// ([`ExecMode::Worker`]), so that the framework can pin it to the
    /// rank's core (`HCCL_RS_CPU_AFFINITY`); `None` for inline devices.
    pub fn worker_thread_id(&self) -> Option<i32> {
        self.0.worker_tid.get().copied()
    }

    /// The logical id given at creation.
    pub fn id(&self) -> u32 {
        self.0.id
    }

    /// A process-unique identity: two devices never share it.
    pub fn uid(&self) -> u64 {
        self.0.uid
    }

    /// Caps how long an idle driver spins at `max` (a transport whose
    /// work runs on this host's own cores, such as Soft-RoCE, asks for
    /// zero: a spinning driver takes the core that work needs).
    pub fn limit_spin(&self, max: Duration) {
        let ns = max.as_nanos().min(u128::from(u64::MAX)) as u64;
        self.0.spin_cap_ns.fetch_min(ns, Ordering::Relaxed);
        self.0.spin_ns.fetch_min(ns, Ordering::Relaxed);
    }

    /// Sets how long an idle driver spins before it yields and parks,
    /// within any limit a transport set ([`limit_spin`](Self::limit_spin)):
    /// for a device made before its communicator knew how many ranks share
    /// its cores (a process rank's device exists before the bootstrap
    /// tells it where its peers run).
    pub fn set_spin(&self, spin: Duration) {
        let ns = spin.as_nanos().min(u128::from(u64::MAX)) as u64;
        let cap = self.0.spin_cap_ns.load(Ordering::Relaxed);
        self.0.spin_ns.store(ns.min(cap), Ordering::Relaxed);
    }

    /// How long an idle driver spins before it yields and parks (zero
    /// while [`quiet_waits`](Self::quiet_waits) are held).
    pub fn spin(&self) -> Duration {
        self.0.spin()
    }

    /// Bounds every wait of this device's tasks from now on (`None`: they
    /// wait forever): a task waiting longer than `timeout` for a peer
    /// fails its stream with `HCCL_E_TIMEOUT`, as `HCCL_EXEC_TIMEOUT` does
    /// for the whole process. A wait under way is measured from when it
    /// began; parked drivers are woken to apply it.
    pub fn set_exec_timeout(&self, timeout: Option<Duration>) {
        self.0
            .exec_timeout_ns
            .store(timeout_ns(timeout), Ordering::Relaxed);
        self.0.events.notify();
    }

    /// The bound on waits in force ([`set_exec_timeout`](Self::set_exec_timeout)).
    pub fn exec_timeout(&self) -> Option<Duration> {
        self.0.exec_timeout()
    }

    /// Fails every task queued on this device's streams with `err`, those
    /// queued now and any queued later (each stream's synchronize reports
    /// it once, as a failed task): what a revoked communicator does to
    /// its in-flight ops. Drivers parked or spinning are woken to do it at
    /// once; a stream nobody drives fails when next synchronized. The
    /// first error given stays.
    pub fn fail_all(&self, err: HcclError) {
        {
            let mut slot = self.0.failed_all.lock().unwrap_or_else(|p| p.into_inner());
            if slot.is_none() {
                *slot = Some(err);
            }
        }
        self.0.has_failed_all.store(true, Ordering::Release);
        self.0.events.notify();
        self.0.done.notify();
    }

    /// Says peer rank `rank`'s process is gone (e.g. its kernel closed a
    /// control connection to it, which happens a moment before the
    /// process can be seen to have exited): drivers, woken if parked, fail
    /// the waits of this device naming it once they have stalled for
    /// [`SUSPECT_AFTER`] rather than [`WATCH_AFTER`].
    /// `process`: its process id and host, for the error naming it.
    pub fn peer_gone(&self, rank: u32, process: Option<(u32, &str)>) {
        {
            let mut g = self
                .0
                .declared_gone
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            if !g.iter().any(|(r, _)| *r == rank) {
                g.push((rank, process.map(|(pid, host)| (pid, host.to_owned()))));
            }
        }
        self.0.peers_suspect.store(true, Ordering::Release);
        self.0.events.notify();
    }

    /// The error given to [`fail_all`](Self::fail_all), if it was called.
    pub fn failed_all(&self) -> Option<HcclError> {
        if !self.0.has_failed_all.load(Ordering::Acquire) {
            return None;
        }
        self.0
            .failed_all
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// While the returned guard lives, a driver of this device parks as
    /// soon as nothing can progress (no spin, no yields): for a thread
    /// that waits for the network beside a thread that computes on the
    /// same core (the fused ops' stream path), where spinning would take
    /// the core from the computation.
    pub fn quiet_waits(&self) -> QuietWaits {
        self.0.quiet.fetch_add(1, Ordering::Relaxed);
        QuietWaits(self.clone())
    }

    /// The configuration.
    pub fn config(&self) -> &DeviceConfig {
        &self.0.config
    }

    /// The event count that wakes this device's driver; transports and
    /// notifies bump it when something this device may wait for changed.
    pub fn waker(&self) -> Arc<EventCount> {
        self.0.events.clone()
    }

    /// Runs every task of every stream that can run now, without waiting.
    /// Returns whether any ran. This is how a single thread drives many
    /// devices (the plan simulator). Returns `false` without running
    /// anything if another thread is driving this device.
    pub fn poll_once(&self) -> bool {
        let Ok(mut snap) = self.0.driver.try_lock() else {
            return false;
        };
        let mut progressed = false;
        // a single-thread driver of many devices (the simulator) calls this
        // millions of times: keep the snapshot between calls and re-read
        // the stream list only when it changed
        loop {
            self.0.refresh_kept(&mut snap);
            // only streams whose bits are set can have tasks (see
            // `active`): a multi-channel plan keeps dozens of streams,
            // most idle, and reading each one's counters was a cache miss
            let taken = self.0.active.swap(0, Ordering::AcqRel);
            if taken == 0 {
                break;
            }
            // another round can only help a stream that stopped with
            // tasks left before some stream's progress (a notify it waits
            // for may have been recorded since): a stream that stopped
            // after the last progress of the round saw everything the
            // round did, and an idle one has nothing to run
            let (mut first_stuck, mut last_progress) = (None, None);
            let mut busy = 0u64;
            for (i, s) in snap.iter().enumerate() {
                if taken & s.bit == 0 {
                    continue;
                }
                if s.run_ready(&self.0) {
                    last_progress = Some(i);
                }
                if !s.is_idle() {
                    busy |= s.bit;
                    first_stuck.get_or_insert(i);
                }
            }
            // streams enqueued on during the round (a host callback's
            // enqueue, another thread's) set their bits meanwhile
            let fresh = self.0.active.fetch_or(busy, Ordering::AcqRel);
            self.0.flush_hooks();
            progressed |= last_progress.is_some();
            match (first_stuck, last_progress) {
                (Some(stuck), Some(last)) if stuck < last => {}
                (_, Some(_)) if fresh & !busy != 0 => {}
                _ => break,
            }
        }
        // nobody drives until the caller polls again
        self.0.release_hooks();
        drop(snap);
        if progressed {
            self.0.done.notify();
        }
        progressed
    }

    /// The head task of every stream that still has queued tasks.
    pub fn blocked_tasks(&self) -> Vec<BlockedTask> {
        let v = self.0.streams.lock().unwrap_or_else(|p| p.into_inner());
        v.iter()
            .filter_map(Weak::upgrade)
            .filter_map(|s| s.blocked_head())
            .collect()
    }

    /// Whether any stream of the device has unfinished tasks.
    pub fn has_work(&self) -> bool {
        self.0.has_work()
    }

    /// Tasks enqueued on the device's streams and not yet completed, all
    /// streams together. Between polls (the simulator asks before it
    /// issues a rank's next stages) it reads only the streams that can
    /// have tasks (see `DeviceInner::active`), not every stream of a
    /// multi-channel plan.
    pub fn outstanding_tasks(&self) -> u64 {
        self.0
            .with_busy_streams(|busy| busy.fold(0, |n, s| n + s.outstanding()))
    }

    /// Whether a task of any of the device's streams has failed, ever
    /// (a stream's [`StreamProgress::failed_at`](super::StreamProgress),
    /// for all of them at once).
    pub fn any_stream_failed(&self) -> bool {
        self.0.any_failed.load(Ordering::Acquire)
    }

    /// Work completed so far.
    pub fn stats(&self) -> DeviceStats {
        let s = &self.0.stats;
        DeviceStats {
            tasks: s.tasks.load(Ordering::Relaxed),
            reduce_bytes: s.reduce_bytes.load(Ordering::Relaxed),
            memcpy_bytes: s.memcpy_bytes.load(Ordering::Relaxed),
        }
    }

    /// Registers a link used by this rank: if any task of the device fails,
    /// the link's peer is told at once.
    pub fn register_link(&self, link: &Arc<dyn crate::link::Link>) {
        let mut v = self.0.links.lock().unwrap_or_else(|p| p.into_inner());
        v.retain(|w| w.strong_count() > 0);
        v.push(Arc::downgrade(link));
    }

    /// Tells `hook` whenever this device's driver is about to park and
    /// when it has woken (e.g. a TCP node, whose sockets the driver reads
    /// itself while it runs and a thread of the node's while it sleeps).
    pub fn add_park_hook(&self, hook: &Arc<dyn crate::link::ParkHook>) {
        let mut v = self.0.park_hooks.lock().unwrap_or_else(|p| p.into_inner());
        v.retain(|w| w.strong_count() > 0);
        v.push(Arc::downgrade(hook));
        self.0.has_park_hooks.store(true, Ordering::Release);
        hook.set_flush_request(self.0.flush.clone());
    }

    /// Watches peer process `peer` while this device's tasks wait: if it
    /// exits, the waits fail naming it (see the module docs).
    pub fn watch_peer(&self, peer: Arc<PeerProcess>) {
        let mut v = self.0.watched.lock().unwrap_or_else(|p| p.into_inner());
        if !v
            .iter()
            .any(|w| w.rank() == peer.rank() && w.pid() == peer.pid())
        {
            v.push(peer);
        }
    }

    pub(crate) fn register(&self, s: &Arc<StreamInner>) {
        let mut v = self.0.streams.lock().unwrap_or_else(|p| p.into_inner());
        v.retain(|w| w.strong_count() > 0);
        v.push(Arc::downgrade(s));
        self.0.streams_gen.fetch_add(1, Ordering::Release);
    }
}

/// `timeout` as stored in `DeviceInner::exec_timeout_ns`.
fn timeout_ns(timeout: Option<Duration>) -> u64 {
    timeout.map_or(u64::MAX, |t| {
        t.as_nanos().min(u128::from(u64::MAX - 1)) as u64
    })
}

/// A peer said gone: its rank and, where known, its process id and host.
type GonePeer = (u32, Option<(u32, String)>);

/// A [`Device::quiet_waits`] guard: the device's drivers park without
/// spinning or yielding until it is dropped.
#[derive(Debug)]
pub struct QuietWaits(Device);

impl Drop for QuietWaits {
    fn drop(&mut self) {
        self.0 .0.quiet.fetch_sub(1, Ordering::Relaxed);
    }
}

/// What [`Device::on_stream_failure`] calls: the failed stream's id and
/// its error.
pub type FailureHook = std::sync::Arc<dyn Fn(u64, &HcclError) + Send + Sync>;

impl DeviceInner {
    /// How long an idle driver spins now.
    pub(crate) fn spin(&self) -> Duration {
        if self.is_quiet() {
            return Duration::ZERO;
        }
        Duration::from_nanos(self.spin_ns.load(Ordering::Relaxed))
    }

    /// The bound on waits in force (see [`Device::set_exec_timeout`]).
    pub(crate) fn exec_timeout(&self) -> Option<Duration> {
        match self.exec_timeout_ns.load(Ordering::Relaxed) {
            u64::MAX => None,
            ns => Some(Duration::from_nanos(ns)),
        }
    }

    fn is_quiet(&self) -> bool {
        self.quiet.load(Ordering::Relaxed) > 0
    }

    /// How many times an idle driver yields before it parks now.
    fn yields(&self) -> u32 {
        if self.is_quiet() {
            0
        } else {
            self.config.yields
        }
    }

    /// Calls the failure hooks for stream `stream`, failed with `e`.
    pub(crate) fn stream_failed(&self, stream: u64, e: &HcclError) {
        self.any_failed.store(true, Ordering::Release);
        let hooks: Vec<FailureHook> = self
            .failure_hooks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        for h in hooks {
            h(stream, e);
        }
    }

    /// Tells every registered link's peer that this rank failed.
    pub(crate) fn abort_links(&self, reason: &str) {
        let links: Vec<_> = self
            .links
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .filter_map(Weak::upgrade)
            .collect();
        for l in links {
            l.abort(reason);
        }
    }

    /// The first peer found gone — a watched process that exited, a link
    /// whose transport knows its peer is gone — or else the first failure
    /// a peer reported on a link. One `poll` per watched process and per
    /// shared-memory link; asked only while waits last.
    fn lost_peer(&self) -> Option<HcclError> {
        let watched: Vec<_> = self
            .watched
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let links: Vec<_> = self
            .links
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .filter_map(Weak::upgrade)
            .collect();
        let declared = self
            .declared_gone
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        if let Some(p) = watched
            .iter()
            .find(|p| p.is_gone() || declared.iter().any(|(r, _)| *r == p.rank()))
        {
            let lost = p.lost_error();
            // a rank that failed and then exited said why first: keep it
            // (it names the peer lost first)
            let said = links
                .iter()
                .filter(|l| l.remote_rank() == p.rank())
                .find_map(|l| l.health().err());
            return Some(match said {
                Some(why) => HcclError::remote(format!(
                    "{}, after reporting: {}",
                    lost.message(),
                    why.message()
                ))
                .peer(p.rank()),
                None => lost,
            });
        }
        if let Some((r, process)) = declared.first() {
            // a peer not watched here (another host): its link says more
            // once it reads the end of its stream
            let (pid, host) = match process {
                Some((pid, host)) => (Some(*pid), host.as_str()),
                None => (None, ""),
            };
            return Some(
                links
                    .iter()
                    .filter(|l| l.remote_rank() == *r)
                    .find_map(|l| l.peer_lost())
                    .unwrap_or_else(|| {
                        crate::link::lost_peer_error(*r, pid, host, "exited or was killed")
                    }),
            );
        }
        links
            .iter()
            .find_map(|l| l.peer_lost())
            // a peer that failed told this rank: whatever this rank waits
            // for (another peer, another stream) depends on the failed op
            .or_else(|| links.iter().find_map(|l| l.health().err()))
    }

    /// Fails every stream in `streams` that has tasks outstanding with the
    /// [`Device::fail_all`] error; returns whether any had.
    fn fail_streams(&self, streams: &[Driven]) -> bool {
        let Some(err) = self
            .failed_all
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
        else {
            return false;
        };
        let mut any = false;
        for s in streams.iter().filter(|s| !s.is_idle()) {
            let mut e = err.clone();
            if let Some(b) = s.blocked_head() {
                e = HcclError::from_code(
                    err.code(),
                    format!(
                        "{}; this rank was waiting for {} at step {}",
                        err.message(),
                        b.what,
                        b.step
                    ),
                );
                if let Some(l) = &b.label {
                    e = e.tag(l.tag.clone());
                }
            }
            // as a failed task does: the head goes, then `fail` discards
            // the rest and counts the head too
            let mut released = super::task::Released::default();
            let popped = s.lock_queue().pop(&mut released);
            drop(released);
            if popped {
                s.fail(e.rank(self.id), self);
                any = true;
            }
        }
        if any {
            self.done.notify();
        }
        any
    }

    /// Fails the waiting task of every stream in `streams` with `lost` (a
    /// lost peer), each error saying what that stream was waiting for, and
    /// tells every peer.
    fn fail_lost(&self, streams: &[Driven], lost: &HcclError) {
        let lost_rank = lost.context().peer;
        let mut first: Option<String> = None;
        for s in streams {
            let Some(b) = s.blocked_head() else {
                continue;
            };
            let algo = b.label.as_ref().map_or("(none)", |l| l.algorithm.as_str());
            let mut e = HcclError::remote(format!(
                "{}; rank {} was waiting for {} at step {} of algorithm {algo}",
                lost.message(),
                b.label.as_ref().map_or(self.id, |l| l.rank),
                b.what,
                b.step
            ));
            if let Some(l) = &b.label {
                e = e.rank(l.rank).tag(l.tag.clone());
            }
            e = e.rank(self.id);
            if let Some(p) = lost_rank.or(b.peer) {
                e = e.peer(p);
            }
            tracing::error!(error = %e, "a peer is gone; failing the stream's tasks");
            first.get_or_insert_with(|| e.to_string());
            // as a failed task does: the head goes, then `fail` discards
            // the rest and counts the head too
            let mut released = super::task::Released::default();
            s.lock_queue().pop(&mut released);
            drop(released);
            s.fail(e, self);
        }
        self.abort_links(&first.unwrap_or_else(|| lost.to_string()));
        self.done.notify();
    }

    /// Runs tasks of all streams until `done()` holds. The caller holds the
    /// driver lock, whose Vec is reused as the stream snapshot.
    pub(crate) fn drive_until(&self, snapshot: &mut Vec<Driven>, done: &dyn Fn() -> bool) {
        self.drive_until_or(snapshot, done, None);
    }

    /// [`drive_until`](Self::drive_until), also returning once `deadline`
    /// has passed while nothing progresses (a park never outlasts it), so
    /// a caller can look at something else (pending signals) and drive on.
    pub(crate) fn drive_until_or(
        &self,
        snapshot: &mut Vec<Driven>,
        done: &dyn Fn() -> bool,
        deadline: Option<Instant>,
    ) {
        let mut idle_since: Option<Instant> = None;
        // since when no task has progressed (unlike `idle_since`, not reset
        // by parks), and when peers are next checked
        let mut stalled_since: Option<Instant> = None;
        let mut next_watch: Option<Instant> = None;
        let mut yields = 0u32;
        // The snapshot is kept between drives (re-reading it costs a lock
        // and an upgrade per stream on every synchronize); streams whose
        // every handle was dropped leave it here, so their tasks never run.
        let mut gen = match self.poll_gen.load(Ordering::Relaxed) {
            u64::MAX => None,
            g => Some(g),
        };
        snapshot.retain(|s| Arc::strong_count(&s.stream) > 1);
        let finish = |gen: Option<u64>| {
            self.poll_gen
                .store(gen.unwrap_or(u64::MAX), Ordering::Relaxed);
            // this driver stops here, and no other may start for a long
            // time: what the round gathered must not wait for it
            self.release_hooks();
        };
        loop {
            if done() {
                finish(gen);
                return;
            }
            // About to park: register as a sleeper before this round's
            // look, so whatever a peer changes after the look wakes us (see
            // EventCount) and what it changed before, the look sees.
            let waiter = (yields >= self.yields()).then(|| self.events.prepare_wait());
            self.refresh(snapshot, &mut gen);
            let mut progressed = false;
            if self.has_failed_all.load(Ordering::Relaxed) {
                progressed |= self.fail_streams(snapshot);
            }
            for s in snapshot.iter() {
                progressed |= s.run_ready(self);
            }
            self.flush_hooks();
            if progressed {
                drop(waiter);
                if done() {
                    // the caller wakes other synchronizers once it has
                    // released the driver lock
                    finish(gen);
                    return;
                }
                self.done.notify();
                idle_since = None;
                stalled_since = None;
                next_watch = None;
                yields = 0;
                continue;
            }
            if done() {
                finish(gen);
                return;
            }
            let now = Instant::now();
            if deadline.is_some_and(|d| now >= d) {
                drop(waiter);
                // the caller drives again in a moment, but this call's
                // stall clock starts afresh: look for a dead peer now,
                // so slices shorter than WATCH_AFTER still notice one
                if stalled_since.is_some_and(|s| now - s >= WATCH_AFTER / 2) {
                    if let Some(lost) = self.lost_peer() {
                        self.fail_lost(snapshot, &lost);
                    }
                }
                finish(gen);
                return;
            }
            let since = *idle_since.get_or_insert(now);
            if now - since < self.spin() {
                crate::sync::spin_loop();
                continue;
            }
            // Yield before parking: with more ranks than cores the peer
            // that will unblock us may be waiting for this core, and a
            // yield hands it over for a fraction of a park/wake round
            // trip (two futex calls and a wakeup on each side). 64 is
            // enough that 4 ranks on 2 cores stop parking between ops
            // (26k futex calls per 20k 8-byte allreduces with 8; ~200
            // with 64) while an idle rank still parks within ~100 µs.
            if yields < self.yields() {
                yields += 1;
                crate::sync::yield_now();
                continue;
            }
            // registered at the top of this round: the yields are over
            let Some(waiter) = waiter else {
                continue;
            };
            // Nothing runnable: fail overdue waits, else park until woken or
            // the earliest deadline.
            let mut earliest: Option<Instant> = None;
            let mut failed = false;
            for s in snapshot.iter() {
                match s.check_timeout(self, now, self.exec_timeout()) {
                    Ok(Some(d)) => earliest = Some(earliest.map_or(d, |e: Instant| e.min(d))),
                    Ok(None) => {}
                    Err(()) => failed = true,
                }
            }
            if failed {
                self.done.notify();
                continue;
            }
            // A dead peer wakes no one: once the wait has lasted a while,
            // look for one now and then (see the module docs).
            let stalled = now - *stalled_since.get_or_insert(now);
            // a peer said gone (Device::peer_gone): look sooner, but not at
            // once: a peer that exits right after its op completed leaves
            // data its slower peers still read (an AIV entry in a mapped
            // segment), and their op completes within microseconds
            let watch_after = if self.peers_suspect.load(Ordering::Relaxed) {
                SUSPECT_AFTER
            } else {
                WATCH_AFTER
            };
            if stalled >= watch_after && next_watch.is_none_or(|t| now >= t) {
                // said gone but not yet seen gone (its process exits a
                // moment after its sockets close): look again soon
                next_watch = Some(now + watch_after.min(WATCH_EVERY));
                if let Some(lost) = self.lost_peer() {
                    drop(waiter);
                    self.fail_lost(snapshot, &lost);
                    continue;
                }
            }
            // Wake at least every second: cheap, and a safety net should a
            // transport ever miss a wakeup; while waiting, in time for the
            // next look for dead peers.
            let watch_at = next_watch.unwrap_or(now - stalled + watch_after);
            let mut cap = (now + Duration::from_secs(1)).min(watch_at.max(now));
            if let Some(d) = deadline {
                cap = cap.min(d);
            }
            self.tell_park_hooks(true);
            waiter.wait_until(earliest.map_or(cap, |e| e.min(cap)));
            self.tell_park_hooks(false);
            idle_since = None;
            yields = 0;
        }
    }

    /// Lets the park hooks write what they gathered this round, if any did.
    #[inline]
    fn flush_hooks(&self) {
        if self.flush.take() {
            let hooks = self.park_hooks.lock().unwrap_or_else(|p| p.into_inner());
            for h in hooks.iter().filter_map(Weak::upgrade) {
                h.flush();
            }
        }
    }

    /// Tells the park hooks the driver is about to park (`true`) or woke.
    fn tell_park_hooks(&self, parking: bool) {
        let hooks = self.park_hooks.lock().unwrap_or_else(|p| p.into_inner());
        for h in hooks.iter().filter_map(Weak::upgrade) {
            if parking {
                h.parking();
            } else {
                h.woke();
            }
        }
    }

    /// Tells the park hooks the driver stopped driving without parking
    /// ([`ParkHook::released`](crate::link::ParkHook::released)).
    #[inline]
    fn release_hooks(&self) {
        if !self.has_park_hooks.load(Ordering::Acquire) {
            return;
        }
        let hooks = self.park_hooks.lock().unwrap_or_else(|p| p.into_inner());
        for h in hooks.iter().filter_map(Weak::upgrade) {
            h.released();
        }
    }

    /// [`refresh`](Self::refresh) of the driver's kept snapshot `snap`
    /// (held under `driver`), whose generation `poll_gen` records between
    /// `poll_once` calls.
    fn refresh_kept(&self, snap: &mut Vec<Driven>) {
        let mut gen = match self.poll_gen.load(Ordering::Relaxed) {
            u64::MAX => None,
            g => Some(g),
        };
        self.refresh(snap, &mut gen);
        self.poll_gen
            .store(gen.unwrap_or(u64::MAX), Ordering::Relaxed);
    }

    /// Re-reads the live streams into `out` unless none registered since
    /// the generation in `seen` (None: read anyway).
    fn refresh(&self, out: &mut Vec<Driven>, seen: &mut Option<u64>) {
        let gen = self.streams_gen.load(Ordering::Acquire);
        if *seen == Some(gen) {
            return;
        }
        out.clear();
        let v = self.streams.lock().unwrap_or_else(|p| p.into_inner());
        out.extend(v.iter().filter_map(Weak::upgrade).map(Driven::new));
        *seen = Some(gen);
    }

    /// Whether any live stream has unfinished tasks. Walks the streams
    /// that may have any (a device-wide task counter would cost every
    /// completion an atomic read-modify-write too; this is asked far less
    /// often).
    pub(crate) fn has_work(&self) -> bool {
        self.with_busy_streams(|busy| {
            // (a loop: `any` needs a sized iterator)
            for s in busy {
                if !s.is_idle() {
                    return true;
                }
            }
            false
        })
    }

    /// Runs `f` over the streams that may have tasks. A caller between
    /// polls (the simulator asks of every rank after every pass) reads
    /// the driver's snapshot, only the streams whose bits are set in
    /// `active` (no `poll_once` holds bits taken while we hold the driver
    /// lock) and no upgrade per stream; while another thread drives, every
    /// live stream.
    fn with_busy_streams<R>(
        &self,
        f: impl FnOnce(&mut dyn Iterator<Item = &StreamInner>) -> R,
    ) -> R {
        if let Ok(mut snap) = self.driver.try_lock() {
            self.refresh_kept(&mut snap);
            let active = self.active.load(Ordering::Acquire);
            return f(&mut snap.iter().filter(|s| active & s.bit != 0).map(|s| &**s));
        }
        let live: smallvec::SmallVec<[_; 8]> = {
            let v = self.streams.lock().unwrap_or_else(|p| p.into_inner());
            v.iter().filter_map(Weak::upgrade).collect()
        };
        // dropped with the lock released: the last handle's drop may run
        // a queue's (and its links') destructors
        f(&mut live.iter().map(|s| &**s))
    }
}

impl Notify {
    /// A notify whose records wake `device`'s driver.
    pub fn new(device: &Device) -> Notify {
        Notify::with_waker(device.waker())
    }
}

/// A stream in a driver's snapshot, its bit in [`DeviceInner::active`]
/// beside the pointer: a walk that skips streams by their bits reads no
/// skipped stream's memory.
pub(crate) struct Driven {
    stream: Arc<StreamInner>,
    /// The stream's bit in `active`.
    bit: u64,
}

impl Driven {
    fn new(stream: Arc<StreamInner>) -> Self {
        Driven {
            bit: stream.active_bit(),
            stream,
        }
    }
}

impl std::ops::Deref for Driven {
    type Target = StreamInner;

    fn deref(&self) -> &StreamInner {
        &self.stream
    }
}

/// One turn of a device's worker driver: if any stream has work, drives
/// until none has and returns `None`; otherwise registers as a sleeper of
/// `events` and returns the registration to park on, having let go of the
/// device (so a device whose last handle is dropped meanwhile is freed).
///
/// Look, register, look again: an enqueue before the registration is seen
/// by the second look, one after it wakes the parked worker (see
/// [`EventCount`]). The loom model of this hand-off (`stream::loom_tests`)
/// runs this very function as its worker.
#[cfg_attr(all(loom, not(test)), allow(dead_code))] // under loom only the model runs it
pub(crate) fn worker_turn(inner: Arc<DeviceInner>, events: &EventCount) -> Option<Waiter<'_>> {
    let mut waiter = None;
    if !inner.has_work() {
        waiter = Some(events.prepare_wait());
    }
    let work = if mutation::active(Mutation::StreamNoRecheck) {
        waiter.is_none()
    } else {
        inner.has_work()
    };
    if work {
        drop(waiter);
        let mut snap = inner.driver.lock().unwrap_or_else(|p| p.into_inner());
        let mut local = std::mem::take(&mut *snap);
        inner.drive_until(&mut local, &|| !inner.has_work());
        *snap = local;
        drop(snap);
        inner.done.notify();
        return None;
    }
    waiter
}

/// Starts the worker thread of a [`ExecMode::Worker`] device: turns of
/// [`worker_turn`], parking between them (at most 200 ms: a safety net
/// should a wake ever be missed), until the device is dropped.
#[cfg(not(loom))]
fn spawn_worker(dev: &Device) {
    let weak = Arc::downgrade(&dev.0);
    let events = dev.0.events.clone();
    let name = format!("hccl-dev{}", dev.0.id);
    // the worker reports its thread id before its first turn, so that it
    // is known (for pinning) as soon as the device exists
    let (tid_tx, tid_rx) = std::sync::mpsc::sync_channel(1);
    let spawned = std::thread::Builder::new().name(name).spawn(move || {
        let _ = tid_tx.send(nix::unistd::gettid().as_raw());
        loop {
            let Some(inner) = weak.upgrade() else { return };
            if let Some(w) = worker_turn(inner, &events) {
                w.wait_until(Instant::now() + Duration::from_millis(200));
            }
        }
    });
    match spawned {
        Ok(_) => {
            if let Ok(tid) = tid_rx.recv() {
                let _ = dev.0.worker_tid.set(tid);
            }
        }
        Err(e) => {
            tracing::error!(error = %e, "could not start device worker thread; falling back to inline driving")
        }
    }
}

/// Under loom a worker would be a thread outside the model: a model runs
/// [`worker_turn`] from a thread of its own instead.
#[cfg(loom)]
fn spawn_worker(_dev: &Device) {}

//! The flight recorder: a fixed ring of a communicator's last ops (in the
//! spirit of PyTorch's NCCL flight recorder), dumped as JSON — one file per
//! rank — when a stream of the communicator fails (a timeout, a lost or
//! failing peer), when the communicator is aborted, on `SIGUSR1`, and on
//! request. `hccl-trace` reads the dumps of all ranks and says which op
//! did not complete everywhere and who never joined it.
//!
//! Recording costs one uncontended lock and a slot overwrite per op (no
//! allocation: the op's label and stream are reference-counted handles).
//! An op's state is not tracked by tasks of its own: its tasks are those
//! enqueued on its stream between two marks, and the stream's progress
//! counters (`Stream::progress`) say, when asked, whether they ran.
//!
//! Ops replayed from a captured graph are not recorded (the replay skips
//! the framework); their capture is, with the state `captured`.

use hccl_algorithm::{OpParam, OpType};
use hccl_platform::{stamp, Device, HcclError, OpLabel, ReduceOp, Stamp, StampClock, Stream};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, Weak};

/// Default number of entries (`HCCL_RS_FR_BUFFER_SIZE`).
pub const DEFAULT_FR_BUFFER_SIZE: usize = 2000;

/// Version of the dump format.
pub const FR_DUMP_VERSION: u32 = 1;

/// One recorded op.
struct Slot {
    seq: u64,
    op: OpType,
    /// Index into `Ring::labels`.
    label: u32,
    count: u64,
    dtype: hccl_platform::DataType,
    reduce_op: ReduceOp,
    root: u32,
    peer: u32,
    /// Index into `Ring::streams`.
    stream: u32,
    /// The op's tasks: enqueued after `start`, up to `end`.
    start: u64,
    end: u64,
    captured: bool,
    issued: Stamp,
    /// When the recorder first saw it completed.
    completed: Option<Stamp>,
}

/// The ring and what the recorder learned of failures.
struct Ring {
    slots: Vec<Slot>,
    /// Where the next op goes once the ring is full.
    next: usize,
    /// The oldest op (by sequence number) not yet seen completed.
    open: u64,
    seq: u64,
    failures: Vec<(u64, String)>,
    /// The streams and labels of the recorded ops, each held once (a
    /// communicator uses a few of each): a slot names them by index, so
    /// recording touches no reference count.
    streams: Vec<Stream>,
    labels: Vec<Arc<OpLabel>>,
}

impl Ring {
    /// The index of `stream` in `streams`, added if new.
    fn stream_index(&mut self, stream: &Stream) -> u32 {
        let id = stream.id();
        match self.streams.iter().rposition(|s| s.id() == id) {
            Some(i) => i as u32,
            None => {
                self.streams.push(Stream::clone(stream));
                (self.streams.len() - 1) as u32
            }
        }
    }

    /// The index of `label` in `labels`, added if new (the same label
    /// object as the last op's in a loop: one pointer comparison).
    fn label_index(&mut self, label: &Arc<OpLabel>) -> u32 {
        match self.labels.iter().rposition(|l| Arc::ptr_eq(l, label)) {
            Some(i) => i as u32,
            None => {
                self.labels.push(Arc::clone(label));
                (self.labels.len() - 1) as u32
            }
        }
    }
}

/// A communicator's flight recorder (see the module docs).
pub struct FlightRecorder {
    capacity: usize,
    ring: Mutex<Ring>,
    comm: String,
    rank: u32,
    size: u32,
    dump_dir: Option<PathBuf>,
    device: Device,
}

/// One op of a dump.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FrEntry {
    /// The op's sequence number on its communicator (the same op has the
    /// same number on every rank that issued the same ops).
    pub seq: u64,
    /// HCCL's op name (`AllReduce`, ...).
    pub op: String,
    /// The op tag.
    pub tag: String,
    /// Elements.
    pub count: u64,
    /// Element type.
    pub dtype: String,
    /// Reduction (reducing ops only).
    pub reduce_op: Option<String>,
    /// Root (rooted ops only).
    pub root: Option<u32>,
    /// Peer (Send / Receive only).
    pub peer: Option<u32>,
    /// The executor that ran it.
    pub algorithm: String,
    /// The stream it was issued on.
    pub stream: u64,
    /// `enqueued` (no task ran yet), `started`, `completed`, `failed`
    /// (the stream failed in it), `discarded` (the stream failed before
    /// it), or `captured` (recorded into a graph, not run).
    pub state: String,
    /// When it was issued, µs since the Unix epoch.
    pub issued_us: f64,
    /// When the recorder saw it completed (at or after the real end), µs
    /// since the Unix epoch.
    pub completed_us: Option<f64>,
    /// For a started op whose stream waits: the task it waits in (its
    /// step, link verb and peer).
    pub waiting: Option<FrWait>,
    /// The stream's error, for a failed op.
    pub error: Option<String>,
}

/// Where a started op waits.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FrWait {
    /// The algorithm step.
    pub step: u32,
    /// The link verb (`RxWaitDone`, ...), for link tasks.
    pub verb: Option<String>,
    /// The peer, for link tasks.
    pub peer: Option<u32>,
    /// What the task does, in words.
    pub what: String,
}

/// One rank's dump.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FrDump {
    /// [`FR_DUMP_VERSION`].
    pub version: u32,
    /// The communicator's name (the same on every rank).
    pub comm: String,
    /// This rank.
    pub rank: u32,
    /// Ranks of the communicator.
    pub size: u32,
    /// The host name.
    pub host: String,
    /// The process id.
    pub pid: u32,
    /// Why it was dumped.
    pub reason: String,
    /// When, µs since the Unix epoch.
    pub dumped_us: f64,
    /// Ops issued in total (the ring keeps the last `entries.len()`).
    pub ops_issued: u64,
    /// Stream failures seen: (stream, error).
    pub failures: Vec<(u64, String)>,
    /// The recorded ops, oldest first.
    pub entries: Vec<FrEntry>,
}

impl FlightRecorder {
    /// A recorder of `capacity` entries for rank `rank` of `size` of the
    /// communicator `comm` on `device` (its streams' failures dump it when
    /// `dump_dir` is set). `None` for a capacity of 0 (recording off).
    pub fn new(
        capacity: usize,
        comm: &str,
        (rank, size): (u32, u32),
        device: &Device,
        dump_dir: Option<PathBuf>,
    ) -> Option<Arc<Self>> {
        if capacity == 0 {
            return None;
        }
        hccl_platform::init_clock();
        let fr = Arc::new(FlightRecorder {
            capacity,
            ring: Mutex::new(Ring {
                slots: Vec::with_capacity(capacity.min(4096)),
                next: 0,
                open: 1,
                seq: 0,
                failures: Vec::new(),
                streams: Vec::new(),
                labels: Vec::new(),
            }),
            comm: comm.to_owned(),
            rank,
            size,
            dump_dir,
            device: device.clone(),
        });
        let weak = Arc::downgrade(&fr);
        device.on_stream_failure(Arc::new(move |stream, e: &HcclError| {
            if let Some(fr) = weak.upgrade() {
                fr.stream_failed(stream, e);
            }
        }));
        registry_add(&fr);
        Some(fr)
    }

    /// Records `param`, issued as the tasks after `start` up to the
    /// stream's current end, run by the executor of `label`.
    pub fn record(&self, param: &OpParam<'_>, label: &Arc<OpLabel>, start: u64) {
        let stream: &Stream = &param.stream;
        let captured = stream.is_capturing();
        let end = stream.progress().enqueued;
        let now = stamp();
        let mut r = self.ring.lock().unwrap_or_else(|p| p.into_inner());
        r.seq += 1;
        let (label, stream_ix) = (r.label_index(label), r.stream_index(stream));
        let slot = Slot {
            seq: r.seq,
            op: param.op_type,
            label,
            count: param.count,
            dtype: param.dtype,
            reduce_op: param.reduce_op,
            root: param.root,
            peer: param.peer,
            stream: stream_ix,
            start,
            end,
            captured,
            issued: now,
            completed: None,
        };
        if r.slots.len() < self.capacity {
            r.slots.push(slot);
        } else {
            let i = r.next;
            r.slots[i] = slot;
            r.next = (i + 1) % self.capacity;
        }
        // note completions from the oldest open op on, up to this one
        // (amortised: each op is passed once). Op `seq` sits in slot
        // (seq − 1) mod capacity while it is among the last `len`.
        let (newest, len) = (r.seq, r.slots.len() as u64);
        r.open = r.open.max(newest + 1 - len);
        while r.open <= newest {
            let i = ((r.open - 1) % self.capacity as u64) as usize;
            let s = &r.slots[i];
            if s.completed.is_none() && !s.captured {
                if r.streams[s.stream as usize].progress().completed < s.end {
                    break;
                }
                r.slots[i].completed = Some(now);
            }
            r.open += 1;
        }
    }

    /// A stream of the device failed: remember it, and dump if a dump
    /// directory is set.
    fn stream_failed(&self, stream: u64, e: &HcclError) {
        self.ring
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .failures
            .push((stream, e.to_string()));
        if self.dump_dir.is_some() {
            self.dump_auto(&format!("stream {stream} failed: {e}"));
        }
    }

    /// Dumps into the dump directory, if one is set (an abort, a failure,
    /// `SIGUSR1`); errors are logged, not returned (the caller is failing
    /// already).
    pub fn dump_auto(&self, reason: &str) {
        if let Some(dir) = &self.dump_dir {
            match self.dump_to_dir(dir, reason) {
                Ok(path) => {
                    tracing::warn!(path = %path.display(), reason, "flight recorder dumped")
                }
                Err(e) => tracing::error!(error = %e, "flight recorder dump failed"),
            }
        }
    }

    /// Writes the dump into `dir` as `hccl_fr_<comm>_rank<r>.json`;
    /// returns the file's path.
    pub fn dump_to_dir(&self, dir: &Path, reason: &str) -> hccl_platform::Result<PathBuf> {
        let safe = crate::communicator::file_safe(&self.comm);
        let path = dir.join(format!("hccl_fr_{safe}_rank{}.json", self.rank));
        self.dump_to(&path, reason)?;
        Ok(path)
    }

    /// Writes the dump to `path` (JSON, see [`FrDump`]).
    pub fn dump_to(&self, path: &Path, reason: &str) -> hccl_platform::Result<()> {
        let dump = self.snapshot(reason);
        let json = serde_json::to_value(&dump)
            .map_err(|e| HcclError::internal(format!("flight recorder: {e}")))?;
        crate::communicator::write_json_file(path, &json)
    }

    /// The dump as it stands.
    pub fn snapshot(&self, reason: &str) -> FrDump {
        let r = self.ring.lock().unwrap_or_else(|p| p.into_inner());
        let blocked = self.device.blocked_tasks();
        // wall-clock times, so ranks' dumps line up
        let clock = StampClock::new();
        let us = |t: Stamp| clock.wall_us(t);
        let n = r.slots.len();
        let first = if n < self.capacity { 0 } else { r.next };
        let errors: std::collections::HashMap<u64, &str> =
            r.failures.iter().map(|(s, e)| (*s, e.as_str())).collect();
        let entries = (0..n)
            .map(|k| {
                let s = &r.slots[(first + k) % n];
                let stream = &r.streams[s.stream as usize];
                let label = &r.labels[s.label as usize];
                let progress = stream.progress();
                // a failure counts the failed and discarded tasks as
                // completed: where it struck decides first
                let state = if s.captured {
                    "captured"
                } else if let Some(f) = progress.failed_at.filter(|&f| f < s.end) {
                    if f >= s.start {
                        "failed"
                    } else {
                        "discarded"
                    }
                } else if s.end <= s.start || progress.completed >= s.end {
                    "completed"
                } else if progress.completed > s.start {
                    "started"
                } else {
                    "enqueued"
                };
                let waiting = (state == "started")
                    .then(|| blocked.iter().find(|b| b.stream == stream.id()))
                    .flatten()
                    .map(|b| FrWait {
                        step: b.step,
                        verb: b.verb.map(str::to_owned),
                        peer: b.peer,
                        what: b.what.clone(),
                    });
                let reduces = matches!(
                    s.op,
                    OpType::AllReduce
                        | OpType::Reduce
                        | OpType::ReduceScatter
                        | OpType::ReduceScatterV
                );
                let rooted = matches!(
                    s.op,
                    OpType::Broadcast | OpType::Reduce | OpType::Scatter | OpType::Gather
                );
                let p2p = matches!(s.op, OpType::Send | OpType::Receive);
                FrEntry {
                    seq: s.seq,
                    op: format!("{:?}", s.op),
                    tag: label.tag.clone(),
                    count: s.count,
                    dtype: s.dtype.to_string(),
                    reduce_op: reduces.then(|| s.reduce_op.to_string()),
                    root: rooted.then_some(s.root),
                    peer: p2p.then_some(s.peer),
                    algorithm: label.algorithm.clone(),
                    stream: stream.id(),
                    state: state.to_owned(),
                    issued_us: us(s.issued),
                    completed_us: match state {
                        "completed" => Some(us(s.completed.unwrap_or_else(stamp))),
                        _ => None,
                    },
                    waiting,
                    error: (state == "failed")
                        .then(|| errors.get(&stream.id()).map(|e| e.to_string()))
                        .flatten(),
                }
            })
            .collect();
        FrDump {
            version: FR_DUMP_VERSION,
            comm: self.comm.clone(),
            rank: self.rank,
            size: self.size,
            host: std::fs::read_to_string("/proc/sys/kernel/hostname")
                .map(|h| h.trim().to_owned())
                .unwrap_or_default(),
            pid: std::process::id(),
            reason: reason.to_owned(),
            dumped_us: us(stamp()),
            ops_issued: r.seq,
            failures: r.failures.clone(),
            entries,
        }
    }
}

/// Live recorders, for `SIGUSR1` dumps.
static REGISTRY: Mutex<Vec<Weak<FlightRecorder>>> = Mutex::new(Vec::new());

fn registry_add(fr: &Arc<FlightRecorder>) {
    let mut v = REGISTRY.lock().unwrap_or_else(|p| p.into_inner());
    v.retain(|w| w.strong_count() > 0);
    v.push(Arc::downgrade(fr));
    if fr.dump_dir.is_some() {
        crate::flight_signal::install();
    }
}

/// Dumps every live recorder of this process that has a dump directory
/// (what `SIGUSR1` does); returns how many were written.
pub fn dump_all(reason: &str) -> usize {
    let live: Vec<Arc<FlightRecorder>> = REGISTRY
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .iter()
        .filter_map(Weak::upgrade)
        .collect();
    let mut n = 0;
    for fr in live {
        if fr.dump_dir.is_some() {
            fr.dump_auto(reason);
            n += 1;
        }
    }
    n
}

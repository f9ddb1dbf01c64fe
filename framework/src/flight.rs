//! The flight recorder: a fixed ring of a communicator's last ops (in the
//! spirit of PyTorch's NCCL flight recorder), dumped as JSON — one file per
//! rank — when a stream of the communicator fails (a timeout, a lost or
//! failing peer), when the communicator is aborted, on `SIGUSR1`, and on
//! request. `hccl-trace` reads the dumps of all ranks and says which op
//! did not complete everywhere and who never joined it.
//!
//! Recording takes no lock and allocates nothing: ops are recorded by one
//! writer at a time (the communicator's state lock, which an op holds
//! while it is issued, serialises them), whose own bookkeeping
//! ([`FrWriter`]) lives under that lock; each slot of the ring is a
//! seqlock of relaxed atomics (plain stores on x86), so a dump from
//! another thread (a failing stream's driver, `SIGUSR1`) reads consistent
//! slots while ops go on. An op's state is not tracked by tasks of its
//! own: its tasks are those enqueued on its stream between two marks, and
//! the stream's progress counters (`Stream::progress`) say, when asked,
//! whether they ran.
//!
//! Ops replayed from a captured graph are not recorded (the replay skips
//! the framework); their capture is, with the state `captured`.

use hccl_algorithm::{OpParam, OpType};
use hccl_platform::{
    stamp, DataType, Device, HcclError, OpLabel, ReduceOp, Stamp, StampClock, Stream,
};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::sync::atomic::{fence, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

/// Default number of entries (`HCCL_RS_FR_BUFFER_SIZE`).
pub const DEFAULT_FR_BUFFER_SIZE: usize = 2000;

/// Version of the dump format.
pub const FR_DUMP_VERSION: u32 = 1;

/// Every op type, by the index a slot stores.
const OP_TYPES: [OpType; 13] = OpType::ALL;

fn op_index(op: OpType) -> u64 {
    OP_TYPES.iter().position(|&o| o == op).unwrap_or(0) as u64
}

/// A slot's words (see [`Slot`]).
const W_SEQ: usize = 0;
/// op index (bits 0..8), dtype code (8..16), reduce-op code (16..24),
/// captured (bit 24), label index (32..48), stream index (48..64).
const W_DESC: usize = 1;
const W_COUNT: usize = 2;
/// root (low 32 bits), peer (high 32).
const W_ROOT_PEER: usize = 3;
/// The op's tasks: enqueued after `W_START`, up to `W_END`.
const W_START: usize = 4;
const W_END: usize = 5;
const W_ISSUED: usize = 6;
/// When the writer first saw some of its tasks done (0: not yet).
const W_STARTED: usize = 7;
/// When the writer first saw it completed (0: not yet).
const W_COMPLETED: usize = 8;
const WORDS: usize = 9;
const CAPTURED: u64 = 1 << 24;
/// `W_END` of an op being issued (its tasks are not all enqueued yet).
const END_PENDING: u64 = u64::MAX - 1;
/// `W_END` of an op that failed when issued (nothing of it was left
/// queued).
const END_REFUSED: u64 = u64::MAX;

/// One recorded op: a version (odd while the writer rewrites the slot)
/// and the op's words. The started and completed stamps are later
/// single-word updates outside the version.
#[derive(Default)]
struct Slot {
    version: AtomicU64,
    w: [AtomicU64; WORDS],
}

/// An entry begun by [`FlightRecorder::begin`], to complete with
/// [`FlightRecorder::end`].
#[derive(Clone, Copy, Debug)]
pub struct FrTicket(usize);

/// A slot as a dump reads it.
struct Copied {
    seq: u64,
    op: OpType,
    label: u32,
    count: u64,
    dtype: DataType,
    reduce_op: ReduceOp,
    root: u32,
    peer: u32,
    stream: u32,
    start: u64,
    end: u64,
    captured: bool,
    issued: Stamp,
    started: Option<Stamp>,
    completed: Option<Stamp>,
}

/// The recorder's writer-side bookkeeping, kept by the communicator under
/// its state lock (so recording needs no lock of its own).
#[derive(Default)]
pub struct FrWriter {
    seq: u64,
    /// The slot the next op goes to (kept, not computed: a 64-bit
    /// division per op costs more than the rest of recording).
    next_slot: usize,
    /// The oldest op (by sequence number) not yet seen completed, and its
    /// slot.
    open: u64,
    open_slot: usize,
    /// The streams and labels of the recorded ops as the writer indexes
    /// them (the same as [`Shared`]'s, which readers use).
    streams: Vec<Stream>,
    labels: Vec<Arc<OpLabel>>,
}

/// What readers and the writer share under a lock: streams and labels
/// (appended to only when an op brings a new one, a handful per
/// communicator) and the failures seen.
#[derive(Default)]
struct Shared {
    streams: Vec<Stream>,
    labels: Vec<Arc<OpLabel>>,
    /// Stream failures: (stream, error, when).
    failures: Vec<(u64, String, Stamp)>,
}

/// A communicator's flight recorder (see the module docs).
pub struct FlightRecorder {
    capacity: usize,
    slots: Box<[Slot]>,
    /// Ops recorded (published after their slot is written).
    recorded: AtomicU64,
    shared: Mutex<Shared>,
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
    /// `issuing` (its tasks are being enqueued), `refused` (it failed
    /// when issued: nothing of it was queued), `enqueued` (no task ran
    /// yet), `started`, `completed`, `failed` (the stream failed in it),
    /// `discarded` (the stream failed before it), or `captured` (recorded
    /// into a graph, not run).
    pub state: String,
    /// When it was issued, µs since the Unix epoch.
    pub issued_us: f64,
    /// When the recorder first saw part of it done (it looks when later
    /// ops are recorded: `None` if it was first seen completed), µs since
    /// the Unix epoch.
    #[serde(default)]
    pub started_us: Option<f64>,
    /// When the recorder saw it completed (at or after the real end), µs
    /// since the Unix epoch.
    pub completed_us: Option<f64>,
    /// When its stream failed, for a failed op, µs since the Unix epoch.
    #[serde(default)]
    pub failed_us: Option<f64>,
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
        let slots: Box<[Slot]> = (0..capacity).map(|_| Slot::default()).collect();
        // Touch every page of the ring now: zeroed memory may come from
        // the allocator untouched (mapped to the zero page), and the first
        // pass of ops through the ring would take its page faults, one per
        // 51 ops (2,000 ops of an 8-byte Broadcast measured 0.22 µs per op
        // instead of 0.15 with a 16-entry ring). An atomic store is not
        // optimised away.
        for s in slots.iter() {
            s.version.store(0, Ordering::Relaxed);
        }
        let fr = Arc::new(FlightRecorder {
            capacity,
            slots,
            recorded: AtomicU64::new(0),
            shared: Mutex::new(Shared::default()),
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

    fn shared(&self) -> std::sync::MutexGuard<'_, Shared> {
        self.shared.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The index of `stream` among the writer's streams, added (here and
    /// for readers) if new. The last op's stream is checked first.
    fn stream_index(&self, w: &mut FrWriter, stream: &Stream) -> u64 {
        let id = stream.id();
        if let Some(i) = w.streams.iter().rposition(|s| s.id() == id) {
            return i as u64;
        }
        w.streams.push(Stream::clone(stream));
        self.shared().streams.push(Stream::clone(stream));
        (w.streams.len() - 1) as u64
    }

    /// The index of `label` among the writer's labels, added if new (the
    /// same label object as the last op's in a loop: one comparison).
    fn label_index(&self, w: &mut FrWriter, label: &Arc<OpLabel>) -> u64 {
        if let Some(i) = w.labels.iter().rposition(|l| Arc::ptr_eq(l, label)) {
            return i as u64;
        }
        w.labels.push(Arc::clone(label));
        self.shared().labels.push(Arc::clone(label));
        (w.labels.len() - 1) as u64
    }

    /// Records `param`, issued as the tasks after `start` up to the
    /// stream's current end, run by the executor of `label`. `w` is the
    /// writer's bookkeeping: the caller serialises recording (one writer
    /// at a time, with the same `w`).
    pub fn record(&self, w: &mut FrWriter, param: &OpParam<'_>, label: &Arc<OpLabel>, start: u64) {
        let t = self.begin(w, param, label, start);
        self.end(t, &param.stream, true);
    }

    /// Records `param` as it starts being issued (its first task will be
    /// task `start` of its stream); [`FlightRecorder::end`] completes the
    /// entry once it is issued. Recording before the op's tasks are
    /// enqueued puts the cost where a rank that is early waits for its
    /// peers anyway.
    pub fn begin(
        &self,
        w: &mut FrWriter,
        param: &OpParam<'_>,
        label: &Arc<OpLabel>,
        start: u64,
    ) -> FrTicket {
        let stream: &Stream = &param.stream;
        let end = END_PENDING;
        let now = stamp().ticks();
        w.seq += 1;
        let seq = w.seq;
        // indices past 16 bits (never in practice) read as the last one
        let label_ix = self.label_index(w, label).min(0xffff);
        let stream_ix = self.stream_index(w, stream).min(0xffff);
        let mut desc = op_index(param.op_type)
            | (param.dtype.code() as u64 & 0xff) << 8
            | (param.reduce_op.code() as u64 & 0xff) << 16
            | label_ix << 32
            | stream_ix << 48;
        if stream.is_capturing() {
            desc |= CAPTURED;
        }
        let cap = self.capacity as u64;
        let ticket = FrTicket(w.next_slot);
        let slot = &self.slots[w.next_slot];
        w.next_slot += 1;
        if w.next_slot == self.capacity {
            w.next_slot = 0;
        }
        // seqlock write: odd version, words, even version
        let v = slot.version.load(Ordering::Relaxed);
        slot.version.store(v + 1, Ordering::Relaxed);
        fence(Ordering::Release);
        let words: [u64; WORDS] = [
            seq,
            desc,
            param.count,
            param.root as u64 | (param.peer as u64) << 32,
            start,
            end,
            now,
            0,
            0,
        ];
        for (a, x) in slot.w.iter().zip(words) {
            a.store(x, Ordering::Relaxed);
        }
        slot.version.store(v + 2, Ordering::Release);
        self.recorded.store(seq, Ordering::Release);
        // note completions from the oldest open op on, up to this one
        // (amortised: each op is passed once); ops that left the ring
        // are not looked at
        let oldest = seq.saturating_sub(cap) + 1;
        if w.open < oldest {
            // the open ops left the ring: resume at the oldest one kept
            w.open = oldest;
            w.open_slot = ((oldest - 1) % cap) as usize;
        }
        while w.open <= seq {
            let s = &self.slots[w.open_slot].w;
            let d = s[W_DESC].load(Ordering::Relaxed);
            let end = s[W_END].load(Ordering::Relaxed);
            if s[W_COMPLETED].load(Ordering::Relaxed) == 0
                && d & CAPTURED == 0
                && end != END_REFUSED
            {
                let done = w.streams[(d >> 48) as usize].progress().completed;
                if done < end {
                    if done > s[W_START].load(Ordering::Relaxed)
                        && s[W_STARTED].load(Ordering::Relaxed) == 0
                    {
                        s[W_STARTED].store(now, Ordering::Relaxed);
                    }
                    break;
                }
                s[W_COMPLETED].store(now, Ordering::Relaxed);
            }
            w.open += 1;
            w.open_slot += 1;
            if w.open_slot == self.capacity {
                w.open_slot = 0;
            }
        }
        ticket
    }

    /// Completes the entry of [`FlightRecorder::begin`]: the op was issued
    /// on `stream` (its tasks end at the stream's current end) or, if not
    /// `issued`, failed when issued and left nothing queued.
    pub fn end(&self, ticket: FrTicket, stream: &Stream, issued: bool) {
        let end = if issued {
            stream.progress().enqueued
        } else {
            END_REFUSED
        };
        self.slots[ticket.0].w[W_END].store(end, Ordering::Release);
    }

    /// The recorded ops still in the ring, oldest first, each read
    /// consistently (a slot being rewritten meanwhile is read again).
    fn read_slots(&self) -> Vec<Copied> {
        let n = self.recorded.load(Ordering::Acquire);
        let cap = self.capacity as u64;
        let first = n.saturating_sub(cap) + 1;
        let mut out = Vec::with_capacity((n + 1 - first) as usize);
        for seq in first..=n {
            let slot = &self.slots[((seq - 1) % cap) as usize];
            let words = loop {
                let v1 = slot.version.load(Ordering::Acquire);
                if v1 % 2 == 1 {
                    std::hint::spin_loop();
                    continue;
                }
                let words: [u64; WORDS] =
                    std::array::from_fn(|i| slot.w[i].load(Ordering::Relaxed));
                fence(Ordering::Acquire);
                if slot.version.load(Ordering::Relaxed) == v1 {
                    break words;
                }
            };
            // the writer has moved past this op: it was overwritten
            if words[W_SEQ] != seq {
                continue;
            }
            let d = words[W_DESC];
            let opt = |x: u64| (x != 0).then(|| Stamp::from_ticks(x));
            out.push(Copied {
                seq,
                op: OP_TYPES[((d & 0xff) as usize).min(OP_TYPES.len() - 1)],
                dtype: DataType::from_code(((d >> 8) & 0xff) as u32).unwrap_or(DataType::Fp32),
                reduce_op: ReduceOp::from_code(((d >> 16) & 0xff) as u32).unwrap_or(ReduceOp::Sum),
                captured: d & CAPTURED != 0,
                label: ((d >> 32) & 0xffff) as u32,
                stream: (d >> 48) as u32,
                count: words[W_COUNT],
                root: words[W_ROOT_PEER] as u32,
                peer: (words[W_ROOT_PEER] >> 32) as u32,
                start: words[W_START],
                end: words[W_END],
                issued: Stamp::from_ticks(words[W_ISSUED]),
                started: opt(slot.w[W_STARTED].load(Ordering::Relaxed)),
                completed: opt(slot.w[W_COMPLETED].load(Ordering::Relaxed)),
            });
        }
        out
    }

    /// A stream of the device failed: remember it, and dump if a dump
    /// directory is set.
    fn stream_failed(&self, stream: u64, e: &HcclError) {
        self.shared()
            .failures
            .push((stream, e.to_string(), stamp()));
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
        let safe = crate::json_file::file_safe(&self.comm);
        let path = dir.join(format!("hccl_fr_{safe}_rank{}.json", self.rank));
        self.dump_to(&path, reason)?;
        Ok(path)
    }

    /// Writes the dump to `path` (JSON, see [`FrDump`]).
    pub fn dump_to(&self, path: &Path, reason: &str) -> hccl_platform::Result<()> {
        let dump = self.snapshot(reason);
        let json = serde_json::to_value(&dump)
            .map_err(|e| HcclError::internal(format!("flight recorder: {e}")))?;
        crate::json_file::write_json_file(path, &json)
    }

    /// The dump as it stands.
    pub fn snapshot(&self, reason: &str) -> FrDump {
        let r = self.shared();
        let copied = self.read_slots();
        let blocked = self.device.blocked_tasks();
        // wall-clock times, so ranks' dumps line up
        let clock = StampClock::new();
        let us = |t: Stamp| clock.wall_us(t);
        let errors: std::collections::HashMap<u64, (&str, Stamp)> = r
            .failures
            .iter()
            .map(|(s, e, t)| (*s, (e.as_str(), *t)))
            .collect();
        let head_blocked = |id: u64| blocked.iter().any(|b| b.stream == id);
        let entries = copied
            .iter()
            .filter(|s| {
                (s.stream as usize) < r.streams.len() && (s.label as usize) < r.labels.len()
            })
            .map(|s| {
                let stream = &r.streams[s.stream as usize];
                let label = &r.labels[s.label as usize];
                let progress = stream.progress();
                // a failure counts the failed and discarded tasks as
                // completed: where it struck decides first
                let state = if s.end == END_REFUSED {
                    "refused"
                } else if s.end == END_PENDING {
                    "issuing"
                } else if s.captured {
                    "captured"
                } else if let Some(f) = progress.failed_at.filter(|&f| f < s.end) {
                    if f >= s.start {
                        "failed"
                    } else {
                        "discarded"
                    }
                } else if s.end <= s.start || progress.completed >= s.end {
                    "completed"
                } else if progress.completed > s.start
                    || (progress.completed == s.start && head_blocked(stream.id()))
                {
                    // part done, or its first task is the stream's head
                    // and waits (a kernel: the whole op in one task)
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
                let (reduces, rooted, p2p) = (s.op.reduces(), s.op.rooted(), s.op.point_to_point());
                FrEntry {
                    seq: s.seq,
                    op: s.op.hccl_name().to_owned(),
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
                    started_us: s.started.map(us),
                    completed_us: match state {
                        "completed" => Some(us(s.completed.unwrap_or_else(stamp))),
                        _ => None,
                    },
                    failed_us: (state == "failed")
                        .then(|| errors.get(&stream.id()).map(|e| us(e.1)))
                        .flatten(),
                    waiting,
                    error: (state == "failed")
                        .then(|| errors.get(&stream.id()).map(|e| e.0.to_string()))
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
            ops_issued: self.recorded.load(Ordering::Acquire),
            failures: r.failures.iter().map(|(s, e, _)| (*s, e.clone())).collect(),
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
        crate::flight_signal::install(dump_all);
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

#[cfg(test)]
mod tests {
    use super::*;
    use hccl_algorithm::WorkflowMode;
    use hccl_platform::{DeviceConfig, DeviceMem};
    use std::borrow::Cow;

    fn param<'a>(stream: &'a Stream, mem: &'a DeviceMem, count: u64) -> OpParam<'a> {
        OpParam {
            tag: Cow::Owned(Arc::from("AllReduce_t")),
            op_type: OpType::AllReduce,
            stream: Cow::Borrowed(stream),
            input: Cow::Borrowed(mem),
            output: Cow::Borrowed(mem),
            count,
            dtype: DataType::Fp16,
            reduce_op: ReduceOp::Max,
            root: 0,
            mode: WorkflowMode::OpBase,
            send_v: None,
            recv_v: None,
            peer: 0,
        }
    }

    fn label() -> Arc<OpLabel> {
        Arc::new(OpLabel {
            tag: "AllReduce_t".into(),
            algorithm: "AllReduceRingExecutor".into(),
            rank: 1,
        })
    }

    #[test]
    fn the_ring_keeps_the_last_ops_in_order_with_their_arguments() {
        let device = Device::new(1, DeviceConfig::default());
        let stream = Stream::new(&device);
        let mem = DeviceMem::alloc(64).unwrap();
        let fr = FlightRecorder::new(3, "c", (1, 4), &device, None).unwrap();
        let (mut w, l) = (FrWriter::default(), label());
        for k in 1..=5u64 {
            fr.record(&mut w, &param(&stream, &mem, 10 * k), &l, 0);
        }
        let d = fr.snapshot("test");
        assert_eq!((d.rank, d.size, d.ops_issued), (1, 4, 5));
        let seqs: Vec<u64> = d.entries.iter().map(|e| e.seq).collect();
        assert_eq!(seqs, [3, 4, 5]);
        for e in &d.entries {
            assert_eq!(e.count, 10 * e.seq);
            assert_eq!((e.op.as_str(), e.dtype.as_str()), ("AllReduce", "fp16"));
            assert_eq!(e.reduce_op.as_deref(), Some("max"));
            assert_eq!(e.algorithm, "AllReduceRingExecutor");
            // no tasks: complete as soon as issued
            assert_eq!(e.state, "completed");
            assert!(e.completed_us.is_some() || e.seq == 5);
        }
    }

    #[test]
    fn a_dump_taken_while_ops_are_recorded_reads_whole_entries() {
        let device = Device::new(0, DeviceConfig::default());
        let stream = Stream::new(&device);
        let mem = DeviceMem::alloc(64).unwrap();
        let fr = FlightRecorder::new(64, "c", (0, 2), &device, None).unwrap();
        let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let reader = {
            let (fr, done) = (Arc::clone(&fr), Arc::clone(&done));
            std::thread::spawn(move || {
                let mut dumps = 0;
                while !done.load(Ordering::Relaxed) || dumps == 0 {
                    let d = fr.snapshot("racing");
                    for pair in d.entries.windows(2) {
                        // in order (an entry overwritten while the dump
                        // read the ring is left out)
                        assert!(pair[1].seq > pair[0].seq, "entries in order");
                    }
                    for e in &d.entries {
                        // the count and the sequence number are written
                        // together: a torn read would split them
                        assert_eq!(e.count, 7 * e.seq, "torn entry {e:?}");
                    }
                    dumps += 1;
                }
                dumps
            })
        };
        let (mut w, l) = (FrWriter::default(), label());
        for k in 1..=200_000u64 {
            fr.record(&mut w, &param(&stream, &mem, 7 * k), &l, 0);
        }
        done.store(true, Ordering::Relaxed);
        assert!(reader.join().unwrap() > 0);
    }
}

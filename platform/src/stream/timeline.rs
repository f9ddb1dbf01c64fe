//! Timelines: what each stream task of a device did and when (begin and
//! end, op, step, peer, bytes), kept while a timeline is on
//! ([`Device::start_timeline`](super::Device::start_timeline)) and written
//! as Chrome trace / Perfetto JSON (`traceEvents`, `ph: "X"`, `ts` and
//! `dur` in µs, `pid` = rank, `tid` = stream).
//!
//! Off by default, and then the drivers pay one relaxed load per run of
//! tasks (the [`TimelineSlot`] flag). When on, a task costs two clock
//! reads and one entry in a batch the driver hands over under one lock
//! per run of tasks. Op spans come from marks the framework leaves at
//! each op's first task ([`Timeline::mark_op`]): the tasks of a stream
//! from one mark to the next are that op's.

use super::task::{Op, OpLabel, Pools, Task};
use crate::clock::{stamp, Stamp, StampClock};
// labels are the queue's (loom's `Arc` in model builds); the timeline
// itself is never part of a model
use crate::sync::Arc as LabelArc;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Default number of task events a timeline keeps (`HCCL_RS_TRACE_EVENTS`);
/// later ones are counted, not kept.
pub const DEFAULT_TIMELINE_EVENTS: usize = 1 << 20;

/// One task that ran.
#[derive(Clone, Debug)]
pub(crate) struct TaskEvent {
    pub(crate) stream: u64,
    /// The task's index on its stream (`u64::MAX`: a kernel completed
    /// inside its launch, never queued: it is a whole op by itself).
    pub(crate) index: u64,
    /// For a kernel completed inside its launch: its ordinal among those
    /// of its stream (from 1), which ties it to its op's mark.
    pub(crate) inline: u64,
    pub(crate) name: &'static str,
    pub(crate) label: Option<LabelArc<OpLabel>>,
    pub(crate) step: u32,
    pub(crate) peer: Option<u32>,
    pub(crate) bytes: Option<u64>,
    pub(crate) begin: Stamp,
    pub(crate) end: Stamp,
    pub(crate) failed: bool,
}

impl TaskEvent {
    /// The event of `task` (index `index` on `stream`), which ran from
    /// `begin` to now.
    pub(crate) fn of(
        stream: u64,
        index: u64,
        task: &Task,
        pools: &Pools,
        label: Option<&LabelArc<OpLabel>>,
        begin: Stamp,
    ) -> TaskEvent {
        let (name, bytes) = match &task.op {
            Op::Copy { len, .. } => ("memcpy", Some(*len as u64)),
            Op::Reduce { len, .. } => ("reduce", Some(*len as u64)),
            Op::Link { verb, len, .. } => (verb.name(), verb.has_mem().then_some(*len as u64)),
            Op::SharedLink { op, .. } => (op.verb(), None),
            Op::Record { .. } => ("notify record", None),
            Op::Wait { .. } => ("notify wait", None),
            Op::Callback { .. } | Op::HostFn { .. } => ("host callback", None),
            Op::Kernel { .. } => ("kernel", None),
            Op::Other { kind, .. } => match &**kind {
                super::TaskKind::Memcpy { dst, .. } => ("memcpy", Some(dst.mem().len() as u64)),
                super::TaskKind::Reduce { dst, .. } => ("reduce", Some(dst.mem().len() as u64)),
                super::TaskKind::Link { op, .. } => (op.verb(), None),
                super::TaskKind::Kernel(_) => ("kernel", None),
            },
        };
        TaskEvent {
            stream,
            index,
            name,
            label: label.cloned(),
            step: task.step(),
            peer: pools.link_of(task).map(|l| l.remote_rank()),
            bytes,
            begin,
            end: stamp(),
            failed: false,
            inline: 0,
        }
    }
}

impl TaskEvent {
    /// The event of a kernel that completed inside its launch (begun at
    /// `begin`), never queued.
    pub(crate) fn inline_kernel(
        stream: u64,
        label: Option<&LabelArc<OpLabel>>,
        begin: Stamp,
    ) -> Self {
        TaskEvent {
            stream,
            index: u64::MAX,
            name: "kernel",
            label: label.cloned(),
            step: 0,
            peer: None,
            bytes: None,
            begin,
            end: stamp(),
            failed: false,
            inline: 0,
        }
    }
}

/// An op's first task on a stream (see [`Timeline::mark_op`]).
#[derive(Clone, Debug)]
struct OpMark {
    stream: u64,
    first_task: u64,
    /// Kernels of the stream completed inside their launch so far: the
    /// op's own, if it ran so, is the last of them.
    inline_upto: u64,
    args: OpArgs,
}

/// What a timeline shows of an op (its span's name and arguments), kept
/// as plain values and turned into JSON only when the timeline is written
/// (an op pays no allocation for it).
#[derive(Clone, Debug)]
pub struct OpArgs {
    /// The span's name (`AllReduce`, ...).
    pub name: &'static str,
    /// The op's number on its communicator.
    pub seq: u64,
    /// Its tag and executor.
    pub label: Option<LabelArc<OpLabel>>,
    /// Elements.
    pub count: u64,
    /// Element type.
    pub dtype: crate::dtype::DataType,
    /// Bytes (count × element size).
    pub bytes: u64,
    /// Reduction, for reducing ops.
    pub reduce_op: Option<crate::dtype::ReduceOp>,
    /// Root, for rooted ops.
    pub root: Option<u32>,
    /// Peer, for send and receive.
    pub peer: Option<u32>,
}

impl OpArgs {
    fn to_json(&self) -> Value {
        let mut a = serde_json::Map::new();
        a.insert("seq".into(), json!(self.seq));
        if let Some(l) = &self.label {
            a.insert("tag".into(), json!(l.tag));
            a.insert("algorithm".into(), json!(l.algorithm));
        }
        a.insert("count".into(), json!(self.count));
        a.insert("dtype".into(), json!(self.dtype.to_string()));
        a.insert("bytes".into(), json!(self.bytes));
        if let Some(r) = self.reduce_op {
            a.insert("reduce_op".into(), json!(r.to_string()));
        }
        if let Some(r) = self.root {
            a.insert("root".into(), json!(r));
        }
        if let Some(p) = self.peer {
            a.insert("peer".into(), json!(p));
        }
        Value::Object(a)
    }
}

/// The recorded events, and per stream the kernels completed inside their
/// launch (see [`TaskEvent::inline`]).
#[derive(Debug, Default)]
struct Events {
    list: Vec<TaskEvent>,
    inline: std::collections::HashMap<u64, u64>,
}

/// The events of one device (see the module docs). Shared: the device
/// records into it, whoever started it writes it out.
#[derive(Debug)]
pub struct Timeline {
    capacity: usize,
    events: Mutex<Events>,
    marks: Mutex<Vec<OpMark>>,
    dropped: AtomicU64,
    rank: u32,
}

impl Timeline {
    pub(crate) fn new(rank: u32, capacity: usize) -> Timeline {
        crate::clock::init_clock();
        Timeline {
            capacity,
            events: Mutex::new(Events::default()),
            marks: Mutex::new(Vec::new()),
            dropped: AtomicU64::new(0),
            rank,
        }
    }

    /// Adds a driver's batch of events.
    pub(crate) fn push(&self, batch: &mut Vec<TaskEvent>) {
        if batch.is_empty() {
            return;
        }
        let mut ev = self.events.lock().unwrap_or_else(|p| p.into_inner());
        let room = self.capacity.saturating_sub(ev.list.len());
        if batch.len() > room {
            self.dropped
                .fetch_add((batch.len() - room) as u64, Ordering::Relaxed);
            batch.truncate(room);
        }
        ev.list.append(batch);
    }

    /// Adds the event of a kernel completed inside its launch, numbering
    /// it among its stream's.
    pub(crate) fn push_inline(&self, mut e: TaskEvent) {
        let mut ev = self.events.lock().unwrap_or_else(|p| p.into_inner());
        let n = ev.inline.entry(e.stream).or_default();
        *n += 1;
        e.inline = *n;
        if ev.list.len() < self.capacity {
            ev.list.push(e);
        } else {
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Notes that the op `args` describe starts at task `first_task` of
    /// stream `stream` (its `Stream::progress().enqueued` before the op
    /// was issued): that task and the next ones up to the next mark are
    /// the op's.
    pub fn mark_op(&self, stream: u64, first_task: u64, args: OpArgs) {
        let inline_upto = self
            .events
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .inline
            .get(&stream)
            .copied()
            .unwrap_or(0);
        self.marks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(OpMark {
                stream,
                first_task,
                inline_upto,
                args,
            });
    }

    /// Task events recorded so far.
    pub fn len(&self) -> usize {
        self.events
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .list
            .len()
    }

    /// Whether no task event was recorded.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Task events not kept because the timeline was full.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// The timeline as Chrome trace JSON (an object with `traceEvents`):
    /// a process per rank named `process_name`, a thread per stream, a
    /// complete event (`ph: "X"`) per task, and per op one spanning its
    /// tasks (category `op`; tasks are category `task`).
    pub fn to_chrome_json(&self, process_name: &str) -> Value {
        let guard = self.events.lock().unwrap_or_else(|p| p.into_inner());
        let events = &guard.list;
        let mut marks = self.marks.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let clock = StampClock::new();
        let us = |s: Stamp| clock.wall_us(s);
        let pid = self.rank;
        let mut out: Vec<Value> = vec![json!({
            "name": "process_name", "ph": "M", "pid": pid, "tid": 0,
            "args": { "name": process_name },
        })];
        let mut streams: Vec<u64> = events.iter().map(|e| e.stream).collect();
        streams.sort_unstable();
        streams.dedup();
        for s in &streams {
            out.push(json!({
                "name": "thread_name", "ph": "M", "pid": pid, "tid": s,
                "args": { "name": format!("stream {s}") },
            }));
        }
        // op spans: per stream, the queued tasks from one mark to the next
        marks.sort_by_key(|m| (m.stream, m.first_task));
        let mut spans: BTreeMap<usize, (f64, f64)> = BTreeMap::new();
        for e in events.iter() {
            let (b, d) = (us(e.begin), (us(e.end) - us(e.begin)).max(0.0));
            let mut args = serde_json::Map::new();
            if let Some(l) = &e.label {
                args.insert("op".into(), json!(l.tag));
                args.insert("algorithm".into(), json!(l.algorithm));
            }
            args.insert("step".into(), json!(e.step));
            if let Some(p) = e.peer {
                args.insert("peer".into(), json!(p));
            }
            if let Some(n) = e.bytes {
                args.insert("bytes".into(), json!(n));
            }
            if e.failed {
                args.insert("failed".into(), json!(true));
            }
            out.push(json!({
                "name": e.name, "cat": "task", "ph": "X", "ts": b, "dur": d,
                "pid": pid, "tid": e.stream, "args": Value::Object(args),
            }));
            let owner = if e.index == u64::MAX {
                // a kernel completed in its launch: the first mark of its
                // stream left after it ran
                let lo = marks.partition_point(|m| m.stream < e.stream);
                let i = lo
                    + marks[lo..]
                        .partition_point(|m| m.stream == e.stream && m.inline_upto < e.inline);
                (i < marks.len() && marks[i].stream == e.stream).then_some(i)
            } else {
                // the last mark of this stream at or before the task
                let upto =
                    marks.partition_point(|m| (m.stream, m.first_task) <= (e.stream, e.index));
                (upto > 0 && marks[upto - 1].stream == e.stream).then(|| upto - 1)
            };
            if let Some(i) = owner {
                let span = spans.entry(i).or_insert((b, b + d));
                span.0 = span.0.min(b);
                span.1 = span.1.max(b + d);
            }
        }
        for (i, (b, end)) in spans {
            let m = &marks[i];
            out.push(json!({
                "name": m.args.name, "cat": "op", "ph": "X", "ts": b, "dur": end - b,
                "pid": pid, "tid": m.stream, "args": m.args.to_json(),
            }));
        }
        json!({
            "traceEvents": out,
            "displayTimeUnit": "ns",
            "otherData": {
                "rank": self.rank,
                "process": process_name,
                "dropped_events": self.dropped(),
                "format": "hccl-rs timeline 1",
            },
        })
    }
}

/// A device's timeline, if one is on: a flag the drivers read without a
/// lock, and the timeline behind a lock taken only when the flag is set.
#[derive(Debug, Default)]
pub(crate) struct TimelineSlot {
    on: AtomicBool,
    timeline: Mutex<Option<Arc<Timeline>>>,
}

impl TimelineSlot {
    /// The timeline, if one is on (one relaxed load when off).
    #[inline]
    pub(crate) fn get(&self) -> Option<Arc<Timeline>> {
        if !self.on.load(Ordering::Relaxed) {
            return None;
        }
        self.timeline
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Starts a timeline unless one is on; returns the one that is on.
    pub(crate) fn start(&self, rank: u32, capacity: usize) -> (Arc<Timeline>, bool) {
        let mut t = self.timeline.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(t) = &*t {
            return (Arc::clone(t), false);
        }
        let tl = Arc::new(Timeline::new(rank, capacity));
        *t = Some(Arc::clone(&tl));
        self.on.store(true, Ordering::Relaxed);
        (tl, true)
    }

    /// Stops the timeline; returns it.
    pub(crate) fn stop(&self) -> Option<Arc<Timeline>> {
        let mut t = self.timeline.lock().unwrap_or_else(|p| p.into_inner());
        self.on.store(false, Ordering::Relaxed);
        t.take()
    }
}

#[cfg(test)]
mod tests {
    use crate::mem::DeviceMem;
    use crate::stream::{Device, DeviceConfig, Stream};

    #[test]
    fn tasks_are_recorded_with_their_ops_and_nothing_when_off() {
        let dev = Device::new(3, DeviceConfig::default());
        let s = Stream::new(&dev);
        let (a, b) = (DeviceMem::alloc(64).unwrap(), DeviceMem::alloc(64).unwrap());
        // off: nothing recorded
        s.memcpy_async(&a, &b).unwrap();
        s.synchronize().unwrap();
        assert!(dev.timeline().is_none());
        let (tl, started) = dev.start_timeline(100);
        assert!(started);
        assert!(!dev.start_timeline(100).1, "one timeline per device");
        // two ops of two and three copies
        for (op, copies) in [(1u64, 2), (2, 3)] {
            let first = s.progress().enqueued;
            for _ in 0..copies {
                s.memcpy_async(&a, &b).unwrap();
            }
            let args = super::OpArgs {
                name: "Op",
                seq: op,
                label: None,
                count: 16,
                dtype: crate::dtype::DataType::Fp32,
                bytes: 64,
                reduce_op: None,
                root: None,
                peer: None,
            };
            tl.mark_op(s.id(), first, args);
        }
        s.synchronize().unwrap();
        assert_eq!(tl.len(), 5);
        let v = tl.to_chrome_json("rank 3 (h)");
        let ev = v["traceEvents"].as_array().unwrap();
        let tasks: Vec<_> = ev.iter().filter(|e| e["cat"] == "task").collect();
        assert_eq!(tasks.len(), 5);
        for t in &tasks {
            assert_eq!(
                (t["name"].as_str(), t["pid"].as_u64()),
                (Some("memcpy"), Some(3))
            );
            assert_eq!(t["args"]["bytes"], 64);
        }
        let ops: Vec<_> = ev.iter().filter(|e| e["cat"] == "op").collect();
        assert_eq!(ops.len(), 2);
        // each op spans exactly its tasks
        for (op, copies) in [(1u64, 2usize), (2, 3)] {
            let span = ops.iter().find(|o| o["args"]["seq"] == op).unwrap();
            let (b, e) = (
                span["ts"].as_f64().unwrap(),
                span["ts"].as_f64().unwrap() + span["dur"].as_f64().unwrap(),
            );
            let inside = tasks
                .iter()
                .filter(|t| t["ts"].as_f64().unwrap() >= b && t["ts"].as_f64().unwrap() <= e)
                .count();
            assert!(inside >= copies, "op {op}: {inside} tasks inside its span");
        }
        assert!(dev.stop_timeline().is_some());
        assert!(dev.timeline().is_none());
    }
}

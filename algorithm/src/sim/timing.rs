//! Predicted time: the simulator's logical clocks in nanoseconds under the
//! selector's α-β-γ cost model ([`CostParams`]), with the links of hosts
//! shared by the flows that cross them.
//!
//! Every stream of every rank keeps a clock. A transfer of `b` bytes from
//! rank s to rank r starts when its stream is there and the resources it
//! needs are free, holds them while its bytes move, and arrives α later:
//!
//! - the sender's port for `b·β` of its level (one driver thread moves all
//!   of a rank's data, so a rank's concurrent sends take turns);
//! - between hosts, with a host link capacity C ([`CostParams::host_gbps`]),
//!   the sending host's outgoing and the receiving host's incoming link for
//!   `b / C` each: flows that cross one host's link share it.
//!
//! The level is the pair's placement (same host: level 0, else level 1),
//! not the plane the executor asked for. Resources are reserved in the
//! earliest gap that fits ([`Busy`]), because the simulator polls ranks in
//! an order that is not the order of their logical times. A receive moves
//! the receiver's stream to the arrival; a reduce of `b` bytes adds `b·γ`
//! to its stream; a notify's record hands its stream's time to the wait it
//! satisfies; acks carry time without adding to it (α is one whole step,
//! handshakes included, as `hccl-test --calibrate` measures it). Local
//! copies cost nothing, as in the formulas.

use crate::cost::CostParams;
use hccl_platform::{TaskDone, TaskObserver};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex};

/// Busy spans of one resource: disjoint `[start, end)` intervals, ns.
#[derive(Debug, Default)]
pub(crate) struct Busy {
    spans: BTreeMap<u64, u64>,
    /// Total reserved time, ns.
    pub(crate) busy: u64,
}

impl Busy {
    /// The earliest start at or after `t` with `[start, start + d)` free.
    pub(crate) fn earliest(&self, t: u64, d: u64) -> u64 {
        if d == 0 {
            return t;
        }
        let mut s = t;
        if let Some((_, &e)) = self.spans.range(..=s).next_back() {
            s = s.max(e);
        }
        for (&a, &e) in self.spans.range(s..) {
            if a >= s + d {
                break;
            }
            s = s.max(e);
        }
        s
    }

    /// Marks `[s, s + d)` busy (free before: see [`Busy::earliest`]),
    /// joining the spans it touches.
    pub(crate) fn reserve(&mut self, s: u64, d: u64) {
        if d == 0 {
            return;
        }
        self.busy += d;
        let (mut start, mut end) = (s, s + d);
        if let Some((&a, &e)) = self.spans.range(..=s).next_back() {
            if e == s {
                start = a;
                self.spans.remove(&a);
            }
        }
        if let Some(&e) = self.spans.get(&end) {
            self.spans.remove(&end);
            end = e;
        }
        self.spans.insert(start, end);
    }
}

/// One transfer or reduce as the timeline shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SimEvent {
    /// The rank whose stream ran it (the sender of a transfer, the reader
    /// of a read).
    pub rank: u32,
    /// The stream ([`hccl_platform::Stream::id`]).
    pub stream: u64,
    /// "send", "read" or "reduce".
    pub what: &'static str,
    /// The other rank of a transfer.
    pub peer: Option<u32>,
    /// Bytes moved or reduced.
    pub bytes: u64,
    /// Start, ns of predicted time.
    pub start_ns: u64,
    /// Duration, ns.
    pub dur_ns: u64,
}

/// How busy one host's link was over the plan.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostLinkLoad {
    /// The host.
    pub host: u32,
    /// `"out"` (leaving the host) or `"in"`.
    pub direction: &'static str,
    /// Bytes that crossed it.
    pub bytes: u64,
    /// Time it was busy, ns (at [`CostParams::host_gbps`]; 0 without it).
    pub busy_ns: u64,
}

#[derive(Debug, Default)]
struct State {
    /// Clock of each (rank, stream), ns.
    clocks: HashMap<(u32, u64), u64>,
    /// Times of a notify's records not yet taken by a wait, in order.
    records: HashMap<usize, VecDeque<u64>>,
    port: Vec<Busy>,
    host_out: Vec<Busy>,
    host_in: Vec<Busy>,
    bytes_out: Vec<u64>,
    bytes_in: Vec<u64>,
    /// The latest time any clock reached.
    end: u64,
    events: Vec<SimEvent>,
    /// Events not kept (beyond the cap).
    dropped: u64,
}

impl State {
    /// Keeps `event` for the timeline if fewer than `cap` are kept, else
    /// counts it as dropped (`cap` 0: no timeline).
    fn keep(&mut self, event: SimEvent, cap: usize) {
        if self.events.len() < cap {
            self.events.push(event);
        } else if cap > 0 {
            self.dropped += 1;
        }
    }
}

/// Time of `bytes` at `us_per_byte`, ns.
fn per_byte_ns(bytes: u64, us_per_byte: f64) -> u64 {
    (bytes as f64 * us_per_byte * 1e3).round() as u64
}

/// The timed model of one simulation, shared by its links and observers.
#[derive(Debug)]
pub(crate) struct Timing {
    cost: CostParams,
    host_of: Arc<[u32]>,
    /// Keep at most this many events for a timeline (0: none).
    keep_events: usize,
    state: Mutex<State>,
}

/// µs (a cost parameter) to ns.
fn ns(us: f64) -> u64 {
    (us * 1e3).round().max(0.0) as u64
}

impl Timing {
    pub(crate) fn new(cost: CostParams, host_of: Arc<[u32]>, keep_events: usize) -> Self {
        let p = host_of.len();
        let hosts = host_of.iter().max().map_or(1, |h| *h as usize + 1);
        Timing {
            cost,
            host_of,
            keep_events,
            state: Mutex::new(State {
                port: (0..p).map(|_| Busy::default()).collect(),
                host_out: (0..hosts).map(|_| Busy::default()).collect(),
                host_in: (0..hosts).map(|_| Busy::default()).collect(),
                bytes_out: vec![0; hosts],
                bytes_in: vec![0; hosts],
                ..Default::default()
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The clock of `rank`'s stream `stream`, ns.
    pub(crate) fn now(&self, rank: u32, stream: u64) -> u64 {
        self.lock()
            .clocks
            .get(&(rank, stream))
            .copied()
            .unwrap_or(0)
    }

    /// Moves `rank`'s stream `stream` to `t` if that is later.
    pub(crate) fn reach(&self, rank: u32, stream: u64, t: u64) {
        let mut s = self.lock();
        let c = s.clocks.entry((rank, stream)).or_insert(0);
        *c = (*c).max(t);
        s.end = s.end.max(t);
    }

    /// A transfer of `bytes` from `src` to `dst` that may start at `t0`,
    /// run by `runner`'s stream `stream` (the sender's, or the reader's for
    /// a read) and reduced at the receiver when `reduce`: its arrival, ns.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn transfer(
        &self,
        src: u32,
        dst: u32,
        runner: u32,
        stream: u64,
        bytes: u64,
        reduce: bool,
        t0: u64,
    ) -> u64 {
        let (hs, hd) = (self.host_of[src as usize], self.host_of[dst as usize]);
        let across = hs != hd;
        let link = if across {
            self.cost.level1
        } else {
            self.cost.level0
        };
        let d = per_byte_ns(bytes, link.beta_us_per_byte);
        let dc = match self.cost.host_gbps {
            Some(g) if across && g > 0.0 => (bytes as f64 / g).round() as u64,
            _ => 0,
        };
        let mut s = self.lock();
        let st = &mut *s;
        // the earliest start every resource allows: each resource can only
        // push it later, so a few rounds settle it
        let mut start = t0;
        loop {
            let mut t = st.port[runner as usize].earliest(start, d);
            if dc > 0 {
                t = st.host_out[hs as usize].earliest(t, dc);
                t = st.host_in[hd as usize].earliest(t, dc);
            }
            if t == start {
                break;
            }
            start = t;
        }
        st.port[runner as usize].reserve(start, d);
        if across {
            st.host_out[hs as usize].reserve(start, dc);
            st.host_in[hd as usize].reserve(start, dc);
            st.bytes_out[hs as usize] += bytes;
            st.bytes_in[hd as usize] += bytes;
        }
        let moved = d.max(dc);
        let gamma = if reduce {
            per_byte_ns(bytes, self.cost.gamma_us_per_byte)
        } else {
            0
        };
        let arrival = start + ns(link.alpha_us) + moved + gamma;
        st.end = st.end.max(arrival);
        st.keep(
            SimEvent {
                rank: runner,
                stream,
                what: if runner == src { "send" } else { "read" },
                peer: Some(if runner == src { dst } else { src }),
                bytes,
                start_ns: start,
                dur_ns: arrival - start,
            },
            self.keep_events,
        );
        arrival
    }

    /// The predicted time of the whole plan, ns: when its last clock stopped.
    pub(crate) fn end(&self) -> u64 {
        self.lock().end
    }

    /// The host link that carried the most bytes (None on one host).
    pub(crate) fn busiest_host_link(&self) -> Option<HostLinkLoad> {
        let s = self.lock();
        let out = s
            .bytes_out
            .iter()
            .enumerate()
            .map(|(h, &b)| (b, h, "out", s.host_out[h].busy));
        let inn = s
            .bytes_in
            .iter()
            .enumerate()
            .map(|(h, &b)| (b, h, "in", s.host_in[h].busy));
        out.chain(inn)
            .filter(|x| x.0 > 0)
            .max_by_key(|x| (x.0, x.3))
            .map(|(bytes, host, direction, busy_ns)| HostLinkLoad {
                host: host as u32,
                direction,
                bytes,
                busy_ns,
            })
    }

    /// The kept events and how many were not kept.
    pub(crate) fn take_events(&self) -> (Vec<SimEvent>, u64) {
        let mut s = self.lock();
        (std::mem::take(&mut s.events), s.dropped)
    }
}

/// One rank's observer: reduces cost γ per byte on their stream, records
/// hand their time to waits.
pub(crate) struct RankClock {
    pub(crate) rank: u32,
    pub(crate) timing: Arc<Timing>,
}

impl TaskObserver for RankClock {
    fn task_done(&self, stream: u64, done: TaskDone) {
        let t = &self.timing;
        match done {
            TaskDone::Reduce { bytes } => {
                let mut s = t.lock();
                let d = per_byte_ns(bytes, t.cost.gamma_us_per_byte);
                let c = s.clocks.entry((self.rank, stream)).or_insert(0);
                let start = *c;
                *c += d;
                let now = *c;
                s.end = s.end.max(now);
                s.keep(
                    SimEvent {
                        rank: self.rank,
                        stream,
                        what: "reduce",
                        peer: None,
                        bytes,
                        start_ns: start,
                        dur_ns: d,
                    },
                    t.keep_events,
                );
            }
            TaskDone::Record { notify } => {
                let mut s = t.lock();
                let now = s.clocks.get(&(self.rank, stream)).copied().unwrap_or(0);
                s.records.entry(notify).or_default().push_back(now);
            }
            TaskDone::Wait { notify } => {
                let mut s = t.lock();
                let at = s
                    .records
                    .get_mut(&notify)
                    .and_then(VecDeque::pop_front)
                    .unwrap_or(0);
                let c = s.clocks.entry((self.rank, stream)).or_insert(0);
                *c = (*c).max(at);
            }
            _ => {}
        }
    }
}

/// The timeline as Chrome trace / Perfetto JSON (`pid` = rank, `tid` =
/// stream, times in µs of predicted time), as the device timelines are.
pub fn timeline_json(events: &[SimEvent]) -> String {
    let rows: Vec<serde_json::Value> = events
        .iter()
        .map(|e| {
            let name = match e.peer {
                Some(p) if e.what == "send" => format!("send to {p}"),
                Some(p) => format!("read from {p}"),
                None => e.what.to_owned(),
            };
            serde_json::json!({
                "name": name, "ph": "X", "pid": e.rank, "tid": e.stream,
                "ts": e.start_ns as f64 / 1e3, "dur": e.dur_ns as f64 / 1e3,
                "args": { "bytes": e.bytes },
            })
        })
        .collect();
    serde_json::json!({ "traceEvents": rows, "displayTimeUnit": "ns" }).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn busy_spans_fill_the_earliest_gap() {
        let mut b = Busy::default();
        b.reserve(10, 10); // [10, 20)
        b.reserve(40, 10); // [40, 50)
        assert_eq!(b.earliest(0, 10), 0);
        assert_eq!(b.earliest(0, 11), 20);
        assert_eq!(b.earliest(15, 5), 20);
        assert_eq!(b.earliest(20, 20), 20);
        assert_eq!(b.earliest(20, 21), 50);
        assert_eq!(b.earliest(45, 1), 50);
        b.reserve(20, 20); // joins both: [10, 50)
        assert_eq!(b.spans.len(), 1);
        assert_eq!(b.earliest(11, 1), 50);
        assert_eq!(b.busy, 40);
    }
}

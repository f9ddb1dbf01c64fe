//! Symbolic data: buffers without bytes, for plans whose bytes would not
//! fit in memory (thousands of ranks).
//!
//! Every element carries an identity instead of a value:
//!
//! - data-movement ops: a *token*, the element's global position among all
//!   ranks' inputs (rank q's element i is `base(q) + i`), so a block that
//!   lands in the wrong place, twice, or not at all leaves a wrong token;
//! - reducing ops: the element *index* it belongs to and its contribution
//!   set, kept as a count and a sum modulo the prime 2^61 − 1 of a 61-bit
//!   hash per contributing rank. A dropped contribution lowers the count,
//!   a duplicated one raises it, and a swap (one rank twice, another not)
//!   changes the sum; reducing two different indices together (a wrong
//!   slice) poisons the element.
//!
//! A buffer is a map of runs: consecutive elements whose identities follow
//! on (token or index + 1, same set) form one run, so a whole AllGather
//! output or AllReduce result is a single entry however large it is, and
//! memory grows with the number of distinct blocks in flight, not with
//! bytes.

use hccl_platform::{DataType, HcclError, ReduceOp, Result, VirtualMem};
use std::collections::BTreeMap;
use std::sync::Mutex;

/// The modulus of contribution sums: a Mersenne prime, so the sum of up
/// to 2^3 reduced values stays in a u64 before the reduction.
const P: u64 = (1 << 61) - 1;

/// The hash of rank `q`'s contribution (splitmix64, reduced mod [`P`]).
pub(crate) fn rank_hash(q: u32) -> u64 {
    let mut z = (q as u64).wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    (z ^ (z >> 31)) % P
}

fn add_mod(a: u64, b: u64) -> u64 {
    (a + b) % P
}

/// Why an element holds no valid identity.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Bad {
    /// A reduction combined element `dst` with element `src` (a wrong slice).
    Mixed { dst: u64, src: u64 },
    /// A copy or reduction cut an element in two.
    Misaligned,
}

/// What a run of elements holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Val {
    /// Nothing written yet (zeros in byte mode).
    Unwritten,
    /// Element k of the run has identity `t0 + k`, contributions `n`
    /// ranks whose hashes sum to `h` (mod P).
    Data { t0: u64, h: u64, n: u32 },
    /// Poisoned.
    Bad(Bad),
}

impl Val {
    /// The value `elems` elements further into the run.
    fn advance(self, elems: u64) -> Val {
        match self {
            Val::Data { t0, h, n } => Val::Data {
                t0: t0 + elems,
                h,
                n,
            },
            v => v,
        }
    }

    /// Whether a run of `elems` elements of `self` followed by `next` is
    /// one run.
    fn continues(self, elems: u64, next: Val) -> bool {
        self.advance(elems) == next
    }

    /// `self op other`, elementwise, both runs starting at the same element.
    fn combine(self, other: Val) -> Val {
        match (self, other) {
            (Val::Bad(b), _) | (_, Val::Bad(b)) => Val::Bad(b),
            // memory nothing wrote is zeros in byte mode, which a sum
            // leaves alone: no contribution (so a plan that reduces a
            // rank's data out of a buffer that never received it shows
            // as a missing contribution, as its bytes would)
            (Val::Unwritten, v) | (v, Val::Unwritten) => v,
            (
                Val::Data {
                    t0: a,
                    h: ha,
                    n: na,
                },
                Val::Data {
                    t0: b,
                    h: hb,
                    n: nb,
                },
            ) => {
                if a != b {
                    Val::Bad(Bad::Mixed { dst: a, src: b })
                } else {
                    Val::Data {
                        t0: a,
                        h: add_mod(ha, hb),
                        n: na.saturating_add(nb),
                    }
                }
            }
        }
    }
}

/// A run: up to (excluding) byte `end`, from the key it is stored under.
#[derive(Clone, Copy, Debug)]
struct Run {
    end: usize,
    val: Val,
}

/// One buffer's symbolic contents (a [`VirtualMem`]).
#[derive(Debug)]
pub(crate) struct SymMem {
    /// Bytes per element.
    unit: usize,
    /// Runs by start byte, covering `0..len` without gaps.
    runs: Mutex<BTreeMap<usize, Run>>,
}

/// A piece read out of a buffer: `len` bytes holding `val`.
pub(crate) type Piece = (usize, Val);

impl SymMem {
    /// `len` unwritten bytes of `unit`-byte elements.
    pub(crate) fn new(len: usize, unit: usize) -> SymMem {
        let mut runs = BTreeMap::new();
        if len > 0 {
            runs.insert(
                0,
                Run {
                    end: len,
                    val: Val::Unwritten,
                },
            );
        }
        SymMem {
            unit,
            runs: Mutex::new(runs),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<usize, Run>> {
        self.runs.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The value of a run cut `bytes` into it (poisoned if that splits an element).
    fn cut(&self, val: Val, bytes: usize) -> Val {
        if bytes % self.unit != 0 {
            return match val {
                Val::Unwritten => Val::Unwritten,
                _ => Val::Bad(Bad::Misaligned),
            };
        }
        val.advance((bytes / self.unit) as u64)
    }

    /// The pieces of `off..off + len`, in order.
    pub(crate) fn read(&self, off: usize, len: usize) -> Vec<Piece> {
        let runs = self.lock();
        let end = off + len;
        let mut out = Vec::new();
        let first = runs.range(..=off).next_back().map(|(&k, _)| k).unwrap_or(0);
        for (&start, run) in runs.range(first..end) {
            let (a, b) = (start.max(off), run.end.min(end));
            if a >= b {
                continue;
            }
            out.push((b - a, self.cut(run.val, a - start)));
        }
        out
    }

    /// Splits the run containing byte `at` so that a run starts there.
    fn split(&self, runs: &mut BTreeMap<usize, Run>, at: usize) {
        let Some((&start, &run)) = runs.range(..at).next_back() else {
            return;
        };
        if run.end <= at {
            return;
        }
        runs.insert(
            start,
            Run {
                end: at,
                val: run.val,
            },
        );
        runs.insert(
            at,
            Run {
                end: run.end,
                val: self.cut(run.val, at - start),
            },
        );
    }

    /// Joins the run starting at `at` to the one before it if they continue.
    fn join(&self, runs: &mut BTreeMap<usize, Run>, at: usize) {
        let Some(&next) = runs.get(&at) else {
            return;
        };
        let Some((&start, &prev)) = runs.range(..at).next_back() else {
            return;
        };
        let bytes = at - start;
        let joins = match prev.val {
            Val::Data { .. } => {
                bytes % self.unit == 0 && prev.val.continues((bytes / self.unit) as u64, next.val)
            }
            v => v == next.val,
        };
        if joins {
            runs.remove(&at);
            runs.insert(
                start,
                Run {
                    end: next.end,
                    val: prev.val,
                },
            );
        }
    }

    /// Writes `pieces` from byte `off` on.
    pub(crate) fn write(&self, off: usize, pieces: &[Piece]) {
        let len: usize = pieces.iter().map(|p| p.0).sum();
        if len == 0 {
            return;
        }
        let end = off + len;
        let mut runs = self.lock();
        self.split(&mut runs, off);
        self.split(&mut runs, end);
        let inside: Vec<usize> = runs.range(off..end).map(|(&k, _)| k).collect();
        for k in inside {
            runs.remove(&k);
        }
        let mut at = off;
        for &(n, val) in pieces {
            runs.insert(at, Run { end: at + n, val });
            self.join(&mut runs, at);
            at += n;
        }
        self.join(&mut runs, end);
    }

    /// Every run of the buffer: (start byte, end byte, value).
    #[cfg(test)]
    pub(crate) fn runs(&self) -> Vec<(usize, usize, Val)> {
        self.lock()
            .iter()
            .map(|(&k, r)| (k, r.end, r.val))
            .collect()
    }

    fn other<'a>(&self, src: &'a dyn VirtualMem) -> Result<&'a SymMem> {
        src.as_any().downcast_ref::<SymMem>().ok_or_else(|| {
            HcclError::internal("symbolic memory met another kind of virtual memory")
        })
    }
}

impl VirtualMem for SymMem {
    fn copy(&self, dst_off: usize, src: &dyn VirtualMem, src_off: usize, len: usize) -> Result<()> {
        let pieces = self.other(src)?.read(src_off, len);
        self.write(dst_off, &pieces);
        Ok(())
    }

    fn reduce(
        &self,
        dst_off: usize,
        src: &dyn VirtualMem,
        src_off: usize,
        len: usize,
        _dtype: DataType,
        _op: ReduceOp,
    ) -> Result<()> {
        let theirs = self.other(src)?.read(src_off, len);
        let mine = self.read(dst_off, len);
        // walk both piece lists over the union of their boundaries
        let mut out: Vec<Piece> = Vec::with_capacity(mine.len().max(theirs.len()));
        let (mut i, mut j) = (0, 0);
        let (mut a_used, mut b_used) = (0usize, 0usize);
        while i < mine.len() && j < theirs.len() {
            let (an, av) = mine[i];
            let (bn, bv) = theirs[j];
            let n = (an - a_used).min(bn - b_used);
            let v = self.cut(av, a_used).combine(self.cut(bv, b_used));
            out.push((n, v));
            a_used += n;
            b_used += n;
            if a_used == an {
                i += 1;
                a_used = 0;
            }
            if b_used == bn {
                j += 1;
                b_used = 0;
            }
        }
        self.write(dst_off, &out);
        Ok(())
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

// ---- inputs, references and the check --------------------------------

use super::{Shape, SimFailure, SimSpec};
use crate::op::{OpType, VCounts};
use hccl_platform::DeviceMem;

/// The token of every rank's first input element: the ranks' inputs laid
/// end to end.
pub(crate) fn token_bases(shapes: &[Shape]) -> Vec<u64> {
    let mut at = 0;
    shapes
        .iter()
        .map(|s| {
            let b = at;
            at += s.in_elems;
            b
        })
        .collect()
}

/// The sum of every rank's hash: a complete contribution set (computed
/// once per rank count: every rank's check needs it).
fn all_hash(p: u32) -> u64 {
    static LAST: Mutex<(u32, u64)> = Mutex::new((0, 0));
    let mut last = LAST.lock().unwrap_or_else(|e| e.into_inner());
    if last.0 != p {
        *last = (p, (0..p).fold(0, |h, q| add_mod(h, rank_hash(q))));
    }
    last.1
}

/// What rank `q`'s input element 0 holds (element k holds its successor).
fn input_val(spec: &SimSpec, bases: &[u64], q: u32) -> Val {
    if spec.op_type.reduces() {
        Val::Data {
            t0: 0,
            h: rank_hash(q),
            n: 1,
        }
    } else {
        Val::Data {
            t0: bases[q as usize],
            h: 0,
            n: 1,
        }
    }
}

fn sym(m: &DeviceMem) -> Result<&SymMem> {
    m.virtual_contents()
        .and_then(|v| v.as_any().downcast_ref::<SymMem>())
        .ok_or_else(|| HcclError::internal("a symbolic simulation's buffer holds bytes"))
}

/// Writes rank `r`'s input pattern into `input`.
pub(crate) fn fill_input(spec: &SimSpec, bases: &[u64], r: u32, input: &DeviceMem) -> Result<()> {
    if input.is_empty() {
        return Ok(());
    }
    sym(input)?.write(input.offset(), &[(input.len(), input_val(spec, bases, r))]);
    Ok(())
}

/// Rank `r`'s expected output as runs of (elements, value), or `None`
/// where the op defines none.
pub(crate) fn expected(
    spec: &SimSpec,
    shapes: &[Shape],
    bases: &[u64],
    r: u32,
) -> Option<Vec<(u64, Val)>> {
    let p = spec.ranks();
    let c = spec.count;
    let root = spec.root;
    let sum = |t0: u64| Val::Data {
        t0,
        h: all_hash(p),
        n: p,
    };
    let token = |q: u32, i: u64| Val::Data {
        t0: bases[q as usize] + i,
        h: 0,
        n: 1,
    };
    let out = shapes[r as usize].out_elems;
    let mut runs = match spec.op_type {
        OpType::AllReduce => vec![(c, sum(0))],
        OpType::Reduce if r == root => vec![(c, sum(0))],
        OpType::ReduceScatter => vec![(c, sum(r as u64 * c))],
        OpType::ReduceScatterV => {
            let v = VCounts::packed(spec.v_counts.clone().unwrap_or_default());
            vec![(v.counts[r as usize], sum(v.displs[r as usize]))]
        }
        // inputs end to end: token 0 onwards
        OpType::AllGather | OpType::AllGatherV => vec![(out, token(0, 0))],
        OpType::Gather if r == root => vec![(out, token(0, 0))],
        OpType::Broadcast => vec![(c, token(root, 0))],
        OpType::Scatter => vec![(c, token(root, r as u64 * c))],
        OpType::AllToAll => (0..p).map(|q| (c, token(q, r as u64 * c))).collect(),
        OpType::AllToAllV => {
            let m = spec.matrix.clone().unwrap_or_default();
            (0..p)
                .map(|q| {
                    let row = VCounts::packed(m[q as usize].clone());
                    (row.counts[r as usize], token(q, row.displs[r as usize]))
                })
                .collect()
        }
        _ => return None,
    };
    // empty blocks (V ops) have nothing to compare
    runs.retain(|r| r.0 > 0);
    Some(runs)
}

/// The rank whose hash is `h`, if one is.
fn rank_of_hash(p: u32, h: u64) -> Option<u32> {
    (0..p).find(|&q| rank_hash(q) == h)
}

/// The (rank, element) a movement token names.
fn token_owner(bases: &[u64], t: u64) -> (usize, u64) {
    let q = bases.partition_point(|&b| b <= t).saturating_sub(1);
    (q, t - bases.get(q).copied().unwrap_or(0))
}

/// What is wrong with `got` where `want` belongs (both at one element).
fn describe(spec: &SimSpec, bases: &[u64], got: Val, want: Val) -> String {
    let p = spec.ranks();
    match (got, want) {
        (Val::Unwritten, _) => "never written".into(),
        (Val::Bad(Bad::Mixed { dst, src }), _) => {
            format!("a reduction combined element {src} into element {dst} (a wrong slice)")
        }
        (Val::Bad(Bad::Misaligned), _) => "a copy or reduction cut an element in two".into(),
        (
            Val::Data { t0, h, n },
            Val::Data {
                t0: wt,
                h: wh,
                n: wn,
            },
        ) if spec.op_type.reduces() => {
            if t0 != wt {
                return format!("holds element {t0} where element {wt} belongs (a wrong slice)");
            }
            let who = |d: u64| {
                rank_of_hash(p, d)
                    .map(|q| format!(": rank {q}'s"))
                    .unwrap_or_default()
            };
            if n < wn {
                let one = if wn - n == 1 {
                    who((wh + P - h) % P)
                } else {
                    String::new()
                };
                format!("{} of {wn} contributions missing{one}", wn - n)
            } else if n > wn {
                let one = if n - wn == 1 {
                    who((h + P - wh) % P)
                } else {
                    String::new()
                };
                format!("{} contribution(s) duplicated{one}", n - wn)
            } else {
                format!(
                    "{n} contributions, but not from every rank once (one counted twice, another missing)"
                )
            }
        }
        (Val::Data { t0, .. }, Val::Data { t0: wt, .. }) => {
            let (gq, gi) = token_owner(bases, t0);
            let (wq, wi) = token_owner(bases, wt);
            format!("holds rank {gq}'s element {gi} where rank {wq}'s element {wi} belongs")
        }
        (g, w) => format!("holds {g:?} where {w:?} belongs"),
    }
}

/// Compares rank `r`'s `output` with `want` (runs of elements).
pub(crate) fn check(
    spec: &SimSpec,
    shapes: &[Shape],
    bases: &[u64],
    r: u32,
    output: &DeviceMem,
    want: &[(u64, Val)],
) -> std::result::Result<(), SimFailure> {
    let _ = shapes;
    let u = spec.dtype.size();
    let len: usize = want.iter().map(|w| w.0 as usize * u).sum();
    if len == 0 {
        return Ok(());
    }
    let m = sym(output)?;
    let got = m.read(output.offset(), len.min(output.len()));
    let mut at = 0usize;
    let (mut i, mut j) = (0, 0);
    let (mut gu, mut wu) = (0usize, 0usize);
    while i < got.len() && j < want.len() {
        let (gn, gv) = got[i];
        let wn = want[j].0 as usize * u;
        let n = (gn - gu).min(wn - wu);
        let g = m.cut(gv, gu);
        let w = want[j].1.advance((wu / u) as u64);
        if g != w {
            return Err(SimFailure::WrongSymbol {
                rank: r,
                offset: at,
                len,
                detail: describe(spec, bases, g, w),
            });
        }
        at += n;
        gu += n;
        wu += n;
        if gu == gn {
            i += 1;
            gu = 0;
        }
        if wu == wn {
            j += 1;
            wu = 0;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(t0: u64, q: u32) -> Val {
        Val::Data {
            t0,
            h: rank_hash(q),
            n: 1,
        }
    }

    #[test]
    fn runs_that_follow_on_merge_and_others_do_not() {
        let m = SymMem::new(64, 4);
        m.write(0, &[(16, data(0, 0))]);
        m.write(16, &[(16, data(4, 0))]);
        assert_eq!(m.runs().len(), 2, "the unwritten tail stays");
        m.write(32, &[(32, data(8, 1))]);
        assert_eq!(m.runs().len(), 2, "another rank's data is another run");
        assert_eq!(m.read(20, 8), vec![(8, data(5, 0))]);
        // a misaligned cut poisons
        assert_eq!(m.read(2, 4), vec![(4, Val::Bad(Bad::Misaligned))]);
    }

    #[test]
    fn reductions_add_contributions_and_catch_wrong_slices() {
        let a = SymMem::new(32, 4);
        let b = SymMem::new(32, 4);
        a.write(0, &[(32, data(0, 0))]);
        b.write(0, &[(32, data(0, 1))]);
        a.reduce(0, &b, 0, 16, DataType::Fp32, ReduceOp::Sum)
            .unwrap();
        let sum = Val::Data {
            t0: 0,
            h: add_mod(rank_hash(0), rank_hash(1)),
            n: 2,
        };
        assert_eq!(a.read(0, 32), vec![(16, sum), (16, data(4, 0))]);
        a.reduce(16, &b, 0, 4, DataType::Fp32, ReduceOp::Sum)
            .unwrap();
        assert_eq!(
            a.read(16, 4),
            vec![(4, Val::Bad(Bad::Mixed { dst: 4, src: 0 }))]
        );
    }
}

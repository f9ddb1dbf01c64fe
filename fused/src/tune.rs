//! `auto`'s last word: per op and shape, measure whether the pipeline
//! pays. The first [`TRIALS`] calls of a shape run the pipeline `auto`
//! picked, the next [`TRIALS`] run unfused, and from then on the pipeline
//! runs only if its best time beat unfused's best by 3%. Whether overlap pays depends on what no
//! static rule knows well — the link's speed against this machine's GEMM
//! (measured: across namespace hosts the pipeline took 0.66–0.94× the
//! unfused time at 1 Gbit/s but up to 1.25× at 10 Gbit/s for the same
//! shapes) — and both paths give the same result, so measuring is safe.
//!
//! Only rank 0's measurements count: its choice travels in the op's
//! agreement record, so every rank runs the same path.

use crate::config::FusedPath;
use std::collections::HashMap;
use std::time::Duration;

/// Calls of each candidate before the choice.
pub const TRIALS: usize = 3;

/// How much faster than unfused the pipeline's best trial must be.
const MARGIN: f64 = 0.97;

/// An op and rank 0's operand shape: (op, data type, A rows, K, N).
pub(crate) type ShapeKey = (u32, u32, usize, usize, usize);

#[derive(Default)]
struct Trials {
    fused: Vec<Duration>,
    unfused: Vec<Duration>,
    /// The pipeline's own gates sent the shape unfused: nothing to learn.
    settled: bool,
}

/// What `auto` learned, per shape.
#[derive(Default)]
pub(crate) struct Tuner {
    shapes: HashMap<ShapeKey, Trials>,
}

impl Tuner {
    /// The path to propose for the next call of `key` under `auto`:
    /// `Auto` (the pipeline, gates applying) or `Unfused`.
    pub(crate) fn propose(&self, key: &ShapeKey) -> FusedPath {
        let Some(t) = self.shapes.get(key) else {
            return FusedPath::Auto;
        };
        if t.settled || t.fused.len() < TRIALS {
            return FusedPath::Auto;
        }
        if t.unfused.len() < TRIALS {
            return FusedPath::Unfused;
        }
        let best = |v: &[Duration]| v.iter().min().copied().unwrap_or(Duration::MAX);
        // the pipeline must win clearly: in a tie the unfused op (one
        // collective, less to go wrong) is the steadier choice
        if best(&t.fused).as_secs_f64() < MARGIN * best(&t.unfused).as_secs_f64() {
            FusedPath::Auto
        } else {
            FusedPath::Unfused
        }
    }

    /// Records that a call of `key` proposed as `proposed` ran `ran` in
    /// `took`.
    pub(crate) fn record(
        &mut self,
        key: ShapeKey,
        proposed: FusedPath,
        ran: FusedPath,
        took: Duration,
    ) {
        let t = self.shapes.entry(key).or_default();
        match (proposed, ran) {
            (FusedPath::Auto, FusedPath::Unfused) => t.settled = true,
            (FusedPath::Auto, _) if t.fused.len() < TRIALS => t.fused.push(took),
            (FusedPath::Unfused, _) if t.unfused.len() < TRIALS => t.unfused.push(took),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trials_then_the_faster_path() {
        let key = (1, 4, 100, 10, 10);
        let ms = Duration::from_millis;
        let mut t = Tuner::default();
        for _ in 0..TRIALS {
            assert_eq!(t.propose(&key), FusedPath::Auto);
            t.record(key, FusedPath::Auto, FusedPath::Stream, ms(10));
        }
        for _ in 0..TRIALS {
            assert_eq!(t.propose(&key), FusedPath::Unfused);
            t.record(key, FusedPath::Unfused, FusedPath::Unfused, ms(8));
        }
        assert_eq!(t.propose(&key), FusedPath::Unfused, "unfused was faster");
        // another shape where the pipeline wins
        let k2 = (1, 4, 200, 10, 10);
        let trials = [FusedPath::Auto; TRIALS]
            .into_iter()
            .zip([5, 6, 6])
            .chain([FusedPath::Unfused; TRIALS].into_iter().zip([9, 7, 8]));
        for (p, d) in trials {
            assert_eq!(t.propose(&k2), p);
            t.record(
                k2,
                p,
                if p == FusedPath::Auto {
                    FusedPath::Window
                } else {
                    p
                },
                ms(d),
            );
        }
        assert_eq!(t.propose(&k2), FusedPath::Auto);
        // a tie goes to unfused
        let k4 = (3, 4, 50, 10, 10);
        for _ in 0..TRIALS {
            t.record(k4, FusedPath::Auto, FusedPath::Window, ms(100));
        }
        for _ in 0..TRIALS {
            t.record(k4, FusedPath::Unfused, FusedPath::Unfused, ms(101));
        }
        assert_eq!(t.propose(&k4), FusedPath::Unfused);
        // a shape the gates run unfused is not tried twice
        let k3 = (2, 4, 3, 3, 3);
        t.record(k3, FusedPath::Auto, FusedPath::Unfused, ms(1));
        assert_eq!(t.propose(&k3), FusedPath::Auto);
    }
}

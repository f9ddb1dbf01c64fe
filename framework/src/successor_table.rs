//! The table in which the ranks of an in-process group meet to shrink,
//! agree and grow (`successor.rs` fills it): one decision per named step,
//! made by the first rank to arrive. Generic over the group type so that
//! the group, which owns the table, does not depend on the module that
//! decides.

use hccl_platform::{HcclError, Result};
use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// What the first rank of a step decided.
pub(crate) enum Decision<G> {
    /// A shrink: the old ranks that stay, in order, and their new group.
    Shrink(Vec<u32>, Arc<G>),
    /// An agreement on the lost ranks.
    Lost(Vec<u32>),
    /// A grow: the grown group.
    Grow(Arc<G>),
}

/// A group's decided steps, by name ("shrink/3", "agree/0", "grow/1").
pub(crate) struct Successors<G> {
    steps: Mutex<HashMap<String, Decision<G>>>,
    decided: Condvar,
}

impl<G> Default for Successors<G> {
    fn default() -> Self {
        Successors {
            steps: Mutex::new(HashMap::new()),
            decided: Condvar::new(),
        }
    }
}

impl<G> std::fmt::Debug for Successors<G> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let steps = self.steps.lock().unwrap_or_else(|p| p.into_inner());
        f.debug_map().entries(steps.iter()).finish()
    }
}

impl<G> Clone for Decision<G> {
    fn clone(&self) -> Self {
        match self {
            Decision::Shrink(s, g) => Decision::Shrink(s.clone(), g.clone()),
            Decision::Lost(l) => Decision::Lost(l.clone()),
            Decision::Grow(g) => Decision::Grow(g.clone()),
        }
    }
}

impl<G> std::fmt::Debug for Decision<G> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Decision::Shrink(s, _) => write!(f, "Shrink({s:?})"),
            Decision::Lost(l) => write!(f, "Lost({l:?})"),
            Decision::Grow(_) => write!(f, "Grow"),
        }
    }
}

impl<G> Successors<G> {
    /// The decision of step `key`: `decide()`'s if this rank is first.
    pub(crate) fn decide(
        &self,
        key: &str,
        decide: impl FnOnce() -> Result<Decision<G>>,
    ) -> Result<Decision<G>> {
        let mut steps = self.steps.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(d) = steps.get(key) {
            return Ok(d.clone());
        }
        let d = decide()?;
        steps.insert(key.to_owned(), d.clone());
        self.decided.notify_all();
        Ok(d)
    }

    /// Waits up to `timeout` for another rank to decide step `key`.
    pub(crate) fn await_decision(
        &self,
        key: &str,
        timeout: Duration,
        what: &str,
    ) -> Result<Decision<G>> {
        let deadline = Instant::now() + timeout;
        let mut steps = self.steps.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            if let Some(d) = steps.get(key) {
                return Ok(d.clone());
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(HcclError::timeout(format!(
                    "waited {timeout:?} (HCCL_CONNECT_TIMEOUT) for {what}"
                )));
            }
            steps = self
                .decided
                .wait_timeout(steps, left)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }
}

//! Progress of a long simulation: a caller's hook, told every so often
//! how far the plan got (a 16,384-rank ring runs for minutes).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How far a simulation got (see [`ProgressHook`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SimProgress {
    /// Since the simulation started.
    pub elapsed: Duration,
    /// What it is doing.
    pub phase: SimPhase,
    /// Ranks simulated.
    pub ranks: u32,
    /// While orchestrating: ranks whose plan is issued (or staged); while
    /// running: ranks with nothing left to run.
    pub ranks_done: u32,
    /// Tasks run so far, all ranks.
    pub tasks: u64,
}

/// The phase of a simulation a [`SimProgress`] reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SimPhase {
    /// Asking every rank's executor for its plan and building links.
    Orchestrating,
    /// Running the ranks' tasks.
    Running,
}

impl std::fmt::Display for SimProgress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let what = match self.phase {
            SimPhase::Orchestrating => "orchestrated",
            SimPhase::Running => "done",
        };
        write!(
            f,
            "{:.1} s: {} of {} ranks {what}, {} tasks run",
            self.elapsed.as_secs_f64(),
            self.ranks_done,
            self.ranks,
            self.tasks
        )
    }
}

/// A function told a simulation's [`SimProgress`] every `every` (from the
/// thread that drives the first ranks); see [`SimSpec::progress`](super::SimSpec::progress).
#[derive(Clone)]
pub struct ProgressHook {
    /// How often.
    pub every: Duration,
    /// What to tell.
    pub tell: Arc<dyn Fn(&SimProgress) + Send + Sync>,
}

impl std::fmt::Debug for ProgressHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProgressHook")
            .field("every", &self.every)
            .finish_non_exhaustive()
    }
}

/// One simulation's progress, as its driver threads publish it.
pub(crate) struct Progress {
    hook: Option<ProgressHook>,
    start: Instant,
    ranks: u32,
    /// Per driver thread: tasks run and ranks done in its shard, as of
    /// its last publication.
    shards: Vec<(AtomicU64, AtomicU64)>,
}

impl Progress {
    pub(crate) fn new(hook: Option<ProgressHook>, ranks: u32) -> Self {
        Progress {
            hook,
            start: Instant::now(),
            ranks,
            shards: Vec::new(),
        }
    }

    /// Makes room for `threads` driver threads' figures.
    pub(crate) fn with_shards(mut self, threads: usize) -> Self {
        self.shards = (0..threads).map(|_| Default::default()).collect();
        self
    }

    /// Whether anyone listens.
    pub(crate) fn wanted(&self) -> bool {
        self.hook.is_some()
    }

    /// A timer for one thread: due every hook period (never without a
    /// hook, nor with a period past the clock's end).
    pub(crate) fn timer(&self) -> Timer {
        let every = self.hook.as_ref().and_then(|h| {
            let next = Instant::now().checked_add(h.every)?;
            Some((h.every, next))
        });
        Timer { every }
    }

    /// Tells the hook, while orchestrating, that `done` ranks are.
    pub(crate) fn orchestrated(&self, done: u32) {
        self.tell(SimPhase::Orchestrating, done, 0);
    }

    /// Publishes driver thread `thread`'s figures; the first thread also
    /// tells the hook everyone's.
    pub(crate) fn running(&self, thread: usize, tasks: u64, ranks_done: u32) {
        if let Some((t, r)) = self.shards.get(thread) {
            t.store(tasks, Ordering::Relaxed);
            r.store(ranks_done as u64, Ordering::Relaxed);
        }
        if thread != 0 {
            return;
        }
        let (tasks, done) = self.shards.iter().fold((0, 0), |(t, d), (st, sr)| {
            (
                t + st.load(Ordering::Relaxed),
                d + sr.load(Ordering::Relaxed) as u32,
            )
        });
        self.tell(SimPhase::Running, done, tasks);
    }

    fn tell(&self, phase: SimPhase, ranks_done: u32, tasks: u64) {
        if let Some(h) = &self.hook {
            (h.tell)(&SimProgress {
                elapsed: self.start.elapsed(),
                phase,
                ranks: self.ranks,
                ranks_done,
                tasks,
            });
        }
    }
}

/// When a thread's next progress report is due.
pub(crate) struct Timer {
    /// The period and the next report's time; `None`: never.
    every: Option<(Duration, Instant)>,
}

impl Timer {
    /// Whether a report is due now (then the next one is a period away).
    pub(crate) fn due(&mut self) -> bool {
        let Some((every, next)) = &mut self.every else {
            return false;
        };
        let now = Instant::now();
        if now < *next {
            return false;
        }
        match now.checked_add(*every) {
            Some(n) => *next = n,
            None => self.every = None,
        }
        true
    }
}

//! Deliberate bugs ("mutations") that the loom models must catch.
//!
//! Each lock-free protocol of the platform has a loom model that runs the
//! production code over loom's atomics (`aiv::loom_tests`,
//! `link::loom_tests`, `stream::loom_tests`). A model that passes shows
//! little unless it would fail on a broken protocol, so each model also
//! runs with a [`Mutation`] switched on — a release made relaxed, a check
//! off by one, a wake skipped — in a test that expects the model to fail.
//!
//! The switch lives in the production code, at the very line it breaks
//! (`if mutation::active(Mutation::...)`). Outside loom builds,
//! [`active`] is a `const fn` returning `false`: the branch is folded
//! away, so normal builds run exactly the code they ran before, with no
//! extra load, atomic or fence. Under `--cfg loom` it reads a
//! thread-local that the test sets around its `loom::model` call (loom
//! runs every modelled thread on the test's own OS thread, so they all
//! see it, and tests running in parallel do not see each other's).
//!
//! A run-time switch rather than one `--cfg` per mutation: every
//! `RUSTFLAGS` change rebuilds every dependency (minutes on two cores),
//! while this way one loom build runs every model and every mutation.
//!
//! The mutation tests are `#[should_panic(expected = ...)]`: they pass
//! only if the model fails the way it should (a causality violation, a
//! deadlock, a stale read). To see a model's report on a mutation, run
//! its test with `-- --nocapture`.

/// A deliberate bug, switched on only inside a loom model that expects to
/// catch it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mutation {
    /// AIV board: the entry's flag is stored `Relaxed` instead of with
    /// release, so a reader that sees the flag may not see the payload.
    BoardFlagRelaxed,
    /// AIV board: `may_reuse` lets op `m` reuse its entry once the peers
    /// completed `m - entries - 1` (one op too early).
    BoardReuseEarly,
    /// Write-based link: a counter is raised `Relaxed` instead of with
    /// release, so the count no longer carries the transfer's bytes.
    LinkRaiseRelaxed,
    /// Write-based link: `ticket` numbers waits from 0, so the n-th wait
    /// is satisfied by n - 1 raises (a send before the ack, a read before
    /// the data).
    LinkTicketEarly,
    /// Stream: an enqueue on a worker-driven device does not wake the
    /// worker.
    StreamSkipWake,
    /// Stream: the worker parks after registering without looking at the
    /// queues again (the look–register–look handshake's second look).
    StreamNoRecheck,
    /// Stream: an enqueue sets its stream's bit in the device's busy set
    /// before counting the task, so a poll that takes the bit in between
    /// finds the stream idle and drops it from the set with a task queued.
    StreamBitEarly,
}

#[cfg(loom)]
std::thread_local! {
    static ACTIVE: std::cell::Cell<Option<Mutation>> = const { std::cell::Cell::new(None) };
}

/// Whether mutation `m` is switched on (never, outside loom builds).
#[cfg(loom)]
pub(crate) fn active(m: Mutation) -> bool {
    ACTIVE.with(|a| a.get() == Some(m))
}

/// Whether mutation `m` is switched on: never, outside loom builds (a
/// constant, so the mutated branch is compiled away).
#[cfg(not(loom))]
#[inline(always)]
pub(crate) const fn active(_m: Mutation) -> bool {
    false
}

/// Runs `f` (a loom model) with mutation `m` switched on for this thread
/// and every thread loom models on it; switches it off again even if `f`
/// panics (as a model that catches the mutation does).
#[cfg(all(loom, test))]
pub(crate) fn with<R>(m: Mutation, f: impl FnOnce() -> R) -> R {
    struct Off;
    impl Drop for Off {
        fn drop(&mut self) {
            ACTIVE.with(|a| a.set(None));
        }
    }
    ACTIVE.with(|a| a.set(Some(m)));
    let _off = Off;
    f()
}

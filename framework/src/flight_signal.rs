//! `SIGUSR1` dumps every flight recorder of the process that has a dump
//! directory (`HCCL_RS_FR_DUMP_DIR`): how to ask a hung job what it was
//! doing (`kill -USR1 <pid>` on each rank). The handler only wakes a
//! thread (signal-hook's iterator); the dump runs there, not in the
//! signal handler. Installed once, by the first recorder with a dump
//! directory.

use std::sync::Once;

static INSTALL: Once = Once::new();

/// Starts the `SIGUSR1` thread, once per process; on each signal it
/// runs `dump` (the flight module's `dump_all`: every recorder with a dump
/// directory), which returns how many recorders it dumped.
pub(crate) fn install(dump: fn(&str) -> usize) {
    INSTALL.call_once(|| {
        let signals = match signal_hook::iterator::Signals::new([signal_hook::consts::SIGUSR1]) {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(error = %e, "flight recorder: cannot watch SIGUSR1");
                return;
            }
        };
        let spawned = std::thread::Builder::new()
            .name("hccl-fr-sigusr1".into())
            .spawn(move || {
                let mut signals = signals;
                for _ in signals.forever() {
                    let n = dump("SIGUSR1");
                    tracing::info!(recorders = n, "flight recorder: dumped on SIGUSR1");
                }
            });
        if let Err(e) = spawned {
            tracing::warn!(error = %e, "flight recorder: cannot start the SIGUSR1 thread");
        }
    });
}

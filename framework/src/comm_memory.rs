//! A communicator's table of registered memory and symmetric windows
//! (the data; the calls that fill it are in `registration.rs` and
//! `sym_window_ops.rs`). Kept apart from them so that the communicator,
//! which owns the table, does not depend on the modules that extend it.

use crate::sym_window::SymWindow;
use hccl_platform::{DeviceMem, ImportOwner, MemHandle};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Mutex;

/// Memory registered with a communicator ([`Communicator::register_mem`](crate::Communicator::register_mem)):
/// the handle to deregister it by.
#[derive(Clone, Debug)]
pub struct MemRegistration {
    pub(crate) id: u64,
    pub(crate) mem: DeviceMem,
}

impl MemRegistration {
    /// The registered memory.
    pub fn mem(&self) -> &DeviceMem {
        &self.mem
    }

    /// A number that identifies the registration within its communicator.
    pub fn id(&self) -> u64 {
        self.id
    }
}

/// One registration.
pub(crate) struct RegEntry {
    pub(crate) id: u64,
    pub(crate) mem: DeviceMem,
    /// The peers' registrations mapped by `exchange_mem`.
    pub(crate) peers: Vec<PeerReg>,
    /// Claims those mappings in the process-wide cache.
    pub(crate) imports: ImportOwner,
}

/// A peer's registration mapped by `exchange_mem`.
pub(crate) struct PeerReg {
    /// The peer's rank.
    pub(crate) rank: u32,
    /// Its memory as this process maps it.
    pub(crate) mem: DeviceMem,
    /// The address it starts at in its owner's process (one-sided ops
    /// name peer memory by it).
    pub(crate) base: u64,
    /// Its handle, so a communicator made from this one (shrink, grow)
    /// can claim the mapping for itself.
    pub(crate) handle: MemHandle,
}

/// A communicator's registered memory and symmetric windows.
#[derive(Default)]
pub(crate) struct CommMemory {
    next: AtomicU64,
    /// Symmetric windows registered (or tried) so far.
    window_seq: AtomicU32,
    pub(crate) regs: Mutex<Vec<RegEntry>>,
    pub(crate) windows: Mutex<Vec<SymWindow>>,
}

impl CommMemory {
    /// A fresh id for a registration or window.
    pub(crate) fn next_id(&self) -> u64 {
        self.next.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// Makes ids continue after `last` (registrations carried from
    /// another communicator keep their ids).
    pub(crate) fn ids_after(&self, last: u64) {
        self.next.fetch_max(last, Ordering::Relaxed);
    }

    /// The sequence number of the next symmetric window: every rank
    /// counts its calls alike (registering is collective).
    pub(crate) fn next_window_seq(&self) -> u32 {
        self.window_seq.fetch_add(1, Ordering::Relaxed)
    }

    /// Drops every registration and window (the communicator is going).
    pub(crate) fn clear(&self, domain: u64) {
        let regs = std::mem::take(&mut *self.regs.lock().unwrap_or_else(|p| p.into_inner()));
        for r in regs {
            let _ = r.mem.deregister_in(domain);
        }
        let wins = std::mem::take(&mut *self.windows.lock().unwrap_or_else(|p| p.into_inner()));
        for w in wins {
            w.release(domain);
        }
    }
}

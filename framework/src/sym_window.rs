//! Symmetric windows (HCCL's `HcclCommSymWinRegister`,
//! `HcclSymWinGetPeerPointer`): every rank of a communicator registers a
//! buffer of the same size; each rank then maps the windows of the ranks
//! on its host and addresses them directly — a store through a peer
//! pointer lands in the peer's buffer.
//!
//! Registering is collective: the ranks all-gather a fixed-size record
//! (their window's size and handle, or that their own checks failed)
//! through the communicator itself, so a failure on one rank — private
//! memory, a window size that differs — is an error on every rank, and no
//! rank keeps a window the others do not have. A second all-gather
//! confirms that every rank mapped its peers' windows. Deregistering is
//! collective too (no rank gives up its window while a peer may still
//! write into it).

use hccl_platform::{DeviceMem, HcclError, ImportOwner, Result};
use std::sync::{Arc, Mutex};

/// Every rank's part of a symmetric window, as this rank reaches it.
#[derive(Debug)]
struct Mapped {
    /// By rank: this rank's own window, a host peer's mapped, or `None`
    /// for a rank on another host.
    peers: Vec<Option<DeviceMem>>,
    /// Whether registering the window registered its memory (it was not
    /// registered with the communicator before).
    marked: bool,
    /// Claims the peers' mappings in the process-wide cache.
    _imports: ImportOwner,
}

#[derive(Debug)]
struct Inner {
    /// How many windows were registered (or tried) on this communicator
    /// before this one: the same on every rank for the same window.
    seq: u32,
    rank: u32,
    local: DeviceMem,
    /// Every rank's host, for messages.
    hosts: Vec<String>,
    /// `None` once deregistered.
    mapped: Mutex<Option<Mapped>>,
}

/// A symmetric window ([`Communicator::sym_win_register`]): every rank's
/// buffer of the same size, the host peers' mapped here. Cheap to clone;
/// every clone sees the deregistration.
#[derive(Clone, Debug)]
pub struct SymWindow {
    inner: Arc<Inner>,
}

impl SymWindow {
    /// A registered window: this rank's part `local`, every rank's as
    /// this rank reaches it (`peers`, by rank), whether registering it
    /// registered `local`'s memory (`marked`), and the claim on the
    /// peers' mappings. Made by the register call (`sym_window_ops.rs`).
    pub(crate) fn new(
        seq: u32,
        rank: u32,
        local: DeviceMem,
        hosts: Vec<String>,
        peers: Vec<Option<DeviceMem>>,
        marked: bool,
        imports: ImportOwner,
    ) -> SymWindow {
        SymWindow {
            inner: Arc::new(Inner {
                seq,
                rank,
                local,
                hosts,
                mapped: Mutex::new(Some(Mapped {
                    peers,
                    marked,
                    _imports: imports,
                })),
            }),
        }
    }

    /// How many windows its communicator registered (or tried) before it.
    pub(crate) fn seq(&self) -> u32 {
        self.inner.seq
    }

    /// Bytes of the window (on every rank).
    pub fn size(&self) -> usize {
        self.inner.local.len()
    }

    /// This rank's own window.
    pub fn local(&self) -> &DeviceMem {
        &self.inner.local
    }

    /// Whether the window is still registered.
    pub fn is_live(&self) -> bool {
        self.lock().is_some()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Mapped>> {
        self.inner.mapped.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Rank `rank`'s window as this rank reaches it: its own, or a host
    /// peer's mapped here. Errors: `rank` out of range (`HCCL_E_PARA`);
    /// a rank on another host (`HCCL_E_NOT_SUPPORT`, naming the rank and
    /// both hosts); a deregistered window (`HCCL_E_PARA`).
    pub fn peer_mem(&self, rank: u32) -> Result<DeviceMem> {
        let me = self.inner.rank;
        let guard = self.lock();
        let m = guard
            .as_ref()
            .ok_or_else(|| HcclError::para("the symmetric window was deregistered").rank(me))?;
        match m.peers.get(rank as usize) {
            None => Err(HcclError::para(format!(
                "peer rank {rank} is out of range for {} ranks",
                m.peers.len()
            ))
            .rank(me)),
            Some(Some(mem)) => Ok(mem.clone()),
            Some(None) => Err(HcclError::not_support(format!(
                "rank {rank} is on host {}, this rank ({me}) on host {}: only the symmetric windows \
                 of ranks on one host can be addressed directly",
                self.host(rank),
                self.host(me)
            ))
            .rank(me)
            .peer(rank)),
        }
    }

    /// The address of byte `offset` of rank `rank`'s window in this
    /// process (HCCL's `HcclSymWinGetPeerPointer`): loads and stores
    /// through it reach that rank's memory. `offset` must be inside the
    /// window (`HCCL_E_PARA`); otherwise errors as
    /// [`peer_mem`](Self::peer_mem). The pointer is valid while the window
    /// is registered.
    pub fn peer_ptr(&self, offset: usize, rank: u32) -> Result<*mut u8> {
        if offset >= self.size() {
            return Err(HcclError::para(format!(
                "offset {offset} is outside the symmetric window of {} bytes",
                self.size()
            ))
            .rank(self.inner.rank));
        }
        let mem = self.peer_mem(rank)?;
        Ok((mem.addr() as usize + offset) as *mut u8)
    }

    fn host(&self, r: u32) -> &str {
        self.inner.hosts.get(r as usize).map_or("?", String::as_str)
    }

    /// Whether `mem` lies inside this rank's window; where, if so.
    pub(crate) fn offset_of(&self, mem: &DeviceMem) -> Option<usize> {
        let l = &self.inner.local;
        (l.same_region(mem)
            && mem.offset() >= l.offset()
            && mem.offset() + mem.len() <= l.offset() + l.len())
        .then(|| mem.offset() - l.offset())
    }

    /// Whether both are the same window (clones of one registration).
    pub fn same_window(&self, other: &SymWindow) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// Drops the peers' mappings and the registration the window made.
    pub(crate) fn release(&self, domain: u64) {
        if let Some(m) = self.lock().take() {
            if m.marked {
                let _ = self.inner.local.deregister_in(domain);
            }
        }
    }
}

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

use crate::communicator::Communicator;
use hccl_platform::{DeviceMem, HcclError, ImportOwner, MemHandle, Result};
use std::sync::{Arc, Mutex};

/// Bytes of the record ranks exchange: status (4), sequence number (4),
/// size (8), handle.
const RECORD: usize = 16 + MemHandle::WIRE;

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

/// A record: `status` (0 = fine), the window's sequence number, its size
/// and handle.
fn record(status: u32, seq: u32, size: usize, handle: Option<MemHandle>) -> [u8; RECORD] {
    let mut r = [0u8; RECORD];
    r[0..4].copy_from_slice(&status.to_le_bytes());
    r[4..8].copy_from_slice(&seq.to_le_bytes());
    r[8..16].copy_from_slice(&(size as u64).to_le_bytes());
    if let Some(h) = handle {
        r[16..].copy_from_slice(&h.to_bytes());
    }
    r
}

struct Record {
    status: u32,
    seq: u32,
    size: u64,
    handle: Option<MemHandle>,
}

fn parse(r: &[u8]) -> Record {
    let u32_at = |o: usize| u32::from_le_bytes(r[o..o + 4].try_into().expect("4 bytes"));
    Record {
        status: u32_at(0),
        seq: u32_at(4),
        size: u64::from_le_bytes(r[8..16].try_into().expect("8 bytes")),
        handle: r[16..RECORD]
            .try_into()
            .ok()
            .and_then(MemHandle::from_bytes),
    }
}

/// The ranks whose records `pick` selects.
fn ranks_where(records: &[Record], pick: impl Fn(&Record) -> bool) -> Vec<u32> {
    (0..records.len() as u32)
        .filter(|&r| pick(&records[r as usize]))
        .collect()
}

impl Communicator {
    /// Registers `mem` as this rank's part of a symmetric window (HCCL's
    /// `HcclCommSymWinRegister`). Collective: every rank calls it, in the
    /// same order as its other windows, with a buffer of the same size.
    /// Each rank then maps the windows of the ranks on its host
    /// ([`SymWindow::peer_mem`], [`SymWindow::peer_ptr`]); the memory is
    /// also registered with the communicator for its ops (unless it was
    /// already). Errors, on every rank: a rank's buffer is not shareable
    /// memory, is empty, or overlaps memory registered with the
    /// communicator (`HCCL_E_PARA`, the failing rank saying why and the
    /// others naming it); the sizes differ (`HCCL_E_PARA` naming every
    /// rank's size); a rank could not map a peer's window. After an error
    /// no rank has the window.
    pub fn sym_win_register(&self, mem: &DeviceMem) -> Result<SymWindow> {
        let me = self.rank();
        let domain = self.domain();
        let ctx = |e: HcclError| e.rank(me).during("registering a symmetric window");
        let seq = self.memory().next_window_seq();
        // this rank's checks; their result goes to every rank
        let local: Result<(MemHandle, bool)> = (|| {
            let h = mem.share_handle().ok_or_else(|| {
                HcclError::para(format!(
                    "a symmetric window must be shareable memory (DeviceMem::alloc_shareable, \
                     DeviceBuffer, aclrtMalloc); this buffer of {} bytes is not",
                    mem.len()
                ))
            })?;
            if mem.is_empty() {
                return Err(HcclError::para("a symmetric window cannot be empty"));
            }
            let marked = if mem.is_registered_in(domain) {
                false
            } else {
                mem.register_in(domain)?;
                true
            };
            Ok((h, marked))
        })();
        let unmark = |marked: bool| {
            if marked {
                let _ = mem.deregister_in(domain);
            }
        };
        let (handle, marked) = match &local {
            Ok((h, m)) => (Some(*h), *m),
            Err(_) => (None, false),
        };
        let mine = record(local.is_err() as u32, seq, mem.len(), handle);
        let all = match self.all_gather_records("SymWinRegister", &mine) {
            Ok(all) => all,
            Err(e) => {
                unmark(marked);
                return Err(ctx(e));
            }
        };
        let records: Vec<Record> = all.iter().map(|r| parse(r)).collect();
        if let Err(e) = local {
            return Err(ctx(e));
        }
        let fail = |e: HcclError| {
            unmark(marked);
            Err(ctx(e))
        };
        let failed = ranks_where(&records, |r| r.status != 0);
        if !failed.is_empty() {
            return fail(HcclError::para(format!(
                "rank(s) {failed:?} could not register their part of the symmetric window (see \
                 their errors); no rank registered it"
            )));
        }
        if records.iter().any(|r| r.seq != seq) {
            let seqs: Vec<u32> = records.iter().map(|r| r.seq).collect();
            return fail(HcclError::para(format!(
                "ranks register different symmetric windows: by rank, each registers its window \
                 number {seqs:?}"
            )));
        }
        if records.iter().any(|r| r.size != mem.len() as u64) {
            let sizes: Vec<String> = records
                .iter()
                .enumerate()
                .map(|(r, rec)| format!("rank {r}: {} bytes", rec.size))
                .collect();
            return fail(HcclError::para(format!(
                "the symmetric window sizes differ between ranks ({}): every rank must register \
                 a window of the same size",
                sizes.join(", ")
            )));
        }
        // map the host peers' windows, then make sure every rank did
        let imports = ImportOwner::new();
        let mapped: Result<Vec<Option<DeviceMem>>> = (0..self.size())
            .map(|q| {
                if q == me {
                    return Ok(Some(mem.clone()));
                }
                if !self.same_host(q) {
                    return Ok(None);
                }
                let h = records[q as usize].handle.ok_or_else(|| {
                    HcclError::internal(format!("rank {q} sent no window handle"))
                })?;
                imports
                    .import(&h)
                    .map(Some)
                    .map_err(|e| e.peer(q).during(format!("mapping rank {q}'s window")))
            })
            .collect();
        let status = record(mapped.is_err() as u32, seq, mem.len(), None);
        let confirmations = match self.all_gather_records("SymWinMap", &status) {
            Ok(c) => c,
            Err(e) => return fail(e),
        };
        let peers = match mapped {
            Ok(p) => p,
            Err(e) => return fail(e),
        };
        let confirmations: Vec<Record> = confirmations.iter().map(|r| parse(r)).collect();
        let failed = ranks_where(&confirmations, |r| r.status != 0);
        if !failed.is_empty() {
            return fail(HcclError::remote(format!(
                "rank(s) {failed:?} could not map their peers' parts of the symmetric window (see \
                 their errors); no rank registered it"
            )));
        }
        let win = SymWindow {
            inner: Arc::new(Inner {
                seq,
                rank: me,
                local: mem.clone(),
                hosts: (0..self.size())
                    .map(|r| self.host_of(r).to_owned())
                    .collect(),
                mapped: Mutex::new(Some(Mapped {
                    peers,
                    marked,
                    _imports: imports,
                })),
            }),
        };
        self.memory()
            .windows
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(win.clone());
        tracing::debug!(
            rank = me,
            seq,
            bytes = mem.len(),
            "symmetric window registered"
        );
        Ok(win)
    }

    /// Deregisters a symmetric window (HCCL's `HcclCommSymWinDeregister`).
    /// Collective: every rank deregisters the same window (in the same
    /// order); once all have arrived — no rank still writes into a peer's
    /// window — each unmaps its peers' windows and, if registering the
    /// window registered its memory, deregisters it. Errors: `win` is not
    /// a live window of this communicator (`HCCL_E_PARA`, nothing done);
    /// ranks deregister different windows (`HCCL_E_PARA` on every rank,
    /// nothing done).
    pub fn sym_win_deregister(&self, win: &SymWindow) -> Result<()> {
        let me = self.rank();
        let ctx = |e: HcclError| e.rank(me).during("deregistering a symmetric window");
        let live = self
            .memory()
            .windows
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .any(|w| w.same_window(win));
        if !live {
            return Err(ctx(HcclError::para(
                "the window is not a live symmetric window of this communicator",
            )));
        }
        let seq = win.inner.seq;
        let all = self
            .all_gather_records("SymWinDeregister", &record(0, seq, win.size(), None))
            .map_err(ctx)?;
        let seqs: Vec<u32> = all.iter().map(|r| parse(r).seq).collect();
        if seqs.iter().any(|&s| s != seq) {
            return Err(ctx(HcclError::para(format!(
                "ranks deregister different symmetric windows: by rank, window number {seqs:?}"
            ))));
        }
        self.memory()
            .windows
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|w| !w.same_window(win));
        win.release(self.domain());
        Ok(())
    }

    /// The live symmetric window of this communicator that holds all of
    /// `mem` on this rank, and where `mem` starts in it (HCCL's
    /// `HcclCommSymWinGet`).
    pub fn sym_window_of(&self, mem: &DeviceMem) -> Option<(SymWindow, usize)> {
        self.memory()
            .windows
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .find_map(|w| w.offset_of(mem).map(|o| (w.clone(), o)))
    }
}

//! Registering and deregistering symmetric windows (HCCL's
//! `HcclCommSymWinRegister`, `HcclCommSymWinDeregister`): the collective
//! calls of [`Communicator`] that make and undo a [`SymWindow`] (the type
//! lives in `sym_window.rs`, which the communicator's memory table uses
//! without depending on the communicator).

use crate::communicator::Communicator;
use crate::sym_window::SymWindow;
use hccl_platform::{DeviceMem, HcclError, ImportOwner, MemHandle, Result};

/// Bytes of the record ranks exchange: status (4), sequence number (4),
/// size (8), handle.
const RECORD: usize = 16 + MemHandle::WIRE;

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
        let win = SymWindow::new(
            seq,
            me,
            mem.clone(),
            (0..self.size())
                .map(|r| self.host_of(r).to_owned())
                .collect(),
            peers,
            marked,
            imports,
        );
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
        let seq = win.seq();
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

//! Memory registered with a communicator (HCCL's `HcclCommRegister`,
//! `HcclCommExchangeMem`): shareable memory whose handles the
//! communicator's ops send to peers of this host, which then map it and
//! reach it by load and store — a single copy with no system call per
//! transfer, reductions straight out of the peer's buffer.
//!
//! A registration is a mark on the memory's region under the
//! communicator's domain (its device's uid, which the link verbs read from
//! the op's stream: `DeviceMem::register_in`), plus an entry here that
//! keeps the memory alive while registered and holds the peers'
//! registrations [`Communicator::exchange_mem`] mapped. Everything is
//! undone by [`Communicator::deregister_mem`] or when the communicator
//! goes.

use crate::comm_memory::{MemRegistration, PeerReg, RegEntry};
use crate::communicator::Communicator;
use hccl_platform::{DeviceMem, HcclError, ImportOwner, MemHandle, Result};

/// Bytes of a registration record: a marker, the memory's address in its
/// owner's process (one-sided ops name peer memory by it), the handle.
const RECORD: usize = 16 + MemHandle::WIRE;
/// "This record holds a handle" ("HREG").
const RECORD_MAGIC: u64 = 0x4745_5248;

impl Communicator {
    /// Registers `mem` with this communicator (HCCL's `HcclCommRegister`):
    /// from now on this communicator's ops on buffers inside it send their
    /// handles to peers of this host, which map them and read (and write)
    /// them directly instead of with cross-memory attach. The memory must
    /// be shareable ([`DeviceMem::alloc_shareable`], `DeviceBuffer`,
    /// `aclrtMalloc`), non-empty, and must not overlap memory already
    /// registered with this communicator; otherwise `HCCL_E_PARA` saying
    /// which. The registration keeps the memory alive until
    /// [`deregister_mem`](Self::deregister_mem) or the communicator goes.
    pub fn register_mem(&self, mem: &DeviceMem) -> Result<MemRegistration> {
        let ctx = |e: HcclError| e.rank(self.rank()).during("registering memory");
        let mut regs = self.memory().regs.lock().unwrap_or_else(|p| p.into_inner());
        mem.register_in(self.domain()).map_err(ctx)?;
        let id = self.memory().next_id();
        regs.push(RegEntry {
            id,
            mem: mem.clone(),
            peers: Vec::new(),
            imports: ImportOwner::new(),
        });
        tracing::debug!(
            rank = self.rank(),
            id,
            bytes = mem.len(),
            "memory registered"
        );
        Ok(MemRegistration {
            id,
            mem: mem.clone(),
        })
    }

    /// Undoes [`register_mem`](Self::register_mem) (HCCL's
    /// `HcclCommDeregister`): later ops read the memory with cross-memory
    /// attach again, and the peers' registrations mapped by
    /// [`exchange_mem`](Self::exchange_mem) for it are released.
    /// `HCCL_E_PARA` if `reg` is not a live registration of this
    /// communicator.
    pub fn deregister_mem(&self, reg: &MemRegistration) -> Result<()> {
        let mut regs = self.memory().regs.lock().unwrap_or_else(|p| p.into_inner());
        let i = regs.iter().position(|r| r.id == reg.id).ok_or_else(|| {
            HcclError::para(format!(
                "registration {} is not a live registration of this communicator (deregistered \
                 already, or made by another one)",
                reg.id
            ))
            .rank(self.rank())
        })?;
        let entry = regs.swap_remove(i);
        entry.mem.deregister_in(self.domain())?;
        Ok(())
    }

    /// Whether all of `mem` lies in memory registered with this
    /// communicator.
    pub fn is_registered(&self, mem: &DeviceMem) -> bool {
        mem.is_registered_in(self.domain())
    }

    /// Sends the handle of `reg` to each of `peers` and maps theirs
    /// (HCCL's `HcclCommExchangeMem`): every listed peer must call this
    /// with this rank among its peers. Mapping now saves the first op
    /// that reads a peer's registered buffers the mapping (the
    /// process-wide cache serves it); peers on other hosts send their
    /// handles but are not mapped. Errors: a peer out of range, this rank
    /// itself or listed twice (`HCCL_E_PARA`, nothing sent); `reg` not a
    /// registration of this communicator (`HCCL_E_PARA`); a peer's memory
    /// that cannot be mapped (naming the peer).
    pub fn exchange_mem(&self, reg: &MemRegistration, peers: &[u32]) -> Result<()> {
        let ctx = |e: HcclError| e.rank(self.rank()).during("exchanging registered memory");
        for (i, &q) in peers.iter().enumerate() {
            if q >= self.size() {
                return Err(ctx(HcclError::para(format!(
                    "peer rank {q} is out of range for {} ranks",
                    self.size()
                ))));
            }
            if q == self.rank() {
                return Err(ctx(HcclError::para(
                    "a rank does not exchange memory with itself",
                )));
            }
            if peers[..i].contains(&q) {
                return Err(ctx(HcclError::para(format!(
                    "peer rank {q} is listed twice"
                ))));
            }
        }
        let (handle, base) = {
            let regs = self.memory().regs.lock().unwrap_or_else(|p| p.into_inner());
            let e = regs.iter().find(|r| r.id == reg.id).ok_or_else(|| {
                ctx(HcclError::para(format!(
                    "registration {} is not a live registration of this communicator",
                    reg.id
                )))
            })?;
            let h = e
                .mem
                .share_handle()
                .ok_or_else(|| ctx(HcclError::internal("registered memory has no handle")))?;
            (h, e.mem.addr() as usize as u64)
        };
        let mut record = [0u8; RECORD];
        record[..8].copy_from_slice(&RECORD_MAGIC.to_le_bytes());
        record[8..16].copy_from_slice(&base.to_le_bytes());
        record[16..].copy_from_slice(&handle.to_bytes());
        let theirs = self
            .exchange_records("ExchangeMem", &record, peers)
            .map_err(ctx)?;
        let mut regs = self.memory().regs.lock().unwrap_or_else(|p| p.into_inner());
        let e = regs.iter_mut().find(|r| r.id == reg.id).ok_or_else(|| {
            ctx(HcclError::para(format!(
                "registration {} was deregistered during the exchange",
                reg.id
            )))
        })?;
        for (&q, rec) in peers.iter().zip(&theirs) {
            let magic = u64::from_le_bytes(rec[..8].try_into().expect("8 bytes"));
            let their_base = u64::from_le_bytes(rec[8..16].try_into().expect("8 bytes"));
            let h = rec[16..]
                .try_into()
                .ok()
                .and_then(MemHandle::from_bytes)
                .filter(|_| magic == RECORD_MAGIC)
                .ok_or_else(|| {
                    ctx(HcclError::internal(format!(
                        "rank {q} sent no registration handle"
                    )))
                })?;
            if !self.same_host(q) {
                continue;
            }
            let m = e.imports.import(&h).map_err(|err| {
                ctx(err
                    .peer(q)
                    .during(format!("mapping rank {q}'s registered memory")))
            })?;
            e.peers.retain(|p| p.rank != q);
            e.peers.push(PeerReg {
                rank: q,
                mem: m,
                base: their_base,
                handle: h,
            });
        }
        Ok(())
    }

    /// The peers' registrations mapped for `reg` by
    /// [`exchange_mem`](Self::exchange_mem), by rank.
    pub fn exchanged_peers(&self, reg: &MemRegistration) -> Vec<(u32, DeviceMem)> {
        let regs = self.memory().regs.lock().unwrap_or_else(|p| p.into_inner());
        regs.iter()
            .find(|r| r.id == reg.id)
            .map(|e| e.peers.iter().map(|p| (p.rank, p.mem.clone())).collect())
            .unwrap_or_default()
    }

    /// `len` bytes at `remote_addr` in rank `peer`'s process, as this
    /// process maps them: the range must lie in memory `peer` registered
    /// and exchanged with this rank ([`exchange_mem`](Self::exchange_mem),
    /// under any of this communicator's registrations). HCCL's one-sided
    /// `HcclBatchPut` / `HcclBatchGet` name peer memory this way. Errors: a
    /// peer out of range or this rank (`HCCL_E_PARA`); a peer on another
    /// host (`HCCL_E_NOT_SUPPORT`, naming both hosts: its memory cannot be
    /// mapped here); a range outside every exchanged registration of the
    /// peer (`HCCL_E_PARA`).
    pub fn remote_mem(&self, peer: u32, remote_addr: u64, len: usize) -> Result<DeviceMem> {
        let me = self.rank();
        if peer >= self.size() || peer == me {
            return Err(HcclError::para(format!(
                "remote rank {peer} is not a peer of rank {me} in {} ranks",
                self.size()
            ))
            .rank(me));
        }
        if !self.same_host(peer) {
            return Err(HcclError::not_support(format!(
                "rank {peer} is on host {}, this rank ({me}) on host {}: one-sided operations \
                 reach only the registered memory of ranks on this host",
                self.host_of(peer),
                self.host_of(me)
            ))
            .rank(me)
            .peer(peer));
        }
        let regs = self.memory().regs.lock().unwrap_or_else(|p| p.into_inner());
        let end = remote_addr.checked_add(len as u64);
        for p in regs
            .iter()
            .flat_map(|r| r.peers.iter())
            .filter(|p| p.rank == peer)
        {
            let top = p.base + p.mem.len() as u64;
            if remote_addr >= p.base && end.is_some_and(|e| e <= top) {
                return p.mem.range((remote_addr - p.base) as usize, len);
            }
        }
        Err(HcclError::para(format!(
            "[{remote_addr:#x}, +{len}) is not inside memory rank {peer} registered and exchanged \
             with this rank (HcclCommRegister + HcclCommExchangeMem on both sides)"
        ))
        .rank(me)
        .peer(peer))
    }

    /// Registers this communicator's registrations with `new`, a
    /// communicator made from this one by shrink or grow, so the memory
    /// stays registered across the change (NCCL keeps a shrunk
    /// communicator's registrations too): each keeps its id, so a
    /// handle from this communicator deregisters it from `new`. The
    /// peers' registrations mapped by `exchange_mem` come along for the
    /// peers that are in `new`, under their new rank (`renumber`: old
    /// rank to new, `None` for a rank not in `new`), so one-sided ops on
    /// them need no new exchange. Symmetric windows are not carried:
    /// they are collective over the old rank set (register them again).
    pub(crate) fn carry_registrations(
        &self,
        new: &Communicator,
        renumber: impl Fn(u32) -> Option<u32>,
    ) -> Result<()> {
        let regs = self.memory().regs.lock().unwrap_or_else(|p| p.into_inner());
        let mut carried = new.memory().regs.lock().unwrap_or_else(|p| p.into_inner());
        let mut last = 0;
        for e in regs.iter() {
            e.mem.register_in(new.domain()).map_err(|err| {
                err.rank(new.rank()).during(format!(
                    "carrying registration {} to the new communicator",
                    e.id
                ))
            })?;
            let imports = ImportOwner::new();
            let mut peers = Vec::new();
            for p in &e.peers {
                let Some(rank) = renumber(p.rank) else {
                    continue;
                };
                // the mapping is cached process-wide: claiming it again
                // maps nothing
                let mem = imports.import(&p.handle).map_err(|err| {
                    err.rank(new.rank()).peer(rank).during(format!(
                        "carrying rank {}'s registered memory to the new communicator",
                        p.rank
                    ))
                })?;
                peers.push(PeerReg {
                    rank,
                    mem,
                    base: p.base,
                    handle: p.handle,
                });
            }
            carried.push(RegEntry {
                id: e.id,
                mem: e.mem.clone(),
                peers,
                imports,
            });
            last = last.max(e.id);
        }
        new.memory().ids_after(last);
        if !regs.is_empty() {
            tracing::debug!(
                rank = new.rank(),
                registrations = regs.len(),
                "registered memory carried to the new communicator"
            );
        }
        Ok(())
    }
}

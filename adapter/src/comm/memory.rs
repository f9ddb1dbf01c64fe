//! Memory peers address: registration with the communicator (HCCL's
//! `HcclCommRegister` / `HcclCommDeregister` / `HcclCommExchangeMem`) and
//! symmetric windows (`HcclCommSymWinRegister` and friends). The calls
//! are the framework communicator's; see there for the semantics.

use super::HcclComm;
use hccl_framework::{MemRegistration, SymWindow};
use hccl_platform::{DeviceMem, Result};

impl HcclComm {
    /// Registers shareable memory with this communicator: its ops on
    /// buffers inside it let peers of this host read (and write) them
    /// through a mapping instead of with cross-memory attach. See
    /// [`Communicator::register_mem`](hccl_framework::Communicator::register_mem).
    pub fn register_mem(&self, mem: &DeviceMem) -> Result<MemRegistration> {
        self.communicator().register_mem(mem)
    }

    /// Undoes [`register_mem`](Self::register_mem).
    pub fn deregister_mem(&self, reg: &MemRegistration) -> Result<()> {
        self.communicator().deregister_mem(reg)
    }

    /// Whether all of `mem` lies in memory registered with this communicator.
    pub fn is_registered(&self, mem: &DeviceMem) -> bool {
        self.communicator().is_registered(mem)
    }

    /// Sends `reg`'s handle to `peers` and maps theirs (every listed peer
    /// calls this with this rank among its peers). See
    /// [`Communicator::exchange_mem`](hccl_framework::Communicator::exchange_mem).
    pub fn exchange_mem(&self, reg: &MemRegistration, peers: &[u32]) -> Result<()> {
        self.communicator().exchange_mem(reg, peers)
    }

    /// The peers' registrations mapped for `reg` by
    /// [`exchange_mem`](Self::exchange_mem), by rank.
    pub fn exchanged_peers(&self, reg: &MemRegistration) -> Vec<(u32, DeviceMem)> {
        self.communicator().exchanged_peers(reg)
    }

    /// `len` bytes at `remote_addr` in rank `peer`'s process, mapped here
    /// (memory `peer` registered and exchanged with this rank). See
    /// [`Communicator::remote_mem`](hccl_framework::Communicator::remote_mem).
    pub fn remote_mem(&self, peer: u32, remote_addr: u64, len: usize) -> Result<DeviceMem> {
        self.communicator().remote_mem(peer, remote_addr, len)
    }

    /// Registers `mem` as this rank's part of a symmetric window
    /// (collective; every rank's of the same size). See
    /// [`Communicator::sym_win_register`](hccl_framework::Communicator::sym_win_register).
    pub fn sym_win_register(&self, mem: &DeviceMem) -> Result<SymWindow> {
        self.communicator().sym_win_register(mem)
    }

    /// Deregisters a symmetric window (collective).
    pub fn sym_win_deregister(&self, win: &SymWindow) -> Result<()> {
        self.communicator().sym_win_deregister(win)
    }

    /// The live symmetric window holding all of `mem` on this rank, and
    /// where `mem` starts in it.
    pub fn sym_window_of(&self, mem: &DeviceMem) -> Option<(SymWindow, usize)> {
        self.communicator().sym_window_of(mem)
    }
}

//! Memory: regions (host, shared, external, shareable, peers' mapped) and
//! the handles that address them.
//!
//! Above the platform, memory is a [`DeviceMem`]: a region, an offset and a
//! length. Peers address each other's memory by [`MemKind`] + offset (HCCL's
//! `TxAsync(dstMemType, dstOffset, ...)`), never by pointer.

pub mod cma;
mod counter;
mod device_mem;
mod event_words;
mod import;
mod kind;
mod nt_copy;
pub(crate) mod peer_stats;
mod region;
mod shareable;
mod shm;
mod virtual_mem;

pub use counter::SharedCounter;
pub use device_mem::{DeviceBuffer, DeviceMem, PinnedMem, WeakMem};
pub use import::{imported_regions, imports_mapped, ImportOwner, MemHandle};
pub use kind::MemKind;
pub use peer_stats::{peer_access_stats, PeerAccessStats};
pub use region::RegionKind;
pub use shareable::registration_epoch;
pub use shm::{shm_segment_name, SHM_PREFIX};
pub use virtual_mem::VirtualMem;

pub(crate) use device_mem::{copy_mem, copy_view, reduce_mem, reduce_view, MemView};
pub(crate) use region::Region;

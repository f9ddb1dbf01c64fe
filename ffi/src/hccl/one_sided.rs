//! One-sided operations (`hccl_ex.h`): `HcclBatchPut` and `HcclBatchGet`.
//!
//! A descriptor names this rank's buffer and an address in the remote
//! rank's process, inside memory that rank registered
//! (`HcclCommRegister`) and exchanged with this rank
//! (`HcclCommExchangeMem`). That memory is mapped here by the exchange, so
//! every transfer is one copy task on the stream: into the peer's memory
//! (put) or out of it (get). Every descriptor is checked before anything
//! is enqueued. Ranks on other hosts cannot be mapped:
//! `HCCL_E_NOT_SUPPORT`.

use super::collectives::target;
use crate::guard::{hccl, non_null};
use crate::mem::{resolve, Arg};
use crate::types::*;
use hccl_adapter::{DataType, DeviceMem, HcclError, Result};

fn batch(
    put: bool,
    comm: HcclComm,
    remoteRank: u32,
    desc: *mut HcclOneSideOpDesc,
    descNum: u32,
    stream: aclrtStream,
) -> Result<()> {
    let (c, s) = target(comm, stream)?;
    if descNum == 0 {
        return Ok(());
    }
    non_null(desc, "desc")?;
    let (p, me) = (c.comm.size(), c.comm.rank());
    if remoteRank >= p || remoteRank == me {
        return Err(HcclError::para(format!(
            "remoteRank {remoteRank} is not a peer of rank {me} in {p} ranks"
        )));
    }
    // SAFETY: non-null; the caller passes descNum descriptors (C contract).
    let descs = unsafe { std::slice::from_raw_parts(desc, descNum as usize) };
    let mut copies: Vec<(DeviceMem, DeviceMem)> = Vec::with_capacity(descs.len());
    for (i, d) in descs.iter().enumerate() {
        let at = |e: HcclError| {
            let what = if put { "HcclBatchPut" } else { "HcclBatchGet" };
            e.during(format!("{what} desc[{i}]"))
        };
        let dt = DataType::from_code(d.dataType).map_err(at)?;
        let len = dt.bytes_of(d.count).map_err(at)?;
        if len == 0 {
            continue;
        }
        non_null(d.localAddr, "localAddr").map_err(at)?;
        non_null(d.remoteAddr, "remoteAddr").map_err(at)?;
        let local = resolve(&[Arg {
            what: "localAddr",
            ptr: d.localAddr,
            len,
        }])
        .map_err(at)?
        .remove(0);
        let remote = c
            .comm
            .remote_mem(remoteRank, d.remoteAddr as usize as u64, len)
            .map_err(at)?;
        copies.push((local, remote));
    }
    for (local, remote) in &copies {
        if put {
            s.memcpy_async(remote, local)?;
        } else {
            s.memcpy_async(local, remote)?;
        }
    }
    Ok(())
}

/// `HcclBatchPut`: copies each descriptor's `localAddr` into rank
/// `remoteRank`'s memory at `remoteAddr`, in stream order.
#[no_mangle]
pub extern "C" fn HcclBatchPut(
    comm: HcclComm,
    remoteRank: u32,
    desc: *mut HcclOneSideOpDesc,
    descNum: u32,
    stream: aclrtStream,
) -> HcclResult {
    hccl("HcclBatchPut", || {
        batch(true, comm, remoteRank, desc, descNum, stream)
    })
}

/// `HcclBatchGet`: copies rank `remoteRank`'s memory at each descriptor's
/// `remoteAddr` into its `localAddr`, in stream order.
#[no_mangle]
pub extern "C" fn HcclBatchGet(
    comm: HcclComm,
    remoteRank: u32,
    desc: *mut HcclOneSideOpDesc,
    descNum: u32,
    stream: aclrtStream,
) -> HcclResult {
    hccl("HcclBatchGet", || {
        batch(false, comm, remoteRank, desc, descNum, stream)
    })
}

//! Cross-memory attach (CMA): copying out of another process's memory with
//! `process_vm_readv(2)`, so a rank can read a peer's user buffer in one
//! copy instead of staging it through the CCL buffers.
//!
//! The kernel checks the access (same user and ptrace permission, e.g. no
//! Yama `ptrace_scope` ≥ 1 between unrelated processes) and every address:
//! a bad address is an `EFAULT` error, never a fault in this process. The
//! same call works on this process itself, so ranks that are threads and the
//! plan simulator use the same path.
//!
//! `HCCL_RS_CMA=0` turns the path off (executors that need it are then not
//! selected, and fail with a clear error when forced); `1` forces it on;
//! unset or `auto` probes once per process.

use super::DeviceMem;
use crate::error::{HcclError, Result};
use crate::sync::OnceLock;
use nix::sys::uio::{process_vm_readv, RemoteIoVec};
use nix::unistd::Pid;
use std::io::IoSliceMut;

/// Largest single `process_vm_readv` call: the kernel pins the pages of a
/// call as it goes, and bounded calls keep one copy from holding many pins.
const MAX_CALL: usize = 64 << 20;

/// This process's id, as peers name it for CMA.
pub fn own_pid() -> u32 {
    std::process::id()
}

/// Whether CMA may be used: `HCCL_RS_CMA` (0/1/auto), the Yama ptrace
/// policy (scope ≥ 2 forbids it; scope 1 forbids it between sibling rank
/// processes), and a probe read of this process's own memory. Decided once
/// per process.
pub fn permitted() -> bool {
    static PERMITTED: OnceLock<bool> = OnceLock::new();
    *PERMITTED.get_or_init(|| {
        let setting = std::env::var("HCCL_RS_CMA").unwrap_or_default();
        match setting.trim() {
            "0" | "off" | "false" => return false,
            "1" | "on" | "true" => return probe_self(),
            _ => {}
        }
        let yama = std::fs::read_to_string("/proc/sys/kernel/yama/ptrace_scope")
            .ok()
            .and_then(|s| s.trim().parse::<u32>().ok())
            .unwrap_or(0);
        let ok = yama == 0 && probe_self();
        tracing::debug!(yama, ok, "cross-memory attach (process_vm_readv)");
        ok
    })
}

fn probe_self() -> bool {
    let src = [0x5au8; 8];
    let mut dst = [0u8; 8];
    let remote = [RemoteIoVec {
        base: src.as_ptr() as usize,
        len: src.len(),
    }];
    let n = process_vm_readv(
        Pid::from_raw(own_pid() as i32),
        &mut [IoSliceMut::new(&mut dst)],
        &remote,
    );
    matches!(n, Ok(8)) && dst == src
}

/// Copies `dst.len()` bytes from address `addr` of process `pid` into `dst`.
pub fn read(pid: u32, addr: u64, dst: &DeviceMem) -> Result<()> {
    if dst.virtual_contents().is_some() && !dst.is_empty() {
        // no bytes to read into; the address names no mapping either
        return Err(crate::error::HcclError::from_code(
            crate::error::HcclResult::ENotSupport,
            "reading a peer's buffer by address needs bytes, and this is virtual memory",
        ));
    }
    let mut done = 0usize;
    while done < dst.len() {
        let want = (dst.len() - done).min(MAX_CALL);
        // SAFETY: `dst` lies inside a live region (the handle keeps it
        // alive) and `[done, done + want)` is inside `dst`; writers racing
        // with this copy are excluded by the executors' ack protocol, as for
        // every other copy into a buffer (see `copy_mem`).
        let local = unsafe { std::slice::from_raw_parts_mut(dst.ptr().add(done), want) };
        let remote = [RemoteIoVec {
            base: (addr as usize).wrapping_add(done),
            len: want,
        }];
        let n = process_vm_readv(
            Pid::from_raw(pid as i32),
            &mut [IoSliceMut::new(local)],
            &remote,
        )
        .map_err(|e| {
            HcclError::syscall(format!(
                "reading {want} bytes at {:#x} of process {pid} with process_vm_readv failed: {e}{}",
                addr as usize + done,
                if e == nix::errno::Errno::EPERM {
                    " (ptrace permission denied; set HCCL_RS_CMA=0 to stage through shared memory instead)"
                } else {
                    ""
                }
            ))
        })?;
        if n == 0 {
            return Err(HcclError::syscall(format!(
                "process_vm_readv of process {pid} at {:#x} made no progress",
                addr as usize + done
            )));
        }
        done += n;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_own_memory_and_reports_bad_addresses() {
        let src = DeviceMem::alloc(300_000).unwrap();
        let bytes: Vec<u8> = (0..300_000u32).map(|i| (i * 7 % 251) as u8).collect();
        src.copy_from_host_bytes(&bytes).unwrap();
        let dst = DeviceMem::alloc(300_000).unwrap();
        read(own_pid(), src.addr(), &dst).unwrap();
        assert_eq!(dst.to_vec::<u8>(300_000).unwrap(), bytes);
        // page 0 is never mapped: EFAULT, reported as an error
        let e = read(own_pid(), 16, &dst.range(0, 64).unwrap()).unwrap_err();
        assert!(e.to_string().contains("process_vm_readv failed"), "{e}");
    }
}

//! Reading a caller's `HcclCommConfig` (versioned: only the fields its
//! header's size covers are read).

use crate::types::*;
use hccl_adapter::{CommConfig, HcclError, Result};
use std::mem::{offset_of, size_of};

/// Whether deterministic reduction was asked for (process-wide,
/// `HcclSetConfig`); reductions here always run in a fixed order, so both
/// settings give bit-identical results run to run.
pub(crate) static DETERMINISTIC: std::sync::atomic::AtomicI32 =
    std::sync::atomic::AtomicI32::new(0);

/// The configuration for a new communicator: the environment's, overridden
/// by the fields `cfg` sets (NULL = the environment's alone).
pub(crate) fn comm_config(cfg: *const HcclCommConfig) -> Result<CommConfig> {
    let mut out = CommConfig::from_env()?;
    if cfg.is_null() {
        return Ok(out);
    }
    // SAFETY: a non-null config points to at least the 24-byte header
    // (C contract: it was filled by HcclCommConfigInit).
    let hdr: [u8; HCCL_COMM_CONFIG_INFO_BYTES] = unsafe { std::ptr::read_unaligned(cfg.cast()) };
    let size = usize::from_ne_bytes(hdr[0..8].try_into().expect("8 bytes"));
    let magic = u32::from_ne_bytes(hdr[8..12].try_into().expect("4 bytes"));
    let version = u32::from_ne_bytes(hdr[12..16].try_into().expect("4 bytes"));
    if magic != HCCL_COMM_CONFIG_MAGIC_WORD {
        return Err(HcclError::para(format!(
            "config magic word is {magic:#x}, not {HCCL_COMM_CONFIG_MAGIC_WORD:#x}: initialize it with HcclCommConfigInit"
        )));
    }
    if size < HCCL_COMM_CONFIG_INFO_BYTES {
        return Err(HcclError::para(format!(
            "config size {size} is smaller than its {HCCL_COMM_CONFIG_INFO_BYTES}-byte header"
        )));
    }
    // Copy what both sides know into a zeroed full-size config.
    let n = size.min(size_of::<HcclCommConfig>());
    let mut bytes = vec![0u8; size_of::<HcclCommConfig>()];
    // SAFETY: the caller's config holds `size` ≥ `n` bytes (its header says so).
    unsafe { std::ptr::copy_nonoverlapping(cfg.cast::<u8>(), bytes.as_mut_ptr(), n) };
    // SAFETY: `bytes` holds size_of::<HcclCommConfig>() bytes; every bit
    // pattern is a valid HcclCommConfig (integers and char arrays).
    let c: HcclCommConfig = unsafe { std::ptr::read_unaligned(bytes.as_ptr().cast()) };
    let has = |off: usize, len: usize| off + len <= n;
    tracing::debug!(target: "hccl", size, version, "reading HcclCommConfig");
    if has(offset_of!(HcclCommConfig, hcclBufferSize), 4) && c.hcclBufferSize != HCCL_CONFIG_NOT_SET
    {
        if c.hcclBufferSize == 0 {
            return Err(HcclError::para(
                "config hcclBufferSize is 0 (must be at least 1 MB)",
            ));
        }
        out.buffer_size = (c.hcclBufferSize as usize) << 20;
    }
    if has(offset_of!(HcclCommConfig, hcclDeterministic), 4)
        && c.hcclDeterministic != HCCL_CONFIG_NOT_SET
        && c.hcclDeterministic > 1
    {
        return Err(HcclError::para(format!(
            "config hcclDeterministic is {} (expected 0 or 1)",
            c.hcclDeterministic
        )));
    }
    if has(
        offset_of!(HcclCommConfig, hcclCommName),
        COMM_NAME_MAX_LENGTH,
    ) && c.hcclCommName[0] != 0
    {
        let raw: Vec<u8> = c.hcclCommName.iter().map(|&b| b as u8).collect();
        let end = raw.iter().position(|&b| b == 0).ok_or_else(|| {
            HcclError::para(format!(
                "config hcclCommName is not NUL-terminated within {COMM_NAME_MAX_LENGTH} bytes"
            ))
        })?;
        let name = std::str::from_utf8(&raw[..end])
            .map_err(|_| HcclError::para("config hcclCommName is not UTF-8"))?;
        out.comm_name = Some(name.to_owned());
    }
    if has(offset_of!(HcclCommConfig, hcclOpExpansionMode), 4) && c.hcclOpExpansionMode > 3 {
        return Err(HcclError::para(format!(
            "config hcclOpExpansionMode is {} (expected 0..=3)",
            c.hcclOpExpansionMode
        )));
    }
    Ok(out)
}

//! Reading a caller's `HcclCommConfig` (versioned: only the fields its
//! header's size covers are read; `hcclQos` from version 10 and
//! `hcclChannelSqDepth` from version 11, as HCCL).
//!
//! Fields that mean something on CPUs take effect: `hcclBufferSize`,
//! `hcclDeterministic`, `hcclCommName`, `hcclExecTimeOut`, `hcclAlgo`
//! (`HCCL_ALGO` form), `hcclSymWinMaxMemSizePerRank` (bounds symmetric
//! windows). The others are checked where HCCL checks them, recorded in
//! [`CommExtras`] and logged at debug level.

use crate::types::*;
use hccl_adapter::{AlgoConfig, CommConfig, Deterministic, HcclError, Result};
use std::ffi::c_char;
use std::mem::{offset_of, size_of};
use std::time::Duration;

/// Deterministic reduction set process-wide by `HcclSetConfig` (0, 1, 2);
/// −1 = never set (the environment's `HCCL_DETERMINISTIC` then holds).
/// A communicator's `hcclDeterministic` overrides it.
pub(crate) static DETERMINISTIC: std::sync::atomic::AtomicI32 =
    std::sync::atomic::AtomicI32::new(-1);

/// The fields of an `HcclCommConfig` that hccl-rs records without acting on
/// them (or acts on outside [`CommConfig`]).
#[derive(Clone, Debug)]
pub(crate) struct CommExtras {
    /// `hcclOpExpansionMode` as asked (0..=6); ops expand on the host CPU.
    pub op_expansion_mode: u32,
    /// `hcclSymWinMaxMemSizePerRank` in bytes: the largest symmetric
    /// window part a rank may register.
    pub sym_win_max_bytes: u64,
    /// `hcclUdi`.
    pub udi: String,
    /// `hcclWorldRankID`.
    pub world_rank_id: u32,
    /// `hcclJobID`.
    pub job_id: u64,
    /// `aclGraphZeroCopyEnable`.
    pub acl_graph_zero_copy: bool,
    /// `hcclRetryEnable` as given (applied to the config's `op_retry`).
    pub retry_enable: String,
    /// `hcclRetryParams` as given (applied likewise).
    pub retry_params: String,
    /// `hcclBufferName` (CCL buffers are never shared between
    /// communicators here).
    pub buffer_name: String,
    /// `hcclQos` (no hyperplane here).
    pub qos: Option<u32>,
    /// `hcclChannelSqDepth` (no send queues here).
    pub sq_depth: Option<u32>,
}

impl Default for CommExtras {
    fn default() -> Self {
        CommExtras {
            op_expansion_mode: 0,
            sym_win_max_bytes: HCCL_DEFAULT_SYMMETRIC_MEMORY_STRIDE << 30,
            udi: String::new(),
            world_rank_id: 0,
            job_id: 0,
            acl_graph_zero_copy: false,
            retry_enable: String::new(),
            retry_params: String::new(),
            buffer_name: String::new(),
            qos: None,
            sq_depth: None,
        }
    }
}

/// A NUL-terminated string field (empty when its first byte is NUL).
fn text(field: &[c_char], name: &str) -> Result<String> {
    let raw: Vec<u8> = field.iter().map(|&b| b as u8).collect();
    let end = raw.iter().position(|&b| b == 0).ok_or_else(|| {
        HcclError::para(format!(
            "config {name} is not NUL-terminated within {} bytes",
            field.len()
        ))
    })?;
    String::from_utf8(raw[..end].to_vec())
        .map_err(|_| HcclError::para(format!("config {name} is not UTF-8")))
}

/// The environment's configuration with `HcclSetConfig`'s deterministic
/// setting applied.
pub(crate) fn env_config() -> Result<CommConfig> {
    let mut out = CommConfig::from_env()?;
    let d = DETERMINISTIC.load(std::sync::atomic::Ordering::Relaxed);
    if let Some(d) = u32::try_from(d).ok().and_then(Deterministic::from_code) {
        out.deterministic = d;
    }
    Ok(out)
}

/// The configuration for a new communicator: the environment's, overridden
/// by the fields `cfg` sets (NULL = the environment's alone), and the
/// fields recorded only.
pub(crate) fn comm_config(cfg: *const HcclCommConfig) -> Result<(CommConfig, CommExtras)> {
    let mut out = env_config()?;
    let mut extras = CommExtras::default();
    if cfg.is_null() {
        return Ok((out, extras));
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
    macro_rules! has {
        ($f:ident) => {
            has(offset_of!(HcclCommConfig, $f), std::mem::size_of_val(&c.$f))
        };
    }
    if has!(hcclBufferSize) && c.hcclBufferSize != HCCL_CONFIG_NOT_SET {
        if c.hcclBufferSize == 0 {
            return Err(HcclError::para(
                "config hcclBufferSize is 0 (must be at least 1 MB)",
            ));
        }
        out.buffer_size = (c.hcclBufferSize as usize) << 20;
    }
    if has!(hcclDeterministic) && c.hcclDeterministic != HCCL_CONFIG_NOT_SET {
        out.deterministic = Deterministic::from_code(c.hcclDeterministic).ok_or_else(|| {
            HcclError::para(format!(
                "config hcclDeterministic is {} (expected 0, 1 or 2 = strict)",
                c.hcclDeterministic
            ))
        })?;
    }
    if has!(hcclCommName) && c.hcclCommName[0] != 0 {
        out.comm_name = Some(text(&c.hcclCommName, "hcclCommName")?);
    }
    if has!(hcclUdi) {
        extras.udi = text(&c.hcclUdi, "hcclUdi")?;
    }
    if has!(hcclOpExpansionMode) {
        if c.hcclOpExpansionMode > 6 {
            return Err(HcclError::para(format!(
                "config hcclOpExpansionMode is {} (expected 0..=6)",
                c.hcclOpExpansionMode
            )));
        }
        extras.op_expansion_mode = c.hcclOpExpansionMode;
    }
    if has!(hcclWorldRankID) {
        extras.world_rank_id = c.hcclWorldRankID;
    }
    if has!(hcclJobID) {
        extras.job_id = c.hcclJobID;
    }
    if has!(aclGraphZeroCopyEnable) {
        extras.acl_graph_zero_copy = match c.aclGraphZeroCopyEnable {
            0 => false,
            1 => true,
            v => {
                return Err(HcclError::para(format!(
                    "config aclGraphZeroCopyEnable is {v} (expected 0 or 1)"
                )))
            }
        };
    }
    if has!(hcclExecTimeOut) && c.hcclExecTimeOut != HCCL_COMM_EXECTIMEOUT_CONFIG_NOT_SET {
        out.exec_timeout = match c.hcclExecTimeOut {
            0 => None,
            s if s > 0 => Some(Duration::from_secs(s as u64)),
            s => {
                return Err(HcclError::para(format!(
                    "config hcclExecTimeOut is {s} (expected seconds ≥ 0, 0 = never, or \
                     HCCL_COMM_EXECTIMEOUT_CONFIG_NOT_SET)"
                )))
            }
        };
    }
    if has!(hcclAlgo) && c.hcclAlgo[0] != 0 {
        let algo = text(&c.hcclAlgo, "hcclAlgo")?;
        out.algo = AlgoConfig::parse(&algo)
            .map_err(|e| HcclError::para(format!("config hcclAlgo '{algo}' is invalid: {e}")))?;
    }
    // HCCL's per-communicator op retry settings override the environment's
    if has!(hcclRetryEnable) {
        extras.retry_enable = text(&c.hcclRetryEnable, "hcclRetryEnable")?;
        if !extras.retry_enable.trim().is_empty() {
            out.op_retry
                .set_enable(&extras.retry_enable, "config hcclRetryEnable")?;
        }
    }
    if has!(hcclRetryParams) {
        extras.retry_params = text(&c.hcclRetryParams, "hcclRetryParams")?;
        if !extras.retry_params.trim().is_empty() {
            out.op_retry
                .set_params(&extras.retry_params, "config hcclRetryParams")?;
        }
    }
    if has!(hcclBufferName) {
        extras.buffer_name = text(&c.hcclBufferName, "hcclBufferName")?;
    }
    if version >= 10 && has!(hcclQos) && c.hcclQos != HCCL_CONFIG_NOT_SET {
        if c.hcclQos > 7 {
            return Err(HcclError::para(format!(
                "config hcclQos is {} (expected 0..=7)",
                c.hcclQos
            )));
        }
        extras.qos = Some(c.hcclQos);
    }
    if has!(hcclSymWinMaxMemSizePerRank) {
        let gb = c.hcclSymWinMaxMemSizePerRank;
        extras.sym_win_max_bytes = gb.checked_mul(1 << 30).filter(|_| gb > 0).ok_or_else(|| {
            HcclError::para(format!(
                "config hcclSymWinMaxMemSizePerRank is {gb} GB (expected at least 1)"
            ))
        })?;
    }
    if version >= 11 && has!(hcclChannelSqDepth) && c.hcclChannelSqDepth != HCCL_CONFIG_NOT_SET {
        extras.sq_depth = Some(c.hcclChannelSqDepth);
    }
    tracing::debug!(
        target: "hccl",
        size,
        version,
        deterministic = ?out.deterministic,
        exec_timeout = ?out.exec_timeout,
        ?extras,
        "HcclCommConfig read"
    );
    Ok((out, extras))
}

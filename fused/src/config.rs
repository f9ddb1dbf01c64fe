//! How a fused op runs: which pipeline, how big its blocks, how many
//! stages, how many GEMM threads. Defaults come from measurement
//! (docs/fused.md); every one can be set per [`Fused`](crate::Fused) or
//! from the environment.

use hccl_platform::{HcclError, Result};

/// The pipeline a fused op runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FusedPath {
    /// Pick per op: `Window` when every rank is on one host, `Stream`
    /// otherwise, `Unfused` where a shape is too small to pipeline
    /// (fewer than two blocks).
    Auto,
    /// Symmetric windows: blocks computed into this rank's window, peers
    /// pull (and reduce) them straight out of it, per-block counters in
    /// shared memory. All ranks on one host.
    Window,
    /// Blocks handed to the communicator's collectives on a stream that a
    /// second thread drives while the next blocks are computed: any
    /// placement, the collectives' transports (TCP between hosts).
    Stream,
    /// The whole matmul, then the whole collective: the baseline.
    Unfused,
}

impl FusedPath {
    /// The name `HCCL_RS_FUSED_PATH` takes.
    pub fn name(self) -> &'static str {
        match self {
            FusedPath::Auto => "auto",
            FusedPath::Window => "window",
            FusedPath::Stream => "stream",
            FusedPath::Unfused => "unfused",
        }
    }

    /// Parses a name (`auto`, `window`, `stream`, `unfused`).
    pub fn parse(s: &str) -> Result<FusedPath> {
        [
            FusedPath::Auto,
            FusedPath::Window,
            FusedPath::Stream,
            FusedPath::Unfused,
        ]
        .into_iter()
        .find(|p| p.name() == s.trim())
        .ok_or_else(|| {
            HcclError::para(format!(
                "unknown fused path {s:?}: expected auto, window, stream or unfused"
            ))
        })
    }

    pub(crate) fn code(self) -> u32 {
        self as u32
    }

    pub(crate) fn from_code(c: u32) -> FusedPath {
        match c {
            1 => FusedPath::Window,
            2 => FusedPath::Stream,
            3 => FusedPath::Unfused,
            _ => FusedPath::Auto,
        }
    }
}

/// Settings of the fused ops of one [`Fused`](crate::Fused). Ranks may
/// differ in them: rank 0's path, block and stage settings are the ones
/// every rank uses for an op (they travel in the op's agreement record).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FusedConfig {
    /// The pipeline (`HCCL_RS_FUSED_PATH`, default `auto`).
    pub path: FusedPath,
    /// Rows of a block (`HCCL_RS_FUSED_BLOCK_ROWS`); `None`: chosen per
    /// op (about eight blocks per rank's share, 32–512 rows).
    pub block_rows: Option<usize>,
    /// Blocks in flight before the producer waits for its consumers
    /// (`HCCL_RS_FUSED_STAGES`, default 3; CATCCOS's `WORKSPACE_STAGES`
    /// is 2, but across hosts a third stage measured 5–10% faster).
    pub stages: usize,
    /// GEMM threads per rank (`HCCL_RS_FUSED_THREADS`); `None`: the host's
    /// cores divided among the communicator's ranks, at least 1.
    pub threads: Option<usize>,
}

impl Default for FusedConfig {
    fn default() -> Self {
        FusedConfig {
            path: FusedPath::Auto,
            block_rows: None,
            stages: 3,
            threads: None,
        }
    }
}

impl FusedConfig {
    /// The defaults overridden by the `HCCL_RS_FUSED_*` variables.
    pub fn from_env() -> Result<FusedConfig> {
        Self::from_source(|k| std::env::var(k).ok())
    }

    /// As [`from_env`](Self::from_env), reading variables through `get`.
    pub fn from_source(get: impl Fn(&str) -> Option<String>) -> Result<FusedConfig> {
        let mut c = FusedConfig::default();
        let num = |k: &str, v: &str, min: usize, max: usize| -> Result<usize> {
            v.trim()
                .parse::<usize>()
                .ok()
                .filter(|n| (min..=max).contains(n))
                .ok_or_else(|| {
                    HcclError::para(format!(
                        "{k}={v:?}: expected an integer from {min} to {max}"
                    ))
                })
        };
        if let Some(v) = get("HCCL_RS_FUSED_PATH") {
            c.path = FusedPath::parse(&v)?;
        }
        if let Some(v) = get("HCCL_RS_FUSED_BLOCK_ROWS") {
            c.block_rows = Some(num("HCCL_RS_FUSED_BLOCK_ROWS", &v, 1, 1 << 20)?);
        }
        if let Some(v) = get("HCCL_RS_FUSED_STAGES") {
            c.stages = num("HCCL_RS_FUSED_STAGES", &v, 1, 16)?;
        }
        if let Some(v) = get("HCCL_RS_FUSED_THREADS") {
            c.threads = Some(num("HCCL_RS_FUSED_THREADS", &v, 1, 1024)?);
        }
        Ok(c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn variables_override_defaults_and_bad_values_are_named() {
        let c = FusedConfig::from_source(|k| match k {
            "HCCL_RS_FUSED_PATH" => Some("stream".into()),
            "HCCL_RS_FUSED_STAGES" => Some("3".into()),
            _ => None,
        })
        .unwrap();
        assert_eq!(c.path, FusedPath::Stream);
        assert_eq!(c.stages, 3);
        assert_eq!(c.block_rows, None);
        let e = FusedConfig::from_source(|k| (k == "HCCL_RS_FUSED_STAGES").then(|| "0".into()))
            .unwrap_err();
        assert!(e.to_string().contains("HCCL_RS_FUSED_STAGES=\"0\""), "{e}");
        let e = FusedConfig::from_source(|k| (k == "HCCL_RS_FUSED_PATH").then(|| "fast".into()))
            .unwrap_err();
        assert!(e.to_string().contains("unknown fused path"), "{e}");
    }
}

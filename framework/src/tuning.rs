//! Calibrated link parameters for the selector's α-β-γ cost model.
//!
//! `hccl-test --calibrate` measures, on this machine, the latency (α) and
//! bandwidth (1/β) of one exchange step between two processes over shared
//! memory (level 0) and over TCP (level 1), and the reduce throughput (γ),
//! and writes them to a tuning file. Communicators read it at creation:
//! the path in `HCCL_RS_TUNING_FILE`, else `$XDG_CACHE_HOME/hccl-rs/tuning.json`
//! (or `~/.cache/hccl-rs/tuning.json`) if it exists; without one the
//! model's built-in defaults apply.

use hccl_algorithm::cost::{CostParams, LinkParams};
use hccl_platform::{HcclError, Result};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// Format version of the tuning file.
pub const TUNING_VERSION: u32 = 1;

/// One level's measured link.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct LinkTuning {
    /// Time of one exchange step of a tiny message, µs.
    pub alpha_us: f64,
    /// Bandwidth of one direction of an exchange step, GB/s.
    pub gbps: f64,
}

/// What a tuning file holds.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Tuning {
    /// Format version ([`TUNING_VERSION`]).
    pub version: u32,
    /// Host the figures were measured on.
    pub host: String,
    /// When, as seconds since the Unix epoch.
    pub measured_unix_s: u64,
    /// Shared memory between processes of one host (level 0).
    pub shm: LinkTuning,
    /// TCP between hosts (level 1; measured over loopback unless edited).
    pub tcp: LinkTuning,
    /// Reduce throughput (fp32 sum, one core), GB/s.
    pub reduce_gbps: f64,
}

impl Tuning {
    /// The cost-model parameters these measurements give.
    pub fn cost_params(&self) -> CostParams {
        CostParams {
            level0: LinkParams::new(self.shm.alpha_us, self.shm.gbps),
            level1: LinkParams::new(self.tcp.alpha_us, self.tcp.gbps),
            gamma_us_per_byte: 1.0 / (self.reduce_gbps * 1e3),
        }
    }

    /// Checks that every figure is usable (positive and finite).
    pub fn validate(&self) -> Result<()> {
        if self.version != TUNING_VERSION {
            return Err(HcclError::para(format!(
                "tuning file version {} is not supported (expected {TUNING_VERSION}); rerun hccl-test --calibrate",
                self.version
            )));
        }
        let figures = [
            ("shm.alpha_us", self.shm.alpha_us),
            ("shm.gbps", self.shm.gbps),
            ("tcp.alpha_us", self.tcp.alpha_us),
            ("tcp.gbps", self.tcp.gbps),
            ("reduce_gbps", self.reduce_gbps),
        ];
        for (name, v) in figures {
            if !(v.is_finite() && v > 0.0) {
                return Err(HcclError::para(format!(
                    "tuning file field {name} is {v}: every figure must be positive"
                )));
            }
        }
        Ok(())
    }

    /// Reads and validates the tuning file at `path`.
    pub fn load(path: &Path) -> Result<Tuning> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            HcclError::open_file(format!("cannot read tuning file {}: {e}", path.display()))
        })?;
        let t: Tuning = serde_json::from_str(&text).map_err(|e| {
            HcclError::para(format!("tuning file {} is not valid: {e}", path.display()))
        })?;
        t.validate()
            .map_err(|e| e.during(format!("reading {}", path.display())))?;
        Ok(t)
    }

    /// Writes the file (creating its directory), atomically.
    pub fn save(&self, path: &Path) -> Result<()> {
        self.validate()?;
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)
                .map_err(|e| HcclError::from_io(format!("creating {}", dir.display()), e))?;
        }
        let text =
            serde_json::to_string_pretty(self).map_err(|e| HcclError::internal(e.to_string()))?;
        let tmp = path.with_extension("json.tmp");
        std::fs::write(&tmp, text + "\n")
            .and_then(|_| std::fs::rename(&tmp, path))
            .map_err(|e| HcclError::from_io(format!("writing {}", path.display()), e))
    }

    /// The default location: `$XDG_CACHE_HOME/hccl-rs/tuning.json`, else
    /// `$HOME/.cache/hccl-rs/tuning.json`.
    pub fn default_path() -> Option<PathBuf> {
        let base = std::env::var_os("XDG_CACHE_HOME")
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))?;
        Some(base.join("hccl-rs").join("tuning.json"))
    }
}

/// The cost parameters for a new communicator: from `HCCL_RS_TUNING_FILE`
/// (`explicit`; an unreadable or invalid file is an error), else from the
/// default file if present (a bad one is logged and ignored), else `None`.
pub(crate) fn cost_params_from(explicit: Option<String>) -> Result<Option<CostParams>> {
    if let Some(p) = explicit.filter(|p| !p.trim().is_empty()) {
        let t = Tuning::load(Path::new(p.trim()))
            .map_err(|e| e.during("loading HCCL_RS_TUNING_FILE"))?;
        return Ok(Some(t.cost_params()));
    }
    let Some(path) = Tuning::default_path().filter(|p| p.exists()) else {
        return Ok(None);
    };
    match Tuning::load(&path) {
        Ok(t) => Ok(Some(t.cost_params())),
        Err(e) => {
            tracing::warn!(file = %path.display(), "ignoring the tuning file: {e}");
            Ok(None)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Tuning {
        Tuning {
            version: TUNING_VERSION,
            host: "h".into(),
            measured_unix_s: 1,
            shm: LinkTuning {
                alpha_us: 2.0,
                gbps: 4.0,
            },
            tcp: LinkTuning {
                alpha_us: 40.0,
                gbps: 1.0,
            },
            reduce_gbps: 8.0,
        }
    }

    #[test]
    fn round_trips_and_converts() {
        let dir = std::env::temp_dir().join(format!("hccl-tuning-{}", std::process::id()));
        let path = dir.join("sub").join("tuning.json");
        sample().save(&path).unwrap();
        let t = Tuning::load(&path).unwrap();
        assert_eq!(t, sample());
        let c = t.cost_params();
        assert_eq!(c.level0.alpha_us, 2.0);
        assert!((c.level0.beta_us_per_byte - 1.0 / 4e3).abs() < 1e-12);
        assert_eq!(c.level1.alpha_us, 40.0);
        assert!((c.gamma_us_per_byte - 1.0 / 8e3).abs() < 1e-12);
        assert_eq!(
            cost_params_from(Some(path.display().to_string())).unwrap(),
            Some(c)
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn bad_files_are_clear_errors() {
        let dir = std::env::temp_dir().join(format!("hccl-tuning-bad-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let missing = dir.join("missing.json");
        let e = cost_params_from(Some(missing.display().to_string())).unwrap_err();
        assert_eq!(e.code(), hccl_platform::HcclResult::EOpenFileFailure);
        assert!(e.to_string().contains("missing.json"), "{e}");
        let garbage = dir.join("garbage.json");
        std::fs::write(&garbage, "{ not json").unwrap();
        let e = Tuning::load(&garbage).unwrap_err();
        assert!(e.to_string().contains("is not valid"), "{e}");
        let mut t = sample();
        t.shm.gbps = 0.0;
        let e = t.save(&dir.join("zero.json")).unwrap_err();
        assert!(e.to_string().contains("shm.gbps is 0"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

//! Calibrated link parameters for the selector's α-β-γ cost model.
//!
//! `hccl-test --calibrate` measures, on this machine, for shared memory
//! between two processes (level 0) and TCP (level 1; loopback, or between
//! two network namespace hosts with `--netns`): the latency (α) of one
//! exchange step of a tiny message, and the bandwidth (1/β) of one flow in
//! one direction (a one-way transfer); the reduce throughput (γ); and,
//! across three namespace hosts, the capacity of one host's link that
//! every flow leaving it shares (`host_gbps`). It writes them to a tuning
//! file. Communicators read it at creation:
//! the path in `HCCL_RS_TUNING_FILE`, else `$XDG_CACHE_HOME/hccl-rs/tuning.json`
//! (or `~/.cache/hccl-rs/tuning.json`) if it exists; without one the
//! model's built-in defaults apply.

use hccl_algorithm::cost::{CostParams, LinkParams};
use hccl_platform::{HcclError, Result};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// Format version of the tuning file.
pub const TUNING_VERSION: u32 = 1;

/// The largest latency a tuning file may give, µs (1000 s).
const MAX_ALPHA_US: f64 = 1e9;
/// The smallest bandwidth a tuning file may give, GB/s (1 kB/s).
const MIN_GBPS: f64 = 1e-6;
/// The largest bandwidth a tuning file may give, GB/s.
const MAX_GBPS: f64 = 1e9;

/// One level's measured link.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct LinkTuning {
    /// Time of one exchange step of a tiny message, µs.
    pub alpha_us: f64,
    /// Bandwidth of one flow in one direction, GB/s (a one-way transfer
    /// between two processes, nothing else on the link; files written
    /// before calibration measured it one-way held the rate of an
    /// exchange step, both directions at once).
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
    /// Capacity of one host's link per direction, GB/s, shared by all the
    /// flows crossing it (measured across namespace hosts: one host
    /// sending to two others at once). Absent: flows leaving a host do not
    /// share a limit, each gets `tcp.gbps`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_gbps: Option<f64>,
}

impl Tuning {
    /// The cost-model parameters these measurements give.
    pub fn cost_params(&self) -> CostParams {
        CostParams {
            level0: LinkParams::new(self.shm.alpha_us, self.shm.gbps),
            level1: LinkParams::new(self.tcp.alpha_us, self.tcp.gbps),
            gamma_us_per_byte: 1.0 / (self.reduce_gbps * 1e3),
            host_gbps: self.host_gbps,
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
        // (name, value, smallest and largest value a measurement can give):
        // beyond them the cost model's arithmetic leaves the finite numbers
        // (a bandwidth of 5e-324 GB/s is positive, but 1/(gbps·1e3) is
        // infinite, and every prediction with it too)
        let figures = [
            ("shm.alpha_us", self.shm.alpha_us, 0.0, MAX_ALPHA_US),
            ("shm.gbps", self.shm.gbps, MIN_GBPS, MAX_GBPS),
            ("tcp.alpha_us", self.tcp.alpha_us, 0.0, MAX_ALPHA_US),
            ("tcp.gbps", self.tcp.gbps, MIN_GBPS, MAX_GBPS),
            ("reduce_gbps", self.reduce_gbps, MIN_GBPS, MAX_GBPS),
        ];
        let host = self.host_gbps.map(|v| ("host_gbps", v, MIN_GBPS, MAX_GBPS));
        for (name, v, lo, hi) in figures.into_iter().chain(host) {
            if !(v.is_finite() && v > 0.0) {
                return Err(HcclError::para(format!(
                    "tuning file field {name} is {v}: every figure must be positive"
                )));
            }
            if v < lo || v > hi {
                return Err(HcclError::para(format!(
                    "tuning file field {name} is {v:e}: outside what a measurement gives ({lo:e} to {hi:e})"
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
        Self::from_json(&text, &path.display().to_string())
    }

    /// Parses and validates tuning-file text (`origin` names it in errors).
    fn from_json(text: &str, origin: &str) -> Result<Tuning> {
        let t: Tuning = serde_json::from_str(text)
            .map_err(|e| HcclError::para(format!("tuning file {origin} is not valid: {e}")))?;
        t.validate()
            .map_err(|e| e.during(format!("reading {origin}")))?;
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
            host_gbps: None,
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
    fn host_capacity_round_trips_and_reaches_the_cost_model() {
        let dir = std::env::temp_dir().join(format!("hccl-tuning-host-{}", std::process::id()));
        let path = dir.join("tuning.json");
        let t = Tuning {
            host_gbps: Some(0.25),
            ..sample()
        };
        t.save(&path).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.contains("\"host_gbps\": 0.25"), "{text}");
        assert_eq!(Tuning::load(&path).unwrap(), t);
        assert_eq!(t.cost_params().host_gbps, Some(0.25));
        assert_eq!(sample().cost_params().host_gbps, None);
        // absent, it is not written at all
        sample().save(&path).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(!text.contains("host_gbps"), "{text}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A file written before `host_gbps` existed (version 1 all along).
    #[test]
    fn old_file_without_host_capacity_loads() {
        let old = r#"{ "version": 1, "host": "vm", "measured_unix_s": 1795330082,
            "shm": { "alpha_us": 3.96, "gbps": 2.61 },
            "tcp": { "alpha_us": 223.3, "gbps": 0.72 },
            "reduce_gbps": 14.2 }"#;
        let t = Tuning::from_json(old, "old.json").unwrap();
        assert_eq!(t.host_gbps, None);
        assert_eq!(t.cost_params().host_gbps, None);
        assert_eq!(t.tcp.gbps, 0.72);
    }

    #[test]
    fn bad_host_capacity_is_refused_by_name() {
        for (v, says) in [
            (0.0, "host_gbps is 0: every figure must be positive"),
            (-1.0, "host_gbps is -1: every figure must be positive"),
            (1e-12, "host_gbps is 1e-12: outside"),
        ] {
            let t = Tuning {
                host_gbps: Some(v),
                ..sample()
            };
            let e = t.validate().unwrap_err();
            assert!(e.to_string().contains(says), "{v}: {e}");
            let text = serde_json::to_string(&t).unwrap();
            let e = Tuning::from_json(&text, "t.json").unwrap_err();
            assert!(e.to_string().contains(says), "{v}: {e}");
        }
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

/// Fuzz target of the tuning file: JSON with the file's fields holding any
/// number (or the wrong type), mutated files, and arbitrary text.
#[cfg(test)]
mod fuzz {
    use super::*;
    use crate::bootstrap::fuzz::{bounded, config, text};
    use hccl_algorithm::cost::{predict, Algo};
    use hccl_algorithm::OpType;
    use proptest::prelude::*;
    use serde_json::{json, Value};

    /// Any finite f64 (subnormals and extremes included; JSON has no NaN
    /// or infinity), or a value of another type.
    fn figure() -> impl Strategy<Value = Value> {
        prop_oneof![
            6 => any::<f64>().prop_map(|v| json!(v)),
            2 => (0.001f64..1e4).prop_map(|v| json!(v)),
            1 => prop_oneof![Just(f64::MIN_POSITIVE), Just(5e-324), Just(f64::MAX), Just(-0.0)]
                .prop_map(|v| json!(v)),
            1 => any::<i64>().prop_map(|v| json!(v)),
            1 => text().prop_map(|s| json!(s)),
        ]
    }

    fn link() -> impl Strategy<Value = Value> {
        (figure(), figure()).prop_map(|(a, g)| json!({"alpha_us": a, "gbps": g}))
    }

    fn file_text() -> impl Strategy<Value = String> {
        let shaped = (
            prop_oneof![8 => Just(json!(TUNING_VERSION)), 1 => any::<i64>().prop_map(|v| json!(v))],
            text(),
            any::<u64>(),
            link(),
            link(),
            figure(),
            proptest::option::of(figure()),
        )
            .prop_map(|(version, host, when, shm, tcp, reduce, host_gbps)| {
                let mut v = json!({
                    "version": version, "host": host, "measured_unix_s": when,
                    "shm": shm, "tcp": tcp, "reduce_gbps": reduce,
                });
                if let Some(h) = host_gbps {
                    v["host_gbps"] = h;
                }
                v.to_string()
            })
            .boxed();
        prop_oneof![
            6 => shaped.clone(),
            2 => (shaped, proptest::collection::vec((any::<usize>(), any::<char>()), 1..4)).prop_map(
                |(s, edits)| {
                    let mut c: Vec<char> = s.chars().collect();
                    for (at, ch) in edits {
                        let n = c.len();
                        c[at % n] = ch;
                    }
                    c.into_iter().collect()
                }
            ),
            1 => text(),
        ]
    }

    /// What the fuzz target found: a positive bandwidth so small that
    /// β = 1/(gbps·1e3) is infinite passed validation.
    #[test]
    fn subnormal_bandwidth_is_refused() {
        let t = r#"{"version": 1, "host": "h", "measured_unix_s": 0,
            "shm": {"alpha_us": 1.0, "gbps": 5e-324}, "tcp": {"alpha_us": 1.0, "gbps": 1.0},
            "reduce_gbps": 1.0}"#;
        let e = Tuning::from_json(t, "t.json").unwrap_err();
        assert!(e.to_string().contains("shm.gbps is 5e-324: outside"), "{e}");
    }

    proptest! {
        #![proptest_config(config())]

        /// Any text is a tuning or a parameter error naming the file; a
        /// tuning it accepts gives the cost model finite, positive
        /// parameters and finite predictions even for huge messages on
        /// many ranks.
        #[test]
        fn fuzz_tuning_file(t in file_text()) {
            match bounded("tuning parse", || Tuning::from_json(&t, "t.json")) {
                Ok(tuning) => {
                    let c = tuning.cost_params();
                    for v in [
                        c.level0.alpha_us,
                        c.level0.beta_us_per_byte,
                        c.level1.alpha_us,
                        c.level1.beta_us_per_byte,
                        c.gamma_us_per_byte,
                    ] {
                        prop_assert!(v.is_finite() && v > 0.0, "{:?} from {}", c, t);
                    }
                    if let Some(h) = c.host_gbps {
                        prop_assert!(h.is_finite() && h > 0.0 && (1.0 / (h * 1e3)).is_finite(), "{:?} from {}", c, t);
                    }
                    for link in [c.level0, c.level1] {
                        let us = predict(Algo::Ring, OpType::AllReduce, 4096, 1 << 40, link, c.gamma_us_per_byte);
                        prop_assert!(us.is_some_and(f64::is_finite), "{:?} from {}", us, t);
                    }
                }
                Err(e) => {
                    prop_assert_eq!(e.code(), hccl_platform::HcclResult::EPara);
                    prop_assert!(e.to_string().contains("t.json"), "{}", e);
                }
            }
        }
    }
}

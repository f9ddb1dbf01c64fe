//! Communicator configuration, from HCCL's environment variables or code.

use hccl_platform::{DeviceConfig, ExecMode, HcclError, Result};
use std::time::Duration;

/// Where configuration values come from: the process environment, or a map
/// (tests, embedding applications).
pub trait EnvSource {
    /// The value of `key`, if set.
    fn get(&self, key: &str) -> Option<String>;
}

/// The process environment.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct ProcessEnv;

impl EnvSource for ProcessEnv {
    fn get(&self, key: &str) -> Option<String> {
        std::env::var(key).ok()
    }
}

impl EnvSource for std::collections::HashMap<String, String> {
    fn get(&self, key: &str) -> Option<String> {
        std::collections::HashMap::get(self, key).cloned()
    }
}

impl EnvSource for [(&str, &str)] {
    fn get(&self, key: &str) -> Option<String> {
        self.iter()
            .find(|(k, _)| *k == key)
            .map(|(_, v)| (*v).to_owned())
    }
}

/// Default CCL buffer size, MB (HCCL's `HCCL_COMM_DEFAULT_BUFFSIZE`).
pub(crate) const DEFAULT_BUFFSIZE_MB: u64 = 200;
/// Spin before parking when every rank has a core, µs.
pub(crate) const AUTO_SPIN_US: u64 = 1000;
/// Default `HCCL_CONNECT_TIMEOUT`, seconds.
pub(crate) const DEFAULT_CONNECT_TIMEOUT_S: u64 = 120;
/// Default `HCCL_EXEC_TIMEOUT`, seconds.
pub(crate) const DEFAULT_EXEC_TIMEOUT_S: u64 = 1836;

/// How a communicator is set up.
#[derive(Clone, Debug, PartialEq)]
pub struct CommConfig {
    /// Entries of the flight recorder's ring (`HCCL_RS_FR_BUFFER_SIZE`;
    /// 0 = off; see `flight.rs`).
    pub fr_buffer_size: usize,
    /// Where the flight recorder dumps on a stream failure, an abort or
    /// `SIGUSR1` (`HCCL_RS_FR_DUMP_DIR`); `None`: only on request.
    pub fr_dump_dir: Option<std::path::PathBuf>,
    /// Where each rank writes the timeline of its stream tasks (Chrome
    /// trace JSON) when the communicator is destroyed (`HCCL_RS_TRACE`);
    /// `None`: no timeline.
    pub trace_dir: Option<std::path::PathBuf>,
    /// Task events a timeline keeps at most (`HCCL_RS_TRACE_EVENTS`).
    pub trace_events: usize,
    /// Log each op's entry with its arguments at info level
    /// (`HCCL_ENTRY_LOG_ENABLE=1`).
    pub entry_log: bool,
    /// Deterministic reduction (`HCCL_DETERMINISTIC`, HCCL's
    /// `hcclDeterministic`). Every built-in executor already reduces in an
    /// order fixed by its plan (never by arrival), so all three settings
    /// give bit-identical results run to run; the setting is recorded and
    /// logged.
    pub deterministic: Deterministic,
    /// HCCL's operator expansion mode as requested (`HCCL_OP_EXPANSION_MODE`:
    /// `AI_CPU`, `AIV`, `AIV_ONLY`, `HOST`, `HOST_TS`, `CCU_MS`,
    /// `CCU_SCHED`); `None` = unset. Recorded only: ops are always expanded
    /// on the host CPU here.
    pub op_expansion_mode: Option<String>,
    /// Size of each of the CCL input and output buffers, bytes (`HCCL_BUFFSIZE` MB).
    pub buffer_size: usize,
    /// Bound on every wait (`HCCL_EXEC_TIMEOUT`; `None` = 0 = never).
    pub exec_timeout: Option<Duration>,
    /// Force this executor for every op (`HCCL_RS_EXECUTOR`), bypassing selection.
    pub executor_override: Option<String>,
    /// Who runs stream tasks (`HCCL_RS_EXEC_MODE`).
    pub exec_mode: ExecMode,
    /// How long an idle stream driver spins before parking
    /// (`HCCL_RS_SPIN_US`); `None` = automatic: spin while the host has a
    /// core per rank, never when ranks outnumber cores (spinning then only
    /// steals the core the awaited peer needs).
    pub spin: Option<Duration>,
    /// How many times an idle stream driver yields its core after spinning
    /// and before parking (`HCCL_RS_YIELDS`); `None` = the platform's
    /// default (64).
    pub yields: Option<u32>,
    /// Sockets per TCP link (`HCCL_RS_SOCKETS_PER_LINK`, 1 to
    /// [`hccl_platform::TCP_MAX_SOCKETS`]): transfers of 256 KiB or more
    /// are striped over them. The lower rank of a pair decides.
    pub sockets_per_link: usize,
    /// How long link set-up waits for a peer (`HCCL_CONNECT_TIMEOUT`, s).
    pub connect_timeout: Duration,
    /// The IP to listen on and advertise to peers (`HCCL_IF_IP`).
    pub if_ip: Option<String>,
    /// Interface(s) to use when `HCCL_IF_IP` is unset (`HCCL_SOCKET_IFNAME`).
    pub socket_ifname: Option<String>,
    /// Use IPv6 addresses of that interface (`HCCL_SOCKET_FAMILY=AF_INET6`).
    pub ipv6: bool,
    /// First port of the range used (`HCCL_IF_BASE_PORT`).
    pub base_port: u16,
    /// Compare op descriptors with peers before each op
    /// (`HCCL_RS_CONSISTENCY_CHECK`, default on).
    pub consistency_check: bool,
    /// Which transport components carry links (`HCCL_RS_TRANSPORT`):
    /// `auto` (the default: every registered component, the best score
    /// per link) or a comma-separated order of preference (`shm,tcp`,
    /// `ibverbs`; see `hccl_platform::transport::select`). Ranks that
    /// are threads of one group always use in-process links.
    pub transport: String,
    /// Transport settings: the tune strings (`HCCL_RS_TL_<NAME>_TUNE`)
    /// and the components' own variables (`HCCL_RS_IB_HCA`, ...).
    pub transport_params: hccl_platform::transport::TransportParams,
    /// The user's algorithm choice (`HCCL_ALGO`).
    pub algo: crate::algo_env::AlgoConfig,
    /// The communicator's name (HCCL's `hcclCommName` config field);
    /// `None` = derived from the group's unique id.
    pub comm_name: Option<String>,
    /// Calibrated cost-model parameters (`HCCL_RS_TUNING_FILE` or the
    /// default tuning file; see `tuning.rs`); `None` = built-in defaults.
    pub cost: Option<hccl_algorithm::cost::CostParams>,
    /// Ops of at least this many bytes run a direct-read executor (peers'
    /// user buffers read with cross-memory attach) when every link of the
    /// communicator can (`HCCL_RS_DIRECT_MIN_BYTES`, a byte count or `off`);
    /// `None` = never chosen by default.
    pub direct_min_bytes: Option<u64>,
    /// Ops of at most this many bytes per rank run an AIV kernel (one task
    /// over the ranks' boards, see `hccl_platform::AivKind` and `platform/src/aiv/PROTOCOL.md`) when every peer is
    /// on this host (`HCCL_RS_AIV_MAX_BYTES`, a byte count up to
    /// [`hccl_algorithm::AIV_MAX_BYTES`] or `off`).
    pub aiv_max_bytes: Option<u64>,
    /// Which core each rank runs on (`HCCL_RS_CPU_AFFINITY`: `auto`, the
    /// default, `off`, or a list of CPUs); see `affinity.rs`.
    pub cpu_affinity: crate::affinity::CpuAffinity,
    /// Whether a process rank's communicator pins the thread that creates
    /// it per `cpu_affinity` (true, the default: in op-base mode that
    /// thread drives the ops). A binding whose ops are driven by another
    /// thread (Python: torchft makes its groups on a quorum thread) sets it
    /// false and calls [`Communicator::pin_calling_thread`](crate::Communicator::pin_calling_thread)
    /// from the thread that drives ops. Not read from the environment.
    pub pin_creating_thread: bool,
    /// How many channels (rings) the multi-ring executors use
    /// (`HCCL_RS_MIN_CHANNELS`, `HCCL_RS_MAX_CHANNELS`, each 1 to
    /// [`hccl_algorithm::rings::MAX_CHANNELS`]; NCCL's
    /// `NCCL_MIN_NCHANNELS` / `NCCL_MAX_NCHANNELS`, see
    /// [`ChannelLimits`](hccl_algorithm::rings::ChannelLimits) for what an
    /// unset maximum means). Every rank of a communicator must use the
    /// same values.
    pub channels: hccl_algorithm::rings::ChannelLimits,
    /// HCCL's op retry (`HCCL_OP_RETRY_ENABLE`, `HCCL_OP_RETRY_PARAMS`;
    /// per communicator `hcclRetryEnable`, `hcclRetryParams`): see
    /// `op_retry.rs`. Off by default.
    pub op_retry: crate::OpRetry,
}

/// HCCL's deterministic-computation setting (`HCCL_DETERMINISTIC`:
/// `false`, `true`, `strict`; `hcclDeterministic`: 0, 1, 2).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Deterministic {
    /// `false` / 0 (HCCL's default).
    #[default]
    Off,
    /// `true` / 1: the same result for the same input, run to run.
    On,
    /// `strict` / 2: order-preserving reduction (every element reduced in
    /// one fixed order), so repeated runs are bit-identical.
    Strict,
}

impl Deterministic {
    /// From HCCL's numeric form (0, 1, 2); `None` for anything else.
    pub fn from_code(v: u32) -> Option<Deterministic> {
        match v {
            0 => Some(Deterministic::Off),
            1 => Some(Deterministic::On),
            2 => Some(Deterministic::Strict),
            _ => None,
        }
    }

    /// HCCL's numeric form (0, 1, 2).
    pub fn code(self) -> u32 {
        match self {
            Deterministic::Off => 0,
            Deterministic::On => 1,
            Deterministic::Strict => 2,
        }
    }
}

/// The values `HCCL_OP_EXPANSION_MODE` takes in HCCL.
pub const OP_EXPANSION_MODES: [&str; 7] = [
    "AI_CPU",
    "AIV",
    "AIV_ONLY",
    "HOST",
    "HOST_TS",
    "CCU_MS",
    "CCU_SCHED",
];

/// Default of [`CommConfig::sockets_per_link`] (measured in
/// docs/performance.md).
pub(crate) const DEFAULT_SOCKETS_PER_LINK: usize = 1;

/// Default of [`CommConfig::direct_min_bytes`]: below it the mesh and ring
/// executors' fewer system calls win (measured in docs/performance.md).
pub(crate) const DEFAULT_DIRECT_MIN_BYTES: u64 = 256 << 10;

impl Default for CommConfig {
    fn default() -> Self {
        CommConfig {
            buffer_size: (DEFAULT_BUFFSIZE_MB as usize) << 20,
            exec_timeout: Some(Duration::from_secs(DEFAULT_EXEC_TIMEOUT_S)),
            executor_override: None,
            fr_buffer_size: crate::flight::DEFAULT_FR_BUFFER_SIZE,
            fr_dump_dir: None,
            trace_dir: None,
            trace_events: hccl_platform::DEFAULT_TIMELINE_EVENTS,
            entry_log: false,
            deterministic: Deterministic::Off,
            op_expansion_mode: None,
            direct_min_bytes: Some(DEFAULT_DIRECT_MIN_BYTES),
            aiv_max_bytes: Some(hccl_algorithm::AIV_MAX_BYTES as u64),
            exec_mode: ExecMode::Inline,
            spin: None,
            yields: None,
            sockets_per_link: DEFAULT_SOCKETS_PER_LINK,
            connect_timeout: Duration::from_secs(DEFAULT_CONNECT_TIMEOUT_S),
            if_ip: None,
            base_port: 60000,
            socket_ifname: None,
            ipv6: false,
            algo: Default::default(),
            consistency_check: true,
            transport: "auto".to_owned(),
            transport_params: Default::default(),
            comm_name: None,
            cost: None,
            cpu_affinity: Default::default(),
            pin_creating_thread: true,
            channels: Default::default(),
            op_retry: Default::default(),
        }
    }
}

fn bad(var: &str, value: &str, why: &str) -> HcclError {
    HcclError::para(format!(
        "environment variable {var}='{value}' is invalid: {why}"
    ))
}

fn parse_u64(var: &str, value: &str) -> Result<u64> {
    value
        .trim()
        .parse::<u64>()
        .map_err(|_| bad(var, value, "expected a non-negative integer"))
}

impl CommConfig {
    /// The configuration from the process environment.
    pub fn from_env() -> Result<CommConfig> {
        Self::from_source(&ProcessEnv)
    }

    /// The configuration from `env`; unset variables take HCCL's defaults,
    /// malformed ones are a parameter error naming the variable.
    pub fn from_source(env: &(impl EnvSource + ?Sized)) -> Result<CommConfig> {
        let mut c = CommConfig {
            cost: crate::tuning::cost_params_from(env.get("HCCL_RS_TUNING_FILE"))?,
            ..Default::default()
        };
        if let Some(v) = env.get("HCCL_BUFFSIZE") {
            let mb = parse_u64("HCCL_BUFFSIZE", &v)?;
            if mb == 0 {
                return Err(bad(
                    "HCCL_BUFFSIZE",
                    &v,
                    "the CCL buffer size in MB must be at least 1",
                ));
            }
            let bytes = mb
                .checked_mul(1 << 20)
                .filter(|b| *b <= isize::MAX as u64)
                .ok_or_else(|| bad("HCCL_BUFFSIZE", &v, "too large"))?;
            c.buffer_size = bytes as usize;
        }
        if let Some(v) = env.get("HCCL_OP_RETRY_ENABLE") {
            c.op_retry
                .set_enable(&v, "environment variable HCCL_OP_RETRY_ENABLE")?;
        }
        if let Some(v) = env.get("HCCL_OP_RETRY_PARAMS") {
            c.op_retry
                .set_params(&v, "environment variable HCCL_OP_RETRY_PARAMS")?;
        }
        if let Some(v) = env.get("HCCL_RS_OP_RETRY_KEEP") {
            c.op_retry.keep_input = match v.trim() {
                "1" => true,
                "0" => false,
                _ => {
                    return Err(bad(
                        "HCCL_RS_OP_RETRY_KEEP",
                        &v,
                        "expected 1 (keep each op's input for a retry) or 0",
                    ))
                }
            };
        }
        if let Some(v) = env.get("HCCL_EXEC_TIMEOUT") {
            let s = parse_u64("HCCL_EXEC_TIMEOUT", &v)?;
            c.exec_timeout = (s > 0).then(|| Duration::from_secs(s));
        }
        if let Some(v) = env.get("HCCL_CONNECT_TIMEOUT") {
            let s = parse_u64("HCCL_CONNECT_TIMEOUT", &v)?;
            if s == 0 || s > 7200 {
                return Err(bad(
                    "HCCL_CONNECT_TIMEOUT",
                    &v,
                    "the timeout in seconds must be from 1 to 7200 (HCCL documents 120 to 7200)",
                ));
            }
            if s < 120 {
                // HCCL's documented floor is 120 s; shorter ones are kept
                // (a test or a job on one machine wants a lost peer
                // noticed fast) and said once
                static SAID: std::sync::Once = std::sync::Once::new();
                SAID.call_once(|| {
                    tracing::info!(
                        seconds = s,
                        "HCCL_CONNECT_TIMEOUT is below HCCL's documented range (120 to 7200 s); hccl-rs uses it as given"
                    )
                });
            }
            c.connect_timeout = Duration::from_secs(s);
        }
        // hccl-rs's millisecond forms win over HCCL's seconds: a job on
        // one machine, or a fault-tolerant one, wants a hung or missing
        // peer noticed in well under a second
        if let Some(v) = env.get("HCCL_RS_EXEC_TIMEOUT_MS") {
            let ms = parse_u64("HCCL_RS_EXEC_TIMEOUT_MS", &v)?;
            c.exec_timeout = (ms > 0).then(|| Duration::from_millis(ms));
        }
        if let Some(v) = env.get("HCCL_RS_CONNECT_TIMEOUT_MS") {
            let ms = parse_u64("HCCL_RS_CONNECT_TIMEOUT_MS", &v)?;
            if ms == 0 || ms > 7_200_000 {
                return Err(bad(
                    "HCCL_RS_CONNECT_TIMEOUT_MS",
                    &v,
                    "the timeout in milliseconds must be from 1 to 7200000",
                ));
            }
            c.connect_timeout = Duration::from_millis(ms);
        }
        if let Some(v) = env.get("HCCL_IF_IP") {
            v.trim()
                .parse::<std::net::IpAddr>()
                .map_err(|_| bad("HCCL_IF_IP", &v, "expected an IP address"))?;
            c.if_ip = Some(v.trim().to_owned());
        }
        if let Some(v) = env.get("HCCL_SOCKET_IFNAME") {
            if !v.trim().is_empty() {
                c.socket_ifname = Some(v.trim().to_owned());
            }
        }
        if let Some(v) = env.get("HCCL_SOCKET_FAMILY") {
            c.ipv6 = match v.trim() {
                "AF_INET" | "" => false,
                "AF_INET6" => true,
                _ => {
                    return Err(bad(
                        "HCCL_SOCKET_FAMILY",
                        &v,
                        "expected AF_INET or AF_INET6",
                    ))
                }
            };
        }
        if let Some(v) = env.get("HCCL_IF_BASE_PORT") {
            let p = parse_u64("HCCL_IF_BASE_PORT", &v)?;
            c.base_port =
                u16::try_from(p).map_err(|_| bad("HCCL_IF_BASE_PORT", &v, "not a port number"))?;
        }
        if let Some(v) = env.get("HCCL_RS_CONSISTENCY_CHECK") {
            c.consistency_check = match v.trim().to_ascii_lowercase().as_str() {
                "1" | "true" | "on" | "" => true,
                "0" | "false" | "off" => false,
                _ => return Err(bad("HCCL_RS_CONSISTENCY_CHECK", &v, "expected 0 or 1")),
            };
        }
        if let Some(v) = env.get("HCCL_RS_TRANSPORT") {
            crate::transports::order_of(&v)?;
            c.transport = v;
        }
        c.transport_params = crate::transports::params_from(&|k| env.get(k))?;
        if let Some(v) = env.get("HCCL_ALGO") {
            c.algo = crate::algo_env::AlgoConfig::parse(&v)?;
        }
        if let Some(v) = env.get("HCCL_RS_DIRECT_MIN_BYTES") {
            c.direct_min_bytes = match v.trim().to_ascii_lowercase().as_str() {
                "off" | "never" => None,
                t => Some(t.parse::<u64>().map_err(|_| {
                    bad(
                        "HCCL_RS_DIRECT_MIN_BYTES",
                        &v,
                        "expected a byte count or 'off'",
                    )
                })?),
            };
        }
        if let Some(v) = env.get("HCCL_RS_AIV_MAX_BYTES") {
            let max = hccl_algorithm::AIV_MAX_BYTES as u64;
            c.aiv_max_bytes = match v.trim().to_ascii_lowercase().as_str() {
                "off" | "never" | "0" => None,
                t => match t.parse::<u64>() {
                    Ok(n) if n <= max => Some(n),
                    _ => {
                        return Err(bad(
                            "HCCL_RS_AIV_MAX_BYTES",
                            &v,
                            &format!("expected a byte count up to {max} or 'off'"),
                        ))
                    }
                },
            };
        }
        if let Some(v) = env.get("HCCL_RS_FR_BUFFER_SIZE") {
            c.fr_buffer_size = match v.trim().parse::<usize>() {
                Ok(n) if n <= 1 << 20 => n,
                _ => {
                    return Err(bad(
                        "HCCL_RS_FR_BUFFER_SIZE",
                        &v,
                        "expected a number of entries up to 1048576 (0 = off)",
                    ))
                }
            };
        }
        if let Some(v) = env.get("HCCL_RS_TRACE") {
            let v = v.trim();
            if !v.is_empty() {
                c.trace_dir = Some(std::path::PathBuf::from(v));
            }
        }
        if let Some(v) = env.get("HCCL_RS_TRACE_EVENTS") {
            c.trace_events = match v.trim().parse::<usize>() {
                Ok(n) if (1..=1 << 26).contains(&n) => n,
                _ => {
                    return Err(bad(
                        "HCCL_RS_TRACE_EVENTS",
                        &v,
                        "expected a number of task events from 1 to 67108864",
                    ))
                }
            };
        }
        if let Some(v) = env.get("HCCL_ENTRY_LOG_ENABLE") {
            c.entry_log = match v.trim() {
                "1" => true,
                "0" | "" => false,
                _ => return Err(bad("HCCL_ENTRY_LOG_ENABLE", &v, "expected 0 or 1")),
            };
        }
        if let Some(v) = env.get("HCCL_DETERMINISTIC") {
            c.deterministic = match v.trim().to_ascii_lowercase().as_str() {
                "false" | "" => Deterministic::Off,
                "true" => Deterministic::On,
                "strict" => Deterministic::Strict,
                _ => {
                    return Err(bad(
                        "HCCL_DETERMINISTIC",
                        &v,
                        "expected false, true or strict",
                    ))
                }
            };
        }
        if let Some(v) = env.get("HCCL_OP_EXPANSION_MODE") {
            let t = v.trim();
            if !t.is_empty() {
                let m = OP_EXPANSION_MODES
                    .iter()
                    .find(|m| m.eq_ignore_ascii_case(t))
                    .ok_or_else(|| {
                        bad(
                            "HCCL_OP_EXPANSION_MODE",
                            &v,
                            "expected AI_CPU, AIV, AIV_ONLY, HOST, HOST_TS, CCU_MS or CCU_SCHED",
                        )
                    })?;
                tracing::info!(
                    mode = m,
                    "HCCL_OP_EXPANSION_MODE is recorded only: ops are expanded on the host CPU"
                );
                c.op_expansion_mode = Some((*m).to_owned());
            }
        }
        if let Some(v) = env.get("HCCL_RS_FR_DUMP_DIR") {
            let v = v.trim();
            if !v.is_empty() {
                c.fr_dump_dir = Some(std::path::PathBuf::from(v));
            }
        }
        if let Some(v) = env.get("HCCL_RS_EXECUTOR") {
            let v = v.trim();
            if !v.is_empty() {
                c.executor_override = Some(v.to_owned());
            }
        }
        if let Some(v) = env.get("HCCL_RS_EXEC_MODE") {
            c.exec_mode = match v.trim().to_ascii_lowercase().as_str() {
                "" | "inline" => ExecMode::Inline,
                "worker" => ExecMode::Worker,
                _ => {
                    return Err(bad(
                        "HCCL_RS_EXEC_MODE",
                        &v,
                        "expected 'inline' or 'worker'",
                    ))
                }
            };
        }
        if let Some(v) = env.get("HCCL_RS_CPU_AFFINITY") {
            c.cpu_affinity = crate::affinity::CpuAffinity::parse(&v)?;
        }
        let channels = |var: &str| -> Result<Option<u32>> {
            let Some(v) = env.get(var) else {
                return Ok(None);
            };
            let max = hccl_algorithm::rings::MAX_CHANNELS;
            match v.trim().parse::<u32>() {
                Ok(n) if (1..=max).contains(&n) => Ok(Some(n)),
                _ => Err(bad(
                    var,
                    &v,
                    &format!("expected a channel count from 1 to {max}"),
                )),
            }
        };
        if let Some(n) = channels("HCCL_RS_MIN_CHANNELS")? {
            c.channels.min = n;
        }
        if let Some(n) = channels("HCCL_RS_MAX_CHANNELS")? {
            c.channels.max = Some(n);
        }
        if let Some(v) = env.get("HCCL_RS_SPIN_US") {
            c.spin = Some(Duration::from_micros(parse_u64("HCCL_RS_SPIN_US", &v)?));
        }
        if let Some(v) = env.get("HCCL_RS_YIELDS") {
            let n = parse_u64("HCCL_RS_YIELDS", &v)?;
            c.yields = Some(u32::try_from(n).map_err(|_| {
                HcclError::para(format!(
                    "HCCL_RS_YIELDS='{v}': at most {} yields before parking",
                    u32::MAX
                ))
            })?);
        }
        if let Some(v) = env.get("HCCL_RS_SOCKETS_PER_LINK") {
            let n = parse_u64("HCCL_RS_SOCKETS_PER_LINK", &v)?;
            let max = hccl_platform::TCP_MAX_SOCKETS;
            if n == 0 || n > max as u64 {
                return Err(HcclError::para(format!(
                    "HCCL_RS_SOCKETS_PER_LINK='{v}': expected 1 to {max} sockets"
                )));
            }
            c.sockets_per_link = n as usize;
        }
        Ok(c)
    }

    /// How long an idle driver spins for a rank whose host runs
    /// `host_ranks` ranks on the machine that runs `machine_ranks` (hosts
    /// made of network namespaces, or declared with `HCCL_RS_HOST_ID`,
    /// share one machine): `HCCL_RS_SPIN_US` if set, else spin only when
    /// the host's ranks have a CPU each in this rank's mask (the launcher
    /// may give each host a slice of the machine) and the machine's ranks
    /// a CPU each among its online CPUs.
    pub fn spin_for(&self, host_ranks: u32, machine_ranks: u32) -> Duration {
        if let Some(spin) = self.spin {
            return spin;
        }
        let mine = std::thread::available_parallelism().map_or(1, |n| n.get()) as u32;
        let machine = online_cpus().unwrap_or(mine).max(mine);
        if host_ranks <= mine && machine_ranks <= machine {
            Duration::from_micros(AUTO_SPIN_US)
        } else {
            Duration::ZERO
        }
    }

    /// The platform device settings this configuration implies for a host
    /// running `ranks_on_host` ranks.
    pub fn device_config(&self, ranks_on_host: u32) -> DeviceConfig {
        DeviceConfig {
            exec_timeout: self.exec_timeout,
            spin: self.spin_for(ranks_on_host, ranks_on_host),
            yields: self.yields.unwrap_or(DeviceConfig::default().yields),
            mode: self.exec_mode,
        }
    }
}

/// How many CPUs the machine has online (`/sys/devices/system/cpu/online`,
/// a list such as `0-1,4`), whatever this process's mask.
fn online_cpus() -> Option<u32> {
    let list = std::fs::read_to_string("/sys/devices/system/cpu/online").ok()?;
    let mut n = 0u32;
    for part in list.trim().split(',').filter(|p| !p.is_empty()) {
        n += match part.split_once('-') {
            Some((a, b)) => {
                (b.trim().parse::<u32>().ok()? + 1).checked_sub(a.trim().parse::<u32>().ok()?)?
            }
            None => 1,
        };
    }
    (n > 0).then_some(n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use hccl_platform::HcclResult;

    #[test]
    fn defaults_match_hccl() {
        let c = CommConfig::from_source(&[][..]).unwrap();
        assert_eq!(c.buffer_size, 200 << 20);
        assert_eq!(c.exec_timeout, Some(Duration::from_secs(1836)));
    }

    #[test]
    fn deterministic_and_expansion_mode_from_the_environment() {
        let c = CommConfig::from_source(&[][..]).unwrap();
        assert_eq!(c.deterministic, Deterministic::Off);
        assert_eq!(c.op_expansion_mode, None);
        for (v, d) in [
            ("false", Deterministic::Off),
            ("true", Deterministic::On),
            ("strict", Deterministic::Strict),
            ("STRICT", Deterministic::Strict),
        ] {
            let c = CommConfig::from_source(&[("HCCL_DETERMINISTIC", v)][..]).unwrap();
            assert_eq!(c.deterministic, d, "{v}");
        }
        assert_eq!(Deterministic::from_code(2), Some(Deterministic::Strict));
        assert_eq!(Deterministic::from_code(3), None);
        assert_eq!(Deterministic::Strict.code(), 2);
        let c = CommConfig::from_source(&[("HCCL_OP_EXPANSION_MODE", "aiv")][..]).unwrap();
        assert_eq!(c.op_expansion_mode.as_deref(), Some("AIV"));
    }

    #[test]
    fn drivers_spin_only_with_a_cpu_per_rank_on_the_host_and_the_machine() {
        let c = CommConfig::from_source(&[][..]).unwrap();
        let mine = std::thread::available_parallelism().unwrap().get() as u32;
        let machine = online_cpus().unwrap();
        assert!(machine >= mine, "{machine} online CPUs, {mine} in the mask");
        let auto = Duration::from_micros(AUTO_SPIN_US);
        assert_eq!(c.spin_for(1, 1), auto);
        assert_eq!(c.spin_for(mine, machine), auto);
        // a host with more ranks than this rank's CPUs
        assert_eq!(c.spin_for(mine + 1, machine), Duration::ZERO);
        // namespace hosts, each within its slice, that together outnumber
        // the machine's CPUs
        assert_eq!(c.spin_for(1, machine + 1), Duration::ZERO);
        assert_eq!(c.device_config(mine + 1).spin, Duration::ZERO);
        assert_eq!(c.device_config(1).spin, auto);
        // the user's setting wins
        let c = CommConfig::from_source(&[("HCCL_RS_SPIN_US", "7")][..]).unwrap();
        assert_eq!(
            c.spin_for(machine + 1, machine + 1),
            Duration::from_micros(7)
        );
    }

    #[test]
    fn timeouts_in_milliseconds_override_the_seconds() {
        let c = CommConfig::from_source(
            &[
                ("HCCL_EXEC_TIMEOUT", "10"),
                ("HCCL_RS_EXEC_TIMEOUT_MS", "250"),
                ("HCCL_CONNECT_TIMEOUT", "120"),
                ("HCCL_RS_CONNECT_TIMEOUT_MS", "1500"),
            ][..],
        )
        .unwrap();
        assert_eq!(c.exec_timeout, Some(Duration::from_millis(250)));
        assert_eq!(c.connect_timeout, Duration::from_millis(1500));
        assert_eq!(
            c.device_config(1).exec_timeout,
            Some(Duration::from_millis(250))
        );
        let c = CommConfig::from_source(&[("HCCL_RS_EXEC_TIMEOUT_MS", "0")][..]).unwrap();
        assert_eq!(c.exec_timeout, None);
        for bad in ["0", "7200001", "1.5", "x"] {
            let e =
                CommConfig::from_source(&[("HCCL_RS_CONNECT_TIMEOUT_MS", bad)][..]).unwrap_err();
            assert_eq!(e.code(), HcclResult::EPara, "{bad}");
            assert!(
                e.message()
                    .contains(&format!("HCCL_RS_CONNECT_TIMEOUT_MS='{bad}'")),
                "{bad}: {e}"
            );
        }
    }

    #[test]
    fn yields_before_parking_reach_the_device() {
        let c = CommConfig::from_source(&[][..]).unwrap();
        assert_eq!(c.device_config(1).yields, DeviceConfig::default().yields);
        let c = CommConfig::from_source(&[("HCCL_RS_YIELDS", "0")][..]).unwrap();
        assert_eq!(c.device_config(8).yields, 0);
        let c = CommConfig::from_source(&[("HCCL_RS_YIELDS", "512")][..]).unwrap();
        assert_eq!(c.device_config(8).yields, 512);
    }

    #[test]
    fn sockets_per_link_from_the_environment() {
        let c = CommConfig::from_source(&[][..]).unwrap();
        assert_eq!(c.sockets_per_link, DEFAULT_SOCKETS_PER_LINK);
        let c = CommConfig::from_source(&[("HCCL_RS_SOCKETS_PER_LINK", "4")][..]).unwrap();
        assert_eq!(c.sockets_per_link, 4);
    }

    #[test]
    fn channel_limits() {
        use hccl_algorithm::rings::ChannelLimits;
        let c = CommConfig::from_source(&[][..]).unwrap();
        assert_eq!(c.channels, ChannelLimits::default());
        // the distinct channels, not doubled
        assert_eq!((c.channels.min, c.channels.max), (1, None));
        let c = CommConfig::from_source(&[("HCCL_RS_MAX_CHANNELS", "32")][..]).unwrap();
        assert_eq!(c.channels, ChannelLimits::new(1, 32).unwrap());
        let env = [
            ("HCCL_RS_MIN_CHANNELS", "6"),
            ("HCCL_RS_MAX_CHANNELS", " 2 "),
        ];
        let c = CommConfig::from_source(&env[..]).unwrap();
        // NCCL allows min > max: the first `max` channels, repeated
        assert_eq!(c.channels, ChannelLimits::new(6, 2).unwrap());
    }

    #[test]
    fn op_retry_from_the_environment() {
        let c = CommConfig::from_source(&[][..]).unwrap();
        assert!(!c.op_retry.any(), "HCCL's default: off at every level");
        let env = [
            ("HCCL_OP_RETRY_ENABLE", "L0:0, L1:1, L2:1"),
            (
                "HCCL_OP_RETRY_PARAMS",
                "MaxCnt:4,HoldTime:200,IntervalTime:50",
            ),
        ];
        let c = CommConfig::from_source(&env[..]).unwrap();
        assert_eq!(c.op_retry.levels, [false, true, true]);
        assert_eq!(c.op_retry.max_cnt, 4);
        assert_eq!(c.op_retry.hold_time, Duration::from_millis(200));
        assert_eq!(c.op_retry.interval_time, Duration::from_millis(50));
        assert!(c.op_retry.keep_input);
        let c = CommConfig::from_source(&[("HCCL_RS_OP_RETRY_KEEP", "0")][..]).unwrap();
        assert!(!c.op_retry.keep_input);
        let e = CommConfig::from_source(&[("HCCL_OP_RETRY_PARAMS", "MaxCnt:0")][..]).unwrap_err();
        assert_eq!(e.code(), HcclResult::EPara);
        assert!(
            e.message()
                .contains("environment variable HCCL_OP_RETRY_PARAMS='MaxCnt:0' is invalid"),
            "{e}"
        );
    }

    #[test]
    fn buffsize_in_mb() {
        let c = CommConfig::from_source(&[("HCCL_BUFFSIZE", "3")][..]).unwrap();
        assert_eq!(c.buffer_size, 3 << 20);
        let c = CommConfig::from_source(&[("HCCL_EXEC_TIMEOUT", "0")][..]).unwrap();
        assert_eq!(c.exec_timeout, None);
    }

    #[test]
    fn bad_values_name_the_variable() {
        for (var, val, why) in [
            ("HCCL_BUFFSIZE", "0", "at least 1"),
            ("HCCL_BUFFSIZE", "abc", "non-negative integer"),
            ("HCCL_BUFFSIZE", "-5", "non-negative integer"),
            ("HCCL_BUFFSIZE", "99999999999999", "too large"),
            ("HCCL_EXEC_TIMEOUT", "1.5", "non-negative integer"),
            ("HCCL_RS_EXEC_MODE", "turbo", "'inline' or 'worker'"),
            ("HCCL_RS_CPU_AFFINITY", "fast", "not a CPU id"),
            ("HCCL_RS_YIELDS", "many", "non-negative integer"),
            ("HCCL_RS_YIELDS", "5000000000", "at most 4294967295 yields"),
            ("HCCL_RS_SOCKETS_PER_LINK", "0", "expected 1 to 16 sockets"),
            ("HCCL_RS_SOCKETS_PER_LINK", "17", "expected 1 to 16 sockets"),
            ("HCCL_RS_SOCKETS_PER_LINK", "two", "non-negative integer"),
            ("HCCL_RS_MIN_CHANNELS", "0", "a channel count from 1 to 32"),
            ("HCCL_CONNECT_TIMEOUT", "0", "from 1 to 7200"),
            ("HCCL_CONNECT_TIMEOUT", "7201", "from 1 to 7200"),
            ("HCCL_RS_FR_BUFFER_SIZE", "lots", "up to 1048576 (0 = off)"),
            (
                "HCCL_RS_FR_BUFFER_SIZE",
                "2000000",
                "up to 1048576 (0 = off)",
            ),
            ("HCCL_RS_TRACE_EVENTS", "0", "from 1 to 67108864"),
            ("HCCL_ENTRY_LOG_ENABLE", "yes", "expected 0 or 1"),
            ("HCCL_DETERMINISTIC", "2", "expected false, true or strict"),
            ("HCCL_OP_EXPANSION_MODE", "GPU", "expected AI_CPU"),
            ("HCCL_RS_MAX_CHANNELS", "33", "a channel count from 1 to 32"),
            (
                "HCCL_RS_MAX_CHANNELS",
                "four",
                "a channel count from 1 to 32",
            ),
        ] {
            let e = CommConfig::from_source(&[(var, val)][..]).unwrap_err();
            assert_eq!(e.code(), HcclResult::EPara);
            let msg = e.to_string();
            assert!(msg.contains(&format!("{var}='{val}'")), "{msg}");
            assert!(msg.contains(why), "{msg}");
        }
    }
}

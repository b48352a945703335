//! The plain values a checked suite is made of: tolerances, probe limits
//! and the leak rule, the environment to record, the policies, and the
//! built-in defaults and bounds (budgets are `budget.rs`'s). They know
//! nothing of cases, servers or pytest.

use std::time::Duration;

use indexmap::IndexMap;

use crate::units::Bytes;

/// `[environment]`: what to capture once per run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EnvironmentSpec {
    /// The interpreter the workloads use; a path with `/` is resolved from
    /// the workdir. `None`: no Python packages are recorded.
    pub python: Option<String>,
    pub packages: Vec<String>,
    /// Record the full `python -m pip freeze`.
    pub freeze: bool,
    /// Named commands whose trimmed stdout is recorded, run in the workdir.
    pub commands: IndexMap<String, Vec<String>>,
}

/// What to do when the environment drifted from the baseline's.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DriftPolicy {
    /// List the differences beside the figures.
    #[default]
    Warn,
    /// Also fail every compared case.
    Fail,
}

/// How far a figure may move from its baseline before it counts:
/// `new > base × (1 + relative) + absolute` is a regression.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Tolerance {
    pub relative: f64,
    pub absolute: Bytes,
    /// With a locked spread (`lock --repeat`): a run is a regression only
    /// beyond `max(tolerance, spread_k × spread)`. 0 turns it off.
    pub spread_k: f64,
}

/// The default `spread_k`: three times the spread the locked runs showed.
pub const DEFAULT_SPREAD_K: f64 = 3.0;

/// Tolerances per figure.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Tolerances {
    pub host: Tolerance,
    pub gpu: Tolerance,
    /// The working memory (anonymous + shmem): read densely and free of
    /// page-cache effects, so far tighter than `host` (its spread on the
    /// torch workloads of `scripts/bench-torch-host.sh` was under 1 MiB).
    pub working: Tolerance,
    /// GPU memory outside the allocator (`outside_allocator_peak_bytes`):
    /// the CUDA context and NCCL's buffers are steady, but set against a
    /// `reserved` the probe reports between samples.
    pub outside: Tolerance,
}

impl Default for Tolerances {
    /// 10% + 64 MiB for host memory, 5% + 64 MiB for GPU memory, 5% +
    /// 16 MiB for the working memory, 10% + 64 MiB for GPU memory outside
    /// the allocator.
    fn default() -> Self {
        Tolerances {
            host: Tolerance {
                relative: 0.10,
                absolute: Bytes::from_mib(64),
                spread_k: DEFAULT_SPREAD_K,
            },
            gpu: Tolerance {
                relative: 0.05,
                absolute: Bytes::from_mib(64),
                spread_k: DEFAULT_SPREAD_K,
            },
            working: Tolerance {
                relative: 0.05,
                absolute: Bytes::from_mib(16),
                spread_k: DEFAULT_SPREAD_K,
            },
            outside: Tolerance {
                relative: 0.10,
                absolute: Bytes::from_mib(64),
                spread_k: DEFAULT_SPREAD_K,
            },
        }
    }
}

/// Whether GPU memory is measured.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum GpuMode {
    /// Measure GPU memory when NVML loads; otherwise say so once and go on.
    #[default]
    Auto,
    /// Fail (exit 3) when NVML cannot be loaded.
    Required,
    /// Never load NVML.
    Off,
}

/// What to do when a case's GPU already runs processes oomgate did not start.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ForeignPolicy {
    /// Report them and run the case.
    #[default]
    Warn,
    /// Fail the case without running it: its figures would not be trustworthy.
    Fail,
}

/// `creep = { limit = "10%", window = "30d", action = "fail" }`: how far
/// a figure may grow over its ratchet in the run history (docs/history.md).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Creep {
    /// The most growth over the ratchet, as a fraction (0.1: 10%).
    pub limit: f64,
    /// How far back the runs that set the ratchet go.
    pub window: std::time::Duration,
    pub action: CreepAction,
}

/// What growth past a creep limit does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CreepAction {
    /// The case fails (the default).
    Fail,
    /// The case passes, with a warning.
    Warn,
}

/// A creep limit's window when none is written.
pub const DEFAULT_CREEP_WINDOW: std::time::Duration =
    std::time::Duration::from_secs(30 * 24 * 3600);

/// `leak = { warmup = 3, max_growth = "64 MiB" }`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Leak {
    /// Iterations ignored at the start (allocator and caches settling).
    pub warmup: u32,
    /// Most growth allowed over the iterations after warm-up.
    pub max_growth: Bytes,
}

/// A threshold on a probe figure or custom metric: `metric.tokens_per_s >= 1500`.
#[derive(Debug, Clone, PartialEq)]
pub struct Limit {
    /// `probe.peak_allocated`, `probe.peak_reserved`, `probe.last_step`,
    /// `metric.<name>` (last value), `metric.<name>.min` / `.max`.
    pub key: crate::probe::LimitKey,
    pub op: LimitOp,
    pub value: f64,
    /// As written, for messages: `<= 40 GiB`.
    pub text: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LimitOp {
    Below,
    AtMost,
    Above,
    AtLeast,
}

impl LimitOp {
    pub fn holds(self, figure: f64, value: f64) -> bool {
        match self {
            LimitOp::Below => figure < value,
            LimitOp::AtMost => figure <= value,
            LimitOp::Above => figure > value,
            LimitOp::AtLeast => figure >= value,
        }
    }
}

/// Built-in values for keys neither the case nor `[defaults]` sets.
pub const DEFAULT_SAMPLE_INTERVAL: Duration = Duration::from_millis(50);
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60 * 60);
pub const DEFAULT_KILL_GRACE: Duration = Duration::from_secs(5);
/// How long a case waits, at most, for its GPUs to settle before it starts.
pub const DEFAULT_SETTLE_TIMEOUT: Duration = Duration::from_secs(30);
/// One user frame names an allocation site.
pub const DEFAULT_SITES_DEPTH: u32 = 1;

/// Longest `timeout` and `duration` accepted: a month. Beyond that it is a
/// typo, and the deadline arithmetic must stay far from overflow.
pub(super) const MAX_CASE_TIME: Duration = Duration::from_secs(30 * 24 * 3600);

/// Variables oomgate sets for every instance; a suite may not set them.
pub const RESERVED_ENV: [&str; 7] = [
    "OOMGATE_CASE",
    "OOMGATE_INSTANCE",
    "OOMGATE_CONCURRENCY",
    "OOMGATE_OUT",
    "OOMGATE_METRICS",
    "OOMGATE_PORT",
    "OOMGATE_ROLE",
];

/// The most cases a suite may expand to (matrices included): counted before
/// anything is expanded.
pub const MAX_CASES: usize = 10_000;
/// The largest suite file oomgate reads (1 MiB).
pub const MAX_SUITE_BYTES: u64 = 1024 * 1024;
/// The most text one case may expand to (1 MiB): its id, command, env,
/// cwd and server with its matrix values in, and those values. Linux
/// takes at most 2 MiB of arguments and environment, 128 KiB an argument.
/// Counted before anything is expanded.
pub const MAX_CASE_BYTES: u64 = 1024 * 1024;
/// The most text a suite's cases may expand to together (64 MiB): each
/// case's as above, and its command and env as written, which it keeps;
/// 10,000 cases of 3 KB each fit. Counted before anything is expanded.
pub const MAX_PLAN_BYTES: u64 = 64 * 1024 * 1024;

//! The serde mirror of a suite file: exactly what the TOML says, with the
//! span of every value that a later check may need to point at.
//!
//! Nothing here is interpreted. Sizes and durations stay text until
//! `suite::validate` reads them, so that an error can name the line and
//! column the user wrote them at. `deny_unknown_fields` everywhere: a typo in
//! a key is an error, never a silently ignored limit.

use indexmap::IndexMap;
use serde::Deserialize;
use toml::Spanned;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawSuiteFile {
    pub suite: Spanned<RawSuiteTable>,
    #[serde(default)]
    pub defaults: Option<Spanned<RawSettings>>,
    #[serde(default, rename = "case")]
    pub cases: Vec<Spanned<RawCase>>,
    #[serde(default)]
    pub environment: Option<Spanned<RawEnvironment>>,
    /// `[[pytest]]`: a pytest suite, one case per collected test.
    #[serde(default, rename = "pytest")]
    pub pytests: Vec<Spanned<RawPytest>>,
}

/// `[[pytest]]`: where the tests are, how to run pytest, and any case key
/// as a default for its tests.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawPytest {
    pub paths: Spanned<Vec<Spanned<String>>>,
    pub python: Option<Spanned<String>>,
    pub args: Option<Vec<Spanned<String>>>,
    /// `"test"` (default) or `"file"`.
    pub granularity: Option<Spanned<String>>,
    // The keys of a `[[case]]` that make no sense for a collected test:
    // read so that each is refused with a reason, not as an unknown key.
    pub name: Option<Spanned<toml::Value>>,
    pub command: Option<Spanned<toml::Value>>,
    pub matrix: Option<Spanned<toml::Value>>,
    pub search: Option<Spanned<toml::Value>>,
    pub capacity_tolerance: Option<Spanned<toml::Value>>,
    pub server: Option<Spanned<toml::Value>>,
    pub client_budget: Option<Spanned<toml::Value>>,
    pub cwd: Option<Spanned<String>>,
    pub env: Option<RawEnv>,
    pub timeout: Option<Spanned<String>>,
    pub kill_grace: Option<Spanned<String>>,
    pub concurrency: Option<Spanned<i64>>,
    pub duration: Option<Spanned<String>>,
    pub budget: Option<Spanned<RawBudget>>,
    pub tolerance: Option<Spanned<RawTolerance>>,
    pub repeat: Option<Spanned<i64>>,
    pub limits: Option<Spanned<RawLimits>>,
    pub leak: Option<Spanned<RawLeak>>,
    pub gpus: Option<Spanned<i64>>,
    pub gpu_memory: Option<Spanned<toml::Value>>,
    pub settle_timeout: Option<Spanned<String>>,
    pub sites: Option<Spanned<RawSites>>,
}

/// `[environment]`: what to record about the software the workloads use.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawEnvironment {
    pub python: Option<Spanned<String>>,
    pub packages: Option<Vec<Spanned<String>>>,
    pub freeze: Option<bool>,
    pub commands: Option<IndexMap<Spanned<String>, Spanned<RawArgv>>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawSuiteTable {
    pub name: Spanned<String>,
    pub sample_interval: Option<Spanned<String>>,
    pub workdir: Option<Spanned<String>>,
    /// `"auto"`, `"required"` or `"off"`.
    pub gpu: Option<Spanned<String>>,
    /// `"warn"` or `"fail"`.
    pub foreign_processes: Option<Spanned<String>>,
    /// `"warn"` or `"fail"`: environment drift against the baseline.
    pub on_drift: Option<Spanned<String>>,
    pub tolerance: Option<Spanned<RawTolerance>>,
    /// Regexes of the suite's own secrets, masked in everything written.
    pub redact: Option<Vec<Spanned<String>>>,
    /// Every case's `settle_timeout`, under `[defaults]` and the case's.
    pub settle_timeout: Option<Spanned<String>>,
}

/// `tolerance = { relative = "5%", absolute = "64 MiB", spread_k = 3, host = { ... }, gpu = { ... }, working = { ... } }`:
/// the flat keys apply to every figure, `host` / `gpu` / `working` override them.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawTolerance {
    pub relative: Option<Spanned<toml::Value>>,
    pub absolute: Option<Spanned<toml::Value>>,
    pub spread_k: Option<Spanned<toml::Value>>,
    pub host: Option<Spanned<RawToleranceFigure>>,
    pub gpu: Option<Spanned<RawToleranceFigure>>,
    pub working: Option<Spanned<RawToleranceFigure>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawToleranceFigure {
    pub relative: Option<Spanned<toml::Value>>,
    pub absolute: Option<Spanned<toml::Value>>,
    pub spread_k: Option<Spanned<toml::Value>>,
}

/// The keys a case shares with `[defaults]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawSettings {
    pub cwd: Option<Spanned<String>>,
    pub env: Option<RawEnv>,
    pub timeout: Option<Spanned<String>>,
    pub kill_grace: Option<Spanned<String>>,
    pub concurrency: Option<Spanned<i64>>,
    pub duration: Option<Spanned<String>>,
    pub budget: Option<Spanned<RawBudget>>,
    pub tolerance: Option<Spanned<RawTolerance>>,
    pub repeat: Option<Spanned<i64>>,
    pub limits: Option<Spanned<RawLimits>>,
    pub leak: Option<Spanned<RawLeak>>,
    pub gpus: Option<Spanned<i64>>,
    pub gpu_memory: Option<Spanned<toml::Value>>,
    pub settle_timeout: Option<Spanned<String>>,
    pub sites: Option<Spanned<RawSites>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawCase {
    pub name: Spanned<String>,
    pub command: Spanned<Vec<Spanned<String>>>,
    pub matrix: Option<Spanned<RawMatrix>>,
    /// Capacity search; a case's own key, never a default.
    pub search: Option<Spanned<RawSearch>>,
    /// How far below the locked capacity a search may land: steps, or a
    /// share (`"5%"`).
    pub capacity_tolerance: Option<Spanned<toml::Value>>,
    /// The server the command loads; a case's own key.
    pub server: Option<Spanned<RawServer>>,
    /// Limits on the load client's figures, beside a server.
    pub client_budget: Option<Spanned<RawBudget>>,
    // Spelled out rather than `#[serde(flatten)] RawSettings`: serde's
    // flatten disables both `deny_unknown_fields` and span tracking.
    pub cwd: Option<Spanned<String>>,
    pub env: Option<RawEnv>,
    pub timeout: Option<Spanned<String>>,
    pub kill_grace: Option<Spanned<String>>,
    pub concurrency: Option<Spanned<i64>>,
    pub duration: Option<Spanned<String>>,
    pub budget: Option<Spanned<RawBudget>>,
    pub tolerance: Option<Spanned<RawTolerance>>,
    pub repeat: Option<Spanned<i64>>,
    pub limits: Option<Spanned<RawLimits>>,
    pub leak: Option<Spanned<RawLeak>>,
    pub gpus: Option<Spanned<i64>>,
    pub gpu_memory: Option<Spanned<toml::Value>>,
    pub settle_timeout: Option<Spanned<String>>,
    pub sites: Option<Spanned<RawSites>>,
}

/// Borrow the shared keys of a `RawCase` or `RawSettings` (same field names).
macro_rules! settings_ref {
    ($raw:expr) => {
        RawSettingsRef {
            cwd: $raw.cwd.as_ref(),
            env: $raw.env.as_ref(),
            timeout: $raw.timeout.as_ref(),
            kill_grace: $raw.kill_grace.as_ref(),
            concurrency: $raw.concurrency.as_ref(),
            duration: $raw.duration.as_ref(),
            budget: $raw.budget.as_ref(),
            tolerance: $raw.tolerance.as_ref(),
            repeat: $raw.repeat.as_ref(),
            limits: $raw.limits.as_ref(),
            leak: $raw.leak.as_ref(),
            gpus: $raw.gpus.as_ref(),
            gpu_memory: $raw.gpu_memory.as_ref(),
            settle_timeout: $raw.settle_timeout.as_ref(),
            sites: $raw.sites.as_ref(),
        }
    };
}

impl RawCase {
    /// The keys this case shares with `[defaults]`.
    pub fn settings(&self) -> RawSettingsRef<'_> {
        settings_ref!(self)
    }
}

impl RawPytest {
    /// The keys this table gives its tests, over `[defaults]`.
    pub fn settings(&self) -> RawSettingsRef<'_> {
        settings_ref!(self)
    }
}

impl RawSettings {
    pub fn as_ref(&self) -> RawSettingsRef<'_> {
        settings_ref!(self)
    }
}

/// `limits = { "probe.peak_allocated" = "<= 40 GiB", "metric.tokens_per_s" = ">= 1500" }`
pub type RawLimits = IndexMap<Spanned<String>, Spanned<String>>;

/// `search = { param = "batch", min = 1, max = 4096, step = 8 }`
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawSearch {
    pub param: Spanned<String>,
    pub min: Option<Spanned<i64>>,
    pub max: Spanned<i64>,
    pub step: Option<Spanned<i64>>,
    pub max_probes: Option<Spanned<i64>>,
    pub timeout: Option<Spanned<String>>,
}

/// `server = { command = [...], ready = "http://127.0.0.1:{port}/health" }`
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawServer {
    pub command: Spanned<Vec<Spanned<String>>>,
    /// `"http://…"`, `"tcp://host:port"` or `{ log = "regex" }`.
    pub ready: Spanned<toml::Value>,
    pub ready_timeout: Option<Spanned<String>>,
    pub stop_signal: Option<Spanned<String>>,
    pub kill_grace: Option<Spanned<String>>,
    pub env: Option<RawEnv>,
}

/// `sites = { depth = 1 }`: how many of the user's frames name an
/// allocation site in a torch memory snapshot.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawSites {
    pub depth: Option<Spanned<i64>>,
}

/// `leak = { warmup = 3, max_growth = "64 MiB" }`
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawLeak {
    pub warmup: Option<Spanned<i64>>,
    pub max_growth: Option<Spanned<toml::Value>>,
}

/// An argv list.
pub type RawArgv = Vec<Spanned<String>>;

pub type RawEnv = IndexMap<Spanned<String>, Spanned<String>>;

/// `matrix = { key = [values...] }`, keys in file order.
pub type RawMatrix = IndexMap<Spanned<String>, Spanned<Vec<Spanned<toml::Value>>>>;

/// Borrowed view of the shared keys, so defaults and a case are read by one
/// piece of code.
#[derive(Clone, Copy, Default)]
pub struct RawSettingsRef<'a> {
    pub cwd: Option<&'a Spanned<String>>,
    pub env: Option<&'a RawEnv>,
    pub timeout: Option<&'a Spanned<String>>,
    pub kill_grace: Option<&'a Spanned<String>>,
    pub concurrency: Option<&'a Spanned<i64>>,
    pub duration: Option<&'a Spanned<String>>,
    pub budget: Option<&'a Spanned<RawBudget>>,
    pub tolerance: Option<&'a Spanned<RawTolerance>>,
    pub repeat: Option<&'a Spanned<i64>>,
    pub limits: Option<&'a Spanned<RawLimits>>,
    pub leak: Option<&'a Spanned<RawLeak>>,
    pub gpus: Option<&'a Spanned<i64>>,
    pub gpu_memory: Option<&'a Spanned<toml::Value>>,
    pub settle_timeout: Option<&'a Spanned<String>>,
    pub sites: Option<&'a Spanned<RawSites>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawBudget {
    /// A size: `"512 MiB"` or a number of bytes.
    pub host: Option<Spanned<toml::Value>>,
    /// A size, on the case's GPU peak over all its devices.
    pub gpu: Option<Spanned<toml::Value>>,
    /// Headroom: the peak on each device must stay within this share of
    /// the device's total memory.
    pub gpu_fraction: Option<Spanned<toml::Value>>,
    /// A size: GPU memory the case's devices did not give back after it.
    pub gpu_left: Option<Spanned<toml::Value>>,
    /// A size, on any one rank's GPU memory.
    pub gpu_rank: Option<Spanned<toml::Value>>,
}

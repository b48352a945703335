//! Suite files: from TOML text to a list of checked, fully expanded [`Case`]s.
//!
//! Loading happens in two passes, the way nextest reads its config: `raw`
//! mirrors the file with serde (so unknown keys and wrong types are caught
//! with their spans), then `validate` turns it into domain types — sizes,
//! durations, absolute paths, matrix rows — collecting every problem before
//! returning. Nothing is launched unless the whole suite is valid.
//!
//! Relative paths never depend on where oomgate was started: `workdir` is
//! relative to the suite file's folder, `cwd` to the workdir, and a command
//! whose first element contains `/` to the case's working directory.

mod checker;
mod located;
mod partition;
mod pytest;
mod raw;
mod search;
mod secrets;
mod server;
mod template;
mod validate;

use std::path::{Path, PathBuf};
use std::time::Duration;

use indexmap::IndexMap;

pub use located::{Diagnostic, Located, SuiteError};
pub use partition::{Partition, PartitionKind};
pub use pytest::{
    Collected, CollectedMarker, CollectedTest, Granularity, PYTEST_PLUGIN_MODULE, PytestSource,
    PytestTest, junit_names,
};
pub use secrets::{server_env, suite_secrets};
pub use server::{
    HttpTarget, PORT, Ready, ReadyError, RowError, Server, StopSignal, TargetError, http_target,
    tcp_target,
};
pub use template::{fnv1a, folder_name, shell_join};

use crate::units::Bytes;

/// A validated suite, ready to plan and run.
#[derive(Debug, Clone)]
pub struct Suite {
    pub name: String,
    /// The suite file as the user named it (for messages).
    pub path: PathBuf,
    /// Absolute folder commands run from unless a case sets `cwd`.
    pub workdir: PathBuf,
    pub sample_interval: Duration,
    pub gpu: GpuMode,
    pub foreign_processes: ForeignPolicy,
    /// What to do when the environment differs from the baseline's.
    pub on_drift: DriftPolicy,
    /// What to record about the workloads' software (`[environment]`).
    pub environment: EnvironmentSpec,
    /// `[suite] redact`: the suite's own secret patterns (regexes, checked),
    /// masked beside the built-in ones (see `crate::redact`).
    pub redact: Vec<String>,
    /// The `[[case]]` cases, then (once collected, see `crate::pytest`)
    /// one per test of each `[[pytest]]`.
    pub cases: Vec<Case>,
    /// `[[pytest]]` tables, checked; their tests are not known until
    /// pytest collects them (`crate::pytest::collect`).
    pub pytest: Vec<PytestSource>,
    /// oomgate's copy of its pytest plugin, once the tests are collected:
    /// held for as long as the suite is, removed after.
    pub pytest_plugin: Option<std::sync::Arc<crate::files::SealedDir>>,
    /// What is worth saying about the suite but does not stop it
    /// (`file:line:col: warning: …`), printed when it is loaded.
    pub warnings: Vec<Located>,
}

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
}

impl Default for Tolerances {
    /// 10% + 64 MiB for host memory, 5% + 64 MiB for GPU memory, 5% +
    /// 16 MiB for the working memory.
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

/// One case after matrix expansion: everything needed to launch it.
#[derive(Debug, Clone, PartialEq)]
pub struct Case {
    /// The expanded name; unique in the suite.
    pub id: String,
    /// `id` made safe as a folder name under `cases/`.
    pub folder: String,
    /// The matrix row this case was expanded from, in file order.
    pub params: IndexMap<String, String>,
    /// The argv as written, placeholders substituted.
    pub command: Vec<String>,
    /// What is executed: `command[0]`, made absolute against `cwd` when it
    /// contains a `/`, otherwise looked up on `PATH` at launch.
    pub program: PathBuf,
    /// Absolute working directory.
    pub cwd: PathBuf,
    /// `[defaults].env` then the case's `env`, on top of oomgate's own
    /// environment at launch.
    pub env: IndexMap<String, String>,
    pub timeout: Duration,
    /// How long a stopped case may take to exit after SIGTERM before SIGKILL.
    pub kill_grace: Duration,
    /// Instances launched at once.
    pub concurrency: u32,
    /// Soak: relaunch each instance that exits 0 until this much time passed.
    pub soak: Option<Duration>,
    pub budget: Budget,
    /// How far figures may move from the baseline.
    pub tolerance: Tolerances,
    /// Runs of the whole case; the compared figure is their maximum.
    pub repeat: u32,
    /// Thresholds on figures the workload reports through the probe.
    pub limits: Vec<Limit>,
    /// Fail when a per-iteration figure keeps growing after warm-up.
    pub leak: Option<Leak>,
    /// Whole GPUs the case needs from a pool (`run --gpus`); `None`: one
    /// under a pool. 0: host-only (it sees no GPU under a pool).
    pub gpus: Option<u32>,
    /// The case's GPU peak as declared, for packing when no baseline has
    /// one (`run --pack`).
    pub gpu_memory: Option<Bytes>,
    /// How long to wait, before the case starts, for its GPUs to come back
    /// to their idle level (see `run::settle`); zero: no wait.
    pub settle_timeout: Duration,
    /// How many of the user's frames name an allocation site in the
    /// torch memory snapshots the case leaves (`sites = { depth = N }`).
    pub sites_depth: u32,
    /// Capacity search: the case runs once per probed value of a
    /// parameter (see `crate::capacity`).
    pub search: Option<crate::capacity::SearchSpec>,
    /// The command and env as written, before any value is put in: what a
    /// probe and a server case's launch fill in, in one pass (filling in
    /// `command` again would read a value's own braces as placeholders).
    pub templates: Templates,
    /// The server the case's command loads (see `docs/serving.md`); the
    /// case's own figures are then the server's.
    pub server: Option<Server>,
    /// With a server: limits on the load client's figures.
    pub client_budget: Budget,
    /// A test of a `[[pytest]]`: how pytest names it.
    pub pytest: Option<PytestTest>,
}

/// A command and env as written, placeholders and all.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Templates {
    pub command: Vec<String>,
    pub env: IndexMap<String, String>,
}

impl Templates {
    /// The command and env with `params` filled in; a placeholder not in
    /// `params` (`{port}` before a server has one) stays as written.
    pub fn fill(
        &self,
        params: &IndexMap<String, String>,
    ) -> (Vec<String>, IndexMap<String, String>) {
        let command = self
            .command
            .iter()
            .map(|arg| template::substitute(arg, params))
            .collect();
        let env = self
            .env
            .iter()
            .map(|(k, v)| (k.clone(), template::substitute(v, params)))
            .collect();
        (command, env)
    }
}

impl Case {
    /// The case as one probe of its search runs it: the searched value
    /// in its command and env (or its concurrency), and in its params.
    pub fn probe(&self, value: u64) -> Case {
        let mut probe = self.clone();
        let Some(search) = &self.search else {
            return probe;
        };
        let param = search.param.as_str();
        probe.params.insert(param.to_string(), value.to_string());
        if param == crate::capacity::CONCURRENCY {
            probe.concurrency = u32::try_from(value).unwrap_or(u32::MAX);
        } else {
            (probe.command, probe.env) = self.templates.fill(&probe.params);
        }
        if let Some(server) = probe.server.as_mut() {
            server.command = server.templates.fill(&probe.params).0;
        }
        probe.search = None;
        probe
    }

    /// The params with the server's port among them, for a launch.
    pub fn params_at(&self, port: u16) -> IndexMap<String, String> {
        let mut params = self.params.clone();
        params.insert(PORT.to_string(), port.to_string());
        params
    }

    /// The load client as launched beside its server on `port`: `{port}`
    /// filled in its command and env.
    pub fn client_at(&self, port: u16) -> Case {
        let mut client = self.clone();
        (client.command, client.env) = self.templates.fill(&self.params_at(port));
        client
    }

    /// The server as launched on `port`, in the shape of a case: its
    /// command, program and env (the case's, then the server's own), the
    /// case's working directory and instances. `None` without a server.
    pub fn server_at(&self, port: u16) -> Option<Case> {
        let server = self.server.as_ref()?;
        let params = self.params_at(port);
        let mut launched = self.clone();
        let (_, env) = self.templates.fill(&params);
        let (command, own_env) = server.templates.fill(&params);
        launched.command = command;
        launched.program = server.program.clone();
        launched.env = env;
        launched.env.extend(own_env);
        launched.kill_grace = server.kill_grace;
        launched.soak = None;
        Some(launched)
    }
}

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

/// Hard limits; a breach stops the case at once.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Budget {
    /// On the case's gated host peak: the largest of the kernel's floors
    /// (the case cgroup's anon + shmem charge, the tree's PSS sum, the
    /// largest VmHWM, reaped children's rusage; docs/host-measurement.md).
    pub host: Option<Bytes>,
    /// On the case's GPU peak, all its devices together.
    pub gpu: Option<Bytes>,
    /// Headroom: on each device, the case's peak may not exceed this share
    /// of the device's memory less its driver's reserve (0 < f <= 1).
    pub gpu_fraction: Option<f64>,
    /// After the case: GPU memory its devices did not give back (above
    /// their idle level once its processes are gone), checked once.
    pub gpu_left: Option<Bytes>,
    /// On any one rank of a distributed case: its processes' GPU memory
    /// summed over its devices (see `measure::ranks`).
    pub gpu_rank: Option<Bytes>,
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
const MAX_CASE_TIME: Duration = Duration::from_secs(30 * 24 * 3600);

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

/// Read and validate a suite file.
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

pub fn load(path: &Path) -> Result<Suite, SuiteError> {
    let read_error = |source| SuiteError::Read {
        path: path.to_path_buf(),
        source,
    };
    // A suite is a regular file of a sane size: `/dev/zero` or a FIFO
    // would be read until oomgate is killed.
    let bytes = crate::files::read_input_bytes(path, MAX_SUITE_BYTES, "a suite").map_err(|e| {
        read_error(match e.kind() {
            std::io::ErrorKind::InvalidInput => {
                std::io::Error::other("not a regular file (a suite is a TOML file)")
            }
            _ => e,
        })
    })?;
    let source = String::from_utf8(bytes).map_err(|e| not_utf8(path, e))?;
    let absolute = std::path::absolute(path).map_err(|source| SuiteError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let folder = absolute.parent().unwrap_or(Path::new("/")).to_path_buf();
    parse(&source, path, &folder)
}

/// A suite that is not UTF-8 (TOML is): a located error at its first
/// invalid byte, shown in the line as the replacement character.
fn not_utf8(path: &Path, error: std::string::FromUtf8Error) -> SuiteError {
    let at = error.utf8_error().valid_up_to();
    let bytes = error.as_bytes();
    let invalid = error.utf8_error().error_len().unwrap_or(bytes.len() - at);
    let shown: Vec<String> = bytes[at..at + invalid]
        .iter()
        .map(|b| format!("0x{b:02X}"))
        .collect();
    let text = String::from_utf8_lossy(bytes);
    let diagnostic = Diagnostic::new(
        Some(at..at + '\u{FFFD}'.len_utf8()),
        format!(
            "not UTF-8: byte(s) {} here are not a character",
            shown.join(" ")
        ),
    )
    .with_help("a suite is TOML, which is UTF-8 text: save the file as UTF-8");
    SuiteError::Invalid {
        path: path.to_path_buf(),
        problems: vec![Located::resolve(&text, diagnostic)],
    }
}

/// Validate suite text. `path` is only used in messages; relative paths in
/// the suite resolve from `folder`.
pub fn parse(source: &str, path: &Path, folder: &Path) -> Result<Suite, SuiteError> {
    let invalid = |diagnostics: Vec<Diagnostic>| SuiteError::Invalid {
        path: path.to_path_buf(),
        problems: diagnostics
            .into_iter()
            .map(|d| Located::resolve(source, d))
            .collect(),
    };
    let mut document = toml::de::DeTable::parse(source)
        .map_err(|e| invalid(vec![located::from_toml_error(&e, source)]))?;
    // Every unknown key at once: each is noted and taken out of the
    // document, and the rest is read again (serde stops at the first).
    let mut problems = Vec::new();
    let raw = loop {
        use serde::Deserialize;
        match raw::RawSuiteFile::deserialize(toml::de::Deserializer::from(document.clone())) {
            Ok(raw) => break raw,
            Err(error) => {
                let diagnostic = located::from_toml_error(&error, source);
                let removed = diagnostic.message.starts_with("unknown key")
                    && problems.len() < MAX_UNKNOWN_KEYS
                    && error
                        .span()
                        .is_some_and(|span| remove_key(document.get_mut(), &span));
                problems.push(diagnostic);
                if !removed {
                    return Err(invalid(problems));
                }
            }
        }
    };
    match validate::validate(raw, source, path, folder) {
        Ok(suite) if problems.is_empty() => Ok(suite),
        Ok(_) => Err(invalid(problems)),
        Err(more) => {
            problems.extend(more);
            Err(invalid(problems))
        }
    }
}

/// The most unknown keys reported from one suite (the rest are left to
/// the next check).
const MAX_UNKNOWN_KEYS: usize = 100;

/// Take the key whose name sits at `span` out of the document, wherever it
/// is; whether there was one.
fn remove_key(table: &mut toml::de::DeTable<'_>, span: &std::ops::Range<usize>) -> bool {
    let found = table.keys().find(|key| key.span() == *span).cloned();
    if let Some(key) = found {
        return table.remove(&key).is_some();
    }
    table
        .iter_mut()
        .any(|(_, value)| remove_key_in(value.get_mut(), span))
}

fn remove_key_in(value: &mut toml::de::DeValue<'_>, span: &std::ops::Range<usize>) -> bool {
    match value {
        toml::de::DeValue::Table(table) => remove_key(table, span),
        toml::de::DeValue::Array(array) => array
            .iter_mut()
            .any(|item| remove_key_in(item.get_mut(), span)),
        _ => false,
    }
}

impl Suite {
    /// Cases whose id contains any of the substrings (all cases when none).
    pub fn filtered(&self, filters: &[String]) -> Vec<&Case> {
        self.cases
            .iter()
            .filter(|case| {
                filters.is_empty() || filters.iter().any(|f| case.id.contains(f.as_str()))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests;

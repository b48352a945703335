//! Baselines: the lock file a passing run writes, and the comparison of a
//! later run against it.
//!
//! The lock is TOML (`version = 3`) committed next to the suite, written in
//! a stable order so a pull request shows exactly which figure moved: per
//! case its peaks (with the methods that produced them), duration,
//! and the expanded definition (command, params, env) with a hash; and the
//! environment captured by the run. It is written atomically and read
//! strictly: a corrupt lock, or one from a newer oomgate, is an error (exit
//! 2), never ignored or overwritten.
//!
//! Comparison (`compare`) and drift (`drift`) are pure functions; reading
//! results into locks is the results model's (`results::readback`). This module
//! depends on no results type: the results model holds its comparisons.

pub mod compare;
pub mod drift;
pub mod testbed;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

pub use compare::{
    AnonWithin, AppliedTolerance, CaseTolerances, Figure, FigureComparison, FloorBreach,
    NotCompared, Outcome, SpreadBound,
};
pub use drift::Drift;

use crate::environment::Environment;
use crate::measure::HostMethod;
use crate::measure::host::{HostFloor, HostFloors};
use crate::redact;
use crate::suite::Tolerances;

/// 2: host figures name their method (`host_peak_method`) and are the
/// largest of the kernel's floors. Version 1 locks are read still; their
/// host figures, which name no method, were RSS sums (`procfs-rss`), and an
/// oomgate that knows only version 1 must not compare them with the new
/// figures.
///
/// 3: the suite's `env` is recorded by value only for variables that change
/// memory behaviour, every other one (and every secret) by a keyed hash;
/// commands are redacted. An oomgate that knows only version 2 would take
/// the hashes for values and report every variable as changed.
///
/// 4: each case records the tolerances it was judged with (`tolerance`:
/// host, GPU, and a search's capacity tolerance), so that `oomgate diff`
/// of two locks, or of a lock and a results file, judges as the run did.
/// An oomgate that knows only version 3 would judge them with its
/// defaults and contradict the run. Later additions to the lock (the
/// spread of a figure, host floors, testbeds) extend version 4's format
/// with fields an older version-4 reader ignores, rather than bumping it.
pub const LOCK_VERSION: u32 = 4;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Lock {
    pub version: u32,
    pub suite: String,
    /// When the locked run started (RFC 3339).
    pub locked_at: String,
    pub environment: Environment,
    /// Host-only cases, and every case of a lock written before testbeds.
    pub cases: BTreeMap<String, LockedCase>,
    /// The entries of the cases that ran on GPUs, by testbed (GPU model
    /// and count: `NVIDIA H100 80GB HBM3 ×1`); see `testbed`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub testbeds: BTreeMap<String, Testbed>,
}

/// One testbed's entries in a lock.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Testbed {
    /// When the run that locked these entries started (RFC 3339).
    pub locked_at: String,
    /// That run's environment: what drift is listed against.
    pub environment: Environment,
    pub cases: BTreeMap<String, LockedCase>,
}

#[cfg(test)]
impl Lock {
    /// A lock of suite `suite`, locked at `locked_at` in an empty
    /// environment, holding `cases` and no testbed: for the tests.
    pub(crate) fn of<'c>(
        suite: &str,
        locked_at: &str,
        cases: impl IntoIterator<Item = (&'c str, LockedCase)>,
    ) -> Lock {
        Lock {
            version: LOCK_VERSION,
            suite: suite.into(),
            locked_at: locked_at.into(),
            environment: Default::default(),
            cases: cases
                .into_iter()
                .map(|(id, locked)| (id.to_string(), locked))
                .collect(),
            testbeds: Default::default(),
        }
    }
}

/// One case as locked.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LockedCase {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host_peak_bytes: Option<u64>,
    /// The same figure for people reading the diff.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host_peak: Option<String>,
    /// How the host figure was measured. Locks written before host methods
    /// were recorded have none: theirs was `procfs-rss`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_peak_method: Option<HostMethod>,
    /// The floor that set the host figure (`cgroup-anon-shmem`, `pss-sum`,
    /// ...), for the reader: the gated figure is compared with the gated
    /// figure, and each floor with the same floor (see [`compare_case`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_peak_source: Option<HostFloor>,
    /// Every floor's peak in the locked run, by name: a run's floor that
    /// grew past the bound against its locked self fails the case.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub host_floors: BTreeMap<String, u64>,
    /// With `lock --repeat N` (or `repeat`): the largest less the smallest
    /// host figure over the locked runs (see `compare::SpreadBound`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_spread_bytes: Option<u64>,
    /// The working memory's peak (anonymous + shmem), gated with the
    /// `working` tolerance; absent where the locked run had no case
    /// cgroup, and in locks written before it was gated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_working_peak_bytes: Option<u64>,
    /// The same figure for people reading the diff.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_working_peak: Option<String>,
    /// Its spread over the locked runs, as the host figure's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_working_spread_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpu_peak_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpu_peak: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpu_peak_method: Option<crate::measure::gpu::GpuMethod>,
    /// The GPU figure's spread over the locked runs, as the host one's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_spread_bytes: Option<u64>,
    /// With `search`: the largest value of the searched parameter that
    /// passed. A run finding less is a regression.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity: Option<u64>,
    /// What `capacity` counts: the searched parameter (`batch`), and its
    /// step. A search of another parameter or step is not compared with it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity_of: Option<String>,
    pub wall_time_s: f64,
    /// FNV-1a of the expanded command (and server command), params and env.
    pub definition_hash: String,
    pub command: Vec<String>,
    /// With `server`: its command, `{port}` as written, and its own env.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<LockedServer>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub params: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// Allocator- and device-related variables the case was launched with.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub allocator_env: BTreeMap<String, String>,
    /// The allocator's peak the workload's probe reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub probe_peak_allocated_bytes: Option<u64>,
    /// GPU memory outside the allocator, its peak.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outside_allocator_peak_bytes: Option<u64>,
    /// The tolerances the case was judged with (version 4 on): what
    /// `oomgate diff` judges its figures with when it has no suite.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tolerance: Option<CaseTolerances>,
    /// The largest allocation sites of the snapshots the locked run left
    /// (at most `snapshot::LOCKED_SITES`), and its allocator's totals and
    /// settings: what a regression's sites are compared with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allocation_sites: Option<crate::snapshot::AllocationSites>,
    /// A distributed case's ranks, each with its own figures: what a
    /// regression's rank is found by.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ranks: Vec<crate::measure::ranks::RankFigures>,
    /// The numbers its logs printed (`metrics_from_output`), by name:
    /// only those a line gave.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub outputs: BTreeMap<String, LockedOutput>,
}

/// An output metric as locked: its figure, and how it was judged.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LockedOutput {
    pub value: f64,
    pub better: crate::suite::Better,
    pub tolerance: f64,
}

#[cfg(test)]
impl LockedCase {
    /// A locked case with no figure and an empty definition, for tests.
    pub(crate) fn empty() -> Self {
        LockedCase {
            host_peak_bytes: None,
            host_peak: None,
            host_peak_method: None,
            host_peak_source: None,
            host_floors: BTreeMap::new(),
            host_spread_bytes: None,
            host_working_peak_bytes: None,
            host_working_peak: None,
            host_working_spread_bytes: None,
            gpu_peak_bytes: None,
            gpu_peak: None,
            gpu_peak_method: None,
            gpu_spread_bytes: None,
            capacity: None,
            capacity_of: None,
            wall_time_s: 0.0,
            definition_hash: String::new(),
            command: Vec::new(),
            server: None,
            params: BTreeMap::new(),
            env: BTreeMap::new(),
            allocator_env: BTreeMap::new(),
            probe_peak_allocated_bytes: None,
            outside_allocator_peak_bytes: None,
            tolerance: None,
            allocation_sites: None,
            ranks: Vec::new(),
            outputs: BTreeMap::new(),
        }
    }
}

/// A server case's server as the lock records it (`[cases.<id>.server]`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LockedServer {
    pub command: Vec<String>,
    /// Its own `env`, recorded as the case's is (see [`locked_env_value`]).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
}

impl LockedCase {
    /// The method of the locked host figure (`procfs-rss` for locks that
    /// predate the field).
    pub fn host_method(&self) -> HostMethod {
        self.host_peak_method.unwrap_or(HostMethod::ProcfsRss)
    }
}

/// Why a lock file cannot be used. Nothing runs when this is returned.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    #[error("cannot read lock {}: {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("lock {} is corrupt: {message}\n  = help: restore it from version control, or write a new one with `oomgate lock`", path.display())]
    Corrupt { path: PathBuf, message: String },
    #[error("lock {} has version {found}, newer than this oomgate understands ({LOCK_VERSION}); upgrade oomgate", path.display())]
    Newer { path: PathBuf, found: u64 },
    #[error("cannot write lock {}: {source}", path.display())]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// The default lock path: beside the suite, `<suite-stem>.lock`.
pub fn default_path(suite: &Path) -> PathBuf {
    suite.with_extension("lock")
}

/// Read and check a lock file. Only a regular file (or a link to one) is
/// a lock: a device such as /dev/zero would be read without end, and a
/// lock path that is one would then be renamed over.
pub fn read(path: &Path) -> Result<Lock, LockError> {
    let fail = |source| LockError::Read {
        path: path.to_path_buf(),
        source,
    };
    let text =
        crate::files::read_input(path, crate::files::MAX_LOCK_BYTES, "a lock").map_err(|e| {
            fail(match e.kind() {
                std::io::ErrorKind::InvalidInput => std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    "not a regular file; a lock is a file kept next to the suite",
                ),
                _ => e,
            })
        })?;
    parse(&text, path)
}

pub fn parse(text: &str, path: &Path) -> Result<Lock, LockError> {
    let corrupt = |message: String| LockError::Corrupt {
        path: path.to_path_buf(),
        message,
    };
    // The version first, so a newer format is named as such rather than
    // reported as whatever field it added.
    let value: toml::Table = toml::from_str(text).map_err(|e| corrupt(one_line(&e.to_string())))?;
    match value.get("version").and_then(toml::Value::as_integer) {
        Some(v) if (1..=i64::from(LOCK_VERSION)).contains(&v) => {}
        Some(found) if found > i64::from(LOCK_VERSION) => {
            return Err(LockError::Newer {
                path: path.to_path_buf(),
                found: found as u64,
            });
        }
        Some(other) => return Err(corrupt(format!("unknown version {other}"))),
        None => return Err(corrupt("no `version` key".to_string())),
    }
    toml::from_str(text).map_err(|e| corrupt(one_line(&e.to_string())))
}

fn one_line(message: &str) -> String {
    message
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && *l != "|")
        .collect::<Vec<_>>()
        .join(" ")
}

/// How long `oomgate lock` waits for another oomgate writing the same
/// lock before it gives up.
pub const HOLD_WAIT: std::time::Duration = std::time::Duration::from_secs(60);

/// The file beside a lock whose `flock` an `oomgate lock` holds for its
/// read-modify-write of the lock: `.suite.lock.held` for `suite.lock`. The
/// lock itself cannot carry it, since it is replaced by a rename. Beside
/// the lock's real file when the lock is a link, so two oomgates naming it
/// two ways hold one.
pub fn held_path(path: &Path) -> PathBuf {
    let real = std::fs::canonicalize(path).unwrap_or_else(|_| {
        let parent = path.parent().filter(|p| !p.as_os_str().is_empty());
        let parent = parent.unwrap_or(Path::new("."));
        let parent = std::fs::canonicalize(parent).unwrap_or_else(|_| parent.to_path_buf());
        parent.join(path.file_name().unwrap_or_default())
    });
    let name = real.file_name().unwrap_or_default().to_string_lossy();
    real.with_file_name(format!(".{name}.held"))
}

/// A lock held for writing by this process: an exclusive `flock` on
/// [`held_path`], released when dropped or when the process ends, however
/// it ends. The file is created if missing and never deleted (deleting it
/// while another waits on it would let a third hold a new one at once).
#[derive(Debug)]
pub struct Held {
    _file: std::fs::File,
}

/// Hold the lock at `path` for a read-modify-write: wait, up to `wait`,
/// while another oomgate holds it.
pub fn hold(path: &Path, wait: std::time::Duration) -> Result<Held, LockError> {
    let held = held_path(path);
    let fail = |source: std::io::Error| LockError::Write {
        path: path.to_path_buf(),
        source: std::io::Error::new(
            source.kind(),
            format!("cannot hold {}: {source}", held.display()),
        ),
    };
    let file = crate::files::open_lock_file(&held).map_err(fail)?;
    let deadline = std::time::Instant::now() + wait;
    loop {
        let Err(error) = crate::files::try_lock_exclusive(&file) else {
            return Ok(Held { _file: file });
        };
        if error.kind() != std::io::ErrorKind::WouldBlock {
            return Err(fail(error));
        }
        if std::time::Instant::now() >= deadline {
            return Err(fail(std::io::Error::new(
                std::io::ErrorKind::WouldBlock,
                format!(
                    "another oomgate has been writing this lock for over {} s",
                    wait.as_secs()
                ),
            )));
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// Write a lock atomically.
pub fn write(path: &Path, lock: &Lock) -> Result<(), LockError> {
    let fail = |source| LockError::Write {
        path: path.to_path_buf(),
        source,
    };
    let body = toml::to_string_pretty(lock).map_err(|e| fail(std::io::Error::other(e)))?;
    let text = format!(
        "# oomgate baseline for suite `{}`. Written by `oomgate lock`; commit it next to the suite.\n# Refresh it from a CI artifact with: oomgate lock SUITE.toml --from results.json\n\n{body}",
        lock.suite
    );
    // A committed file: the last guard against a secret (see crate::redact).
    let text = redact::mask_written(&text);
    crate::files::write_atomic(path, text.as_bytes()).map_err(fail)
}

/// A variable's value as a lock records it. Only variables that change
/// memory behaviour (allocator, NCCL, visible devices: see
/// `environment::is_allocator_variable`) are recorded by value; every other
/// one, and every secret-named one whatever it is, by a short keyed hash
/// (`<hash 3fa9c1>`, `<secret 3fa9c1>`), which still tells that it changed
/// and is all a committed file should hold. Recorded hashes stay as they
/// are, so recording is idempotent and an older lock's plain values
/// compare with a newer run's hashes.
pub fn locked_env_value(name: &str, value: &str) -> String {
    if redact::is_recorded_hash(value) {
        value.to_string()
    } else if redact::is_secret_name(name) {
        redact::secret_value(name, value)
    } else if crate::environment::is_allocator_variable(name) {
        redact::mask_suite(value).into_owned()
    } else {
        redact::hashed_value(name, value)
    }
}

/// Every variable of a map as a lock records it (see [`locked_env_value`]).
pub fn locked_env<'a>(
    map: impl IntoIterator<Item = (&'a String, &'a String)>,
) -> BTreeMap<String, String> {
    map.into_iter()
        .map(|(name, value)| (name.clone(), locked_env_value(name, value)))
        .collect()
}

/// The hash of a case's expanded definition, stable across runs.
pub fn definition_hash(
    command: &[String],
    server: Option<&LockedServer>,
    params: &BTreeMap<String, String>,
    env: &BTreeMap<String, String>,
) -> String {
    let mut text = String::new();
    for arg in command {
        text.push_str(arg);
        text.push('\0');
    }
    // Nothing is added without a server: the hashes of other cases stay.
    if let Some(server) = server {
        text.push('\u{2}');
        for arg in &server.command {
            text.push_str(arg);
            text.push('\0');
        }
        for (key, value) in &server.env {
            text.push_str(key);
            text.push('=');
            text.push_str(value);
            text.push('\0');
        }
    }
    text.push('\u{1}');
    for (key, value) in params
        .iter()
        .chain(std::iter::once((&String::new(), &String::new())))
        .chain(env)
    {
        text.push_str(key);
        text.push('=');
        text.push_str(value);
        text.push('\0');
    }
    format!("{:016x}", crate::suite::fnv1a(text.as_bytes()))
}

/// A case's result against its locked baseline (read leniently, as the
/// results model is).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct CaseComparison {
    /// False when the lock has no such case.
    pub locked: bool,
    pub host: FigureComparison,
    pub gpu: FigureComparison,
    /// The allocator's peak the workload's probe reported (`probe.peak_allocated`).
    pub allocated: FigureComparison,
    /// The working memory (`host_working_peak_bytes`).
    pub working: FigureComparison,
    /// GPU memory outside the allocator (`outside_allocator_peak_bytes`).
    pub outside: FigureComparison,
    /// What changed in the case's definition since locking.
    pub changes: Vec<String>,
    /// The locked run's largest allocation sites, when both it and this
    /// run left memory snapshots: what report.html draws beside the run's.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub allocation_sites: Vec<crate::snapshot::Site>,
    /// Each number its logs printed against its locked value.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub outputs: Vec<OutputComparison>,
}

/// An output metric (`metrics_from_output`) against its locked value.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OutputComparison {
    pub name: String,
    /// This run's figure; `None`: no line gave one.
    pub value: Option<f64>,
    /// The locked figure; `None`: the lock has none for it.
    #[serde(default)]
    pub baseline: Option<f64>,
    pub better: crate::suite::Better,
    pub tolerance: f64,
    /// The least (better = higher) or the most (lower) the figure may be.
    #[serde(default)]
    pub bound: Option<f64>,
    pub outcome: Outcome,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_compared: Option<NotCompared>,
}

/// An output metric against its locked value: a move the wrong way past
/// `tolerance` (a share of the locked value) is a regression, the right
/// way an improvement.
pub fn compare_output(
    now: &crate::measure::output::OutputFigure,
    locked: Option<&LockedOutput>,
) -> OutputComparison {
    use crate::suite::Better;
    let baseline = locked.map(|l| l.value);
    let slack = baseline.map(|b| b.abs() * now.tolerance);
    let bound = baseline.zip(slack).map(|(b, s)| match now.better {
        Better::Higher => b - s,
        Better::Lower => b + s,
    });
    let outcome = match (now.value, baseline.zip(slack)) {
        (_, None) => Outcome::NoBaseline,
        (None, Some(_)) => Outcome::Unknown,
        (Some(value), Some((base, slack))) => {
            // How far it moved the good way: negative is a loss.
            let gain = match now.better {
                Better::Higher => value - base,
                Better::Lower => base - value,
            };
            if gain < -slack {
                Outcome::Regressed
            } else if gain > slack {
                Outcome::Improved
            } else {
                Outcome::Within
            }
        }
    };
    OutputComparison {
        name: now.name.clone(),
        value: now.value,
        baseline,
        better: now.better,
        tolerance: now.tolerance,
        bound,
        outcome,
        not_compared: None,
    }
}

impl CaseComparison {
    /// Every compared figure: host, GPU, the probe's allocated peak, the
    /// working memory and the GPU memory outside the allocator.
    pub fn figures(&self) -> [&FigureComparison; 5] {
        [
            &self.host,
            &self.gpu,
            &self.allocated,
            &self.working,
            &self.outside,
        ]
    }

    /// The same, to change.
    pub fn figures_mut(&mut self) -> [&mut FigureComparison; 5] {
        [
            &mut self.host,
            &mut self.gpu,
            &mut self.allocated,
            &mut self.working,
            &mut self.outside,
        ]
    }

    /// Whether a figure improved beyond its tolerance: worth a re-lock.
    pub fn improved(&self) -> bool {
        self.figures()
            .iter()
            .any(|f| f.outcome == Outcome::Improved)
            || self.outputs.iter().any(|o| o.outcome == Outcome::Improved)
    }
}

/// A case as this run saw it, for comparison with its locked self.
#[derive(Debug, Clone, Copy)]
pub struct CaseNow<'a> {
    pub host: Option<u64>,
    pub host_method: HostMethod,
    /// The floor that set `host`, and every floor's peak: the figure is
    /// compared on the lock's own floor.
    pub host_source: Option<HostFloor>,
    pub host_floors: HostFloors,
    /// The working memory's peak (`None` without a whole case cgroup).
    pub working: Option<u64>,
    pub gpu: Option<u64>,
    pub gpu_method: Option<crate::measure::gpu::GpuMethod>,
    /// The GPU figure is (partly) a device delta taken while another
    /// process was on the device: it may hold that process's memory.
    pub gpu_tainted: bool,
    /// The probe's allocated peak, when the workload reports one.
    pub allocated: Option<u64>,
    /// GPU memory outside the allocator, its peak, when the probe
    /// reported the allocator's `reserved`.
    pub outside: Option<u64>,
    pub command: &'a [String],
    /// With `server`: its command and env, as the lock records them.
    pub server: Option<&'a LockedServer>,
    pub params: &'a BTreeMap<String, String>,
    pub env: &'a BTreeMap<String, String>,
    pub allocator_env: &'a BTreeMap<String, String>,
    /// The numbers its logs printed (`metrics_from_output`).
    pub outputs: &'a [crate::measure::output::OutputFigure],
}

/// Compare one case's figures and definition with the lock.
pub fn compare_case(
    locked: Option<&LockedCase>,
    now: CaseNow<'_>,
    tolerance: Tolerances,
    compare_gpu: bool,
) -> CaseComparison {
    let locked_host = locked.filter(|l| l.host_peak_bytes.is_some());
    // The gated figure against the gated figure: both are the largest of
    // the floors each run observed, and sampling luck cannot lower a
    // kernel's high-water mark, so a growth shows here or in a floor.
    let mut host = compare::compare(
        Figure::Host,
        now.host,
        locked_host.and_then(|l| l.host_peak_bytes),
        tolerance.host,
        locked_host.and_then(|l| l.host_spread_bytes),
    );
    let mut working = compare::compare(
        Figure::Working,
        now.working,
        locked.and_then(|l| l.host_working_peak_bytes),
        tolerance.working,
        locked.and_then(|l| l.host_working_spread_bytes),
    );
    let working_compared = compared(working.outcome);
    if let Some(locked_host) = locked_host.filter(|_| compared(host.outcome)) {
        host.floor_breach = floor_breach(
            &now.host_floors,
            &HostFloors::from_named(&locked_host.host_floors),
            tolerance.host,
            locked_host.host_spread_bytes,
            working_compared,
        );
        if host.floor_breach.is_some() {
            host.outcome = Outcome::Regressed;
        }
    }
    // A page-cache difference is no regression: a growth in floors that
    // count file pages only, while the working memory (read densely on
    // both sides, so a burst cannot hide from it) stayed within its own
    // bound, is what the page cache held, not the workload.
    if host.outcome == Outcome::Regressed
        && matches!(working.outcome, Outcome::Within | Outcome::Improved)
    {
        let gated_over = host
            .new_bytes
            .zip(host.limit_bytes)
            .is_some_and(|(new, limit)| new > limit);
        let gated_in_file_pages =
            !gated_over || now.host_source.is_some_and(HostFloor::counts_file_pages);
        let floor_in_file_pages = host
            .floor_breach
            .is_none_or(|breach| breach.floor.counts_file_pages());
        if let (true, true, Some(now_bytes), Some(locked_bytes)) = (
            gated_in_file_pages,
            floor_in_file_pages,
            working.new_bytes,
            working.baseline_bytes,
        ) {
            host.outcome = Outcome::Within;
            host.anon_within = Some(AnonWithin {
                now_bytes,
                locked_bytes,
            });
        }
    }
    if let Some(locked_method) = locked_host
        .map(LockedCase::host_method)
        .filter(|m| !m.comparable_with(now.host_method))
    {
        let why = NotCompared::HostMethod {
            locked: locked_method.to_string(),
            now: now.host_method.to_string(),
        };
        host = host.not_compared(why.clone());
        if working.baseline_bytes.is_some() {
            working = working.not_compared(why);
        }
    }
    let mut gpu = compare::compare(
        Figure::Gpu,
        now.gpu,
        locked.and_then(|l| l.gpu_peak_bytes),
        tolerance.gpu,
        locked.and_then(|l| l.gpu_spread_bytes),
    );
    // A neighbour's memory may be in a tainted figure: neither a
    // regression nor an improvement can be told, and (first, whatever
    // else stops the comparison) a neighbour must not fail the case even
    // under --require-baseline.
    if now.gpu_tainted && locked.is_some_and(|l| l.gpu_peak_bytes.is_some()) {
        gpu = gpu.not_compared(NotCompared::Tainted);
    } else if !compare_gpu && locked.is_some_and(|l| l.gpu_peak_bytes.is_some()) {
        gpu = gpu.not_compared(NotCompared::GpuModels);
    } else if let Some((before, after)) = locked
        .filter(|l| l.gpu_peak_bytes.is_some())
        .and_then(|l| l.gpu_peak_method.zip(now.gpu_method))
        .filter(|(before, after)| {
            use crate::measure::gpu::GpuMethod::Allocator;
            (*before == Allocator) != (*after == Allocator)
        })
    {
        gpu = gpu.not_compared(NotCompared::GpuMethod {
            locked: before.to_string(),
            now: after.to_string(),
        });
    }
    // Allocator figures are as stable as GPU figures, so GPU tolerance.
    let allocated = compare::compare(
        Figure::Allocated,
        now.allocated,
        locked.and_then(|l| l.probe_peak_allocated_bytes),
        tolerance.gpu,
        None,
    );
    // Another GPU model or method changes the context and NCCL's buffers
    // as it changes the GPU peak: compared when the GPU peak is.
    let mut outside = compare::compare(
        Figure::Outside,
        now.outside,
        locked.and_then(|l| l.outside_allocator_peak_bytes),
        tolerance.outside,
        None,
    );
    if let Some(why) = gpu
        .not_compared
        .clone()
        .filter(|_| outside.baseline_bytes.is_some())
    {
        outside = outside.not_compared(why);
    }
    let changes = locked
        .map(|l| definition_changes(l, now))
        .unwrap_or_default();
    // With no entry at all, the case's missing baseline says it.
    let outputs = match locked {
        Some(locked) => now
            .outputs
            .iter()
            .map(|output| compare_output(output, locked.outputs.get(&output.name)))
            .collect(),
        None => Vec::new(),
    };
    CaseComparison {
        locked: locked.is_some(),
        host,
        gpu,
        allocated,
        working,
        outside,
        changes,
        allocation_sites: Vec::new(),
        outputs,
    }
}

/// Whether a comparison was made (either way, or within).
fn compared(outcome: Outcome) -> bool {
    matches!(
        outcome,
        Outcome::Within | Outcome::Improved | Outcome::Regressed
    )
}

/// The floor of the host figure that grew furthest past its bound
/// against the same floor of the lock, if one did. Where the working
/// memory is compared on its own, the anonymous + shmem floors are left to
/// it: the cgroup's is the working memory, judged with its tolerance, and
/// the PSS sweep's reading of the same pages is a sum read process after
/// process, which the exact one overrules. `vmhwm` is
/// left out where `rusage-maxrss` holds it on both sides: every process
/// of a case is reaped with its high-water mark, so a live `VmHWM` read by
/// a sweep is the same mark read earlier, and its growth would be only
/// the luck of when the lock's sweep came.
fn floor_breach(
    now: &HostFloors,
    locked: &HostFloors,
    tolerance: crate::suite::Tolerance,
    spread: Option<u64>,
    working_compared: bool,
) -> Option<compare::FloorBreach> {
    // Reversed, so that of equal growths the first floor in `ALL` order
    // (the order a tie of the gated figure is broken in) is named.
    HostFloor::ALL
        .into_iter()
        .rev()
        .filter(|floor| !working_compared || floor.counts_file_pages())
        .filter(|floor| {
            let reaped = |floors: &HostFloors| {
                floors.rusage_maxrss_bytes >= floors.vmhwm_bytes
                    && floors.rusage_maxrss_bytes.is_some()
            };
            *floor != HostFloor::Vmhwm || !(reaped(now) && reaped(locked))
        })
        .filter_map(|floor| {
            let (now_bytes, locked_bytes) = (now.get(floor)?, locked.get(floor)?);
            let limit_bytes = compare::compare(
                Figure::Host,
                Some(now_bytes),
                Some(locked_bytes),
                tolerance,
                spread,
            )
            .limit_bytes?;
            (now_bytes > limit_bytes).then_some(compare::FloorBreach {
                floor,
                now_bytes,
                locked_bytes,
                limit_bytes,
            })
        })
        .max_by_key(|breach| breach.now_bytes - breach.limit_bytes)
}

/// What differs in a case's definition and in how its GPU figure was
/// obtained since it was locked: the likely causes of a moved figure.
fn definition_changes(locked: &LockedCase, now: CaseNow<'_>) -> Vec<String> {
    let mut changes = Vec::new();
    // An older lock may hold what a newer one records redacted.
    let locked_command = redact::command(&locked.command);
    if locked_command != now.command {
        changes.push(format!(
            "command: {} → {}",
            crate::suite::shell_join(&locked_command),
            crate::suite::shell_join(now.command)
        ));
    }
    let locked_server = locked
        .server
        .as_ref()
        .map(|server| redact::command(&server.command));
    let now_server = now.server.map(|server| server.command.as_slice());
    if locked_server.as_deref() != now_server {
        let show = |command: Option<&[String]>| {
            command.map_or("none".to_string(), crate::suite::shell_join)
        };
        changes.push(format!(
            "server command: {} → {}",
            show(locked_server.as_deref()),
            show(now_server)
        ));
    }
    // Maps are compared as the lock records them (hashes for most
    // variables) and shown as recorded: a hash by itself, a value quoted.
    let mut diff_maps = |label: &str,
                         before: &BTreeMap<String, String>,
                         after: &BTreeMap<String, String>,
                         recorded: fn(&str, &str) -> String| {
        for key in before
            .keys()
            .chain(after.keys())
            .collect::<std::collections::BTreeSet<_>>()
        {
            let (a, b) = (before.get(key), after.get(key));
            let same = a.map(|v| recorded(key, v)) == b.map(|v| recorded(key, v));
            if !same {
                let show = |v: Option<&String>| match v {
                    None => "unset".to_string(),
                    Some(v) if redact::is_recorded_hash(v) => v.clone(),
                    Some(v) => format!("{:?}", redact::mask_suite(v)),
                };
                let a = a.map(|v| recorded(key, v));
                changes.push(format!("{label} {key}: {} → {}", show(a.as_ref()), show(b)));
            }
        }
    };
    let as_is = |_: &str, value: &str| value.to_string();
    diff_maps("param", &locked.params, now.params, as_is);
    diff_maps("env", &locked.env, now.env, locked_env_value);
    let no_env = BTreeMap::new();
    diff_maps(
        "server env",
        locked.server.as_ref().map_or(&no_env, |s| &s.env),
        now.server.map_or(&no_env, |s| &s.env),
        locked_env_value,
    );
    // The suite's env is already listed; these come from the environment
    // the case was launched in (a workflow's PYTORCH_CUDA_ALLOC_CONF).
    let launched_only = |map: &BTreeMap<String, String>| -> BTreeMap<String, String> {
        map.iter()
            .filter(|(k, _)| !now.env.contains_key(*k) && !locked.env.contains_key(*k))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    };
    diff_maps(
        "allocator env",
        &launched_only(&locked.allocator_env),
        &launched_only(now.allocator_env),
        locked_env_value,
    );
    if let (Some(before), Some(after)) = (locked.gpu_peak_method, now.gpu_method) {
        if before != after {
            changes.push(format!("gpu figure method: {before} → {after}"));
        }
    }
    changes
}

#[cfg(test)]
mod tests;

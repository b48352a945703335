//! A check: one verdict on one figure, as data.
//!
//! The judge (`crate::judge`) makes every [`Check`]: what was checked
//! ([`CheckKind`]), how the figure stood against its bound
//! ([`CheckOutcome`]), the figure, the limit, the baseline and the tolerance
//! that applied, and the few facts a sentence about it needs ([`Facts`]).
//! It writes no English: `report::words` renders `message` from these
//! fields, once, and every report reads that message, so a report can word
//! a check its own way (the terminal's `88 → 72`) from the same data.
//! Results written before checks were data have only the message: they
//! still read, with `outcome` and `facts` absent; those of schema 4, whose
//! facts held some of the judge's words, read with those words
//! ([`OrWritten::Written`]), shown as they were.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

pub use crate::baseline::{AppliedTolerance, CaseTolerances, Figure, NotCompared};
use crate::capacity;
use crate::measure::gpu::{ForeignPid, GpuMethod};
use crate::measure::host::{HostFloor, HostMethod};
use crate::suite::BudgetKind;
use crate::vocabulary::OrWritten;

/// One verdict on one figure.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Check {
    /// What was checked; written as its name (`budget.host`).
    #[serde(rename = "name")]
    pub kind: CheckKind,
    /// The gate's answer: a check that did not pass fails the case.
    pub passed: bool,
    /// How the figure stood against its bound; `None` in results written
    /// before checks recorded it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<CheckOutcome>,
    pub figure_bytes: Option<u64>,
    pub limit_bytes: Option<u64>,
    /// The locked figure it was compared with (baseline checks).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub baseline_bytes: Option<u64>,
    /// The tolerance the comparison applied (baseline checks).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tolerance: Option<AppliedTolerance>,
    /// What else the sentence about it needs (how the figure was measured,
    /// what was left out, a capacity's values).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub facts: Option<Facts>,
    /// The verdict in words, with the figures (`report::words`).
    #[serde(default)]
    pub message: String,
}

impl Check {
    /// A check with its kind, answer and outcome; the rest to fill in.
    pub fn new(kind: CheckKind, passed: bool, outcome: CheckOutcome) -> Self {
        Check {
            kind,
            passed,
            outcome: Some(outcome),
            figure_bytes: None,
            limit_bytes: None,
            baseline_bytes: None,
            tolerance: None,
            facts: None,
            message: String::new(),
        }
    }

    /// `budget.host`, `baseline.gpu`, `limit.metric.tokens_per_s`: the
    /// name results.json and JUnit properties use.
    pub fn name(&self) -> String {
        self.kind.to_string()
    }

    pub fn figure(mut self, bytes: Option<u64>) -> Self {
        self.figure_bytes = bytes;
        self
    }

    pub fn limit(mut self, bytes: Option<u64>) -> Self {
        self.limit_bytes = bytes;
        self
    }

    pub fn facts(mut self, facts: Facts) -> Self {
        self.facts = Some(facts);
        self
    }

    /// The relative change of the figure from its baseline (`None`: no
    /// figure, no baseline, or a baseline of zero).
    pub fn delta_ratio(&self) -> Option<f64> {
        let (new, base) = (self.figure_bytes?, self.baseline_bytes?);
        (base > 0).then(|| (new as f64 - base as f64) / base as f64)
    }
}

/// How a figure stood against its bound: a budget, a limit, a baseline
/// with its tolerance, a locked capacity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CheckOutcome {
    /// Within the bound.
    Within,
    /// Beyond it on the wrong side: over a budget or limit, a regression,
    /// a capacity below what its tolerance accepts, an OOM kill, drift
    /// that fails.
    Breached,
    /// Beyond it on the right side: smaller than the baseline by more
    /// than the tolerance, or a larger capacity.
    Improved,
    /// The figure was not observed: the bound cannot be verified.
    Unknown,
    /// Observed, but not judged: another process's memory may be in it,
    /// or it is of another workload size (`facts` says why).
    NotGated,
    /// Not comparable with its baseline (another method, another GPU
    /// model, another search).
    NotCompared,
    /// Nothing to compare with.
    NoBaseline,
}

impl CheckOutcome {
    pub fn as_str(self) -> &'static str {
        match self {
            CheckOutcome::Within => "within",
            CheckOutcome::Breached => "breached",
            CheckOutcome::Improved => "improved",
            CheckOutcome::Unknown => "unknown",
            CheckOutcome::NotGated => "not-gated",
            CheckOutcome::NotCompared => "not-compared",
            CheckOutcome::NoBaseline => "no-baseline",
        }
    }
}

/// What a check's sentence needs beyond its figures, by kind.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Facts {
    /// `budget.<key>`: a figure of the case against its budget.
    Budget {
        /// How the figure was measured (schema 4: in words, `vmhwm,
        /// cgroup-v1`).
        method: OrWritten<Measured>,
        /// Devices whose figures were left out of the judged one: device
        /// deltas taken beside processes not of the case (schema 4: in
        /// words, `GPU 0 tainted by pid 4242 (sleep)`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        left_out: Option<OrWritten<Vec<TaintedDevice>>>,
        /// The whole figure, left-out devices included, when only the
        /// rest was judged (or nothing was).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        whole_bytes: Option<u64>,
    },
    /// `budget.gpu_fraction.gpu<N>`.
    Headroom {
        /// The device (schema 4: in words, `GPU 0 (H100)`).
        device: OrWritten<Device>,
        method: GpuMethod,
        /// Why the figure is not judged: the processes not of the case
        /// that were on the device (schema 4: in words, `tainted by pid
        /// 4242 (sleep)`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        taint: Option<OrWritten<Vec<ForeignPid>>>,
        total_bytes: u64,
        /// What the driver reserves of it; the limit is a share of the
        /// rest. `None`: not reported (results before it was recorded).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reserved_bytes: Option<u64>,
        fraction: f64,
    },
    /// `host.oom_kill`: the kills, counted by the case's memory cgroup of
    /// this method.
    OomKill { kills: u64, method: HostMethod },
    /// `limit.<key>`.
    Limit {
        /// As written: `<= 40 GiB`.
        text: String,
        /// The workload's figure; `None`: never reported.
        value: Option<f64>,
        /// The figure is a size (`probe.peak_*`), shown as one.
        bytes: bool,
    },
    /// `leak`.
    Leak {
        /// Schema 4 only: what the figure was, in words (`allocated
        /// memory`, `the peak`); later results tell it by
        /// `figures.source`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        what: Option<String>,
        /// The fitted trend; `None`: too few iterations to tell.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        figures: Option<crate::leak::LeakFigures>,
        warmup: u32,
    },
    /// `baseline.<figure>`.
    Baseline {
        /// Why it was not compared, or not gated.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        not_compared: Option<NotCompared>,
        /// `--require-baseline` made a missing comparison fail.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        required: bool,
        /// The locked spread and whether its bound applied.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        spread: Option<crate::baseline::SpreadBound>,
        /// A floor of the host figure past its bound against the same
        /// floor of the lock: both its figures.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        floor_breach: Option<crate::baseline::FloorBreach>,
        /// Past the bound in floors that count file pages, within on the
        /// working memory: not a regression.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        anon_within: Option<crate::baseline::AnonWithin>,
    },
    /// `baseline.output.<name>`: a number the logs printed against its
    /// locked value.
    Output {
        /// The figure; `None`: no line gave one.
        value: Option<f64>,
        /// Lines its regex matched.
        matches: u64,
        /// Where the figure was printed (`cases/serve/server.stderr.log:812`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        at: Option<String>,
        /// The locked value; `None`: none locked.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        locked: Option<f64>,
        /// The least (`better = "higher"`) or most (`"lower"`) accepted.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        bound: Option<f64>,
        better: crate::suite::Better,
        tolerance: f64,
        /// Why it was not gated (another workload size).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        not_compared: Option<NotCompared>,
        /// `--require-baseline` made a missing comparison fail.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        required: bool,
    },
    /// `baseline`: the case has no baseline.
    Missing {
        /// The lock read; `None`: there was no lock file.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        lock: Option<PathBuf>,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        required: bool,
        /// The testbed the lock has no entry for (it may have others').
        #[serde(default, skip_serializing_if = "Option::is_none")]
        testbed: Option<String>,
    },
    /// `baseline.capacity`: what a search found against the lock.
    Capacity {
        param: String,
        /// The largest value that passed; `None`: not even `min`.
        value: Option<u64>,
        /// The search ran to its end.
        complete: bool,
        probes: usize,
        /// The locked capacity (capped by a lowered `max`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        locked: Option<u64>,
        /// The smallest capacity that is no regression.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        least_accepted: Option<u64>,
        #[serde(default)]
        tolerance: capacity::Tolerance,
        /// What the lock's capacity counts, when it is not what this
        /// search counts (`batch step 8` against `batch step 16`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        lock_counts: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        counts: Option<String>,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        required: bool,
    },
    /// `environment.drift`: what changed since the baseline, each as
    /// data (schema 5 and older: in words, `torch 2.3.1 → 2.4.0`).
    Drift {
        changes: Vec<OrWritten<crate::baseline::Drift>>,
    },
    /// `creep.<figure>`: the figure against its ratchet in the history.
    Creep {
        /// The most growth allowed over the ratchet (0.1: 10%).
        limit: f64,
        /// The growth over the ratchet.
        growth: f64,
        /// `warn`: past the limit, the case passes all the same.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        warn_only: bool,
        /// What set the ratchet: the first run of the lowest level, or
        /// an acceptance.
        since: HistoryMark,
        /// Steps up since the ratchet's runs.
        steps: u32,
        /// The branch whose runs these are.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        branch: Option<String>,
        window_days: u32,
    },
    /// `step.<figure>`: this run left the level of the runs before it by
    /// more than their noise (a notice: a creep limit fails, not a step).
    Step {
        /// The level of the runs before it.
        level_bytes: u64,
        /// How many runs that level is of.
        runs: u32,
        /// The smallest change that is a step in this series.
        noise_bytes: u64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        branch: Option<String>,
    },
}

/// A point of the history a check names: a run (when it started, its
/// commit) or an acceptance (when, by whom, why).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum HistoryMark {
    Run {
        run_id: String,
        started_at: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        commit: Option<String>,
    },
    Accepted {
        accepted_at: String,
        by: String,
        reason: String,
    },
}

/// How a budget's figure was measured: what its sentence names beside it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Measured {
    /// The gated host peak: the floor that set it (`None`: none told)
    /// and the host method.
    Host {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        floor: Option<HostFloor>,
        method: HostMethod,
    },
    /// The case's GPU peak over its devices, by this method; `None`: GPU
    /// memory was not measured.
    Gpu {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        method: Option<GpuMethod>,
    },
    /// The rank with the largest GPU peak, and the devices it was on;
    /// `None`: no process of the case had a rank.
    Rank {
        rank: Option<u32>,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        devices: Vec<u32>,
    },
    /// What the case's devices held above their idle level once its
    /// processes were gone.
    AfterCase,
    /// NVML's per-process figures less the allocator's `reserved` the
    /// probe reported, at this many moments.
    OutsideAllocator { moments: u64 },
}

/// A device whose figure was left out of a judged one: a device delta
/// taken while these processes, not of the case, were on it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaintedDevice {
    pub index: u32,
    pub by: Vec<ForeignPid>,
}

/// A GPU as a check names it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Device {
    pub index: u32,
    /// NVML's name: `NVIDIA H100 80GB HBM3`.
    pub name: String,
}

/// What a [`Check`] judges. Reports look checks up by kind, never by name;
/// the name is only what files show.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CheckKind {
    /// `budget.<key>`: a figure of the case against its budget of that
    /// kind (`budget.host`: the host peak; `budget.gpu`: the GPU peak over
    /// all devices; `budget.gpu_left`: what its devices did not give back;
    /// `budget.gpu_rank`: the largest rank's GPU memory). A headroom budget
    /// is checked per device instead ([`CheckKind::GpuHeadroom`]).
    Budget(BudgetKind),
    /// `budget.gpu_fraction.gpu<N>`: one device's peak against its share.
    GpuHeadroom { device: u32 },
    /// `host.oom_kill`: the kernel's OOM killer killed a process of the case.
    HostOomKill,
    /// `limit.<key>`: a `limits` entry on a probe figure or metric.
    Limit(String),
    /// `leak`: growth between iterations after warm-up.
    Leak,
    /// `baseline`: the case has no baseline (with `--require-baseline`, or
    /// as a notice).
    BaselineMissing,
    /// `baseline.<figure>`: a figure (`host`, `gpu`, `allocated`) against
    /// its baseline.
    Baseline(Figure),
    /// `baseline.output.<name>`: a number the logs printed
    /// (`metrics_from_output`) against its locked value.
    Output(String),
    /// `baseline.capacity`: what a search found against the locked
    /// capacity.
    Capacity,
    /// `environment.drift`: the environment drifted, with `on_drift = "fail"`.
    EnvironmentDrift,
    /// `client.<check>`: a server case's load client, judged on its own:
    /// `client.budget.host` (its `client_budget`), `client.host.oom_kill`.
    Client(Box<CheckKind>),
    /// `creep.<figure>`: a figure against its ratchet in the run history
    /// (its `creep` limit).
    Creep(Figure),
    /// `step.<figure>`: a figure that stepped away from its recent level
    /// in the run history; a notice, never a failure.
    Step(Figure),
}

#[allow(non_upper_case_globals)]
impl CheckKind {
    /// `budget.host`, by the name lookups and patterns use.
    pub const HostBudget: CheckKind = CheckKind::Budget(BudgetKind::Host);
    /// `budget.gpu`.
    pub const GpuBudget: CheckKind = CheckKind::Budget(BudgetKind::Gpu);
    /// `budget.gpu_left`.
    pub const GpuLeft: CheckKind = CheckKind::Budget(BudgetKind::GpuLeft);
    /// `budget.gpu_rank`.
    pub const GpuRank: CheckKind = CheckKind::Budget(BudgetKind::GpuRank);

    /// The budget it judges, headroom's per-device checks included.
    pub fn budget(&self) -> Option<BudgetKind> {
        match self {
            CheckKind::Budget(kind) => Some(*kind),
            CheckKind::GpuHeadroom { .. } => Some(BudgetKind::GpuFraction),
            CheckKind::HostOomKill
            | CheckKind::Limit(_)
            | CheckKind::Leak
            | CheckKind::BaselineMissing
            | CheckKind::Baseline(_)
            | CheckKind::Output(_)
            | CheckKind::Capacity
            | CheckKind::EnvironmentDrift
            | CheckKind::Client(_)
            | CheckKind::Creep(_)
            | CheckKind::Step(_) => None,
        }
    }

    /// A check `oomgate merge --suite` makes again from a part's figures
    /// when the suite's limits changed: a budget measured once for the
    /// whole run ([`BudgetKind::judged_again`]) or a probe limit.
    pub fn judged_again(&self) -> bool {
        match self {
            CheckKind::Limit(_) => true,
            kind => kind.budget().is_some_and(BudgetKind::judged_again),
        }
    }

    /// A comparison with the baseline (present or missing).
    pub fn is_baseline(&self) -> bool {
        matches!(
            self,
            CheckKind::Baseline(_)
                | CheckKind::Output(_)
                | CheckKind::BaselineMissing
                | CheckKind::Capacity
        )
    }

    /// A check of the judgement after the run (baseline, drift), rather
    /// than a limit the run itself had to hold.
    pub fn is_judgement(&self) -> bool {
        self.is_baseline() || self.is_history() || *self == CheckKind::EnvironmentDrift
    }

    /// A check against the run history (creep, a step).
    pub fn is_history(&self) -> bool {
        matches!(self, CheckKind::Creep(_) | CheckKind::Step(_))
    }
}

impl std::fmt::Display for CheckKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CheckKind::Budget(kind) => f.write_str(kind.name()),
            CheckKind::GpuHeadroom { device } => {
                write!(f, "{}.gpu{device}", BudgetKind::GpuFraction.name())
            }
            CheckKind::HostOomKill => f.write_str("host.oom_kill"),
            CheckKind::Limit(key) => write!(f, "limit.{key}"),
            CheckKind::Leak => f.write_str("leak"),
            CheckKind::BaselineMissing => f.write_str("baseline"),
            CheckKind::Baseline(figure) => write!(f, "baseline.{}", figure.as_str()),
            CheckKind::Output(name) => write!(f, "baseline.output.{name}"),
            CheckKind::Capacity => f.write_str("baseline.capacity"),
            CheckKind::EnvironmentDrift => f.write_str("environment.drift"),
            CheckKind::Client(check) => write!(f, "client.{check}"),
            CheckKind::Creep(figure) => write!(f, "creep.{}", figure.as_str()),
            CheckKind::Step(figure) => write!(f, "step.{}", figure.as_str()),
        }
    }
}

impl Serialize for CheckKind {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

/// A check's name that is not one oomgate writes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{0}` is not a check oomgate writes")]
pub struct UnknownCheck(String);

impl std::str::FromStr for CheckKind {
    type Err = UnknownCheck;

    /// A check's name as results.json writes it, back into its kind.
    fn from_str(name: &str) -> Result<Self, UnknownCheck> {
        let unknown = || UnknownCheck(name.to_string());
        let headroom = format!("{}.gpu", BudgetKind::GpuFraction.name());
        Ok(match name {
            "host.oom_kill" => CheckKind::HostOomKill,
            "leak" => CheckKind::Leak,
            "baseline" => CheckKind::BaselineMissing,
            "baseline.capacity" => CheckKind::Capacity,
            "environment.drift" => CheckKind::EnvironmentDrift,
            _ => {
                if let Some(device) = name.strip_prefix(headroom.as_str()) {
                    CheckKind::GpuHeadroom {
                        device: device.parse().map_err(|_| unknown())?,
                    }
                } else if let Some(key) = name.strip_prefix("budget.") {
                    CheckKind::Budget(BudgetKind::from_key(key).ok_or_else(unknown)?)
                } else if let Some(check) = name.strip_prefix("client.") {
                    CheckKind::Client(Box::new(check.parse().map_err(|_| unknown())?))
                } else if let Some(key) = name.strip_prefix("limit.").filter(|k| !k.is_empty()) {
                    CheckKind::Limit(key.to_string())
                } else if let Some(output) = name
                    .strip_prefix("baseline.output.")
                    .filter(|n| !n.is_empty())
                {
                    CheckKind::Output(output.to_string())
                } else if let Some(figure) = name.strip_prefix("baseline.") {
                    CheckKind::Baseline(figure.parse().map_err(|_| unknown())?)
                } else if let Some(figure) = name.strip_prefix("creep.") {
                    CheckKind::Creep(figure.parse().map_err(|_| unknown())?)
                } else if let Some(figure) = name.strip_prefix("step.") {
                    CheckKind::Step(figure.parse().map_err(|_| unknown())?)
                } else {
                    return Err(unknown());
                }
            }
        })
    }
}

impl<'de> Deserialize<'de> for CheckKind {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let name = String::deserialize(deserializer)?;
        name.parse().map_err(serde::de::Error::custom)
    }
}

//! The results model: what a run measured and decided, as every report
//! format and `results.json` see it.
//!
//! One model feeds all outputs (JSON, JUnit, terminal), so a figure cannot
//! differ between them. Figures are bytes in `u64`, named by what they
//! measure; `None` means "not measured" or "unknown", never zero. Each
//! decision about a case is a [`Check`] (budgets, GPU headroom, baseline
//! comparisons, probe limits, drift), so new kinds of verdict add entries
//! rather than fields. The schema is versioned; fields are only ever added.
//!
//! The model reads back as well as it is written (serde both ways): `oomgate
//! merge` reads the results.json of each shard of a suite into it and
//! renders one set of reports with the same renderers, so a merged report
//! cannot drift from a run's. What results.json leaves out (the log tails,
//! the probe's per-step series) is read from the shard's other files by
//! the merge.

use std::collections::BTreeMap;
use std::path::PathBuf;

use indexmap::IndexMap;
use serde::{Deserialize, Serialize};

use crate::baseline::{CaseComparison, Drift};
use crate::diagnose::Diagnosis;
use crate::environment::Environment;
use crate::measure::cgroup::CgroupVersion;
use crate::measure::gpu::{DeviceFigures, ForeignProcess, GpuMethod};
use crate::measure::host::HostMethod;
use crate::measure::nvml::GpuRef;
use crate::probe::ProbeSummary;
use crate::suite::DriftPolicy;
use crate::units::Bytes;

pub mod assemble;
pub mod bisect;
mod check;
pub mod definition;
mod host;
pub mod merge;
mod parity;
pub mod readback;
pub mod run_id;
pub mod trend;

pub use check::{
    AppliedTolerance, CaseTolerances, Check, CheckKind, CheckOutcome, Device, Facts, HistoryMark,
    Measured, NotCompared, TaintedDevice,
};

pub use host::HostResult;
pub use parity::{ParityOutcome, ParityResult};

pub use crate::vocabulary::{
    CaseStatus, Exit, FailureType, IN_FLIGHT_MESSAGE, OrWritten, SCHEMA_VERSION,
};

/// Read back leniently (`#[serde(default)]`): a field a results.json of
/// an older schema lacks takes its empty value, so every schema this
/// oomgate reads loads into this one model (tested on files that older
/// oomgates wrote, `fixtures/results/`).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct RunResults {
    pub schema: u32,
    /// This run's id: a random UUID made when it started (a merge's is
    /// derived from its parts' ids, the same for the same parts). The
    /// history records a run once by it. Absent from results written
    /// before it was kept; the history then uses a hash of the file.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
    /// The run's commit, branch and CI run, as the history records them;
    /// absent from results written before they were kept.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub origin: Option<RunOrigin>,
    pub oomgate_version: String,
    pub suite: SuiteInfo,
    pub host: String,
    /// RFC 3339.
    pub started_at: String,
    /// Set when the run ended (normally or interrupted); `None` while cases
    /// are still running, e.g. in a file left by a crash.
    pub finished_at: Option<String>,
    pub interrupted: bool,
    pub measurement: Measurement,
    /// The driver and every GPU NVML reported; `None` when GPU memory was
    /// not measured.
    pub gpu: Option<GpuEnvironment>,
    /// The software environment, captured once before the first case.
    pub environment: Environment,
    /// The baseline this run was compared with, if any.
    pub baseline: Option<BaselineInfo>,
    /// Finished cases only: a case in flight (below) is not counted.
    pub summary: Summary,
    /// Every finished case, in the order run. In a checkpoint written
    /// while a case runs (results.json is written during the run, see
    /// `report::outputs`), that case comes last with status `running`: read
    /// after oomgate was killed, it is the case oomgate did not finish.
    /// The results of a run that ended, normally or interrupted, never hold
    /// one.
    pub cases: Vec<CaseResult>,
    /// The shard of the suite this run was (`--partition`), if any.
    pub partition: Option<crate::suite::Partition>,
    /// How cases were scheduled when several could run at once (`--gpus`,
    /// `--jobs`, `--pack`); absent for a run of one case at a time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduling: Option<Scheduling>,
    /// Cases planned but not run (after an interruption, or a fault).
    pub not_run: Vec<String>,
    /// In a checkpoint only: the id of every case the run planned, in
    /// the suite's order, so that a file left by a killed oomgate says
    /// which cases it never reached (`oomgate merge` lists them as not
    /// run). Absent from the results of a run that ended, whose `cases`
    /// and `not_run` hold every planned case.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub planned_cases: Vec<String>,
    /// The id of every test the suite's `[[pytest]]` tables collected, in
    /// order, whatever this run's filter or shard: `oomgate merge --suite`
    /// and `lock --from` know a suite's pytest cases from it without
    /// collecting them again (no test environment needed there).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pytest_cases: Vec<String>,
    /// A file oomgate could not write (a report, a case's folder, log or
    /// timeline, a full file system under the logs): no case was launched
    /// after it, and oomgate exits 3. `None` when every write succeeded.
    pub fault: Option<String>,
    /// oomgate's own peak RSS (excluding workloads), to keep it honest.
    pub runner_max_rss_bytes: Option<u64>,
    /// oomgate's own CPU time so far (user + system), workloads excluded.
    pub runner_cpu_s: Option<f64>,
    /// `[[parity]]`: each rule of one case's figure against another's,
    /// judged once the cases are in (a merge judges them again).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub parity: Vec<ParityResult>,
    /// Set by `oomgate merge`: how many parts (shards' results) these
    /// results were merged from. Absent in the results of a run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub merged_from: Option<usize>,
    /// Set by `oomgate merge`: each part as it ran, in the order merged.
    /// The fields above that describe one machine (`host`, `measurement`,
    /// `gpu`, `environment`) are the first part's.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub parts: Vec<PartInfo>,
}

/// Why a case of `not_run` was not run, for the reports to say.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotRunReason<'a> {
    /// A file could not be written, and no case was launched after it.
    Fault(&'a str),
    /// oomgate was interrupted before the case started.
    Interrupted,
    /// A merged run whose parts did not hold the case (a shard that failed
    /// before writing its results, or one left out of the merge).
    NoPart,
    /// A merged run's part whose oomgate stopped before the run ended
    /// (killed: its results.json is a checkpoint), with the case planned
    /// and not finished.
    Unfinished,
}

impl RunResults {
    /// Why `id`, one of `not_run`, was not run: in a merged run, as the
    /// part that planned it says, or because no part had it.
    pub fn not_run_reason(&self, id: &str) -> NotRunReason<'_> {
        let (fault, interrupted) = if self.parts.is_empty() {
            (self.fault.as_deref(), self.interrupted)
        } else {
            match self
                .parts
                .iter()
                .find(|p| p.not_run.iter().any(|n| n == id))
            {
                Some(part)
                    if part.fault.is_none() && !part.interrupted && part.finished_at.is_none() =>
                {
                    return NotRunReason::Unfinished;
                }
                Some(part) => (part.fault.as_deref(), part.interrupted),
                None => return NotRunReason::NoPart,
            }
        };
        match (fault, interrupted) {
            (Some(fault), _) => NotRunReason::Fault(fault),
            _ => NotRunReason::Interrupted,
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BaselineInfo {
    pub path: PathBuf,
    pub locked_at: String,
    /// Every difference between the locked environment and this run's.
    pub drift: Vec<Drift>,
    pub on_drift: DriftPolicy,
    /// For the lock's entries of before testbeds (its top-level `cases`):
    /// false when the GPU models differ, and GPU figures were not compared.
    /// A testbed's entries are compared on that testbed only.
    pub gpu_compared: bool,
    /// `--baseline-testbed`: every case compared with this testbed's
    /// entries, whatever it ran on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub testbed: Option<String>,
    /// Cases in the lock that the suite no longer has.
    pub removed: Vec<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct GpuEnvironment {
    pub driver_version: String,
    pub cuda_driver_version: Option<String>,
    /// How the driver hands out process lists (`detail-list`, `v3`, or
    /// `v3-wide`: an early R535 driver's 32-byte entries); `None` in
    /// results from before it was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub process_listing: Option<crate::measure::nvml::Listing>,
    pub devices: Vec<GpuInfo>,
}

/// One GPU as NVML described it when the run started.
pub use crate::measure::nvml::GpuInfo;

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct SuiteInfo {
    pub name: String,
    pub path: PathBuf,
    pub workdir: PathBuf,
}

/// Where a run came from (see `history::origin`): each `None` where
/// neither the command line, the CI's variables nor git said.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct RunOrigin {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub commit: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub branch: Option<String>,
    /// For a pull (merge) request: the branch it would merge into.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub base_branch: Option<String>,
    /// `github`, `gitlab`, `buildkite` or `jenkins`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ci_system: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ci_run_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ci_run_url: Option<String>,
}

/// How figures were obtained in this run.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Measurement {
    pub sample_interval_ms: u64,
    /// `cgroup-v1` / `cgroup-v2`: a memory cgroup per case, with PSS,
    /// VmHWM and reaped rusage; `procfs-pss`: the same without the cgroup
    /// (see `host_note`). A case says its own in `host_method`.
    pub host_method: HostMethod,
    /// Why host memory is not measured with a cgroup, when it is not.
    pub host_note: Option<String>,
    /// oomgate's own memory cgroup, under which each case gets its own.
    pub host_cgroup: Option<HostCgroup>,
    /// `None`: GPU memory was not measured, and `gpu_note` says why.
    pub gpu_method: Option<String>,
    pub gpu_note: Option<String>,
}

/// Where the per-case memory cgroups are made.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct HostCgroup {
    pub version: CgroupVersion,
    pub dir: PathBuf,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Summary {
    pub planned: usize,
    pub passed: usize,
    /// pytest tests pytest skipped or expected to fail.
    #[serde(default)]
    pub skipped: usize,
    pub failed: usize,
    pub timed_out: usize,
    pub interrupted: usize,
    pub error: usize,
    /// Of the passed: cases that failed while sharing a GPU (`--pack`)
    /// and passed retried alone.
    #[serde(default)]
    pub flaky: usize,
}

impl Summary {
    /// Count a finished case: its status, and whether it passed flaky.
    pub fn add(&mut self, case: &CaseResult) {
        self.count(case.status);
        if case.flaky() {
            self.flaky += 1;
        }
    }

    pub fn count(&mut self, status: CaseStatus) {
        match status {
            CaseStatus::Passed => self.passed += 1,
            CaseStatus::Skipped => self.skipped += 1,
            CaseStatus::Failed => self.failed += 1,
            CaseStatus::TimedOut => self.timed_out += 1,
            CaseStatus::Interrupted => self.interrupted += 1,
            CaseStatus::Error => self.error += 1,
            // Not finished: counted once it is.
            CaseStatus::Running => {}
        }
    }

    /// Cases that did not pass.
    pub fn not_passed(&self) -> usize {
        self.failed + self.timed_out + self.interrupted + self.error
    }
}

/// Read back leniently, as [`RunResults`] is.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default)]
pub struct CaseResult {
    pub id: String,
    pub params: IndexMap<String, String>,
    pub command: Vec<String>,
    pub cwd: PathBuf,
    pub concurrency: u32,
    pub timeout_s: f64,
    pub soak_s: Option<f64>,
    pub status: CaseStatus,
    /// What kind of failure, one stable word (`gpu-oom`, `budget`,
    /// `regression`, ...; see `judge::failure_kind` for all and their
    /// precedence); `None` for a case that passed.
    pub failure_kind: Option<FailureType>,
    /// Why the case did not pass, in one line a person can act on.
    pub message: Option<String>,
    pub started_at: String,
    pub wall_time_s: f64,
    /// The host figures (`host_peak_bytes`, `host_method`, ... in the
    /// JSON, flattened here).
    #[serde(flatten)]
    pub host: HostResult,
    /// Peak GPU memory of the case over all the devices it sees; `None`
    /// when not measured or unknown, never zero for unknown.
    pub gpu_peak_bytes: Option<u64>,
    /// How `gpu_peak_bytes` was obtained: `sampled@50ms`,
    /// `driver-accounting`, `device-delta`, or `mixed` (see `gpu_devices`).
    pub gpu_peak_method: Option<GpuMethod>,
    /// The allocator's peak the workload's probe reported
    /// (`peak_reserved`), when it was above the measured GPU figure:
    /// samples missed a spike, and `gpu_peak_bytes` was raised to it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_allocator_floor_bytes: Option<u64>,
    /// GPU memory its processes held outside the framework's allocator
    /// (the CUDA context, NCCL, CUDA graphs, cuBLAS workspaces): NVML's
    /// per-process figure less the probe's `reserved` at the same moment,
    /// its largest. `null` until the probe reported a `reserved`.
    #[serde(default)]
    pub outside_allocator_peak_bytes: Option<u64>,
    /// The same at the moment NVML's figure was largest.
    #[serde(default)]
    pub outside_allocator_bytes: Option<u64>,
    /// What the allocator held and did not use at that moment: `reserved`
    /// less `allocated`.
    #[serde(default)]
    pub gpu_fragmentation_bytes: Option<u64>,
    /// Those figures per process and per rank, with NVML's figure and the
    /// allocator's at that moment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outside_allocator: Option<crate::measure::outside::OutsideFigures>,
    /// Per device: before, device peak, the case's peak and its method.
    pub gpu_devices: Vec<DeviceFigures>,
    /// `CUDA_VISIBLE_DEVICES` as the case saw it (`None`: unset, all GPUs).
    pub cuda_visible_devices: Option<String>,
    /// Compute processes oomgate did not start, found on the case's GPUs
    /// just before it started.
    pub foreign_processes: Vec<ForeignProcess>,
    /// How long the case waited for its GPUs to settle back to their idle
    /// level before it started, and how they were then; `None` when it did
    /// not wait (no GPU, `settle_timeout = "0s"`, GPUs other cases share).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub settle: Option<crate::measure::gpu::settle::Settle>,
    /// After the case, once its processes were gone: the GPU memory its
    /// devices had not given back (above their idle level, other tenants'
    /// left out), after waiting up to its `settle_timeout`; `None`: not
    /// looked at (no GPU, GPUs other cases share).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_left_bytes: Option<u64>,
    /// Under a GPU pool: the whole GPUs the case asked for (`gpus`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpus: Option<u32>,
    /// With `--pack`: the other cases that ran on the case's GPUs while it
    /// ran, by GPU.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gpu_sharing: Vec<SharedGpu>,
    /// The case failed while sharing its GPU and was run again alone; its
    /// figures and status are the retry's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retried_alone: Option<RetriedAlone>,
    /// With `search`: the largest value of its parameter that passed, and
    /// every probe. The case's figures are those of that value's probe.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity: Option<crate::capacity::Capacity>,
    /// With `server`: how the server ran. The case's own figures above
    /// are the server's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<ServerResult>,
    /// With `server`: its load client's figures (the command's
    /// instances), measured apart from the server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client: Option<ClientResult>,
    /// The allocation sites of the torch memory snapshots the case left in
    /// its folder (docs/diagnosis.md#allocation-sites); `None`: it left none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allocation_sites: Option<crate::snapshot::AllocationSites>,
    /// With a GPU regression against a baseline with sites: the sites
    /// that grew most, and allocator settings that changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub site_growth: Option<crate::snapshot::SiteGrowth>,
    /// Each rank of a distributed case (a process with `RANK`, ...): its
    /// own host and GPU peaks and the GPUs it used; empty without ranks.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ranks: Vec<crate::measure::ranks::RankFigures>,
    /// With a GPU regression against a baseline that has ranks: the rank
    /// whose GPU peak grew most.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rank_growth: Option<crate::measure::ranks::RankChange>,
    /// Its figure over its recent runs in the run history, when the run
    /// had one (`results::trend`): what report.html draws.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trend: Option<trend::Trend>,
    /// The GPU model and count the case ran on (`NVIDIA H100 80GB HBM3 ×1`),
    /// whose baseline it is compared with; `None`: it ran on no GPU.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub testbed: Option<String>,
    /// A test of a `[[pytest]]`: its file, line, and JUnit names as
    /// pytest writes them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pytest: Option<crate::suite::PytestTest>,
    /// The case's own environment (`[defaults].env` and its `env`).
    pub env: IndexMap<String, String>,
    /// Allocator- and device-related variables as the case was launched
    /// (`PYTORCH_CUDA_ALLOC_CONF`, `CUDA_VISIBLE_DEVICES`, `NCCL_*`, ...).
    pub allocator_env: BTreeMap<String, String>,
    /// The tolerances the case is judged with against its baseline (its
    /// `tolerance`, its search's `capacity_tolerance`), so that `oomgate
    /// diff` of these results judges as the run did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tolerance: Option<CaseTolerances>,
    /// The case's definition as it ran, one short hash per part of it
    /// (`command`, `env`, `budget.host`, `tolerance`, ...; see
    /// `results::definition`): what `oomgate merge --suite` holds
    /// against the suite's own definition of the case.
    #[serde(default, skip_serializing_if = "definition::Definition::is_empty")]
    pub definition: definition::Definition,
    /// The comparison with the baseline, when there is one.
    pub baseline: Option<CaseComparison>,
    /// For a case that failed on its own: the kind, the figures of its
    /// error message, the exception, and first hypotheses.
    pub diagnosis: Option<Diagnosis>,
    /// What the workload reported through `$OOMGATE_METRICS`, if anything.
    pub probe: Option<ProbeSummary>,
    /// The numbers its logs printed (`metrics_from_output`), each with
    /// where it was read.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub outputs: Vec<crate::measure::output::OutputFigure>,
    /// With `leak`: the fitted trend (slope, growth, intercept) the leak
    /// check judged; `None` without one or with too few iterations.
    pub leak: Option<crate::leak::LeakFigures>,
    /// With `repeat > 1`: each run's figures; the case's figures are their
    /// maximum.
    pub repeats: Vec<RepeatFigures>,
    pub checks: Vec<Check>,
    pub instances: Vec<InstanceResult>,
    pub samples: u64,
    /// Ticks where a sampler failed (figures of that tick unknown).
    pub sample_errors: u64,
    /// Processes still running after every instance exited, stopped by
    /// oomgate.
    pub leftover_processes: usize,
    /// Relative to the out dir.
    pub dir: PathBuf,
    pub timeline: PathBuf,
    /// End of stdout/stderr of the instance that matters most (the first to
    /// fail, else instance 0). Not in results.json: the logs have it all.
    #[serde(skip)]
    pub stdout_tail: String,
    #[serde(skip)]
    pub stderr_tail: String,
}

impl Default for CaseResult {
    fn default() -> Self {
        CaseResult::unmeasured(String::new())
    }
}

impl CaseResult {
    /// With `repeat > 1`: the largest less the smallest of a figure over
    /// the runs (`None` with fewer than two runs that have it). The
    /// allocator's figure has no spread kept.
    pub fn spread(&self, figure: crate::baseline::Figure) -> Option<u64> {
        let values: Vec<u64> = self
            .repeats
            .iter()
            .filter_map(|r| match figure {
                crate::baseline::Figure::Host => r.host_peak_bytes,
                crate::baseline::Figure::Gpu => r.gpu_peak_bytes,
                crate::baseline::Figure::Working => r.host_working_peak_bytes,
                crate::baseline::Figure::Allocated | crate::baseline::Figure::Outside => None,
            })
            .collect();
        if values.len() < 2 {
            return None;
        }
        Some(values.iter().max()? - values.iter().min()?)
    }

    /// A result with nothing measured — every figure unknown, no check —
    /// to fill in: for a case that could not run at all, and for tests.
    pub fn unmeasured(id: String) -> Self {
        CaseResult {
            id,
            params: IndexMap::new(),
            command: Vec::new(),
            cwd: PathBuf::new(),
            concurrency: 0,
            timeout_s: 0.0,
            soak_s: None,
            status: CaseStatus::Error,
            failure_kind: None,
            message: None,
            started_at: String::new(),
            wall_time_s: 0.0,
            host: HostResult::unmeasured(HostMethod::ProcfsPss),
            gpu_peak_bytes: None,
            gpu_peak_method: None,
            gpu_allocator_floor_bytes: None,
            settle: None,
            gpu_left_bytes: None,
            gpu_devices: Vec::new(),
            cuda_visible_devices: None,
            foreign_processes: Vec::new(),
            gpus: None,
            gpu_sharing: Vec::new(),
            retried_alone: None,
            capacity: None,
            server: None,
            client: None,
            allocation_sites: None,
            site_growth: None,
            ranks: Vec::new(),
            rank_growth: None,
            trend: None,
            testbed: None,
            pytest: None,
            env: IndexMap::new(),
            allocator_env: BTreeMap::new(),
            tolerance: None,
            definition: definition::Definition::default(),
            baseline: None,
            diagnosis: None,
            probe: None,
            outside_allocator_peak_bytes: None,
            outside_allocator_bytes: None,
            gpu_fragmentation_bytes: None,
            outside_allocator: None,
            outputs: Vec::new(),
            leak: None,
            repeats: Vec::new(),
            checks: Vec::new(),
            instances: Vec::new(),
            samples: 0,
            sample_errors: 0,
            leftover_processes: 0,
            dir: PathBuf::new(),
            timeline: PathBuf::new(),
            stdout_tail: String::new(),
            stderr_tail: String::new(),
        }
    }

    pub fn host_peak(&self) -> Option<Bytes> {
        self.host.peak()
    }

    /// Passed only when run again alone, after failing while it shared
    /// its GPU (`--pack`).
    pub fn flaky(&self) -> bool {
        self.status == CaseStatus::Passed && self.retried_alone.as_ref().is_some_and(|r| r.flaky)
    }

    /// `FLAKY` for a flaky pass, else the status's label (`PASS`, ...).
    pub fn label(&self) -> &'static str {
        if self.flaky() {
            "FLAKY"
        } else {
            self.status.label()
        }
    }

    pub fn failed_checks(&self) -> impl Iterator<Item = &Check> {
        self.checks.iter().filter(|c| !c.passed)
    }
}

/// How the cases of a run were scheduled.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Scheduling {
    /// Most cases at once.
    pub jobs: usize,
    /// Cases could share a GPU (`--pack`).
    pub pack: bool,
    /// The GPU pool (`--gpus`); `None`: every case saw oomgate's GPUs.
    pub pool: Option<Vec<GpuRef>>,
    /// Cases started longest first, by a past run's wall times.
    pub ordered_by_past_times: bool,
}

/// A GPU a case shared with other cases while it ran (`--pack`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SharedGpu {
    /// The GPU (`index`, `uuid` in the JSON).
    #[serde(flatten)]
    pub gpu: GpuRef,
    /// The other cases, by id.
    pub with: Vec<String>,
}

/// A case that failed while sharing its GPU, and ran again alone.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RetriedAlone {
    /// How the shared attempt ended.
    pub first_attempt: FirstAttempt,
    /// The retry alone passed: the failure came from sharing the GPU
    /// (reported as flaky by contention, as nextest reports FLAKY).
    pub flaky: bool,
}

/// The attempt of a case that shared its GPU.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FirstAttempt {
    pub status: CaseStatus,
    pub failure_kind: Option<FailureType>,
    pub message: Option<String>,
    pub gpu_sharing: Vec<SharedGpu>,
}

impl FirstAttempt {
    /// What the first attempt ran beside, for the words: `sharing its
    /// GPU`, or — retried after a GPU OOM on a GPU that had not settled —
    /// `its GPU not yet settled`.
    pub fn circumstance(&self) -> &'static str {
        match self.gpu_sharing.is_empty() {
            true => "its GPU not yet settled",
            false => "sharing its GPU",
        }
    }
}

/// The figures of one run of a repeated case.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RepeatFigures {
    pub status: CaseStatus,
    pub wall_time_s: f64,
    pub host_peak_bytes: Option<u64>,
    pub gpu_peak_bytes: Option<u64>,
    /// The working memory's peak (results before it was gated lack it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_working_peak_bytes: Option<u64>,
    /// How its host figure was measured (results before it was recorded
    /// lack it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_method: Option<HostMethod>,
}

/// A server case's server: how it ran. Its memory figures are the case's
/// own (`host_peak_bytes`, `gpu_peak_bytes`, ...).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ServerResult {
    /// Its command as recorded: `{port}` as written, secrets masked.
    pub command: Vec<String>,
    /// Its own `env` (on top of the case's), recorded as the case's is.
    #[serde(default, skip_serializing_if = "IndexMap::is_empty")]
    pub env: IndexMap<String, String>,
    /// The port oomgate gave it (`{port}`, `OOMGATE_PORT`).
    pub port: u16,
    /// What readiness asked, with the port: `http://127.0.0.1:41234/health`.
    pub ready: String,
    /// Seconds from its start until it was ready; null if it never was.
    pub ready_after_s: Option<f64>,
    /// How it ended; null if it never started.
    pub exit: Option<Exit>,
    /// The signal oomgate stopped it with (its load done, or the case
    /// stopped); null when it exited on its own.
    pub stopped_with: Option<String>,
    pub stdout_log: PathBuf,
    pub stderr_log: PathBuf,
    /// The peaks of its samples while it started and under load (the
    /// case's peak may be higher: a high-water mark no sample saw).
    pub startup_host_peak_bytes: Option<u64>,
    pub startup_gpu_peak_bytes: Option<u64>,
    pub load_host_peak_bytes: Option<u64>,
    pub load_gpu_peak_bytes: Option<u64>,
}

impl ServerResult {
    /// `server: ready after 0.30s on port 41523; host peak starting 220.0 MiB, under load 255.0 MiB; stopped with SIGTERM`
    pub fn describe(&self) -> String {
        if self.exit.is_none() && self.stopped_with.is_none() {
            return format!("server: not started (port {})", self.port);
        }
        let mut parts = vec![match self.ready_after_s {
            Some(after) => format!("ready after {after:.2}s on port {}", self.port),
            None => format!("never ready ({}, port {})", self.ready, self.port),
        }];
        let peaks = |what: &str, starting: Option<u64>, loaded: Option<u64>| {
            let starting = starting.map(|b| format!("starting {}", Bytes(b)));
            let loaded = loaded.map(|b| format!("under load {}", Bytes(b)));
            let both: Vec<String> = starting.into_iter().chain(loaded).collect();
            (!both.is_empty()).then(|| format!("{what} peak {}", both.join(", ")))
        };
        parts.extend(peaks(
            "host",
            self.startup_host_peak_bytes,
            self.load_host_peak_bytes,
        ));
        parts.extend(peaks(
            "gpu",
            self.startup_gpu_peak_bytes,
            self.load_gpu_peak_bytes,
        ));
        parts.push(match (&self.stopped_with, self.exit) {
            (Some(signal), Some(Exit::Signal(libc::SIGKILL))) if signal != "SIGKILL" => {
                format!("stopped with {signal}, then SIGKILL: it outlived its kill_grace")
            }
            (Some(signal), _) => format!("stopped with {signal}"),
            (None, Some(exit)) => exit.describe(),
            (None, None) => "not started".to_string(),
        });
        format!("server: {}", parts.join("; "))
    }
}

impl ClientResult {
    /// `load client: host peak 53.9 MiB (vmhwm, cgroup-v1), gpu peak 0 B (sampled@50ms)`
    pub fn describe(&self) -> String {
        let host = self.host.describe();
        let gpu = match (self.gpu_peak_bytes, &self.gpu_peak_method) {
            (Some(bytes), Some(method)) => format!(", gpu peak {} ({method})", Bytes(bytes)),
            (None, Some(method)) => format!(", gpu peak unknown ({method})"),
            _ => String::new(),
        };
        format!("load client: host peak {host}{gpu}")
    }
}

/// A server case's load client: its command's instances, measured in a
/// cgroup of their own.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClientResult {
    /// `host_peak_bytes`, `host_method`, ... in the JSON, as a case's.
    #[serde(flatten)]
    pub host: HostResult,
    pub gpu_peak_bytes: Option<u64>,
    pub gpu_peak_method: Option<GpuMethod>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gpu_devices: Vec<DeviceFigures>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct InstanceResult {
    pub index: u32,
    /// Launches of this instance (more than one in a soak).
    pub runs: u32,
    /// How the last run ended; `None` if it never started.
    pub exit: Option<Exit>,
    pub stdout_log: PathBuf,
    pub stderr_log: PathBuf,
}

#[cfg(test)]
mod tests;

/// Results to feed the tests of the model and of every report format.
/// One part of a merged run: a shard's results, where they were read and
/// how that shard ran. Shards may run on different machines, so each keeps
/// its own environment and measurement.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct PartInfo {
    /// The out dir the part was read from, as given to `oomgate merge`.
    pub dir: PathBuf,
    pub host: String,
    pub started_at: String,
    pub finished_at: Option<String>,
    /// The shard of the suite this part ran (`--partition`), when its
    /// results say so.
    pub partition: Option<crate::suite::Partition>,
    pub environment: crate::environment::Environment,
    pub measurement: Measurement,
    pub gpu: Option<GpuEnvironment>,
    pub interrupted: bool,
    pub fault: Option<String>,
    pub summary: Summary,
    /// The ids of the cases this part ran, in its order.
    pub cases: Vec<String>,
    /// The cases this part planned but did not run.
    pub not_run: Vec<String>,
}

impl PartInfo {
    /// `shards/2 (count:2/4)`: the part as messages and reports name it.
    pub fn name(&self) -> String {
        Self::name_of(&self.dir, self.partition.as_ref())
    }

    /// The name of the part read from `dir`, a shard `partition`.
    pub fn name_of(dir: &std::path::Path, partition: Option<&crate::suite::Partition>) -> String {
        match partition {
            Some(partition) => format!("{} ({partition})", dir.display()),
            None => dir.display().to_string(),
        }
    }
}

#[cfg(test)]
pub(crate) mod test_support;

//! A case's status from what a run observed and every check: `decide`,
//! the one function that decides a status, and `failure_kind`, the one
//! word CI reads for it.
//!
//! The runner records facts (how each instance ended, why it stopped the
//! case, the peaks); `decide` turns them and the checks into a [`Verdict`]:
//! the status, and its [`Cause`] as data — which stop, which instance,
//! which checks — that `report::words` words. Being pure, every boundary is
//! table tested.

use std::time::Duration;

pub use crate::record::StopReason;
use crate::results::{CaseResult, CaseStatus, Check, CheckKind, CheckOutcome};
use crate::suite::BudgetKind;
use crate::units::Bytes;
use crate::vocabulary::{Exit, FailureType};

/// One run of a case: its result (figures and its own limits' checks),
/// and what its verdict is decided from.
#[derive(Debug, Clone)]
pub struct CaseRun {
    pub result: CaseResult,
    pub observed: Observed,
}

/// What the runner observed about a case.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Observed {
    pub stop: Option<StopReason>,
    /// How each instance's last run ended; `None` if it never started.
    pub exits: Vec<Option<Exit>>,
    pub host_peak: Option<Bytes>,
    /// The instances are a server's load client (the peak is the server's).
    pub serving: bool,
    /// A GPU of the case was lost, or refused NVML, while it ran.
    pub gpu_lost: Option<GpuLoss>,
    /// pytest skipped the test, or its failure was expected (its report
    /// said so): what would pass is `skipped`.
    pub skipped: bool,
    /// pytest's setup or teardown of the test failed (a fixture raised):
    /// what failed is `error`, as pytest counts it.
    pub errored: bool,
}

/// A GPU that stopped answering NVML during a case: which, when, and
/// NVML's error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuLoss {
    pub device: crate::results::Device,
    pub at: Duration,
    pub reason: String,
}

impl GpuLoss {
    /// The first device of `gpu` lost during the case, named.
    pub fn of(gpu: &crate::measure::gpu::GpuFigures) -> Option<GpuLoss> {
        gpu.lost().map(|(device, loss)| GpuLoss {
            device: crate::results::Device {
                index: device.index,
                name: device.name.clone(),
            },
            at: Duration::from_secs_f64(loss.at_s.max(0.0)),
            reason: loss.reason.clone(),
        })
    }
}

#[cfg(test)]
impl Observed {
    /// A run of a case that is no server's client, for the tests.
    pub(crate) fn ended(
        stop: Option<StopReason>,
        exits: &[Option<Exit>],
        peak: Option<u64>,
    ) -> Self {
        Observed {
            stop,
            exits: exits.to_vec(),
            host_peak: peak.map(Bytes),
            serving: false,
            gpu_lost: None,
            skipped: false,
            errored: false,
        }
    }
}

/// A memory budget exceeded: strictly above the limit. A peak exactly at the
/// limit passes, as a limit of "512 MiB" reads.
pub fn breaches(peak: Bytes, limit: Bytes) -> bool {
    peak > limit
}

/// The verdict on a case: its status and, when it did not pass, why.
#[derive(Debug, Clone, PartialEq)]
pub struct Verdict {
    pub status: CaseStatus,
    /// `None` for a case that passed.
    pub cause: Option<Cause>,
}

/// Why a case did not pass, as data: the one line a person reads first is
/// `report::words::case_message` of it. `host_peak`s are the case's, for
/// the sentence.
#[derive(Debug, Clone, PartialEq)]
pub enum Cause {
    Interrupted {
        host_peak: Option<Bytes>,
    },
    /// Not started: the launcher's error.
    NotStarted {
        message: String,
    },
    /// Not run, for a reason of oomgate's own.
    NotRun(crate::record::NotRun),
    /// Not started beside processes oomgate did not start on its GPUs
    /// (`foreign_processes = "fail"`).
    Foreign {
        processes: Vec<crate::measure::gpu::ForeignProcess>,
    },
    TimedOut {
        after: Duration,
        host_peak: Option<Bytes>,
    },
    ServerNotReady {
        after: Duration,
        target: String,
        last: Option<String>,
        host_peak: Option<Bytes>,
    },
    /// A GPU of the case was lost, or refused NVML: its GPU figure is
    /// incomplete, so nothing about the case's GPU memory can be said.
    GpuLost(GpuLoss),
    /// The case's own limits failed: these checks (indices into the
    /// case's checks), and when the case was stopped for them.
    Limits {
        failed: Vec<usize>,
        stopped_at: Option<Duration>,
    },
    ServerExited {
        exit: Exit,
        at: Duration,
        ready: bool,
        host_peak: Option<Bytes>,
    },
    /// An instance (the first that failed on its own) ended badly.
    Exited {
        who: Who,
        exit: Exit,
        host_peak: Option<Bytes>,
    },
    /// Judged against the baseline: these checks failed; `drift`, the
    /// environment's changes since the baseline (said once per case).
    Judged {
        failed: Vec<usize>,
        drift: Vec<crate::baseline::Drift>,
    },
}

/// Which instance of a case.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Who {
    /// The only instance.
    Command,
    Instance(u32),
    /// A server case's only load client.
    Client,
    ClientInstance(u32),
}

/// What a whole run earns, from its results: the one rule of `run`,
/// `merge` and `lock`. A run that could not write a file is incomplete
/// whatever its verdicts; then an interruption; then a case that did not
/// pass, or one it planned and never ran, or a run (a merged part) that
/// never ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunVerdict {
    Passed,
    CasesFailed,
    Interrupted,
    Faulted,
}

pub fn run_verdict(results: &crate::results::RunResults) -> RunVerdict {
    if results.fault.is_some() {
        RunVerdict::Faulted
    } else if results.interrupted {
        RunVerdict::Interrupted
    } else if results.cases.iter().any(|c| !c.status.ok())
        || results.parity.iter().any(|p| !p.passed)
        || !results.not_run.is_empty()
        || results.finished_at.is_none()
    {
        RunVerdict::CasesFailed
    } else {
        RunVerdict::Passed
    }
}

/// The case's status and, when it did not pass, why — most important first:
/// how oomgate stopped it (interrupt, launch failure, timeout), then its own
/// limits (budgets, headroom, OOM kills, probe limits, leaks: a breach is
/// why oomgate stopped it), then how an instance ended, then the judgement
/// of its figures against the baseline and the environment's drift (a run
/// that failed on its own has figures that say little). The one place a
/// case's status is decided: for each run, and again for the case once the
/// baseline's checks are in.
pub fn decide(observed: &Observed, checks: &[Check]) -> Verdict {
    let host_peak = observed.host_peak;
    let verdict = |status, cause| Verdict {
        status,
        cause: Some(cause),
    };
    match &observed.stop {
        Some(StopReason::Interrupted) => {
            return verdict(CaseStatus::Interrupted, Cause::Interrupted { host_peak });
        }
        Some(StopReason::LaunchFailed { message }) => {
            let message = message.clone();
            return verdict(CaseStatus::Error, Cause::NotStarted { message });
        }
        Some(StopReason::NotRun(why)) => {
            return verdict(CaseStatus::Error, Cause::NotRun(why.clone()));
        }
        Some(StopReason::ForeignProcesses { processes }) => {
            let processes = processes.clone();
            return verdict(CaseStatus::Error, Cause::Foreign { processes });
        }
        _ => {}
    }
    // A lost GPU explains what follows it (a hang, a CUDA error), and
    // leaves a GPU figure that would pass as whole while missing the rest
    // — but not a budget breach that stopped the case before it.
    let stopped_before = |loss: &GpuLoss| matches!(observed.stop, Some(StopReason::BudgetExceeded { at }) if at < loss.at);
    if let Some(loss) = observed.gpu_lost.as_ref().filter(|l| !stopped_before(l)) {
        return verdict(CaseStatus::Error, Cause::GpuLost(loss.clone()));
    }
    match &observed.stop {
        Some(StopReason::TimedOut { after }) => {
            let after = *after;
            return verdict(CaseStatus::TimedOut, Cause::TimedOut { after, host_peak });
        }
        Some(StopReason::ServerNotReady {
            after,
            target,
            last,
        }) => {
            let cause = Cause::ServerNotReady {
                after: *after,
                target: target.clone(),
                last: last.clone(),
                host_peak,
            };
            return verdict(CaseStatus::TimedOut, cause);
        }
        _ => {}
    }
    let failed = |judgement: bool| -> Vec<usize> {
        checks
            .iter()
            .enumerate()
            .filter(|(_, c)| !c.passed && c.kind.is_judgement() == judgement)
            .map(|(i, _)| i)
            .collect()
    };
    let own = failed(false);
    if !own.is_empty() {
        let stopped_at = match observed.stop {
            Some(StopReason::BudgetExceeded { at }) => Some(at),
            _ => None,
        };
        let cause = Cause::Limits {
            failed: own,
            stopped_at,
        };
        return verdict(CaseStatus::Failed, cause);
    }
    // A server that ended on its own is the cause; its clients were
    // stopped because of it (or never started).
    if let Some(StopReason::ServerExited { exit, at, ready }) = observed.stop {
        let cause = Cause::ServerExited {
            exit,
            at,
            ready,
            host_peak,
        };
        return verdict(CaseStatus::Failed, cause);
    }
    // With several instances, the first to fail is the cause; the others
    // were stopped because of it.
    let first_failure = match observed.stop {
        Some(StopReason::InstanceFailed { index }) => observed
            .exits
            .get(index as usize)
            .copied()
            .flatten()
            .map(|exit| (index, exit)),
        _ => None,
    }
    .or_else(|| {
        observed
            .exits
            .iter()
            .enumerate()
            .find_map(|(i, exit)| match exit {
                Some(exit) if !exit.success() => Some((i as u32, *exit)),
                _ => None,
            })
    });
    if let Some((index, exit)) = first_failure {
        let who = match (observed.serving, observed.exits.len() > 1) {
            (false, true) => Who::Instance(index),
            (false, false) => Who::Command,
            (true, true) => Who::ClientInstance(index),
            (true, false) => Who::Client,
        };
        let cause = Cause::Exited {
            who,
            exit,
            host_peak,
        };
        let status = match observed.errored {
            true => CaseStatus::Error,
            false => CaseStatus::Failed,
        };
        return verdict(status, cause);
    }
    let judged = failed(true);
    if !judged.is_empty() {
        let cause = Cause::Judged {
            failed: judged,
            drift: Vec::new(),
        };
        return verdict(CaseStatus::Failed, cause);
    }
    Verdict {
        status: match observed.skipped {
            true => CaseStatus::Skipped,
            false => CaseStatus::Passed,
        },
        cause: None,
    }
}

/// The kind of a case's failure, one stable word for CI (JUnit's failure
/// `type`, results.json's `failure_kind`, the GitHub annotation's title),
/// or `None` for a case that passed. When several apply, the first in this
/// order wins: how the case ended (`interrupted`, `foreign-processes` — not
/// started beside another's processes —, `gpu-lost` — a GPU lost or
/// refusing NVML while it ran —, `launch-error`), then
/// the diagnosis of a case that failed on its own (`gpu-oom`, `host-oom`,
/// `host-oom-suspected`, `supervisor-killed`, `cuda-setup`, `cuda-fault`, `timeout`, `crash`) —
/// so an OOM outranks the budget breach it caused — then the failed checks
/// (`host-oom`, `budget`, `headroom`, `gpu-left`, `leak`, `limit`, `regression`,
/// `baseline`, `environment-drift`).
pub fn failure_kind(case: &CaseResult, stop: Option<&StopReason>) -> Option<FailureType> {
    failure_kind_of(
        case.status,
        stop,
        case.gpu_devices.iter().any(|d| d.lost.is_some()),
        case.diagnosis.as_ref(),
        &case.checks,
    )
}

/// [`failure_kind`] from its parts: the status, why oomgate stopped the
/// case, whether a GPU was lost, the diagnosis and the checks.
pub fn failure_kind_of(
    status: CaseStatus,
    stop: Option<&StopReason>,
    gpu_lost: bool,
    diagnosis: Option<&crate::diagnose::Diagnosis>,
    checks: &[Check],
) -> Option<FailureType> {
    use crate::diagnose::FailureKind;
    match status {
        CaseStatus::Passed | CaseStatus::Skipped => return None,
        CaseStatus::Interrupted | CaseStatus::Running => return Some(FailureType::Interrupted),
        CaseStatus::Error if matches!(stop, Some(StopReason::ForeignProcesses { .. })) => {
            return Some(FailureType::ForeignProcesses);
        }
        CaseStatus::Error if gpu_lost => return Some(FailureType::GpuLost),
        CaseStatus::Error if diagnosis.is_some_and(|d| d.kind == FailureKind::TestError) => {
            return Some(FailureType::TestError);
        }
        CaseStatus::Error => return Some(FailureType::LaunchError),
        CaseStatus::Failed | CaseStatus::TimedOut => {}
    }
    if let Some(diagnosis) = diagnosis {
        return Some(match diagnosis.kind {
            FailureKind::GpuOom => FailureType::GpuOom,
            FailureKind::HostOom | FailureKind::HostAllocFailed => FailureType::HostOom,
            FailureKind::HostOomSuspected => FailureType::HostOomSuspected,
            FailureKind::SupervisorKilled => FailureType::SupervisorKilled,
            FailureKind::CudaSetup => FailureType::CudaSetup,
            FailureKind::CudaFault => FailureType::CudaFault,
            FailureKind::Timeout => FailureType::Timeout,
            FailureKind::TestFailed => FailureType::TestFailed,
            FailureKind::TestError => FailureType::TestError,
            FailureKind::ExitNonzero => FailureType::Crash,
        });
    }
    if status == CaseStatus::TimedOut {
        return Some(FailureType::Timeout);
    }
    Some(
        checks
            .iter()
            .filter(|check| !check.passed)
            .map(|check| failure_of(&check.kind, check.outcome))
            .min_by_key(|word| precedence(*word))
            .unwrap_or(FailureType::Crash),
    )
}

/// The failure word of a failed check.
fn failure_of(kind: &CheckKind, outcome: Option<CheckOutcome>) -> FailureType {
    match kind {
        CheckKind::HostOomKill => FailureType::HostOom,
        // Each budget says its own (`budget`, `headroom`, `gpu-left`).
        CheckKind::Budget(_) | CheckKind::GpuHeadroom { .. } => kind
            .budget()
            .map_or(FailureType::Budget, BudgetKind::failure),
        CheckKind::Leak => FailureType::Leak,
        CheckKind::Limit(_) => FailureType::Limit,
        // A figure that grew beyond its baseline; without one it can be
        // compared with (none locked, another method, a figure unknown,
        // and `--require-baseline`) it is the baseline that failed, not
        // the figure, even where the figure itself was measured.
        CheckKind::Baseline(_) | CheckKind::Output(_)
            if outcome == Some(CheckOutcome::Breached) =>
        {
            FailureType::Regression
        }
        // A capacity that shrank is a regression; none to compare with
        // (`--require-baseline`) is the baseline's failure.
        CheckKind::Capacity if outcome != Some(CheckOutcome::NoBaseline) => FailureType::Regression,
        CheckKind::Capacity
        | CheckKind::Baseline(_)
        | CheckKind::Output(_)
        | CheckKind::BaselineMissing => FailureType::Baseline,
        CheckKind::EnvironmentDrift => FailureType::EnvironmentDrift,
        // A server case's load client: its checks are of the case's kinds.
        CheckKind::Client(check) => failure_of(check, outcome),
        // A step is a notice and never fails; it is named for
        // completeness.
        CheckKind::Creep(_) | CheckKind::Step(_) => FailureType::Creep,
    }
}

/// Which failed check names a case's failure when several failed: the
/// first of these (an OOM kill before a budget, a budget before a
/// regression).
fn precedence(word: FailureType) -> u8 {
    match word {
        FailureType::HostOom => 0,
        FailureType::Budget => 1,
        FailureType::Headroom => 2,
        FailureType::GpuLeft => 3,
        FailureType::Leak => 4,
        FailureType::Limit => 5,
        FailureType::Regression => 6,
        FailureType::Creep => 7,
        FailureType::Baseline => 8,
        FailureType::EnvironmentDrift => 9,
        // Words no check gives.
        FailureType::Interrupted
        | FailureType::ForeignProcesses
        | FailureType::LaunchError
        | FailureType::GpuLost
        | FailureType::GpuOom
        | FailureType::HostOomSuspected
        | FailureType::SupervisorKilled
        | FailureType::CudaSetup
        | FailureType::CudaFault
        | FailureType::Timeout
        | FailureType::TestFailed
        | FailureType::TestError
        | FailureType::Crash
        | FailureType::OtherDefinition => 9,
    }
}

#[cfg(test)]
mod tests;

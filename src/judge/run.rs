//! One run of a case judged from its measurement alone: its own limits'
//! checks, its status, the process that explains it and its diagnosis.
//!
//! The runner asks this for what steers it (a repeat that failed ends the
//! repeats; a probe's status steers a capacity search), and `judge_case`
//! asks it again for every run it is handed, so the two cannot differ: it
//! is a pure function of the measurement.

use super::limits::run_checks;
use super::verdict::{GpuLoss, Observed, Verdict, decide, failure_kind_of};
use crate::diagnose::{self, Diagnosis, Scan};
use crate::leak::LeakFigures;
use crate::record::{Focus, InstanceRecord, RunRecord, StopReason};
use crate::results::{CaseResult, CaseStatus, Check};
use crate::suite::Case;
use crate::units::Bytes;
use crate::vocabulary::{Exit, FailureType};

/// pytest's exit status when a test failed (`pytest.ExitCode.TESTS_FAILED`).
const PYTEST_TESTS_FAILED: i32 = 1;

/// The judge's answer for one run.
#[derive(Debug, Clone)]
pub struct RunJudgement {
    /// The checks of the case's own limits (budgets, headroom, OOM kills,
    /// probe limits, leaks); the baseline's come with the case's verdict.
    pub checks: Vec<Check>,
    pub leak: Option<LeakFigures>,
    pub observed: Observed,
    pub verdict: Verdict,
    pub diagnosis: Option<Diagnosis>,
    pub failure_kind: Option<FailureType>,
}

/// Judge one run of `case` (with a search: the probe's case, whose limits
/// it ran under) from what it measured.
pub fn judge_run(case: &Case, measured: &RunRecord) -> RunJudgement {
    let (checks, leak) = run_checks(
        case,
        &measured.host,
        measured.gpu.as_ref(),
        measured
            .server
            .as_ref()
            .map(|s| (&s.client_host, s.client_gpu.as_ref())),
        measured.probe.as_ref(),
        &measured.soak_peaks,
    );
    let observed = observed(measured);
    let verdict = decide(&observed, &checks);
    // pytest's `error` is a test that ran and failed in its setup or
    // teardown, diagnosed as a failure is (not as a case never started).
    let diagnosed_as = match (verdict.status, observed.errored) {
        (CaseStatus::Error, true) => CaseStatus::Failed,
        (status, _) => status,
    };
    let diagnosis = diagnosis(diagnosed_as, &observed, &checks, measured);
    let gpu_lost = measured
        .gpu
        .as_ref()
        .is_some_and(|g| g.devices.iter().any(|d| d.lost.is_some()));
    let failure_kind = failure_kind_of(
        verdict.status,
        observed.stop.as_ref(),
        gpu_lost,
        diagnosis.as_ref(),
        &checks,
    );
    RunJudgement {
        checks,
        leak,
        observed,
        verdict,
        diagnosis,
        failure_kind,
    }
}

/// A run's result: `result` (assembled from its measurement) with the
/// judgement's checks, status, diagnosis and failure kind.
pub(super) fn fill_result(result: &mut CaseResult, judgement: RunJudgement) -> Observed {
    let RunJudgement {
        checks,
        leak,
        observed,
        verdict,
        diagnosis,
        failure_kind,
    } = judgement;
    result.checks = checks;
    result.leak = leak;
    result.status = verdict.status;
    result.diagnosis = diagnosis;
    result.failure_kind = failure_kind;
    observed
}

/// What the verdict is decided from.
fn observed(measured: &RunRecord) -> Observed {
    let pytest = measured.probe.as_ref().and_then(|p| p.pytest.as_ref());
    Observed {
        stop: measured.stop.clone(),
        exits: measured.instances.iter().map(|i| i.exit).collect(),
        host_peak: measured.host.peak_bytes.map(Bytes),
        serving: measured.server.is_some(),
        gpu_lost: measured.gpu.as_ref().and_then(GpuLoss::of),
        skipped: pytest.is_some_and(|p| {
            matches!(
                p.outcome,
                crate::probe::TestOutcome::Skipped | crate::probe::TestOutcome::Xfailed
            )
        }),
        errored: pytest.is_some_and(|p| p.outcome == crate::probe::TestOutcome::Error),
    }
}

/// The process whose output explains a run: the instance that failed on
/// its own (not one oomgate stopped because of it), else the first that
/// failed, else instance 0 — unless the case has a server that ended or
/// never got ready, or nothing else failed (a budget breach): then the
/// server.
pub fn focus(stop: Option<&StopReason>, exits: &[Option<Exit>], serving: bool) -> Focus {
    let failed = |exit: &Option<Exit>| exit.is_some_and(|e| !e.success());
    let instance = match stop {
        Some(StopReason::InstanceFailed { index }) => *index,
        _ => exits
            .iter()
            .position(failed)
            .map_or(0, |i| u32::try_from(i).unwrap_or(u32::MAX)),
    };
    let server_first = matches!(
        stop,
        Some(StopReason::ServerExited { .. } | StopReason::ServerNotReady { .. })
    ) || (!matches!(stop, Some(StopReason::InstanceFailed { .. }))
        && !exits.iter().any(failed));
    match serving && server_first {
        true => Focus::Server,
        false => Focus::Instance(instance),
    }
}

/// Whether a run's explaining process left anything to diagnose: it did
/// not exit well, or oomgate stopped the case. A run that ended well on
/// its own passed or failed a check, which is its own explanation.
pub fn worth_scanning(stop: Option<&StopReason>, exit: Option<Exit>) -> bool {
    stop.is_some() || !exit.is_some_and(Exit::success)
}

/// The record of the focused process.
fn focused(measured: &RunRecord, focus: Focus) -> Option<&InstanceRecord> {
    match focus {
        Focus::Server => measured.server.as_ref().map(|s| &s.instance),
        Focus::Instance(index) => measured.instances.iter().find(|i| i.index == index),
    }
}

/// The diagnosis of a run that failed on its own, from its explaining
/// process's exit and error output (its hints are words, made with the
/// case's).
fn diagnosis(
    status: CaseStatus,
    observed: &Observed,
    checks: &[Check],
    measured: &RunRecord,
) -> Option<Diagnosis> {
    let focus = measured.focus.focus;
    let instance = focused(measured, focus);
    let exit = instance.and_then(|i| i.exit);
    // The kernel's OOM kills in the focused process's cgroup: a server's
    // are the case's figures, its load client's its own.
    let oom_kills = match (&measured.server, focus) {
        (Some(server), Focus::Instance(_)) => server.client_host.oom_kills,
        _ => measured.host.oom_kills,
    };
    let stopped_by_oomgate = !matches!(
        observed.stop,
        None | Some(StopReason::InstanceFailed { .. } | StopReason::ServerExited { .. })
    );
    let check_failed = checks.iter().any(|c| !c.passed);
    let unscanned = Scan::default();
    let scan = measured.focus.scan.as_ref().unwrap_or(&unscanned);
    let diagnosis = diagnose::diagnose(
        status,
        exit,
        stopped_by_oomgate,
        check_failed,
        scan,
        oom_kills,
    )?;
    // Its supervisor killed from outside: the exit is the supervisor's.
    let diagnosis = match instance.is_some_and(|i| i.supervisor_lost) && !stopped_by_oomgate {
        true => diagnose::with_supervisor_killed(diagnosis),
        false => diagnosis,
    };
    // A pytest test that failed as pytest says, with pytest's own exit
    // for it: the test's failure, not a crash.
    let failed_test = measured
        .probe
        .as_ref()
        .and_then(|p| p.pytest.as_ref())
        .filter(|r| r.failed());
    Some(match (failed_test, exit) {
        (Some(report), Some(Exit::Code(PYTEST_TESTS_FAILED))) => {
            let errored = report.outcome == crate::probe::TestOutcome::Error;
            diagnose::with_test_failed(diagnosis, report.message.as_deref(), errored)
        }
        _ => diagnosis,
    })
}

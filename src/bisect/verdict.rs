//! A candidate's verdict from its case's result, as the judge left it,
//! and its figures against the good end's lock, judged here by the same
//! judge: bad only for a reason that is memory, never for a crash, a
//! build or an environment that changed on purpose.

use std::path::Path;

use super::search::Verdict;
use crate::baseline::Lock;
use crate::results::{CaseResult, CaseStatus, Check, CheckKind, RunResults};
use crate::vocabulary::FailureType;

/// `case` of `results` against its entry in the good end's `lock`, as
/// `run --baseline` would judge it (`judge::against_entry`); no check
/// when the lock holds no entry for it.
pub fn against_good_end(
    lock: &Lock,
    lock_path: &Path,
    results: &RunResults,
    case: &CaseResult,
) -> Vec<Check> {
    let later = crate::results::readback::lock_of(results);
    let Some((testbed, _, entry)) = later.entries().find(|(_, id, _)| *id == case.id) else {
        return Vec::new();
    };
    let found = lock.baseline_for(&case.id, testbed, None);
    let Some(earlier) = found.entry else {
        return Vec::new();
    };
    let gpu_compared = match found.source {
        crate::baseline::testbed::Source::Testbed(_) => true,
        crate::baseline::testbed::Source::Legacy => {
            crate::baseline::drift::same_gpus(&lock.environment, &later.environment)
        }
    };
    // Every candidate with the good end's tolerance: a commit that only
    // tightens (or loosens) its suite's is no step of the figure.
    let tolerances = earlier
        .tolerance
        .or(entry.tolerance)
        .unwrap_or_else(|| crate::suite::Tolerances::default().into());
    crate::judge::against_entry(
        earlier,
        lock_path,
        entry,
        Some(case),
        tolerances,
        None,
        gpu_compared,
    )
}

/// Why a candidate is bad or cannot be told.
#[derive(Debug, Clone, PartialEq)]
pub enum Why {
    /// A check failed (worded by the report when its message is empty).
    Check(Box<Check>),
    /// The judge's words on the case (an OOM, a crash).
    Said(String),
}

/// Whether a failed check of this kind is about memory: a figure against
/// the good end, a budget, a limit, a leak, or an OOM kill.
fn about_memory(kind: &CheckKind) -> bool {
    match kind {
        CheckKind::Budget(_)
        | CheckKind::GpuHeadroom { .. }
        | CheckKind::HostOomKill
        | CheckKind::Limit(_)
        | CheckKind::Leak
        | CheckKind::Baseline(_)
        | CheckKind::Capacity
        | CheckKind::Creep(_) => true,
        // A number the logs print (a KV cache's size) against the good
        // end: the suite gates it as it gates a peak.
        CheckKind::Output(_) => true,
        CheckKind::Client(inner) => about_memory(inner),
        // Bisecting changes the environment on purpose; a missing
        // baseline and a step in a history are notices.
        CheckKind::BaselineMissing | CheckKind::EnvironmentDrift | CheckKind::Step(_) => false,
    }
}

/// What a kind of failure says of a run, for a bisect: every kind named,
/// none by a catch-all, so a new kind is classified where it is added.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Failure {
    /// It ran out of memory, whatever the checks say.
    OutOfMemory,
    /// A figure's own failure: the run did its work.
    Figure,
    /// The run was cut short (a crash, a timeout, a setup that failed):
    /// its figures are not those of the work.
    CutShort,
}

fn failure(kind: FailureType) -> Failure {
    match kind {
        FailureType::GpuOom | FailureType::HostOom | FailureType::HostOomSuspected => {
            Failure::OutOfMemory
        }
        FailureType::Budget
        | FailureType::Headroom
        | FailureType::GpuLeft
        | FailureType::Leak
        | FailureType::Limit
        | FailureType::Regression
        | FailureType::Creep
        | FailureType::Baseline
        | FailureType::EnvironmentDrift
        | FailureType::OtherDefinition => Failure::Figure,
        FailureType::Interrupted
        | FailureType::ForeignProcesses
        | FailureType::LaunchError
        | FailureType::GpuLost
        | FailureType::SupervisorKilled
        | FailureType::CudaSetup
        | FailureType::CudaFault
        | FailureType::Timeout
        | FailureType::TestFailed
        | FailureType::TestError
        | FailureType::Crash => Failure::CutShort,
    }
}

/// The verdict on one candidate's case, with `against` (its checks
/// against the good end), and why when it is not good.
pub fn classify(case: &CaseResult, against: &[Check]) -> (Verdict, Option<Why>) {
    let said = || case.message.clone().map(Why::Said);
    if case.status == CaseStatus::Skipped {
        return (
            Verdict::Skip,
            Some(Why::Said(
                "pytest skipped the test: nothing was judged".into(),
            )),
        );
    }
    if case
        .failure_kind
        .is_some_and(|kind| failure(kind) == Failure::OutOfMemory)
    {
        return (Verdict::Bad, said());
    }
    // A run that crashed, hung or could not start did not do its work:
    // its figures say nothing against the good end's; only an OOM kill
    // does.
    let cut_short = matches!(case.status, CaseStatus::TimedOut | CaseStatus::Error)
        || case
            .failure_kind
            .is_some_and(|kind| failure(kind) == Failure::CutShort);
    let mut failed = case
        .failed_checks()
        .chain(against.iter().filter(|c| !c.passed))
        .filter(|c| !cut_short || c.kind == CheckKind::HostOomKill);
    if let Some(check) = failed.find(|c| about_memory(&c.kind)) {
        return (Verdict::Bad, Some(Why::Check(Box::new(check.clone()))));
    }
    if case.status == CaseStatus::Passed {
        return (Verdict::Good, None);
    }
    // Failed only for what bisecting changes on purpose.
    let notices_only = case.status == CaseStatus::Failed
        && matches!(
            case.failure_kind,
            Some(FailureType::EnvironmentDrift | FailureType::Baseline)
        );
    match notices_only {
        true => (Verdict::Good, None),
        false => {
            (
                Verdict::Skip,
                Some(said().unwrap_or_else(|| {
                    Why::Said(format!("the case ended {}", case.status.as_str()))
                })),
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::baseline::Figure;
    use crate::results::Check;
    use crate::suite::BudgetKind;

    fn check(kind: CheckKind, passed: bool, message: &str) -> Check {
        Check {
            kind,
            passed,
            outcome: None,
            figure_bytes: None,
            limit_bytes: None,
            baseline_bytes: None,
            tolerance: None,
            facts: None,
            message: message.into(),
        }
    }

    fn case(status: CaseStatus, kind: Option<FailureType>, checks: Vec<Check>) -> CaseResult {
        let mut case = CaseResult::unmeasured("train".into());
        case.status = status;
        case.failure_kind = kind;
        case.checks = checks;
        case.message = Some("the judge's words".into());
        case
    }

    #[test]
    fn memory_is_bad_and_anything_else_cannot_tell() {
        let grew = case(
            CaseStatus::Failed,
            Some(FailureType::Regression),
            vec![check(
                CheckKind::Baseline(Figure::Host),
                false,
                "host grew 3x",
            )],
        );
        assert_eq!(
            classify(&grew, &[]),
            (
                Verdict::Bad,
                Some(Why::Check(Box::new(check(
                    CheckKind::Baseline(Figure::Host),
                    false,
                    "host grew 3x"
                ))))
            )
        );
        // Against the good end, judged here.
        let passed = case(CaseStatus::Passed, None, vec![]);
        let grown = check(CheckKind::Baseline(Figure::Host), false, "");
        assert_eq!(
            classify(&passed, std::slice::from_ref(&grown)).0,
            Verdict::Bad
        );
        let held = check(CheckKind::Baseline(Figure::Host), true, "");
        assert_eq!(classify(&passed, &[held]).0, Verdict::Good);
        let over = case(
            CaseStatus::Failed,
            Some(FailureType::Budget),
            vec![check(CheckKind::Budget(BudgetKind::Host), false, "over")],
        );
        assert_eq!(classify(&over, &[]).0, Verdict::Bad);
        let oom = case(CaseStatus::Failed, Some(FailureType::GpuOom), vec![]);
        assert_eq!(classify(&oom, &[]).0, Verdict::Bad);
        // A crash, a timeout, a launch error: never blamed.
        for (status, kind) in [
            (CaseStatus::Failed, FailureType::Crash),
            (CaseStatus::TimedOut, FailureType::Timeout),
            (CaseStatus::Error, FailureType::LaunchError),
            (CaseStatus::Failed, FailureType::CudaSetup),
        ] {
            let verdict = classify(&case(status, Some(kind), vec![]), &[]);
            assert_eq!(verdict.0, Verdict::Skip, "{kind:?}");
            assert_eq!(verdict.1, Some(Why::Said("the judge's words".into())));
        }
        // A crash the kernel's OOM killer explains is bad: the kill says.
        let both = case(
            CaseStatus::Failed,
            Some(FailureType::Crash),
            vec![check(CheckKind::HostOomKill, false, "killed by the kernel")],
        );
        assert_eq!(classify(&both, &[]).0, Verdict::Bad);
        // A run that hung or crashed did not do its work: its figures
        // against the good end's are not blamed.
        for (status, kind) in [
            (CaseStatus::TimedOut, FailureType::Timeout),
            (CaseStatus::Failed, FailureType::Crash),
        ] {
            let grown = check(CheckKind::Baseline(Figure::Host), false, "host grew");
            let cut = case(status, Some(kind), vec![]);
            assert_eq!(classify(&cut, &[grown]).0, Verdict::Skip, "{kind:?}");
        }
    }

    #[test]
    fn what_bisecting_changes_on_purpose_is_not_blamed() {
        let drifted = case(
            CaseStatus::Failed,
            Some(FailureType::EnvironmentDrift),
            vec![
                check(CheckKind::EnvironmentDrift, false, "torch 2.9 -> 2.10"),
                check(CheckKind::Baseline(Figure::Host), true, ""),
            ],
        );
        assert_eq!(classify(&drifted, &[]), (Verdict::Good, None));
        let passed = case(CaseStatus::Passed, None, vec![]);
        assert_eq!(classify(&passed, &[]), (Verdict::Good, None));
        let skipped = case(CaseStatus::Skipped, None, vec![]);
        assert_eq!(classify(&skipped, &[]).0, Verdict::Skip);
    }
}

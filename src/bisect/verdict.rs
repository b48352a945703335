//! A candidate's verdict from its case's result, as the judge left it:
//! bad only for a reason that is memory, never for a crash, a build or
//! an environment that changed on purpose.

use super::search::Verdict;
use crate::results::{CaseResult, CaseStatus, CheckKind};
use crate::vocabulary::FailureType;

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
        CheckKind::Client(inner) => about_memory(inner),
        // Bisecting changes the environment on purpose; a missing
        // baseline and a step in a history are notices.
        CheckKind::BaselineMissing | CheckKind::EnvironmentDrift | CheckKind::Step(_) => false,
    }
}

/// The kinds of failure that are running out of memory, whatever the
/// checks say.
const OUT_OF_MEMORY: [FailureType; 3] = [
    FailureType::GpuOom,
    FailureType::HostOom,
    FailureType::HostOomSuspected,
];

/// The verdict on one candidate's case, and why in a few words when it
/// is not good (the judge's own message).
pub fn classify(case: &CaseResult) -> (Verdict, Option<String>) {
    let message = || case.message.clone();
    if case.status == CaseStatus::Skipped {
        return (
            Verdict::Skip,
            Some("pytest skipped the test: nothing was judged".into()),
        );
    }
    if let Some(check) = case.failed_checks().find(|c| about_memory(&c.kind)) {
        return (Verdict::Bad, Some(check.message.clone()));
    }
    if case
        .failure_kind
        .is_some_and(|kind| OUT_OF_MEMORY.contains(&kind))
    {
        return (Verdict::Bad, message());
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
        false => (
            Verdict::Skip,
            Some(message().unwrap_or_else(|| format!("the case ended {}", case.status.as_str()))),
        ),
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
        assert_eq!(classify(&grew), (Verdict::Bad, Some("host grew 3x".into())));
        let over = case(
            CaseStatus::Failed,
            Some(FailureType::Budget),
            vec![check(CheckKind::Budget(BudgetKind::Host), false, "over")],
        );
        assert_eq!(classify(&over).0, Verdict::Bad);
        let oom = case(CaseStatus::Failed, Some(FailureType::GpuOom), vec![]);
        assert_eq!(classify(&oom).0, Verdict::Bad);
        // A crash, a timeout, a launch error: never blamed.
        for (status, kind) in [
            (CaseStatus::Failed, FailureType::Crash),
            (CaseStatus::TimedOut, FailureType::Timeout),
            (CaseStatus::Error, FailureType::LaunchError),
            (CaseStatus::Failed, FailureType::CudaSetup),
        ] {
            let verdict = classify(&case(status, Some(kind), vec![]));
            assert_eq!(verdict.0, Verdict::Skip, "{kind:?}");
            assert_eq!(verdict.1.as_deref(), Some("the judge's words"));
        }
        // A crash whose memory check also failed is bad: the figure says.
        let both = case(
            CaseStatus::Failed,
            Some(FailureType::Crash),
            vec![check(CheckKind::HostOomKill, false, "killed by the kernel")],
        );
        assert_eq!(classify(&both).0, Verdict::Bad);
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
        assert_eq!(classify(&drifted), (Verdict::Good, None));
        let passed = case(CaseStatus::Passed, None, vec![]);
        assert_eq!(classify(&passed), (Verdict::Good, None));
        let skipped = case(CaseStatus::Skipped, None, vec![]);
        assert_eq!(classify(&skipped).0, Verdict::Skip);
    }
}

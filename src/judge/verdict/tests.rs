use std::time::Duration;

use super::*;
use crate::judge::limits::host_budget_check;
use crate::measure::host::{HostFloor, HostMethod};

const MIB: u64 = 1024 * 1024;

fn observed(stop: Option<StopReason>, exits: &[Option<Exit>], peak: Option<u64>) -> Observed {
    Observed::ended(stop, exits, peak)
}

fn regression() -> Check {
    Check::new(
        CheckKind::Baseline(crate::baseline::Figure::Host),
        false,
        CheckOutcome::Breached,
    )
    .figure(Some(2))
}

#[test]
fn a_judgement_ranks_below_how_the_run_ended() {
    let drift = Check::new(CheckKind::EnvironmentDrift, false, CheckOutcome::Breached);
    let over = host_budget_check(
        Some(Bytes(2)),
        Some(HostFloor::Vmhwm),
        HostMethod::CgroupV1,
        Bytes(1),
    );
    let ok = [Some(Exit::Code(0))];
    // A clean run judged against its baseline.
    let verdict = decide(&observed(None, &ok, None), &[regression(), drift]);
    assert_eq!(verdict.status, CaseStatus::Failed);
    assert_eq!(
        verdict.cause,
        Some(Cause::Judged {
            failed: vec![0, 1],
            drift: Vec::new()
        })
    );
    // A run that failed on its own keeps its own cause first.
    let verdict = decide(
        &observed(None, &[Some(Exit::Code(3))], None),
        &[regression()],
    );
    assert_eq!(
        verdict.cause,
        Some(Cause::Exited {
            who: Who::Command,
            exit: Exit::Code(3),
            host_peak: None
        })
    );
    // A breached limit outranks the judgement.
    let verdict = decide(&observed(None, &ok, None), &[regression(), over]);
    assert_eq!(
        verdict.cause,
        Some(Cause::Limits {
            failed: vec![1],
            stopped_at: None
        })
    );
    // Passing checks change nothing.
    let passing = host_budget_check(Some(Bytes(1)), None, HostMethod::CgroupV2, Bytes(1));
    assert_eq!(
        decide(&observed(None, &ok, None), &[passing]),
        Verdict {
            status: CaseStatus::Passed,
            cause: None
        }
    );
}

#[test]
fn a_server_that_ended_is_the_cause_after_the_cases_own_limits() {
    let died = StopReason::ServerExited {
        exit: Exit::Code(1),
        at: Duration::from_millis(4100),
        ready: true,
    };
    let stopped_clients = [Some(Exit::Signal(15)), None];
    let mut serving = observed(Some(died), &stopped_clients, Some(MIB));
    serving.serving = true;
    assert!(
        matches!(
            decide(&serving, &[]).cause,
            Some(Cause::ServerExited { ready: true, .. })
        ),
        "not the clients it took down with it"
    );
    let over = host_budget_check(
        Some(Bytes(2)),
        Some(HostFloor::Vmhwm),
        HostMethod::CgroupV1,
        Bytes(1),
    );
    assert!(
        matches!(decide(&serving, &[over]).cause, Some(Cause::Limits { .. })),
        "a breach of the case's own budget comes first"
    );
    serving.stop = Some(StopReason::ServerNotReady {
        after: Duration::from_secs(300),
        target: "tcp://127.0.0.1:9".into(),
        last: Some("connection refused".into()),
    });
    assert_eq!(decide(&serving, &[]).status, CaseStatus::TimedOut);
    serving.stop = Some(StopReason::InstanceFailed { index: 1 });
    serving.exits = vec![Some(Exit::Code(0)), Some(Exit::Code(2))];
    assert_eq!(
        decide(&serving, &[]).cause,
        Some(Cause::Exited {
            who: Who::ClientInstance(1),
            exit: Exit::Code(2),
            host_peak: Some(Bytes(MIB))
        })
    );
}

#[test]
fn status_priorities() {
    let ok = Some(Exit::Code(0));
    let failing = host_budget_check(
        Some(Bytes(2)),
        Some(HostFloor::PssSum),
        HostMethod::ProcfsPss,
        Bytes(1),
    );
    let passing = host_budget_check(
        Some(Bytes(1)),
        Some(HostFloor::PssSum),
        HostMethod::ProcfsPss,
        Bytes(1),
    );
    let budget_stop = StopReason::BudgetExceeded {
        at: Duration::from_millis(1200),
    };
    let timed_out = StopReason::TimedOut {
        after: Duration::from_secs(120),
    };
    let launch = StopReason::LaunchFailed {
        message: "cannot start `x`".into(),
    };
    let table: Vec<(Observed, Vec<Check>, CaseStatus, Option<Cause>)> = vec![
        (
            observed(None, &[ok], Some(MIB)),
            vec![],
            CaseStatus::Passed,
            None,
        ),
        (
            observed(None, &[ok], None),
            vec![],
            CaseStatus::Passed,
            None,
        ),
        (
            observed(None, &[ok], Some(1)),
            vec![passing],
            CaseStatus::Passed,
            None,
        ),
        (
            observed(Some(budget_stop), &[Some(Exit::Signal(15))], Some(2)),
            vec![failing.clone()],
            CaseStatus::Failed,
            Some(Cause::Limits {
                failed: vec![0],
                stopped_at: Some(Duration::from_millis(1200)),
            }),
        ),
        (
            observed(None, &[ok, Some(Exit::Code(1))], Some(MIB)),
            vec![],
            CaseStatus::Failed,
            Some(Cause::Exited {
                who: Who::Instance(1),
                exit: Exit::Code(1),
                host_peak: Some(Bytes(MIB)),
            }),
        ),
        (
            observed(
                Some(StopReason::InstanceFailed { index: 2 }),
                &[Some(Exit::Signal(15)), ok, Some(Exit::Code(4))],
                None,
            ),
            vec![],
            CaseStatus::Failed,
            Some(Cause::Exited {
                who: Who::Instance(2),
                exit: Exit::Code(4),
                host_peak: None,
            }),
        ),
        (
            observed(Some(timed_out), &[Some(Exit::Signal(9))], Some(MIB)),
            vec![failing.clone()],
            CaseStatus::TimedOut,
            Some(Cause::TimedOut {
                after: Duration::from_secs(120),
                host_peak: Some(Bytes(MIB)),
            }),
        ),
        (
            observed(
                Some(StopReason::Interrupted),
                &[Some(Exit::Signal(15))],
                None,
            ),
            vec![failing],
            CaseStatus::Interrupted,
            Some(Cause::Interrupted { host_peak: None }),
        ),
        (
            observed(Some(launch), &[None], None),
            vec![],
            CaseStatus::Error,
            Some(Cause::NotStarted {
                message: "cannot start `x`".into(),
            }),
        ),
    ];
    for (observed, checks, status, cause) in table {
        let verdict = decide(&observed, &checks);
        assert_eq!(verdict.status, status, "{observed:?}");
        assert_eq!(verdict.cause, cause, "{observed:?}");
    }
}

#[test]
fn failure_kinds_follow_their_precedence() {
    let check = |kind: CheckKind, figure: Option<u64>| {
        Check::new(kind, false, CheckOutcome::Breached).figure(figure)
    };
    let case = |status: CaseStatus, checks: Vec<Check>| {
        let mut case = CaseResult::unmeasured("c".into());
        case.status = status;
        case.checks = checks;
        case
    };
    let gpu = || CheckKind::Baseline(crate::baseline::Figure::Gpu);
    let regression = || check(gpu(), Some(1));
    let mut unknown = check(gpu(), None);
    unknown.outcome = Some(CheckOutcome::Unknown);
    let mut shrank = check(CheckKind::Capacity, None);
    shrank.outcome = Some(CheckOutcome::Breached);
    let mut no_capacity = check(CheckKind::Capacity, None);
    no_capacity.outcome = Some(CheckOutcome::NoBaseline);
    for (status, checks, expected) in [
        (CaseStatus::Passed, vec![], None),
        (
            CaseStatus::Interrupted,
            vec![regression()],
            Some("interrupted"),
        ),
        (CaseStatus::Error, vec![], Some("launch-error")),
        (CaseStatus::TimedOut, vec![regression()], Some("timeout")),
        (CaseStatus::Failed, vec![], Some("crash")),
        (
            CaseStatus::Failed,
            vec![regression(), check(CheckKind::HostBudget, Some(1))],
            Some("budget"),
        ),
        (
            CaseStatus::Failed,
            vec![
                check(CheckKind::Leak, None),
                check(CheckKind::GpuHeadroom { device: 0 }, Some(1)),
            ],
            Some("headroom"),
        ),
        (
            CaseStatus::Failed,
            vec![
                check(CheckKind::Limit("metric.x".into()), None),
                check(CheckKind::Leak, None),
            ],
            Some("leak"),
        ),
        (
            CaseStatus::Failed,
            vec![check(CheckKind::EnvironmentDrift, None), regression()],
            Some("regression"),
        ),
        (CaseStatus::Failed, vec![unknown], Some("baseline")),
        // Regression: a capacity that shrank was `baseline`, which is
        // a missing or unmeasurable baseline.
        (CaseStatus::Failed, vec![shrank], Some("regression")),
        (CaseStatus::Failed, vec![no_capacity], Some("baseline")),
        (
            CaseStatus::Failed,
            vec![
                check(CheckKind::HostBudget, Some(1)),
                check(CheckKind::HostOomKill, None),
            ],
            Some("host-oom"),
        ),
    ] {
        assert_eq!(
            failure_kind(&case(status, checks.clone()), None).map(FailureType::as_str),
            expected,
            "{status:?} {checks:?}"
        );
    }
    // A diagnosis outranks the checks: the OOM, not the budget it broke.
    let mut oom = case(
        CaseStatus::Failed,
        vec![check(CheckKind::GpuBudget, Some(1))],
    );
    oom.diagnosis = Some(crate::diagnose::Diagnosis {
        kind: crate::diagnose::FailureKind::GpuOom,
        oom: None,
        exception: None,
        rank: None,
        oom_ranks: Vec::new(),
        hints: Vec::new(),
    });
    assert_eq!(failure_kind(&oom, None), Some(FailureType::GpuOom));
    let refused = case(CaseStatus::Error, vec![]);
    let stop = StopReason::ForeignProcesses {
        processes: Vec::new(),
    };
    assert_eq!(
        failure_kind(&refused, Some(&stop)),
        Some(FailureType::ForeignProcesses)
    );
    assert_eq!(failure_kind(&refused, None), Some(FailureType::LaunchError));
}

/// A lost GPU makes the case an error of its own kind, above what it
/// explains (a timeout, an instance's crash, a failed budget), below an
/// interruption and a launch that never happened.
#[test]
fn a_lost_gpu_is_an_error_above_what_it_explains() {
    let loss = GpuLoss {
        device: crate::results::Device {
            index: 0,
            name: "H100".into(),
        },
        at: Duration::from_millis(2300),
        reason: "GPU is lost".into(),
    };
    let lost = |stop: Option<StopReason>, exits: &[Option<Exit>]| Observed {
        gpu_lost: Some(loss.clone()),
        ..observed(stop, exits, Some(1))
    };
    let timed_out = StopReason::TimedOut {
        after: Duration::from_secs(60),
    };
    for (observed, checks, status) in [
        (lost(Some(timed_out), &[None]), vec![], CaseStatus::Error),
        (
            lost(None, &[Some(Exit::Code(1))]),
            vec![],
            CaseStatus::Error,
        ),
        (
            lost(None, &[Some(Exit::Code(0))]),
            vec![regression()],
            CaseStatus::Error,
        ),
        (
            lost(Some(StopReason::Interrupted), &[None]),
            vec![],
            CaseStatus::Interrupted,
        ),
    ] {
        let verdict = decide(&observed, &checks);
        assert_eq!(verdict.status, status, "{observed:?}");
        if status == CaseStatus::Error {
            assert_eq!(verdict.cause, Some(Cause::GpuLost(loss.clone())));
        }
    }
    // A budget breach that stopped the case before the loss is its cause.
    let breach = host_budget_check(
        Some(Bytes(2)),
        Some(HostFloor::Vmhwm),
        HostMethod::CgroupV1,
        Bytes(1),
    );
    let stopped = lost(
        Some(StopReason::BudgetExceeded {
            at: Duration::from_millis(1000),
        }),
        &[None],
    );
    assert_eq!(decide(&stopped, &[breach]).status, CaseStatus::Failed);

    let mut case = CaseResult::unmeasured("c".into());
    case.status = CaseStatus::Error;
    case.gpu_devices = vec![crate::measure::gpu::DeviceFigures {
        lost: Some(crate::measure::gpu::DeviceLoss {
            at_s: 2.3,
            reason: "GPU is lost".into(),
        }),
        ..serde_json::from_value(serde_json::json!({
            "index": 0, "uuid": "GPU-0", "name": "H100", "total_bytes": 1,
            "before_bytes": null, "device_peak_bytes": null, "peak_bytes": null,
            "method": "unavailable", "sampled_peak_bytes": null,
            "accounting_peak_bytes": null, "tainted_by": []
        }))
        .expect("a device")
    }];
    assert_eq!(failure_kind(&case, None), Some(FailureType::GpuLost));
}

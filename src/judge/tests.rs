//! `judge_case` from fixtures, without processes: repeats, the baseline,
//! capacity, drift and retries, each decided here and nowhere else.

use std::path::PathBuf;

use super::*;
use crate::baseline::{Drift, Lock, LockedCase};
use crate::capacity::{Probe, Tolerance};
use crate::measure::HostMethod;
use crate::results::{BaselineInfo, CheckOutcome, Exit, FailureType};
use crate::suite::DriftPolicy;

const MIB: u64 = 1024 * 1024;

fn case(toml_case: &str) -> Case {
    let text = format!("[suite]\nname = \"s\"\n[[case]]\nname = \"c\"\n{toml_case}\n");
    let path = std::path::Path::new("suite.toml");
    let suite = crate::suite::parse(&text, path, std::path::Path::new(".")).expect("a suite");
    suite.cases.into_iter().next().expect("one case")
}

fn run(host_mib: u64, exit: Exit) -> RunRecord {
    RunRecord::ended(Some(host_mib * MIB), &[Some(exit)])
}

fn lock(host_mib: u64, capacity: Option<u64>) -> Lock {
    let mut locked = LockedCase::empty();
    locked.host_peak_bytes = Some(host_mib * MIB);
    locked.host_peak_method = Some(HostMethod::CgroupV1);
    locked.capacity = capacity;
    locked.capacity_of = capacity.map(|_| crate::capacity::counted_as("batch", Some(8)));
    Lock::of("s", "t", [("c", locked)])
}

fn info(drift: Vec<Drift>, on_drift: DriftPolicy) -> BaselineInfo {
    BaselineInfo {
        path: PathBuf::from("s.lock"),
        locked_at: "t".into(),
        drift,
        on_drift,
        gpu_compared: true,
        testbed: None,
        removed: Vec::new(),
    }
}

fn finished(case: &Case, runs: Vec<RunRecord>) -> Finished<'_> {
    Finished {
        case,
        runs,
        capacity: None,
        shared: false,
        first_attempt: None,
        stopping: false,
    }
}

fn failed_names(result: &CaseResult) -> Vec<String> {
    result.failed_checks().map(|c| c.name()).collect()
}

#[test]
fn the_baseline_decides_a_clean_run_with_the_suites_tolerance() {
    let case = case("command = [\"x\"]\ntolerance = { relative = \"5%\", absolute = \"16 MiB\" }");
    let lock = lock(100, None);
    let info = info(Vec::new(), DriftPolicy::Warn);
    let baseline = Baseline {
        lock: Some(&lock),
        info: Some(&info),
        require: false,
        history: None,
    };
    // 100 MiB × 1.05 + 16 MiB = 121 MiB: at the bound passes, above fails.
    let table = [
        (121, CaseStatus::Passed, None),
        (122, CaseStatus::Failed, Some(FailureType::Regression)),
    ];
    for (host_mib, status, kind) in table {
        let judged = judge_case(
            finished(&case, vec![run(host_mib, Exit::Code(0))]),
            &baseline,
        );
        assert_eq!(judged.result.status, status, "{host_mib} MiB");
        assert_eq!(judged.result.failure_kind, kind);
        let host = &judged.result.checks[0];
        assert_eq!(
            host.tolerance.map(|t| (t.relative, t.absolute_bytes)),
            Some((0.05, 16 * MIB)),
            "the suite's tolerance applied, and recorded"
        );
        assert_eq!(host.baseline_bytes, Some(100 * MIB));
        assert_eq!(
            judged.result.tolerance.map(|t| t.host.absolute_bytes),
            Some(16 * MIB)
        );
        assert!(judged.retry.is_none());
    }
}

#[test]
fn no_lock_passes_unless_a_baseline_is_required() {
    let case = case("command = [\"x\"]");
    let judged = judge_case(
        finished(&case, vec![run(10, Exit::Code(0))]),
        &Baseline::NONE,
    );
    assert_eq!(judged.result.status, CaseStatus::Passed);
    assert!(judged.result.checks.is_empty());
    let required = Baseline {
        require: true,
        ..Baseline::NONE
    };
    let judged = judge_case(finished(&case, vec![run(10, Exit::Code(0))]), &required);
    assert_eq!(judged.result.status, CaseStatus::Failed);
    assert_eq!(failed_names(&judged.result), ["baseline"]);
    assert_eq!(judged.result.failure_kind, Some(FailureType::Baseline));
}

#[test]
fn a_run_that_failed_on_its_own_is_not_blamed_on_the_baseline_and_drift_is_said_once() {
    let case = case("command = [\"x\"]");
    let lock = lock(100, None);
    let torch = Drift {
        what: "torch".into(),
        before: "2.4.0".into(),
        after: "2.5.1".into(),
    };
    let info = info(vec![torch], DriftPolicy::Warn);
    let baseline = Baseline {
        lock: Some(&lock),
        info: Some(&info),
        require: false,
        history: None,
    };
    let crashed = judge_case(finished(&case, vec![run(500, Exit::Code(3))]), &baseline);
    assert!(matches!(
        crashed.verdict.cause,
        Some(Cause::Exited {
            exit: Exit::Code(3),
            ..
        })
    ));
    let regressed = judge_case(finished(&case, vec![run(500, Exit::Code(0))]), &baseline);
    assert_eq!(
        regressed.verdict.cause,
        Some(Cause::Judged {
            failed: vec![0],
            drift: info.drift.clone()
        })
    );
    // With on_drift = "fail" the drift check lists it: not said twice.
    let info = self::info(info.drift.clone(), DriftPolicy::Fail);
    let failing = Baseline {
        info: Some(&info),
        ..baseline
    };
    let judged = judge_case(finished(&case, vec![run(100, Exit::Code(0))]), &failing);
    assert_eq!(failed_names(&judged.result), ["environment.drift"]);
    assert_eq!(
        judged.verdict.cause,
        Some(Cause::Judged {
            failed: vec![1],
            drift: Vec::new()
        })
    );
}

#[test]
fn repeats_keep_the_largest_figure_and_the_first_failure() {
    let case = case("command = [\"x\"]\nrepeat = 3");
    let judged = judge_case(
        finished(
            &case,
            vec![
                run(10, Exit::Code(0)),
                run(30, Exit::Code(0)),
                run(20, Exit::Code(0)),
            ],
        ),
        &Baseline::NONE,
    );
    assert_eq!(judged.result.host.peak_bytes, Some(30 * MIB));
    assert_eq!(judged.result.repeats.len(), 3);
    assert_eq!(judged.result.wall_time_s, 3.0);
    let judged = judge_case(
        finished(&case, vec![run(10, Exit::Code(0)), run(5, Exit::Code(1))]),
        &Baseline::NONE,
    );
    assert_eq!(judged.result.status, CaseStatus::Failed);
    assert_eq!(judged.result.host.peak_bytes, Some(10 * MIB));
}

fn searched<'a>(case: &'a Case, value: u64, probes: &[(u64, bool)]) -> Finished<'a> {
    let capacity = Capacity {
        param: "batch".into(),
        step: Some(8),
        value: Some(value),
        complete: true,
        probes: probes
            .iter()
            .map(|&(value, passed)| Probe {
                host_peak_bytes: Some(MIB),
                wall_time_s: 0.5,
                ..Probe::ended(value, passed)
            })
            .collect(),
    };
    Finished {
        capacity: Some(capacity),
        ..finished(case, vec![run(200, Exit::Code(0))])
    }
}

#[test]
fn a_capacity_shrink_is_a_regression_and_a_moved_capacity_ungates_the_peaks() {
    let case = case(
        "command = [\"x\", \"{batch}\"]\nsearch = { param = \"batch\", min = 8, max = 1024, step = 8 }\ncapacity_tolerance = 1",
    );
    let lock = lock(100, Some(88));
    let info = info(Vec::new(), DriftPolicy::Warn);
    let baseline = Baseline {
        lock: Some(&lock),
        info: Some(&info),
        require: false,
        history: None,
    };
    // 88 with one step of 8 accepted: 80 passes, 72 fails.
    let shrank = judge_case(searched(&case, 72, &[(72, true), (80, false)]), &baseline);
    assert_eq!(shrank.result.status, CaseStatus::Failed);
    assert_eq!(shrank.result.failure_kind, Some(FailureType::Regression));
    let capacity = shrank
        .result
        .checks
        .iter()
        .find(|c| c.kind == CheckKind::Capacity)
        .expect("a capacity check");
    assert_eq!(capacity.outcome, Some(CheckOutcome::Breached));
    assert_eq!(shrank.result.wall_time_s, 1.0, "the search's time");
    // The host peak (200 MiB against 100) is of another size: not gated.
    let host = &shrank.result.checks[0];
    assert!(host.passed);
    assert_eq!(host.outcome, Some(CheckOutcome::NotGated));
    assert_eq!(failed_names(&shrank.result), ["baseline.capacity"]);

    let within = judge_case(searched(&case, 80, &[(80, true), (88, false)]), &baseline);
    assert_eq!(within.result.status, CaseStatus::Passed);
    assert_eq!(
        within.result.tolerance.and_then(|t| t.capacity),
        Some(Tolerance::Steps(1))
    );
    // At the locked value the peaks are of the same size, and gated.
    let same = judge_case(searched(&case, 88, &[(88, true), (96, false)]), &baseline);
    assert_eq!(failed_names(&same.result), ["baseline.host"]);
}

#[test]
fn a_failure_beside_others_is_retried_alone_and_a_pass_alone_is_flaky() {
    let case = case("command = [\"x\"]");
    let shared = Finished {
        shared: true,
        ..finished(&case, vec![run(10, Exit::Code(1))])
    };
    let first = judge_case(shared, &Baseline::NONE);
    assert_eq!(first.retry, Some(crate::judge::Retry::Shared));
    let stopping = Finished {
        shared: true,
        stopping: true,
        ..finished(&case, vec![run(10, Exit::Code(1))])
    };
    assert!(judge_case(stopping, &Baseline::NONE).retry.is_none());
    let alone = Finished {
        first_attempt: Some(first.result),
        ..finished(&case, vec![run(10, Exit::Code(0))])
    };
    let retried = judge_case(alone, &Baseline::NONE);
    assert!(retried.retry.is_none(), "a retry is not retried");
    assert!(retried.result.flaky());
    let failed_again = Finished {
        first_attempt: Some(retried.result.clone()),
        ..finished(&case, vec![run(10, Exit::Code(1))])
    };
    let judged = judge_case(failed_again, &Baseline::NONE);
    assert_eq!(judged.result.status, CaseStatus::Failed);
    assert!(!judged.result.flaky());
}

/// Regression: only a rise or fall was left ungated when the capacity
/// moved; a figure the probe could not measure still failed the case.
#[test]
fn a_moved_capacity_ungates_an_unknown_figure_too() {
    let case = case(
        "command = [\"x\", \"{batch}\"]\nsearch = { param = \"batch\", min = 8, max = 1024, step = 8 }",
    );
    let mut lock = lock(100, Some(88));
    if let Some(locked) = lock.cases.get_mut("c") {
        locked.gpu_peak_bytes = Some(4 * 1024 * MIB);
    }
    let info = info(Vec::new(), DriftPolicy::Warn);
    let baseline = Baseline {
        lock: Some(&lock),
        info: Some(&info),
        require: false,
        history: None,
    };
    // The GPU figure is unknown at 96 (the fixture's runs measure none).
    let grew = judge_case(searched(&case, 96, &[(96, true), (104, false)]), &baseline);
    assert_eq!(
        grew.result.status,
        CaseStatus::Passed,
        "{:?}",
        grew.result.checks
    );
    let gpu = grew
        .result
        .checks
        .iter()
        .find(|c| c.kind == CheckKind::Baseline(crate::baseline::Figure::Gpu))
        .expect("a gpu check");
    assert_eq!(gpu.outcome, Some(CheckOutcome::NotGated));
    // At the locked value it is what it is: unverifiable, and failing.
    let same = judge_case(searched(&case, 88, &[(88, true), (96, false)]), &baseline);
    assert!(failed_names(&same.result).contains(&"baseline.gpu".to_string()));
}

/// Regression: with no lock file the search's own check went missing.
#[test]
fn without_a_lock_a_search_that_found_nothing_says_so() {
    let case = case(
        "command = [\"x\", \"{batch}\"]\nsearch = { param = \"batch\", min = 8, max = 1024, step = 8 }",
    );
    let mut nothing = searched(&case, 8, &[(8, false)]);
    if let Some(capacity) = nothing.capacity.as_mut() {
        capacity.value = None;
    }
    let judged = judge_case(nothing, &Baseline::NONE);
    assert_eq!(failed_names(&judged.result), ["baseline.capacity"]);
    let found = judge_case(searched(&case, 96, &[(96, true)]), &Baseline::NONE);
    let capacity = found
        .result
        .checks
        .iter()
        .find(|c| c.kind == CheckKind::Capacity)
        .expect("the search's check");
    assert_eq!(capacity.outcome, Some(CheckOutcome::NoBaseline));
    assert!(capacity.passed);
}

/// Regression: a tainted GPU figure on another GPU model failed the case
/// under --require-baseline; a neighbour must never fail it.
#[test]
fn a_tainted_figure_never_fails_a_required_baseline() {
    let case = case("command = [\"x\"]");
    let mut lock = lock(100, None);
    if let Some(locked) = lock.cases.get_mut("c") {
        locked.gpu_peak_bytes = Some(1024 * MIB);
    }
    let mut info = info(Vec::new(), DriftPolicy::Warn);
    info.gpu_compared = false;
    let baseline = Baseline {
        lock: Some(&lock),
        info: Some(&info),
        require: true,
        history: None,
    };
    let mut tainted = run(100, Exit::Code(0));
    let mut device: crate::measure::gpu::DeviceFigures =
        serde_json::from_value(serde_json::json!({
            "index": 0, "uuid": "GPU-0", "name": "Fake", "total_bytes": 1u64 << 34,
            "before_bytes": 0, "device_peak_bytes": null, "peak_bytes": null,
            "method": "device-delta", "sampled_peak_bytes": null, "accounting_peak_bytes": null,
            "tainted_by": [{"pid": 4242, "name": "sleep"}]
        }))
        .expect("a device");
    device.peak_bytes = Some(2048 * MIB);
    tainted.gpu = Some(crate::measure::gpu::GpuFigures {
        peak_bytes: Some(2048 * MIB),
        method: crate::measure::gpu::GpuMethod::DeviceDelta,
        devices: vec![device],
        left_bytes: None,
        ranks: Default::default(),
        outside: None,
    });
    let judged = judge_case(finished(&case, vec![tainted]), &baseline);
    assert_eq!(
        judged.result.status,
        CaseStatus::Passed,
        "{:?}",
        judged.result.checks
    );
}

/// A capacity probe earns the first status of its runs that is not a
/// pass, the failure kind of the first run that has one, the largest
/// figures and the time of them all.
#[test]
fn a_probe_is_judged_from_its_runs() {
    // Each run's host peak (MiB) and exit; the probe's status, failure
    // kind and host peak (MiB).
    type Row<'a> = (&'a [(u64, Exit)], CaseStatus, Option<FailureType>, u64);
    let table: [Row<'_>; 3] = [
        (
            &[(10, Exit::Code(0)), (12, Exit::Code(0))],
            CaseStatus::Passed,
            None,
            12,
        ),
        (
            &[
                (10, Exit::Code(0)),
                (30, Exit::Code(1)),
                (20, Exit::Code(0)),
            ],
            CaseStatus::Failed,
            Some(FailureType::Crash),
            30,
        ),
        (
            &[(40, Exit::Code(2))],
            CaseStatus::Failed,
            Some(FailureType::Crash),
            40,
        ),
    ];
    for (runs, status, kind, peak_mib) in table {
        let runs: Vec<RunRecord> = runs.iter().map(|&(mib, exit)| run(mib, exit)).collect();
        let probe = probe(&case("command = [\"x\"]"), 16, &runs);
        assert_eq!(probe.value, 16);
        assert_eq!(probe.status, status, "{runs:?}");
        assert_eq!(probe.failure_kind, kind, "{runs:?}");
        assert_eq!(probe.host_peak_bytes, Some(peak_mib * MIB));
        assert_eq!(probe.wall_time_s, runs.len() as f64);
        assert_eq!(probe.passed(), status == CaseStatus::Passed);
    }
}

/// One rule for a whole run: a fault first, then an interruption, then a
/// case that did not pass, was never run, or a run that never ended.
#[test]
fn a_run_is_judged_once_from_its_results() {
    let passed = || {
        let mut results = crate::results::test_support::results_with_text("t");
        results.cases[0].status = CaseStatus::Passed;
        results.finished_at = Some("2026-12-03T00:01:00.000+00:00".into());
        results
    };
    assert_eq!(run_verdict(&passed()), RunVerdict::Passed);
    // A change to a passed run, and what the run then earns.
    type Change = fn(&mut crate::results::RunResults);
    let table: [(Change, RunVerdict); 5] = [
        (
            |r| r.cases[0].status = CaseStatus::Failed,
            RunVerdict::CasesFailed,
        ),
        (|r| r.not_run.push("later".into()), RunVerdict::CasesFailed),
        (|r| r.finished_at = None, RunVerdict::CasesFailed),
        (
            |r| {
                r.interrupted = true;
                r.cases[0].status = CaseStatus::Failed;
            },
            RunVerdict::Interrupted,
        ),
        (
            |r| {
                r.interrupted = true;
                r.fault = Some("disk full".into());
            },
            RunVerdict::Faulted,
        ),
    ];
    for (change, verdict) in table {
        let mut results = passed();
        change(&mut results);
        assert_eq!(run_verdict(&results), verdict);
    }
}

/// The process whose output explains a run: the instance that failed on
/// its own, else the first that failed, else instance 0; beside a server,
/// the server when it ended, was never ready, or nothing else failed.
#[test]
fn the_explaining_process_is_the_one_that_failed_on_its_own() {
    use crate::record::Focus;
    let ok = Some(Exit::Code(0));
    let bad = Some(Exit::Code(1));
    let killed = Some(Exit::Signal(15));
    let failed_1 = Some(StopReason::InstanceFailed { index: 1 });
    let server_gone = Some(StopReason::ServerExited {
        exit: Exit::Code(1),
        at: std::time::Duration::ZERO,
        ready: true,
    });
    let breached = Some(StopReason::BudgetExceeded {
        at: std::time::Duration::ZERO,
    });
    // (stop, exits, serving, focus)
    let table = [
        (None, vec![ok, ok], false, Focus::Instance(0)),
        (None, vec![ok, bad], false, Focus::Instance(1)),
        // The one that failed first, not the ones stopped because of it.
        (
            failed_1.clone(),
            vec![killed, bad, killed],
            false,
            Focus::Instance(1),
        ),
        (breached.clone(), vec![killed], false, Focus::Instance(0)),
        (None, vec![], false, Focus::Instance(0)),
        (server_gone, vec![killed], true, Focus::Server),
        (breached, vec![killed], true, Focus::Instance(0)),
        (None, vec![ok], true, Focus::Server),
        (failed_1, vec![ok, bad], true, Focus::Instance(1)),
        (None, vec![bad], true, Focus::Instance(0)),
    ];
    for (stop, exits, serving, focus) in table {
        assert_eq!(
            crate::judge::focus(stop.as_ref(), &exits, serving),
            focus,
            "{stop:?} {exits:?} serving {serving}"
        );
    }
}

/// A run is diagnosed from its explaining process's scanned output: an
/// OOM it printed, a kill it took, its supervisor lost — and not at all
/// when a budget breach stopped it.
#[test]
fn a_run_is_diagnosed_from_what_its_explaining_process_left() {
    use crate::diagnose::FailureKind;
    let case = case("command = [\"x\"]\nbudget = { host = \"100 MiB\" }");
    let oom = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\n";
    let scanned = |run: &mut RunRecord, text: &str| {
        run.focus.scan = Some(crate::diagnose::scan(text.as_bytes()));
    };
    let mut printed_oom = RunRecord::ended(Some(10 * MIB), &[Some(Exit::Code(1))]);
    scanned(&mut printed_oom, oom);
    let silent_kill = RunRecord::ended(Some(10 * MIB), &[Some(Exit::Signal(9))]);
    let mut supervisor_lost = RunRecord::ended(Some(10 * MIB), &[Some(Exit::Signal(9))]);
    supervisor_lost.instances[0].supervisor_lost = true;
    let mut over_budget = RunRecord::ended(Some(200 * MIB), &[Some(Exit::Signal(15))]);
    over_budget.stop = Some(StopReason::BudgetExceeded {
        at: std::time::Duration::from_secs(1),
    });
    scanned(&mut over_budget, oom);
    let table = [
        (
            printed_oom,
            Some(FailureKind::GpuOom),
            Some(FailureType::GpuOom),
        ),
        (
            silent_kill,
            Some(FailureKind::HostOomSuspected),
            Some(FailureType::HostOomSuspected),
        ),
        (
            supervisor_lost,
            Some(FailureKind::SupervisorKilled),
            Some(FailureType::SupervisorKilled),
        ),
        (over_budget, None, Some(FailureType::Budget)),
    ];
    for (run, diagnosed, kind) in table {
        let judged = judge_run(&case, &run);
        assert_eq!(judged.diagnosis.map(|d| d.kind), diagnosed);
        assert_eq!(judged.failure_kind, kind);
    }
}

/// The live stop: a figure so far over its budget stops the case; one
/// not known this tick, or a tainted device's (left out of `Live`), never
/// does; what a case leaves behind is judged after it.
#[test]
fn a_tick_over_a_budget_stops_the_case_and_an_unknown_figure_does_not() {
    use crate::measure::live::{Live, LiveDevice};
    let case = case(
        "command = [\"x\"]\nbudget = { host = \"100 MiB\", gpu = \"1 GiB\", gpu_rank = \"512 MiB\", gpu_fraction = 0.5, gpu_left = \"1 MiB\" }",
    );
    let device = |live_mib: u64| LiveDevice {
        usable_bytes: 1536 * MIB,
        live_bytes: live_mib * MIB,
    };
    let quiet = Live {
        host_peak: Some(crate::units::Bytes(50 * MIB)),
        gpu_total: Some(600 * MIB),
        largest_rank: Some(300 * MIB),
        devices: vec![device(600)],
    };
    // (what this tick read, stopped)
    let table = [
        (quiet.clone(), false),
        (Live::default(), false),
        (
            Live {
                host_peak: Some(crate::units::Bytes(100 * MIB)),
                ..quiet.clone()
            },
            false,
        ),
        (
            Live {
                host_peak: Some(crate::units::Bytes(100 * MIB + 1)),
                ..quiet.clone()
            },
            true,
        ),
        (
            Live {
                gpu_total: Some(1024 * MIB + 1),
                ..quiet.clone()
            },
            true,
        ),
        (
            Live {
                gpu_total: None,
                ..quiet.clone()
            },
            false,
        ),
        (
            Live {
                largest_rank: Some(513 * MIB),
                ..quiet.clone()
            },
            true,
        ),
        // Half of 1.5 GiB usable is 768 MiB.
        (
            Live {
                devices: vec![device(600), device(769)],
                ..quiet.clone()
            },
            true,
        ),
        (
            Live {
                devices: vec![device(768)],
                ..quiet.clone()
            },
            false,
        ),
    ];
    for (live, stopped) in table {
        assert_eq!(budget_breached(&case.budget, &live), stopped, "{live:?}");
    }
}

/// A case is held against the runs of its own creep window, within the
/// widest one read: old low runs set a 60-day window's ratchet, not a
/// 7-day one's.
#[test]
fn creep_holds_each_case_to_its_own_window() {
    use crate::history::pasts::{HOST_PEAK, Pasts};
    use crate::history::{Point, RunHead, Series};
    const DAY: i64 = 86_400_000;
    let now_ms = 100 * DAY;
    // Three runs 40 days ago at 100 MiB, three a day ago at 130 MiB.
    let starts = [60, 59, 58, 99, 99, 99];
    let values = [100, 100, 100, 130, 130, 130];
    let series = Series {
        runs: starts
            .iter()
            .enumerate()
            .map(|(i, day)| RunHead {
                run_id: format!("r{i}"),
                started_at: format!("day {day}"),
                started_ms: day * DAY + i as i64,
                commit: None,
                branch: Some("main".into()),
                passed: true,
            })
            .collect(),
        cases: vec![("c".into(), None)],
        figures: vec![HOST_PEAK.into()],
        points: values
            .iter()
            .enumerate()
            .map(|(i, mib)| Point {
                run: i as u32,
                case: 0,
                figure: 0,
                value: (mib * MIB) as f64,
                passed: true,
            })
            .collect(),
    };
    let pasts = Pasts::new(series, Vec::new(), Some("main".into()), (0, now_ms));
    for (window, passed) in [("7d", true), ("60d", false)] {
        let case = case(&format!(
            "command = [\"x\"]\ncreep = {{ limit = \"10%\", window = \"{window}\" }}"
        ));
        let baseline = Baseline {
            history: Some(&pasts),
            ..Baseline::NONE
        };
        let judged = judge_case(finished(&case, vec![run(135, Exit::Code(0))]), &baseline);
        let creep = judged
            .result
            .checks
            .iter()
            .find(|c| c.kind == CheckKind::Creep(crate::baseline::Figure::Host))
            .expect("a creep check");
        assert_eq!(creep.passed, passed, "{window}: {creep:?}");
        let ratchet = if passed { 130 } else { 100 };
        assert_eq!(creep.limit_bytes, Some(ratchet * MIB), "{window}");
        assert_eq!(
            judged.result.failure_kind,
            (!passed).then_some(FailureType::Creep),
            "{window}"
        );
    }
}

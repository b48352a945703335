use std::time::Duration;

use super::*;
use crate::baseline::{Figure, compare};
use crate::judge::{
    Against, Found, Gated, Observed, StopReason, against_lock, decide, gpu_budget_check,
    headroom_check, host_budget_check,
};
use crate::measure::gpu::{ForeignPid, GpuMethod};
use crate::measure::host::{HostFloor, HostMethod};
use crate::results::CaseTolerances;
use crate::suite::{Tolerance, Tolerances};

const MIB: u64 = 1024 * 1024;

fn worded(mut check: Check) -> Check {
    check.message = check_message(&check);
    check
}

fn message(observed: &Observed, checks: &[Check]) -> Option<String> {
    let checks: Vec<Check> = checks.iter().cloned().map(worded).collect();
    case_message(&decide(observed, &checks), &checks, false)
}

fn observed(stop: Option<StopReason>, exits: &[Option<Exit>], peak: Option<u64>) -> Observed {
    Observed::ended(stop, exits, peak)
}

#[test]
fn budgets_word_their_figures_and_method() {
    let limit = Bytes(512 * MIB);
    let over = host_budget_check(
        Some(Bytes(612 * MIB)),
        Some(HostFloor::Vmhwm),
        HostMethod::CgroupV1,
        limit,
    );
    assert_eq!(
        check_message(&over),
        "host peak 612.0 MiB (vmhwm, cgroup-v1) exceeded budget 512.0 MiB (by 100.0 MiB)"
    );
    let within = host_budget_check(
        Some(limit),
        Some(HostFloor::Vmhwm),
        HostMethod::CgroupV1,
        limit,
    );
    assert!(within.passed);
    assert_eq!(
        check_message(&within),
        "host peak 512.0 MiB (vmhwm, cgroup-v1) within budget 512.0 MiB"
    );
    let unknown = host_budget_check(None, Some(HostFloor::Vmhwm), HostMethod::CgroupV1, limit);
    assert!(!unknown.passed);
    assert_eq!(
        check_message(&unknown),
        "host memory could not be measured, so budget 512.0 MiB is unverified"
    );
    // One byte over fails, exactly at the budget passes, zero is a budget.
    assert!(
        !host_budget_check(
            Some(Bytes(512 * MIB + 1)),
            None,
            HostMethod::CgroupV2,
            limit
        )
        .passed
    );
    assert!(!host_budget_check(Some(Bytes(1)), None, HostMethod::CgroupV2, Bytes(0)).passed);
}

#[test]
fn tainted_gpu_figures_are_reported_not_judged() {
    let limit = Bytes(512 * MIB);
    let sleep = || ForeignPid {
        pid: 4242,
        name: Some("sleep".into()),
    };
    let left_out = || {
        vec![crate::results::TaintedDevice {
            index: 0,
            by: vec![sleep()],
        }]
    };
    let table: &[(Option<u64>, Gated, bool, &str)] = &[
        (Some(513 * MIB), Gated::Whole, false, "exceeded budget"),
        (Some(512 * MIB), Gated::Whole, true, "within budget"),
        (None, Gated::Whole, false, "unverified"),
        (
            Some(4096 * MIB),
            Gated::Nothing {
                left_out: left_out(),
            },
            true,
            "gpu peak 4.00 GiB (device-delta) not gated against budget 512.0 MiB: GPU 0 tainted by pid 4242 (sleep), whose memory may be in it",
        ),
        (
            None,
            Gated::Nothing {
                left_out: left_out(),
            },
            true,
            "gpu peak unknown (device-delta) not gated",
        ),
        // The other devices' figures are still judged, one byte over
        // fails, exactly at the budget passes.
        (
            Some(4096 * MIB),
            Gated::Rest {
                rest: Some(Bytes(512 * MIB + 1)),
                left_out: left_out(),
            },
            false,
            "(device-delta, without GPU 0 tainted by pid 4242 (sleep): not gated) exceeded budget",
        ),
        (
            Some(4096 * MIB),
            Gated::Rest {
                rest: Some(limit),
                left_out: left_out(),
            },
            true,
            "gpu peak 512.0 MiB (device-delta, without GPU 0 tainted by pid 4242 (sleep): not gated) within budget",
        ),
        (
            Some(4096 * MIB),
            Gated::Rest {
                rest: None,
                left_out: left_out(),
            },
            false,
            "unverified",
        ),
    ];
    for (peak, gated, passes, fragment) in table {
        let check = gpu_budget_check(peak.map(Bytes), Some(GpuMethod::DeviceDelta), gated, limit);
        let message = check_message(&check);
        assert_eq!(check.passed, *passes, "{gated:?}: {message}");
        assert!(
            message.contains(fragment),
            "`{fragment}` not in `{message}`"
        );
        assert_eq!(check.limit_bytes, Some(512 * MIB));
    }

    let total = Bytes(8 * 1024 * MIB);
    let memory = crate::judge::DeviceMemory {
        total,
        reserved: None,
    };
    let h100 = || crate::results::Device {
        index: 0,
        name: "H100".into(),
    };
    let headroom = |peak: Option<u64>, taint: &[ForeignPid]| {
        headroom_check(
            h100(),
            peak.map(Bytes),
            GpuMethod::DeviceDelta,
            taint,
            memory,
            0.5,
        )
    };
    let taint = &[sleep()];
    assert!(!headroom(Some(4096 * MIB + 1), &[]).passed);
    assert!(headroom(Some(4096 * MIB), &[]).passed);
    let tainted = headroom(Some(8 * 1024 * MIB), taint);
    assert!(tainted.passed);
    assert_eq!(
        check_message(&tainted),
        "GPU 0 (H100) peak 8.00 GiB (device-delta) is 100.0% of its 8.00 GiB, not gated against the 50% headroom limit: tainted by pid 4242 (sleep), whose memory may be in it"
    );
    assert!(!headroom(None, taint).passed, "unknown stays unverified");

    // The driver's reserve is no process's to have: half of 8 GiB less a
    // reserved 1 GiB is 3.5 GiB, so 3.6 GiB breaches it.
    let reserved = |peak: u64| {
        headroom_check(
            h100(),
            Some(Bytes(peak)),
            GpuMethod::Sampled { interval_ms: 50 },
            &[],
            crate::judge::DeviceMemory {
                total,
                reserved: Some(Bytes(1024 * MIB)),
            },
            0.5,
        )
    };
    let over = reserved(3686 * MIB);
    assert!(!over.passed);
    assert_eq!(over.limit_bytes, Some(3584 * MIB));
    assert_eq!(
        check_message(&over),
        "GPU 0 (H100) peak 3.60 GiB (sampled@50ms) is 51.4% of its 7.00 GiB usable (8.00 GiB less 1.00 GiB the driver reserves), above the 50% headroom limit (3.50 GiB)"
    );
    assert!(reserved(3584 * MIB).passed);
}

#[test]
fn a_cases_message_says_its_cause() {
    let ok = Some(Exit::Code(0));
    let failing = host_budget_check(
        Some(Bytes(2)),
        Some(HostFloor::PssSum),
        HostMethod::ProcfsPss,
        Bytes(1),
    );
    let table: Vec<(Observed, Vec<Check>, &str)> = vec![
        (
            observed(
                Some(StopReason::BudgetExceeded {
                    at: Duration::from_millis(1200),
                }),
                &[Some(Exit::Signal(15))],
                Some(2),
            ),
            vec![failing.clone()],
            "exceeded budget 1 B (by 1 B) — stopped at 1.2s",
        ),
        (
            observed(None, &[Some(Exit::Code(3))], Some(MIB)),
            vec![],
            "the command exited with code 3",
        ),
        (
            observed(None, &[ok, Some(Exit::Code(1))], Some(MIB)),
            vec![],
            "instance 1 exited with code 1",
        ),
        (
            observed(None, &[Some(Exit::Signal(9))], Some(MIB)),
            vec![],
            "the command was killed by SIGKILL (signal 9) — not sent by oomgate: suspect the host's out-of-memory killer",
        ),
        (
            observed(None, &[Some(Exit::Signal(11))], None),
            vec![],
            "the command was killed by SIGSEGV (signal 11)",
        ),
        (
            observed(
                Some(StopReason::TimedOut {
                    after: Duration::from_secs(120),
                }),
                &[Some(Exit::Signal(9))],
                Some(MIB),
            ),
            vec![failing.clone()],
            "timed out after 2m00s",
        ),
        (
            observed(
                Some(StopReason::Interrupted),
                &[Some(Exit::Signal(15))],
                None,
            ),
            vec![failing],
            "interrupted before it finished; host peak unknown so far",
        ),
        (
            observed(
                Some(StopReason::ServerNotReady {
                    after: Duration::from_secs(300),
                    target: "tcp://127.0.0.1:9".into(),
                    last: Some("connection refused".into()),
                }),
                &[None],
                None,
            ),
            vec![],
            "the server was not ready after 5m00s (waited for tcp://127.0.0.1:9: connection refused)",
        ),
        (
            observed(
                Some(StopReason::ServerExited {
                    exit: Exit::Code(1),
                    at: Duration::from_millis(4100),
                    ready: true,
                }),
                &[Some(Exit::Signal(15))],
                None,
            ),
            vec![],
            "the server exited with code 1 under load, 4.1s into the case",
        ),
    ];
    for (observed, checks, fragment) in table {
        let message = message(&observed, &checks).unwrap_or_default();
        assert!(
            message.contains(fragment),
            "`{fragment}` not in `{message}`"
        );
    }
    assert_eq!(message(&observed(None, &[ok], None), &[]), None);
}

fn lock_entry(host: u64, capacity: Option<u64>) -> crate::baseline::LockedCase {
    let mut locked = crate::baseline::LockedCase::empty();
    locked.host_peak_bytes = Some(host);
    locked.host_peak_method = Some(crate::measure::HostMethod::CgroupV1);
    locked.capacity = capacity;
    locked.capacity_of = capacity.map(|_| crate::capacity::counted_as("batch", Some(8)));
    locked
}

fn now(host: u64) -> crate::baseline::CaseNow<'static> {
    static EMPTY: std::sync::LazyLock<std::collections::BTreeMap<String, String>> =
        std::sync::LazyLock::new(Default::default);
    crate::baseline::CaseNow {
        host: Some(host),
        host_method: crate::measure::HostMethod::CgroupV1,
        host_source: None,
        host_floors: Default::default(),
        working: None,
        gpu: None,
        gpu_method: None,
        gpu_tainted: false,
        allocated: None,
        outside: None,
        command: &[],
        server: None,
        params: &EMPTY,
        env: &EMPTY,
        allocator_env: &EMPTY,
        outputs: &[],
    }
}

/// A comparison with this locked entry of `s.lock`, nothing required.
fn against(locked: &crate::baseline::LockedCase) -> Against<'_> {
    Against {
        locked: Some(locked),
        lock_path: std::path::Path::new("s.lock"),
        require: false,
        gpu_compared: true,
        testbed: None,
        now_from_lock: false,
    }
}

fn tolerances(relative: f64, absolute_mib: u64) -> CaseTolerances {
    let t = Tolerance {
        relative,
        absolute: Bytes::from_mib(absolute_mib),
        spread_k: 3.0,
    };
    CaseTolerances::from(Tolerances {
        host: t,
        gpu: t,
        working: t,
        outside: t,
    })
}

/// Regression: the environment's drift was repeated on every figure's
/// line; it is said once, after the case's failed judgements.
#[test]
fn a_regression_names_figure_baseline_delta_and_tolerance_and_drift_once() {
    let gib = 1024 * MIB;
    let locked = lock_entry(38 * gib, None);
    let against = against(&locked);
    let (_, checks) = against_lock(against, now(41 * gib + gib / 5), tolerances(0.05, 64), None);
    let checks: Vec<Check> = checks.into_iter().map(worded).collect();
    assert_eq!(
        checks[0].message,
        "host peak 41.2 GiB > baseline 38.0 GiB (+8.4%, tolerance 5% + 64.0 MiB)"
    );
    let mut verdict = decide(&observed(None, &[Some(Exit::Code(0))], None), &checks);
    if let Some(crate::judge::Cause::Judged { drift, .. }) = &mut verdict.cause {
        *drift = vec![crate::baseline::Drift {
            what: "torch".into(),
            before: "2.4.0".into(),
            after: "2.5.1".into(),
        }];
    }
    assert_eq!(
        case_message(&verdict, &checks, false).as_deref(),
        Some(
            "host peak 41.2 GiB > baseline 38.0 GiB (+8.4%, tolerance 5% + 64.0 MiB); environment changes since the baseline: torch 2.4.0 → 2.5.1"
        )
    );
    let improved =
        worded(against_lock(against, now(500 * MIB), tolerances(0.1, 64), None).1[0].clone());
    assert!(improved.message.contains("-98.7%"), "{}", improved.message);
    assert!(improved.message.contains("re-lock to tighten the gate"));
    let zero = lock_entry(0, None);
    let from_zero = Against {
        locked: Some(&zero),
        ..against
    };
    let check =
        worded(against_lock(from_zero, now(100 * MIB), tolerances(0.05, 64), None).1[0].clone());
    assert!(check.message.contains("from zero"), "{}", check.message);
    // The figure comparison's own outcome agrees.
    assert_eq!(
        compare::compare(
            Figure::Host,
            Some(100 * MIB),
            Some(0),
            Tolerance {
                relative: 0.05,
                absolute: Bytes::from_mib(64),
                spread_k: 3.0,
            },
            None,
        )
        .outcome,
        crate::baseline::Outcome::Regressed
    );
}

/// Regression: a capacity shrink said "largest batch that fits" three
/// times in one case's lines (the search's line says it once; the check
/// says what moved).
#[test]
fn a_capacity_shrink_is_worded_once_with_its_bound() {
    let locked = lock_entry(MIB, Some(88));
    let against = against(&locked);
    let found = |value: u64| crate::capacity::Capacity {
        param: "batch".into(),
        step: Some(8),
        value: Some(value),
        complete: true,
        probes: Vec::new(),
    };
    let judge = |value: u64, steps: u64| {
        let mut t = tolerances(0.1, 64);
        t.capacity = Some(crate::capacity::Tolerance::Steps(steps));
        let capacity = found(value);
        let (_, checks) = against_lock(
            against,
            now(MIB),
            t,
            Some(Found {
                capacity: &capacity,
                max: None,
            }),
        );
        worded(
            checks
                .into_iter()
                .find(|c| c.kind == CheckKind::Capacity)
                .expect("a capacity check"),
        )
    };
    let shrank = judge(72, 0);
    assert!(!shrank.passed);
    assert_eq!(shrank.outcome, Some(CheckOutcome::Breached));
    assert_eq!(
        shrank.message,
        "capacity regressed: batch 88 → 72 (capacity_tolerance 0 steps accepts 88 and up)"
    );
    let within = judge(80, 1);
    assert!(within.passed, "{}", within.message);
    assert_eq!(
        within.message,
        "capacity batch 88 → 80, within capacity_tolerance 1 step"
    );
    let grew = judge(96, 0);
    assert_eq!(grew.outcome, Some(CheckOutcome::Improved));
    assert!(
        grew.message.contains("re-lock to keep it"),
        "{}",
        grew.message
    );
    assert_eq!(judge(88, 0).message, "capacity batch 88, as locked");
}

/// Past its bound on a floor that counts file pages, within on the
/// anonymous + shmem memory: passed, and the words say why.
#[test]
fn growth_in_file_pages_alone_is_worded_as_what_the_page_cache_held() {
    use crate::measure::host::{HostFloor, HostFloors};
    let floors = |vmhwm: u64, anon: u64| HostFloors {
        cgroup_anon_shmem_bytes: Some(anon * MIB),
        vmhwm_bytes: Some(vmhwm * MIB),
        ..HostFloors::default()
    };
    let mut locked = lock_entry(541 * MIB, None);
    locked.host_peak_source = Some(HostFloor::Vmhwm);
    locked.host_floors = floors(541, 300).named();
    locked.host_working_peak_bytes = Some(300 * MIB);
    let mut run = now(737 * MIB);
    run.host_source = Some(HostFloor::Vmhwm);
    run.host_floors = floors(737, 301);
    run.working = Some(301 * MIB);
    let (_, checks) = against_lock(against(&locked), run, tolerances(0.05, 16), None);
    let check = worded(checks[0].clone());
    assert!(check.passed);
    assert_eq!(
        check.message,
        "host peak 737.0 MiB vs baseline 541.0 MiB (+36.2%, beyond 5% + 16.0 MiB) in file pages only: its working memory, 301.0 MiB vs 300.0 MiB, is within its own tolerance, so what grew is what the page cache held, not a regression"
    );
    // A floor past its bound while the gated figure is not: named with
    // its own two figures, and the delta theirs.
    let mut locked = lock_entry(900 * MIB, None);
    locked.host_floors = HostFloors {
        pss_sum_bytes: Some(300 * MIB),
        vmhwm_bytes: Some(900 * MIB),
        ..HostFloors::default()
    }
    .named();
    let mut run = now(900 * MIB);
    run.host_floors = HostFloors {
        pss_sum_bytes: Some(500 * MIB),
        vmhwm_bytes: Some(900 * MIB),
        ..HostFloors::default()
    };
    let (_, checks) = against_lock(against(&locked), run, tolerances(0.10, 64), None);
    let check = worded(checks[0].clone());
    assert!(!check.passed);
    assert_eq!(
        check.message,
        "host peak 900.0 MiB vs baseline 900.0 MiB (+0.0%), but its floor pss-sum (the tree's PSS summed) grew 300.0 MiB → 500.0 MiB (+66.7%, beyond 394.0 MiB)"
    );
}

/// Repeats measured by different host methods say so in the host note,
/// once however often the case is worded (a merge words it again).
#[test]
fn repeats_measured_by_different_methods_say_so_once() {
    use crate::results::{CaseStatus, RepeatFigures};
    let repeat = |method| RepeatFigures {
        status: CaseStatus::Passed,
        wall_time_s: 1.0,
        host_peak_bytes: Some(MIB),
        gpu_peak_bytes: None,
        host_working_peak_bytes: None,
        host_method: Some(method),
    };
    let passed = Verdict {
        status: CaseStatus::Passed,
        cause: None,
    };
    let said = "the repeats' host figures were measured by different methods";
    // (the repeats' methods, the note before, the note after)
    let table = [
        (vec![HostMethod::CgroupV1, HostMethod::CgroupV1], None, None),
        (
            vec![HostMethod::CgroupV1, HostMethod::ProcfsPss],
            None,
            Some(said.to_string()),
        ),
        (
            vec![HostMethod::ProcfsPss, HostMethod::CgroupV1],
            Some("no cgroup"),
            Some(format!("no cgroup; {said}")),
        ),
    ];
    for (methods, before, after) in table {
        let mut result = CaseResult::unmeasured("c".into());
        result.status = CaseStatus::Passed;
        result.repeats = methods.iter().map(|m| repeat(*m)).collect();
        result.host.note = before.map(String::from);
        word_case(&mut result, &passed, None);
        word_case(&mut result, &passed, None);
        assert_eq!(result.host.note, after, "{methods:?}");
    }
}

#[test]
fn a_wait_that_ran_out_names_each_device_still_held_and_by_whom() {
    use crate::measure::gpu::settle::{Settle, SettledDevice};
    let device = |index, above: Option<u64>, held_by: Vec<ForeignPid>| SettledDevice {
        index,
        uuid: format!("GPU-{index}"),
        above_idle_bytes: above,
        held_by,
    };
    let mut settle = Settle {
        waited_s: 30.0,
        settled: true,
        devices: vec![
            device(
                0,
                Some(2 << 30),
                vec![ForeignPid {
                    pid: 4242,
                    name: Some("python3".into()),
                }],
            ),
            device(1, Some(1 << 20), Vec::new()),
            device(2, Some(1 << 30), Vec::new()),
        ],
    };
    assert_eq!(super::unsettled(&settle), None);
    settle.settled = false;
    assert_eq!(
        super::unsettled(&settle).as_deref(),
        Some(
            "GPU 0 still held 2.00 GiB above its idle level (pid 4242 (python3)); \
             GPU 2 still held 1.00 GiB above its idle level (no process listed: memory the driver has not returned) \
             after waiting 30.0s for it to settle; the case started anyway"
        )
    );
}

#[test]
fn each_host_note_is_worded_and_they_are_joined() {
    use crate::measure::host::HostNote;
    assert_eq!(super::host_notes(&[]), None);
    let notes = [
        HostNote::NoCgroup {
            client: false,
            error: "Permission denied (os error 13)".into(),
        },
        HostNote::NotJoined {
            instance: "instance 1".into(),
            error: "No space left on device (os error 28)".into(),
        },
        HostNote::SweptEvery {
            tree: 200,
            gap: std::time::Duration::from_millis(2500),
            cpu_share: 0.05,
        },
        HostNote::CgroupNotRemoved {
            error: "Device or resource busy (os error 16)".into(),
        },
        HostNote::HwmNotReset {
            pid: 42,
            error: "Permission denied (os error 13)".into(),
        },
    ];
    let said = super::host_notes(&notes).expect("words");
    assert_eq!(
        said,
        [
            "cannot create the case's memory cgroup (Permission denied (os error 13)); measured from /proc",
            "instance 1 could not join its memory cgroup (No space left on device (os error 28)); measured from /proc",
            "a tree of more than 200 processes was swept for PSS and VmHWM only every 2.5 s, to keep the sweeps within 5% of a core: a plateau shorter than that may be missing from those floors",
            "the case cgroup could not be removed: Device or resource busy (os error 16)",
            "the session's VmHWM could not be reset (/proc/42/clear_refs: Permission denied (os error 13))",
        ]
        .join("; ")
    );
}

#[test]
fn numbers_from_the_logs_are_grouped_as_a_reader_writes_them() {
    use super::output_number;
    assert_eq!(output_number(1_489_281.0), "1,489,281");
    assert_eq!(output_number(1_474_388.19), "1,474,388.19");
    assert_eq!(output_number(-75_000.0), "-75,000");
    assert_eq!(output_number(1.68), "1.68");
    assert_eq!(output_number(999.0), "999");
    assert_eq!(output_number(0.0), "0");
    assert_eq!(output_number(1e300), "1e300");
}

/// A GPU OOM of a case whose allocator figures were set against NVML's:
/// the hint says what the allocator held and what was outside it.
#[test]
fn a_gpu_oom_says_what_was_outside_the_allocator() {
    use crate::measure::outside::{Outside, OutsideFigures};
    let gib = 1024 * MIB;
    let result = CaseResult {
        outside_allocator: Some(OutsideFigures {
            case: Outside {
                peak_bytes: 9 * gib + 512 * MIB,
                bytes: 9 * gib + 300 * MIB,
                gpu_bytes: 50 * gib + 300 * MIB,
                reserved_bytes: 41 * gib,
                fragmentation_bytes: Some(2 * gib),
            },
            moments: 40,
            processes: Vec::new(),
            ranks: Default::default(),
        }),
        ..CaseResult::default()
    };
    let diagnosis = crate::diagnose::Diagnosis {
        kind: FailureKind::GpuOom,
        oom: None,
        exception: None,
        rank: None,
        oom_ranks: Vec::new(),
        hints: Vec::new(),
    };
    let said = hints(&result, &diagnosis);
    assert!(
        said.contains(&"At its GPU peak the allocator held 41.0 GiB, 2.00 GiB of it reserved and not allocated; 9.29 GiB more were outside it (NVML 50.3 GiB for the case's processes): NCCL buffers, CUDA graphs, cuBLAS workspaces or the CUDA context. The most outside it at any moment: 9.50 GiB.".to_string()),
        "{said:#?}"
    );
}

/// The memory outside the allocator is not compared where the GPU peak is
/// not, and its sentence names it, not the GPU peak.
#[test]
fn an_uncompared_outside_figure_is_named_as_itself() {
    let check = Check::new(
        CheckKind::Baseline(Figure::Outside),
        true,
        CheckOutcome::NotCompared,
    )
    .figure(Some(580 * MIB))
    .facts(Facts::Baseline {
        not_compared: Some(crate::baseline::NotCompared::GpuModels),
        required: false,
        spread: None,
        floor_breach: None,
        anon_within: None,
    });
    assert_eq!(
        check_message(&check),
        "outside_allocator peak not compared: the GPU models differ from the baseline's (use --compare-across-gpus to compare anyway)"
    );
}

//! Snapshot tests of the sentences themselves: every kind of check in each
//! of its outcomes, and every cause of a case that did not pass, worded
//! by `words` from data built here. The integration tests assert a
//! verdict on results.json's fields (a check's name, outcome, figure and
//! limit); what a reader is told of it is pinned here, once, so a change
//! of wording is one reviewed diff rather than a test in every file.

use std::time::Duration;

use crate::baseline::{AnonWithin, AppliedTolerance, Drift, Figure, NotCompared, SpreadBound};
use crate::judge::{self, Cause, DeviceMemory, Gated, GpuLoss, Verdict, Who};
use crate::leak::{LeakFigures, LeakSource};
use crate::measure::gpu::{ForeignPid, GpuMethod};
use crate::measure::host::{HostFloor, HostMethod};
use crate::results::{
    CaseStatus, Check, CheckKind, CheckOutcome, Device, Facts, Measured, TaintedDevice,
};
use crate::suite::DriftPolicy;
use crate::units::Bytes;
use crate::vocabulary::Exit;
use crate::vocabulary::OrWritten;

const MIB: u64 = 1024 * 1024;
const SAMPLED: GpuMethod = GpuMethod::Sampled { interval_ms: 50 };
const VMHWM: Option<HostFloor> = Some(HostFloor::Vmhwm);
const CGROUP_V1: HostMethod = HostMethod::CgroupV1;

/// Two processes oomgate did not start on GPU 0, one whose name and
/// memory are unknown.
fn foreign_processes() -> Vec<crate::measure::gpu::ForeignProcess> {
    let process = |pid, name: Option<&str>, used| crate::measure::gpu::ForeignProcess {
        pid,
        name: name.map(str::to_string),
        device_index: 0,
        device_uuid: "GPU-aaaaaaaa".into(),
        used_bytes: used,
    };
    vec![
        process(4242, Some("python3"), Some(2 * GIB)),
        process(4343, None, None),
    ]
}

/// Every warning a case's run can give, and every note on how
/// `CUDA_VISIBLE_DEVICES` was read or on a device's rise, as the terminal
/// shows them.
#[test]
fn every_warnings_sentence() {
    use crate::measure::gpu::DeviceNote;
    use crate::measure::gpu::settle::{Settle, SettledDevice};
    use crate::measure::host::HostNote;
    use crate::measure::visible::{SelectionNote, Unusable};
    use crate::record::Warning;
    let uuid = |c: char| format!("GPU-{}", c.to_string().repeat(8));
    let selections = [
        SelectionNote::MigFirstInstance {
            gpu: 0,
            instance: "MIG-11111111".into(),
        },
        SelectionNote::MigUnopened {
            gpu: 1,
            entry: None,
        },
        SelectionNote::MigUnopened {
            gpu: 1,
            entry: Some("1".into()),
        },
        SelectionNote::MigUnlisted {
            entry: "MIG-3333".into(),
        },
        SelectionNote::Repeated { position: 0 },
        SelectionNote::Ignored {
            entry: "7".into(),
            why: Unusable::NoDevice { count: 2 },
        },
        SelectionNote::Ignored {
            entry: "GPU-ffff".into(),
            why: Unusable::NoUuid,
        },
        SelectionNote::Ignored {
            entry: "GPU-b".into(),
            why: Unusable::SeveralUuids,
        },
        SelectionNote::Ignored {
            entry: "x".into(),
            why: Unusable::Malformed,
        },
        SelectionNote::IndexOrder,
        SelectionNote::CudaUnlisted {
            uuid: "cccccccc".into(),
        },
        SelectionNote::CudaOrder {
            cuda: vec![uuid('b'), uuid('a')],
            by_rules: vec![uuid('a'), uuid('b')],
        },
        SelectionNote::CudaOrder {
            cuda: vec![uuid('b')],
            by_rules: Vec::new(),
        },
    ];
    let mut warnings: Vec<Warning> = selections.into_iter().map(Warning::Selection).collect();
    warnings.extend([
        Warning::Unsettled(Settle {
            settled: false,
            waited_s: 30.0,
            devices: vec![SettledDevice {
                index: 0,
                uuid: uuid('a'),
                above_idle_bytes: Some(2 * GIB),
                held_by: Vec::new(),
            }],
        }),
        Warning::Foreign(foreign_processes()),
        Warning::Snapshot("not a torch memory snapshot".into()),
        Warning::Leftovers(2),
        Warning::Host {
            client: false,
            notes: vec![HostNote::NoCgroup {
                client: false,
                error: "Permission denied (os error 13)".into(),
            }],
        },
        Warning::Host {
            client: true,
            notes: vec![HostNote::CgroupNotRemoved {
                error: "Device or resource busy (os error 16)".into(),
            }],
        },
        Warning::Stuck(vec![4242, 4243]),
        Warning::ForkserverSetAside {
            pid: 99,
            traced: false,
            after: Some("train".into()),
        },
        Warning::ForkserverSetAside {
            pid: 99,
            traced: true,
            after: None,
        },
    ]);
    let mut lines: Vec<String> = warnings
        .iter()
        .map(|warning| super::words::warning("case", warning))
        .collect();
    lines.extend(
        [
            DeviceNote::Crowded { jobs: None },
            DeviceNote::Crowded { jobs: Some(4) },
            DeviceNote::ServersClient,
            DeviceNote::WithClient,
            DeviceNote::Container {
                namespace: "pid:[4026532198]".into(),
            },
            DeviceNote::SessionAllocator,
            DeviceNote::SessionUnreported,
        ]
        .iter()
        .map(super::words::device_note),
    );
    insta::assert_snapshot!(lines.join("\n"));
}

/// The probe's steps in its `forward` phase.
fn probe_steps() -> LeakSource {
    LeakSource::ProbeSteps {
        phase: Some("forward".into()),
    }
}
const GIB: u64 = 1024 * MIB;

/// A budget check of `kind` as the judge makes one, measured by `method`.
fn budget(kind: CheckKind, figure: Option<u64>, limit: u64, method: Measured) -> Check {
    let (passed, outcome) = match figure {
        Some(figure) if figure > limit => (false, CheckOutcome::Breached),
        Some(_) => (true, CheckOutcome::Within),
        None => (false, CheckOutcome::Unknown),
    };
    Check::new(kind, passed, outcome)
        .figure(figure)
        .limit(Some(limit))
        .facts(Facts::Budget {
            method: OrWritten::Data(method),
            left_out: None,
            whole_bytes: None,
        })
}

fn limit(key: &str, text: &str, value: Option<f64>, bytes: bool, outcome: CheckOutcome) -> Check {
    Check::new(
        CheckKind::Limit(key.into()),
        outcome == CheckOutcome::Within,
        outcome,
    )
    .facts(Facts::Limit {
        text: text.into(),
        value,
        bytes,
    })
}

fn leak(source: LeakSource, slope_mib: f64, iterations: usize, passed: bool) -> Check {
    let outcome = if passed {
        CheckOutcome::Within
    } else {
        CheckOutcome::Breached
    };
    Check::new(CheckKind::Leak, passed, outcome)
        .limit(Some(64 * MIB))
        .facts(Facts::Leak {
            what: None,
            figures: Some(LeakFigures {
                source: OrWritten::Data(source),
                iterations,
                slope_bytes_per_iteration: slope_mib * MIB as f64,
                // The slope over the steps between the first iteration
                // and the last.
                growth_bytes: slope_mib * MIB as f64 * (iterations - 1) as f64,
                warmup: 3,
                intercept_bytes: 0.0,
            }),
            warmup: 3,
        })
}

/// A figure against its baseline: `figure` now, `base` locked, judged
/// with 5% + 64 MiB unless `spread` widened it.
fn baseline(
    figure: Figure,
    now: Option<u64>,
    base: u64,
    outcome: CheckOutcome,
    facts: (Option<NotCompared>, bool, Option<SpreadBound>),
) -> Check {
    let (not_compared, required, spread) = facts;
    let tolerance = AppliedTolerance {
        relative: 0.05,
        absolute_bytes: 64 * MIB,
        spread_k: 3.0,
    };
    let limit = match spread.filter(|s| s.applied) {
        Some(spread) => base + (spread.k * spread.spread_bytes as f64) as u64,
        None => (base as f64 * 1.05) as u64 + 64 * MIB,
    };
    let passed = !matches!(outcome, CheckOutcome::Breached | CheckOutcome::Unknown) && !required;
    let mut check = Check::new(CheckKind::Baseline(figure), passed, outcome)
        .figure(now)
        .limit(Some(limit))
        .facts(Facts::Baseline {
            not_compared,
            required,
            spread,
            floor_breach: None,
            anon_within: None,
        });
    check.baseline_bytes = Some(base);
    check.tolerance = Some(tolerance);
    check
}

fn capacity(outcome: CheckOutcome, value: Option<u64>, locked: Option<u64>, steps: u64) -> Check {
    let least = locked.map(|locked| locked - steps * 8);
    Check::new(
        CheckKind::Capacity,
        !matches!(outcome, CheckOutcome::Breached | CheckOutcome::Unknown),
        outcome,
    )
    .facts(Facts::Capacity {
        param: "batch".into(),
        value,
        complete: true,
        probes: 6,
        locked,
        least_accepted: least,
        tolerance: crate::capacity::Tolerance::Steps(steps),
        lock_counts: None,
        counts: Some("batch, step 8".into()),
        required: false,
    })
}

/// Every kind of check, in the outcomes a run gives it.
fn checks() -> Vec<Check> {
    let gpu = |figure, gated: &Gated, limit| {
        judge::gpu_budget_check(figure, Some(SAMPLED), gated, Bytes(limit))
    };
    let memory = DeviceMemory {
        total: Bytes(8 * GIB),
        reserved: Some(Bytes(GIB)),
    };
    let headroom = |peak: Option<u64>, taint: &[ForeignPid]| {
        let device = Device {
            index: 0,
            name: "H100".into(),
        };
        judge::headroom_check(device, peak.map(Bytes), SAMPLED, taint, memory, 0.5)
    };
    let sleep = || ForeignPid {
        pid: 4242,
        name: Some("sleep".into()),
    };
    let tainted = || Gated::Nothing {
        left_out: vec![TaintedDevice {
            index: 0,
            by: vec![sleep()],
        }],
    };
    let spread = |applied| SpreadBound {
        spread_bytes: 80 * MIB,
        k: 3.0,
        applied,
    };
    let mut moved = capacity(CheckOutcome::NotCompared, Some(248), None, 0);
    if let Some(Facts::Capacity {
        lock_counts,
        counts,
        ..
    }) = &mut moved.facts
    {
        *lock_counts = Some("batch, step 8".into());
        *counts = Some("batch, step 16".into());
    }
    let mut file_pages = baseline(
        Figure::Host,
        Some(900 * MIB),
        600 * MIB,
        CheckOutcome::Within,
        (None, false, None),
    );
    if let Some(Facts::Baseline { anon_within, .. }) = &mut file_pages.facts {
        *anon_within = Some(AnonWithin {
            now_bytes: 310 * MIB,
            locked_bytes: 300 * MIB,
        });
    }
    let mut testbed = judge::missing(Some(std::path::Path::new("train.lock")), false);
    if let Some(Facts::Missing { testbed: named, .. }) = &mut testbed.facts {
        *named = Some("NVIDIA A100 80GB ×2".into());
    }
    let drift = Drift {
        what: "torch".into(),
        before: "2.4.1".into(),
        after: "2.5.0".into(),
    };
    vec![
        judge::host_budget_check(Some(Bytes(612 * MIB)), VMHWM, CGROUP_V1, Bytes(512 * MIB)),
        judge::host_budget_check(None, VMHWM, CGROUP_V1, Bytes(512 * MIB)),
        gpu(Some(Bytes(43 * GIB)), &Gated::Whole, 40 * GIB),
        gpu(Some(Bytes(17 * GIB)), &Gated::Whole, 40 * GIB),
        gpu(None, &Gated::Whole, 40 * GIB),
        gpu(Some(Bytes(5 * GIB)), &tainted(), 2 * GIB),
        budget(
            CheckKind::GpuRank,
            Some(1280 * MIB),
            GIB,
            Measured::Rank {
                rank: Some(3),
                devices: vec![3],
            },
        ),
        budget(
            CheckKind::GpuLeft,
            Some(2 * GIB),
            64 * MIB,
            Measured::AfterCase,
        ),
        budget(CheckKind::GpuLeft, None, 64 * MIB, Measured::AfterCase),
        headroom(Some(3840 * MIB), &[]),
        headroom(Some(2 * GIB), &[]),
        headroom(Some(5 * GIB), &[sleep()]),
        // A server case's load client's, named as the client's.
        Check {
            kind: CheckKind::Client(Box::new(CheckKind::HostBudget)),
            ..judge::host_budget_check(Some(Bytes(120 * MIB)), VMHWM, CGROUP_V1, Bytes(64 * MIB))
        },
        Check::new(CheckKind::HostOomKill, false, CheckOutcome::Breached).facts(Facts::OomKill {
            kills: 1,
            method: HostMethod::CgroupV2,
        }),
        limit(
            "metric.tokens_per_s",
            ">= 1500",
            Some(1800.0),
            false,
            CheckOutcome::Within,
        ),
        limit(
            "metric.tokens_per_s",
            ">= 1500",
            Some(900.0),
            false,
            CheckOutcome::Breached,
        ),
        limit(
            "probe.peak_allocated",
            "<= 1 GiB",
            Some(1.67 * GIB as f64),
            true,
            CheckOutcome::Breached,
        ),
        limit("metric.loss", "< 3", None, false, CheckOutcome::Unknown),
        leak(probe_steps(), 8.0, 27, false),
        leak(LeakSource::SoakRuns, 0.5, 10, true),
        Check::new(CheckKind::Leak, true, CheckOutcome::Unknown).facts(Facts::Leak {
            what: None,
            figures: None,
            warmup: 3,
        }),
        baseline(
            Figure::Gpu,
            Some(41 * GIB),
            38 * GIB,
            CheckOutcome::Breached,
            (None, false, None),
        ),
        baseline(
            Figure::Gpu,
            Some(1200 * MIB),
            1080 * MIB,
            CheckOutcome::Within,
            (None, false, Some(spread(true))),
        ),
        baseline(
            Figure::Gpu,
            Some(1400 * MIB),
            1080 * MIB,
            CheckOutcome::Breached,
            (None, false, Some(spread(true))),
        ),
        baseline(
            Figure::Gpu,
            Some(500 * MIB),
            1000 * MIB,
            CheckOutcome::Improved,
            (None, false, None),
        ),
        baseline(
            Figure::Gpu,
            None,
            1000 * MIB,
            CheckOutcome::Unknown,
            (None, false, None),
        ),
        baseline(
            Figure::Allocated,
            Some(1117 * MIB),
            512 * MIB,
            CheckOutcome::Breached,
            (None, false, None),
        ),
        baseline(
            Figure::Host,
            Some(950 * MIB),
            900 * MIB,
            CheckOutcome::NotCompared,
            (
                Some(NotCompared::HostMethod {
                    locked: "procfs-pss".into(),
                    now: "cgroup-v1".into(),
                }),
                false,
                None,
            ),
        ),
        baseline(
            Figure::Gpu,
            Some(20 * GIB),
            18 * GIB,
            CheckOutcome::NotCompared,
            (Some(NotCompared::GpuModels), false, None),
        ),
        baseline(
            Figure::Gpu,
            Some(2 * GIB),
            3 * GIB,
            CheckOutcome::NotCompared,
            (
                Some(NotCompared::GpuMethod {
                    locked: "sampled@50ms".into(),
                    now: "torch-allocator".into(),
                }),
                false,
                None,
            ),
        ),
        file_pages,
        {
            let mut working = baseline(
                Figure::Working,
                Some(300 * MIB),
                0,
                CheckOutcome::NoBaseline,
                (None, true, None),
            );
            working.baseline_bytes = None;
            working.limit_bytes = None;
            working.tolerance = None;
            working
        },
        judge::missing(Some(std::path::Path::new("train.lock")), false),
        judge::missing(Some(std::path::Path::new("train.lock")), true),
        judge::missing(None, false),
        testbed,
        capacity(CheckOutcome::Within, Some(288), Some(296), 1),
        capacity(CheckOutcome::Within, Some(296), Some(296), 0),
        capacity(CheckOutcome::Breached, Some(248), Some(296), 0),
        capacity(CheckOutcome::Improved, Some(384), Some(296), 0),
        capacity(CheckOutcome::Unknown, None, None, 0),
        moved,
        judge::drift_verdict(&[drift], DriftPolicy::Fail).expect("drift fails under `fail`"),
        creep(
            44 * GIB,
            38 * GIB,
            crate::results::HistoryMark::Run {
                run_id: "6f1c".into(),
                started_at: "2026-11-02T03:00:00.000+00:00".into(),
                commit: Some("3f2a9c1d5e7f".into()),
            },
            (false, 5),
        ),
        creep(
            44 * GIB,
            43 * GIB,
            crate::results::HistoryMark::Accepted {
                accepted_at: "2026-11-20T10:00:00.000+00:00".into(),
                by: "ada".into(),
                reason: "batch 64 keeps activations".into(),
            },
            (false, 0),
        ),
        creep(
            48 * GIB,
            43 * GIB,
            crate::results::HistoryMark::Accepted {
                accepted_at: "2026-11-20T10:00:00.000+00:00".into(),
                by: "ada".into(),
                reason: "batch 64 keeps activations".into(),
            },
            (true, 1),
        ),
        {
            let mut step = Check::new(
                CheckKind::Step(crate::baseline::Figure::Host),
                true,
                CheckOutcome::Breached,
            )
            .facts(Facts::Step {
                level_bytes: 200 * MIB,
                runs: 5,
                noise_bytes: 2 * MIB,
                branch: Some("main".into()),
            });
            step.figure_bytes = Some(300 * MIB);
            step
        },
    ]
}

/// A `creep.gpu` check: `now` against a ratchet at `ratchet`, limit 10%;
/// `(warn_only, steps)`.
fn creep(
    now: u64,
    ratchet: u64,
    since: crate::results::HistoryMark,
    (warn_only, steps): (bool, u32),
) -> Check {
    let growth = (now as f64 - ratchet as f64) / ratchet as f64;
    let breached = growth > 0.1;
    let mut check = Check::new(
        CheckKind::Creep(crate::baseline::Figure::Gpu),
        !breached || warn_only,
        if breached {
            CheckOutcome::Breached
        } else {
            CheckOutcome::Within
        },
    )
    .facts(Facts::Creep {
        limit: 0.1,
        growth,
        warn_only,
        since,
        steps,
        branch: Some("main".into()),
        window_days: 30,
    });
    check.figure_bytes = Some(now);
    check.limit_bytes = Some(ratchet);
    check
}

#[test]
fn every_checks_sentence() {
    let lines: Vec<String> = checks()
        .into_iter()
        .map(|check| {
            let outcome = check.outcome.map_or("-", CheckOutcome::as_str);
            let verdict = if check.passed { "ok" } else { "FAILED" };
            format!(
                "{} [{outcome}, {verdict}]: {}",
                check.kind,
                super::words::check_message(&check)
            )
        })
        .collect();
    insta::assert_snapshot!(lines.join("\n"));
}

/// Every cause of a case that did not pass, as the case's one line.
#[test]
fn every_causes_sentence() {
    let failed = |cause| Verdict {
        status: CaseStatus::Failed,
        cause: Some(cause),
    };
    let mut over =
        judge::host_budget_check(Some(Bytes(612 * MIB)), VMHWM, CGROUP_V1, Bytes(512 * MIB));
    over.message = super::words::check_message(&over);
    let peak = Some(Bytes(2 * GIB));
    let causes = [
        Cause::Interrupted { host_peak: peak },
        Cause::NotStarted {
            message: "cannot start `python3`: No such file or directory (os error 2)".into(),
        },
        Cause::Foreign {
            processes: foreign_processes(),
        },
        Cause::NotRun(crate::record::NotRun::NotCollected {
            nodeid: "tests/test_a.py::test_random[0.4170]".into(),
        }),
        Cause::NotRun(crate::record::NotRun::Garbled {
            nodeid: "tests/test_a.py::test_one".into(),
            line: "hello".into(),
        }),
        Cause::NotRun(crate::record::NotRun::NoRuns),
        Cause::TimedOut {
            after: Duration::from_secs(3),
            host_peak: peak,
        },
        Cause::ServerNotReady {
            after: Duration::from_secs(2),
            target: "http://127.0.0.1:41234/missing".into(),
            last: Some("/missing answered 404".into()),
            host_peak: peak,
        },
        Cause::GpuLost(GpuLoss {
            device: crate::results::Device {
                index: 0,
                name: "H100".into(),
            },
            at: Duration::from_millis(1500),
            reason: "GPU is lost".into(),
        }),
        Cause::Limits {
            failed: vec![0],
            stopped_at: Some(Duration::from_millis(8300)),
        },
        Cause::ServerExited {
            exit: Exit::Code(1),
            at: Duration::from_millis(300),
            ready: false,
            host_peak: None,
        },
        Cause::ServerExited {
            exit: Exit::Code(1),
            at: Duration::from_millis(4100),
            ready: true,
            host_peak: peak,
        },
        Cause::Exited {
            who: Who::Command,
            exit: Exit::Code(3),
            host_peak: peak,
        },
        Cause::Exited {
            who: Who::Instance(1),
            exit: Exit::Signal(9),
            host_peak: peak,
        },
        Cause::Exited {
            who: Who::Client,
            exit: Exit::Code(3),
            host_peak: peak,
        },
        Cause::Exited {
            who: Who::ClientInstance(2),
            exit: Exit::Signal(11),
            host_peak: peak,
        },
        Cause::Judged {
            failed: vec![0],
            drift: vec![crate::baseline::Drift {
                what: "torch".into(),
                before: "2.4.1".into(),
                after: "2.5.0".into(),
            }],
        },
    ];
    let mut lines: Vec<String> = causes
        .into_iter()
        .map(|cause| {
            super::words::case_message(&failed(cause), std::slice::from_ref(&over), false)
                .unwrap_or_default()
        })
        .collect();
    lines.extend(super::words::case_message(
        &failed(Cause::Exited {
            who: Who::Command,
            exit: Exit::Signal(9),
            host_peak: peak,
        }),
        &[],
        true,
    ));
    // What follows a GPU regression's words, when the ranks tell.
    lines.push(super::words::rank_growth(
        &crate::measure::ranks::RankChange {
            rank: 2,
            before: GIB,
            after: 1536 * MIB,
            sites: vec![crate::snapshot::SiteChange {
                site: "model.py:88 attention".into(),
                before: 100 * MIB,
                after: 612 * MIB,
                new: false,
            }],
        },
    ));
    insta::assert_snapshot!(lines.join("\n"));
}

//! The results model: names as files write them, and results.json read
//! back unchanged.

use super::*;
use crate::baseline::NotCompared;
use crate::measure::host::HostFloor;
use crate::results::test_support::json;

#[test]
fn check_names_are_stable() {
    for (kind, name) in [
        (CheckKind::HostBudget, "budget.host"),
        (CheckKind::GpuBudget, "budget.gpu"),
        (
            CheckKind::GpuHeadroom { device: 3 },
            "budget.gpu_fraction.gpu3",
        ),
        (CheckKind::HostOomKill, "host.oom_kill"),
        (
            CheckKind::Limit("metric.tokens_per_s".into()),
            "limit.metric.tokens_per_s",
        ),
        (CheckKind::Leak, "leak"),
        (CheckKind::BaselineMissing, "baseline"),
        (
            CheckKind::Baseline(crate::baseline::Figure::Gpu),
            "baseline.gpu",
        ),
        (CheckKind::Capacity, "baseline.capacity"),
        (CheckKind::EnvironmentDrift, "environment.drift"),
        (
            CheckKind::Client(Box::new(CheckKind::HostBudget)),
            "client.budget.host",
        ),
        (
            CheckKind::Client(Box::new(CheckKind::GpuHeadroom { device: 0 })),
            "client.budget.gpu_fraction.gpu0",
        ),
        (
            CheckKind::Client(Box::new(CheckKind::HostOomKill)),
            "client.host.oom_kill",
        ),
    ] {
        assert_eq!(kind.to_string(), name);
        assert_eq!(serde_json::to_value(&kind).ok(), Some(name.into()));
        assert_eq!(name.parse::<CheckKind>(), Ok(kind));
    }
    // Every budget kind's check is named by its key.
    for kind in crate::suite::BudgetKind::ALL {
        let name = format!("budget.{}", kind.key());
        assert_eq!(CheckKind::Budget(kind).to_string(), name);
        assert_eq!(name.parse::<CheckKind>(), Ok(CheckKind::Budget(kind)));
    }
    assert!("budget.vram".parse::<CheckKind>().is_err());
}

/// Schema 5: a check's facts are data, each in the shape results.json
/// documents (docs/baselines.md), and read back unchanged.
#[test]
fn facts_are_data_and_read_back() {
    use crate::leak::{LeakFigures, LeakSource};
    use crate::measure::gpu::{ForeignPid, GpuMethod};
    use crate::measure::host::HostMethod;
    use serde_json::json;
    let sleep = ForeignPid {
        pid: 4242,
        name: Some("sleep".into()),
    };
    let table = [
        (
            Facts::Budget {
                method: OrWritten::Data(Measured::Host {
                    floor: Some(HostFloor::Vmhwm),
                    method: HostMethod::CgroupV1,
                }),
                left_out: None,
                whole_bytes: None,
            },
            json!({"budget": {"method": {"host": {"floor": "vmhwm", "method": "cgroup-v1"}}}}),
        ),
        (
            Facts::Budget {
                method: OrWritten::Data(Measured::Gpu {
                    method: Some(GpuMethod::Mixed),
                }),
                left_out: Some(OrWritten::Data(vec![TaintedDevice {
                    index: 0,
                    by: vec![sleep.clone()],
                }])),
                whole_bytes: Some(7),
            },
            json!({"budget": {
                "method": {"gpu": {"method": "mixed"}},
                "left_out": [{"index": 0, "by": [{"pid": 4242, "name": "sleep"}]}],
                "whole_bytes": 7
            }}),
        ),
        (
            Facts::Budget {
                method: OrWritten::Data(Measured::Gpu { method: None }),
                left_out: None,
                whole_bytes: None,
            },
            json!({"budget": {"method": {"gpu": {}}}}),
        ),
        (
            Facts::Budget {
                method: OrWritten::Data(Measured::Rank {
                    rank: Some(3),
                    devices: vec![2, 3],
                }),
                left_out: None,
                whole_bytes: None,
            },
            json!({"budget": {"method": {"rank": {"rank": 3, "devices": [2, 3]}}}}),
        ),
        (
            Facts::Budget {
                method: OrWritten::Data(Measured::Rank {
                    rank: None,
                    devices: Vec::new(),
                }),
                left_out: None,
                whole_bytes: None,
            },
            json!({"budget": {"method": {"rank": {"rank": null}}}}),
        ),
        (
            Facts::Budget {
                method: OrWritten::Data(Measured::AfterCase),
                left_out: None,
                whole_bytes: None,
            },
            json!({"budget": {"method": "after-case"}}),
        ),
        (
            Facts::Headroom {
                device: OrWritten::Data(Device {
                    index: 0,
                    name: "H100".into(),
                }),
                method: GpuMethod::DeviceDelta,
                taint: Some(OrWritten::Data(vec![sleep])),
                total_bytes: 8,
                reserved_bytes: Some(1),
                fraction: 0.5,
            },
            json!({"headroom": {
                "device": {"index": 0, "name": "H100"},
                "method": "device-delta",
                "taint": [{"pid": 4242, "name": "sleep"}],
                "total_bytes": 8,
                "reserved_bytes": 1,
                "fraction": 0.5
            }}),
        ),
        (
            Facts::OomKill {
                kills: 2,
                method: HostMethod::CgroupV2,
            },
            json!({"oom-kill": {"kills": 2, "method": "cgroup-v2"}}),
        ),
        (
            Facts::Leak {
                what: None,
                figures: Some(LeakFigures {
                    source: OrWritten::Data(LeakSource::ProbeSteps {
                        phase: Some("forward".into()),
                    }),
                    iterations: 5,
                    slope_bytes_per_iteration: 1.5,
                    growth_bytes: 7.5,
                    warmup: 2,
                    intercept_bytes: 0.25,
                }),
                warmup: 2,
            },
            json!({"leak": {
                "figures": {
                    "source": {"probe-steps": {"phase": "forward"}},
                    "iterations": 5,
                    "slope_bytes_per_iteration": 1.5,
                    "growth_bytes": 7.5,
                    "warmup": 2,
                    "intercept_bytes": 0.25
                },
                "warmup": 2
            }}),
        ),
    ];
    for (facts, written) in table {
        assert_eq!(serde_json::to_value(&facts).ok(), Some(written.clone()));
        let back: Facts = serde_json::from_value(written).expect("read back");
        assert_eq!(back, facts);
    }
    let soak: LeakSource = serde_json::from_value(json!("soak-runs")).expect("soak");
    assert_eq!(soak, LeakSource::SoakRuns);
}

/// Every part of the model, filled in: what reading results.json back
/// must keep.
fn everything() -> RunResults {
    use crate::baseline::{FigureComparison, Outcome};
    use crate::measure::gpu::ForeignPid;
    let mut results = crate::results::test_support::results_with_diagnosis("boom");
    results.finished_at = Some("2026-12-03T00:01:00.000+00:00".into());
    results.measurement.host_cgroup = Some(HostCgroup {
        version: CgroupVersion::V2,
        dir: "/sys/fs/cgroup/oomgate".into(),
    });
    results.measurement.gpu_method = Some("nvml".into());
    results.gpu = Some(GpuEnvironment {
        driver_version: "550.54.15".into(),
        cuda_driver_version: Some("12.4".into()),
        process_listing: Some(crate::measure::nvml::Listing::V3Wide),
        devices: vec![GpuInfo {
            index: 0,
            uuid: "GPU-0".into(),
            name: "H100".into(),
            total_bytes: 80 << 30,
            reserved_bytes: Some(512 << 20),
            accounting: Some(true),
            persistence: None,
            mig: None,
            mig_parent: None,
        }],
    });
    results.environment.gpu_models = vec!["H100 (80.0 GiB)".into()];
    results.baseline = Some(BaselineInfo {
        path: "s.lock".into(),
        locked_at: "t".into(),
        drift: vec![Drift {
            what: "torch".into(),
            before: "2.4.1".into(),
            after: "2.5.0".into(),
        }],
        on_drift: DriftPolicy::Fail,
        gpu_compared: false,
        testbed: None,
        removed: vec!["gone".into()],
    });
    results.summary.failed = 1;
    results.not_run = vec!["later".into()];
    results.fault = Some("out/x: No space left on device".into());
    results.runner_max_rss_bytes = Some(12 << 20);
    results.runner_cpu_s = Some(0.25);
    let case = &mut results.cases[0];
    case.failure_kind = Some(FailureType::GpuOom);
    case.soak_s = Some(60.0);
    // Regression: without serde_json's float_roundtrip this read back as
    // 1.280315204.
    #[allow(clippy::excessive_precision)]
    {
        case.wall_time_s = 1.2803152039999999;
    }
    case.host.peak_bytes = Some(300 << 20);
    case.host.peak_at_s = Some(1.2);
    case.host.method = HostMethod::CgroupV1;
    case.host.peak_source = Some(HostFloor::Vmhwm);
    case.host.floors.vmhwm_bytes = Some(300 << 20);
    case.host.charged_peak_bytes = Some(400 << 20);
    case.host.oom_kills = Some(0);
    case.gpu_peak_bytes = Some(1 << 30);
    case.gpu_peak_method = Some(GpuMethod::Sampled { interval_ms: 50 });
    case.gpu_devices = vec![DeviceFigures {
        gpu: GpuInfo {
            index: 0,
            uuid: "GPU-0".into(),
            name: "H100".into(),
            total_bytes: 80 << 30,
            reserved_bytes: None,
            accounting: Some(true),
            persistence: None,
            mig: None,
            mig_parent: None,
        },
        before_bytes: Some(1),
        device_peak_bytes: Some(2),
        peak_bytes: Some(1 << 30),
        method: GpuMethod::DeviceDelta,
        sampled_peak_bytes: None,
        accounting_peak_bytes: Some(3),
        tainted_by: vec![ForeignPid {
            pid: 42,
            name: Some("sleep".into()),
        }],
        device_note: None,
        note: None,
        lost: Some(crate::measure::gpu::DeviceLoss {
            at_s: 2.5,
            reason: "GPU is lost".into(),
        }),
    }];
    case.foreign_processes = vec![ForeignProcess {
        pid: 42,
        name: None,
        device_index: 0,
        device_uuid: "GPU-0".into(),
        used_bytes: Some(5),
    }];
    case.server = Some(ServerResult {
        command: vec!["serve".into(), "--port".into(), "{port}".into()],
        env: [("VLLM_USE_V1".to_string(), "1".to_string())]
            .into_iter()
            .collect(),
        port: 41234,
        ready: "http://127.0.0.1:41234/health".into(),
        ready_after_s: Some(1.5),
        exit: Some(Exit::Signal(15)),
        stopped_with: Some("SIGTERM".into()),
        stdout_log: "cases/a/server.stdout.log".into(),
        stderr_log: "cases/a/server.stderr.log".into(),
        startup_host_peak_bytes: Some(1),
        startup_gpu_peak_bytes: None,
        load_host_peak_bytes: Some(2),
        load_gpu_peak_bytes: Some(3),
    });
    case.client = Some(ClientResult {
        host: HostResult {
            peak_bytes: Some(4),
            peak_source: Some(HostFloor::PssSum),
            oom_kills: Some(0),
            note: Some("note".into()),
            ..HostResult::unmeasured(HostMethod::CgroupV2)
        },
        gpu_peak_bytes: None,
        gpu_peak_method: Some(GpuMethod::Unavailable),
        gpu_devices: Vec::new(),
    });
    case.env.insert("HF_TOKEN".into(), "<secret 3fa9c1>".into());
    case.allocator_env.insert(
        "PYTORCH_CUDA_ALLOC_CONF".into(),
        "expandable_segments:True".into(),
    );
    let figure = |name: &str, outcome| FigureComparison {
        figure: name.parse().expect("a figure"),
        outcome,
        new_bytes: Some(10),
        baseline_bytes: Some(8),
        delta_bytes: Some(-2),
        delta_ratio: Some(0.25),
        limit_bytes: Some(9),
        tolerance: Some(crate::baseline::AppliedTolerance {
            relative: 0.05,
            absolute_bytes: 16 << 20,
            spread_k: 3.0,
        }),
        spread: None,
        floor_breach: None,
        anon_within: None,
        not_compared: (outcome == Outcome::Skipped).then_some(NotCompared::GpuModels),
        message: format!("{name} message"),
    };
    case.baseline = Some(CaseComparison {
        locked: true,
        host: figure("host", Outcome::Within),
        gpu: figure("gpu", Outcome::Regressed),
        allocated: figure("allocated", Outcome::Skipped),
        working: figure("working", Outcome::Improved),
        outside: figure("outside_allocator", Outcome::Within),
        changes: vec!["command: a → b".into()],
        allocation_sites: Vec::new(),
        outputs: Vec::new(),
    });
    if let Some(diagnosis) = case.diagnosis.as_mut() {
        diagnosis.oom = Some(crate::diagnose::OomFigures {
            framework: "pytorch".into(),
            requested_bytes: Some(7),
            other_processes: vec![(1, 2)],
            ..Default::default()
        });
        diagnosis.rank = Some(3);
        diagnosis.oom_ranks = vec![1, 3];
    }
    let mut probe = ProbeSummary {
        lines: 4,
        last_step: Some(crate::probe::StepSeen {
            instance: 1,
            step: Some(9),
            phase: Some("forward".into()),
            rank: None,
        }),
        first_step: Some(0),
        peak_allocated: Some(11),
        ..Default::default()
    };
    probe.metrics.insert(
        "tokens_per_s".into(),
        crate::probe::MetricSeen {
            last: 1834.2,
            min: 0.1,
            max: 2000.0,
            count: 3,
        },
    );
    case.probe = Some(probe);
    case.leak = Some(crate::leak::LeakFigures {
        source: crate::vocabulary::OrWritten::Data(crate::leak::LeakSource::ProbeSteps {
            phase: Some("forward".into()),
        }),
        iterations: 5,
        slope_bytes_per_iteration: 1.5,
        growth_bytes: 7.5,
        warmup: 2,
        intercept_bytes: -3.25,
    });
    case.repeats = vec![RepeatFigures {
        status: CaseStatus::Passed,
        wall_time_s: 0.1,
        host_peak_bytes: None,
        gpu_peak_bytes: Some(1),
        host_working_peak_bytes: Some(2),
        host_method: Some(HostMethod::CgroupV2),
    }];
    case.checks = [
        CheckKind::HostBudget,
        CheckKind::GpuHeadroom { device: 1 },
        CheckKind::Limit("metric.x.min".into()),
        CheckKind::Baseline(crate::baseline::Figure::Gpu),
        CheckKind::Capacity,
        CheckKind::EnvironmentDrift,
    ]
    .into_iter()
    .map(|kind| {
        let mut check = Check::new(kind, false, CheckOutcome::Breached).figure(Some(1));
        check.baseline_bytes = Some(1);
        check.facts = Some(Facts::Capacity {
            param: "batch".into(),
            value: Some(72),
            complete: true,
            probes: 6,
            locked: Some(88),
            least_accepted: Some(80),
            tolerance: crate::capacity::Tolerance::Share(0.05),
            lock_counts: None,
            counts: Some("batch, step 8".into()),
            required: false,
        });
        check.message = "m".into();
        check
    })
    .collect();
    case.instances = vec![
        InstanceResult {
            index: 0,
            runs: 2,
            exit: Some(Exit::Code(0)),
            stdout_log: "cases/c/stdout.log".into(),
            stderr_log: "cases/c/stderr.log".into(),
        },
        InstanceResult {
            index: 1,
            runs: 1,
            exit: Some(Exit::Signal(9)),
            stdout_log: "cases/c/stdout.1.log".into(),
            stderr_log: "cases/c/stderr.1.log".into(),
        },
    ];
    results
}

#[test]
fn results_json_reads_back_into_the_model_unchanged() {
    let mut results = everything();
    for merged in [false, true] {
        if merged {
            results.merged_from = Some(1);
            results.parts = vec![PartInfo {
                dir: "shards/1".into(),
                host: "h".into(),
                started_at: results.started_at.clone(),
                finished_at: None,
                partition: Some(crate::suite::Partition {
                    kind: crate::suite::PartitionKind::Count,
                    index: 1,
                    total: 2,
                }),
                environment: results.environment.clone(),
                measurement: results.measurement.clone(),
                gpu: results.gpu.clone(),
                interrupted: true,
                fault: None,
                summary: results.summary,
                cases: vec!["c".into()],
                not_run: vec!["later".into()],
            }];
        }
        let written = json(&results);
        let read: RunResults = serde_json::from_str(&written).expect("read back");
        let again = json(&read);
        assert_eq!(written, again);
        // The host figures stay flat `host_*` keys of the case and of its
        // load client, as results.json has always had them.
        let value: serde_json::Value = serde_json::from_str(&written).expect("json");
        for owner in [&value["cases"][0], &value["cases"][0]["client"]] {
            assert!(owner.get("host").is_none(), "{owner:#}");
            for key in ["host_peak_bytes", "host_method", "host_floors", "host_note"] {
                assert!(owner.get(key).is_some(), "{key} in {owner:#}");
            }
        }
        assert_eq!(value["cases"][0]["client"]["host_peak_bytes"], 4);
        // Only what a merged run adds is new to the file.
        assert_eq!(written.contains("\"merged_from\""), merged);
        assert_eq!(written.contains("\"parts\""), merged);
    }
}

#[test]
fn a_case_not_run_says_why() {
    let mut results = everything();
    assert_eq!(
        results.not_run_reason("later"),
        NotRunReason::Fault("out/x: No space left on device")
    );
    results.fault = None;
    results.interrupted = true;
    assert_eq!(results.not_run_reason("later"), NotRunReason::Interrupted);
    results.parts = vec![];
    results.merged_from = Some(2);
    let part = |fault: Option<&str>, not_run: &str| PartInfo {
        dir: "p".into(),
        host: "h".into(),
        started_at: "t".into(),
        finished_at: None,
        partition: None,
        environment: Environment::default(),
        measurement: results.measurement.clone(),
        gpu: None,
        interrupted: false,
        fault: fault.map(str::to_string),
        summary: Summary::default(),
        cases: vec![],
        not_run: vec![not_run.to_string()],
    };
    results.parts = vec![part(None, "a"), part(Some("disk full"), "b")];
    // A part without finished_at, interrupted by no signal or fault: its
    // oomgate was killed.
    assert_eq!(results.not_run_reason("a"), NotRunReason::Unfinished);
    results.parts[0].finished_at = Some("t".into());
    assert_eq!(results.not_run_reason("a"), NotRunReason::Interrupted);
    assert_eq!(
        results.not_run_reason("b"),
        NotRunReason::Fault("disk full")
    );
    assert_eq!(results.not_run_reason("later"), NotRunReason::NoPart);
}

#[test]
fn status_names_match_results_json() {
    for status in [
        CaseStatus::Passed,
        CaseStatus::Failed,
        CaseStatus::TimedOut,
        CaseStatus::Interrupted,
        CaseStatus::Error,
        CaseStatus::Running,
    ] {
        assert_eq!(
            serde_json::to_value(status).ok(),
            Some(serde_json::json!(status.as_str()))
        );
    }
}

#[test]
fn drift_changes_are_data_and_older_words_still_read() {
    let data = Facts::Drift {
        changes: vec![OrWritten::Data(Drift {
            what: "torch".into(),
            before: "2.4.0".into(),
            after: "2.5.1".into(),
        })],
    };
    let written = serde_json::to_value(&data).expect("facts serialize");
    assert_eq!(
        written["drift"]["changes"][0],
        serde_json::json!({"what": "torch", "before": "2.4.0", "after": "2.5.1"})
    );
    // schema 5 and older wrote each change as its line.
    let older: Facts =
        serde_json::from_value(serde_json::json!({"drift": {"changes": ["torch 2.4.0 → 2.5.1"]}}))
            .expect("older facts read");
    assert_eq!(
        older,
        Facts::Drift {
            changes: vec![OrWritten::Written("torch 2.4.0 → 2.5.1".into())]
        }
    );
}

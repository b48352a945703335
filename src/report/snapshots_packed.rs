//! Snapshot tests of every output for a second run, the cases the first
//! (`snapshots`) lacks: cases packed on one GPU (`--pack`), one of which
//! breached its GPU budget, one a server with its load client that came
//! in well under its baseline, one flaky (it failed sharing its GPU and
//! passed retried alone), one whose host figure was locked by another
//! method and so not compared, and one interrupted by Ctrl-C, with the
//! last case never started. Judged by the real judge, worded by `words`,
//! every figure and time fixed.

use std::time::Duration;

use super::snapshots::{GIB, MIB, locked, run, visible_text};
use crate::baseline::{Lock, LockedCase};
use crate::judge::{self, Baseline, Finished, StopReason};
use crate::measure::HostMethod;
use crate::measure::gpu::{GpuFigures, GpuMethod};
use crate::measure::nvml::GpuRef;
use crate::measure::timeline::{Peak, ServerPhases};
use crate::record::{InstanceRecord, RunRecord, ServerRecord};
use crate::results::test_support::results_with_text;
use crate::results::{BaselineInfo, CaseResult, RunResults, Scheduling, SharedGpu, Summary};
use crate::suite::{Case, DriftPolicy};
use crate::vocabulary::Exit;

fn suite() -> crate::suite::Suite {
    let text = r#"
[suite]
name = "serve-gate"

[[case]]
name = "finetune"
command = ["python3", "finetune.py"]
budget = { gpu = "40 GiB" }

[[case]]
name = "serve"
command = ["python3", "load.py", "--port", "{port}"]
server = { command = ["python3", "serve.py", "--port", "{port}"], ready = "http://127.0.0.1:{port}/health" }

[[case]]
name = "eval"
command = ["python3", "eval.py"]
budget = { gpu = "20 GiB" }

[[case]]
name = "embed"
command = ["python3", "embed.py"]

[[case]]
name = "long"
command = ["python3", "long.py"]

[[case]]
name = "later"
command = ["python3", "later.py"]
"#;
    crate::suite::parse(
        text,
        std::path::Path::new("serve.toml"),
        std::path::Path::new("."),
    )
    .expect("the snapshot suite")
}

/// The GPU every case of the run was packed on.
fn gpu0() -> GpuRef {
    GpuRef {
        index: 0,
        uuid: "GPU-8f2c".into(),
    }
}

/// The server's command, as recorded and as locked.
fn server_command() -> Vec<String> {
    ["python3", "serve.py", "--port", "{port}"]
        .map(String::from)
        .to_vec()
}

/// A run of `case` with its one instance's exit and logs recorded, as
/// the runner records them.
fn instance_run(case: &Case, host: u64, gpu: Option<u64>, exit: Exit) -> RunRecord {
    let mut run = run(case, host, gpu, exit);
    run.instances[0].stdout_log = format!("cases/{}/stdout.log", case.id).into();
    run.instances[0].stderr_log = format!("cases/{}/stderr.log", case.id).into();
    run
}

/// Judge `runs` of `case` and word the result, as the runner does.
fn judged(
    case: &Case,
    runs: Vec<RunRecord>,
    shared: bool,
    first_attempt: Option<CaseResult>,
    stopping: bool,
    baseline: &Baseline<'_>,
) -> (CaseResult, Option<judge::Retry>) {
    let judgement = judge::judge_case(
        Finished {
            case,
            runs,
            capacity: None,
            shared,
            first_attempt,
            stopping,
        },
        baseline,
    );
    let mut result = judgement.result;
    super::words::word_case(&mut result, &judgement.verdict, None);
    (result, judgement.retry)
}

/// The run every snapshot of this file renders.
fn packed_run() -> RunResults {
    let suite = suite();
    let case = |id: &str| {
        suite
            .cases
            .iter()
            .find(|c| c.id == id)
            .expect("a snapshot case")
    };
    let embed_locked = LockedCase {
        // Locked where no case cgroup could be made: another method.
        host_peak_method: Some(HostMethod::ProcfsPss),
        ..locked(case("embed"), 900 * MIB, None, None)
    };
    let serve_locked = LockedCase {
        server: Some(crate::baseline::LockedServer {
            command: server_command(),
            env: Default::default(),
        }),
        ..locked(case("serve"), 6 * GIB, Some(30 * GIB), None)
    };
    let lock = Lock::of(
        "serve-gate",
        "2026-12-01T09:00:00.000+00:00",
        [
            ("serve", serve_locked),
            ("eval", locked(case("eval"), GIB, Some(17 * GIB), None)),
            ("embed", embed_locked),
        ],
    );
    let info = BaselineInfo {
        path: "serve.lock".into(),
        locked_at: lock.locked_at.clone(),
        drift: Vec::new(),
        on_drift: DriftPolicy::Warn,
        gpu_compared: true,
        testbed: None,
        removed: vec!["retired".into()],
    };
    let baseline = Baseline {
        lock: Some(&lock),
        info: Some(&info),
        require: false,
        history: None,
    };
    let sharing = |with: &[&str]| {
        vec![SharedGpu {
            gpu: gpu0(),
            with: with.iter().map(|w| w.to_string()).collect(),
        }]
    };

    // Over its GPU budget while sharing the GPU, and over it again alone.
    let mut finetune = instance_run(
        case("finetune"),
        4 * GIB,
        Some(43 * GIB + GIB / 2),
        Exit::Signal(15),
    );
    finetune.stop = Some(StopReason::BudgetExceeded {
        at: Duration::from_millis(8300),
    });
    let mut first = finetune.clone();
    first.wall_time = Duration::from_millis(9100);
    let (mut first, retry) = judged(case("finetune"), vec![first], true, None, false, &baseline);
    assert_eq!(
        retry,
        Some(judge::Retry::Shared),
        "a shared failure is retried"
    );
    first.gpu_sharing = sharing(&["serve", "eval"]);
    let (finetune, _) = judged(
        case("finetune"),
        vec![finetune],
        false,
        Some(first),
        false,
        &baseline,
    );

    // A server case: the figures are the server's, its client's apart.
    let mut serve = instance_run(case("serve"), 5 * GIB, Some(22 * GIB), Exit::Code(0));
    let peak = |bytes: u64, t_ms: u64| Some(Peak { bytes, t_ms });
    serve.server_phases = Some(ServerPhases {
        ready_at_ms: Some(4250),
        startup_host_peak: peak(4 * GIB, 3000),
        startup_gpu_peak: peak(18 * GIB, 4000),
        load_host_peak: peak(5 * GIB, 9000),
        load_gpu_peak: peak(22 * GIB, 9500),
    });
    let mut client_host = RunRecord::ended(Some(54 * MIB), &[]).host;
    client_host.peak_source = Some(crate::measure::host::HostFloor::Vmhwm);
    client_host.oom_kills = Some(0);
    serve.server = Some(ServerRecord {
        instance: InstanceRecord {
            index: 0,
            runs: 1,
            exit: Some(Exit::Signal(15)),
            stdout_log: "cases/serve/server.stdout.log".into(),
            stderr_log: "cases/serve/server.stderr.log".into(),
            supervisor_lost: false,
        },
        port: 41234,
        ready: "http://127.0.0.1:41234/health".into(),
        ready_at: Some(Duration::from_millis(4250)),
        stopped_with: Some("SIGTERM"),
        client_host,
        client_gpu: Some(GpuFigures {
            peak_bytes: Some(0),
            method: GpuMethod::Sampled { interval_ms: 50 },
            devices: Vec::new(),
            left_bytes: None,
            ranks: Default::default(),
            outside: None,
        }),
    });
    let (mut serve, _) = judged(case("serve"), vec![serve], true, None, false, &baseline);
    serve.gpu_sharing = sharing(&["finetune", "eval"]);

    // Over its GPU budget beside the others; within it, alone.
    let mut beside = instance_run(case("eval"), GIB, Some(21 * GIB), Exit::Signal(15));
    beside.stop = Some(StopReason::BudgetExceeded {
        at: Duration::from_millis(3100),
    });
    beside.wall_time = Duration::from_millis(3400);
    let (mut first, _) = judged(case("eval"), vec![beside], true, None, false, &baseline);
    first.gpu_sharing = sharing(&["finetune", "serve"]);
    let alone = instance_run(case("eval"), GIB, Some(17 * GIB + GIB / 4), Exit::Code(0));
    let (eval, _) = judged(
        case("eval"),
        vec![alone],
        false,
        Some(first),
        false,
        &baseline,
    );

    let embed = instance_run(case("embed"), 950 * MIB, None, Exit::Code(0));
    let (embed, _) = judged(case("embed"), vec![embed], false, None, false, &baseline);

    // Ctrl-C while it ran: its processes were stopped, nothing retried.
    let mut long = instance_run(case("long"), 2 * GIB, Some(9 * GIB), Exit::Signal(15));
    long.stop = Some(StopReason::Interrupted);
    long.wall_time = Duration::from_secs(31);
    let (long, _) = judged(case("long"), vec![long], false, None, true, &baseline);

    let cases = vec![finetune, serve, eval, embed, long];
    let mut results = results_with_text("x");
    results.suite.name = "serve-gate".into();
    results.suite.path = "serve.toml".into();
    results.finished_at = Some("2026-12-04T10:01:10.000+00:00".into());
    results.interrupted = true;
    results.not_run = vec!["later".into()];
    results.scheduling = Some(Scheduling {
        jobs: 3,
        pack: true,
        pool: Some(vec![gpu0()]),
        ordered_by_past_times: false,
    });
    results.measurement.gpu_method = Some("nvml".into());
    results.measurement.host_method = HostMethod::CgroupV1;
    results.baseline = Some(info);
    results.summary = Summary::default();
    for case in &cases {
        results.summary.add(case);
    }
    results.summary.planned = cases.len() + results.not_run.len();
    results.cases = cases;
    results
}

#[test]
fn terminal() {
    insta::assert_snapshot!(super::snapshots::terminal_text(&packed_run()));
}

#[test]
fn case_details() {
    insta::assert_snapshot!(super::snapshots::case_details_text(&packed_run()));
}

#[test]
fn junit() {
    insta::assert_snapshot!(super::junit::render(&packed_run()).expect("junit"));
}

#[test]
fn markdown() {
    insta::assert_snapshot!(super::markdown::render(&packed_run()));
}

#[test]
fn github_annotations() {
    insta::assert_snapshot!(super::snapshots::annotations_text(&packed_run()));
}

#[test]
fn html_text() {
    let out = tempfile::tempdir().expect("an out dir");
    let page = super::html::render(&packed_run(), out.path());
    insta::assert_snapshot!(visible_text(&page));
}

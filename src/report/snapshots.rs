//! Snapshot tests of what a reader sees: the terminal's lines, table and
//! closing summary, a case's details, JUnit, Markdown, the GitHub
//! annotations and report.html's text, for one run judged by the real
//! judge and worded by `words` — a pass, a GPU regression with drift, a
//! capacity shrink, a budget breach that stopped its case, a GPU OOM.
//! `snapshots_packed` renders a second run (a GPU budget, a server, a
//! flaky case, a figure not compared, an interruption) with the helpers
//! here, `snapshots_sentences` every check's and cause's sentence;
//! `diff`'s table is snapshotted beside them (`cli::inspect`).
//! Every figure and time is fixed, so the snapshots hold no noise; a
//! change of wording is a reviewed diff (`cargo insta review`, or accept
//! a `.snap.new` by renaming it).

use std::path::PathBuf;
use std::time::Duration;

use crate::baseline::{Drift, Lock, LockedCase};
use crate::capacity::{Capacity, Probe};
use crate::judge::{self, Baseline, Finished, StopReason};
use crate::measure::HostMethod;
use crate::measure::gpu::GpuFigures;
use crate::measure::gpu::GpuMethod;
use crate::record::RunRecord;
use crate::results::test_support::results_with_text;
use crate::results::{BaselineInfo, CaseStatus, Exit, RunResults, Summary};
use crate::suite::{Case, DriftPolicy};

pub(super) const MIB: u64 = 1024 * 1024;
pub(super) const GIB: u64 = 1024 * MIB;

fn suite() -> crate::suite::Suite {
    let text = r#"
[suite]
name = "train-gate"

[[case]]
name = "ok"
command = ["python3", "ok.py"]

[[case]]
name = "train"
command = ["python3", "train.py", "--batch", "64"]
tolerance = { relative = "5%", absolute = "64 MiB" }

[[case]]
name = "fits"
command = ["python3", "train.py", "--batch", "{batch}"]
search = { param = "batch", min = 8, max = 1024, step = 8 }

[[case]]
name = "budget"
command = ["python3", "big.py"]
budget = { host = "512 MiB" }

[[case]]
name = "oom"
command = ["python3", "oom.py"]
"#;
    crate::suite::parse(
        text,
        std::path::Path::new("train.toml"),
        std::path::Path::new("."),
    )
    .expect("the snapshot suite")
}

pub(super) fn run(case: &Case, host: u64, gpu: Option<u64>, exit: Exit) -> RunRecord {
    let mut run = RunRecord::ended(Some(host), &[Some(exit)]);
    run.started_at = "2026-12-04T10:00:00.000+00:00".into();
    run.wall_time = Duration::from_millis(12_500);
    run.samples = 250;
    run.host.peak_source = Some(crate::measure::host::HostFloor::Vmhwm);
    run.gpu = gpu.map(|peak| GpuFigures {
        peak_bytes: Some(peak),
        method: GpuMethod::Sampled { interval_ms: 50 },
        devices: Vec::new(),
        left_bytes: None,
        ranks: Default::default(),
        outside: None,
    });
    run.dir = format!("cases/{}", case.id).into();
    run
}

pub(super) fn locked(
    case: &Case,
    host: u64,
    gpu: Option<u64>,
    capacity: Option<u64>,
) -> LockedCase {
    let mut locked = LockedCase::empty();
    locked.command = case.command.clone();
    locked.host_peak_bytes = Some(host);
    locked.host_peak_method = Some(HostMethod::CgroupV1);
    locked.gpu_peak_bytes = gpu;
    locked.gpu_peak_method = gpu.map(|_| GpuMethod::Sampled { interval_ms: 50 });
    locked.capacity = capacity;
    locked.capacity_of = capacity.map(|_| "batch, step 8".to_string());
    locked
}

/// The run every snapshot renders.
fn judged_run() -> RunResults {
    let suite = suite();
    let case = |id: &str| {
        suite
            .cases
            .iter()
            .find(|c| c.id == id)
            .expect("a snapshot case")
    };
    let lock = Lock::of(
        "train-gate",
        "2026-12-01T09:00:00.000+00:00",
        [
            ("ok", locked(case("ok"), 60 * MIB, None, None)),
            (
                "train",
                locked(case("train"), 2 * GIB, Some(38 * GIB), None),
            ),
            (
                "fits",
                locked(case("fits"), 3 * GIB, Some(70 * GIB), Some(88)),
            ),
        ],
    );
    let info = BaselineInfo {
        path: PathBuf::from("train.lock"),
        locked_at: lock.locked_at.clone(),
        drift: vec![Drift {
            what: "torch".into(),
            before: "2.4.1".into(),
            after: "2.5.0".into(),
        }],
        on_drift: DriftPolicy::Warn,
        gpu_compared: true,
        testbed: None,
        removed: Vec::new(),
    };
    let baseline = Baseline {
        lock: Some(&lock),
        info: Some(&info),
        require: false,
        history: None,
    };

    let ok = run(case("ok"), 63 * MIB + MIB / 5, None, Exit::Code(0));
    let train = run(
        case("train"),
        2 * GIB,
        Some(41 * GIB + GIB / 5),
        Exit::Code(0),
    );
    let fits = run(case("fits"), 3 * GIB, Some(60 * GIB), Exit::Code(0));
    let probes = [
        (8, true),
        (16, true),
        (32, true),
        (64, true),
        (72, true),
        (80, false),
    ];
    let capacity = Capacity {
        param: "batch".into(),
        step: Some(8),
        value: Some(72),
        complete: true,
        probes: probes
            .iter()
            .map(|&(value, passed)| Probe {
                value,
                status: if passed {
                    CaseStatus::Passed
                } else {
                    CaseStatus::Failed
                },
                failure_kind: (!passed).then_some(crate::results::FailureType::GpuOom),
                host_peak_bytes: Some(3 * GIB),
                gpu_peak_bytes: Some(value * 800 * MIB),
                wall_time_s: 2.0,
            })
            .collect(),
    };
    let mut budget = run(case("budget"), 612 * MIB, None, Exit::Signal(15));
    budget.stop = Some(StopReason::BudgetExceeded {
        at: Duration::from_millis(1200),
    });
    // What the workload printed as it ran out: scanned as a real log is.
    let mut oom = run(case("oom"), GIB, Some(79 * GIB), Exit::Code(1));
    let printed = "Traceback (most recent call last):\n  File \"oom.py\", line 3, in <module>\ntorch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.19 GiB of which 1.06 GiB is free. Including non-PyTorch memory, this process has 30.12 GiB memory in use. Of the allocated memory 27.40 GiB is allocated by PyTorch, and 2.10 GiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.\n";
    oom.focus.scan = Some(crate::diagnose::scan(printed.as_bytes()));

    let mut cases = Vec::new();
    for (id, runs, capacity) in [
        ("ok", vec![ok], None),
        ("train", vec![train], None),
        ("fits", vec![fits], Some(capacity)),
        ("budget", vec![budget], None),
        ("oom", vec![oom], None),
    ] {
        let judgement = judge::judge_case(
            Finished {
                case: case(id),
                runs,
                capacity,
                shared: false,
                first_attempt: None,
                stopping: false,
            },
            &baseline,
        );
        let mut result = judgement.result;
        super::words::word_case(&mut result, &judgement.verdict, Some("2.5.0"));
        cases.push(result);
    }
    let mut results = results_with_text("x");
    results.suite.name = "train-gate".into();
    results.finished_at = Some("2026-12-04T10:01:10.000+00:00".into());
    results.measurement.gpu_method = Some("nvml".into());
    results.measurement.host_method = HostMethod::CgroupV1;
    results.baseline = Some(info);
    results.summary = Summary::default();
    for case in &cases {
        results.summary.add(case);
    }
    results.summary.planned = cases.len();
    results.cases = cases;
    results
}

#[test]
fn terminal_lines_and_table() {
    let results = judged_run();
    let terminal = super::terminal::Terminal::new(super::terminal::Progress::None);
    let mut text = String::new();
    for case in &results.cases {
        text.push_str(&terminal.finished_line(case));
        text.push('\n');
    }
    text.push_str(&terminal.final_table(&results));
    insta::assert_snapshot!(text);
}

/// What ends the run on the terminal: the table again between rules, the
/// baseline's notes and the summary line, the run's time fixed.
#[test]
fn terminal_closing() {
    let terminal = super::terminal::Terminal::new(super::terminal::Progress::None);
    let lines = terminal.closing_lines(&judged_run(), RUN_TIME);
    insta::assert_snapshot!(lines.join("\n"));
}

#[test]
fn case_details() {
    insta::assert_snapshot!(case_details_text(&judged_run()));
}

#[test]
fn github_annotations() {
    insta::assert_snapshot!(annotations_text(&judged_run()));
}

#[test]
fn junit() {
    let results = judged_run();
    insta::assert_snapshot!(super::junit::render(&results).expect("junit"));
}

#[test]
fn markdown() {
    insta::assert_snapshot!(super::markdown::render(&judged_run()));
}

/// How long every snapshot run took, for the summary line.
const RUN_TIME: Duration = Duration::from_secs(70);

/// The terminal as a CI log shows a run: a line (or a few) per finished
/// case, then what ends the run.
pub(super) fn terminal_text(results: &RunResults) -> String {
    let terminal = super::terminal::Terminal::new(super::terminal::Progress::None);
    let mut lines: Vec<String> = results
        .cases
        .iter()
        .map(|case| terminal.finished_line(case))
        .collect();
    lines.extend(terminal.closing_lines(results, RUN_TIME));
    lines.join("\n")
}

/// Every case's details block, as JUnit's bodies hold them.
pub(super) fn case_details_text(results: &RunResults) -> String {
    let text: Vec<String> = results
        .cases
        .iter()
        .map(|case| super::case_details(case, &results.measurement))
        .collect();
    text.join("\n")
}

/// The workflow commands GitHub Actions reads, as each case finishes
/// and as the run ends.
pub(super) fn annotations_text(results: &RunResults) -> String {
    let planned = results.summary.planned;
    let mut commands = Vec::new();
    for (index, result) in results.cases.iter().enumerate() {
        commands.extend(super::github::commands(
            &super::Event::CaseFinished {
                result,
                index,
                planned,
                results,
            },
            None,
        ));
    }
    commands.extend(super::github::commands(
        &super::Event::RunFinished { results },
        None,
    ));
    commands.join("\n")
}

/// report.html as a reader sees it/// report.html as a reader sees it: its text, without markup, styles or
/// the charts' drawing (their legends and titles are text, and kept).
#[test]
fn html_text() {
    let out = tempfile::tempdir().expect("an out dir");
    let page = super::html::render(&judged_run(), out.path());
    insta::assert_snapshot!(visible_text(&page));
}

/// The text of an HTML page, a line per block: `<style>` and SVG paths
/// dropped, tags removed, entities for `&`, `<`, `>` and quotes read back,
/// blank lines and runs of spaces collapsed.
pub(super) fn visible_text(page: &str) -> String {
    let mut text = String::new();
    let mut rest = page;
    while let Some(open) = rest.find('<') {
        text.push_str(&rest[..open]);
        let tag = &rest[open..];
        let skip_to = |end: &str| tag.find(end).map(|at| at + end.len());
        let consumed = if tag.starts_with("<style") {
            skip_to("</style>")
        } else {
            skip_to(">")
        }
        .unwrap_or(tag.len());
        let name = tag[1..]
            .trim_start_matches('/')
            .split(|c: char| !c.is_ascii_alphanumeric())
            .next()
            .unwrap_or_default();
        if matches!(
            name,
            "p" | "div"
                | "tr"
                | "li"
                | "h1"
                | "h2"
                | "h3"
                | "br"
                | "section"
                | "table"
                | "text"
                | "title"
                | "summary"
                | "pre"
        ) {
            text.push('\n');
        } else if matches!(name, "td" | "th") && !tag.starts_with("</") {
            text.push_str(" | ");
        }
        rest = &tag[consumed..];
    }
    text.push_str(rest);
    let text = text
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&#39;", "'")
        .replace("&amp;", "&");
    text.lines()
        .map(|line| line.split_whitespace().collect::<Vec<_>>().join(" "))
        .map(|line| line.trim_start_matches("| ").to_string())
        .filter(|line| !line.is_empty() && line != "|")
        .collect::<Vec<_>>()
        .join("\n")
}

//! The main thread's loop against a scripted launcher: which cases start,
//! in which order, what a retry alone, Ctrl-C or a worker's panic does to
//! the run — decided by the dispatcher and the judge, with no process.

use std::collections::{HashMap, VecDeque};
use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex};

use super::super::launcher::{Launcher, Worker};
use super::super::shared::{Job, Note, Shared, Upcoming};
use super::super::{BaselineSetup, Interrupt, RunSetup, Runner, Schedule};
use crate::capacity::Capacity;
use crate::record::{RunRecord, StopReason, Warning};
use crate::report::{Event, Reporter};
use crate::results::{CaseStatus, Exit, FailureType, RunResults};

const MIB: u64 = 1024 * 1024;

/// What a scripted case does at one attempt (a retry alone is its second).
enum Act {
    /// Its runs end so.
    Runs(Vec<RunRecord>),
    /// Its thread panics.
    Panic,
    /// Ctrl-C arrives while it runs: it is stopped, interrupted.
    CtrlC,
    /// It says something on the way, then passes.
    Warns(&'static str),
}

/// A session's test, and the case queued behind it as it ran.
type Behind = (String, Option<String>);

/// A launcher that plays each case's acts, in order, and keeps which case
/// ran when.
struct Scripted {
    acts: Mutex<HashMap<String, VecDeque<Act>>>,
    ran: Arc<Mutex<Vec<String>>>,
    /// For each test of a shared session that ran: the case queued
    /// behind it on its worker as it ran, if any.
    behind: Arc<Mutex<Vec<Behind>>>,
    interrupt: Interrupt,
}

impl Scripted {
    fn new(interrupt: &Interrupt, acts: Vec<(&str, Vec<Act>)>) -> Self {
        Scripted {
            acts: Mutex::new(
                acts.into_iter()
                    .map(|(id, acts)| (id.to_string(), acts.into()))
                    .collect(),
            ),
            ran: Arc::default(),
            behind: Arc::default(),
            interrupt: interrupt.clone(),
        }
    }
}

impl Launcher for Scripted {
    fn worker<'s>(
        &'s self,
        _shared: &'s Shared<'_>,
        notes: Sender<(usize, Note)>,
    ) -> Box<dyn Worker + 's> {
        Box::new(Played {
            script: self,
            notes,
        })
    }
}

struct Played<'s> {
    script: &'s Scripted,
    notes: Sender<(usize, Note)>,
}

impl Worker for Played<'_> {
    fn run(
        &mut self,
        job: &Job<'_>,
        upcoming: &mut Upcoming<'_, '_>,
    ) -> (Vec<RunRecord>, Option<Capacity>) {
        let id = job.case.id.clone();
        if job.case.pytest_session.is_some() {
            // What the main thread queues behind a session's test, it
            // queues as the test starts: looked for a while, as a real
            // test takes a while.
            let until = std::time::Instant::now() + std::time::Duration::from_millis(300);
            let mut queued = upcoming.peek().map(|j| j.case.id.clone());
            while queued.is_none() && std::time::Instant::now() < until {
                std::thread::sleep(std::time::Duration::from_millis(5));
                queued = upcoming.peek().map(|j| j.case.id.clone());
            }
            self.script
                .behind
                .lock()
                .expect("the log")
                .push((id.clone(), queued));
        }
        self.script.ran.lock().expect("the log").push(id.clone());
        let act = self
            .script
            .acts
            .lock()
            .expect("the script")
            .get_mut(&id)
            .and_then(VecDeque::pop_front);
        match act.unwrap_or_else(|| panic!("{id} ran more often than scripted")) {
            Act::Runs(runs) => (runs, None),
            Act::Panic => panic!("a scripted panic"),
            Act::CtrlC => {
                self.script.interrupt.request();
                let mut run = passed(10);
                run.stop = Some(StopReason::Interrupted);
                run.instances[0].exit = Some(Exit::Signal(15));
                (vec![run], None)
            }
            Act::Warns(message) => {
                let warning = Note::Warning(Warning::Snapshot(message.to_string()));
                self.notes.send((job.number, warning)).ok();
                (vec![passed(10)], None)
            }
        }
    }
}

fn passed(host_mib: u64) -> RunRecord {
    RunRecord::ended(Some(host_mib * MIB), &[Some(Exit::Code(0))])
}

fn crashed() -> RunRecord {
    RunRecord::ended(Some(10 * MIB), &[Some(Exit::Code(1))])
}

/// A run that ran out of GPU memory on a GPU an earlier case had not yet
/// given back.
fn oom_on_an_unsettled_gpu() -> RunRecord {
    let mut run = crashed();
    run.settle = Some(crate::measure::gpu::settle::Settle {
        waited_s: 30.0,
        settled: false,
        devices: Vec::new(),
    });
    let printed = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\n";
    run.focus.scan = Some(crate::diagnose::scan(printed.as_bytes()));
    run
}

/// Every event's kind, and each warning's text.
#[derive(Default)]
struct Heard {
    events: Vec<String>,
}

impl Reporter for Heard {
    fn handle(&mut self, event: &Event<'_>) -> std::io::Result<()> {
        self.events.push(match event {
            Event::RunStarted { .. } => "run started".into(),
            Event::CaseStarted { case, .. } => format!("started {}", case.id),
            Event::CaseProgress { .. } => "progress".into(),
            Event::CaseFinished { result, .. } => {
                format!("finished {} {}", result.id, result.status.as_str())
            }
            Event::RunFinishing { .. } => "run finishing".into(),
            Event::RunFinished { .. } => "run finished".into(),
            Event::Warning { message } => format!("warning {message}"),
        });
        Ok(())
    }
}

const SUITE: &str = r#"
[suite]
name = "s"

[[case]]
name = "a"
command = ["a"]

[[case]]
name = "b"
command = ["b"]

[[case]]
name = "c"
command = ["c"]
"#;

/// Run the suite's cases with `acts`; the results, the events and the
/// cases in the order they ran.
fn run(
    acts: Vec<(&str, Vec<Act>)>,
    past_wall_s: &[(&str, f64)],
) -> (RunResults, Vec<String>, Vec<String>) {
    run_in_session(acts, past_wall_s, &[])
}

/// [`run`], the cases `in_session` being tests of one shared pytest
/// session.
fn run_in_session(
    acts: Vec<(&str, Vec<Act>)>,
    past_wall_s: &[(&str, f64)],
    in_session: &[&str],
) -> (RunResults, Vec<String>, Vec<String>) {
    let out = tempfile::tempdir().expect("a temporary out dir");
    let mut suite = crate::suite::parse(
        SUITE,
        std::path::Path::new("s.toml"),
        std::path::Path::new("."),
    )
    .expect("the suite");
    for case in &mut suite.cases {
        if in_session.contains(&case.id.as_str()) {
            case.pytest_session = Some(crate::suite::PytestSession {
                table: 0,
                command: vec!["pytest".into()],
                nodeid: format!("test_s.py::{}", case.id),
            });
        }
    }
    let interrupt = Interrupt::default();
    let script = Scripted::new(&interrupt, acts);
    let setup = RunSetup {
        interrupt,
        memory: None,
        gpu: None,
        measurement: Default::default(),
        environment: Default::default(),
        baseline: BaselineSetup {
            lock: None,
            require: false,
            compare_across_gpus: false,
            testbed: None,
            history: None,
        },
        partition: None,
        origin: Default::default(),
        schedule: Schedule {
            past_wall_s: past_wall_s
                .iter()
                .map(|(id, s)| (id.to_string(), *s))
                .collect(),
            ..Schedule::default()
        },
        pytest_sessions: Default::default(),
    };
    let mut heard = Heard::default();
    let cases: Vec<&crate::suite::Case> = suite.cases.iter().collect();
    let ran = Arc::clone(&script.ran);
    let behind = Arc::clone(&script.behind);
    let mut runner = Runner::with_launcher(&suite, out.path(), setup, Box::new(script), None);
    let results = runner
        .run(&cases, &mut heard)
        .expect("a run without faults");
    let ran = ran.lock().expect("the log").clone();
    let behind = behind.lock().expect("the log").clone();
    let mut events = heard.events;
    events.extend(behind.into_iter().map(|(id, queued)| match queued {
        Some(next) => format!("{next} queued behind {id}"),
        None => format!("nothing queued behind {id}"),
    }));
    (results, events, ran)
}

fn status(results: &RunResults, id: &str) -> CaseStatus {
    results
        .cases
        .iter()
        .find(|c| c.id == id)
        .map(|c| c.status)
        .unwrap_or_else(|| panic!("{id} has a result"))
}

#[test]
fn cases_start_longest_first_and_their_results_keep_the_suites_order() {
    // (past wall times, the order the cases start in)
    type Row<'t> = (&'t [(&'t str, f64)], &'t [&'t str]);
    let table: &[Row] = &[
        (&[], &["a", "b", "c"]),
        (&[("a", 1.0), ("b", 5.0), ("c", 9.0)], &["c", "b", "a"]),
        // A case never timed starts first: its time is unknown.
        (&[("a", 1.0), ("c", 9.0)], &["b", "c", "a"]),
    ];
    for (past, order) in table {
        let acts = vec![
            ("a", vec![Act::Runs(vec![passed(10)])]),
            ("b", vec![Act::Runs(vec![crashed()])]),
            ("c", vec![Act::Runs(vec![passed(20)])]),
        ];
        let (results, _, ran) = run(acts, past);
        assert_eq!(&ran, order, "{past:?}");
        let ids: Vec<&str> = results.cases.iter().map(|c| c.id.as_str()).collect();
        assert_eq!(ids, ["a", "b", "c"]);
        assert_eq!(status(&results, "b"), CaseStatus::Failed);
        assert_eq!(results.cases[1].failure_kind, Some(FailureType::Crash));
        assert_eq!(results.cases[2].host.peak_bytes, Some(20 * MIB));
        assert_eq!((results.summary.passed, results.summary.failed), (2, 1));
    }
}

#[test]
fn a_sessions_next_test_is_queued_behind_the_one_running_and_others_wait_their_turn() {
    // a and b are tests of one shared session, c a case of its own; one
    // job at a time.
    let acts = vec![
        ("a", vec![Act::Runs(vec![passed(10)])]),
        ("b", vec![Act::Runs(vec![passed(10)])]),
        ("c", vec![Act::Runs(vec![passed(10)])]),
    ];
    let (results, events, ran) = run_in_session(acts, &[], &["a", "b"]);
    assert_eq!(ran, ["a", "b", "c"]);
    // b is handed to a's worker as a starts (the worker asks the session
    // for it the moment a answers); c, which is no test of the session,
    // starts only once b has ended: the job limit holds.
    let order: Vec<&str> = events
        .iter()
        .map(String::as_str)
        .filter(|e| e.starts_with("started") || e.starts_with("finished"))
        .collect();
    assert_eq!(
        order,
        [
            "started a",
            "started b",
            "finished a passed",
            "started c",
            "finished b passed",
            "finished c passed"
        ]
    );
    assert_eq!(results.summary.passed, 3);
    // The worker saw b queued while it ran a; c is no test of the session.
    assert!(
        events.contains(&"b queued behind a".to_string()),
        "{events:?}"
    );
    assert!(
        events.contains(&"nothing queued behind b".to_string()),
        "{events:?}"
    );
}

#[test]
fn a_worker_that_panics_fails_its_case_and_the_run_goes_on() {
    let acts = vec![
        ("a", vec![Act::Runs(vec![passed(10)])]),
        ("b", vec![Act::Panic]),
        ("c", vec![Act::Runs(vec![passed(10)])]),
    ];
    let (results, events, ran) = run(acts, &[]);
    assert_eq!(ran, ["a", "b", "c"]);
    assert_eq!(status(&results, "b"), CaseStatus::Error);
    assert_eq!(
        results.cases[1].failure_kind,
        Some(FailureType::LaunchError)
    );
    assert_eq!(status(&results, "c"), CaseStatus::Passed);
    assert!(
        events.contains(&"finished c passed".to_string()),
        "{events:?}"
    );
}

#[test]
fn ctrl_c_ends_the_case_it_stops_and_starts_nothing_after_it() {
    let acts = vec![
        ("a", vec![Act::Runs(vec![passed(10)])]),
        ("b", vec![Act::CtrlC]),
        ("c", vec![]),
    ];
    let (results, events, ran) = run(acts, &[]);
    assert_eq!(ran, ["a", "b"]);
    assert_eq!(status(&results, "b"), CaseStatus::Interrupted);
    assert_eq!(results.not_run, ["c"]);
    assert!(results.interrupted);
    assert!(!events.iter().any(|e| e == "started c"), "{events:?}");
    assert_eq!(events.last().map(String::as_str), Some("run finished"));
}

#[test]
fn an_oom_on_a_gpu_not_yet_settled_is_retried_once_and_judged_by_the_retry() {
    let table = [
        // Alone, it passes: the first attempt's OOM was the GPU's state.
        (passed(10), CaseStatus::Passed, Some(true)),
        // Alone, it fails again: the failure stands, not flaky.
        (crashed(), CaseStatus::Failed, Some(false)),
    ];
    for (retry, status_after, flaky) in table {
        let acts = vec![
            ("a", vec![Act::Runs(vec![passed(10)])]),
            (
                "b",
                vec![
                    Act::Runs(vec![oom_on_an_unsettled_gpu()]),
                    Act::Runs(vec![retry]),
                ],
            ),
            ("c", vec![Act::Runs(vec![passed(10)])]),
        ];
        let (results, events, ran) = run(acts, &[]);
        assert_eq!(ran, ["a", "b", "b", "c"]);
        assert_eq!(status(&results, "b"), status_after);
        let retried = results.cases[1].retried_alone.as_ref().expect("retried");
        assert_eq!(Some(retried.flaky), flaky);
        assert_eq!(
            retried.first_attempt.failure_kind,
            Some(FailureType::GpuOom)
        );
        let warned = events
            .iter()
            .filter(|e| e.starts_with("warning b: ran out of GPU memory"))
            .count();
        assert_eq!(warned, 1, "{events:?}");
        // The first attempt is no result of its own.
        assert_eq!(results.cases.len(), 3);
    }
}

#[test]
fn a_workers_warnings_reach_the_reporters_before_its_case_finishes() {
    let acts = vec![
        ("a", vec![Act::Warns("not a torch memory snapshot")]),
        ("b", vec![Act::Runs(vec![passed(10)])]),
        ("c", vec![Act::Runs(vec![passed(10)])]),
    ];
    let (_, events, _) = run(acts, &[]);
    let warned = events
        .iter()
        .position(|e| e == "warning a: memory snapshot: not a torch memory snapshot")
        .expect("the warning");
    let finished = events
        .iter()
        .position(|e| e == "finished a passed")
        .expect("a finished");
    assert!(warned < finished, "{events:?}");
}

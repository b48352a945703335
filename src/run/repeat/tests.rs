//! A case's repeats and its capacity search against a scripted run: how
//! many runs a case gets, which probe it is judged by, what its search
//! found — with no process.

use std::path::Path;

use super::{RunOnce, run_repeats, run_search};
use crate::record::{RunRecord, StopReason};
use crate::results::{CaseStatus, Exit};
use crate::run::fault::WriteFault;
use crate::suite::Case;

const MIB: u64 = 1024 * 1024;

/// A run that passes, crashes, could not start or was interrupted, by the
/// value it ran at and its repeat; the runs made, in order, as
/// `(value, repeat)`.
struct Scripted<F: Fn(Option<u64>, u32) -> RunRecord> {
    end: F,
    ran: Vec<(Option<u64>, u32)>,
    /// Stop after this many runs (Ctrl-C).
    stop_after: Option<usize>,
}

impl<F: Fn(Option<u64>, u32) -> RunRecord> RunOnce for Scripted<F> {
    fn run_once(
        &mut self,
        _case: &Case,
        case_dir: &Path,
        repeat: u32,
        probe_value: Option<u64>,
    ) -> RunRecord {
        self.ran.push((probe_value, repeat));
        // As a real run does: its timeline, which the search keeps apart.
        let timeline = format!("{{\"value\": {probe_value:?}}}");
        std::fs::write(case_dir.join("timeline.json"), timeline).expect("a timeline");
        let mut run = (self.end)(probe_value, repeat);
        run.probe_value = probe_value;
        run.repeat = repeat;
        run
    }

    fn stopping(&self) -> bool {
        self.stop_after.is_some_and(|n| self.ran.len() >= n)
    }

    fn fault(&self, fault: WriteFault) {
        panic!("no file should fail here: {fault}");
    }
}

fn scripted<F: Fn(Option<u64>, u32) -> RunRecord>(end: F) -> Scripted<F> {
    Scripted {
        end,
        ran: Vec::new(),
        stop_after: None,
    }
}

fn ends(exit: i32) -> RunRecord {
    RunRecord::ended(Some(10 * MIB), &[Some(Exit::Code(exit))])
}

fn case(extra: &str) -> Case {
    let text = format!("[suite]\nname = \"s\"\n[[case]]\nname = \"c\"\n{extra}\n");
    crate::suite::parse(&text, Path::new("s.toml"), Path::new("."))
        .expect("a suite")
        .cases
        .remove(0)
}

#[test]
fn repeats_run_until_one_fails_or_the_run_stops() {
    // (the repeat that crashes, Ctrl-C after this many runs, runs made)
    let table = [
        (None, None, 3),
        (Some(0), None, 1),
        (Some(1), None, 2),
        // The last needs no judging on the way: all three ran.
        (Some(2), None, 3),
        (None, Some(1), 1),
    ];
    let case = case("command = [\"x\"]\nrepeat = 3");
    let dir = tempfile::tempdir().expect("a case folder");
    for (crashes, stop_after, made) in table {
        let mut runner = scripted(|_, repeat| ends(i32::from(Some(repeat) == crashes)));
        runner.stop_after = stop_after;
        let runs = run_repeats(&mut runner, &case, dir.path(), None);
        assert_eq!(runs.len(), made, "{crashes:?} {stop_after:?}");
        let repeats: Vec<u32> = runs.iter().map(|r| r.repeat).collect();
        assert_eq!(repeats, (0..made as u32).collect::<Vec<_>>());
    }
}

const SEARCH: &str =
    "command = [\"x\", \"{batch}\"]\nsearch = { param = \"batch\", min = 8, max = 64, step = 8 }";

#[test]
fn a_search_finds_the_largest_value_that_passes_and_is_judged_by_its_runs() {
    let case = case(SEARCH);
    let spec = case.search.clone().expect("a search");
    let dir = tempfile::tempdir().expect("a case folder");
    // Fits up to 40: anything larger runs out.
    let mut runner = scripted(|value, _| ends(i32::from(value.unwrap_or(0) > 40)));
    let (runs, found) = run_search(&mut runner, &case, dir.path(), &spec, None);
    assert_eq!(found.value, Some(40));
    assert!(found.complete);
    assert_eq!(found.probes.len(), runner.ran.len());
    for probe in &found.probes {
        let fits = probe.value <= 40;
        assert_eq!(probe.passed(), fits, "{probe:?}");
    }
    // Judged by the probe that found it, whose timeline is the case's.
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0].probe_value, Some(40));
    let timeline = std::fs::read_to_string(dir.path().join("timeline.json")).expect("read");
    assert_eq!(timeline, "{\"value\": Some(40)}");
    // Each probe's timeline is kept apart.
    for (value, _) in &runner.ran {
        let kept = dir
            .path()
            .join(format!("timeline.batch-{}.json", value.unwrap_or(0)));
        assert!(kept.exists(), "{}", kept.display());
    }
}

#[test]
fn a_search_ends_at_a_probe_that_cannot_run_or_is_interrupted() {
    let case = case(SEARCH);
    let spec = case.search.clone().expect("a search");
    // (what a run at 16 or more does, the status of the runs judged)
    let table: [(fn() -> RunRecord, CaseStatus); 2] = [
        (
            || {
                let mut run = RunRecord::ended(None, &[None]);
                run.stop = Some(StopReason::LaunchFailed {
                    message: "no such file".into(),
                });
                run
            },
            CaseStatus::Error,
        ),
        (
            || {
                let mut run = ends(0);
                run.stop = Some(StopReason::Interrupted);
                run
            },
            CaseStatus::Interrupted,
        ),
    ];
    for (at_16, judged) in table {
        let dir = tempfile::tempdir().expect("a case folder");
        let mut runner = scripted(|value, _| match value {
            Some(v) if v >= 16 => at_16(),
            _ => ends(0),
        });
        let (runs, found) = run_search(&mut runner, &case, dir.path(), &spec, None);
        assert!(!found.complete, "{judged:?}");
        // Judged by the probe that ended it, not by an earlier pass.
        let probe = runs[0].probe_value.expect("a probe's value");
        assert!(probe >= 16);
        let status = crate::judge::judge_run(&case.probe(probe), &runs[0])
            .verdict
            .status;
        assert_eq!(status, judged);
        // Nothing after it ran.
        assert_eq!(runner.ran.last(), Some(&(Some(probe), 0)));
    }
}

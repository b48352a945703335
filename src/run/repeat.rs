//! What a worker runs of a case: its runs — once, `repeat` times, or
//! once per probe of a capacity search — each made by `case` (the run)
//! and `measured` (its measurement record). What steers them (a failed
//! repeat ends the repeats, a probe's status the search) is the judge's
//! answer for each run (`judge::judge_run`).

use std::path::{Path, PathBuf};
use std::time::Instant;

use super::case::{CaseRunner, mark_logs};
use super::fault::WriteFault;
use crate::capacity::SearchSpec;
use crate::capacity::{self, Capacity, Probe};
use crate::files::case::InstanceLogs;
use crate::judge;
use crate::record::RunRecord;
use crate::results::CaseStatus;
use crate::suite::Case;

/// What a case's runs are made of: one run, measured. `CaseRunner` makes
/// it by launching the case; the tests script it.
pub(super) trait RunOnce {
    /// Run `case` once and measure it: its `repeat`-th run, at
    /// `probe_value` of a search.
    fn run_once(
        &mut self,
        case: &Case,
        case_dir: &Path,
        repeat: u32,
        probe_value: Option<u64>,
    ) -> RunRecord;
    /// The run is stopping (Ctrl-C, a file that could not be written):
    /// nothing more is started.
    fn stopping(&self) -> bool;
    /// A file of the case could not be written.
    fn fault(&self, fault: WriteFault);
}

impl RunOnce for CaseRunner<'_, '_> {
    fn run_once(
        &mut self,
        case: &Case,
        case_dir: &Path,
        repeat: u32,
        probe_value: Option<u64>,
    ) -> RunRecord {
        let (started_at, outcome) = self.run_case(case, case_dir, repeat);
        self.measured(case, case_dir, (repeat, probe_value), started_at, outcome)
    }

    fn stopping(&self) -> bool {
        self.shared.interrupt.requested() || self.shared.faulted()
    }

    fn fault(&self, fault: WriteFault) {
        self.record_fault(fault);
    }
}

/// Run the case `repeat` times, or until a run fails, Ctrl-C or a
/// fault: each run's measurement, for the main thread to judge.
/// `probe_value`: the value a capacity search runs it at.
pub(super) fn run_repeats(
    runner: &mut impl RunOnce,
    case: &Case,
    case_dir: &Path,
    probe_value: Option<u64>,
) -> Vec<RunRecord> {
    let mut runs = Vec::new();
    for repeat in 0..case.repeat {
        if repeat > 0 && runner.stopping() {
            break;
        }
        let run = runner.run_once(case, case_dir, repeat, probe_value);
        // One failing repeat decides; more runs only cost time. The
        // last needs no judging here: the main thread judges them all.
        let more = repeat + 1 < case.repeat;
        let failed = more && !judge::judge_run(case, &run).verdict.status.ok();
        runs.push(run);
        if failed {
            break;
        }
    }
    runs
}

/// Search a case's capacity: probe values as `capacity::next_probe`
/// says, each probe a run of the case (its repeats included) at that
/// value, until the search ends, is cut short (`max_probes`, its
/// `timeout`, Ctrl-C, a fault) or a probe errs (the case cannot run at
/// all: searching on would only repeat it). Returns the runs the case
/// is judged by — the largest value that passed, else the last probe —
/// and what was found. Each probe's timeline is kept as
/// `timeline.<param>-<value>.json`; `timeline.json` is the chosen one's.
pub(super) fn run_search(
    runner: &mut impl RunOnce,
    case: &Case,
    case_dir: &Path,
    spec: &SearchSpec,
    locked: Option<u64>,
) -> (Vec<RunRecord>, Capacity) {
    let deadline = spec.timeout.and_then(|t| Instant::now().checked_add(t));
    let mut probes: Vec<Probe> = Vec::new();
    let mut best: Option<(u64, Vec<RunRecord>)> = None;
    let mut last: Vec<RunRecord> = Vec::new();
    let mut last_value = None;
    let mut cut = false;
    while let Some(value) = capacity::next_probe(spec, locked, &probes) {
        // The first probe always runs (it may be interrupted like any
        // case); the search's limits are checked between probes.
        let out_of_time = deadline.is_some_and(|d| Instant::now() >= d);
        let stopping = runner.stopping();
        if !probes.is_empty() && (out_of_time || stopping) {
            cut = true;
            break;
        }
        let probe_case = case.probe(value);
        // Every instance's logs get the marker (created when the probe
        // has more instances than the folder was prepared for).
        let marker = format!("\n[oomgate] probe {}={value} starts\n", spec.param);
        let instances = probe_case.concurrency.max(case.concurrency);
        for fault in mark_logs(case_dir, instances, case.server.is_some(), &marker) {
            runner.fault(fault);
        }
        // A probe that writes no timeline must not inherit the last.
        std::fs::remove_file(case_dir.join("timeline.json")).ok();
        let runs = run_repeats(runner, &probe_case, case_dir, Some(value));
        let kept = case_dir.join(format!("timeline.{}-{value}.json", spec.param));
        std::fs::copy(case_dir.join("timeline.json"), &kept).ok();
        // Its probe lines too: the next probe's reader starts on an
        // empty file (its figures are its own, not the sum of every
        // probe's steps), and report.html draws each probe apart.
        for (path, logs) in probe_metrics(case_dir, instances, case.server.is_some()) {
            std::fs::rename(path, logs.probe_metrics(&spec.param, value)).ok();
        }
        let probe = judge::probe(&probe_case, value, &runs);
        if probe.status == CaseStatus::Interrupted {
            // Not a verdict on the value: Ctrl-C. The case is judged by
            // this probe (interrupted), not by an earlier pass.
            restore_probe_metrics(case_dir, case, &spec.param, value);
            let mut found = capacity::outcome(spec, locked, probes);
            found.complete = false;
            return (runs, found);
        }
        if probe.status == CaseStatus::Error {
            // The case could not run at that value: its error is the
            // verdict, whatever passed before.
            restore_probe_metrics(case_dir, case, &spec.param, value);
            probes.push(probe);
            let mut found = capacity::outcome(spec, locked, probes);
            found.complete = false;
            return (runs, found);
        }
        if probe.passed() && best.as_ref().is_none_or(|(b, _)| value > *b) {
            best = Some((value, runs));
        } else {
            last = runs;
            last_value = Some(value);
        }
        probes.push(probe);
    }
    let mut found = capacity::outcome(spec, locked, probes);
    found.complete &= !cut;
    let runs = match best {
        Some((value, runs)) => {
            let chosen = case_dir.join(format!("timeline.{}-{value}.json", spec.param));
            std::fs::copy(chosen, case_dir.join("timeline.json")).ok();
            restore_probe_metrics(case_dir, case, &spec.param, value);
            runs
        }
        None => {
            if let Some(value) = last_value {
                restore_probe_metrics(case_dir, case, &spec.param, value);
            }
            last
        }
    };
    (runs, found)
}

/// Every instance's probe file (and the server's), with its logs' names.
fn probe_metrics(case_dir: &Path, instances: u32, server: bool) -> Vec<(PathBuf, InstanceLogs)> {
    let server = server.then(|| InstanceLogs::for_server(case_dir));
    (0..instances)
        .map(|index| InstanceLogs::for_instance(case_dir, index))
        .chain(server)
        .map(|logs| (logs.metrics.clone(), logs))
        .collect()
}

/// The probe lines of search probe `value`, kept apart after it ran, back
/// under the case's own names: the probe the case is judged by is read
/// from there (by `oomgate merge` too).
fn restore_probe_metrics(case_dir: &Path, case: &Case, param: &str, value: u64) {
    let instances = case.probe(value).concurrency.max(case.concurrency);
    use crate::files::case::{create, open_read};
    for (path, logs) in probe_metrics(case_dir, instances, case.server.is_some()) {
        // Through the case-file openers: a link or a FIFO the workload left
        // there is refused, never followed or waited on.
        if let Ok(mut kept) = open_read(&logs.probe_metrics(param, value)) {
            if let Ok(mut restored) = create(&path) {
                std::io::copy(&mut kept, &mut restored).ok();
            }
        }
    }
}

#[cfg(test)]
mod tests;

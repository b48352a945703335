//! One result for a case run `repeat` times: its figures the maximum
//! over the runs, the status those of the first run that did not pass,
//! every run's figures kept so the spread is visible; and what one probe
//! of a capacity search (its runs at one value) earns.

use super::run::judge_run;
use super::verdict::{CaseRun, Observed, StopReason};
use crate::record::RunRecord;
use crate::results::{CaseResult, CaseStatus, Check, CheckKind, RepeatFigures};
use crate::suite::Case;

/// What the runs of a capacity search at `value` earn, as the search
/// reads it: the first status that is not a pass (else passed), the
/// failure kind of the first run that has one, the largest figures, the
/// time of them all. `case` is the probe's (its limits at that value).
pub fn probe(case: &Case, value: u64, runs: &[RunRecord]) -> crate::capacity::Probe {
    let judged: Vec<_> = runs.iter().map(|run| judge_run(case, run)).collect();
    crate::capacity::Probe {
        value,
        status: judged
            .iter()
            .map(|j| j.verdict.status)
            .find(|s| *s != CaseStatus::Passed)
            .unwrap_or(CaseStatus::Passed),
        failure_kind: judged.iter().find_map(|j| j.failure_kind),
        host_peak_bytes: runs.iter().filter_map(|r| r.host.peak_bytes).max(),
        gpu_peak_bytes: runs
            .iter()
            .filter_map(|r| r.gpu.as_ref().and_then(|g| g.peak_bytes))
            .max(),
        wall_time_s: runs.iter().map(|r| r.wall_time.as_secs_f64()).sum(),
    }
}

/// One result for a case run `repeat` times: the figures are the maximum
/// over the runs, the status and message those of the first run that did
/// not pass, and every run's figures are kept so the spread is visible.
pub fn merge_repeats(runs: Vec<CaseRun>) -> CaseRun {
    let mut facts: Vec<Observed> = Vec::with_capacity(runs.len());
    let mut runs: Vec<CaseResult> = runs
        .into_iter()
        .map(|run| {
            facts.push(run.observed);
            run.result
        })
        .collect();
    if runs.len() <= 1 {
        let observed = facts.pop().unwrap_or_else(|| {
            // `runs` is never empty (`repeat` is at least 1); should
            // that ever change, a result saying so beats a panic.
            Observed {
                stop: Some(StopReason::NotRun(crate::record::NotRun::NoRuns)),
                exits: Vec::new(),
                host_peak: None,
                serving: false,
                gpu_lost: None,
                skipped: false,
                errored: false,
            }
        });
        return CaseRun {
            result: runs
                .pop()
                .unwrap_or_else(|| CaseResult::unmeasured(String::new())),
            observed,
        };
    }
    let figures: Vec<RepeatFigures> = runs
        .iter()
        .map(|r| RepeatFigures {
            status: r.status,
            wall_time_s: r.wall_time_s,
            host_peak_bytes: r.host.peak_bytes,
            gpu_peak_bytes: r.gpu_peak_bytes,
            host_working_peak_bytes: r.host.working_peak_bytes,
            host_method: Some(r.host.method),
        })
        .collect();
    // A figure's maximum over the runs; unknown in any run keeps it unknown.
    let max_known = |pick: fn(&RepeatFigures) -> Option<u64>| {
        figures
            .iter()
            .map(pick)
            .collect::<Option<Vec<u64>>>()
            .and_then(|all| all.into_iter().max())
    };
    let host = max_known(|f| f.host_peak_bytes);
    let working = max_known(|f| f.host_working_peak_bytes);
    let gpu = max_known(|f| f.gpu_peak_bytes);
    let wall: f64 = runs.iter().map(|r| r.wall_time_s).sum();
    let samples: u64 = runs.iter().map(|r| r.samples).sum();
    let chosen = match runs.iter().position(|r| r.status != CaseStatus::Passed) {
        Some(failed) => failed,
        None => (0..runs.len())
            .max_by_key(|&i| (runs[i].gpu_peak_bytes, runs[i].host.peak_bytes))
            .unwrap_or(0),
    };
    // The host figures (peak, its source and floors, the charged peak) of
    // the run with the largest host peak, so they describe one run.
    let host_run = (0..runs.len())
        .max_by_key(|&i| runs[i].host.peak_bytes)
        .unwrap_or(0);
    let from = &runs[host_run];
    let host_figures = from.host.clone();
    let oom_kills = runs.iter().filter_map(|r| r.host.oom_kills).max();
    // A server case's load client: the figures (and client budget checks)
    // of the run where it used the most host memory, unless a run failed
    // (then the failed run's, which explain it). `server` stays the chosen
    // run's: the run whose figures the case reports.
    let client_run = (0..runs.len())
        .max_by_key(|&i| runs[i].client.as_ref().and_then(|c| c.host.peak_bytes))
        .filter(|_| runs[chosen].status == CaseStatus::Passed)
        .unwrap_or(chosen);
    let client = runs[client_run].client.clone();
    let client_checks: Vec<Check> = runs[client_run]
        .checks
        .iter()
        .filter(|c| matches!(c.kind, CheckKind::Client(_)))
        .cloned()
        .collect();
    let mut observed = facts.swap_remove(chosen);
    let mut result = runs.swap_remove(chosen);
    if client_run != chosen {
        result.client = client;
        result
            .checks
            .retain(|c| !matches!(c.kind, CheckKind::Client(_)));
        result.checks.extend(client_checks);
    }
    result.host = host_figures;
    result.host.peak_bytes = host;
    result.host.working_peak_bytes = working;
    result.host.oom_kills = oom_kills;
    result.gpu_peak_bytes = gpu;
    result.wall_time_s = wall;
    result.samples = samples;
    result.repeats = figures;
    // The verdict's words quote the merged peak, as the result shows it.
    observed.host_peak = result.host.peak_bytes.map(crate::units::Bytes);
    CaseRun { result, observed }
}

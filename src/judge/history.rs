//! A case's figures against their own past in the run history: its
//! `creep` limit over the ratchet, and a step away from the recent level
//! (`history::trend` finds both). Checks are data, worded by
//! `report::words`; a creep past its limit fails the case (unless its
//! action is `warn`), a step is a notice.

use crate::baseline::Figure;
use crate::history::entry::names;
use crate::history::pasts::Pasts;
use crate::history::trend::{self, Past, Steadiness};
use crate::measure::gpu::GpuMethod;
use crate::results::trend::{TREND_RUNS, Trend, TrendPoint};
use crate::results::{CaseResult, Check, CheckKind, CheckOutcome, Facts, HistoryMark};
use crate::suite::Case;
use crate::suite::CreepAction;

/// Each judged figure: the check's figure, its name in the history, and
/// its value in `result`.
fn figures(result: &CaseResult) -> [(Figure, &'static str, Option<u64>, Steadiness); 5] {
    let gpu_steadiness = match result.gpu_peak_method {
        Some(GpuMethod::Allocator) => Steadiness::Exact,
        _ => Steadiness::Sampled,
    };
    [
        (
            Figure::Gpu,
            names::GPU_PEAK,
            result.gpu_peak_bytes,
            gpu_steadiness,
        ),
        (
            Figure::Host,
            names::HOST_PEAK,
            result.host.peak_bytes,
            Steadiness::Sampled,
        ),
        (
            Figure::Allocated,
            names::PROBE_ALLOCATED,
            result.probe.as_ref().and_then(|p| p.peak_allocated),
            Steadiness::Exact,
        ),
        (
            Figure::Working,
            names::HOST_WORKING_PEAK,
            result.host.working_peak_bytes,
            Steadiness::Sampled,
        ),
        (
            Figure::Outside,
            names::OUTSIDE_ALLOCATOR,
            result.outside_allocator_peak_bytes,
            Steadiness::Sampled,
        ),
    ]
}

/// The history's checks of a case that ran to its end (a failed or
/// skipped run is not held against the past).
pub fn history_checks(case: &Case, result: &CaseResult, pasts: &Pasts) -> Vec<Check> {
    let mut checks = Vec::new();
    for (figure, name, now, steadiness) in figures(result) {
        let Some(now) = now else {
            continue;
        };
        let past = pasts.of(&case.id, result.testbed.as_deref(), name);
        if let Some(check) = step(figure, now, past, steadiness, pasts) {
            checks.push(check);
        }
        let Some(limit) = case.creep else {
            continue;
        };
        let accepted = pasts.accepted(&case.id, result.testbed.as_deref(), name);
        let values: Vec<Past> = past.iter().map(|(_, p)| *p).collect();
        let Some(ratchet) = trend::ratchet(
            &values,
            pasts.since(limit.window),
            accepted.map(|a| (a.level, a.accepted_ms)),
        ) else {
            continue;
        };
        let growth = trend::growth(now as f64, &ratchet);
        let breached = growth > limit.limit;
        let warn_only = limit.action == CreepAction::Warn;
        let (since, from) = match (ratchet.set_by, accepted) {
            (trend::SetBy::Accepted, None) => continue,
            (trend::SetBy::Accepted, Some(accepted)) => (
                HistoryMark::Accepted {
                    accepted_at: accepted.accepted_at.clone(),
                    by: accepted.accepted_by.clone(),
                    reason: accepted.reason.clone(),
                },
                past.iter()
                    .position(|(_, p)| p.started_ms > accepted.accepted_ms)
                    .unwrap_or(past.len()),
            ),
            (trend::SetBy::Runs { from }, _) => {
                let run = &pasts.runs[past[from].0 as usize];
                (
                    HistoryMark::Run {
                        run_id: run.run_id.clone(),
                        started_at: run.started_at.clone(),
                        commit: run.commit.clone(),
                    },
                    from,
                )
            }
        };
        // Steps up since the ratchet's runs, this run's included.
        let mut since_ratchet: Vec<f64> = past[from..].iter().map(|(_, p)| p.value).collect();
        since_ratchet.push(now as f64);
        let steps = trend::steps(&since_ratchet, steadiness)
            .iter()
            .filter(|s| s.after > s.before)
            .count() as u32;
        let outcome = if breached {
            CheckOutcome::Breached
        } else {
            CheckOutcome::Within
        };
        let mut check = Check::new(CheckKind::Creep(figure), !breached || warn_only, outcome);
        check.figure_bytes = Some(now);
        check.limit_bytes = Some(ratchet.level.round() as u64);
        checks.push(check.facts(Facts::Creep {
            limit: limit.limit,
            growth,
            warn_only,
            since,
            steps,
            branch: pasts.branch.clone(),
            window_days: (limit.window.as_secs() / 86_400) as u32,
        }));
    }
    checks
}

/// A step at this run: `now` away from the level of the runs before it
/// by more than the series' noise.
fn step(
    figure: Figure,
    now: u64,
    past: &[(u32, Past)],
    steadiness: Steadiness,
    pasts: &Pasts,
) -> Option<Check> {
    // Too few runs to know a level from noise.
    if past.len() < 3 {
        return None;
    }
    let mut values: Vec<f64> = past.iter().map(|(_, p)| p.value).collect();
    values.push(now as f64);
    let last = values.len() - 1;
    let found = trend::steps(&values, steadiness);
    let step = found.iter().find(|s| s.at == last)?;
    let since = found.iter().rev().find(|s| s.at < last).map_or(0, |s| s.at);
    let runs = (last - since).min(5) as u32;
    let outcome = if step.after > step.before {
        CheckOutcome::Breached
    } else {
        CheckOutcome::Improved
    };
    let mut check = Check::new(CheckKind::Step(figure), true, outcome);
    check.figure_bytes = Some(now);
    Some(check.facts(Facts::Step {
        level_bytes: step.before.round() as u64,
        runs,
        noise_bytes: trend::step_threshold(&values, steadiness).round() as u64,
        branch: pasts.branch.clone(),
    }))
}

/// The case's main figure (its GPU peak where it has one, else its host
/// peak) over its recent runs, for report.html: its past values, the
/// ratchet and creep limit that held it, where it stepped. `None`
/// without two past runs of it.
pub fn trend(case: &Case, result: &CaseResult, pasts: &Pasts) -> Option<Trend> {
    let [gpu, host, ..] = figures(result);
    let (figure, name, now, steadiness) = if gpu.2.is_some() { gpu } else { host };
    let now = now?;
    let past = pasts.of(&case.id, result.testbed.as_deref(), name);
    if past.len() < 2 {
        return None;
    }
    let kept = &past[past.len().saturating_sub(TREND_RUNS)..];
    let mut values: Vec<f64> = kept.iter().map(|(_, p)| p.value).collect();
    values.push(now as f64);
    let steps = trend::steps(&values, steadiness)
        .iter()
        .map(|s| s.at)
        .collect();
    let creep = result
        .checks
        .iter()
        .find(|c| c.kind == CheckKind::Creep(figure));
    Some(Trend {
        figure: name.to_string(),
        branch: pasts.branch.clone(),
        past: kept
            .iter()
            .map(|(run, point)| {
                let head = pasts.runs.get(*run as usize);
                TrendPoint {
                    started_at: head.map(|h| h.started_at.clone()).unwrap_or_default(),
                    value_bytes: point.value.max(0.0).round() as u64,
                    passed: point.passed,
                    commit: head.and_then(|h| h.commit.clone()),
                }
            })
            .collect(),
        ratchet_bytes: creep.and_then(|c| c.limit_bytes),
        creep_limit: case.creep.map(|c| c.limit),
        steps,
    })
}

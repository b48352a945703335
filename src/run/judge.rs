//! After a case has run: merging repeats, and judging it against the
//! baseline. The decisions themselves are pure functions in `baseline` and
//! `verdict`; this file only feeds them the runner's state.

use std::collections::BTreeMap;

use super::Conductor;
use crate::baseline::{self, Outcome};
use crate::capacity::Capacity;
use crate::environment::Environment;
use crate::results::{BaselineInfo, CaseResult, Check, CheckKind, RepeatFigures};
use crate::suite::{Case, DriftPolicy};
use crate::verdict::{self, Observed};

use super::assemble::CaseRun;

/// One result for a case run `repeat` times: the figures are the maximum
/// over the runs, the status and message those of the first run that did
/// not pass, and every run's figures are kept so the spread is visible.
pub(super) fn merge_repeats(runs: Vec<CaseRun>) -> CaseRun {
    let mut facts: Vec<(Observed, Option<String>)> = Vec::with_capacity(runs.len());
    let mut runs: Vec<CaseResult> = runs
        .into_iter()
        .map(|run| {
            facts.push((run.observed, run.headline));
            run.result
        })
        .collect();
    if runs.len() <= 1 {
        let (observed, headline) = facts.pop().unwrap_or_else(|| {
            (
                Observed {
                    stop: None,
                    exits: Vec::new(),
                    host_peak: None,
                    serving: false,
                },
                None,
            )
        });
        return CaseRun {
            result: runs.pop().unwrap_or_else(no_runs),
            observed,
            headline,
        };
    }
    let figures: Vec<RepeatFigures> = runs
        .iter()
        .map(|r| RepeatFigures {
            status: r.status,
            wall_time_s: r.wall_time_s,
            host_peak_bytes: r.host_peak_bytes,
            gpu_peak_bytes: r.gpu_peak_bytes,
        })
        .collect();
    let max = |pick: fn(&CaseResult) -> Option<u64>| runs.iter().filter_map(pick).max();
    let host = max(|r| r.host_peak_bytes);
    let gpu = max(|r| r.gpu_peak_bytes);
    let wall: f64 = runs.iter().map(|r| r.wall_time_s).sum();
    let samples: u64 = runs.iter().map(|r| r.samples).sum();
    let chosen = match runs
        .iter()
        .position(|r| r.status != crate::results::CaseStatus::Passed)
    {
        Some(failed) => failed,
        None => (0..runs.len())
            .max_by_key(|&i| (runs[i].gpu_peak_bytes, runs[i].host_peak_bytes))
            .unwrap_or(0),
    };
    // The host figures (peak, its source and floors, the charged peak) of
    // the run with the largest host peak, so they describe one run.
    let host_run = (0..runs.len())
        .max_by_key(|&i| runs[i].host_peak_bytes)
        .unwrap_or(0);
    let from = &runs[host_run];
    let methods_differ = runs.iter().any(|r| r.host_method != from.host_method);
    let host_figures = (
        from.host_peak_at_s,
        from.host_method,
        from.host_peak_source,
        from.host_floors,
        from.host_charged_peak_bytes,
        from.host_note.clone(),
    );
    let oom_kills = runs.iter().filter_map(|r| r.host_oom_kills).max();
    // A server case's load client: the figures (and client budget checks)
    // of the run where it used the most host memory, unless a run failed
    // (then the failed run's, which explain it). `server` stays the chosen
    // run's: the run whose figures the case reports.
    let client_run = (0..runs.len())
        .max_by_key(|&i| runs[i].client.as_ref().and_then(|c| c.host_peak_bytes))
        .filter(|_| runs[chosen].status == crate::results::CaseStatus::Passed)
        .unwrap_or(chosen);
    let client = runs[client_run].client.clone();
    let client_checks: Vec<crate::results::Check> = runs[client_run]
        .checks
        .iter()
        .filter(|c| matches!(c.kind, crate::results::CheckKind::Client(_)))
        .cloned()
        .collect();
    let (mut observed, headline) = facts.swap_remove(chosen);
    let mut result = runs.swap_remove(chosen);
    if client_run != chosen {
        result.client = client;
        result
            .checks
            .retain(|c| !matches!(c.kind, crate::results::CheckKind::Client(_)));
        result.checks.extend(client_checks);
    }
    // An unknown host figure in any run keeps the maximum unknown.
    result.host_peak_bytes = if figures.iter().any(|f| f.host_peak_bytes.is_none()) {
        None
    } else {
        host
    };
    (
        result.host_peak_at_s,
        result.host_method,
        result.host_peak_source,
        result.host_floors,
        result.host_charged_peak_bytes,
        result.host_note,
    ) = host_figures;
    if methods_differ {
        let note = "the repeats' host figures were measured by different methods";
        result.host_note = Some(match result.host_note.take() {
            Some(earlier) => format!("{earlier}; {note}"),
            None => note.to_string(),
        });
    }
    result.host_oom_kills = oom_kills;
    // An unknown GPU figure in any run keeps the maximum unknown.
    result.gpu_peak_bytes = if figures.iter().any(|f| f.gpu_peak_bytes.is_none()) {
        None
    } else {
        gpu
    };
    result.wall_time_s = wall;
    result.samples = samples;
    result.repeats = figures;
    // The verdict's words quote the merged peak, as the result shows it.
    observed.host_peak = result.host_peak_bytes.map(crate::units::Bytes);
    CaseRun {
        result,
        observed,
        headline,
    }
}

/// `runs` is never empty (`repeat` is at least 1); should that ever change,
/// a result saying so beats a panic.
fn no_runs() -> CaseResult {
    let mut result = CaseResult::unmeasured(String::new());
    result.status = crate::results::CaseStatus::Error;
    result.message = Some("oomgate ran this case no times (an internal error)".to_string());
    result
}

/// Across the cases of one matrix: when only the largest values of a key
/// ran out of GPU memory, say so on those cases.
pub(super) fn largest_values_hints(cases: &mut [CaseResult]) {
    use crate::diagnose::{FailureKind, hints};
    let view: Vec<hints::MatrixCase<'_>> = cases
        .iter()
        .map(|c| hints::MatrixCase {
            params: &c.params,
            command: &c.command,
            gpu_oom: c
                .diagnosis
                .as_ref()
                .is_some_and(|d| d.kind == FailureKind::GpuOom),
            passed: c.status == crate::results::CaseStatus::Passed,
        })
        .collect();
    let found = hints::largest_values_fail(&view);
    for (index, hint) in found {
        if let Some(diagnosis) = cases.get_mut(index).and_then(|c| c.diagnosis.as_mut()) {
            if !diagnosis.hints.contains(&hint) {
                diagnosis.hints.push(hint);
            }
        }
    }
}

impl Conductor<'_> {
    /// What the run is compared with: the lock's drift against this
    /// environment, and the locked cases that are gone from the suite.
    pub(super) fn baseline_info(&self, environment: &Environment) -> Option<BaselineInfo> {
        let (path, lock) = self.baseline.lock.as_ref()?;
        let planned: Vec<&str> = self.suite.cases.iter().map(|c| c.id.as_str()).collect();
        Some(BaselineInfo {
            path: path.clone(),
            locked_at: lock.locked_at.clone(),
            drift: baseline::drift::drift(&lock.environment, environment),
            on_drift: self.suite.on_drift,
            gpu_compared: self.baseline.compare_across_gpus
                || baseline::drift::same_gpus(&lock.environment, environment),
            removed: lock
                .cases
                .keys()
                .filter(|id| !planned.contains(&id.as_str()))
                .cloned()
                .collect(),
        })
    }

    /// Compare a finished case with its baseline; failing comparisons
    /// become failing checks and may turn a pass into a failure.
    pub(super) fn compare_with_baseline(&self, case: &Case, result: &mut CaseResult) {
        let Some(info) = &self.baseline_info else {
            if self.baseline.require {
                result.checks.push(failing(
                    CheckKind::BaselineMissing,
                    "no baseline: no lock file (--require-baseline)".to_string(),
                ));
            }
            return;
        };
        let locked = self
            .baseline
            .lock
            .as_ref()
            .and_then(|(_, lock)| lock.cases.get(&case.id));
        // As recorded (redacted), as the lock holds them.
        let params: BTreeMap<String, String> = result.params.clone().into_iter().collect();
        let env: BTreeMap<String, String> = result.env.clone().into_iter().collect();
        let gpu_tainted = result.gpu_devices.iter().any(|d| !d.tainted_by.is_empty());
        // The lock keeps the method as the text results.json has.
        let gpu_method = result.gpu_peak_method.as_ref().map(ToString::to_string);
        let server = result.server.as_ref().map(|s| baseline::LockedServer {
            command: s.command.clone(),
            env: s.env.clone().into_iter().collect(),
        });
        let now = baseline::CaseNow {
            host: result.host_peak_bytes,
            host_method: result.host_method,
            gpu: result.gpu_peak_bytes,
            gpu_method: gpu_method.as_deref(),
            gpu_tainted,
            allocated: result.probe.as_ref().and_then(|p| p.peak_allocated),
            command: &result.command,
            server: server.as_ref(),
            params: &params,
            env: &env,
            allocator_env: &result.allocator_env,
        };
        let comparison = baseline::compare_case(locked, now, case.tolerance, info.gpu_compared);
        let drift: Vec<String> = info.drift.iter().map(ToString::to_string).collect();
        let with_drift = |message: &str| {
            if drift.is_empty() {
                message.to_string()
            } else {
                format!(
                    "{message}; environment changes since the baseline: {}",
                    drift.join(", ")
                )
            }
        };
        if !comparison.locked {
            let message = format!("no baseline for this case in {}", info.path.display());
            result.checks.push(if self.baseline.require {
                failing(
                    CheckKind::BaselineMissing,
                    format!("{message} (--require-baseline)"),
                )
            } else {
                passing(CheckKind::BaselineMissing, message)
            });
        } else {
            for figure in comparison.figures() {
                let name = CheckKind::Baseline(figure.figure.clone());
                match figure.outcome {
                    Outcome::Regressed => {
                        let mut check = failing(name.clone(), with_drift(&figure.message));
                        check.figure_bytes = figure.new_bytes;
                        check.limit_bytes = figure.limit_bytes;
                        result.checks.push(check);
                    }
                    // The lock has a figure this run could not measure: the
                    // gate cannot be verified, which must not pass.
                    Outcome::Unknown => {
                        let message =
                            format!("{}: the regression gate cannot be verified", figure.message);
                        result
                            .checks
                            .push(failing(name.clone(), with_drift(&message)));
                    }
                    Outcome::NoBaseline if figure.new_bytes.is_none() => {}
                    // Locked without this figure (e.g. GPU unknown then).
                    Outcome::NoBaseline if self.baseline.require => {
                        let message =
                            format!("{} in the lock (--require-baseline)", figure.message);
                        result.checks.push(failing(name.clone(), message));
                    }
                    // A baseline that cannot be compared (another GPU
                    // model, another host method) is no baseline to a run
                    // that requires one.
                    // A tainted figure (a neighbour's memory may be in it)
                    // must not let a neighbour fail the case, required
                    // baseline or not.
                    Outcome::Skipped
                        if self.baseline.require && !(figure.figure == "gpu" && gpu_tainted) =>
                    {
                        let message = format!("{} (--require-baseline)", figure.message);
                        result.checks.push(failing(name.clone(), message));
                    }
                    _ => {
                        let mut check = passing(name.clone(), figure.message.clone());
                        check.figure_bytes = figure.new_bytes;
                        check.limit_bytes = figure.limit_bytes;
                        result.checks.push(check);
                    }
                }
            }
        }
        if !drift.is_empty() && info.on_drift == DriftPolicy::Fail {
            result.checks.push(failing(
                CheckKind::EnvironmentDrift,
                format!(
                    "the environment drifted from the baseline (on_drift = \"fail\"): {}",
                    drift.join(", ")
                ),
            ));
        }
        result.baseline = Some(comparison);
    }
}

impl Conductor<'_> {
    /// A searched case against its locked capacity: less is a regression
    /// (`largest batch that fits: 300 -> 248`), more is good news, and a
    /// search that found nothing fails on its own. A search cut short
    /// found at least its value: it fails only when that is already below
    /// the lock's.
    pub(super) fn compare_capacity(&self, case: &Case, found: &Capacity, result: &mut CaseResult) {
        let counted = crate::capacity::counted_as(&found.param, found.step);
        let other = self
            .baseline
            .lock
            .as_ref()
            .and_then(|(_, lock)| lock.cases.get(&case.id))
            .and_then(|locked| locked.capacity_of.as_deref())
            .filter(|of| *of != counted);
        if let Some(of) = other {
            result.checks.push(passing(
                CheckKind::Baseline("capacity".into()),
                format!(
                    "capacity not compared: the lock's counts {of}, this search {counted}; lock again to gate it ({})",
                    found.describe()
                ),
            ));
            return;
        }
        let locked = self
            .baseline
            .lock
            .as_ref()
            .and_then(|(_, lock)| lock.cases.get(&case.id))
            .and_then(|locked| locked.capacity)
            // A `max` lowered since the lock caps what can be found.
            .zip(case.search.as_ref())
            .map(|(locked, search)| locked.min(search.max));
        // A case with no lock entry at all is `BaselineMissing`'s business.
        let locked_entry = self
            .baseline
            .lock
            .as_ref()
            .is_some_and(|(_, lock)| lock.cases.contains_key(&case.id));
        let param = &found.param;
        // A probe that could not run at all ended the search: its own error
        // is the case's verdict, not a capacity.
        let errored = found
            .probes
            .last()
            .is_some_and(|p| p.status == crate::results::CaseStatus::Error);
        if found.value.is_none() && errored {
            return;
        }
        let check = match (found.value, locked) {
            (None, _) => failing(CheckKind::Baseline("capacity".into()), found.describe()),
            (Some(value), Some(locked)) if value < least_accepted(case, locked) => failing(
                CheckKind::Baseline("capacity".into()),
                format!(
                    "largest {param} that fits: {locked} -> {value} (regression; {})",
                    found.describe()
                ),
            ),
            (Some(value), Some(locked)) if value > locked && found.complete => passing(
                CheckKind::Baseline("capacity".into()),
                format!(
                    "largest {param} that fits: {locked} -> {value} (grew; re-lock to keep it)"
                ),
            ),
            (Some(value), Some(locked)) if value < locked => passing(
                CheckKind::Baseline("capacity".into()),
                format!(
                    "largest {param} that fits: {locked} -> {value} (within capacity_tolerance)"
                ),
            ),
            (Some(_), None) if self.baseline.require && locked_entry => failing(
                CheckKind::Baseline("capacity".into()),
                format!(
                    "no locked capacity to compare with (--require-baseline); {}",
                    found.describe()
                ),
            ),
            (Some(_), _) => passing(CheckKind::Baseline("capacity".into()), found.describe()),
        };
        result.checks.push(check);
        // The peaks are the capacity probe's: at another value than the
        // locked one's, they are of another workload size, and judging
        // them against the lock would blame the size for a regression.
        if let (Some(value), Some(locked)) = (found.value, locked) {
            if value != locked {
                for check in result.checks.iter_mut().filter(|c| {
                    !c.passed && matches!(&c.kind, CheckKind::Baseline(f) if f != "capacity")
                }) {
                    check.passed = true;
                    check.message = format!(
                        "{} (not gated: the capacity moved, {param} {locked} -> {value}, so the peaks are of another size; lock again to compare them)",
                        check.message
                    );
                }
            }
        }
    }
}

/// The smallest capacity that is no regression from `locked`.
fn least_accepted(case: &Case, locked: u64) -> u64 {
    case.search
        .as_ref()
        .map_or(locked, |search| search.least_accepted(locked))
}

fn passing(kind: CheckKind, message: String) -> Check {
    Check {
        kind,
        passed: true,
        figure_bytes: None,
        limit_bytes: None,
        message,
    }
}

fn failing(kind: CheckKind, message: String) -> Check {
    Check {
        passed: false,
        ..passing(kind, message)
    }
}

/// The case's verdict, decided once every check is in (its own limits,
/// then the baseline's): the same pure function that decided each run.
pub(super) fn decide(run: CaseRun) -> CaseResult {
    let CaseRun {
        mut result,
        observed,
        headline,
    } = run;
    let (status, message) = verdict::decide(&observed, &result.checks);
    result.status = status;
    result.message = verdict::with_headline(headline.as_deref(), message);
    result.failure_kind = verdict::failure_kind(&result, observed.stop.as_ref());
    result
}

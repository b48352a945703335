//! The judge: every decision about a case, made in one place from data.
//!
//! The runner hands over what it observed — each run's figures and how it
//! ended ([`CaseRun`]), what a search found, whether the case shared its
//! GPUs, its first attempt when this is a retry alone — with the baseline
//! it is compared with ([`Baseline`]). [`judge_case`] returns the case's
//! result and [`Verdict`], and whether to run it again alone; nothing else
//! decides a status. `oomgate diff` judges a results file with the same
//! comparison ([`against_lock`]), so `run` and `diff` cannot disagree.
//!
//! The judge writes no English: a check is data (`results::Check`: kind,
//! outcome, figure, limit, baseline, tolerance, facts) and a verdict's
//! cause is data ([`Cause`]); `report::words` words both. The one design
//! choice a newcomer might question: the judge is pure but not blind to
//! measurement — it reads the measurers' figure types (`HostFigures`,
//! `GpuFigures`) as data, because a budget's sentence names the method
//! that produced its figure.

mod baseline;
mod history;
mod limits;
mod parity;
mod repeats;
mod run;
mod verdict;

pub use baseline::{
    Against, Baseline, Found, against_entry, against_lock, capacity_alone, drift_check,
    drift_verdict, missing,
};
pub use history::history_checks;
pub use limits::{
    DeviceMemory, Gated, budget_breached, gpu_budget_check, headroom_check, headroom_limit,
};
pub use limits::{host_budget_check, run_checks};
pub use parity::{judge_parity, recorded as recorded_parities};
pub use repeats::{merge_repeats, probe};
use run::fill_result;
pub use run::{RunJudgement, focus, judge_run, worth_scanning};
pub use verdict::{
    CaseRun, Cause, GpuLoss, Observed, RunVerdict, StopReason, Verdict, Who, breaches, decide,
    failure_kind, run_verdict,
};

use std::collections::BTreeMap;

use crate::capacity::Capacity;
use crate::record::RunRecord;
use crate::results::{
    CaseResult, CaseStatus, CaseTolerances, CheckKind, FirstAttempt, RetriedAlone,
};
use crate::suite::Case;

/// A case whose runs are over, as the judge receives it.
#[derive(Debug)]
pub struct Finished<'a> {
    pub case: &'a Case,
    /// One per repeat; with a search, those of the probe it is judged by.
    pub runs: Vec<RunRecord>,
    /// With `search`: what it found.
    pub capacity: Option<Capacity>,
    /// Other cases ran on its GPUs while it ran (`--pack`).
    pub shared: bool,
    /// Its attempt while sharing its GPUs, when this is the retry alone.
    pub first_attempt: Option<CaseResult>,
    /// The run is stopping (Ctrl-C, a write fault): nothing is retried.
    pub stopping: bool,
}

/// The judge's answer for a case.
#[derive(Debug)]
pub struct Judgement {
    pub result: CaseResult,
    pub verdict: Verdict,
    /// Run it again, alone, and judge that run (with this result as its
    /// first attempt), and why; `None`: it stands.
    pub retry: Option<Retry>,
}

/// Why a case is run again, alone, once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Retry {
    /// It failed while other cases shared its GPUs (`--pack`).
    Shared,
    /// It ran out of GPU memory while its GPU had not settled at its
    /// start: an earlier case's memory may have been in the way.
    Unsettled,
}

/// Judge a finished case: its repeats merged, compared with its baseline
/// and capacity, its status and failure kind decided once every check is
/// in, and — when it failed beside others on its GPUs — whether to retry
/// it alone, or, for that retry, whether it was flaky.
pub fn judge_case(finished: Finished<'_>, baseline: &Baseline<'_>) -> Judgement {
    let Finished {
        case,
        runs,
        capacity,
        shared,
        first_attempt,
        stopping,
    } = finished;
    let runs = runs.into_iter().map(|run| judged(case, run)).collect();
    let CaseRun {
        mut result,
        observed,
    } = merge_repeats(runs);
    result.tolerance = Some(tolerances(case));
    // A skipped test's figures are of the skip: nothing to hold against
    // its baseline (which stays in the lock as it was).
    if !observed.skipped {
        compare(case, &mut result, capacity.as_ref(), baseline);
    }
    // Held against its own past only when it ran to its end on its own
    // terms: a run that failed by itself has figures that say little.
    if let Some(pasts) = baseline.history.filter(|_| !observed.skipped) {
        if decide(&observed, &result.checks).status == CaseStatus::Passed {
            let checks = history_checks(case, &result, pasts);
            result.checks.extend(checks);
        }
        result.trend = history::trend(case, &result, pasts);
    }
    if let Some(capacity) = &capacity {
        // The case took the whole search, not only its chosen probe.
        result.wall_time_s = capacity.probes.iter().map(|p| p.wall_time_s).sum();
    }
    result.capacity = capacity;
    let mut verdict = decide(&observed, &result.checks);
    if let (Some(Cause::Judged { drift, .. }), Some(info)) = (&mut verdict.cause, baseline.info) {
        // Said once for the case; a failing drift check already lists it.
        if !result
            .checks
            .iter()
            .any(|c| c.kind == CheckKind::EnvironmentDrift && !c.passed)
        {
            drift.clone_from(&info.drift);
        }
    }
    result.status = verdict.status;
    result.failure_kind = failure_kind(&result, observed.stop.as_ref());
    let unsettled_oom = result.failure_kind == Some(crate::vocabulary::FailureType::GpuOom)
        && result.settle.as_ref().is_some_and(|s| !s.settled);
    let retry = match (first_attempt.is_none() && !stopping, result.status) {
        (false, _) | (_, CaseStatus::Passed | CaseStatus::Skipped | CaseStatus::Interrupted) => {
            None
        }
        _ if shared => Some(Retry::Shared),
        _ if unsettled_oom => Some(Retry::Unsettled),
        _ => None,
    };
    if let Some(first) = first_attempt {
        result.retried_alone = Some(retried_alone(&result, first));
    }
    Judgement {
        result,
        verdict,
        retry,
    }
}

/// One run judged by its own limits (with a search, the probe's) and
/// assembled into a result as the case is written.
fn judged(case: &Case, measured: RunRecord) -> CaseRun {
    let probe = measured.probe_value.map(|value| case.probe(value));
    let judgement = judge_run(probe.as_ref().unwrap_or(case), &measured);
    let mut result = crate::results::assemble::assemble(case, measured);
    let observed = fill_result(&mut result, judgement);
    CaseRun { result, observed }
}

/// A case's result judged again under `case`'s own budgets (host, GPU,
/// headroom, GPU left; not a rank's, which needs each tick's figures) and
/// probe limits, from the figures it recorded: for a part that ran the
/// case under other limits (`oomgate merge --suite`). Only a run that
/// passed is judged again — one that failed may have been stopped at its
/// old budget, and its figures say nothing of the rest of its run. The
/// checks of those limits are replaced; the others stay as judged.
pub fn judge_limits_again(case: &Case, result: &mut CaseResult) -> Verdict {
    use crate::measure::HostFigures;
    use crate::measure::gpu::GpuFigures;
    let host = &result.host;
    let host = HostFigures {
        method: host.method,
        peak_bytes: host.peak_bytes,
        peak_at_ms: host.peak_at_s.map(|s| (s * 1000.0) as u64),
        peak_source: host.peak_source,
        floors: host.floors,
        working_peak_bytes: host.working_peak_bytes,
        charged_peak_bytes: host.charged_peak_bytes,
        charged_peak_source: None,
        oom_kills: host.oom_kills,
        pss_sweeps: 0,
        notes: Vec::new(),
        ranks: BTreeMap::new(),
        start_bytes: host.start_bytes,
        left_bytes: host.left_bytes,
    };
    let gpu = result.gpu_peak_method.map(|method| GpuFigures {
        peak_bytes: result.gpu_peak_bytes,
        method,
        devices: result.gpu_devices.clone(),
        left_bytes: result.gpu_left_bytes,
        ranks: Default::default(),
        // As the part recorded it: a budget on it is judged again.
        outside: result.outside_allocator.clone(),
    });
    let mut checks = limits::budget_checks(&case.budget.judged_again(), &host, gpu.as_ref());
    checks.extend(limits::limit_checks(case, result.probe.as_ref()));
    checks.extend(
        result
            .checks
            .drain(..)
            .filter(|check| !check.kind.judged_again()),
    );
    result.checks = checks;
    let observed = Observed {
        stop: None,
        exits: Vec::new(),
        host_peak: result.host.peak_bytes.map(crate::units::Bytes),
        serving: result.server.is_some(),
        gpu_lost: None,
        skipped: result.status == CaseStatus::Skipped,
        errored: false,
    };
    let verdict = decide(&observed, &result.checks);
    result.status = verdict.status;
    result.failure_kind = failure_kind(result, None);
    verdict
}

/// The tolerances a case is judged with, recorded with its result.
pub fn tolerances(case: &Case) -> CaseTolerances {
    CaseTolerances {
        capacity: case.search.as_ref().map(|s| s.tolerance),
        ..case.tolerance.into()
    }
}

/// A retry alone against its attempt beside others: flaky when it passed
/// alone — unless the shared attempt failed only because its GPU figure
/// could not be told from a neighbour's, which is no flakiness but a
/// figure first measured alone.
fn retried_alone(result: &CaseResult, first: CaseResult) -> RetriedAlone {
    let unmeasurable = first
        .gpu_devices
        .iter()
        .any(|d| d.device_note.as_ref().is_some_and(|n| n.refused()))
        && first.failed_checks().next().is_some()
        && first.failed_checks().all(|c| {
            matches!(c.kind, CheckKind::GpuBudget | CheckKind::GpuHeadroom { .. })
                && c.figure_bytes.is_none()
        });
    RetriedAlone {
        flaky: result.status == CaseStatus::Passed && !unmeasurable,
        first_attempt: FirstAttempt {
            status: first.status,
            failure_kind: first.failure_kind,
            message: first.message,
            gpu_sharing: first.gpu_sharing,
        },
    }
}

/// A finished case against the run's baseline: its figures' checks, its
/// capacity's, the environment's drift, and the comparison kept in
/// `result.baseline`. With no lock file, only `--require-baseline` has
/// something to say.
fn compare(case: &Case, result: &mut CaseResult, capacity: Option<&Capacity>, baseline: &Baseline) {
    let (Some(info), Some(lock)) = (baseline.info, baseline.lock) else {
        if baseline.require {
            result.checks.push(missing(None, true));
        }
        let found = capacity.map(|capacity| Found {
            capacity,
            max: case.search.as_ref().map(|s| s.max),
        });
        let tolerances = result.tolerance.unwrap_or_else(|| tolerances(case));
        result
            .checks
            .extend(found.and_then(|found| capacity_alone(tolerances, found)));
        return;
    };
    let now = Now::of(result);
    let found_entry =
        lock.baseline_for(&case.id, result.testbed.as_deref(), info.testbed.as_deref());
    let testbed_missing = match (&found_entry.entry, &found_entry.source) {
        (None, crate::baseline::testbed::Source::Testbed(name)) => Some(name.clone()),
        _ => None,
    };
    let against = Against {
        locked: found_entry.entry,
        lock_path: &info.path,
        require: baseline.require,
        gpu_compared: match found_entry.source {
            crate::baseline::testbed::Source::Testbed(_) => true,
            crate::baseline::testbed::Source::Legacy => info.gpu_compared,
        },
        testbed: testbed_missing.as_deref(),
        now_from_lock: false,
    };
    let found = capacity.map(|capacity| Found {
        capacity,
        max: case.search.as_ref().map(|s| s.max),
    });
    let tolerances = result.tolerance.unwrap_or_else(|| tolerances(case));
    let (comparison, checks) = against_lock(against, now.view(result), tolerances, found);
    result.site_growth = site_growth(
        against.locked.and_then(|l| l.allocation_sites.as_ref()),
        result.allocation_sites.as_ref(),
        &checks,
    );
    result.rank_growth = rank_growth(
        against.locked.map(|l| l.ranks.as_slice()),
        &result.ranks,
        &checks,
    );
    result.checks.extend(checks);
    result.checks.extend(drift_check(info));
    let mut comparison = comparison;
    if let (Some(locked), Some(_)) = (
        against.locked.and_then(|l| l.allocation_sites.as_ref()),
        &result.allocation_sites,
    ) {
        comparison.allocation_sites = locked
            .sites
            .iter()
            .take(crate::snapshot::CHARTED_SITES)
            .cloned()
            .collect();
    }
    result.baseline = Some(comparison);
}

/// With the GPU figure regressed: the rank whose GPU peak grew most
/// against the same rank's locked one. `run` and `diff` both call it.
pub fn rank_growth(
    locked: Option<&[crate::measure::ranks::RankFigures]>,
    now: &[crate::measure::ranks::RankFigures],
    checks: &[crate::results::Check],
) -> Option<crate::measure::ranks::RankChange> {
    let regressed = checks.iter().any(|c| {
        !c.passed && c.kind == crate::results::CheckKind::Baseline(crate::baseline::Figure::Gpu)
    });
    if !regressed {
        return None;
    }
    crate::measure::ranks::grew_most(locked?, now)
}

/// How many grown sites a regression names.
pub const GROWN_SITES: usize = 5;

/// With a GPU (or allocated) figure regressed and sites on both sides:
/// the sites that grew most against the baseline's, and allocator
/// settings that changed. `run` and `diff` both call it.
pub fn site_growth(
    locked: Option<&crate::snapshot::AllocationSites>,
    now: Option<&crate::snapshot::AllocationSites>,
    checks: &[crate::results::Check],
) -> Option<crate::snapshot::SiteGrowth> {
    use crate::baseline::Figure;
    use crate::results::CheckKind;
    let regressed = checks.iter().any(|c| {
        !c.passed
            && matches!(
                c.kind,
                CheckKind::Baseline(Figure::Gpu) | CheckKind::Baseline(Figure::Allocated)
            )
    });
    let growth = crate::snapshot::grown(locked?, now?, GROWN_SITES);
    (regressed && !growth.is_empty()).then_some(growth)
}

/// What of a result a comparison with the lock reads, in the lock's
/// shapes (sorted maps, the server as locked).
pub struct Now {
    params: BTreeMap<String, String>,
    env: BTreeMap<String, String>,
    server: Option<crate::baseline::LockedServer>,
    gpu_method: Option<crate::measure::gpu::GpuMethod>,
}

impl Now {
    pub fn of(result: &CaseResult) -> Self {
        Now {
            // As recorded (redacted), as the lock holds them.
            params: result.params.clone().into_iter().collect(),
            env: result.env.clone().into_iter().collect(),
            server: result
                .server
                .as_ref()
                .map(|s| crate::baseline::LockedServer {
                    command: s.command.clone(),
                    env: s.env.clone().into_iter().collect(),
                }),
            // The lock keeps the method as the text results.json has.
            gpu_method: result.gpu_peak_method,
        }
    }

    pub fn view<'a>(&'a self, result: &'a CaseResult) -> crate::baseline::CaseNow<'a> {
        crate::baseline::CaseNow {
            host: result.host.peak_bytes,
            host_method: result.host.method,
            host_source: result.host.peak_source,
            host_floors: result.host.floors,
            working: result.host.working_peak_bytes,
            gpu: result.gpu_peak_bytes,
            gpu_method: self.gpu_method,
            gpu_tainted: result.gpu_devices.iter().any(|d| !d.tainted_by.is_empty()),
            allocated: result.probe.as_ref().and_then(|p| p.peak_allocated),
            outside: result.outside_allocator_peak_bytes,
            command: &result.command,
            server: self.server.as_ref(),
            params: &self.params,
            env: &self.env,
            allocator_env: &result.allocator_env,
            outputs: &result.outputs,
        }
    }
}

/// Across the cases of one matrix: when only the largest values of a key
/// ran out of GPU memory, say so on those cases.
pub fn largest_values_hints(cases: &mut [CaseResult]) {
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
            passed: c.status == CaseStatus::Passed,
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

#[cfg(test)]
mod tests;

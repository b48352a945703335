//! A case against its baseline: each compared figure, a search's capacity
//! and the environment's drift, as checks. `run` and `diff` both judge
//! through [`against_lock`], so they cannot disagree.

use std::path::Path;

use crate::baseline::{self, CaseComparison, CaseNow, LockedCase, NotCompared, Outcome};
use crate::capacity::Capacity;
use crate::results::{
    BaselineInfo, CaseTolerances, Check, CheckKind, CheckOutcome, Facts, OrWritten,
};
use crate::suite::DriftPolicy;

/// What a run compares its cases with: the lock (`None`: there was no
/// lock file) and what the run found of it, and how strictly.
#[derive(Debug, Clone, Copy)]
pub struct Baseline<'a> {
    pub lock: Option<&'a baseline::Lock>,
    /// The lock's path, its drift and whether GPU figures compare.
    pub info: Option<&'a BaselineInfo>,
    /// A case without a baseline fails instead of passing with a notice.
    pub require: bool,
    /// Each case's past in the run history (creep, steps); `None`: no
    /// history, or one that could not be read.
    pub history: Option<&'a crate::history::pasts::Pasts>,
}

impl Baseline<'_> {
    /// No lock, nothing required: every case passes with no comparison.
    pub const NONE: Baseline<'static> = Baseline {
        lock: None,
        info: None,
        require: false,
        history: None,
    };
}

/// One case as it is compared: its locked entry (`None`: the lock has no
/// such case), where the lock is, and how strictly.
#[derive(Debug, Clone, Copy)]
pub struct Against<'a> {
    pub locked: Option<&'a LockedCase>,
    pub lock_path: &'a Path,
    pub require: bool,
    /// False when the GPU models differ from the lock's (and the run did
    /// not ask to compare across them).
    pub gpu_compared: bool,
    /// With no entry: the testbed the lock has none for.
    pub testbed: Option<&'a str>,
    /// The figures compared are a lock's (`oomgate diff` of two locks): a
    /// lock leaves out what its run could not take as the case's own (a
    /// tainted GPU figure), so a figure absent from it was not gated, and
    /// is not compared — never an unknown that fails.
    pub now_from_lock: bool,
}

/// What a search found, as it is compared with a locked capacity.
#[derive(Debug, Clone, Copy)]
pub struct Found<'a> {
    pub capacity: &'a Capacity,
    /// The suite's `max` now: a `max` lowered since the lock caps what
    /// can be found. `None` when the suite is not at hand (`diff`).
    pub max: Option<u64>,
}

/// A case's checks against its locked entry: one per compared figure
/// (host, GPU, the probe's allocated peak), the capacity of a search, and
/// whether it has a baseline at all. The comparison itself is returned
/// for `results.baseline`.
pub fn against_lock(
    against: Against<'_>,
    now: CaseNow<'_>,
    tolerances: CaseTolerances,
    found: Option<Found<'_>>,
) -> (CaseComparison, Vec<Check>) {
    let mut comparison = baseline::compare_case(
        against.locked,
        now,
        tolerances.figures(),
        against.gpu_compared,
    );
    let capacity = found.and_then(|found| capacity_check(against, tolerances, found));
    // The peaks are the capacity probe's: at another value than the locked
    // one's, they are of another workload size, and neither a rise nor a
    // fall against the lock says anything about the workload.
    let moved = capacity.as_ref().and_then(capacity_moved);
    if let Some(moved) = &moved {
        for figure in comparison.figures_mut() {
            if matches!(figure.outcome, Outcome::Regressed | Outcome::Improved) {
                figure.outcome = Outcome::Skipped;
                figure.not_compared = Some(moved.clone());
            }
        }
        for output in &mut comparison.outputs {
            if matches!(output.outcome, Outcome::Regressed | Outcome::Improved) {
                output.outcome = Outcome::Skipped;
                output.not_compared = Some(moved.clone());
            }
        }
    }
    let mut checks = Vec::new();
    if against.locked.is_none() {
        let mut check = missing(Some(against.lock_path), against.require);
        if let Some(Facts::Missing { testbed, .. }) = check.facts.as_mut() {
            *testbed = against.testbed.map(String::from);
        }
        checks.push(check);
    } else {
        for figure in comparison.figures() {
            checks.extend(figure_check(figure, against.require));
        }
        let outputs = now.outputs.iter().zip(&comparison.outputs);
        checks.extend(outputs.map(|(now, compared)| output_check(now, compared, against.require)));
    }
    if against.now_from_lock {
        for check in checks.iter_mut().filter(|c| {
            matches!(c.kind, CheckKind::Output(_)) && c.outcome == Some(CheckOutcome::Unknown)
        }) {
            check.passed = true;
            check.outcome = Some(CheckOutcome::NotCompared);
        }
        for check in checks.iter_mut().filter(|c| {
            matches!(c.kind, CheckKind::Baseline(_)) && c.outcome == Some(CheckOutcome::Unknown)
        }) {
            check.passed = true;
            check.outcome = Some(CheckOutcome::NotCompared);
            check.facts = Some(Facts::Baseline {
                not_compared: Some(NotCompared::NotInLock),
                required: false,
                spread: None,
                floor_breach: None,
                anon_within: None,
            });
        }
    }
    // Nor can a figure this probe could not measure, or one a required
    // comparison lacks, be held against a lock of another size.
    if let Some(moved) = moved {
        for check in checks
            .iter_mut()
            .filter(|c| !c.passed && matches!(c.kind, CheckKind::Baseline(_)))
        {
            let (spread, floor_breach, anon_within) = match &check.facts {
                Some(Facts::Baseline {
                    spread,
                    floor_breach,
                    anon_within,
                    ..
                }) => (*spread, *floor_breach, *anon_within),
                _ => (None, None, None),
            };
            check.passed = true;
            check.outcome = Some(CheckOutcome::NotGated);
            check.facts = Some(Facts::Baseline {
                not_compared: Some(moved.clone()),
                required: false,
                spread,
                floor_breach,
                anon_within,
            });
        }
    }
    checks.extend(capacity);
    (comparison, checks)
}

/// The capacity a search found, when it is not the locked one.
fn capacity_moved(check: &Check) -> Option<NotCompared> {
    match &check.facts {
        Some(Facts::Capacity {
            param,
            value: Some(value),
            locked: Some(locked),
            ..
        }) if value != locked => Some(NotCompared::CapacityMoved {
            param: param.clone(),
            locked: *locked,
            value: *value,
        }),
        _ => None,
    }
}

/// A search's capacity when there is no lock at all: what it found, which
/// fails when nothing fits.
pub fn capacity_alone(tolerances: CaseTolerances, found: Found<'_>) -> Option<Check> {
    let against = Against {
        locked: None,
        lock_path: Path::new(""),
        require: false,
        gpu_compared: true,
        testbed: None,
        now_from_lock: false,
    };
    capacity_check(against, tolerances, found)
}

/// `baseline`: no baseline for the case (in `lock`, or no lock at all).
pub fn missing(lock: Option<&Path>, required: bool) -> Check {
    Check::new(
        CheckKind::BaselineMissing,
        !required,
        CheckOutcome::NoBaseline,
    )
    .facts(Facts::Missing {
        lock: lock.map(Path::to_path_buf),
        required,
        testbed: None,
    })
}

/// One figure's comparison as a check; `None` for a figure neither side
/// has. A locked figure this run could not measure fails: the gate cannot
/// be verified. With `require`, a figure that could not be compared
/// (none in the lock, another GPU model, another host method) fails too,
/// except a tainted one: a neighbour must not fail the case.
fn figure_check(figure: &baseline::FigureComparison, require: bool) -> Option<Check> {
    let (passed, outcome, required) = match figure.outcome {
        Outcome::Regressed => (false, CheckOutcome::Breached, false),
        Outcome::Within => (true, CheckOutcome::Within, false),
        Outcome::Improved => (true, CheckOutcome::Improved, false),
        Outcome::Unknown => (false, CheckOutcome::Unknown, false),
        Outcome::NoBaseline if figure.new_bytes.is_none() => return None,
        Outcome::NoBaseline => (!require, CheckOutcome::NoBaseline, require),
        // Compared, but of another workload size: reported, not gated.
        Outcome::Skipped
            if matches!(figure.not_compared, Some(NotCompared::CapacityMoved { .. })) =>
        {
            (true, CheckOutcome::NotGated, false)
        }
        Outcome::Skipped => {
            let tainted = figure.not_compared == Some(NotCompared::Tainted);
            let required = require && !tainted;
            (!required, CheckOutcome::NotCompared, required)
        }
    };
    let mut check = Check::new(CheckKind::Baseline(figure.figure), passed, outcome)
        .figure(figure.new_bytes)
        .facts(Facts::Baseline {
            not_compared: figure.not_compared.clone(),
            required,
            spread: figure.spread,
            floor_breach: figure.floor_breach,
            anon_within: figure.anon_within,
        });
    check.baseline_bytes = figure.baseline_bytes;
    check.limit_bytes = figure.limit_bytes;
    check.tolerance = figure.tolerance;
    Some(check)
}

/// A number the logs printed against its locked value, as a check: a
/// locked one this run did not print fails (the gate cannot be
/// verified); one never locked passes with a notice, unless required.
fn output_check(
    now: &crate::measure::output::OutputFigure,
    compared: &baseline::OutputComparison,
    require: bool,
) -> Check {
    let (passed, outcome, required) = match compared.outcome {
        Outcome::Regressed => (false, CheckOutcome::Breached, false),
        Outcome::Within => (true, CheckOutcome::Within, false),
        Outcome::Improved => (true, CheckOutcome::Improved, false),
        Outcome::Unknown => (false, CheckOutcome::Unknown, false),
        Outcome::NoBaseline => {
            let required = require && compared.value.is_some();
            (!required, CheckOutcome::NoBaseline, required)
        }
        Outcome::Skipped => (true, CheckOutcome::NotGated, false),
    };
    Check::new(CheckKind::Output(compared.name.clone()), passed, outcome).facts(Facts::Output {
        value: compared.value,
        matches: now.matches,
        at: now.at.clone(),
        locked: compared.baseline,
        bound: compared.bound,
        better: compared.better,
        tolerance: compared.tolerance,
        not_compared: compared.not_compared.clone(),
        required,
    })
}

/// A searched case against its locked capacity: less than the tolerance
/// accepts is a regression, more is good news, and a search that found
/// nothing fails on its own. A search cut short found at least its value:
/// it fails only when that is already below what the lock accepts. A
/// search that ended on a probe that could not run at all is judged by
/// that probe's error, not here (`None`).
fn capacity_check(
    against: Against<'_>,
    tolerances: CaseTolerances,
    found: Found<'_>,
) -> Option<Check> {
    let capacity = found.capacity;
    let errored = capacity
        .probes
        .last()
        .is_some_and(|p| p.status == crate::results::CaseStatus::Error);
    if capacity.value.is_none() && errored {
        return None;
    }
    let counts = crate::capacity::counted_as(&capacity.param, capacity.step);
    let lock_counts = against
        .locked
        .and_then(|l| l.capacity_of.clone())
        .filter(|of| *of != counts);
    let tolerance = tolerances.capacity.unwrap_or_default();
    // Not compared with a capacity that counts something else.
    let locked = against
        .locked
        .and_then(|l| l.capacity)
        .filter(|_| lock_counts.is_none())
        .map(|locked| found.max.map_or(locked, |max| locked.min(max)));
    let least_accepted = locked.map(|l| tolerance.least_accepted(l, capacity.step.unwrap_or(1)));
    let (passed, outcome) = match (capacity.value, locked, least_accepted) {
        _ if lock_counts.is_some() => (true, CheckOutcome::NotCompared),
        (None, _, _) => (false, CheckOutcome::Unknown),
        (Some(value), Some(_), Some(least)) if value < least => (false, CheckOutcome::Breached),
        (Some(value), Some(locked), _) if value > locked && capacity.complete => {
            (true, CheckOutcome::Improved)
        }
        (Some(_), Some(_), _) => (true, CheckOutcome::Within),
        // A case with no lock entry at all is `baseline`'s business.
        (Some(_), None, _) => (
            !(against.require && against.locked.is_some()),
            CheckOutcome::NoBaseline,
        ),
    };
    let required = !passed && outcome == CheckOutcome::NoBaseline;
    Some(
        Check::new(CheckKind::Capacity, passed, outcome).facts(Facts::Capacity {
            param: capacity.param.clone(),
            value: capacity.value,
            complete: capacity.complete,
            probes: capacity.probes.len(),
            locked,
            least_accepted,
            tolerance,
            lock_counts,
            counts: Some(counts),
            required,
        }),
    )
}

/// `environment.drift`: with `on_drift = "fail"`, a drifted environment
/// fails every compared case.
pub fn drift_check(info: &BaselineInfo) -> Option<Check> {
    drift_verdict(&info.drift, info.on_drift)
}

/// The same for any two environments (`oomgate diff`): `drift`, their
/// differences, fails under `policy = fail`.
pub fn drift_verdict(drift: &[crate::baseline::Drift], policy: DriftPolicy) -> Option<Check> {
    if drift.is_empty() || policy != DriftPolicy::Fail {
        return None;
    }
    Some(
        Check::new(CheckKind::EnvironmentDrift, false, CheckOutcome::Breached).facts(
            Facts::Drift {
                changes: drift.iter().cloned().map(OrWritten::Data).collect(),
            },
        ),
    )
}

/// One case judged again, after its run, against an earlier lock's entry:
/// `later`, its entry in a lock made from its results (`lock_of`), with
/// the case as it ran when the results are at hand (its GPU figure as it
/// ran, tainted or not; its search). What `oomgate diff` and `oomgate
/// bisect` judge with, through [`against_lock`], as `run` does. The
/// checks are not worded.
pub fn against_entry(
    earlier: &LockedCase,
    earlier_path: &Path,
    later: &LockedCase,
    later_case: Option<&crate::results::CaseResult>,
    tolerances: CaseTolerances,
    max: Option<u64>,
    gpu_compared: bool,
) -> Vec<Check> {
    let now = crate::results::readback::CaseNowParts::new(later, later_case);
    // A results file's search as it ran (a lock keeps no search that
    // found nothing: the results do); a lock's, as it counts it.
    let capacity = match later_case.and_then(|c| c.capacity.clone()) {
        Some(capacity) => Some(capacity),
        None => later.capacity_of.as_ref().map(|of| {
            let (param, step) = crate::capacity::parse_counted_as(of);
            Capacity {
                param,
                step,
                value: later.capacity,
                complete: true,
                probes: Vec::new(),
            }
        }),
    };
    let found = capacity.as_ref().map(|capacity| Found { capacity, max });
    let against = Against {
        locked: Some(earlier),
        lock_path: earlier_path,
        require: false,
        gpu_compared,
        testbed: None,
        now_from_lock: later_case.is_none(),
    };
    against_lock(against, now.view(), tolerances, found).1
}

//! Capacity search: the largest value of a case's parameter (a batch size,
//! a concurrency) for which the case still passes, found by probing.
//!
//! [`next_probe`] is the whole algorithm, a pure function of the search's
//! bounds, the locked capacity and the probes so far, so every path is
//! table-tested:
//!
//! - **Cold**: doubling from `min` (`min`, `2·min`, `4·min`, … capped at
//!   `max`) until a probe fails, then bisecting between the largest value
//!   that passed and the smallest that failed, on multiples of `step`,
//!   until no multiple of `step` lies between them. A failure at `min`
//!   ends the search with no capacity; a pass at `max` ends it at `max`.
//! - **Warm**, with a locked capacity `c`: `c` first, then `c + step`. An
//!   unchanged workload costs two probes (`c` passes, `c + step` fails); a
//!   grown one doubles on from `c + step`; a shrunk one bisects below `c`.
//!
//! The search assumes the case passes below its capacity and fails above
//! it (memory grows with the parameter). A flaky probe breaks that: a pass
//! above a failure. The search then trusts the failure — the capacity is
//! the largest pass below the smallest failure — so a flaky failure can
//! only make the capacity look smaller, never larger, and the probes in
//! the results show what happened.

use serde::{Deserialize, Serialize};

use crate::vocabulary::{CaseStatus, FailureType};

/// The reserved `param` that searches a case's `concurrency`.
pub const CONCURRENCY: &str = "concurrency";

/// What a capacity counts, as the lock records it: `batch, step 8`. Two
/// capacities compare only when this is the same.
pub fn counted_as(param: &str, step: Option<u64>) -> String {
    match step {
        Some(step) => format!("{param}, step {step}"),
        None => param.to_string(),
    }
}

/// What [`counted_as`] wrote, read back: `batch, step 8` is `("batch",
/// Some(8))`.
pub fn parse_counted_as(text: &str) -> (String, Option<u64>) {
    match text.split_once(", step ") {
        Some((param, step)) => match step.parse() {
            Ok(step) => (param.to_string(), Some(step)),
            Err(_) => (text.to_string(), None),
        },
        None => (text.to_string(), None),
    }
}

/// A case's `search = { param, min, max, step, max_probes, timeout }`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SearchSpec {
    /// The placeholder searched (`batch`), or `concurrency`.
    pub param: String,
    pub min: u64,
    pub max: u64,
    pub step: u64,
    /// Most probes the search may run.
    pub max_probes: u32,
    /// The whole search's time; `None`: only each probe's `timeout`.
    pub timeout: Option<std::time::Duration>,
    /// How far below the locked capacity a run may land before it is a
    /// regression (`capacity_tolerance`).
    pub tolerance: Tolerance,
}

/// `capacity_tolerance`: a count of steps, or a share of the locked value.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Tolerance {
    Steps(u64),
    Share(f64),
}

impl Eq for Tolerance {}

impl Default for Tolerance {
    fn default() -> Self {
        Tolerance::Steps(0)
    }
}

impl SearchSpec {
    /// The smallest capacity that is no regression from `locked`.
    pub fn least_accepted(&self, locked: u64) -> u64 {
        self.tolerance.least_accepted(locked, self.step)
    }
}

impl Tolerance {
    /// The smallest capacity that is no regression from `locked`, for a
    /// search of `step`.
    pub fn least_accepted(self, locked: u64, step: u64) -> u64 {
        let allowed = match self {
            Tolerance::Steps(steps) => steps.saturating_mul(step),
            // Rounded down: a share never forgives more than it says.
            Tolerance::Share(share) => (locked as f64 * share).floor() as u64,
        };
        locked.saturating_sub(allowed)
    }
}

impl std::fmt::Display for Tolerance {
    /// `0 steps`, `2 steps`, `5%`: as a suite writes it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Tolerance::Steps(1) => f.write_str("1 step"),
            Tolerance::Steps(steps) => write!(f, "{steps} steps"),
            Tolerance::Share(share) => write!(f, "{}%", crate::units::format_figure(share * 100.0)),
        }
    }
}

/// One probe: a run of the case at one value, and how it ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Probe {
    pub value: u64,
    pub status: CaseStatus,
    pub failure_kind: Option<FailureType>,
    pub host_peak_bytes: Option<u64>,
    pub gpu_peak_bytes: Option<u64>,
    pub wall_time_s: f64,
}

impl Probe {
    pub fn passed(&self) -> bool {
        self.status == CaseStatus::Passed
    }

    /// A probe at `value` that passed or failed, with no figures: the
    /// tests' starting point.
    #[cfg(test)]
    pub(crate) fn ended(value: u64, passed: bool) -> Probe {
        Probe {
            value,
            status: if passed {
                CaseStatus::Passed
            } else {
                CaseStatus::Failed
            },
            failure_kind: None,
            host_peak_bytes: None,
            gpu_peak_bytes: None,
            wall_time_s: 0.0,
        }
    }
}

/// What a search found.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Capacity {
    pub param: String,
    /// The search's step: what the value is a multiple of once bisected.
    #[serde(default)]
    pub step: Option<u64>,
    /// The largest value that passed; `None`: not even `min` did.
    pub value: Option<u64>,
    /// The search ran to its end. `false`: cut short by `max_probes` or
    /// its `timeout`, so the capacity is at least `value`.
    pub complete: bool,
    pub probes: Vec<Probe>,
}

impl Capacity {
    /// `largest batch that fits: 296 (9 probes)`, `>= 256` when cut short.
    pub fn describe(&self) -> String {
        let probes = match self.probes.len() {
            1 => "1 probe".to_string(),
            n => format!("{n} probes"),
        };
        match (self.value, self.complete) {
            (Some(value), true) => {
                format!("largest {} that fits: {value} ({probes})", self.param)
            }
            (Some(value), false) => format!(
                "largest {} that fits: >= {value} ({probes}; the search was cut short)",
                self.param
            ),
            (None, _) => format!(
                "no {} fits: the smallest probed failed ({probes})",
                self.param
            ),
        }
    }
}

/// The largest value that passed below the smallest that failed, and that
/// failure (`None`s when there is none).
fn bounds(probes: &[Probe]) -> (Option<u64>, Option<u64>) {
    let failed = probes.iter().filter(|p| !p.passed()).map(|p| p.value).min();
    let passed = probes
        .iter()
        .filter(|p| p.passed() && failed.is_none_or(|f| p.value < f))
        .map(|p| p.value)
        .max();
    (passed, failed)
}

/// The next value to probe, or `None` when the search is over (its
/// probes used up too).
pub fn next_probe(spec: &SearchSpec, locked: Option<u64>, probes: &[Probe]) -> Option<u64> {
    if probes.len() >= spec.max_probes as usize {
        return None;
    }
    let probed = |value: u64| probes.iter().any(|p| p.value == value);
    let warm = locked.map(|c| c.clamp(spec.min, spec.max));
    let Some(first) = probes.first() else {
        return Some(warm.unwrap_or(spec.min));
    };
    // Warm start: after the locked value passed, the next step up.
    if let (Some(c), 1) = (warm, probes.len()) {
        if first.value == c && first.passed() && c < spec.max {
            return Some(c.saturating_add(spec.step).min(spec.max));
        }
    }
    match bounds(probes) {
        (None, Some(failed)) => {
            // Nothing passed yet: the smallest value, unless it failed.
            (failed > spec.min && !probed(spec.min)).then_some(spec.min)
        }
        (Some(passed), None) => {
            (passed < spec.max).then(|| passed.saturating_mul(2).max(passed + 1).min(spec.max))
        }
        (Some(passed), Some(failed)) => {
            let step = spec.step.max(1);
            let middle = passed + (failed - passed) / 2;
            let mut value = middle / step * step;
            if value <= passed {
                value = (passed / step + 1).saturating_mul(step);
            }
            (value < failed && !probed(value)).then_some(value)
        }
        (None, None) => None,
    }
}

/// What the probes found; `complete` when the search ended by itself.
pub fn outcome(spec: &SearchSpec, locked: Option<u64>, probes: Vec<Probe>) -> Capacity {
    let (value, _) = bounds(&probes);
    // Over when nothing would be probed next even with probes to spare: a
    // search whose last allowed probe ended it is complete.
    let unbounded = SearchSpec {
        max_probes: u32::MAX,
        ..spec.clone()
    };
    let complete = next_probe(&unbounded, locked, &probes).is_none();
    Capacity {
        param: spec.param.clone(),
        step: Some(spec.step),
        value,
        complete,
        probes,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(min: u64, max: u64, step: u64) -> SearchSpec {
        SearchSpec {
            param: "batch".into(),
            min,
            max,
            step,
            max_probes: 64,
            timeout: None,
            tolerance: Tolerance::default(),
        }
    }

    fn probe(value: u64, passed: bool) -> Probe {
        Probe::ended(value, passed)
    }

    /// Run a search against a workload that passes up to `limit`.
    fn search(spec: &SearchSpec, locked: Option<u64>, limit: u64) -> Capacity {
        let mut probes = Vec::new();
        while let Some(value) = next_probe(spec, locked, &probes) {
            assert!(
                !probes.iter().any(|p: &Probe| p.value == value),
                "probed {value} twice: {probes:?}"
            );
            assert!(
                (spec.min..=spec.max).contains(&value),
                "{value} out of bounds"
            );
            probes.push(probe(value, value <= limit));
        }
        outcome(spec, locked, probes)
    }

    #[test]
    fn a_threshold_is_found_exactly_in_at_most_twice_log2_max_probes() {
        let spec = spec(1, 4096, 8);
        for limit in [8, 9, 15, 16, 17, 100, 296, 300, 1000, 2048, 4095] {
            let found = search(&spec, None, limit);
            let expected = (limit / 8 * 8).max(if limit >= 8 { 8 } else { 0 });
            // The largest multiple of step that passes (or a doubling value
            // above it, when one of those passed).
            let best = found.value.expect("something passes");
            assert!(best <= limit, "{limit}: {found:?}");
            assert!(best >= expected, "{limit}: {best} < {expected}: {found:?}");
            assert!(found.complete);
            assert!(
                found.probes.len() <= 24,
                "{limit}: {} probes",
                found.probes.len()
            );
        }
    }

    #[test]
    fn ends_at_max_or_at_nothing() {
        let spec = spec(4, 64, 4);
        let all = search(&spec, None, 1000);
        assert_eq!(all.value, Some(64));
        assert_eq!(
            all.probes.iter().map(|p| p.value).collect::<Vec<_>>(),
            [4, 8, 16, 32, 64]
        );
        let none = search(&spec, None, 0);
        assert_eq!((none.value, none.probes.len()), (None, 1));
        assert!(none.describe().starts_with("no batch fits"));
    }

    #[test]
    fn a_warm_start_costs_two_probes_when_nothing_changed() {
        let spec = spec(1, 4096, 8);
        let same = search(&spec, Some(296), 300);
        assert_eq!(same.value, Some(296));
        assert_eq!(same.probes.len(), 2, "{same:?}");
        let shrunk = search(&spec, Some(296), 250);
        assert_eq!(shrunk.value, Some(248), "{shrunk:?}");
        let grown = search(&spec, Some(296), 700);
        assert_eq!(grown.value, Some(696), "{grown:?}");
    }

    #[test]
    fn a_search_ended_by_its_last_allowed_probe_is_complete() {
        let spec = SearchSpec {
            max_probes: 3,
            ..spec(8, 32, 8)
        };
        let found = search(&spec, None, 1000);
        assert_eq!((found.value, found.complete), (Some(32), true));
    }

    #[test]
    fn max_probes_cuts_the_search_short_with_a_lower_bound() {
        let spec = SearchSpec {
            max_probes: 3,
            ..spec(1, 4096, 8)
        };
        let found = search(&spec, None, 1000);
        assert_eq!(found.value, Some(4));
        assert!(!found.complete);
        assert!(found.describe().contains(">= 4"), "{}", found.describe());
    }

    #[test]
    fn a_tolerance_is_steps_or_a_share_of_the_locked_value() {
        let steps = SearchSpec {
            tolerance: Tolerance::Steps(2),
            ..spec(1, 4096, 8)
        };
        assert_eq!(steps.least_accepted(296), 280);
        let share = SearchSpec {
            tolerance: Tolerance::Share(0.05),
            ..spec(1, 4096, 8)
        };
        assert_eq!(share.least_accepted(300), 285);
        assert_eq!(spec(1, 4096, 8).least_accepted(296), 296);
        assert_eq!(steps.least_accepted(8), 0);
    }

    #[test]
    fn a_flaky_failure_only_makes_the_capacity_smaller() {
        let spec = spec(8, 1024, 8);
        // 64 failed once (flaky), 128 passed: the failure is trusted.
        let probes = vec![
            probe(8, true),
            probe(16, true),
            probe(32, true),
            probe(64, false),
            probe(128, true),
        ];
        let (passed, failed) = bounds(&probes);
        assert_eq!((passed, failed), (Some(32), Some(64)));
        assert_eq!(next_probe(&spec, None, &probes), Some(48));
    }
}

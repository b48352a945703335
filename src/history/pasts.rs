//! What a run's cases are held against: each case's past figures on the
//! run's branch (a pull request's: its base branch's), in the creep
//! window, and the levels accepted there. Read from the history once,
//! before the first case starts; the judge reads it per case.

use std::collections::HashMap;

use super::trend::Past;
use super::{Acceptance, RunHead, Series};

/// The figures the judge holds against their past, by name.
pub use super::entry::names::{
    GPU_PEAK, HOST_PEAK, HOST_WORKING_PEAK, OUTSIDE_ALLOCATOR, PROBE_ALLOCATED,
};

/// The figures a run is held against its past on.
pub const JUDGED: [&str; 5] = [
    GPU_PEAK,
    HOST_PEAK,
    PROBE_ALLOCATED,
    HOST_WORKING_PEAK,
    OUTSIDE_ALLOCATOR,
];

/// A case's key in the history: its id and testbed.
type CaseKey = (String, Option<String>);

/// Past figures and accepted levels, by case.
#[derive(Debug, Clone, Default)]
pub struct Pasts {
    /// The branch whose series these are (`None`: runs of any branch).
    pub branch: Option<String>,
    /// When the widest window begins (milliseconds since the epoch):
    /// no run before it was read.
    pub since_ms: i64,
    /// When the run started, which each case's own window is counted
    /// back from.
    pub now_ms: i64,
    pub runs: Vec<RunHead>,
    series: HashMap<CaseKey, HashMap<String, Vec<(u32, Past)>>>,
    accepted: HashMap<(CaseKey, String), Acceptance>,
}

impl Pasts {
    /// From a [`Series`] of [`JUDGED`] and the acceptances of its branch
    /// (the last one per case and figure stands).
    pub fn new(
        series: Series,
        acceptances: Vec<Acceptance>,
        branch: Option<String>,
        (since_ms, now_ms): (i64, i64),
    ) -> Pasts {
        let mut by_case: HashMap<CaseKey, HashMap<String, Vec<(u32, Past)>>> = HashMap::new();
        for point in &series.points {
            let (Some(run), Some(case), Some(figure)) = (
                series.runs.get(point.run as usize),
                series.cases.get(point.case as usize),
                series.figures.get(usize::from(point.figure)),
            ) else {
                continue;
            };
            by_case
                .entry(case.clone())
                .or_default()
                .entry(figure.clone())
                .or_default()
                .push((
                    point.run,
                    Past {
                        value: point.value,
                        passed: point.passed,
                        started_ms: run.started_ms,
                    },
                ));
        }
        for figures in by_case.values_mut() {
            for points in figures.values_mut() {
                points.sort_by_key(|(run, _)| *run);
            }
        }
        let accepted = acceptances
            .into_iter()
            .map(|a| {
                (
                    ((a.case_id.clone(), a.testbed.clone()), a.figure.clone()),
                    a,
                )
            })
            .collect();
        Pasts {
            branch,
            since_ms,
            now_ms,
            runs: series.runs,
            series: by_case,
            accepted,
        }
    }

    /// When a window of `window` back from the run begins, within what
    /// was read.
    pub fn since(&self, window: std::time::Duration) -> i64 {
        let back = i64::try_from(window.as_millis()).unwrap_or(i64::MAX);
        self.now_ms.saturating_sub(back).max(self.since_ms)
    }

    /// A case's past values of `figure`, oldest first, each with its run
    /// (an index into `runs`).
    pub fn of(&self, case: &str, testbed: Option<&str>, figure: &str) -> &[(u32, Past)] {
        self.series
            .get(&(case.to_string(), testbed.map(str::to_string)))
            .and_then(|figures| figures.get(figure))
            .map_or(&[], Vec::as_slice)
    }

    /// The level last accepted for a case's figure.
    pub fn accepted(&self, case: &str, testbed: Option<&str>, figure: &str) -> Option<&Acceptance> {
        self.accepted.get(&(
            (case.to_string(), testbed.map(str::to_string)),
            figure.to_string(),
        ))
    }
}

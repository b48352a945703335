//! A checked suite ([`Suite`]): its settings, its `[[case]]` cases and
//! `[[pytest]]` tables, ready to plan and run.

use std::path::PathBuf;
use std::time::Duration;

use super::case::Case;
use super::located::Located;
use super::model::{DriftPolicy, EnvironmentSpec, ForeignPolicy, GpuMode};
use super::pytest_table::PytestSource;

/// A validated suite, ready to plan and run.
#[derive(Debug, Clone)]
pub struct Suite {
    pub name: String,
    /// The suite file as the user named it (for messages).
    pub path: PathBuf,
    /// Absolute folder commands run from unless a case sets `cwd`.
    pub workdir: PathBuf,
    pub sample_interval: Duration,
    pub gpu: GpuMode,
    pub foreign_processes: ForeignPolicy,
    /// What to do when the environment differs from the baseline's.
    pub on_drift: DriftPolicy,
    /// What to record about the workloads' software (`[environment]`).
    pub environment: EnvironmentSpec,
    /// `[suite] redact`: the suite's own secret patterns (regexes, checked),
    /// masked beside the built-in ones (see `crate::redact`).
    pub redact: Vec<String>,
    /// `[suite] history`: where runs are recorded, a relative file
    /// resolved against the suite's folder (`--history` and
    /// `OOMGATE_HISTORY` come first).
    pub history: Option<crate::files::HistoryLocation>,
    /// `[suite] history_required`: a history that cannot be reached
    /// fails the run (exit 3) instead of being said and passed over.
    pub history_required: bool,
    /// The `[[case]]` cases, then (once collected, see `crate::pytest`)
    /// one per test of each `[[pytest]]`.
    pub cases: Vec<Case>,
    /// `[[parity]]`: one case's figure against another's, judged once
    /// both ran (`judge::parity`).
    pub parity: Vec<super::Parity>,
    /// `[[pytest]]` tables, checked; their tests are not known until
    /// pytest collects them (`crate::pytest::collect`).
    pub pytest: Vec<PytestSource>,
    /// oomgate's copy of its pytest plugin, once the tests are collected:
    /// held for as long as the suite is, removed after.
    pub pytest_plugin: Option<std::sync::Arc<crate::files::SealedDir>>,
    /// The most workers a `[[pytest]]` table asked pytest-xdist for (`-n
    /// 4`; `auto` as this machine's CPUs), once collected: oomgate turns
    /// xdist off and runs that many tests at once itself, when `--jobs`
    /// does not say.
    pub xdist_workers: Option<usize>,
    /// What is worth saying about the suite but does not stop it
    /// (`file:line:col: warning: …`), printed when it is loaded.
    pub warnings: Vec<Located>,
}

impl Suite {
    /// Cases whose id contains any of the substrings (all cases when none);
    /// see [`filter_matches`] for `=ID` and whole pytest node ids.
    pub fn filtered(&self, filters: &[String]) -> Vec<&Case> {
        // A whole pytest node id names one test: `test_npv` must not also
        // take `test_npv_decimal`. Any other text is a substring, so a
        // case's name takes all its matrix rows.
        let whole: Vec<&str> = filters
            .iter()
            .map(String::as_str)
            .filter(|f| f.contains("::") && self.cases.iter().any(|c| c.id == *f))
            .collect();
        let matches = |case: &Case, filter: &str| match whole.contains(&filter) {
            true => case.id == filter,
            false => filter_matches(&case.id, filter),
        };
        self.cases
            .iter()
            .filter(|case| filters.is_empty() || filters.iter().any(|f| matches(case, f)))
            .collect()
    }
}

/// Whether a case id is taken by one `--filter`: `=ID` takes that id
/// alone (nextest's `test(=name)`), any other text every id containing
/// it.
pub fn filter_matches(id: &str, filter: &str) -> bool {
    match filter.strip_prefix('=') {
        Some(whole) => id == whole,
        None => id.contains(filter),
    }
}

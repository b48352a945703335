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
    /// The `[[case]]` cases, then (once collected, see `crate::pytest`)
    /// one per test of each `[[pytest]]`.
    pub cases: Vec<Case>,
    /// `[[pytest]]` tables, checked; their tests are not known until
    /// pytest collects them (`crate::pytest::collect`).
    pub pytest: Vec<PytestSource>,
    /// oomgate's copy of its pytest plugin, once the tests are collected:
    /// held for as long as the suite is, removed after.
    pub pytest_plugin: Option<std::sync::Arc<crate::files::SealedDir>>,
    /// What is worth saying about the suite but does not stop it
    /// (`file:line:col: warning: …`), printed when it is loaded.
    pub warnings: Vec<Located>,
}

impl Suite {
    /// Cases whose id contains any of the substrings (all cases when none).
    pub fn filtered(&self, filters: &[String]) -> Vec<&Case> {
        self.cases
            .iter()
            .filter(|case| {
                filters.is_empty() || filters.iter().any(|f| case.id.contains(f.as_str()))
            })
            .collect()
    }
}

//! What the history keeps of a run ([`RunEntry`]), made from its results
//! ([`RunEntry::of`]): pure, and every text masked as any file oomgate
//! writes (`redact::mask_written`) before it is stored.

use std::collections::BTreeMap;

use serde::Serialize;

use super::origin::Origin;
use crate::results::{CaseResult, RunResults};
use crate::vocabulary::CaseStatus;

/// How a run came into the history.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum RecordedBy {
    /// `oomgate run` (or `lock`) recorded its own run.
    Run,
    /// `oomgate merge` recorded the shards' run as one.
    Merge,
    /// `oomgate history add` recorded a results.json after the fact.
    Add,
}

impl RecordedBy {
    pub fn as_str(self) -> &'static str {
        match self {
            RecordedBy::Run => "run",
            RecordedBy::Merge => "merge",
            RecordedBy::Add => "add",
        }
    }

    pub fn parse(text: &str) -> Option<RecordedBy> {
        [RecordedBy::Run, RecordedBy::Merge, RecordedBy::Add]
            .into_iter()
            .find(|by| by.as_str() == text)
    }
}

/// One run as the history keeps it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunEntry {
    pub run_id: String,
    /// When the run started (RFC 3339), and the same in milliseconds
    /// since the epoch, the order of a series.
    pub started_at: String,
    pub started_ms: i64,
    /// When it was recorded (RFC 3339).
    pub recorded_at: String,
    pub recorded_by: RecordedBy,
    pub suite: String,
    /// A hash of the cases that ran and their definitions: runs of the
    /// same cases, defined the same, have the same one.
    pub suite_fingerprint: String,
    pub commit: Option<String>,
    pub branch: Option<String>,
    pub base_branch: Option<String>,
    pub ci_system: Option<String>,
    pub ci_run_id: Option<String>,
    pub ci_run_url: Option<String>,
    pub host: String,
    pub driver_version: Option<String>,
    pub cuda_version: Option<String>,
    pub gpu_models: Vec<String>,
    /// The Python packages the run recorded, by name.
    pub packages: BTreeMap<String, String>,
    pub oomgate_version: String,
    /// Every case passed (or was skipped), and the run was not interrupted.
    pub passed: bool,
    pub interrupted: bool,
    pub cases_run: u64,
    pub cases_failed: u64,
    pub cases: Vec<CaseEntry>,
}

/// One case of a run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CaseEntry {
    pub id: String,
    /// The GPU model and count it ran on; `None`: it ran on no GPU.
    pub testbed: Option<String>,
    /// As results.json says it: `passed`, `failed`, ...
    pub status: String,
    pub failure_kind: Option<String>,
    pub wall_time_s: f64,
    /// Each gated figure it had, by name.
    pub figures: BTreeMap<String, Figure>,
    /// The tolerances it was judged with (results.json's `tolerance`).
    pub tolerances: Option<serde_json::Value>,
    /// Its checks as results.json holds them (budgets, baseline, ...).
    pub checks: serde_json::Value,
}

/// A figure and how it was measured.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Figure {
    pub value: f64,
    /// As results.json names it: `sampled@50ms`, `cgroup-v1`,
    /// `torch-allocator`, `probe`, the searched parameter, ...
    pub method: Option<String>,
}

/// The names of the figures, as results.json names them.
pub mod names {
    pub const GPU_PEAK: &str = "gpu_peak_bytes";
    pub const HOST_PEAK: &str = "host_peak_bytes";
    pub const HOST_WORKING_PEAK: &str = "host_working_peak_bytes";
    pub const HOST_LEFT: &str = "host_left_bytes";
    pub const GPU_LEFT: &str = "gpu_left_bytes";
    pub const PROBE_ALLOCATED: &str = "probe.peak_allocated_bytes";
    pub const PROBE_RESERVED: &str = "probe.peak_reserved_bytes";
    pub const CAPACITY: &str = "capacity";
    /// GPU memory outside the allocator, its peak.
    pub const OUTSIDE_ALLOCATOR: &str = "outside_allocator_peak_bytes";
    /// `output.<name>`: a number the case's logs printed.
    pub fn output(name: &str) -> String {
        format!("output.{name}")
    }
    /// `ranks.<rank>.gpu_peak_bytes`, `ranks.<rank>.host_peak_bytes`.
    pub fn rank(rank: u32, figure: &str) -> String {
        format!("ranks.{rank}.{figure}")
    }
}

/// Now, as the history writes a moment: RFC 3339 with milliseconds, in
/// the local offset.
pub fn now_text() -> String {
    chrono::Local::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, false)
}

/// A value as the history stores JSON: its text.
pub(super) fn json_text(value: &impl Serialize) -> String {
    serde_json::to_string(value).unwrap_or_else(|_| "null".into())
}

impl CaseEntry {
    /// Whether the case stands in its run: it passed, or pytest skipped
    /// it (`CaseStatus::ok`, from its status as results.json words it).
    pub fn passed(&self) -> bool {
        [CaseStatus::Passed, CaseStatus::Skipped]
            .iter()
            .any(|ok| ok.as_str() == self.status)
    }
}

fn masked(text: &str) -> String {
    crate::redact::mask_written(text).into_owned()
}

fn masked_opt(text: Option<&str>) -> Option<String> {
    text.map(masked)
}

impl RunEntry {
    /// The entry of `results` (which must carry a run id: see
    /// `results::run_id`), recorded now by `by`, from `origin`.
    pub fn of(results: &RunResults, run_id: &str, origin: &Origin, by: RecordedBy) -> RunEntry {
        let started = chrono::DateTime::parse_from_rfc3339(&results.started_at).ok();
        let cases: Vec<CaseEntry> = results.cases.iter().map(CaseEntry::of).collect();
        let cases_failed = results.cases.iter().filter(|c| !c.status.ok()).count() as u64
            + results.not_run.len() as u64;
        RunEntry {
            run_id: masked(run_id),
            started_at: results.started_at.clone(),
            started_ms: started.map_or(0, |t| t.timestamp_millis()),
            recorded_at: now_text(),
            recorded_by: by,
            suite: masked(&results.suite.name),
            suite_fingerprint: fingerprint(results),
            commit: masked_opt(origin.commit.as_deref()),
            branch: masked_opt(origin.branch.as_deref()),
            base_branch: masked_opt(origin.base_branch.as_deref()),
            ci_system: masked_opt(origin.ci_system.as_deref()),
            ci_run_id: masked_opt(origin.ci_run_id.as_deref()),
            ci_run_url: masked_opt(origin.ci_run_url.as_deref()),
            host: masked(&results.host),
            driver_version: results.environment.driver_version.clone(),
            cuda_version: results.environment.cuda_driver_version.clone(),
            gpu_models: results.environment.gpu_models.clone(),
            packages: results
                .environment
                .python
                .as_ref()
                .map(|p| {
                    p.packages
                        .iter()
                        .map(|(k, v)| (masked(k), masked(v)))
                        .collect()
                })
                .unwrap_or_default(),
            oomgate_version: results.oomgate_version.clone(),
            passed: cases_failed == 0 && !results.interrupted,
            interrupted: results.interrupted,
            cases_run: results.cases.len() as u64,
            cases_failed,
            cases,
        }
    }
}

impl CaseEntry {
    fn of(case: &CaseResult) -> CaseEntry {
        let mut figures = BTreeMap::new();
        let mut put = |name: String, value: Option<u64>, method: Option<String>| {
            if let Some(value) = value {
                figures.insert(
                    name,
                    Figure {
                        value: value as f64,
                        method,
                    },
                );
            }
        };
        let host_method = Some(case.host.method.as_str().to_string());
        put(
            names::GPU_PEAK.into(),
            case.gpu_peak_bytes,
            case.gpu_peak_method.as_ref().map(ToString::to_string),
        );
        put(
            names::HOST_PEAK.into(),
            case.host.peak_bytes,
            host_method.clone(),
        );
        put(
            names::HOST_WORKING_PEAK.into(),
            case.host.working_peak_bytes,
            host_method.clone(),
        );
        put(names::HOST_LEFT.into(), case.host.left_bytes, host_method);
        put(
            names::GPU_LEFT.into(),
            case.gpu_left_bytes,
            Some("nvml".into()),
        );
        if let Some(probe) = &case.probe {
            put(
                names::PROBE_ALLOCATED.into(),
                probe.peak_allocated,
                Some("probe".into()),
            );
            put(
                names::PROBE_RESERVED.into(),
                probe.peak_reserved,
                Some("probe".into()),
            );
        }
        if let Some(capacity) = &case.capacity {
            put(
                names::CAPACITY.into(),
                capacity.value,
                Some(masked(&capacity.param)),
            );
        }
        put(
            names::OUTSIDE_ALLOCATOR.into(),
            case.outside_allocator_peak_bytes,
            Some("nvml-less-reserved".into()),
        );
        for rank in &case.ranks {
            put(
                names::rank(rank.rank, "gpu_peak_bytes"),
                rank.gpu_peak_bytes,
                case.gpu_peak_method.as_ref().map(ToString::to_string),
            );
            put(
                names::rank(rank.rank, "host_peak_bytes"),
                rank.host_peak_bytes,
                Some(case.host.method.as_str().to_string()),
            );
        }
        // The numbers its logs printed, as printed (not bytes).
        for output in &case.outputs {
            if let Some(value) = output.value {
                figures.insert(
                    names::output(&masked(&output.name)),
                    Figure {
                        value,
                        method: Some("output".into()),
                    },
                );
            }
        }
        let json = |value: serde_json::Result<serde_json::Value>| {
            value
                .ok()
                .map(|v| mask_json(&v))
                .unwrap_or(serde_json::Value::Null)
        };
        CaseEntry {
            id: masked(&case.id),
            testbed: case.testbed.clone(),
            status: case.status.as_str().to_string(),
            failure_kind: case.failure_kind.map(|k| k.as_str().to_string()),
            wall_time_s: case.wall_time_s,
            figures,
            tolerances: case
                .tolerance
                .as_ref()
                .map(|t| json(serde_json::to_value(t))),
            checks: slim_checks(json(serde_json::to_value(&case.checks))),
        }
    }
}

/// What a check is kept as: its name, outcome, figure, limit and
/// baseline, without its words, its facts and the tolerance it applied
/// (results.json keeps them; the case's tolerances are kept beside its
/// checks, and a case's words would make most of its size).
fn slim_checks(checks: serde_json::Value) -> serde_json::Value {
    const KEPT: [&str; 6] = [
        "name",
        "outcome",
        "passed",
        "figure_bytes",
        "limit_bytes",
        "baseline_bytes",
    ];
    match checks {
        serde_json::Value::Array(items) => serde_json::Value::Array(
            items
                .into_iter()
                .map(|item| match item {
                    serde_json::Value::Object(map) => serde_json::Value::Object(
                        map.into_iter()
                            .filter(|(key, _)| KEPT.contains(&key.as_str()))
                            .collect(),
                    ),
                    other => other,
                })
                .collect(),
        ),
        other => other,
    }
}

/// Every string of a JSON value masked.
fn mask_json(value: &serde_json::Value) -> serde_json::Value {
    use serde_json::Value;
    match value {
        Value::String(text) => Value::String(masked(text)),
        Value::Array(items) => Value::Array(items.iter().map(mask_json).collect()),
        Value::Object(map) => {
            Value::Object(map.iter().map(|(k, v)| (masked(k), mask_json(v))).collect())
        }
        other => other.clone(),
    }
}

/// A hash of the cases that ran, each with its definition.
fn fingerprint(results: &RunResults) -> String {
    let mut ids: Vec<(&str, String)> = results
        .cases
        .iter()
        .map(|c| {
            (
                c.id.as_str(),
                serde_json::to_string(&c.definition).unwrap_or_default(),
            )
        })
        .collect();
    ids.sort_unstable();
    let mut text = String::new();
    for (id, definition) in ids {
        text.push_str(id);
        text.push('\u{1f}');
        text.push_str(&definition);
        text.push('\u{1e}');
    }
    format!("{:016x}", crate::suite::fnv1a(text.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The GPU memory outside the allocator is a figure of the ledger,
    /// judged against its past as the peaks are; each number the logs
    /// printed is kept as printed; one never printed is not recorded.
    #[test]
    fn outside_the_allocator_and_numbers_from_the_logs_are_recorded() {
        let mut case = CaseResult {
            id: "serve".into(),
            outside_allocator_peak_bytes: Some(512 << 20),
            ..CaseResult::default()
        };
        let output = |name: &str, value| crate::measure::output::OutputFigure {
            name: name.into(),
            value,
            matches: u64::from(value.is_some()),
            unreadable: 0,
            at: None,
            error: None,
            better: crate::suite::Better::Higher,
            pick: crate::suite::Pick::Last,
            tolerance: 0.01,
        };
        case.outputs = vec![
            output("kv_tokens", Some(1_489_281.0)),
            output("never", None),
        ];
        let entry = CaseEntry::of(&case);
        assert_eq!(
            entry.figures[names::OUTSIDE_ALLOCATOR],
            Figure {
                value: f64::from(512 << 20),
                method: Some("nvml-less-reserved".into())
            }
        );
        assert_eq!(entry.figures["output.kv_tokens"].value, 1_489_281.0);
        assert!(!entry.figures.contains_key("output.never"));
        assert!(crate::history::pasts::JUDGED.contains(&names::OUTSIDE_ALLOCATOR));
    }
}

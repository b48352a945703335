//! Reading results back: the parts of a results.json that locking and
//! diffing read (from a CI artifact, from a merged run, or from this run),
//! and the lock they make. Beside the model it reads, so the baselines need
//! not know it.
//!
//! A lock holds one environment, so the figures it holds must be
//! comparable with each other: the results of a merged run whose parts ran
//! on different GPU models, or measured host memory by methods that count
//! different pages, are refused ([`incomparable_parts`]).

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::baseline::{LOCK_VERSION, Lock, LockedCase, LockedServer, definition_hash, locked_env};
use crate::environment::Environment;
use crate::measure::HostMethod;
use crate::redact;
use crate::units::Bytes;

/// The parts of a results.json that locking and diffing need. Read with
/// serde from the file (a CI artifact) or from this run's results, so both
/// paths share one code path; unknown fields are ignored, so results from a
/// newer oomgate of the same schema still lock.
#[derive(Debug, Clone, Deserialize)]
pub struct ResultsView {
    pub schema: u32,
    pub suite: SuiteName,
    pub started_at: String,
    pub finished_at: Option<String>,
    #[serde(default)]
    pub interrupted: bool,
    #[serde(default)]
    pub environment: Environment,
    pub cases: Vec<CaseView>,
    #[serde(default)]
    pub not_run: Vec<String>,
    /// The write failure that stopped the run, if one did.
    #[serde(default)]
    pub fault: Option<String>,
    /// The parts of a merged run (`oomgate merge`); empty for a run.
    #[serde(default)]
    pub parts: Vec<PartView>,
}

/// One part of a merged run, as far as comparing its figures goes.
#[derive(Debug, Clone, Deserialize)]
pub struct PartView {
    pub dir: String,
    #[serde(default)]
    pub partition: Option<super::PartitionInfo>,
    #[serde(default)]
    pub environment: Environment,
    #[serde(default)]
    pub measurement: Option<MeasurementView>,
}

/// How a part measured, as far as comparing its figures goes.
#[derive(Debug, Clone, Deserialize)]
pub struct MeasurementView {
    #[serde(default)]
    pub host_method: Option<HostMethod>,
}

/// What decides whether one part's figures compare with another's.
#[derive(Debug, Clone)]
pub struct PartFacts<'a> {
    /// The part as messages name it (`shards/2 (count:2/4)`).
    pub name: String,
    pub environment: &'a Environment,
    /// How it measured host memory (`None`: not recorded).
    pub host_method: Option<HostMethod>,
}

/// Why the figures of these parts cannot stand in one lock, one line per
/// part that differs from the first: another set of GPU models (as
/// `baseline::drift::same_gpus` sees it; a part with GPUs and one without
/// count as different here, since the lock records one set for every
/// case), or a host method not comparable with the first part's
/// (`cgroup-v1` and `cgroup-v2` are). Empty when every part compares.
pub fn incomparable_parts<'a>(parts: impl IntoIterator<Item = PartFacts<'a>>) -> Vec<String> {
    let mut parts = parts.into_iter();
    let Some(first) = parts.next() else {
        return Vec::new();
    };
    let models = |env: &Environment| {
        let names: std::collections::BTreeSet<&str> = env
            .gpu_models
            .iter()
            .map(|m| m.rsplit_once(" (").map_or(m.as_str(), |(name, _)| name))
            .collect();
        if names.is_empty() {
            "no GPU".to_string()
        } else {
            names.into_iter().collect::<Vec<_>>().join(", ")
        }
    };
    let mut reasons = Vec::new();
    for part in parts {
        let (a, b) = (first.environment, part.environment);
        let one_without = a.gpu_models.is_empty() != b.gpu_models.is_empty();
        if one_without || !crate::baseline::drift::same_gpus(a, b) {
            reasons.push(format!(
                "GPU models differ: {} on {}, {} on {}",
                first.name,
                models(a),
                part.name,
                models(b)
            ));
        }
        let method = |m: Option<HostMethod>| m.unwrap_or(HostMethod::ProcfsRss);
        let (x, y) = (method(first.host_method), method(part.host_method));
        if !x.comparable_with(y) {
            reasons.push(format!(
                "host memory measured by {x} in {}, by {y} in {}",
                first.name, part.name
            ));
        }
    }
    reasons
}

#[derive(Debug, Clone, Deserialize)]
pub struct SuiteName {
    pub name: String,
}

/// What a search found, as a lock needs it.
#[derive(Debug, Clone, Deserialize)]
pub struct CapacityView {
    pub param: String,
    pub value: Option<u64>,
    #[serde(default)]
    pub step: Option<u64>,
    #[serde(default = "complete")]
    pub complete: bool,
}

/// A search recorded without `complete` ran to its end.
fn complete() -> bool {
    true
}

/// A case's server, as results.json writes it: what the lock keeps.
#[derive(Debug, Clone, Deserialize)]
pub struct ServerView {
    pub command: Vec<String>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct CaseView {
    pub id: String,
    pub status: crate::status::CaseStatus,
    pub message: Option<String>,
    pub host_peak_bytes: Option<u64>,
    /// Absent in results written before host methods were recorded.
    #[serde(default)]
    pub host_method: Option<HostMethod>,
    pub gpu_peak_bytes: Option<u64>,
    pub gpu_peak_method: Option<String>,
    /// Per device; only whether a figure was tainted is read here.
    #[serde(default)]
    pub gpu_devices: Vec<DeviceView>,
    pub wall_time_s: f64,
    pub command: Vec<String>,
    #[serde(default)]
    pub params: BTreeMap<String, String>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    #[serde(default)]
    pub allocator_env: BTreeMap<String, String>,
    #[serde(default)]
    pub probe: Option<ProbeView>,
    #[serde(default)]
    pub checks: Vec<CheckView>,
    #[serde(default)]
    pub diagnosis: Option<serde_json::Value>,
    #[serde(default)]
    pub instances: Vec<InstanceView>,
    /// With `search`: what it found.
    #[serde(default)]
    pub capacity: Option<CapacityView>,
    /// With `server`: the server's command, as recorded.
    #[serde(default)]
    pub server: Option<ServerView>,
    /// The comparison with the baseline the run had, if any.
    #[serde(default)]
    pub baseline: Option<ComparisonView>,
    /// The tolerances the case was judged with (absent in results
    /// written before they were recorded).
    #[serde(default)]
    pub tolerance: Option<crate::baseline::CaseTolerances>,
}

/// A case's comparison with its baseline, as results.json writes it.
#[derive(Debug, Clone, Deserialize)]
pub struct ComparisonView {
    #[serde(default)]
    pub host: Option<FigureView>,
    #[serde(default)]
    pub gpu: Option<FigureView>,
    #[serde(default)]
    pub allocated: Option<FigureView>,
}

impl ComparisonView {
    pub fn figures(&self) -> impl Iterator<Item = &FigureView> {
        [&self.host, &self.gpu, &self.allocated]
            .into_iter()
            .flatten()
    }
}

/// One figure against its baseline.
#[derive(Debug, Clone, Deserialize)]
pub struct FigureView {
    pub figure: String,
    /// `within`, `regressed`, `improved`, `no-baseline`, `unknown`, `skipped`.
    pub outcome: String,
    pub new_bytes: Option<u64>,
    pub baseline_bytes: Option<u64>,
    pub delta_ratio: Option<f64>,
}

impl FigureView {
    /// The lock has this figure but the run could not measure it.
    fn missing(&self) -> bool {
        self.outcome == "unknown" && self.baseline_bytes.is_some()
    }

    /// `gpu 1000.0 MiB -> 1.17 GiB (+20.0%)`, for a change a re-lock takes.
    fn change(&self) -> Option<String> {
        let new = crate::units::Bytes(self.new_bytes?);
        match (self.outcome.as_str(), self.baseline_bytes) {
            ("regressed" | "skipped", Some(old)) => {
                let ratio = self
                    .delta_ratio
                    .map(|r| format!(" ({:+.1}%)", r * 100.0))
                    .unwrap_or_default();
                Some(format!(
                    "{} {} -> {new}{ratio}",
                    self.figure,
                    crate::units::Bytes(old)
                ))
            }
            ("no-baseline" | "skipped", None) => {
                Some(format!("{} {new} (no baseline before)", self.figure))
            }
            _ => None,
        }
    }
}

/// A check's name and verdict.
#[derive(Debug, Clone, Deserialize)]
pub struct CheckView {
    pub name: String,
    pub passed: bool,
    #[serde(default)]
    pub message: String,
}

/// How an instance ended (`{"code": 0}`), as results.json writes it.
#[derive(Debug, Clone, Deserialize)]
pub struct InstanceView {
    #[serde(default)]
    pub exit: Option<serde_json::Value>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct DeviceView {
    #[serde(default)]
    pub tainted_by: Vec<serde_json::Value>,
}

impl CaseView {
    /// Whether the case failed only against the old baseline: every
    /// instance exited 0, nothing was diagnosed, and every failed check is
    /// a comparison with the lock (`baseline.*`) or environment drift. Its
    /// figures are sound; locking them accepts the change, which is what a
    /// re-lock after an intended memory increase is for.
    pub fn failed_only_against_the_baseline(&self) -> bool {
        let clean_exit = |i: &InstanceView| i.exit == Some(serde_json::json!({ "code": 0 }));
        // A locked figure this run could not measure is a missing figure,
        // not a change: locking would drop the gate.
        let missing = self
            .baseline
            .iter()
            .flat_map(ComparisonView::figures)
            .any(FigureView::missing);
        self.status == crate::status::CaseStatus::Failed
            && !missing
            && self.diagnosis.is_none()
            && !self.instances.is_empty()
            && self.instances.iter().all(clean_exit)
            && self.checks.iter().any(|c| !c.passed)
            && self.checks.iter().filter(|c| !c.passed).all(|c| {
                c.name == "baseline"
                    || c.name.starts_with("baseline.")
                    || c.name == "environment.drift"
            })
    }

    /// Whether the GPU figure includes a device delta tainted by another
    /// process (see docs/gpu-measurement.md): never locked, never compared.
    pub fn gpu_tainted(&self) -> bool {
        self.gpu_devices.iter().any(|d| !d.tainted_by.is_empty())
    }
}

#[derive(Debug, Clone, Deserialize)]
pub struct ProbeView {
    pub peak_allocated: Option<u64>,
}

impl ResultsView {
    pub fn parse(text: &str) -> Result<Self, String> {
        let view: ResultsView =
            serde_json::from_str(text).map_err(|e| format!("not an oomgate results file: {e}"))?;
        // Fields are only added: every schema up to this oomgate's reads.
        if !(1..=crate::status::SCHEMA_VERSION).contains(&view.schema) {
            return Err(format!(
                "results schema {} is not one this oomgate reads (1 to {})",
                view.schema,
                crate::status::SCHEMA_VERSION
            ));
        }
        Ok(view)
    }

    /// Why this merged run's parts cannot make one lock; empty for a run,
    /// and for a merged run whose parts compare.
    pub fn incomparable_parts(&self) -> Vec<String> {
        incomparable_parts(self.parts.iter().map(|part| PartFacts {
            name: match &part.partition {
                Some(partition) => format!("{} ({partition})", part.dir),
                None => part.dir.clone(),
            },
            environment: &part.environment,
            host_method: part.measurement.as_ref().and_then(|m| m.host_method),
        }))
    }

    pub fn from_results(results: &crate::results::RunResults) -> Result<Self, String> {
        let value = serde_json::to_value(results).map_err(|e| e.to_string())?;
        serde_json::from_value(value).map_err(|e| e.to_string())
    }
}

/// A lock from a run's results, or why that run cannot be locked: it did
/// not finish, or a case failed on its own. A case that failed only
/// against the old baseline is locked (see
/// [`CaseView::failed_only_against_the_baseline`]); [`accepted_changes`]
/// names them.
pub fn lock_from_results(view: &ResultsView) -> Result<Lock, String> {
    if let Some(fault) = &view.fault {
        return Err(format!("the run hit a write failure: {fault}"));
    }
    if view.interrupted || view.finished_at.is_none() || !view.not_run.is_empty() {
        return Err("the run did not finish (interrupted or crashed)".to_string());
    }
    let incomparable = view.incomparable_parts();
    if !incomparable.is_empty() {
        return Err(format!(
            "its parts' figures are not comparable, so they cannot make one baseline: {}; run every shard on one kind of machine (GPU models, host memory method), merge, and lock that",
            incomparable.join("; ")
        ));
    }
    let failed: Vec<String> = view
        .cases
        .iter()
        .filter(|c| {
            c.status != crate::status::CaseStatus::Passed && !c.failed_only_against_the_baseline()
        })
        .map(|c| {
            format!(
                "{} ({})",
                c.id,
                c.message.as_deref().unwrap_or(c.status.as_str())
            )
        })
        .collect();
    if !failed.is_empty() {
        return Err(format!(
            "{} case(s) did not pass: {}",
            failed.len(),
            failed.join("; ")
        ));
    }
    if view.cases.is_empty() {
        return Err("the run has no cases".to_string());
    }
    Ok(lock_of(view))
}

/// What a lock from these results accepts although its cases failed: a
/// line per change of a case that failed only against the old baseline
/// (`train-bs64: gpu 41.2 GiB -> 47.9 GiB (+16.3%)`).
pub fn accepted_changes(view: &ResultsView) -> Vec<String> {
    let mut lines = Vec::new();
    for case in view
        .cases
        .iter()
        .filter(|c| c.failed_only_against_the_baseline())
    {
        // A tainted GPU figure is not locked (see `lock_of`): no change.
        let changes: Vec<String> = case
            .baseline
            .iter()
            .flat_map(ComparisonView::figures)
            .filter(|f| !(f.figure == "gpu" && case.gpu_tainted()))
            .filter_map(FigureView::change)
            .collect();
        if changes.is_empty() {
            // A capacity is no figure of the comparison: its check says it.
            let capacity = case
                .checks
                .iter()
                .find(|c| !c.passed && c.name == "baseline.capacity")
                .map(|c| c.message.as_str());
            lines.push(match capacity {
                Some(message) => format!("{}: {message}", case.id),
                None => format!("{}: the environment's drift", case.id),
            });
        }
        lines.extend(changes.into_iter().map(|c| format!("{}: {c}", case.id)));
    }
    lines
}

/// Every case of a results view as a lock, passed or not (for `diff`).
pub fn lock_of(view: &ResultsView) -> Lock {
    let cases = view
        .cases
        .iter()
        .map(|case| {
            // What a committed file may hold: redacted whatever the results
            // file held (one from an older oomgate held everything).
            let command = redact::command(&case.command);
            let params: BTreeMap<String, String> = case
                .params
                .iter()
                .map(|(k, v)| (k.clone(), redact::mask(v).into_owned()))
                .collect();
            let env = locked_env(&case.env);
            let server = case.server.as_ref().map(|s| LockedServer {
                command: redact::command(&s.command),
                env: locked_env(&s.env),
            });
            let locked = LockedCase {
                host_peak_bytes: case.host_peak_bytes,
                host_peak: human(case.host_peak_bytes),
                host_peak_method: Some(case.host_method.unwrap_or(HostMethod::ProcfsRss)),
                // A tainted figure is not the case's own: not a baseline.
                gpu_peak_bytes: case.gpu_peak_bytes.filter(|_| !case.gpu_tainted()),
                gpu_peak: human(case.gpu_peak_bytes.filter(|_| !case.gpu_tainted())),
                gpu_peak_method: case.gpu_peak_method.clone().filter(|_| !case.gpu_tainted()),
                wall_time_s: (case.wall_time_s * 1000.0).round() / 1000.0,
                definition_hash: definition_hash(&command, server.as_ref(), &params, &env),
                command,
                server,
                params,
                env,
                allocator_env: locked_env(&case.allocator_env),
                probe_peak_allocated_bytes: case.probe.as_ref().and_then(|p| p.peak_allocated),
                capacity: case.capacity.as_ref().and_then(|c| c.value),
                capacity_of: case
                    .capacity
                    .as_ref()
                    .filter(|c| c.value.is_some())
                    .map(|c| crate::capacity::counted_as(&c.param, c.step)),
                tolerance: case.tolerance,
            };
            (case.id.clone(), locked)
        })
        .collect();
    Lock {
        version: LOCK_VERSION,
        suite: view.suite.name.clone(),
        locked_at: view.started_at.clone(),
        environment: view.environment.software(),
        cases,
    }
}

/// A locked case (or a results file's case, read as the lock it makes)
/// as a comparison with another lock sees it now. A results file's GPU
/// figure is taken as it ran, tainted or not: `lock_of` leaves a tainted
/// one out of a lock, but a comparison must see it to leave it ungated,
/// as the run did.
pub struct CaseNowParts<'a> {
    locked: &'a LockedCase,
    gpu: Option<u64>,
    gpu_tainted: bool,
    gpu_method: Option<&'a str>,
}

impl<'a> CaseNowParts<'a> {
    pub fn new(locked: &'a LockedCase, view: Option<&'a CaseView>) -> Self {
        match view {
            Some(view) => CaseNowParts {
                locked,
                gpu: view.gpu_peak_bytes,
                gpu_tainted: view.gpu_tainted(),
                gpu_method: view.gpu_peak_method.as_deref(),
            },
            None => CaseNowParts {
                locked,
                gpu: locked.gpu_peak_bytes,
                gpu_tainted: false,
                gpu_method: locked.gpu_peak_method.as_deref(),
            },
        }
    }

    pub fn view(&self) -> crate::baseline::CaseNow<'a> {
        let locked = self.locked;
        crate::baseline::CaseNow {
            host: locked.host_peak_bytes,
            host_method: locked.host_method(),
            gpu: self.gpu,
            gpu_method: self.gpu_method,
            gpu_tainted: self.gpu_tainted,
            allocated: locked.probe_peak_allocated_bytes,
            command: &locked.command,
            server: locked.server.as_ref(),
            params: &locked.params,
            env: &locked.env,
            allocator_env: &locked.allocator_env,
        }
    }
}

/// `1.50 GiB`, for the lock's human-readable twins of byte figures.
pub fn human(bytes: Option<u64>) -> Option<String> {
    bytes.map(|b| Bytes(b).to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(extra: &str) -> ResultsView {
        let text = format!(
            r#"{{"schema": {}, "suite": {{"name": "s"}}, "started_at": "t", "finished_at": "u",
               "cases": [{{"id": "a", "status": "passed", "message": null, "host_peak_bytes": 1,
                          "gpu_peak_bytes": null, "gpu_peak_method": null, "wall_time_s": 1.0,
                          "command": ["x", "--token", "abc123456"]}}]{extra}}}"#,
            crate::status::SCHEMA_VERSION
        );
        ResultsView::parse(&text).expect("a results view")
    }

    #[test]
    fn a_locked_figure_the_run_could_not_measure_is_not_accepted() {
        let failed = r#", "cases": [{"id": "b", "status": "failed", "message": null, "host_peak_bytes": 1,
              "gpu_peak_bytes": null, "gpu_peak_method": null, "wall_time_s": 1.0, "command": ["x"],
              "checks": [{"name": "baseline.gpu", "passed": false}],
              "instances": [{"exit": {"code": 0}}],
              "baseline": {"gpu": {"figure": "gpu", "outcome": "unknown", "new_bytes": null,
                                   "baseline_bytes": 100, "delta_ratio": null}}}]"#;
        let text = format!(
            r#"{{"schema": {}, "suite": {{"name": "s"}}, "started_at": "t", "finished_at": "u"{failed}}}"#,
            crate::status::SCHEMA_VERSION
        );
        let view = ResultsView::parse(&text).expect("a results view");
        assert!(!view.cases[0].failed_only_against_the_baseline());
        assert!(lock_from_results(&view).is_err());
        assert_eq!(accepted_changes(&view), Vec::<String>::new());
    }

    #[test]
    fn a_run_that_hit_a_write_failure_is_not_locked() {
        assert!(lock_from_results(&view("")).is_ok());
        let why = lock_from_results(&view(r#", "fault": "out/x: No space left on device""#))
            .expect_err("not locked");
        assert!(
            why.contains("write failure") && why.contains("No space left"),
            "{why}"
        );
    }

    #[test]
    fn a_merged_run_locks_only_when_its_parts_compare() {
        let part = |dir: &str, gpus: &str, method: &str| {
            format!(
                r#"{{"dir": "{dir}", "partition": {{"kind": "count", "index": 1, "total": 2}},
                    "environment": {{"oomgate_version": "0", "gpu_models": [{gpus}]}},
                    "measurement": {{"host_method": "{method}"}}}}"#
            )
        };
        let merged = |a: String, b: String| view(&format!(r#", "parts": [{a}, {b}]"#));
        let h100 = r#""H100 (80.0 GiB)", "H100 (80.0 GiB)""#;
        // The same models (one GPU more is drift, not another model), and
        // both cgroup versions: one baseline.
        let same = merged(
            part("s1", h100, "cgroup-v1"),
            part("s2", r#""H100 (79.6 GiB)""#, "cgroup-v2"),
        );
        assert_eq!(same.incomparable_parts(), Vec::<String>::new());
        assert!(lock_from_results(&same).is_ok());
        for (b, why) in [
            (
                part("s2", r#""A100 (40.0 GiB)""#, "cgroup-v1"),
                "GPU models differ: s1 (count:1/2) on H100, s2 (count:1/2) on A100",
            ),
            (
                part("s2", "", "cgroup-v1"),
                "GPU models differ: s1 (count:1/2) on H100, s2 (count:1/2) on no GPU",
            ),
            (
                part("s2", h100, "procfs-pss"),
                "host memory measured by cgroup-v1 in s1 (count:1/2), by procfs-pss in s2 (count:1/2)",
            ),
        ] {
            let mixed = merged(part("s1", h100, "cgroup-v1"), b);
            assert_eq!(mixed.incomparable_parts(), [why]);
            let refused = lock_from_results(&mixed).expect_err("not locked");
            assert!(
                refused.contains(why) && refused.contains("not comparable"),
                "{refused}"
            );
        }
    }

    #[test]
    fn results_of_an_older_oomgate_are_redacted_when_locked() {
        let lock = lock_from_results(&view("")).expect("locked");
        assert_eq!(lock.cases["a"].command, ["x", "--token", "***"]);
    }
}

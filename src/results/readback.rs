//! Reading results back: a results.json (a CI artifact, a merged run's,
//! or this run's own) into the one results model, and what `lock` and
//! `diff` make of it — the lock it becomes, the changes a lock of a red
//! run accepts, and whether a merged run's parts are comparable enough to
//! make one lock.
//!
//! There is one reader: `RunResults` itself, read leniently (every field a
//! file of an older schema lacks takes its empty value; the files older
//! oomgates wrote are tested to load, `fixtures/results/`). A lock holds
//! one environment, so the figures it holds must be comparable with each
//! other: the results of a merged run whose parts ran on different GPU
//! models, or measured host memory by methods that count different pages,
//! are refused ([`incomparable_parts`]).

use std::collections::BTreeMap;

use crate::baseline::{
    FigureComparison, LOCK_VERSION, Lock, LockedCase, LockedServer, Outcome, definition_hash,
    locked_env,
};
use crate::environment::Environment;
use crate::measure::HostMethod;
use crate::redact;
use crate::units::Bytes;

use super::{CaseResult, CaseStatus, RunResults};

/// Why a file cannot be read as results.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReadError {
    #[error("not an oomgate results file: {0}")]
    NotResults(String),
    #[error("results schema {found} is not one this oomgate reads (1 to {known})")]
    Schema { found: u32, known: u32 },
    /// Of a schema it reads, but not as results are written.
    #[error("not readable as oomgate results (schema {schema}): {message}")]
    Unreadable { schema: u32, message: String },
}

/// A results.json's text, of any schema this oomgate reads (fields are
/// only ever added, so every schema up to its own).
pub fn parse(text: &str) -> Result<RunResults, ReadError> {
    #[derive(serde::Deserialize)]
    struct Header {
        schema: u32,
    }
    let header: Header =
        serde_json::from_str(text).map_err(|e| ReadError::NotResults(e.to_string()))?;
    let known = crate::vocabulary::SCHEMA_VERSION;
    if !(1..=known).contains(&header.schema) {
        return Err(ReadError::Schema {
            found: header.schema,
            known,
        });
    }
    serde_json::from_str(text).map_err(|e| ReadError::Unreadable {
        schema: header.schema,
        message: e.to_string(),
    })
}

/// Whether the case failed only against the old baseline: every instance
/// exited 0, nothing was diagnosed, and every failed check is a
/// comparison with the lock (`baseline.*`) or environment drift. Its
/// figures are sound; locking them accepts the change, which is what a
/// re-lock after an intended memory increase is for. A locked figure the
/// run could not measure is a missing figure, not a change: locking would
/// drop the gate.
pub fn failed_only_against_the_baseline(case: &CaseResult) -> bool {
    let clean_exit = |i: &super::InstanceResult| i.exit == Some(super::Exit::Code(0));
    let missing = case
        .baseline
        .iter()
        .flat_map(|b| b.figures())
        .any(|f| f.outcome == Outcome::Unknown && f.baseline_bytes.is_some());
    case.status == CaseStatus::Failed
        && !missing
        && case.diagnosis.is_none()
        && !case.instances.is_empty()
        && case.instances.iter().all(clean_exit)
        && case.failed_checks().next().is_some()
        && case.failed_checks().all(|c| c.kind.is_judgement())
}

/// The cases pytest skipped (or expected to fail): never locked.
pub fn skipped(results: &RunResults) -> Vec<String> {
    results
        .cases
        .iter()
        .filter(|c| c.status == CaseStatus::Skipped)
        .map(|c| c.id.clone())
        .collect()
}

/// Whether the GPU figure includes a device delta tainted by another
/// process (see docs/gpu-measurement.md): never locked, never compared.
pub fn gpu_tainted(case: &CaseResult) -> bool {
    case.gpu_devices.iter().any(|d| !d.tainted_by.is_empty())
}

/// `gpu 1000.0 MiB -> 1.17 GiB (+20.0%)`, for a change a re-lock takes.
fn change(figure: &FigureComparison) -> Option<String> {
    let new = Bytes(figure.new_bytes?);
    match (figure.outcome, figure.baseline_bytes) {
        (Outcome::Regressed | Outcome::Skipped, Some(old)) => {
            let ratio = figure
                .delta_ratio
                .map(|r| format!(" ({:+.1}%)", r * 100.0))
                .unwrap_or_default();
            Some(format!("{} {} -> {new}{ratio}", figure.figure, Bytes(old)))
        }
        (Outcome::NoBaseline | Outcome::Skipped, None) => {
            Some(format!("{} {new} (no baseline before)", figure.figure))
        }
        _ => None,
    }
}

/// Why this merged run's parts cannot make one lock; empty for a run, and
/// for a merged run whose parts compare.
pub fn incomparable(results: &RunResults, gpu_models: bool) -> Vec<String> {
    incomparable_parts(
        results.parts.iter().map(|part| PartFacts {
            name: part.name(),
            environment: &part.environment,
            host_method: Some(part.measurement.host_method),
        }),
        gpu_models,
    )
}

/// Why a run's results cannot be locked. Its words say what to do next.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotLockable {
    #[error("the run hit a write failure: {0}")]
    Fault(String),
    #[error("the run did not finish (interrupted or crashed)")]
    Unfinished,
    /// A merged run's parts that differ from its first: one line each.
    #[error(
        "its parts' figures are not comparable, so they cannot make one baseline: {}; run every shard with one host memory method, merge, and lock that",
        .0.join("; ")
    )]
    Incomparable(Vec<String>),
    /// Cases that failed on their own: `id (message)` each.
    #[error("{} case(s) did not pass: {}", .0.len(), .0.join("; "))]
    Failed(Vec<String>),
    /// `[[parity]]` rules that did not hold: `name (message)` each. A
    /// baseline is a configuration that passed.
    #[error("{} parity rule(s) did not hold: {}", .0.len(), .0.join("; "))]
    Parity(Vec<String>),
    #[error("the run has no cases")]
    Empty,
}

/// A lock from a run's results, or why that run cannot be locked: it did
/// not finish, or a case failed on its own. A case that failed only
/// against the old baseline is locked (see
/// [`failed_only_against_the_baseline`]); [`accepted_changes`] names them.
pub fn lock_from_results(results: &RunResults) -> Result<Lock, NotLockable> {
    if let Some(fault) = &results.fault {
        return Err(NotLockable::Fault(fault.clone()));
    }
    if results.interrupted || results.finished_at.is_none() || !results.not_run.is_empty() {
        return Err(NotLockable::Unfinished);
    }
    // Parts on different GPU models lock into their own testbeds.
    let incomparable = incomparable(results, false);
    if !incomparable.is_empty() {
        return Err(NotLockable::Incomparable(incomparable));
    }
    let failed: Vec<String> = results
        .cases
        .iter()
        .filter(|c| !c.status.ok() && !failed_only_against_the_baseline(c))
        .map(|c| {
            format!(
                "{} ({})",
                c.id,
                c.message.as_deref().unwrap_or(c.status.as_str())
            )
        })
        .collect();
    if !failed.is_empty() {
        return Err(NotLockable::Failed(failed));
    }
    let broken: Vec<String> = results
        .parity
        .iter()
        .filter(|p| !p.passed)
        .map(|p| format!("{} ({})", p.name, p.message))
        .collect();
    if !broken.is_empty() {
        return Err(NotLockable::Parity(broken));
    }
    if results.cases.is_empty() {
        return Err(NotLockable::Empty);
    }
    Ok(lock_of(results))
}

/// What a lock from these results accepts although its cases failed: a
/// line per change of a case that failed only against the old baseline
/// (`train-bs64: gpu 41.2 GiB -> 47.9 GiB (+16.3%)`).
pub fn accepted_changes(results: &RunResults) -> Vec<String> {
    let mut lines = Vec::new();
    for case in results
        .cases
        .iter()
        .filter(|c| failed_only_against_the_baseline(c))
    {
        // A tainted GPU figure is not locked (see `lock_of`): no change.
        let changes: Vec<String> = case
            .baseline
            .iter()
            .flat_map(|b| b.figures())
            .filter(|f| !(f.figure == crate::baseline::Figure::Gpu && gpu_tainted(case)))
            .filter_map(change)
            .collect();
        if changes.is_empty() {
            // A capacity is no figure of the comparison: its check says it.
            let capacity = case
                .failed_checks()
                .find(|c| c.kind == super::CheckKind::Capacity)
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

/// Every case of a run's results as a lock, passed or not (for `diff`).
pub fn lock_of(results: &RunResults) -> Lock {
    let cases: Vec<(Option<String>, String, LockedCase)> = results
        .cases
        .iter()
        // A skipped test's figures are of the skip: its previous baseline,
        // if any, is kept.
        .filter(|case| case.status != CaseStatus::Skipped)
        .map(|case| {
            // What a committed file may hold: redacted whatever the results
            // file held (one from an older oomgate held everything).
            let command = redact::command(&case.command);
            let params: BTreeMap<String, String> = case
                .params
                .iter()
                .map(|(k, v)| (k.clone(), redact::mask_suite(v).into_owned()))
                .collect();
            let env = locked_env(&case.env);
            let server = case.server.as_ref().map(|s| LockedServer {
                command: redact::command(&s.command),
                env: locked_env(&s.env),
            });
            // A tainted figure is not the case's own: not a baseline.
            let own = |bytes: Option<u64>| bytes.filter(|_| !gpu_tainted(case));
            let gpu_method = case.gpu_peak_method.filter(|_| !gpu_tainted(case));
            let locked = LockedCase {
                host_peak_bytes: case.host.peak_bytes,
                host_peak: human(case.host.peak_bytes),
                host_peak_method: Some(case.host.method),
                host_peak_source: case
                    .host
                    .peak_source
                    .filter(|_| case.host.peak_bytes.is_some()),
                host_floors: case.host.floors.named(),
                host_spread_bytes: case.spread(crate::baseline::Figure::Host),
                host_working_peak_bytes: case.host.working_peak_bytes,
                host_working_peak: human(case.host.working_peak_bytes),
                host_working_spread_bytes: case.spread(crate::baseline::Figure::Working),
                gpu_peak_bytes: own(case.gpu_peak_bytes),
                gpu_peak: human(own(case.gpu_peak_bytes)),
                gpu_peak_method: gpu_method,
                gpu_spread_bytes: own(case.spread(crate::baseline::Figure::Gpu)),
                wall_time_s: (case.wall_time_s * 1000.0).round() / 1000.0,
                definition_hash: definition_hash(&command, server.as_ref(), &params, &env),
                command,
                server,
                params,
                env,
                allocator_env: locked_env(&case.allocator_env),
                probe_peak_allocated_bytes: case.probe.as_ref().and_then(|p| p.peak_allocated),
                outside_allocator_peak_bytes: own(case.outside_allocator_peak_bytes),
                capacity: case.capacity.as_ref().and_then(|c| c.value),
                capacity_of: case
                    .capacity
                    .as_ref()
                    .filter(|c| c.value.is_some())
                    .map(|c| crate::capacity::counted_as(&c.param, c.step)),
                tolerance: case.tolerance,
                allocation_sites: case.allocation_sites.as_ref().map(|sites| {
                    let mut kept = sites.clone();
                    kept.sites.truncate(crate::snapshot::LOCKED_SITES);
                    kept
                }),
                ranks: case.ranks.clone(),
                outputs: case
                    .outputs
                    .iter()
                    .filter_map(|output| {
                        let value = output.value?;
                        let locked = crate::baseline::LockedOutput {
                            value,
                            better: output.better,
                            tolerance: output.tolerance,
                        };
                        Some((output.name.clone(), locked))
                    })
                    .collect(),
            };
            (case.testbed.clone(), case.id.clone(), locked)
        })
        .collect();
    // A case that ran on GPUs is its testbed's; a host-only one the lock's.
    let environment = results.environment.software();
    let mut lock = Lock {
        version: LOCK_VERSION,
        suite: results.suite.name.clone(),
        locked_at: results.started_at.clone(),
        environment: environment.clone(),
        cases: BTreeMap::new(),
        testbeds: BTreeMap::new(),
    };
    // A merged run's testbed keeps the environment of the part that ran on it.
    let environment_of = |testbed: &str| {
        results
            .parts
            .iter()
            .find(|part| crate::baseline::testbed::runs_on(testbed, &part.environment))
            .map_or_else(|| environment.clone(), |part| part.environment.software())
    };
    for (testbed, id, locked) in cases {
        match testbed {
            Some(name) => {
                let bed =
                    lock.testbeds
                        .entry(name.clone())
                        .or_insert_with(|| crate::baseline::Testbed {
                            locked_at: results.started_at.clone(),
                            environment: environment_of(&name),
                            cases: BTreeMap::new(),
                        });
                bed.cases.insert(id, locked);
            }
            None => {
                lock.cases.insert(id, locked);
            }
        }
    }
    lock
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
    gpu_method: Option<crate::measure::gpu::GpuMethod>,
    /// The results' numbers from the logs; from a lock, its locked ones.
    outputs: Vec<crate::measure::output::OutputFigure>,
}

impl<'a> CaseNowParts<'a> {
    pub fn new(locked: &'a LockedCase, case: Option<&'a CaseResult>) -> Self {
        match case {
            Some(case) => CaseNowParts {
                locked,
                gpu: case.gpu_peak_bytes,
                gpu_tainted: gpu_tainted(case),
                gpu_method: case.gpu_peak_method,
                outputs: case.outputs.clone(),
            },
            None => CaseNowParts {
                locked,
                gpu: locked.gpu_peak_bytes,
                gpu_tainted: false,
                gpu_method: locked.gpu_peak_method,
                outputs: locked
                    .outputs
                    .iter()
                    .map(|(name, output)| crate::measure::output::OutputFigure {
                        name: name.clone(),
                        value: Some(output.value),
                        matches: 0,
                        unreadable: 0,
                        at: None,
                        error: None,
                        better: output.better,
                        pick: crate::suite::Pick::default(),
                        tolerance: output.tolerance,
                    })
                    .collect(),
            },
        }
    }

    pub fn view(&self) -> crate::baseline::CaseNow<'_> {
        let locked = self.locked;
        crate::baseline::CaseNow {
            host: locked.host_peak_bytes,
            host_method: locked.host_method(),
            host_source: locked.host_peak_source,
            host_floors: crate::measure::host::HostFloors::from_named(&locked.host_floors),
            working: locked.host_working_peak_bytes,
            gpu: self.gpu,
            gpu_method: self.gpu_method,
            gpu_tainted: self.gpu_tainted,
            allocated: locked.probe_peak_allocated_bytes,
            outside: locked.outside_allocator_peak_bytes,
            command: &locked.command,
            server: locked.server.as_ref(),
            params: &locked.params,
            env: &locked.env,
            allocator_env: &locked.allocator_env,
            outputs: &self.outputs,
        }
    }
}

/// `1.50 GiB`, for the lock's human-readable twins of byte figures.
pub fn human(bytes: Option<u64>) -> Option<String> {
    bytes.map(|b| Bytes(b).to_string())
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
/// `gpu_models`: whether parts on different GPU models count (a report's
/// view); a lock keeps each testbed apart, so for it they do not.
pub fn incomparable_parts<'a>(
    parts: impl IntoIterator<Item = PartFacts<'a>>,
    gpu_models: bool,
) -> Vec<String> {
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
        if gpu_models && (one_without || !crate::baseline::drift::same_gpus(a, b)) {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn view(extra: &str) -> RunResults {
        let text = format!(
            r#"{{"schema": {}, "suite": {{"name": "s"}}, "started_at": "t", "finished_at": "u",
               "cases": [{{"id": "a", "status": "passed", "message": null, "host_peak_bytes": 1,
                          "gpu_peak_bytes": null, "gpu_peak_method": null, "wall_time_s": 1.0,
                          "command": ["x", "--token", "abc123456"]}}]{extra}}}"#,
            crate::vocabulary::SCHEMA_VERSION
        );
        parse(&text).expect("a results view")
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
            crate::vocabulary::SCHEMA_VERSION
        );
        let view = parse(&text).expect("a results view");
        assert!(!failed_only_against_the_baseline(&view.cases[0]));
        assert!(lock_from_results(&view).is_err());
        assert_eq!(accepted_changes(&view), Vec::<String>::new());
    }

    #[test]
    fn a_run_that_hit_a_write_failure_is_not_locked() {
        assert!(lock_from_results(&view("")).is_ok());
        let why = lock_from_results(&view(r#", "fault": "out/x: No space left on device""#))
            .expect_err("not locked")
            .to_string();
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
        assert_eq!(incomparable(&same, true), Vec::<String>::new());
        assert!(lock_from_results(&same).is_ok());
        // Other GPU models: a report shows it; a lock keeps each testbed.
        for b in [
            part("s2", r#""A100 (40.0 GiB)""#, "cgroup-v1"),
            part("s2", "", "cgroup-v1"),
        ] {
            let mixed = merged(part("s1", h100, "cgroup-v1"), b);
            assert!(incomparable(&mixed, true)[0].starts_with("GPU models differ"));
            assert!(incomparable(&mixed, false).is_empty());
            assert!(lock_from_results(&mixed).is_ok());
        }
        let why =
            "host memory measured by cgroup-v1 in s1 (count:1/2), by procfs-pss in s2 (count:1/2)";
        let mixed = merged(
            part("s1", h100, "cgroup-v1"),
            part("s2", h100, "procfs-pss"),
        );
        assert_eq!(incomparable(&mixed, false), [why]);
        let refused = lock_from_results(&mixed)
            .expect_err("not locked")
            .to_string();
        assert!(
            refused.contains(why) && refused.contains("not comparable"),
            "{refused}"
        );
    }

    #[test]
    fn results_of_an_older_oomgate_are_redacted_when_locked() {
        let lock = lock_from_results(&view("")).expect("locked");
        assert_eq!(lock.cases["a"].command, ["x", "--token", "***"]);
    }

    /// Files that older oomgates wrote (`fixtures/results/`) load into
    /// the one model, and lock and diff as a current one does.
    #[test]
    fn results_of_older_schemas_load_into_the_model() {
        let fixture = |name: &str| {
            let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("fixtures/results")
                .join(name);
            let text = std::fs::read_to_string(&path).expect("fixture");
            parse(&text).unwrap_or_else(|e| panic!("{name}: {e}"))
        };
        for name in ["schema-1-budget-crash.json", "schema-2-budget-crash.json"] {
            let results = fixture(name);
            let status = |id: &str| results.cases.iter().find(|c| c.id == id).map(|c| c.status);
            assert_eq!(status("passes"), Some(CaseStatus::Passed), "{name}");
            assert_eq!(status("over-budget"), Some(CaseStatus::Failed), "{name}");
            assert_eq!(status("crashes"), Some(CaseStatus::Failed), "{name}");
            let over = results.cases.iter().find(|c| c.id == "over-budget");
            let check = over.and_then(|c| c.checks.first()).expect("a budget check");
            assert_eq!(check.kind, super::super::CheckKind::HostBudget);
            assert!(!check.passed);
            assert!(
                check.message.contains("exceeded budget"),
                "{}",
                check.message
            );
            assert_ne!(over.map(|c| c.host.method), Some(HostMethod::ProcfsRss));
            let refused = lock_from_results(&results)
                .expect_err("red cases")
                .to_string();
            assert!(
                refused.contains("over-budget") && refused.contains("crashes"),
                "{refused}"
            );
        }
        let regressed = fixture("schema-1-regression.json");
        let grows = &regressed.cases[0];
        assert!(failed_only_against_the_baseline(grows));
        let lock = lock_from_results(&regressed).expect("accepted");
        assert_eq!(lock.cases.len(), 2);
        let changes = accepted_changes(&regressed);
        assert_eq!(changes.len(), 1, "{changes:?}");
        assert!(changes[0].starts_with("grows: host "), "{changes:?}");
        // No tolerance recorded then: `diff` says it used the defaults.
        assert_eq!(grows.tolerance, None);
    }
}

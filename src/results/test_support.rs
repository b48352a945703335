//! Results to feed the tests of the model and of every report format.

use super::{CaseResult, CaseStatus, Measurement, RunResults, SCHEMA_VERSION, SuiteInfo, Summary};

/// A run of one failed case whose every workload-controlled text is
/// `text`.
pub(crate) fn results_with_text(text: &str) -> RunResults {
    let mut case = CaseResult::unmeasured(format!("case {text}"));
    case.status = CaseStatus::Failed;
    case.message = Some(text.to_string());
    case.stdout_tail = text.to_string();
    case.stderr_tail = text.to_string();
    case.command = vec!["python3".into(), text.into()];
    case.params.insert("p".into(), text.into());
    RunResults {
        schema: SCHEMA_VERSION,
        run_id: None,
        origin: None,
        oomgate_version: "0".into(),
        suite: SuiteInfo {
            name: "s".into(),
            path: "s.toml".into(),
            workdir: ".".into(),
        },
        host: "h".into(),
        started_at: "2026-12-03T00:00:00.000+00:00".into(),
        finished_at: None,
        interrupted: false,
        measurement: Measurement {
            sample_interval_ms: 50,
            host_method: crate::measure::HostMethod::ProcfsPss,
            host_note: None,
            host_cgroup: None,
            gpu_method: None,
            gpu_note: None,
        },
        gpu: None,
        environment: Default::default(),
        baseline: None,
        summary: Summary::default(),
        cases: vec![case],
        partition: None,
        scheduling: None,
        not_run: Vec::new(),
        planned_cases: Vec::new(),
        pytest_cases: Vec::new(),
        fault: None,
        runner_max_rss_bytes: None,
        runner_cpu_s: None,
        merged_from: None,
        parity: Vec::new(),
        parts: Vec::new(),
    }
}

/// The same, with a diagnosis whose exception is `text` too.
pub(crate) fn results_with_diagnosis(text: &str) -> RunResults {
    let mut results = results_with_text(text);
    results.cases[0].diagnosis = Some(crate::diagnose::Diagnosis {
        kind: crate::diagnose::FailureKind::CudaFault,
        oom: None,
        exception: Some(text.to_string()),
        rank: None,
        oom_ranks: Vec::new(),
        hints: vec![text.to_string()],
    });
    results
}

/// results.json's text, as `report::json` writes it.
pub(crate) fn json(results: &RunResults) -> String {
    let mut text = serde_json::to_string_pretty(results).expect("results serialize");
    text.push('\n');
    text
}

/// Results of suite `s` holding these cases (passed, each in its
/// folder), not finished.
pub(crate) fn passed_results(ids: &[&str]) -> RunResults {
    let mut results = results_with_text("x");
    results.cases = ids
        .iter()
        .map(|id| {
            let mut case = CaseResult::unmeasured(id.to_string());
            case.status = CaseStatus::Passed;
            case.dir = format!("cases/{id}").into();
            case
        })
        .collect();
    results.summary = Summary {
        planned: ids.len(),
        passed: ids.len(),
        ..Summary::default()
    };
    results
}

//! `junit.xml`: one `<testcase>` per case, through quick-junit.
//!
//! quick-junit escapes text and strips ANSI escapes and control characters,
//! so the report stays valid XML whatever a workload printed (NUL bytes,
//! tqdm colours, `]]>`). Figures appear three times on purpose: as testcase
//! properties for tools that read them, and in the failure text and
//! system-out for the many CI viewers that show only those.

use std::io;
use std::time::Duration;

use quick_junit::{NonSuccessKind, Property, Report, TestCase, TestCaseStatus, TestSuite};

use super::case_details;
use crate::results::{CaseResult, CaseStatus, CheckKind, RunResults};

pub fn render(results: &RunResults) -> io::Result<String> {
    let mut report = Report::new(format!("oomgate {}", results.suite.name));
    let mut suite = TestSuite::new(results.suite.name.clone());
    if let Some(timestamp) = parse_time(&results.started_at) {
        report.set_timestamp(timestamp);
        suite.set_timestamp(timestamp);
    }
    let total: f64 = results.cases.iter().map(|c| c.wall_time_s).sum();
    report.set_time(Duration::from_secs_f64(total));
    suite.set_time(Duration::from_secs_f64(total));
    suite.add_properties([
        Property::new("oomgate_version", &results.oomgate_version),
        Property::new("host", &results.host),
        Property::new(
            "sample_interval_ms",
            results.measurement.sample_interval_ms.to_string(),
        ),
        Property::new("host_method", results.measurement.host_method.as_str()),
        Property::new(
            "gpu_method",
            results
                .measurement
                .gpu_method
                .as_deref()
                .unwrap_or("not measured"),
        ),
    ]);

    for case in &results.cases {
        suite.add_test_case(test_case(case, results));
    }
    for id in &results.not_run {
        let mut status = TestCaseStatus::skipped();
        status.set_message("not run: oomgate was interrupted before this case started");
        let mut test_case = TestCase::new(id.clone(), status);
        test_case.set_classname(results.suite.name.clone());
        suite.add_test_case(test_case);
    }
    report.add_test_suite(suite);
    report.to_string().map_err(io::Error::other)
}

fn test_case(case: &CaseResult, results: &RunResults) -> TestCase {
    let details = case_details(case, &results.measurement);
    let status = match case.status {
        CaseStatus::Passed => TestCaseStatus::success(),
        other => {
            let kind = match other {
                CaseStatus::Failed | CaseStatus::TimedOut => NonSuccessKind::Failure,
                _ => NonSuccessKind::Error,
            };
            let mut status = TestCaseStatus::non_success(kind);
            status.set_message(
                case.message
                    .clone()
                    .unwrap_or_else(|| other.label().to_string()),
            );
            status.set_type(failure_type(case));
            status.set_description(details.clone());
            status
        }
    };
    let mut test_case = TestCase::new(case.id.clone(), status);
    test_case.set_classname(results.suite.name.clone());
    test_case.set_time(Duration::from_secs_f64(case.wall_time_s));
    if let Some(timestamp) = parse_time(&case.started_at) {
        test_case.set_timestamp(timestamp);
    }

    let mut properties = vec![
        Property::new("status", case.status.as_str()),
        Property::new("wall_time_s", format!("{:.3}", case.wall_time_s)),
        Property::new("concurrency", case.concurrency.to_string()),
        Property::new("samples", case.samples.to_string()),
    ];
    properties.push(Property::new(
        "host_peak_bytes",
        case.host_peak_bytes
            .map_or("unknown".to_string(), |b| b.to_string()),
    ));
    properties.push(Property::new("host_method", case.host_method.as_str()));
    if let Some(source) = case.host_peak_source {
        properties.push(Property::new("host_peak_source", source.as_str()));
    }
    if let Some(charged) = case.host_charged_peak_bytes {
        properties.push(Property::new(
            "host_charged_peak_bytes",
            charged.to_string(),
        ));
    }
    if let Some(kills) = case.host_oom_kills {
        properties.push(Property::new("host_oom_kills", kills.to_string()));
    }
    if let Some(method) = &case.gpu_peak_method {
        properties.push(Property::new(
            "gpu_peak_bytes",
            case.gpu_peak_bytes
                .map_or("unknown".to_string(), |b| b.to_string()),
        ));
        properties.push(Property::new("gpu_peak_method", method.to_string()));
    }
    for check in &case.checks {
        if let Some(limit) = check.limit_bytes {
            properties.push(Property::new(
                format!("{}.limit_bytes", check.kind),
                limit.to_string(),
            ));
        }
        properties.push(Property::new(
            format!("{}.passed", check.kind),
            check.passed.to_string(),
        ));
    }
    if let Some(comparison) = &case.baseline {
        for figure in comparison.figures() {
            let prefix = format!("baseline.{}", figure.figure);
            properties.push(Property::new(
                format!("{prefix}.outcome"),
                serde_plain(&figure.outcome),
            ));
            if let Some(base) = figure.baseline_bytes {
                properties.push(Property::new(format!("{prefix}_bytes"), base.to_string()));
            }
            if let Some(delta) = figure.delta_bytes {
                properties.push(Property::new(
                    format!("{prefix}.delta_bytes"),
                    delta.to_string(),
                ));
            }
            if let Some(ratio) = figure.delta_ratio {
                properties.push(Property::new(
                    format!("{prefix}.delta_percent"),
                    format!("{:.2}", ratio * 100.0),
                ));
            }
        }
    }
    for (key, value) in &case.params {
        properties.push(Property::new(format!("param.{key}"), value));
    }
    test_case.add_properties(properties);

    let mut out = details;
    if !case.stdout_tail.is_empty() {
        out.push_str("\n--- end of stdout ---\n");
        out.push_str(&case.stdout_tail);
    }
    test_case.set_system_out(out);
    if !case.stderr_tail.is_empty() {
        test_case.set_system_err(case.stderr_tail.clone());
    }
    test_case
}

/// A unit-like enum as the word serde writes for it (`regressed`).
fn serde_plain(value: &impl serde::Serialize) -> String {
    serde_json::to_value(value)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default()
}

/// A stable word for the kind of failure, for JUnit's `type` attribute.
fn failure_type(case: &CaseResult) -> &'static str {
    if let Some(diagnosis) = &case.diagnosis {
        return diagnosis.kind.as_str();
    }
    match case.status {
        CaseStatus::TimedOut => "timeout",
        CaseStatus::Interrupted => "interrupted",
        CaseStatus::Error => "launch-error",
        _ if case
            .failed_checks()
            .any(|c| c.kind == CheckKind::HostOomKill) =>
        {
            "host-oom"
        }
        _ if case.failed_checks().any(|c| c.kind.is_baseline()) => "regression",
        _ if case
            .failed_checks()
            .any(|c| c.kind == CheckKind::EnvironmentDrift) =>
        {
            "environment-drift"
        }
        _ if case.failed_checks().next().is_some() => "budget-exceeded",
        _ => "exit-status",
    }
}

fn parse_time(text: &str) -> Option<chrono::DateTime<chrono::FixedOffset>> {
    chrono::DateTime::parse_from_rfc3339(text).ok()
}

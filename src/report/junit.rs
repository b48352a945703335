//! `junit.xml`: one `<testcase>` per case, through quick-junit.
//!
//! quick-junit escapes text and strips ANSI escapes and control characters;
//! the two noncharacters it lets through, U+FFFE and U+FFFF, which XML 1.0
//! forbids too, are replaced here. So the report stays valid XML whatever a
//! workload printed (NUL bytes, tqdm colours, `]]>`, invalid UTF-8, which
//! becomes U+FFFD when read) — property-tested over arbitrary bytes. Figures appear three times on purpose: as testcase
//! properties for tools that read them, and in the failure text and
//! system-out for the many CI viewers that show only those.

use std::io;
use std::time::Duration;

use quick_junit::{NonSuccessKind, Property, Report, TestCase, TestCaseStatus, TestSuite};

use super::case_details;
use crate::results::{CaseResult, CaseStatus, RunResults};

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
        // Not run because a file could not be written is an error of the
        // run, never a quiet skip.
        let status = match &results.fault {
            Some(fault) => {
                let mut status = TestCaseStatus::non_success(NonSuccessKind::Error);
                status.set_message(format!("not run: oomgate stopped launching cases: {fault}"));
                status.set_type("not-run");
                status
            }
            None => {
                let mut status = TestCaseStatus::skipped();
                status.set_message("not run: oomgate was interrupted before this case started");
                status
            }
        };
        let mut test_case = TestCase::new(id.clone(), status);
        test_case.set_classname(results.suite.name.clone());
        suite.add_test_case(test_case);
    }
    report.add_test_suite(suite);
    report
        .to_string()
        .map(|xml| xml_chars_only(&xml))
        .map_err(io::Error::other)
}

/// `text` with the characters XML 1.0 forbids that quick-junit passes on
/// (the noncharacters U+FFFE and U+FFFF) replaced by U+FFFD. Markup never
/// holds them, so replacing them in the whole document touches only text.
fn xml_chars_only(text: &str) -> String {
    if text.contains(['\u{FFFE}', '\u{FFFF}']) {
        text.replace(['\u{FFFE}', '\u{FFFF}'], "\u{FFFD}")
    } else {
        text.to_string()
    }
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

/// A stable word for the kind of failure, for JUnit's `type` attribute:
/// the case's `failure_kind` (see `verdict::failure_kind`).
fn failure_type(case: &CaseResult) -> &'static str {
    case.failure_kind
        .or_else(|| crate::verdict::failure_kind(case))
        .map_or("crash", crate::status::FailureType::as_str)
}

fn parse_time(text: &str) -> Option<chrono::DateTime<chrono::FixedOffset>> {
    chrono::DateTime::parse_from_rfc3339(text).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::test_support::results_with_text;

    fn parses(xml: &str) -> Result<(), String> {
        roxmltree::Document::parse(xml)
            .map(|_| ())
            .map_err(|e| format!("{e}\n{xml}"))
    }

    /// Regression: U+FFFE and U+FFFF in a workload's output made junit.xml
    /// not well-formed.
    #[test]
    fn noncharacters_become_replacement_characters() {
        let xml = render(&results_with_text("a\u{FFFE}b\u{FFFF}c")).expect("render");
        assert!(parses(&xml).is_ok(), "{xml}");
        assert!(xml.contains("a\u{FFFD}b\u{FFFD}c"), "{xml}");
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(256))]

        /// Whatever bytes a workload prints — read as oomgate reads them,
        /// invalid UTF-8 replaced — junit.xml stays well-formed XML.
        #[test]
        fn any_bytes_make_well_formed_junit(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..512)) {
            let text = String::from_utf8_lossy(&bytes);
            let xml = render(&results_with_text(&text)).expect("render");
            proptest::prop_assert!(parses(&xml).is_ok(), "{:?}", parses(&xml));
        }

        /// The same for any characters, noncharacters and controls included.
        #[test]
        fn any_chars_make_well_formed_junit(text in "\\PC*|[\u{0}-\u{1f}\u{7f}-\u{9f}\u{fffe}\u{ffff}\u{d7ff}\u{e000}]{0,64}") {
            let xml = render(&results_with_text(&text)).expect("render");
            proptest::prop_assert!(parses(&xml).is_ok(), "{:?}", parses(&xml));
        }
    }
}

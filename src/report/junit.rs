//! `junit.xml`: one `<testcase>` per case, through quick-junit; and the
//! log tails read back from one ([`read_tails`]) for `oomgate merge`.
//!
//! Every text is [cleaned](crate::clean) before quick-junit escapes it:
//! a control, bidi or noncharacter (U+FFFE and U+FFFF, which XML 1.0
//! forbids) in a workload's output, a frame name or a test's id is written
//! as a visible escape (`\u{202e}`), colour sequences dropped. So the
//! report stays valid XML and shows what was there whatever a workload
//! printed (NUL bytes, tqdm colours, `]]>`, invalid UTF-8, which becomes
//! U+FFFD when read) — property-tested over arbitrary bytes. Figures appear three times on purpose: as testcase
//! properties for tools that read them, and in the failure text and
//! system-out for the many CI viewers that show only those.

use std::fmt::Write as _;
use std::hash::{DefaultHasher, Hasher};
use std::io;
use std::time::Duration;

use quick_junit::{NonSuccessKind, Property, Report, TestCase, TestCaseStatus, TestSuite};

use super::case_details;
use super::{NO_PART_MESSAGE, UNFINISHED_MESSAGE};
use crate::results::{CaseResult, CaseStatus, NotRunReason, RunResults};

/// junit.xml for `results`, every testcase built afresh.
pub fn render(results: &RunResults) -> io::Result<String> {
    render_with(results, &mut Memo::default())
}

/// The testcase of each case, kept from one [`render_with`] to the next:
/// building one runs every property and the case's details through
/// quick-junit's escape stripping, a VT parser fed one character at a time,
/// and a checkpoint of a run of thousands of cases spent most of its time
/// there, once per case already written. A testcase is reused only while
/// what it was built from is the same: its fingerprint (`fingerprint`)
/// covers every field of the case and the run's fields a testcase reads,
/// so a case replaced (a finished case in place of its in-flight entry, a
/// case retried alone) or changed in any way is built again.
#[derive(Default)]
pub struct Memo {
    /// In the order of `results.cases`.
    built: Vec<Option<Built>>,
    /// How many testcases the last render took from here.
    reused: usize,
}

struct Built {
    fingerprint: u64,
    test_case: TestCase,
}

/// [`render`], reusing the testcases in `memo` whose case is unchanged
/// since they were built, and keeping this render's there for the next.
pub fn render_with(results: &RunResults, memo: &mut Memo) -> io::Result<String> {
    let mut report = Report::new(format!("oomgate {}", line(&results.suite.name)));
    let mut suite = TestSuite::new(line(&results.suite.name).into_owned());
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

    let context = context_fingerprint(results);
    memo.built.resize_with(results.cases.len(), || None);
    let mut fingerprints = Vec::with_capacity(results.cases.len());
    memo.reused = 0;
    for (case, slot) in results.cases.iter().zip(&mut memo.built) {
        let fingerprint = fingerprint(case, context);
        let test_case = match slot.take() {
            Some(built) if built.fingerprint == fingerprint => {
                memo.reused += 1;
                built.test_case
            }
            _ => test_case(case, results),
        };
        fingerprints.push(fingerprint);
        suite.add_test_case(test_case);
    }
    for id in &results.not_run {
        // Not run because a file could not be written, or because no part
        // of a merged run held the case, is an error of the run, never a
        // quiet skip.
        let error = |message: String| {
            let mut status = TestCaseStatus::non_success(NonSuccessKind::Error);
            status.set_message(message);
            status.set_type("not-run");
            status
        };
        let status = match results.not_run_reason(id) {
            NotRunReason::Fault(fault) => {
                error(format!("not run: oomgate stopped launching cases: {fault}"))
            }
            NotRunReason::NoPart => error(format!("not run: {NO_PART_MESSAGE}")),
            NotRunReason::Unfinished => error(format!("not run: {UNFINISHED_MESSAGE}")),
            NotRunReason::Interrupted => {
                let mut status = TestCaseStatus::skipped();
                status.set_message("not run: oomgate was interrupted before this case started");
                status
            }
        };
        let (classname, name) = names(id, results.pytest_cases.contains(id), results);
        let mut test_case = TestCase::new(name, status);
        test_case.set_classname(classname);
        suite.add_test_case(test_case);
    }
    // Each parity is a check of the run, not of either case: a testcase
    // of its own, after the cases.
    for parity in &results.parity {
        suite.add_test_case(parity_case(parity, results));
    }
    report.add_test_suite(suite);
    let xml = report.to_string();
    // The cases' testcases come first in the suite, the cases not run
    // after them; the first go back to the memo.
    if let Some(suite) = report.test_suites.pop() {
        let built = suite.test_cases.into_iter().zip(fingerprints);
        for (slot, (test_case, fingerprint)) in memo.built.iter_mut().zip(built) {
            *slot = Some(Built {
                fingerprint,
                test_case,
            });
        }
    }
    // Every text was cleaned as it went in; the document once more, which
    // touches only text (markup holds nothing unsafe but newlines).
    let xml = xml
        .map(|xml| match crate::clean::block(&xml) {
            std::borrow::Cow::Borrowed(_) => xml,
            std::borrow::Cow::Owned(clean) => clean,
        })
        .map_err(io::Error::other);
    // Every run of the test suite checks the memo changes nothing.
    debug_assert!(
        memo.reused == 0 || xml.as_ref().ok() == render(results).as_ref().ok(),
        "junit.xml through the memo differs from junit.xml built afresh"
    );
    xml
}

/// What a case's testcase is built from, beyond the case itself: the
/// suite's name (the classname) and the run's measurement (in the case's
/// details).
fn context_fingerprint(results: &RunResults) -> u64 {
    let mut hasher = FingerprintWriter(DefaultHasher::new());
    // Writing to a hasher cannot fail.
    let _ = write!(hasher, "{:?}{:?}", results.suite.name, results.measurement);
    hasher.0.finish()
}

/// A case's fingerprint in `context`: its `Debug` text hashed, which
/// lists every field, the log tails results.json leaves out included, so
/// no field can be added to [`CaseResult`] and missed here.
fn fingerprint(case: &CaseResult, context: u64) -> u64 {
    let mut hasher = FingerprintWriter(DefaultHasher::new());
    hasher.0.write_u64(context);
    let _ = write!(hasher, "{case:?}");
    hasher.0.finish()
}

/// Text written into a hasher, without a string in between.
struct FingerprintWriter(DefaultHasher);

impl std::fmt::Write for FingerprintWriter {
    fn write_str(&mut self, text: &str) -> std::fmt::Result {
        self.0.write(text.as_bytes());
        Ok(())
    }
}

/// One line of outside text (a message, a name, a value), cleaned.
fn line(text: &str) -> std::borrow::Cow<'_, str> {
    crate::clean::line(text)
}

/// Lines of outside text (a log tail, the case's details), cleaned.
fn block(text: &str) -> String {
    crate::clean::block(text).into_owned()
}

fn test_case(case: &CaseResult, results: &RunResults) -> TestCase {
    let details = case_details(case, &results.measurement);
    let status = match case.status {
        CaseStatus::Passed => TestCaseStatus::success(),
        // As pytest's own junitxml writes a skip and an expected failure.
        CaseStatus::Skipped => {
            let mut status = TestCaseStatus::skipped();
            let pytest = case.probe.as_ref().and_then(|p| p.pytest.as_ref());
            let xfail = pytest.is_some_and(|p| p.outcome == crate::probe::TestOutcome::Xfailed);
            status.set_type(if xfail { "pytest.xfail" } else { "pytest.skip" });
            status.set_message(line(
                pytest
                    .and_then(|p| p.message.as_deref())
                    .unwrap_or(if xfail { "expected to fail" } else { "skipped" }),
            ));
            status
        }
        other => {
            let kind = match other {
                CaseStatus::Failed | CaseStatus::TimedOut => NonSuccessKind::Failure,
                _ => NonSuccessKind::Error,
            };
            let mut status = TestCaseStatus::non_success(kind);
            status.set_message(line(
                case.message.as_deref().unwrap_or_else(|| other.label()),
            ));
            status.set_type(failure_type(case));
            status.set_description(block(&details));
            status
        }
    };
    let mut status = status;
    // A shared attempt that only could not be measured, then passed alone,
    // is no flaky run: nothing to add.
    if let Some(retried) = case
        .retried_alone
        .as_ref()
        .filter(|r| r.flaky || !case.status.ok())
    {
        // The attempt that shared its GPU, as JUnit records a rerun:
        // `<flakyFailure>` beside a pass, `<rerunFailure>` beside a failure.
        let first = &retried.first_attempt;
        let kind = match first.status {
            CaseStatus::Failed | CaseStatus::TimedOut => NonSuccessKind::Failure,
            _ => NonSuccessKind::Error,
        };
        let mut rerun = quick_junit::TestRerun::new(kind);
        let sharing: Vec<String> = first
            .gpu_sharing
            .iter()
            .map(|s| format!("GPU {} with {}", s.gpu.index, s.with.join(", ")))
            .collect();
        let beside = match sharing.is_empty() {
            true => first.circumstance().to_string(),
            false => format!("while sharing {}", sharing.join("; ")),
        };
        rerun.set_message(line(&format!(
            "{beside}: {}",
            first.message.as_deref().unwrap_or(first.status.label())
        )));
        if let Some(kind) = first.failure_kind {
            rerun.set_type(kind.as_str());
        }
        status.add_rerun(rerun);
    }
    let (classname, name) = names(&case.id, case.pytest.is_some(), results);
    let mut test_case = TestCase::new(name, status);
    test_case.set_classname(classname);
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
        case.host
            .peak_bytes
            .map_or("unknown".to_string(), |b| b.to_string()),
    ));
    properties.push(Property::new("host_method", case.host.method.as_str()));
    if let Some(source) = case.host.peak_source {
        properties.push(Property::new("host_peak_source", source.as_str()));
    }
    if let Some(working) = case.host.working_peak_bytes {
        properties.push(Property::new(
            "host_working_peak_bytes",
            working.to_string(),
        ));
    }
    if let Some(charged) = case.host.charged_peak_bytes {
        properties.push(Property::new(
            "host_charged_peak_bytes",
            charged.to_string(),
        ));
    }
    if let Some(kills) = case.host.oom_kills {
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
    // GPU memory outside the allocator, once the probe reported its
    // `reserved` (unknown before: left out, as the details say).
    push_known(
        &mut properties,
        [
            (
                "outside_allocator_peak_bytes",
                case.outside_allocator_peak_bytes,
            ),
            ("outside_allocator_bytes", case.outside_allocator_bytes),
            ("gpu_fragmentation_bytes", case.gpu_fragmentation_bytes),
        ],
    );
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
    // The probe's allocator figures, and whose they are.
    if let Some(probe) = &case.probe {
        if let Some(allocator) = &probe.allocator {
            properties.push(Property::new("probe.allocator", line(allocator)));
        }
        push_known(
            &mut properties,
            [
                ("probe.peak_allocated_bytes", probe.peak_allocated),
                ("probe.peak_reserved_bytes", probe.peak_reserved),
            ],
        );
    }
    // The numbers its logs printed; one never printed is left out (the
    // details say so).
    for output in &case.outputs {
        if let Some(value) = output.value {
            properties.push(Property::new(
                format!("output.{}", line(&output.name)),
                value.to_string(),
            ));
        }
    }
    for (key, value) in &case.params {
        properties.push(Property::new(format!("param.{}", line(key)), line(value)));
    }
    test_case.add_properties(properties);

    // A tail quick-junit would write empty (only escapes and control
    // characters) is left out, as an empty one is: so the tails read back
    // from the file (`read_tails`) render the same file again.
    let visible = |tail: &str| !quick_junit::XmlString::new(block(tail)).is_empty();
    let mut out = details;
    if visible(&case.stdout_tail) {
        out.push_str(STDOUT_MARKER);
        out.push_str(&case.stdout_tail);
    }
    test_case.set_system_out(block(&out));
    if visible(&case.stderr_tail) {
        test_case.set_system_err(block(&case.stderr_tail));
    }
    test_case
}

/// Between a case's figures and the end of its stdout, in system-out.
const STDOUT_MARKER: &str = "\n--- end of stdout ---\n";

/// A testcase's `classname` and `name`: a pytest case's as pytest's own
/// JUnit report writes them (so a CI's test history lines up with the
/// team's pytest reports), any other case's the suite's name and its id.
/// `parity: train-offload vs train`: failed when the rule broke or could
/// not be verified, skipped when a side did not run here.
fn parity_case(parity: &crate::results::ParityResult, results: &RunResults) -> TestCase {
    use crate::results::ParityOutcome;
    let message = line(&parity.message).into_owned();
    let status = match parity.outcome {
        ParityOutcome::Held => TestCaseStatus::success(),
        ParityOutcome::NotJudged => {
            let mut status = TestCaseStatus::skipped();
            status.set_message(message.clone());
            status
        }
        ParityOutcome::Broken | ParityOutcome::Unknown => {
            let mut status = TestCaseStatus::non_success(NonSuccessKind::Failure);
            status.set_message(message.clone());
            status.set_type("parity");
            status.set_description(message.clone());
            status
        }
    };
    let mut test_case = TestCase::new(line(&parity.name).into_owned(), status);
    test_case.set_classname(line(&results.suite.name).into_owned());
    let mut properties = vec![
        Property::new("parity.figure", line(&parity.figure)),
        Property::new("parity.rule", line(&parity.rule)),
        Property::new("parity.outcome", parity.outcome.as_str()),
    ];
    push_known(
        &mut properties,
        [
            ("parity.lhs_value", parity.lhs_value),
            ("parity.rhs_value", parity.rhs_value),
            ("parity.bound", parity.bound),
        ],
    );
    test_case.add_properties(properties);
    test_case.set_system_out(message);
    test_case
}

/// A property for each figure that is known; one never observed is left
/// out (the details say so), never written as 0.
fn push_known<T: std::fmt::Display>(
    properties: &mut Vec<Property>,
    figures: impl IntoIterator<Item = (&'static str, Option<T>)>,
) {
    for (key, value) in figures {
        if let Some(value) = value {
            properties.push(Property::new(key, value.to_string()));
        }
    }
}

fn names(id: &str, pytest: bool, results: &RunResults) -> (String, String) {
    let (classname, name) = if pytest {
        crate::suite::junit_names(id)
    } else {
        (results.suite.name.clone(), id.to_string())
    };
    (line(&classname).into_owned(), line(&name).into_owned())
}

/// The end of each case's stdout and stderr, from a junit.xml [`render`]
/// wrote, into the cases of the same id: results.json leaves the tails out
/// (the logs have them), and a shard's logs are its workloads' unmasked
/// bytes, which a merge must not copy into reports — the shard's junit.xml
/// holds them as its run masked them, with the secrets it knew. Returns how
/// many cases had a testcase. The text is what quick-junit wrote: ANSI
/// escapes and control characters are already gone.
pub fn read_tails(xml: &str, cases: &mut [CaseResult]) -> Result<usize, roxmltree::Error> {
    let document = roxmltree::Document::parse(xml)?;
    let mut found = 0;
    let testcases: Vec<roxmltree::Node<'_, '_>> = document
        .descendants()
        .filter(|node| node.has_tag_name("testcase"))
        .collect();
    // A case is its testcase's `name`; a pytest case is `classname` and
    // `name` together, as pytest names it (`names`).
    let mut by_name = std::collections::HashMap::new();
    let mut by_both = std::collections::HashMap::new();
    for node in &testcases {
        let Some(name) = node.attribute("name") else {
            continue;
        };
        by_name.insert(name, *node);
        by_both.insert(
            (node.attribute("classname").unwrap_or_default(), name),
            *node,
        );
    }
    for case in cases {
        let testcase = match &case.pytest {
            Some(_) => {
                let (classname, name) = crate::suite::junit_names(&case.id);
                by_both.get(&(classname.as_str(), name.as_str())).copied()
            }
            None => by_name.get(case.id.as_str()).copied(),
        };
        let Some(testcase) = testcase else {
            continue;
        };
        found += 1;
        let text = |tag: &str| {
            testcase
                .children()
                .find(|child| child.has_tag_name(tag))
                .map(|child| {
                    child
                        .children()
                        .filter_map(|text| text.text())
                        .collect::<String>()
                })
                .unwrap_or_default()
        };
        case.stderr_tail = text("system-err");
        // The figures end with the case's folder; the tail follows them.
        let after = format!("logs:        {}\n{STDOUT_MARKER}", case.dir.display());
        case.stdout_tail = text("system-out")
            .split_once(&after)
            .map(|(_, tail)| tail.to_string())
            .unwrap_or_default();
    }
    Ok(found)
}

/// A unit-like enum as the word serde writes for it (`regressed`).
fn serde_plain(value: &impl serde::Serialize) -> String {
    serde_json::to_value(value)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default()
}

/// A stable word for the kind of failure, for JUnit's `type` attribute:
/// the case's `failure_kind`, as the judge decided it (`merge` has the
/// judge name it for a file older than the field).
fn failure_type(case: &CaseResult) -> &'static str {
    case.failure_kind
        .map_or("crash", crate::vocabulary::FailureType::as_str)
}

fn parse_time(text: &str) -> Option<chrono::DateTime<chrono::FixedOffset>> {
    chrono::DateTime::parse_from_rfc3339(text).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::results::test_support::{passed_results, results_with_text};

    fn parses(xml: &str) -> Result<(), String> {
        roxmltree::Document::parse(xml)
            .map(|_| ())
            .map_err(|e| format!("{e}\n{xml}"))
    }

    /// Regression: U+FFFE and U+FFFF in a workload's output made junit.xml
    /// not well-formed; U+202E stayed raw. Each is a visible escape.
    #[test]
    fn noncharacters_and_bidi_overrides_are_visible_escapes() {
        let mut results = results_with_text("a\u{FFFE}b\u{FFFF}c\u{202E}d\u{1b}]0;t\u{7}");
        results.cases[0].id = "case\u{202E}gpj".into();
        results.cases[0].message = Some("grew most: x\n::error title=pwned::y".into());
        results.cases[0].status = CaseStatus::Failed;
        let xml = render(&results).expect("render");
        assert!(parses(&xml).is_ok(), "{xml}");
        assert!(
            xml.contains("a\\u{fffe}b\\u{ffff}c\\u{202e}d\\u{1b}]0;t\\u{7}"),
            "{xml}"
        );
        assert!(xml.contains("case\\u{202e}gpj"), "{xml}");
        assert!(xml.contains("x\\n::error title=pwned::y"), "{xml}");
        assert!(!xml.contains(crate::clean::is_unsafe_but_newline), "{xml}");
    }

    #[test]
    fn log_tails_read_back_from_junit_as_written() {
        // tqdm redraws its bar with \r, a control character shown as
        // `\r` (a CRLF line end is a newline): what is read back is what
        // the file holds.
        let mut results = results_with_text("line one\n  indented & <tagged>\r\n50%\r100%\n\n");
        results.cases[0].id = "train-bs64".into();
        let xml = render(&results).expect("render");
        let mut cases = results.cases.clone();
        for case in &mut cases {
            case.stdout_tail.clear();
            case.stderr_tail.clear();
        }
        let mut other = CaseResult::unmeasured("not in this report".into());
        other.stdout_tail = "kept".into();
        cases.push(other);
        assert_eq!(read_tails(&xml, &mut cases), Ok(1));
        let written = "line one\n  indented & <tagged>\n50%\\r100%\n\n";
        assert_eq!(cases[0].stdout_tail, written);
        assert_eq!(cases[0].stderr_tail, written);
        assert_eq!(cases[1].stdout_tail, "kept");
        // No stdout: nothing after the figures.
        let mut quiet = results.clone();
        quiet.cases[0].stdout_tail.clear();
        let xml = render(&quiet).expect("render");
        assert_eq!(read_tails(&xml, &mut cases[..1]), Ok(1));
        assert_eq!(cases[0].stdout_tail, "");
        assert!(read_tails("<testsuites", &mut cases).is_err());
    }

    /// A testcase is reused only for a case unchanged since the last
    /// render, in the same run: whatever changed, a render through the memo
    /// is the render without it.
    #[test]
    fn a_memo_reuses_only_what_is_unchanged() {
        let mut results = passed_results(&["a", "b", "c"]);
        let mut memo = Memo::default();
        let mut render_both = |results: &RunResults| {
            let xml = render_with(results, &mut memo).expect("render");
            assert_eq!(xml, render(results).expect("render"));
            memo.reused
        };
        assert_eq!(render_both(&results), 0);
        assert_eq!(render_both(&results), 3);

        // A case finished in place of its in-flight entry; a log tail
        // results.json leaves out; a check's outcome.
        results.cases[1].status = CaseStatus::Failed;
        results.cases[1].message = Some("host peak above budget".into());
        assert_eq!(render_both(&results), 2);
        results.cases[2].stderr_tail = "Traceback (most recent call last):".into();
        assert_eq!(render_both(&results), 2);
        results.cases[0].samples += 1;
        assert_eq!(render_both(&results), 2);

        // A case started, one taken back, two replaced by others.
        results.cases.push(CaseResult::unmeasured("d".into()));
        assert_eq!(render_both(&results), 3);
        results.cases.pop();
        assert_eq!(render_both(&results), 3);
        results.cases.swap(0, 2);
        assert_eq!(render_both(&results), 1);

        // What every testcase reads from the run.
        results.measurement.sample_interval_ms += 1;
        assert_eq!(render_both(&results), 0);
        results.suite.name = "renamed".into();
        assert_eq!(render_both(&results), 0);
        assert_eq!(render_both(&results), 3);
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(128))]

        /// A junit.xml rendered with the tails read back from another is
        /// that other, whatever the workload printed.
        #[test]
        fn junit_with_tails_read_back_is_the_same(text in "\\PC{0,80}|[\u{0}-\u{1f}\u{7f}\u{1b}\u{fffe} a\n]{0,40}") {
            let mut results = results_with_text(&text);
            results.cases[0].id = "train-bs64".into();
            let xml = render(&results).expect("render");
            let mut read = results.clone();
            read.cases[0].stdout_tail = String::new();
            read.cases[0].stderr_tail = String::new();
            proptest::prop_assert_eq!(read_tails(&xml, &mut read.cases), Ok(1));
            proptest::prop_assert_eq!(render(&read).expect("render"), xml);
        }
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

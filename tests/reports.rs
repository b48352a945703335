//! Reports stay valid and oomgate stays small whatever a workload prints.

mod common;

use common::*;

fn spew_suite(args: &str) -> String {
    single_case_suite("spew", "spew.py", args)
}

#[test]
fn nasty_output_keeps_junit_valid_xml() {
    let project = Project::new(&spew_suite("\"--nasty\", \"--exit\", \"1\""));
    let run = project.run(&[]);
    run.assert_code(1);
    let xml = std::fs::read_to_string(project.out().join("junit.xml")).expect("junit.xml");
    let document =
        roxmltree::Document::parse(&xml).unwrap_or_else(|e| panic!("invalid XML: {e}\n{xml}"));
    let case = document
        .descendants()
        .find(|n| n.has_tag_name("testcase"))
        .expect("a testcase");
    assert_eq!(case.attribute("name"), Some("spew"));
    let failure = case
        .children()
        .find(|n| n.has_tag_name("failure"))
        .expect("a failure element");
    assert_eq!(
        failure.attribute("message"),
        Some("the command exited with code 1")
    );
    assert_eq!(failure.attribute("type"), Some("exit-nonzero"));
    let failure_text = failure.text().unwrap_or_default();
    assert!(
        failure_text.contains("host peak:"),
        "figures in the failure body: {failure_text}"
    );
    let system_err = case
        .children()
        .find(|n| n.has_tag_name("system-err"))
        .and_then(|n| n.text())
        .expect("system-err");
    // Text survives; escapes and control bytes do not.
    assert!(system_err.contains("red bold green"), "{system_err}");
    assert!(
        system_err.contains("cdata end ]]> and <tag attr=\"x\"> & ampersand"),
        "{system_err}"
    );
    assert!(
        !system_err.contains('\u{1b}') && !system_err.contains('\0'),
        "{system_err:?}"
    );
    let properties: Vec<_> = case
        .descendants()
        .filter(|n| n.has_tag_name("property"))
        .map(|n| {
            (
                n.attribute("name").unwrap_or_default(),
                n.attribute("value").unwrap_or_default(),
            )
        })
        .collect();
    assert!(
        properties
            .iter()
            .any(|(name, _)| *name == "host_peak_bytes"),
        "{properties:?}"
    );
}

#[test]
fn hundreds_of_mib_of_output_keep_oomgate_small() {
    let project = Project::new(&spew_suite("\"--mib\", \"300\""));
    let run = project.run(&[]);
    run.assert_code(0);
    let log = project.out().join("cases/spew/stdout.log");
    let size = std::fs::metadata(&log).expect("stdout.log").len();
    assert!(
        size >= 300 * MIB,
        "the whole output is on disk ({size} bytes)"
    );
    let runner_rss = run.results()["runner_max_rss_bytes"]
        .as_u64()
        .expect("runner rss recorded");
    assert!(
        runner_rss < 64 * MIB,
        "oomgate itself grew to {} MiB",
        runner_rss / MIB
    );
    // Reports carry a bounded tail, not the output.
    let junit = std::fs::metadata(project.out().join("junit.xml"))
        .expect("junit")
        .len();
    assert!(junit < 256 * 1024, "junit.xml is {junit} bytes");
}

#[test]
fn results_json_has_the_documented_shape() {
    let project = Project::new(&spew_suite("\"--mib\", \"1\""));
    project.run(&[]).assert_code(0);
    let results = project.results();
    for key in [
        "schema",
        "oomgate_version",
        "suite",
        "host",
        "started_at",
        "finished_at",
        "measurement",
        "summary",
        "cases",
    ] {
        assert!(results.get(key).is_some(), "missing {key}");
    }
    let case = &results["cases"][0];
    for key in [
        "id",
        "params",
        "command",
        "status",
        "wall_time_s",
        "host_peak_bytes",
        "gpu_peak_bytes",
        "checks",
        "instances",
        "dir",
        "timeline",
    ] {
        assert!(case.get(key).is_some(), "missing cases[].{key}");
    }
    assert!(
        case["gpu_peak_bytes"].is_null(),
        "GPU is not measured, so null, never 0"
    );
    assert_eq!(case["instances"][0]["stdout_log"], "cases/spew/stdout.log");
    let timeline = read_json(&project.out().join("cases/spew/timeline.json"));
    assert!(timeline["samples"].as_u64().unwrap_or(0) >= 1);
    assert_eq!(timeline["host_peak"]["bytes"], case["host_peak_bytes"]);
}

//! `[[parity]]` end to end: one case's figure against another's of the
//! same run, judged after both, its own check in every report, failing
//! the run and neither case; a side that did not run leaves the rule to
//! a merge; a side without the figure fails it as unverifiable; a rule
//! that names no case, no figure or no form is refused at load.

mod common;

use common::*;

/// `offload` holds `offload_mib`, `plain` 100 MiB; the rule holds the
/// offloaded host peak to 60% of the plain one's.
fn suite(offload_mib: u32, figure: &str, rule: &str) -> String {
    format!(
        "[suite]\nname = \"p\"\nsample_interval = \"20ms\"\n\n\
         [[case]]\nname = \"offload\"\ncommand = [\"python3\", {alloc}, \"--mib\", \"{offload_mib}\", \"--hold\", \"200ms\"]\n\n\
         [[case]]\nname = \"plain\"\ncommand = [\"python3\", {alloc}, \"--mib\", \"100\", \"--hold\", \"200ms\"]\n\n\
         [[parity]]\nlhs = \"offload\"\nrhs = \"plain\"\nfigure = \"{figure}\"\nrule = \"{rule}\"\n",
        alloc = toml_str(&workload("alloc.py")),
    )
}

#[test]
fn a_rule_that_holds_passes_and_one_that_breaks_fails_the_run_not_the_cases() {
    let project = Project::new(&suite(30, "host_peak", "lhs <= 0.6 * rhs"));
    let run = project.run(&[]);
    run.assert_code(0);
    let results = run.results();
    let parity = &results["parity"][0];
    assert_eq!(parity["name"], "parity: offload vs plain", "{parity:#}");
    assert_eq!(parity["outcome"], "held", "{parity:#}");
    assert_eq!(parity["passed"], true);
    let (lhs, rhs) = (
        parity["lhs_value"].as_f64().expect("lhs"),
        parity["rhs_value"].as_f64().expect("rhs"),
    );
    assert_eq!(parity["bound"].as_f64(), Some(0.6 * rhs), "{parity:#}");
    assert!(lhs < rhs, "{parity:#}");
    assert!(
        run.stderr
            .contains("HELD parity: offload vs plain: offload host_peak"),
        "{}",
        run.stderr
    );

    std::fs::write(project.suite(), suite(90, "host_peak", "lhs <= 0.6 * rhs")).expect("suite");
    let run = project.run(&[]);
    run.assert_code(1);
    let results = run.results();
    for case in results["cases"].as_array().expect("cases") {
        assert_eq!(case["status"], "passed", "neither case fails: {case:#}");
    }
    let parity = &results["parity"][0];
    assert_eq!(parity["outcome"], "broken", "{parity:#}");
    assert_eq!(parity["passed"], false);
    let message = parity["message"].as_str().unwrap_or_default();
    assert!(
        message.starts_with("offload host_peak ")
            && message.contains(" is not <= ")
            && message.contains("(plain's ")
            && message.contains("; lhs <= 0.6 * rhs): "),
        "{message}"
    );
    assert!(
        run.stderr.contains("BROKEN parity: offload vs plain"),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr.contains("1 parity rule(s) not held"),
        "{}",
        run.stderr
    );
    let junit = std::fs::read_to_string(project.out().join("junit.xml")).expect("junit");
    let testcase = junit
        .split("<testcase name=\"parity: offload vs plain\"")
        .nth(1)
        .and_then(|rest| rest.split("</testcase>").next())
        .unwrap_or_else(|| panic!("no parity testcase in {junit}"));
    assert!(
        testcase.contains("<failure ") && testcase.contains("type=\"parity\""),
        "{testcase}"
    );
    assert!(
        testcase.contains(r#"<property name="parity.rule" value="lhs &lt;= 0.6 * rhs"/>"#),
        "{testcase}"
    );
    let summary = std::fs::read_to_string(project.out().join("summary.md")).expect("summary");
    assert!(
        summary.contains("### Parity") && summary.contains("broken"),
        "{summary}"
    );
    let html = std::fs::read_to_string(project.out().join("report.html")).expect("html");
    assert!(
        html.contains("<h2>Parity</h2>")
            && html.contains("aria-label=\"parity: offload vs plain\""),
        "{html}"
    );
    // A baseline is a configuration that passed: not one that broke a rule.
    let locked = project.lock(&[]);
    locked.assert_code(1);
    assert!(
        locked.stderr.contains(
            "not locked: 1 parity rule(s) did not hold: parity: offload vs plain (offload host_peak "
        ),
        "{}",
        locked.stderr
    );
    assert!(!project.lock_path().exists());
}

#[test]
fn a_side_without_the_figure_fails_and_a_side_not_run_is_left_to_a_merge() {
    let project = Project::new(&suite(30, "probe.peak_allocated", "lhs <= rhs"));
    let run = project.run(&[]);
    run.assert_code(1);
    let parity = &run.results()["parity"][0];
    assert_eq!(parity["outcome"], "unknown", "{parity:#}");
    assert_eq!(
        parity["message"],
        "cannot be verified: `offload` has no allocated peak (its probe reported none) (rule `lhs <= rhs`)"
    );

    std::fs::write(project.suite(), suite(30, "host_peak", "lhs <= 0.6 * rhs")).expect("suite");
    let run = project.run(&["--filter", "=offload"]);
    run.assert_code(0);
    let parity = &run.results()["parity"][0];
    assert_eq!(parity["outcome"], "not-judged", "{parity:#}");
    assert!(
        parity["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("not judged: `plain` did not run here")),
        "{parity:#}"
    );
    assert!(
        run.stderr.contains("NOT JUDGED parity: offload vs plain"),
        "{}",
        run.stderr
    );
}

/// `oomgate check` of the project's suite.
fn check_suite(project: &Project) -> std::process::Output {
    project
        .oomgate()
        .arg("check")
        .arg(project.suite())
        .output()
        .expect("check")
}

#[test]
fn a_rule_is_refused_at_load_where_it_is_wrong() {
    for (figure, rule, rhs, expected) in [
        (
            "host_peak",
            "lhs <= 0.6 * rhs",
            "plan",
            "`rhs` names `plan`, which is no case of the suite",
        ),
        (
            "host_peak",
            "lhs == rhs",
            "plain",
            "parity rule: no `<=`, `<`, `>=` or `>` after `lhs`",
        ),
        (
            "gpu",
            "lhs <= rhs",
            "plain",
            "`gpu` is not a figure a parity compares",
        ),
        (
            "output.kv",
            "lhs <= rhs",
            "plain",
            "case `offload` reads no `kv` from its output",
        ),
        (
            "host_peak",
            "lhs <= rhs + 5 parsecs",
            "plain",
            "is not a size",
        ),
    ] {
        let text = suite(30, figure, rule).replace("rhs = \"plain\"", &format!("rhs = \"{rhs}\""));
        let output = check_suite(&Project::new(&text));
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{stderr}");
        assert!(stderr.contains(expected), "{expected:?} not in {stderr}");
        if rhs == "plan" {
            assert!(stderr.contains("did you mean `plain`?"), "{stderr}");
        }
    }
    let output = check_suite(&Project::new(&suite(30, "host_peak", "lhs <= 0.6 * rhs")));
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        stdout.contains("parity: offload vs plain\n  rule:        lhs <= 0.6 * rhs on host_peak, judged once both have run"),
        "{stdout}"
    );
}

#[test]
fn the_parity_example_suite_is_valid() {
    let stdout = check_in_repository("examples/parity/offload.toml");
    assert!(
        stdout.contains(
            "parity: train-offload vs train\n  rule:        lhs <= 0.6 * rhs on gpu_peak"
        ),
        "{stdout}"
    );
    assert!(
        stdout.contains("parity: train-lightning vs train (wall_time)\n  rule:        lhs <= 1.1 * rhs on wall_time"),
        "{stdout}"
    );
}

//! The host verdict's invariants on every kind of case (plain, tree,
//! concurrency, soak, server, capacity probe, pytest test), run by the
//! real binary against its own lock: the figure compared is the figure
//! shown, the delta shown is computed from the two figures shown beside
//! it (results.json, JUnit), every locked figure is compared, and an
//! unchanged suite passes under `--require-baseline`.

mod common;

use common::pytest::python;
use common::*;

fn suite() -> String {
    let patterns = toml_str(&workload("host_patterns.py"));
    let hold = |mib: u32, hold: &str| {
        format!(
            "[\"python3\", {patterns}, \"burst-child\", \"--mib\", \"{mib}\", \"--hold\", \"{hold}\"]"
        )
    };
    format!(
        "[suite]\nname = \"kinds\"\nsample_interval = \"20ms\"\n\
         [[case]]\nname = \"plain\"\ncommand = {plain}\n\
         [[case]]\nname = \"tree\"\ncommand = [\"python3\", {patterns}, \"burst-tree\", \"--children\", \"3\", \"--mib\", \"24\", \"--hold\", \"300ms\"]\n\
         [[case]]\nname = \"concurrent\"\ncommand = {overlapping}\nconcurrency = 2\n\
         [[case]]\nname = \"soak\"\ncommand = {short}\nduration = \"1s\"\n\
         [[case]]\nname = \"served\"\ncommand = [\"python3\", {load}, \"--url\", \"http://127.0.0.1:{{port}}/generate\", \"--requests\", \"4\"]\n\
         server = {{ command = [\"python3\", {server}, \"--port\", \"{{port}}\"], ready = \"http://127.0.0.1:{{port}}/health\", kill_grace = \"2s\" }}\n\
         [[case]]\nname = \"searched\"\ncommand = [\"sh\", \"-c\", \"test \\\"$1\\\" -le 16\", \"sh\", \"{{batch}}\"]\n\
         search = {{ param = \"batch\", min = 8, max = 32, step = 8 }}\n\
         [[pytest]]\npaths = [\"tests\"]\npython = {python}\n",
        plain = hold(32, "300ms"),
        // Long enough that the two instances overlap however late a busy
        // machine starts the second: their sum is the figure.
        overlapping = hold(32, "1s"),
        short = hold(16, "100ms"),
        load = toml_str(&workload("load.py")),
        server = toml_str(&workload("server.py")),
        python = toml_str(&python().display().to_string()),
    )
}

#[test]
fn every_kind_of_case_is_judged_on_the_figures_it_shows() {
    let project = Project::new(&suite());
    std::fs::create_dir_all(project.path().join("tests")).expect("tests/");
    std::fs::write(
        project.path().join("tests/test_quick.py"),
        "def test_quick():\n    data = bytearray(16 << 20)\n    data[::4096] = b'\\x01' * len(data[::4096])\n    assert data[0] == 1\n",
    )
    .expect("a test");
    project.lock(&[]).assert_code(0);
    let lock: toml::Table =
        toml::from_str(&std::fs::read_to_string(project.lock_path()).expect("lock"))
            .expect("lock toml");

    let run = project.run(&["--require-baseline"]);
    run.assert_code(0);
    let results = run.results();
    let cases = results["cases"].as_array().expect("cases");
    assert_eq!(cases.len(), 7, "{results:#}");
    let junit = std::fs::read_to_string(run.out.join("junit.xml")).expect("junit.xml");
    for case in cases {
        let id = case["id"].as_str().expect("an id");
        let host = &case["baseline"]["host"];
        let locked = lock["cases"][id]["host_peak_bytes"]
            .as_integer()
            .unwrap_or_else(|| panic!("{id}: no locked host figure"));
        // The figure compared is the figure shown, against the locked one.
        assert_eq!(host["new_bytes"], case["host_peak_bytes"], "{id}: {case:#}");
        assert_eq!(host["baseline_bytes"], locked, "{id}");
        let shown = case["host_peak_bytes"].as_i64().expect("a host figure");
        assert_eq!(host["delta_bytes"], shown - locked, "{id}");
        // JUnit says the same two figures and their delta.
        for (name, value) in [
            ("baseline.host_bytes", locked.to_string()),
            ("baseline.host.delta_bytes", (shown - locked).to_string()),
        ] {
            assert!(
                junit.contains(&format!("<property name=\"{name}\" value=\"{value}\"/>")),
                "{id}: {name} = {value} not in junit.xml"
            );
        }
        // The working memory likewise, wherever a cgroup measured it.
        if !case["host_working_peak_bytes"].is_null() {
            assert_eq!(
                case["baseline"]["working"]["new_bytes"], case["host_working_peak_bytes"],
                "{id}"
            );
            assert_eq!(
                case["baseline"]["working"]["baseline_bytes"],
                lock["cases"][id]["host_working_peak_bytes"]
                    .as_integer()
                    .expect("a locked working figure"),
                "{id}"
            );
        }
        // Every baseline check compared something: none is silently left.
        for check in case["checks"].as_array().expect("checks") {
            let name = check["name"].as_str().unwrap_or_default();
            if name.starts_with("baseline") {
                assert!(
                    matches!(
                        check["outcome"].as_str(),
                        Some("within" | "improved" | "not-gated")
                    ),
                    "{id}: {check:#}"
                );
            }
        }
    }
}

/// A lock written before the working memory was gated: the case is
/// compared on what the lock has, and the figure it lacks is said in the
/// summary line and its notes, never counted as compared in silence;
/// `--require-baseline` fails it.
#[test]
fn a_figure_the_lock_lacks_is_said_and_fails_when_required() {
    let project = Project::new(&format!(
        "[suite]\nname = \"old\"\n[[case]]\nname = \"held\"\ncommand = [\"python3\", {}, \"burst-child\", \"--mib\", \"24\", \"--hold\", \"100ms\"]\n",
        toml_str(&workload("host_patterns.py"))
    ));
    project.lock(&[]).assert_code(0);
    let lock = std::fs::read_to_string(project.lock_path()).expect("lock");
    if !lock.contains("host_working_peak_bytes") {
        // No cgroup here: the working memory is neither measured nor locked.
        return;
    }
    let older: String = lock
        .lines()
        .filter(|line| !line.starts_with("host_working_peak"))
        .map(|line| format!("{line}\n"))
        .collect();
    std::fs::write(project.lock_path(), older).expect("lock");

    let run = project.run(&[]);
    run.assert_code(0);
    assert!(
        run.stderr.contains("1 passed with a figure not compared")
            && run.stderr.contains("held (working: none in the lock)"),
        "{}",
        run.stderr
    );
    let summary = std::fs::read_to_string(run.out.join("summary.md")).expect("summary.md");
    assert!(
        summary.contains("held (working: none in the lock)"),
        "{summary}"
    );

    let uncompared = check(&run.case("held"), "baseline.working");
    assert_eq!(uncompared["passed"], true, "{uncompared:#}");
    assert_eq!(uncompared["outcome"], "no-baseline", "{uncompared:#}");

    let required = project.run(&["--require-baseline"]);
    required.assert_code(1);
    let held = required.case("held");
    // The figure was measured; the lock has none to hold it to: the
    // baseline failed, not the figure.
    assert_eq!(held["failure_kind"], "baseline", "{held:#}");
    let working = check(&held, "baseline.working");
    assert_eq!(working["passed"], false, "{working:#}");
    assert_eq!(working["outcome"], "no-baseline", "{working:#}");
    assert_eq!(
        working["facts"]["baseline"]["required"], true,
        "{working:#}"
    );
}

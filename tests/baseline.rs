//! Baselines end to end: lock, run against the lock, regressions,
//! improvements, drift, corrupt locks, diff, reports. GPU figures come from
//! the fake NVML driver, so they are exact and the messages can be checked
//! to the byte.

mod common;

use common::baselines::*;
use common::fake_nvml::*;
use common::*;

#[test]
fn a_first_run_without_a_lock_says_how_to_lock_it() {
    let project = project(1000, "");
    let run = project.run(&[]);
    run.assert_code(0);
    assert!(
        run.stderr.contains("hint: no baseline yet")
            && run.stderr.contains("oomgate lock ")
            && run.stderr.contains("--from ")
            && run.stderr.contains("results.json"),
        "{}",
        run.stderr
    );
    project.lock_from_results().assert_code(0);
    let run = project.run(&[]);
    run.assert_code(0);
    assert!(!run.stderr.contains("hint: no baseline"), "{}", run.stderr);
}

#[test]
fn lock_then_an_unchanged_run_passes() {
    let project = project(1000, "");
    let locked = project.lock(&[]);
    locked.assert_code(0);
    let text = std::fs::read_to_string(project.lock_path()).expect("lock written");
    assert_eq!(locked_cases(&text), ["c", "h"], "{text}");
    assert!(text.contains("version = 4"), "{text}");
    assert!(text.contains("gpu_peak = \"1000.0 MiB\""), "{text}");
    assert!(
        text.contains("[testbeds.\"Fake H100 80GB ×2\".cases.c]"),
        "a GPU case is its testbed's: {text}"
    );

    let run = project.run(&[]);
    run.assert_code(0);
    let results = run.results();
    assert_eq!(
        results["baseline"]["path"],
        project.lock_path().display().to_string(),
        "{results:#}"
    );
    assert_eq!(results["baseline"]["drift"], serde_json::json!([]));
    let case = run.case("c");
    assert_eq!(case["baseline"]["gpu"]["outcome"], "within", "{case:#}");
    assert_eq!(case["baseline"]["gpu"]["delta_bytes"], 0);
}

#[test]
fn a_workload_made_20_percent_larger_fails_with_the_figures() {
    let project = project(1000, "");
    project.lock(&[]).assert_code(0);
    project.rewrite_suite(&suite(1200, ""));
    let run = project.run(&[]);
    run.assert_code(1);
    let case = run.case("c");
    assert_eq!(case["status"], "failed");
    assert_eq!(case["failure_kind"], "regression");
    let gpu = assert_breached(&case, "baseline.gpu");
    assert_eq!(mib(&gpu["figure_bytes"]), Some(1200), "{gpu:#}");
    assert_eq!(mib(&gpu["baseline_bytes"]), Some(1000), "{gpu:#}");
    assert_eq!(gpu["tolerance"]["relative"], 0.05, "{gpu:#}");
    assert_eq!(
        mib(&gpu["tolerance"]["absolute_bytes"]),
        Some(64),
        "{gpu:#}"
    );
    assert_eq!(case["baseline"]["gpu"]["outcome"], "regressed");
    assert_eq!(case["baseline"]["gpu"]["delta_ratio"], 0.2);
    assert_eq!(
        case["baseline"]["changes"][0],
        format!(
            "command: python3 {} --mib 1000 --hold 300ms → python3 {} --mib 1200 --hold 300ms",
            workload("gpu_alloc.py"),
            workload("gpu_alloc.py")
        )
    );
    // JUnit's failure says what results.json says.
    let junit = std::fs::read_to_string(project.out().join("junit.xml")).expect("junit");
    let document = roxmltree::Document::parse(&junit).expect("valid XML");
    let failure = document
        .descendants()
        .find(|n| n.has_tag_name("failure"))
        .expect("a failure");
    assert_eq!(failure.attribute("message"), case["message"].as_str());
    assert_eq!(failure.attribute("type"), Some("regression"));
    assert_eq!(run.case("h")["status"], "passed");
}

#[test]
fn a_red_run_that_failed_only_against_the_baseline_can_be_locked_from_its_results() {
    let project = project(1000, "");
    project.lock(&[]).assert_code(0);
    project.rewrite_suite(&suite(1200, ""));
    project.run(&[]).assert_code(1);
    let results = project.out().join("results.json");
    let locked = project.lock(&["--from", &results.display().to_string()]);
    locked.assert_code(0);
    assert!(
        locked
            .stderr
            .contains("accepted what changed since the old baseline (these cases failed only against it):\n  c: gpu 1000.0 MiB -> 1.17 GiB (+20.0%)"),
        "{}",
        locked.stderr
    );
    let lock = std::fs::read_to_string(project.lock_path()).expect("lock");
    assert!(lock.contains("gpu_peak_bytes = 1258291200"), "{lock}");
    // The new baseline holds: the same run passes now.
    project.run(&[]).assert_code(0);
}

#[test]
fn lock_can_select_cases_and_keeps_the_others_baselines() {
    let project = project(1000, "");
    project.lock(&[]).assert_code(0);
    project.rewrite_suite(&suite(1200, ""));
    let locked = project.lock(&["--filter", "c"]);
    locked.assert_code(0);
    assert!(
        locked
            .stderr
            .contains("their previous baseline was kept: h"),
        "{}",
        locked.stderr
    );
    let lock = std::fs::read_to_string(project.lock_path()).expect("lock");
    assert!(lock.contains("gpu_peak_bytes = 1258291200"), "{lock}");
    assert!(lock.contains(".cases.h]"), "{lock}");
    // Only `c` ran.
    assert_eq!(project.results()["cases"].as_array().map(Vec::len), Some(1));
    let none = project.lock(&["--filter", "nothing-matches"]);
    none.assert_code(2);
}

#[test]
fn an_improvement_passes_and_suggests_relocking() {
    let project = project(1000, "");
    project.lock(&[]).assert_code(0);
    project.rewrite_suite(&suite(500, ""));
    let run = project.run(&[]);
    run.assert_code(0);
    assert_eq!(run.case("c")["baseline"]["gpu"]["outcome"], "improved");
    assert!(
        run.stderr.contains("improved beyond tolerance: c; re-lock"),
        "{}",
        run.stderr
    );
    let summary = std::fs::read_to_string(project.out().join("summary.md"))
        .expect("summary.md")
        .replace(&workload("gpu_alloc.py"), "gpu_alloc.py");
    assert!(
        summary.contains("Improved beyond tolerance: `c`."),
        "{summary}"
    );
}

#[test]
fn drift_is_listed_beside_a_regression_and_can_fail_the_run() {
    let project = project(1000, "");
    project.lock(&[]).assert_code(0);
    std::fs::write(project.path().join("marker.txt"), "two").expect("marker");
    project.rewrite_suite(&suite(1200, ""));
    let run = project.run(&[]);
    run.assert_code(1);
    let case = run.case("c");
    assert_eq!(case["failure_kind"], "regression", "{case:#}");
    assert_breached(&case, "baseline.gpu");
    assert!(
        run.stderr
            .contains("environment changes since the baseline"),
        "{}",
        run.stderr
    );
    let drift = &run.results()["baseline"]["drift"];
    assert_eq!(drift.as_array().map(Vec::len), Some(1), "{drift:#}");
    assert_eq!(drift[0]["what"], "command marker");
    assert_eq!(drift[0]["before"], "one");
    assert_eq!(drift[0]["after"], "two");

    // on_drift = "fail": the unchanged workload now fails too.
    project.rewrite_suite(&suite(1000, "on_drift = \"fail\""));
    let run = project.run(&[]);
    run.assert_code(1);
    let h = run.case("h");
    assert_eq!(h["status"], "failed");
    assert_eq!(h["failure_kind"], "environment-drift", "{h:#}");
    let drift = check(&h, "environment.drift");
    assert_eq!(drift["passed"], false, "{drift:#}");
    assert_eq!(drift["outcome"], "breached", "{drift:#}");
    // `diff` of the lock and that run exits as the run did: 1, naming the
    // drift; with a suite that only warns, 0.
    let diff = |suite: Option<&std::path::Path>| {
        let mut command = project.oomgate();
        command
            .arg("diff")
            .arg(project.lock_path())
            .arg(project.out().join("results.json"));
        if let Some(suite) = suite {
            command.arg("--suite").arg(suite);
        }
        command.output().expect("oomgate diff")
    };
    let failed = diff(None);
    let stdout = String::from_utf8_lossy(&failed.stdout);
    assert_eq!(failed.status.code(), Some(1), "{stdout}");
    assert!(
        stdout.contains(
            "environment: the environment drifted from the baseline (on_drift = \"fail\")"
        ),
        "{stdout}"
    );
    project.rewrite_suite(&suite(1000, ""));
    let warned = diff(Some(&project.suite()));
    assert_eq!(
        warned.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&warned.stdout)
    );
}

#[test]
fn a_corrupt_lock_exits_2_and_is_left_untouched() {
    let project = project(100, "");
    let garbage = "version = 1\n[cases.c\nhost_peak_bytes = 12\n";
    std::fs::write(project.lock_path(), garbage).expect("write lock");
    let run = project.run(&[]);
    run.assert_code(2);
    assert!(run.stderr.contains("is corrupt"), "{}", run.stderr);
    let locked = project.lock(&[]);
    locked.assert_code(2);
    assert_eq!(
        std::fs::read_to_string(project.lock_path()).expect("lock"),
        garbage
    );
    assert!(
        !project.out().join("results.json").exists(),
        "nothing may run with a corrupt lock"
    );

    std::fs::write(project.lock_path(), "version = 7\n").expect("write lock");
    let run = project.run(&[]);
    run.assert_code(2);
    assert!(
        run.stderr
            .contains("version 7, newer than this oomgate understands"),
        "{}",
        run.stderr
    );
    // --no-baseline runs anyway.
    project.run(&["--no-baseline"]).assert_code(0);
}

#[test]
fn a_failing_run_writes_no_lock() {
    let project = project(9000, ""); // more than the fake 8 GiB device: a CUDA OOM
    let locked = project.lock(&[]);
    locked.assert_code(1);
    assert!(
        locked
            .stderr
            .contains("not locked: 1 case(s) did not pass: c"),
        "{}",
        locked.stderr
    );
    assert!(!project.lock_path().exists());
}

#[test]
fn lock_from_a_results_file() {
    let project = project(1000, "");
    project.run(&["--no-baseline"]).assert_code(0);
    let results = project.out().join("results.json");
    let output = project
        .oomgate()
        .arg("lock")
        .arg(project.suite())
        .arg("--from")
        .arg(&results)
        .output()
        .expect("lock");
    let locked = Run::from(output, project.out());
    locked.assert_code(0);
    let lock = std::fs::read_to_string(project.lock_path()).expect("lock");
    assert!(lock.contains("gpu_peak_bytes = 1048576000"), "{lock}");

    // A failing results file is refused, and the existing lock kept.
    let failing = project.path().join("failing.json");
    let text = std::fs::read_to_string(&results)
        .expect("results")
        .replacen("\"status\": \"passed\"", "\"status\": \"failed\"", 1);
    std::fs::write(&failing, text).expect("write");
    let output = project
        .oomgate()
        .arg("lock")
        .arg(project.suite())
        .arg("--from")
        .arg(&failing)
        .output()
        .expect("lock");
    let refused = Run::from(output, project.out());
    refused.assert_code(1);
    assert!(refused.stderr.contains("not locked"), "{}", refused.stderr);
    assert_eq!(
        std::fs::read_to_string(project.lock_path()).expect("lock"),
        lock
    );

    // Not a results file at all: bad input.
    std::fs::write(&failing, "{\"hello\": 1}").expect("write");
    let output = project
        .oomgate()
        .arg("lock")
        .arg(project.suite())
        .arg("--from")
        .arg(&failing)
        .output()
        .expect("lock");
    assert_eq!(output.status.code(), Some(2));
}

#[test]
fn cases_without_baseline_pass_with_a_notice_unless_required() {
    let project = project(1000, "");
    project.lock(&[]).assert_code(0);
    let mut text = suite(1000, "");
    text.push_str("\n[[case]]\nname = \"new\"\ncommand = [\"true\"]\n");
    let text = text.replacen("[[case]]\nname = \"h\"", "[[case]]\nname = \"h2\"", 1);
    project.rewrite_suite(&text);
    let run = project.run(&[]);
    run.assert_code(0);
    assert!(
        run.stderr.contains("no baseline yet for: h2, new"),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr
            .contains("in the baseline but no longer in the suite: h"),
        "{}",
        run.stderr
    );
    let run = project.run(&["--require-baseline"]);
    run.assert_code(1);
    let new = run.case("new");
    assert_eq!(new["failure_kind"], "baseline", "{new:#}");
    assert_eq!(check(&new, "baseline")["passed"], false, "{new:#}");
}

#[test]
fn repeats_compare_their_maximum_and_show_the_spread() {
    let text = suite(1000, "").replacen(
        "\"--hold\", \"300ms\"]\n",
        "\"--hold\", \"300ms\"]\nrepeat = 3\n",
        1,
    );
    let project = Project::new(&text).with_fake_gpus(&two_devices(false), Variant::Complete);
    std::fs::write(project.path().join("marker.txt"), "one").expect("marker");
    let run = project.run(&[]);
    run.assert_code(0);
    let case = run.case("c");
    assert_eq!(
        case["repeats"].as_array().map(Vec::len),
        Some(3),
        "{case:#}"
    );
    let junit = std::fs::read_to_string(project.out().join("junit.xml")).expect("junit");
    assert!(junit.contains("repeats:     3 runs; host peak"), "{junit}");
    let log = std::fs::read_to_string(project.out().join("cases/c/stdout.log")).expect("log");
    assert!(log.contains("[oomgate] repeat 3 of 3 starts"), "{log}");
}

#[test]
fn markdown_summary_and_github_annotations() {
    let project = project(1000, "");
    project.lock(&[]).assert_code(0);
    project.rewrite_suite(&suite(1200, ""));
    let step_summary = project.path().join("step-summary.md");
    std::fs::write(&step_summary, "earlier step\n").expect("write");
    let output = project
        .oomgate()
        .arg("run")
        .arg(project.suite())
        .arg("--out")
        .arg(project.out())
        .env("GITHUB_ACTIONS", "true")
        .env("GITHUB_STEP_SUMMARY", &step_summary)
        .output()
        .expect("run");
    let run = Run::from(output, project.out());
    run.assert_code(1);
    assert!(
        run.stdout.contains("::error title=oomgate regression c::gpu peak 1.17 GiB > baseline 1000.0 MiB (+20.0%25, tolerance 5%25 + 64.0 MiB)"),
        "{}",
        run.stdout
    );

    // The summary, with the host peak (which varies) blanked out.
    let summary = std::fs::read_to_string(project.out().join("summary.md"))
        .expect("summary.md")
        .replace(&workload("gpu_alloc.py"), "gpu_alloc.py");
    let normalised: Vec<String> = summary
        .lines()
        .map(|line| match line.rsplit_once(" | ") {
            Some((head, tail)) if line.starts_with("| `c` ") || line.starts_with("| `h` ") => {
                let _ = tail;
                format!("{head} | HOST |")
            }
            _ => line.to_string(),
        })
        .map(|line| {
            if line.starts_with("Baseline: `") {
                "Baseline: LOCK".to_string()
            } else {
                line
            }
        })
        .collect();
    let expected = "## oomgate: b — 1 passed, 1 failed

| case | status | GPU peak | baseline | delta | host peak |
| --- | --- | --- | --- | --- | --- |
| `c` | ❌ failed | 1.17 GiB (sampled@20ms) | 1000.0 MiB | +20.0% regressed | HOST |
| `h` | ✅ passed | 0 B (sampled@20ms) | 0 B | +0.0% | HOST |

Baseline: LOCK

### Environment drift

None: the environment matches the baseline's.

### Changed since the baseline

- **`c`**: `command: python3 gpu_alloc.py --mib 1000 --hold 300ms → python3 gpu_alloc.py --mib 1200 --hold 300ms`

### Failures

- **`c`** — `gpu peak 1.17 GiB > baseline 1000.0 MiB (+20.0%, tolerance 5% + 64.0 MiB)` (logs: `cases/c`)";
    assert_eq!(normalised.join("\n"), expected);
    let appended = std::fs::read_to_string(&step_summary).expect("step summary");
    assert!(
        appended.starts_with("earlier step\n## oomgate: b"),
        "{appended}"
    );
}

/// Regression: a locked GPU figure that this run could not measure passed.
#[test]
fn a_locked_gpu_figure_that_cannot_be_measured_fails() {
    let project = project(1000, "");
    project.lock(&[]).assert_code(0);
    let run = project.run(&["--gpu", "off"]);
    run.assert_code(1);
    let case = run.case("c");
    assert_eq!(case["failure_kind"], "baseline", "{case:#}");
    let gpu = check(&case, "baseline.gpu");
    assert_eq!(gpu["passed"], false, "{gpu:#}");
    assert_eq!(gpu["outcome"], "unknown", "{gpu:#}");
    assert!(gpu["figure_bytes"].is_null(), "{gpu:#}");
    assert_eq!(mib(&gpu["baseline_bytes"]), Some(1000), "{gpu:#}");
}

/// Regression: locking the results of a filtered run dropped the other
/// cases' baselines, and results of another suite were locked.
#[test]
fn lock_from_partial_results_keeps_the_other_baselines() {
    let project = project(1000, "");
    project.lock(&[]).assert_code(0);
    let before = std::fs::read_to_string(project.lock_path()).expect("lock");
    project.rewrite_suite(&suite(1200, ""));
    project
        .run(&["--no-baseline", "--filter", "c"])
        .assert_code(0);
    let results = project.out().join("results.json");
    let output = project
        .oomgate()
        .arg("lock")
        .arg(project.suite())
        .arg("--from")
        .arg(&results)
        .output()
        .expect("lock");
    let locked = Run::from(output, project.out());
    locked.assert_code(0);
    assert!(
        locked
            .stderr
            .contains("their previous baseline was kept: h"),
        "{}",
        locked.stderr
    );
    let after = std::fs::read_to_string(project.lock_path()).expect("lock");
    assert!(after.contains("gpu_peak = \"1.17 GiB\""), "{after}");
    let section = |text: &str| {
        text.split("[cases.h]")
            .nth(1)
            .map(|s| s.split("[cases.").next().unwrap_or_default().to_string())
    };
    assert_eq!(
        section(&after),
        section(&before),
        "h's baseline must be kept as it was"
    );

    let other = std::fs::read_to_string(&results)
        .expect("results")
        .replace("\"name\": \"b\"", "\"name\": \"other\"");
    let other_path = project.path().join("other.json");
    std::fs::write(&other_path, other).expect("write");
    let output = project
        .oomgate()
        .arg("lock")
        .arg(project.suite())
        .arg("--from")
        .arg(&other_path)
        .output()
        .expect("lock");
    assert_eq!(
        output.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        String::from_utf8_lossy(&output.stderr)
            .contains("holds results of suite `other`, not of `b`")
    );
}

/// Regression: `run --baseline` accepted the lock of another suite, and
/// `lock --from` locked case ids the suite does not have.
#[test]
fn a_lock_or_results_of_another_suite_are_refused() {
    let project = project(64, "");
    project.lock(&[]).assert_code(0);
    let lock = std::fs::read_to_string(project.lock_path()).expect("lock");

    // The same lock, said to be another suite's.
    let other = project.path().join("other.lock");
    std::fs::write(&other, lock.replace("suite = \"b\"", "suite = \"other\"")).expect("write");
    let run = project.run(&["--baseline", &other.display().to_string()]);
    run.assert_code(2);
    assert!(
        run.stderr.contains("the lock of suite `other`"),
        "{}",
        run.stderr
    );

    // The right name, but no case in common.
    let strangers = project.path().join("strangers.lock");
    let renamed = lock
        .replace(".cases.c", ".cases.x")
        .replace(".cases.h", ".cases.y");
    std::fs::write(&strangers, renamed).expect("write");
    let run = project.run(&["--baseline", &strangers.display().to_string()]);
    run.assert_code(2);
    assert!(run.stderr.contains("shares no case"), "{}", run.stderr);

    // Results with a case the suite does not have.
    let results = std::fs::read_to_string(project.out().join("results.json")).expect("results");
    let value: serde_json::Value = serde_json::from_str(&results).expect("json");
    let index_of_h = value["cases"]
        .as_array()
        .and_then(|cases| cases.iter().position(|c| c["id"] == "h"))
        .expect("case h");
    let mut renamed = value.clone();
    renamed["cases"][index_of_h]["id"] = "gone".into();
    let foreign = project.path().join("foreign.json");
    std::fs::write(&foreign, renamed.to_string()).expect("write");
    let run = project.lock(&["--from", &foreign.display().to_string()]);
    run.assert_code(2);
    assert!(run.stderr.contains("does not: gone"), "{}", run.stderr);

    // Results whose case has no host figure.
    let unmeasured = project.path().join("unmeasured.json");
    let mut value = value;
    value["cases"][index_of_h]["host_peak_bytes"] = serde_json::Value::Null;
    std::fs::write(&unmeasured, value.to_string()).expect("write");
    let run = project.lock(&["--from", &unmeasured.display().to_string()]);
    run.assert_code(2);
    assert!(
        run.stderr.contains("no host figure for h"),
        "{}",
        run.stderr
    );
    // Nothing was overwritten along the way.
    assert_eq!(
        std::fs::read_to_string(project.lock_path()).ok(),
        Some(lock)
    );
}

/// One lock, two testbeds: a run on another GPU model has no baseline
/// until that testbed is locked too (and fails with --require-baseline),
/// then each testbed's run is held to its own figures, never the other's.
#[test]
fn two_testbeds_share_one_lock_and_each_run_is_held_to_its_own() {
    let project = project(1000, "");
    project.lock(&[]).assert_code(0);
    let config = project.path().join("fake-nvml.conf");
    let h100 = std::fs::read_to_string(&config).expect("config");
    let a100 = h100.replace("Fake H100 80GB", "Fake A100 80GB");

    std::fs::write(&config, &a100).expect("A100s now");
    project.rewrite_suite(&suite(1500, ""));
    let run = project.run(&[]);
    run.assert_code(0);
    let case = run.case("c");
    assert_eq!(case["testbed"], "Fake A100 80GB ×2", "{case:#}");
    let missing = check(&case, "baseline");
    assert_eq!(missing["passed"], true, "{case:#}");
    assert_eq!(
        missing["facts"]["missing"]["testbed"], "Fake A100 80GB ×2",
        "{case:#}"
    );
    assert!(
        case["baseline"]["gpu"]["baseline_bytes"].is_null(),
        "never the H100's figure"
    );
    project.run(&["--require-baseline"]).assert_code(1);
    let locked = project.lock(&[]);
    locked.assert_code(0);
    assert!(
        locked.stderr.contains("(testbed Fake A100 80GB ×2)"),
        "{}",
        locked.stderr
    );
    let lock = std::fs::read_to_string(project.lock_path()).expect("lock");
    assert!(
        lock.contains("[testbeds.\"Fake A100 80GB ×2\".cases.c]")
            && lock.contains("[testbeds.\"Fake H100 80GB ×2\".cases.c]"),
        "both testbeds in one file: {lock}"
    );

    // Each held to its own: the A100's 1500 MiB, the H100's 1000 MiB.
    let run = project.run(&[]);
    run.assert_code(0);
    assert_eq!(
        mib(&run.case("c")["baseline"]["gpu"]["baseline_bytes"]),
        Some(1500)
    );
    std::fs::write(&config, &h100).expect("H100s again");
    project.rewrite_suite(&suite(1200, ""));
    let run = project.run(&[]);
    run.assert_code(1);
    let case = run.case("c");
    assert_eq!(
        mib(&case["baseline"]["gpu"]["baseline_bytes"]),
        Some(1000),
        "{case:#}"
    );
    assert_eq!(case["failure_kind"], "regression");
    // Or held to another testbed's, when asked by name.
    let run = project.run(&["--baseline-testbed", "Fake A100 80GB ×2"]);
    run.assert_code(0);
    assert_eq!(
        mib(&run.case("c")["baseline"]["gpu"]["baseline_bytes"]),
        Some(1500)
    );
    let run = project.run(&["--baseline-testbed", "Fake L4 ×1"]);
    run.assert_code(2);
    assert!(run.stderr.contains("has no such testbed"), "{}", run.stderr);
}

/// A lock written before testbeds (every case in its top-level `cases`)
/// loads as the one testbed its environment names: compared on that GPU
/// model, relocked into its testbed.
#[test]
fn a_lock_of_before_testbeds_loads_as_its_one_testbed() {
    let project = project(1000, "");
    project.lock(&[]).assert_code(0);
    let lock = std::fs::read_to_string(project.lock_path()).expect("lock");
    let mut old: toml::Table = toml::from_str(&lock).expect("a lock");
    let testbeds = old.remove("testbeds").expect("testbeds");
    let cases = testbeds["Fake H100 80GB ×2"]["cases"].clone();
    old.insert("cases".into(), cases);
    std::fs::write(project.lock_path(), toml::to_string(&old).expect("toml")).expect("an old lock");
    project.rewrite_suite(&suite(1200, ""));
    let run = project.run(&[]);
    run.assert_code(1);
    assert_eq!(
        mib(&run.case("c")["baseline"]["gpu"]["baseline_bytes"]),
        Some(1000)
    );
    project.rewrite_suite(&suite(1000, ""));
    project.lock(&[]).assert_code(0);
    let relocked = std::fs::read_to_string(project.lock_path()).expect("lock");
    assert!(
        relocked.contains("[testbeds.\"Fake H100 80GB ×2\".cases.c]")
            && !relocked.contains("[cases.c]"),
        "{relocked}"
    );
}

/// A lock is committed and read on other machines: it records the
/// suite's `[environment] python` as written, never where this checkout
/// happens to be.
#[test]
fn the_lock_records_the_interpreter_as_the_suite_writes_it() {
    let project = Project::new(
        "[suite]\nname = \"py\"\n\
         [environment]\npython = \"venv/bin/python\"\npackages = [\"pip\"]\n\
         [[case]]\nname = \"a\"\ncommand = [\"true\"]\n",
    );
    let bin = project.path().join("venv/bin");
    std::fs::create_dir_all(&bin).expect("venv/bin");
    let python3 = which_python3();
    std::os::unix::fs::symlink(&python3, bin.join("python")).expect("link venv/bin/python");

    project.lock(&[]).assert_code(0);
    let text = std::fs::read_to_string(project.lock_path()).expect("lock written");
    assert!(text.contains("interpreter = \"venv/bin/python\""), "{text}");
    // Asked through the link (so the figure is real), and nothing of this
    // machine's paths is kept.
    assert!(text.contains("pip = \""), "{text}");
    assert!(!text.contains("pip = \"absent\""), "{text}");
    let here = project.path().display().to_string();
    assert!(!text.contains(&here), "the lock names {here}:\n{text}");
}

fn which_python3() -> std::path::PathBuf {
    std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .map(|dir| dir.join("python3"))
        .find(|path| path.is_file())
        .expect("python3 on PATH")
}

/// Two `oomgate lock --from` into one lock at the same moment (an H100
/// job's results and an A100 job's): the second waits for the first
/// (`.suite.lock.held`), then reads its entries back in, so both testbeds are
/// in the lock every time, and both exit 0.
#[test]
fn two_locks_into_one_file_at_once_keep_both_testbeds() {
    let project = project(1000, "");
    let config = project.path().join("fake-nvml.conf");
    let h100 = std::fs::read_to_string(&config).expect("config");
    let results = project.out().join("results.json");
    project.run(&[]).assert_code(0);
    let from_h100 = project.path().join("h100.json");
    std::fs::copy(&results, &from_h100).expect("keep the H100's results");
    std::fs::write(&config, h100.replace("Fake H100 80GB", "Fake A100 80GB")).expect("A100s");
    project.run(&[]).assert_code(0);
    let from_a100 = project.path().join("a100.json");
    std::fs::copy(&results, &from_a100).expect("keep the A100's results");

    let lock_from = |from: &std::path::Path| {
        project
            .oomgate()
            .arg("lock")
            .arg(project.suite())
            .arg("--from")
            .arg(from)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("start oomgate lock")
    };
    for attempt in 0..10 {
        let _ = std::fs::remove_file(project.lock_path());
        let both = [lock_from(&from_h100), lock_from(&from_a100)];
        for child in both {
            let output = child.wait_with_output().expect("wait for oomgate lock");
            assert!(
                output.status.success(),
                "attempt {attempt}: {}",
                String::from_utf8_lossy(&output.stderr)
            );
        }
        let lock = std::fs::read_to_string(project.lock_path()).expect("lock");
        assert!(
            lock.contains("[testbeds.\"Fake A100 80GB ×2\".cases.c]")
                && lock.contains("[testbeds.\"Fake H100 80GB ×2\".cases.c]"),
            "attempt {attempt}: both testbeds in one file: {lock}"
        );
    }
    // The file held beside the lock is oomgate's, and stays.
    assert!(project.path().join(".suite.lock.held").is_file());
}

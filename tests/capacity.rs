//! Capacity search on real processes: a workload that fails above a
//! threshold, found exactly; locked; a shrink gated.

mod common;

use common::*;

/// A case that passes while `batch` is at most `limit`.
fn threshold_suite(limit: u64) -> String {
    format!(
        "[suite]\nname = \"cap\"\n[[case]]\nname = \"fits\"\ncommand = [\"sh\", \"-c\", \"test \\\"$1\\\" -le {limit}\", \"sh\", \"{{batch}}\"]\nsearch = {{ param = \"batch\", min = 8, max = 1024, step = 8 }}\n"
    )
}

fn probed(case: &serde_json::Value) -> Vec<u64> {
    case["capacity"]["probes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| p["value"].as_u64())
        .collect()
}

#[test]
fn the_largest_value_that_passes_is_found_locked_and_gated() {
    let project = Project::new(&threshold_suite(300));
    let run = project.run(&["--gpu", "off"]);
    run.assert_code(0);
    let case = run.case("fits");
    assert_eq!(case["status"], "passed", "{case:#}");
    assert_eq!(case["capacity"]["value"], 296, "{case:#}");
    assert_eq!(case["capacity"]["complete"], true);
    let probes = probed(&case);
    assert!(
        probes.len() <= 20,
        "2·log2(1024) probes at most: {probes:?}"
    );
    assert_eq!(
        &probes[..7],
        [8, 16, 32, 64, 128, 256, 512],
        "doubling first"
    );
    // The case is recorded as written: its definition does not move with
    // the capacity.
    assert!(
        case["command"].to_string().contains("{batch}"),
        "{}",
        case["command"]
    );
    let junit = std::fs::read_to_string(project.out().join("junit.xml")).expect("junit");
    assert!(junit.contains("largest batch that fits: 296"), "{junit}");
    let summary = std::fs::read_to_string(project.out().join("summary.md")).expect("summary");
    assert!(
        summary.contains("**`fits`**: `largest batch that fits: 296"),
        "{summary}"
    );

    let html = std::fs::read_to_string(project.out().join("report.html")).expect("html");
    assert!(
        html.contains("Peak memory against the searched value")
            && html.contains("capacity: batch = 296"),
        "the memory curve, with the capacity marked"
    );

    // Locked: an unchanged workload costs two probes.
    let lock = project.lock_from_results();
    lock.assert_code(0);
    let locked = std::fs::read_to_string(project.lock_path()).expect("lock file");
    assert!(locked.contains("capacity = 296"), "{locked}");
    let run = project.run(&["--gpu", "off"]);
    run.assert_code(0);
    let case = run.case("fits");
    assert_eq!(probed(&case), [296, 304]);
    let changes = &case["baseline"]["changes"];
    assert!(
        changes.as_array().is_none_or(Vec::is_empty),
        "the definition is unchanged: {changes}"
    );

    // A shrink within `capacity_tolerance` passes, within it.
    let tolerant = threshold_suite(290).replace("search = ", "capacity_tolerance = 1\nsearch = ");
    std::fs::write(project.suite(), tolerant).expect("suite");
    let run = project.run(&["--gpu", "off"]);
    run.assert_code(0);
    let within = check(&run.case("fits"), "baseline.capacity");
    assert_eq!(within["passed"], true, "{within:#}");
    assert_eq!(within["outcome"], "within", "{within:#}");
    let facts = &within["facts"]["capacity"];
    assert_eq!(facts["value"], 288, "{within:#}");
    assert_eq!(facts["locked"], 296, "{within:#}");
    assert_eq!(facts["least_accepted"], 288, "{within:#}");

    // A change that shrinks the capacity further is a regression naming both.
    std::fs::write(project.suite(), threshold_suite(250)).expect("suite");
    let run = project.run(&["--gpu", "off"]);
    run.assert_code(1);
    let case = run.case("fits");
    assert_eq!(case["capacity"]["value"], 248);
    let shrunk = check(&case, "baseline.capacity");
    assert_eq!(shrunk["passed"], false, "{shrunk:#}");
    assert_eq!(shrunk["outcome"], "breached", "{shrunk:#}");
    let facts = &shrunk["facts"]["capacity"];
    assert_eq!(facts["value"], 248, "{shrunk:#}");
    assert_eq!(facts["locked"], 296, "{shrunk:#}");
    assert_eq!(facts["least_accepted"], 296, "{shrunk:#}");
    // Regression: a shrink was `baseline` (a missing baseline's word), its
    // DELTA `+0.0%`, its phrase said three times, its TIME one probe's.
    assert_eq!(case["failure_kind"], "regression", "{case:#}");
    assert!(
        run.stderr.contains("296 → 248 regressed"),
        "the table shows the capacity's move: {}",
        run.stderr
    );
    assert_eq!(
        run.stderr.matches("largest batch that fits").count(),
        1,
        "{}",
        run.stderr
    );
    let probes_s: f64 = case["capacity"]["probes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| p["wall_time_s"].as_f64())
        .sum();
    assert!(
        (case["wall_time_s"].as_f64().unwrap_or_default() - probes_s).abs() < 1e-6,
        "the case's time is the search's: {case:#}"
    );
    let junit = std::fs::read_to_string(project.out().join("junit.xml")).expect("junit");
    assert!(junit.contains("type=\"regression\""), "{junit}");
    // `diff` of the lock and these results says the same.
    let diff = project.diff_lock_and_results();
    diff.assert_code(1);
    assert!(
        diff.stdout.contains("296 → 248 REGRESSED"),
        "{}",
        diff.stdout
    );
    // Accepted on purpose: the lock takes the new capacity and says which.
    let lock = project.lock_from_results();
    lock.assert_code(0);
    let said = lock.stderr;
    assert!(
        said.contains("fits: capacity regressed: batch 296 → 248"),
        "{said}"
    );
    let locked = std::fs::read_to_string(project.lock_path()).expect("lock file");
    assert!(locked.contains("capacity = 248"), "{locked}");
    assert!(
        locked.contains("capacity_of = \"batch, step 8\""),
        "{locked}"
    );
    // Regression: `diff` of the lock and a run where nothing fits passed,
    // while the run failed.
    std::fs::write(project.suite(), threshold_suite(1)).expect("suite");
    project.run(&["--gpu", "off"]).assert_code(1);
    let diff = project.diff_lock_and_results();
    diff.assert_code(1);
    assert!(diff.stdout.contains("248 → none FAILED"), "{}", diff.stdout);
    assert!(diff.stdout.contains("no batch fits"), "{}", diff.stdout);
    // A search of another step counts other things: not compared, and
    // what each counts recorded.
    std::fs::write(
        project.suite(),
        threshold_suite(250).replace("step = 8", "step = 16"),
    )
    .expect("suite");
    let run = project.run(&["--gpu", "off"]);
    run.assert_code(0);
    let other = check(&run.case("fits"), "baseline.capacity");
    assert_eq!(other["passed"], true, "{other:#}");
    assert_eq!(other["outcome"], "not-compared", "{other:#}");
    assert_eq!(
        other["facts"]["capacity"]["lock_counts"], "batch, step 8",
        "{other:#}"
    );
    assert_eq!(
        other["facts"]["capacity"]["counts"], "batch, step 16",
        "{other:#}"
    );
}

#[test]
fn nothing_fitting_fails_and_a_broken_command_stops_the_search() {
    let project = Project::new(&threshold_suite(1));
    let run = project.run(&["--gpu", "off"]);
    run.assert_code(1);
    // Without a lock the search's own check fails it: no value found.
    let case = run.case("fits");
    let none = check(&case, "baseline.capacity");
    assert_eq!(none["passed"], false, "{none:#}");
    assert_eq!(none["outcome"], "unknown", "{none:#}");
    assert!(none["facts"]["capacity"]["value"].is_null(), "{none:#}");
    assert_eq!(case["status"], "failed");
    assert_eq!(probed(&case), [8]);
    assert!(case["capacity"]["value"].is_null());

    let broken = Project::new(
        "[suite]\nname = \"cap\"\n[[case]]\nname = \"fits\"\ncommand = [\"./no-such-program\", \"{batch}\"]\nsearch = { param = \"batch\", max = 64 }\n",
    );
    let run = broken.run(&["--gpu", "off"]);
    run.assert_code(1);
    assert_eq!(
        probed(&run.case("fits")).len(),
        1,
        "an error is not searched on"
    );
}

#[test]
fn when_the_capacity_grows_the_larger_peaks_are_not_called_a_regression() {
    let suite = |budget_mib: u64| {
        format!(
            "[suite]\nname = \"cap\"\nsample_interval = \"20ms\"\n[[case]]\nname = \"grows\"\ncommand = [\"python3\", {}, \"--mib\", \"{{batch}}\", \"--hold\", \"50ms\"]\nbudget = {{ host = \"{budget_mib} MiB\" }}\nsearch = {{ param = \"batch\", min = 16, max = 512, step = 16 }}\n",
            toml_str(&workload("alloc.py"))
        )
    };
    let project = Project::new(&suite(128));
    project.run(&["--gpu", "off"]).assert_code(0);
    let lock = project.lock_from_results();
    lock.assert_code(0);
    // A larger budget lets a larger batch fit: its peak is far above the
    // locked one, and that is the size, not a regression.
    std::fs::write(project.suite(), suite(384)).expect("suite");
    let run = project.run(&["--gpu", "off"]);
    run.assert_code(0);
    let case = run.case("grows");
    let grew = check(&case, "baseline.capacity");
    assert_eq!(grew["passed"], true, "{grew:#}");
    assert_eq!(grew["outcome"], "improved", "{grew:#}");
    let (value, locked) = (
        grew["facts"]["capacity"]["value"].as_u64(),
        grew["facts"]["capacity"]["locked"].as_u64(),
    );
    assert!(value > locked, "{grew:#}");
    let host = check(&case, "baseline.host");
    assert_eq!(host["passed"], true, "{host:#}");
    assert_eq!(host["outcome"], "not-gated", "{host:#}");
    assert!(
        host["figure_bytes"].as_u64() > host["limit_bytes"].as_u64(),
        "far above the locked peak, and not a regression: {host:#}"
    );
    assert!(
        host["facts"]["baseline"]["not_compared"]["capacity-moved"].is_object(),
        "{host:#}"
    );
}

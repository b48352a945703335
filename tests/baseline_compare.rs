//! Comparing with a baseline without running, and comparing on noise:
//! `diff` of a lock and results (as the run judged), files older oomgates
//! wrote, and the spread a `lock --repeat` keeps.

mod common;

use common::baselines::*;
use common::fake_nvml::*;
use common::*;

#[test]
fn diff_compares_two_files_without_running() {
    let project = project(1000, "");
    project.lock(&[]).assert_code(0);
    project.rewrite_suite(&suite(1200, ""));
    project.run(&["--no-baseline"]).assert_code(0);
    let diff = project.diff_lock_and_results();
    diff.assert_code(1);
    let text = &diff.stdout;
    let row = text
        .lines()
        .find(|l| l.starts_with("c "))
        .unwrap_or_default();
    assert!(
        row.contains("1000.0 MiB") && row.contains("1.17 GiB") && row.contains("REGRESSED +20.0%"),
        "{text}"
    );
    assert!(text.contains("environment: no differences"), "{text}");
}

/// Regression: `diff` judged with oomgate's default tolerances and said
/// `ok +3.0%` of a figure the run had just failed with the suite's own.
#[test]
fn diff_judges_a_results_file_as_its_run_did() {
    let tight = "tolerance = { relative = \"1%\", absolute = \"1 MiB\" }";
    let project = project(1000, tight);
    project.lock(&[]).assert_code(0);
    let first_lock = project.path().join("first.lock");
    std::fs::copy(project.lock_path(), &first_lock).expect("copy lock");
    project.rewrite_suite(&suite(1030, tight));
    let run = project.run(&[]);
    run.assert_code(1);
    // Judged with the suite's own tolerance.
    let gpu = assert_breached(&run.case("c"), "baseline.gpu");
    assert_eq!(gpu["tolerance"]["relative"], 0.01, "{gpu:#}");
    assert_eq!(mib(&gpu["tolerance"]["absolute_bytes"]), Some(1), "{gpu:#}");
    let diff = |extra: &[&std::path::Path]| {
        let run = project.diff(&first_lock, &project.out().join("results.json"), extra);
        (run.code, run.stdout)
    };
    let (code, text) = diff(&[]);
    assert_eq!(code, Some(1), "{text}");
    let row = text
        .lines()
        .find(|l| l.starts_with("c "))
        .unwrap_or_default();
    assert!(row.contains("REGRESSED +3.0%"), "{text}");
    assert!(
        text.contains(
            "c [Fake H100 80GB ×2]: gpu peak 1.01 GiB > baseline 1000.0 MiB (+3.0%, tolerance 1% + 1.00 MiB)"
        ),
        "the run's own words, on its testbed: {text}"
    );
    assert!(text.contains("as recorded in"), "{text}");
    // `--suite` overrides what the file recorded.
    let loose = project.path().join("loose.toml");
    std::fs::write(&loose, suite(1030, "")).expect("suite");
    let (code, text) = diff(&["--suite".as_ref(), &loose]);
    assert_eq!(code, Some(0), "{text}");
    assert!(text.contains("ok +3.0%"), "{text}");
    assert!(text.contains("the suite's (--suite)"), "{text}");
    // Two locks compare with the tolerances the later one recorded.
    project.lock_from_results().assert_code(0);
    project
        .diff(&first_lock, &project.lock_path(), &[])
        .assert_code(1);
    let locked = std::fs::read_to_string(project.lock_path()).expect("lock");
    assert!(locked.contains(".cases.c.tolerance.gpu]"), "{locked}");
}

/// Files older oomgates wrote (`fixtures/results/`): `diff` and `lock
/// --from` read them into the one model and judge them as current ones.
#[test]
fn results_and_locks_of_older_oomgates_diff_and_lock() {
    let fixtures = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/results");
    let output = oomgate()
        .arg("diff")
        .arg(fixtures.join("schema-1-grows.lock"))
        .arg(fixtures.join("schema-1-regression.json"))
        .output()
        .expect("diff");
    let text = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(1), "{text}");
    let row = text
        .lines()
        .find(|l| l.starts_with("grows "))
        .unwrap_or_default();
    assert!(row.contains("REGRESSED"), "{text}");
    assert!(
        text.contains("oomgate's defaults") && text.contains("neither file records them"),
        "neither schema-1 file records its tolerances, and diff says so: {text}"
    );
    // Locked from those results: the regression is accepted, named.
    let dir = tempfile::tempdir().expect("tempdir");
    let suite = dir.path().join("grows.toml");
    std::fs::copy(fixtures.join("grows.toml"), &suite).expect("suite");
    let output = oomgate()
        .arg("lock")
        .arg(&suite)
        .arg("--from")
        .arg(fixtures.join("schema-1-regression.json"))
        .output()
        .expect("lock");
    let said = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{said}");
    assert!(said.contains("grows: host "), "{said}");
    let locked = std::fs::read_to_string(dir.path().join("grows.lock")).expect("lock");
    assert!(locked.contains("version = 4"), "{locked}");
}

/// `lock --repeat 3` keeps each figure's spread; a later run is a
/// regression only beyond `max(tolerance, spread_k × spread)`, and the
/// check records which bound applied. `spread_k = 0` turns it off.
#[test]
fn a_locked_spread_keeps_a_noisy_figure_from_failing_an_unchanged_build() {
    // Each launch allocates base + (n % 3) × 40 MiB: 1000, 1040, 1080 over
    // the three locked runs (a spread of 80 MiB), then base + 0.
    let script = format!(
        "n=$(cat n.txt); echo $((n + 1)) > n.txt; exec python3 {} --mib $(( $(cat base.txt) + (n % 3) * 40 )) --hold 300ms",
        workload("gpu_alloc.py")
    );
    let suite = |spread_k: &str| {
        format!(
            "[suite]\nname = \"noisy\"\nsample_interval = \"20ms\"\ntolerance = {{ relative = 0, absolute = \"1 MiB\"{spread_k} }}\n\
             [[case]]\nname = \"c\"\ncommand = [\"sh\", \"-c\", {}]\n",
            toml_str(&script)
        )
    };
    let project = Project::new(&suite("")).with_fake_gpus(&two_devices(false), Variant::Complete);
    std::fs::write(project.path().join("n.txt"), "0").expect("counter");
    std::fs::write(project.path().join("base.txt"), "1000").expect("base");
    project.lock(&["--repeat", "3"]).assert_code(0);
    let lock = std::fs::read_to_string(project.path().join("suite.lock")).expect("lock");
    assert!(
        lock.contains(&format!("gpu_spread_bytes = {}", 80 << 20)),
        "{lock}"
    );
    assert!(lock.contains("host_peak_source = "), "{lock}");
    assert!(lock.contains(".cases.c.host_floors]"), "{lock}");

    // 1200 MiB: 120 MiB over the locked 1080, within 3 × 80 MiB.
    std::fs::write(project.path().join("base.txt"), "1200").expect("base");
    let run = project.run(&[]);
    run.assert_code(0);
    // The bound: the locked 1080 MiB plus the wider of 0% + 1 MiB and
    // 3 × the 80 MiB spread.
    let spread_bound = |check: &serde_json::Value, applied: bool| {
        let spread = &check["facts"]["baseline"]["spread"];
        assert_eq!(mib(&spread["spread_bytes"]), Some(80), "{check:#}");
        assert_eq!(spread["applied"], applied, "{check:#}");
        assert_eq!(mib(&check["baseline_bytes"]), Some(1080), "{check:#}");
    };
    let within = check(&run.case("c"), "baseline.gpu");
    assert_eq!(within["passed"], true, "{within:#}");
    assert_eq!(within["outcome"], "within", "{within:#}");
    assert_eq!(mib(&within["figure_bytes"]), Some(1200), "{within:#}");
    assert_eq!(
        mib(&within["limit_bytes"]),
        Some(1080 + 3 * 80),
        "{within:#}"
    );
    spread_bound(&within, true);

    // 1400 MiB: beyond 3 × the spread too.
    std::fs::write(project.path().join("n.txt"), "3").expect("counter");
    std::fs::write(project.path().join("base.txt"), "1400").expect("base");
    let run = project.run(&[]);
    run.assert_code(1);
    let beyond = assert_breached(&run.case("c"), "baseline.gpu");
    assert_eq!(
        mib(&beyond["limit_bytes"]),
        Some(1080 + 3 * 80),
        "{beyond:#}"
    );
    spread_bound(&beyond, true);

    // With the spread turned off, 1200 MiB is a regression.
    std::fs::write(project.path().join("suite.toml"), suite(", spread_k = 0")).expect("suite");
    std::fs::write(project.path().join("n.txt"), "3").expect("counter");
    std::fs::write(project.path().join("base.txt"), "1200").expect("base");
    let run = project.run(&[]);
    run.assert_code(1);
    let off = assert_breached(&run.case("c"), "baseline.gpu");
    assert_eq!(mib(&off["figure_bytes"]), Some(1200), "{off:#}");
    assert_eq!(mib(&off["limit_bytes"]), Some(1080 + 1), "{off:#}");
    assert_eq!(off["tolerance"]["relative"], 0.0, "{off:#}");
}

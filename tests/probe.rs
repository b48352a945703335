//! The workload probe end to end: the oomgate_probe module
//! (python/oomgate_probe/) in a training loop (with a stand-in torch from
//! fixtures/python), read by oomgate while the case runs; limits on what it
//! reports.

mod common;

use std::path::Path;

use common::*;

fn python_path() -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    format!(
        "{}:{}",
        root.join("python").display(),
        root.join("fixtures/python").display()
    )
}

fn train_suite(args: &str, case_lines: &str) -> String {
    format!(
        "[suite]\nname = \"p\"\nsample_interval = \"20ms\"\n[[case]]\nname = \"train\"\ncommand = [\"python3\", {}, {args}]\nenv = {{ PYTHONPATH = {} }}\n{case_lines}\n",
        toml_str(&workload("probe_train.py")),
        toml_str(&python_path())
    )
}

#[test]
fn an_oom_names_the_interrupted_step_and_leaves_the_memory_summary() {
    let project = Project::new(&train_suite("\"--steps\", \"10\", \"--oom-at\", \"3\"", ""));
    let run = project.run(&[]);
    run.assert_code(1);
    let case = run.case("train");
    let message = case["message"].as_str().unwrap_or_default();
    assert!(
        message.starts_with("gpu-oom at step 3 (backward): tried to allocate 2.00 GiB on GPU 0"),
        "{message}"
    );
    assert_eq!(case["probe"]["last_step"]["step"], 3);
    assert_eq!(case["probe"]["last_step"]["phase"], "backward");
    assert_eq!(case["probe"]["peak_allocated"], 512 * MIB);
    assert_eq!(case["probe"]["malformed"], 0);
    let hints = case["diagnosis"]["hints"].to_string();
    assert!(
        !hints.contains("first step"),
        "step 3 is not the first: {hints}"
    );
    let summary = std::fs::read_to_string(project.out().join("cases/train/memory_summary.txt"))
        .expect("memory summary");
    assert!(summary.contains("stand-in memory summary"), "{summary}");
}

#[test]
fn snapshots_are_dumped_on_oom_and_at_exit() {
    let project = Project::new(
        &train_suite("\"--steps\", \"10\", \"--oom-at\", \"2\"", "").replace(
            "env = { PYTHONPATH",
            "env = { OOMGATE_SNAPSHOT = \"1\", PYTHONPATH",
        ),
    );
    project.run(&[]).assert_code(1);
    assert!(
        project
            .out()
            .join("cases/train/memory_snapshot_oom.pickle")
            .is_file()
    );

    let project = Project::new(&train_suite("\"--steps\", \"3\"", "").replace(
        "env = { PYTHONPATH",
        "env = { OOMGATE_SNAPSHOT = \"1\", PYTHONPATH",
    ));
    project.run(&[]).assert_code(0);
    assert!(
        project
            .out()
            .join("cases/train/memory_snapshot.pickle")
            .is_file()
    );
}

/// The snapshot a case leaves is read into allocation sites; against a
/// lock, a regressed allocator peak names the site that grew, in the
/// message, JUnit, summary.md, `oomgate diff` and `oomgate sites`.
#[test]
fn a_regression_names_the_allocation_site_that_grew() {
    let suite = |base: &str| {
        train_suite(
            &format!("\"--steps\", \"3\", \"--base-mib\", \"{base}\""),
            "",
        )
        .replace(
            "env = { PYTHONPATH",
            "env = { OOMGATE_SNAPSHOT = \"exit\", PYTHONPATH",
        )
    };
    let mut project = Project::new(&suite("512"));
    let run = project.run(&[]);
    run.assert_code(0);
    let sites = &run.case("train")["allocation_sites"];
    assert_eq!(sites["files"][0], "memory_snapshot.pickle", "{sites:#}");
    assert_eq!(sites["from"], "peak");
    assert_eq!(sites["allocated_bytes"], 500 * MIB);
    assert_eq!(
        sites["sites"][0]["site"], "model.py:10 load",
        "relative to the case's cwd: {sites:#}"
    );
    assert_eq!(sites["sites"][1]["site"], "model.py:88 attention");
    project.lock_from_results().assert_code(0);
    let lock = std::fs::read_to_string(project.lock_path()).expect("lock");
    assert!(
        lock.contains("model.py:88 attention"),
        "the lock keeps the sites:\n{lock}"
    );

    // The allocator's peak grows by 588 MiB, and so does `attention`.
    std::fs::write(project.suite(), suite("1100")).expect("suite");
    project
        .env
        .push(("STANDIN_SNAPSHOT_GROW_MIB".into(), "500".into()));
    let run = project.run(&[]);
    run.assert_code(1);
    let message = run.message("train");
    let grew = "grew most: model.py:88 attention +500.0 MiB (100.0 MiB → 600.0 MiB)";
    assert!(message.contains(grew), "{message}");
    let junit = std::fs::read_to_string(project.out().join("junit.xml")).expect("junit");
    assert!(junit.contains(grew), "{junit}");
    let summary = std::fs::read_to_string(project.out().join("summary.md")).expect("summary.md");
    assert!(
        summary.contains("model.py:88 attention +500.0 MiB"),
        "{summary}"
    );
    let diff = project.diff_lock_and_results();
    diff.assert_code(1);
    assert!(diff.stdout.contains(grew), "{}", diff.stdout);

    let output = project
        .oomgate()
        .arg("sites")
        .arg(project.out().join("results.json"))
        .args(["--case", "train"])
        .output()
        .expect("oomgate sites");
    let text = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(0), "{text}");
    assert!(
        text.starts_with("train: 1000.0 MiB allocated at the peak"),
        "{text}"
    );
    assert!(
        text.contains("model.py:88 attention  600.0 MiB  1"),
        "{text}"
    );
}

#[test]
fn limits_on_metrics_and_probe_figures() {
    let limits = "limits = { \"metric.tokens_per_s\" = \">= 1500\", \"probe.peak_allocated\" = \"<= 1 GiB\" }";
    let project = Project::new(&train_suite(
        "\"--steps\", \"4\", \"--tokens-per-s\", \"1800\"",
        limits,
    ));
    let run = project.run(&[]);
    run.assert_code(0);
    let throughput = check(&run.case("train"), "limit.metric.tokens_per_s");
    assert_eq!(throughput["passed"], true, "{throughput:#}");
    assert_eq!(throughput["outcome"], "within", "{throughput:#}");
    assert_eq!(
        throughput["facts"]["limit"]["value"], 1800.0,
        "{throughput:#}"
    );
    assert_eq!(
        throughput["facts"]["limit"]["text"], ">= 1500",
        "{throughput:#}"
    );

    // Throughput halved: a memory fix that costs this much is not a fix.
    let project = Project::new(&train_suite(
        "\"--steps\", \"4\", \"--tokens-per-s\", \"900\"",
        limits,
    ));
    let run = project.run(&[]);
    run.assert_code(1);
    let case = run.case("train");
    assert_eq!(case["failure_kind"], "limit", "{case:#}");
    let throughput = check(&case, "limit.metric.tokens_per_s");
    assert_eq!(throughput["passed"], false, "{throughput:#}");
    assert_eq!(throughput["outcome"], "breached", "{throughput:#}");
    assert_eq!(
        throughput["facts"]["limit"]["value"], 900.0,
        "{throughput:#}"
    );
    assert_eq!(
        case["checks"]
            .as_array()
            .map(|checks| checks.iter().filter(|c| c["passed"] == false).count()),
        Some(1),
        "only the throughput failed: {case:#}"
    );
    let junit = std::fs::read_to_string(project.out().join("junit.xml")).expect("junit");
    assert!(junit.contains("type=\"limit\""), "{junit}");

    let project = Project::new(&train_suite(
        "\"--steps\", \"4\", \"--leak-mib\", \"400\"",
        "limits = { \"probe.peak_allocated\" = \"<= 1 GiB\", \"metric.loss\" = \"< 3\" }",
    ));
    let run = project.run(&[]);
    run.assert_code(1);
    let case = run.case("train");
    let allocated = check(&case, "limit.probe.peak_allocated");
    assert_eq!(allocated["passed"], false, "{allocated:#}");
    assert_eq!(allocated["outcome"], "breached", "{allocated:#}");
    assert_eq!(
        allocated["facts"]["limit"]["value"].as_f64(),
        case["probe"]["peak_allocated"].as_f64(),
        "{case:#}"
    );
    assert!(
        allocated["facts"]["limit"]["value"].as_f64() > Some((1024 * MIB) as f64),
        "{allocated:#}"
    );
    // Never reported: unverified, which fails.
    let loss = check(&case, "limit.metric.loss");
    assert_eq!(loss["passed"], false, "{loss:#}");
    assert_eq!(loss["outcome"], "unknown", "{loss:#}");
    assert!(loss["facts"]["limit"]["value"].is_null(), "{loss:#}");
}

#[test]
fn malformed_and_thousands_of_lines_are_read_without_failing() {
    let script = "import os\nwith open(os.environ['OOMGATE_METRICS'], 'a') as f:\n    for i in range(5000):\n        f.write('{\"event\":\"step\",\"step\":%d,\"phase\":\"forward\",\"allocated\":%d}\\n' % (i, i))\n    f.write('this is not json\\n{\"event\":\"metric\"}\\n' + 'x' * 100000 + '\\n')\n";
    let suite = format!(
        "[suite]\nname = \"p\"\n[[case]]\nname = \"noisy\"\ncommand = [\"python3\", \"-c\", {}]\nconcurrency = 2\n",
        toml_str(script)
    );
    let project = Project::new(&suite);
    let run = project.run(&[]);
    run.assert_code(0);
    let probe = &run.case("noisy")["probe"];
    assert_eq!(probe["lines"], 2 * 5003, "{probe:#}");
    assert_eq!(probe["malformed"], 2 * 3);
    assert_eq!(probe["last_step"]["step"], 4999);
    assert_eq!(probe["peak_allocated"], 4999);
    assert!(project.out().join("cases/noisy/metrics.1.jsonl").is_file());
}

#[test]
fn the_helper_is_a_no_op_outside_oomgate() {
    let output = std::process::Command::new("python3")
        .env("PYTHONPATH", python_path())
        .env_remove("OOMGATE_METRICS")
        .args(["-c", "import oomgate_probe as p\nassert not p.enabled()\np.step('forward')\np.metric('x', 1)\nwith p.guard():\n    pass\nprint('ok')"])
        .output()
        .expect("python3");
    assert_eq!(
        String::from_utf8_lossy(&output.stdout).trim(),
        "ok",
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

#[test]
fn a_bad_limit_is_refused_with_its_location() {
    let project = Project::new(&train_suite(
        "\"--steps\", \"1\"",
        "limits = { \"metric.x\" = \"about 3\", \"gpu.peak\" = \"< 1\" }",
    ));
    let run = project.run(&[]);
    run.assert_code(2);
    assert!(
        run.stderr.contains("`about 3` is not a limit"),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr
            .contains("`gpu.peak` is not a figure limits can check"),
        "{}",
        run.stderr
    );
}

#[test]
fn a_leak_over_probe_steps_fails_and_a_steady_noisy_loop_does_not() {
    let leak = "leak = { warmup = 3, max_growth = \"64 MiB\" }";
    let project = Project::new(&train_suite(
        "\"--steps\", \"30\", \"--leak-mib\", \"8\"",
        leak,
    ));
    let run = project.run(&[]);
    run.assert_code(1);
    let case = run.case("train");
    assert_eq!(case["failure_kind"], "leak", "{case:#}");
    let leak_check = check(&case, "leak");
    assert_eq!(leak_check["passed"], false, "{leak_check:#}");
    assert_eq!(leak_check["outcome"], "breached", "{leak_check:#}");
    assert_eq!(
        leak_check["facts"]["leak"]["figures"]["source"],
        serde_json::json!({"probe-steps": {"phase": "forward"}}),
        "{leak_check:#}"
    );
    assert_eq!(
        case["leak"]["source"],
        serde_json::json!({"probe-steps": {"phase": "forward"}}),
        "{case:#}"
    );
    assert_eq!(case["leak"]["iterations"], 27, "{case:#}");
    assert_eq!(
        case["leak"]["growth_bytes"],
        208.0 * 1024.0 * 1024.0,
        "{case:#}"
    );
    let junit = std::fs::read_to_string(project.out().join("junit.xml")).expect("junit");
    assert!(junit.contains("type=\"leak\""), "{junit}");
    // report.html draws the steps and the fitted trend; results.json has it.
    let html = std::fs::read_to_string(project.out().join("report.html")).expect("html");
    assert!(html.contains("What the probe reported"), "{html}");
    assert!(
        html.contains("leak trend: +8.00 MiB per step after warm-up"),
        "{html}"
    );
    let trend = &run.case("train")["leak"];
    assert_eq!(trend["warmup"], 3, "{trend}");
    assert_eq!(
        trend["slope_bytes_per_iteration"],
        8.0 * 1024.0 * 1024.0,
        "{trend}"
    );

    let project = Project::new(&train_suite(
        "\"--steps\", \"30\", \"--noise-mib\", \"40\"",
        leak,
    ));
    let run = project.run(&[]);
    run.assert_code(0);
    let steady = check(&run.case("train"), "leak");
    assert_eq!(steady["passed"], true, "{steady:#}");
    assert_eq!(steady["outcome"], "within", "{steady:#}");
    assert_eq!(
        steady["facts"]["leak"]["figures"]["source"],
        serde_json::json!({"probe-steps": {"phase": "forward"}}),
        "{steady:#}"
    );
}

#[test]
fn an_oom_at_the_first_step_suggests_a_smaller_input() {
    let project = Project::new(&train_suite("\"--steps\", \"10\", \"--oom-at\", \"0\"", ""));
    let run = project.run(&[]);
    run.assert_code(1);
    let case = run.case("train");
    assert!(
        case["message"]
            .as_str()
            .unwrap_or_default()
            .starts_with("gpu-oom at step 0 (backward)"),
        "{case:#}"
    );
    let hints = case["diagnosis"]["hints"].to_string();
    assert!(hints.contains("The OOM came at the first step the workload reported (step 0): try a smaller micro-batch"), "{hints}");
}

#[test]
fn the_baseline_compares_the_probes_allocated_peak() {
    let project = Project::new(&train_suite("\"--steps\", \"4\"", ""));
    let output = project
        .oomgate()
        .arg("lock")
        .arg(project.suite())
        .arg("--out")
        .arg(project.out())
        .output()
        .expect("lock");
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let lock = std::fs::read_to_string(project.path().join("suite.lock")).expect("lock");
    assert!(
        lock.contains(&format!("probe_peak_allocated_bytes = {}", 512 * MIB)),
        "{lock}"
    );

    std::fs::write(
        project.suite(),
        train_suite("\"--steps\", \"4\", \"--leak-mib\", \"200\"", ""),
    )
    .expect("suite");
    let run = project.run(&[]);
    run.assert_code(1);
    let case = run.case("train");
    assert_eq!(case["failure_kind"], "regression", "{case:#}");
    let allocated = assert_breached(&case, "baseline.allocated");
    assert_eq!(allocated["baseline_bytes"], 512 * MIB, "{allocated:#}");
    assert_eq!(
        allocated["figure_bytes"], case["probe"]["peak_allocated"],
        "{case:#}"
    );
    assert_eq!(allocated["tolerance"]["relative"], 0.05, "{allocated:#}");
}

/// A workload reports its own allocator figures (another framework, or a
/// region it measured): they replace torch's and are what `limits` judge;
/// a misspelt figure is an error in the workload, not a figure dropped.
#[test]
fn a_step_carries_the_figures_the_workload_gives() {
    let script = "import oomgate_probe as p\n\
                  p.step('load', allocated=1 << 20, peak_allocated=3 << 30, peak_reserved=4 << 30)\n";
    let typo = "import oomgate_probe as p\np.step('load', peak_alocated=1)\n";
    let project = Project::new(&format!(
        "[suite]\nname = \"p\"\n\
         [defaults]\nenv = {{ PYTHONPATH = {path} }}\n\
         [[case]]\nname = \"given\"\ncommand = [\"python3\", \"-c\", {script}]\n\
         limits = {{ \"probe.peak_allocated\" = \"<= 2 GiB\" }}\n\
         [[case]]\nname = \"typo\"\ncommand = [\"python3\", \"-c\", {typo}]\n",
        path = toml_str(&python_path()),
        script = toml_str(script),
        typo = toml_str(typo),
    ));
    let run = project.run(&[]);
    run.assert_code(1);
    let given = run.case("given");
    assert_eq!(
        given["probe"]["peak_allocated"],
        3 * 1024 * MIB,
        "{given:#}"
    );
    assert_eq!(given["probe"]["peak_reserved"], 4 * 1024 * MIB, "{given:#}");
    // The limit judges the figure the workload gave.
    let limit = check(&given, "limit.probe.peak_allocated");
    assert_eq!(limit["outcome"], "breached", "{limit:#}");
    assert_eq!(
        limit["facts"]["limit"]["value"],
        (3 * 1024 * MIB) as f64,
        "{limit:#}"
    );
    let typo = run.case("typo");
    assert_eq!(typo["status"], "failed", "{typo:#}");
    let log =
        std::fs::read_to_string(project.out().join("cases/typo/stderr.log")).unwrap_or_default();
    assert!(
        log.contains("unexpected keyword argument 'peak_alocated'"),
        "{log}"
    );
}

/// JAX, through its stand-in (fixtures/python/jax): the probe reads each
/// device's `memory_stats()` (a dictionary recorded in XLA's format) into
/// the step's figures, says once that JAX preallocates the GPU (NVML's
/// figure then being its pool), and, on CPU, where `memory_stats()` is
/// None, that there are no figures.
#[test]
fn the_probe_reads_jax_memory_stats_and_says_what_they_cannot_give() {
    let script = "import jax, oomgate_probe as p\n\
                  for i in range(3):\n    p.step('train')\n";
    let project = Project::new(&format!(
        "[suite]\nname = \"jax\"\n\
         [defaults]\nenv = {{ PYTHONPATH = {path} }}\n\
         [[case]]\nname = \"gpu\"\ncommand = [\"python3\", \"-c\", {script}]\n\
         env = {{ FAKE_JAX_DEVICES = \"2\" }}\n\
         [[case]]\nname = \"on-demand\"\ncommand = [\"python3\", \"-c\", {script}]\n\
         env = {{ XLA_PYTHON_CLIENT_PREALLOCATE = \"false\" }}\n\
         [[case]]\nname = \"cpu\"\ncommand = [\"python3\", \"-c\", {script}]\n\
         env = {{ FAKE_JAX_PLATFORM = \"cpu\" }}\n",
        path = toml_str(&python_path()),
        script = toml_str(script),
    ));
    let run = project.run(&[]);
    run.assert_code(0);
    // Two GPUs of the recorded statistics: their sums.
    let gpu = run.case("gpu");
    let probe = &gpu["probe"];
    assert_eq!(probe["allocator"], "jax", "{probe:#}");
    assert_eq!(probe["peak_allocated"], 2 * 3 * 1024 * MIB, "{probe:#}");
    assert_eq!(probe["peak_reserved"], 2 * 61_203_283_968u64, "{probe:#}");
    let notes = probe["allocator_notes"].as_array().expect("notes");
    assert_eq!(notes.len(), 1, "said once over three steps: {probe:#}");
    let note = notes[0].as_str().unwrap_or_default();
    assert!(
        note.contains("XLA_PYTHON_CLIENT_PREALLOCATE is unset")
            && note.contains("NVML's figure is that pool"),
        "{note}"
    );
    let on_demand = run.case("on-demand");
    assert!(
        on_demand["probe"]["allocator_notes"][0]
            .as_str()
            .is_some_and(|n| n.contains("follows its use")),
        "{on_demand:#}"
    );
    // A CPU: no figure at all (never a zero), and why.
    let cpu = run.case("cpu");
    let probe = &cpu["probe"];
    assert!(probe["peak_allocated"].is_null(), "{probe:#}");
    assert!(
        probe["allocator_notes"][0]
            .as_str()
            .is_some_and(|n| n.contains("memory_stats() is None on its cpu devices")),
        "{probe:#}"
    );
    // The case's details (JUnit's system-out) say it too.
    let junit = std::fs::read_to_string(project.out().join("junit.xml")).expect("junit.xml");
    assert!(junit.contains("allocator:   jax"), "{junit}");
    assert!(
        junit.contains(r#"<property name="probe.allocator" value="jax"/>"#)
            && junit.contains(&format!(
                r#"<property name="probe.peak_allocated_bytes" value="{}"/>"#,
                2 * 3 * 1024 * MIB
            )),
        "{junit}"
    );
}

/// The real `jax` (CPU, from PyPI, pinned by scripts/jax-venv.sh): its
/// CPU device's `memory_stats()` is None, and the probe says so instead of
/// reporting a figure.
#[test]
fn with_the_real_jax_on_cpu_the_probe_says_there_are_no_figures() {
    let python = common::pytest::jax_python();
    let script = "import jax, jax.numpy as jnp, oomgate_probe as p\n\
                  x = jnp.ones((256, 256))\n\
                  p.step('train')\n\
                  (x @ x).block_until_ready()\n\
                  p.step('train')\n";
    let project = Project::new(&format!(
        "[suite]\nname = \"jax\"\n\
         [[case]]\nname = \"cpu\"\ncommand = [{python}, \"-c\", {script}]\n\
         env = {{ PYTHONPATH = {path}, JAX_PLATFORMS = \"cpu\" }}\n",
        python = toml_str(&python.display().to_string()),
        path = toml_str(
            &Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("python")
                .display()
                .to_string()
        ),
        script = toml_str(script),
    ));
    let run = project.run(&[]);
    run.assert_code(0);
    let probe = &run.case("cpu")["probe"];
    assert_eq!(probe["allocator"], "jax", "{probe:#}");
    assert!(probe["peak_allocated"].is_null(), "{probe:#}");
    let notes = probe["allocator_notes"].as_array().expect("notes");
    assert_eq!(notes.len(), 1, "{probe:#}");
    assert!(
        notes[0]
            .as_str()
            .is_some_and(|n| n.contains("memory_stats() is None on its cpu devices")),
        "{probe:#}"
    );
}

#[test]
fn the_jax_example_suite_is_valid() {
    let stdout = check_in_repository("examples/jax/train.toml");
    assert!(
        stdout.contains("env:         XLA_PYTHON_CLIENT_PREALLOCATE=false"),
        "{stdout}"
    );
    assert!(
        stdout.contains("parity: train-on-demand vs train-preallocated\n  rule:        lhs <= 1.05 * rhs on probe.peak_allocated"),
        "{stdout}"
    );
}

//! Several cases at once: a pool of fake GPUs (`--gpus`), `--jobs` for
//! host-only suites, packing (`--pack`) with its retry alone, and the
//! mistakes the pool flags refuse. The real binary, real processes, the
//! fake NVML driver.

mod common;

use std::collections::{BTreeMap, BTreeSet};

use common::fake_nvml::*;
use common::*;

/// `n` fake 8 GiB GPUs, 256 MiB in use on each before anything runs.
fn gpus(n: usize) -> (String, Vec<String>) {
    let uuids: Vec<String> = (0..n)
        .map(|i| format!("GPU-{i}{i}{i}{i}{i}{i}{i}{i}-aaaa-bbbb-cccc-dddddddddddd"))
        .collect();
    let mut config = "driver 550.54.15\ncuda 12040\n".to_string();
    for uuid in &uuids {
        config.push_str(&device(uuid, 8 * GIB, 256 * MIB, false, "Fake H100 80GB"));
    }
    (config, uuids)
}

/// A suite of GPU cases `g0`, `g1`, … each allocating its own amount
/// (100 MiB × (i + 1)) on the GPU it is given and holding it.
fn gpu_cases(n: usize, hold: &str, extra: &str) -> String {
    let mut suite =
        "[suite]\nname = \"pool\"\nsample_interval = \"20ms\"\n[defaults]\nkill_grace = \"1s\"\n"
            .to_string();
    for i in 0..n {
        suite.push_str(&format!(
            "[[case]]\nname = \"g{i}\"\ncommand = [\"python3\", {}, \"--mib\", \"{}\", \"--hold\", \"{hold}\"]\n{extra}\n",
            toml_str(&workload("gpu_alloc.py")),
            100 * (i + 1)
        ));
    }
    suite
}

/// Like [`gpu_cases`], but NVML reports other pids than the workloads'
/// (a container): only a device's rise can stand for a case.
fn container_cases(n: usize, hold: &str, extra: &str) -> String {
    gpu_cases(n, hold, extra).replace("\"--hold\"", "\"--pid-offset\", \"1000000\", \"--hold\"")
}

/// When each case ran: start and end, in milliseconds since the epoch.
fn spans(results: &serde_json::Value) -> BTreeMap<String, (i64, i64)> {
    results["cases"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|case| {
            let started = chrono::DateTime::parse_from_rfc3339(
                case["started_at"].as_str().expect("started_at"),
            )
            .expect("an RFC 3339 time")
            .timestamp_millis();
            let wall = (case["wall_time_s"].as_f64().expect("wall time") * 1000.0) as i64;
            let id = case["id"].as_str().expect("id").to_string();
            (id, (started, started + wall))
        })
        .collect()
}

fn overlap(a: (i64, i64), b: (i64, i64)) -> bool {
    a.0 < b.1 && b.0 < a.1
}

/// The most cases running at one moment.
fn most_at_once(spans: &BTreeMap<String, (i64, i64)>) -> usize {
    spans
        .values()
        .map(|&(start, _)| {
            spans
                .values()
                .filter(|&&(s, e)| s <= start && start < e)
                .count()
        })
        .max()
        .unwrap_or(0)
}

/// One fake GPU and two cases that pack onto it (each declares 1 GiB):
/// `a` runs gpu_alloc.py with `a_args` and writes a file once it holds its
/// memory; `b` waits for that file, then runs with `b_args` (TOML strings).
fn packed_pair(a_args: &str, b_args: &str) -> Project {
    let (config, _) = gpus(1);
    let project = Project::new("").with_fake_gpus(&config, Variant::Complete);
    let held = toml_str(&project.path().join("a-holds").display().to_string());
    let gpu_alloc = toml_str(&workload("gpu_alloc.py"));
    let suite = format!(
        "[suite]\nname = \"pack\"\nsample_interval = \"20ms\"\n[defaults]\nkill_grace = \"1s\"\ngpu_memory = \"1 GiB\"\n\
         [[case]]\nname = \"a\"\ncommand = [\"python3\", {gpu_alloc}, {a_args}, \"--allocated\", {held}]\n\
         [[case]]\nname = \"b\"\ncommand = [\"python3\", {gpu_alloc}, \"--wait-for\", {held}, {b_args}]\n"
    );
    std::fs::write(project.suite(), suite).expect("write suite");
    project
}

#[test]
fn eight_one_gpu_cases_on_four_gpus_overlap_never_share_and_keep_their_own_peaks() {
    let (config, uuids) = gpus(4);
    let project =
        Project::new(&gpu_cases(8, "1500ms", "")).with_fake_gpus(&config, Variant::Complete);
    let run = project.run(&["--gpus", "all"]);
    run.assert_code(0);
    let results = run.results();
    let ids: Vec<&str> = results["cases"]
        .as_array()
        .expect("cases")
        .iter()
        .map(|c| c["id"].as_str().expect("id"))
        .collect();
    assert_eq!(
        ids,
        ["g0", "g1", "g2", "g3", "g4", "g5", "g6", "g7"],
        "results keep the suite's order"
    );
    let mut by_gpu: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for i in 0..8 {
        let id = format!("g{i}");
        let case = run.case(&id);
        let gpu = case["cuda_visible_devices"]
            .as_str()
            .expect("the pool sets CUDA_VISIBLE_DEVICES")
            .to_string();
        assert!(uuids.contains(&gpu), "one GPU of the pool, by UUID: {gpu}");
        assert_eq!(case["gpus"], 1);
        // Its own allocation, by process — and the device's own rise is
        // that allocation alone: no other case was on the GPU meanwhile.
        let own = 100 * (i as u64 + 1);
        assert_eq!(case["gpu_peak_bytes"].as_u64(), Some(own * MIB), "{case:#}");
        assert_eq!(case["gpu_peak_method"], "sampled@20ms");
        let device = &case["gpu_devices"][0];
        assert_eq!(case["gpu_devices"].as_array().map(Vec::len), Some(1));
        assert_eq!(device["uuid"].as_str(), Some(gpu.as_str()));
        assert_eq!(device["before_bytes"].as_u64(), Some(256 * MIB));
        assert_eq!(
            device["device_peak_bytes"].as_u64(),
            Some((256 + own) * MIB),
            "another case shared {gpu}: {device:#}"
        );
        by_gpu.entry(gpu).or_default().push(id);
    }
    assert_eq!(
        by_gpu.len(),
        4,
        "every GPU of the pool was used: {by_gpu:?}"
    );
    let spans = spans(&results);
    for cases in by_gpu.values() {
        for a in cases {
            for b in cases.iter().filter(|b| *b != a) {
                assert!(
                    !overlap(spans[a], spans[b]),
                    "{a} and {b} ran on one GPU at once: {spans:?}"
                );
            }
        }
    }
    assert!(
        most_at_once(&spans) >= 2,
        "cases on different GPUs overlap: {spans:?}"
    );
    let scheduling = &results["scheduling"];
    assert_eq!(scheduling["jobs"], 4);
    assert_eq!(scheduling["pool"].as_array().map(Vec::len), Some(4));
}

#[test]
fn a_host_only_suite_runs_in_parallel_with_jobs_each_peak_its_own() {
    let mut suite = "[suite]\nname = \"host\"\nsample_interval = \"20ms\"\n".to_string();
    for (i, mib) in [64, 128, 192, 256].iter().enumerate() {
        suite.push_str(&format!(
            "[[case]]\nname = \"h{i}\"\ncommand = [\"python3\", {}, \"--mib\", \"{mib}\", \"--hold\", \"1500ms\"]\n",
            toml_str(&workload("alloc.py"))
        ));
    }
    let project = Project::new(&suite);
    // With a cgroup per case, and from /proc, where each case's figure is
    // its own process tree's: never a neighbour's.
    for method in ["cgroup", "procfs"] {
        let run = project.run(&["--jobs", "4", "--gpu", "off", "--host-method", method]);
        check_own_peaks(&run);
    }
}

fn check_own_peaks(run: &Run) {
    run.assert_code(0);
    let results = run.results();
    for (i, mib) in [64u64, 128, 192, 256].iter().enumerate() {
        let case = run.case(&format!("h{i}"));
        let peak = case["host_peak_bytes"].as_u64().expect("host peak") / MIB;
        // The allocation plus the interpreter, never a neighbour's memory.
        assert!(
            peak >= *mib && peak < mib + 48,
            "h{i}: {peak} MiB for {mib} MiB: {case:#}"
        );
    }
    assert!(
        most_at_once(&spans(&results)) >= 2,
        "cases overlap: {:?}",
        spans(&results)
    );
    assert_eq!(results["scheduling"]["jobs"], 4);
    assert!(results["scheduling"]["pool"].is_null());
}

#[test]
fn a_failing_case_stops_only_itself_when_cases_run_at_once() {
    let suite = format!(
        "[suite]\nname = \"mixed\"\nsample_interval = \"20ms\"\n\
         [[case]]\nname = \"slow\"\ncommand = [\"python3\", {alloc}, \"--mib\", \"32\", \"--hold\", \"2s\", \"--child-mib\", \"16\"]\n\
         [[case]]\nname = \"fails\"\ncommand = [\"python3\", {alloc}, \"--mib\", \"16\", \"--hold\", \"200ms\", \"--exit\", \"3\"]\n",
        alloc = toml_str(&workload("alloc.py"))
    );
    let project = Project::new(&suite);
    let run = project.run(&["--jobs", "2", "--gpu", "off"]);
    run.assert_code(1);
    assert_eq!(run.case("fails")["status"], "failed");
    let slow = run.case("slow");
    assert_eq!(slow["status"], "passed", "{slow:#}");
    assert_eq!(slow["leftover_processes"], 0);
    assert!(
        slow["wall_time_s"].as_f64().unwrap_or(0.0) >= 1.9,
        "the neighbour's stop did not cut it short: {slow:#}"
    );
}

#[test]
fn cases_start_longest_first_by_the_previous_run() {
    let (config, _) = gpus(1);
    // One GPU, two jobs: GPU cases run one after another, in launch order.
    let suite = gpu_cases(3, "100ms", "");
    let project = Project::new(&suite).with_fake_gpus(&config, Variant::Complete);
    project.run(&["--gpus", "0", "--jobs", "2"]).assert_code(0);
    // Pretend g2 took longest last time, then g0, then g1.
    let path = project.out().join("results.json");
    let mut previous = read_json(&path);
    for case in previous["cases"].as_array_mut().expect("cases") {
        let wall = match case["id"].as_str() {
            Some("g0") => 5.0,
            Some("g1") => 1.0,
            _ => 9.0,
        };
        case["wall_time_s"] = serde_json::json!(wall);
    }
    std::fs::write(&path, previous.to_string()).expect("write results");
    let run = project.run(&["--gpus", "0", "--jobs", "2"]);
    run.assert_code(0);
    let spans = spans(&run.results());
    let mut order: Vec<(&i64, &String)> = spans.iter().map(|(id, (s, _))| (s, id)).collect();
    order.sort();
    let order: Vec<&str> = order.iter().map(|(_, id)| id.as_str()).collect();
    assert_eq!(order, ["g2", "g0", "g1"], "{spans:?}");
    assert_eq!(run.results()["scheduling"]["ordered_by_past_times"], true);
}

#[test]
fn packed_cases_share_a_gpu_and_one_that_fails_sharing_is_retried_alone() {
    // Each really takes 5 GiB of the GPU's 8: `b`, allocating once `a`
    // holds, runs out of memory while sharing; alone, after `a`, it fits.
    let project = packed_pair(
        "\"--mib\", \"5120\", \"--hold\", \"1500ms\"",
        "\"--mib\", \"5120\", \"--hold\", \"100ms\"",
    );
    let uuids = gpus(1).1;
    let mut command = project.run_command();
    command
        .args(["--gpus", "all", "--pack", "--progress", "lines"])
        .env("GITHUB_ACTIONS", "true")
        .env_remove("GITHUB_STEP_SUMMARY");
    let run = project.finish(command);
    run.assert_code(0);
    assert!(
        run.stdout.contains("::warning title=oomgate flaky b::"),
        "{}",
        run.stdout
    );
    let a = run.case("a");
    let b = run.case("b");
    assert_eq!(a["status"], "passed");
    assert_eq!(
        a["gpu_sharing"][0]["uuid"].as_str(),
        Some(uuids[0].as_str())
    );
    assert_eq!(a["gpu_sharing"][0]["with"], serde_json::json!(["b"]));
    assert_eq!(
        a["gpu_peak_bytes"].as_u64(),
        Some(5120 * MIB),
        "per process, its own"
    );
    assert_eq!(b["status"], "passed", "{b:#}");
    let retried = &b["retried_alone"];
    assert_eq!(retried["flaky"], true, "{b:#}");
    assert_eq!(retried["first_attempt"]["failure_kind"], "gpu-oom");
    assert_eq!(
        retried["first_attempt"]["gpu_sharing"][0]["with"],
        serde_json::json!(["a"])
    );
    assert!(b["gpu_sharing"].is_null(), "alone: {b:#}");
    assert_eq!(run.results()["summary"]["flaky"], 1);
    assert!(run.stderr.contains("FLAKY"), "{}", run.stderr);
    assert!(run.stderr.contains("1 flaky"), "{}", run.stderr);
    let junit = std::fs::read_to_string(project.out().join("junit.xml")).expect("junit");
    assert!(
        junit.contains("<flakyFailure") && junit.contains("gpu-oom"),
        "{junit}"
    );
    let html = std::fs::read_to_string(project.out().join("report.html")).expect("html");
    assert!(
        html.contains("shared GPU 0 with b"),
        "report.html names the neighbour"
    );
    assert!(html.contains("passed (flaky)"));
    let summary = std::fs::read_to_string(project.out().join("summary.md")).expect("summary");
    assert!(summary.contains("passed (flaky"), "{summary}");
    assert!(
        project
            .out()
            .join("cases/b/timeline.shared-attempt.json")
            .is_file(),
        "the shared attempt's timeline is kept apart"
    );
    let log = std::fs::read_to_string(project.out().join("cases/b/stderr.log")).expect("log");
    assert!(
        log.contains("OutOfMemoryError") && log.contains("retried alone"),
        "both attempts in the log: {log}"
    );
}

#[test]
fn packed_cases_without_their_own_processes_on_nvml_get_no_device_delta() {
    let (config, _) = gpus(1);
    // NVML reports other pids (a container): only the device's rise is
    // left, and with two packed cases on the GPU it holds both.
    let suite = container_cases(2, "700ms", "gpu_memory = \"1 GiB\"");
    let project = Project::new(&suite).with_fake_gpus(&config, Variant::Complete);
    let run = project.run(&["--gpus", "all", "--pack"]);
    run.assert_code(0);
    for id in ["g0", "g1"] {
        let case = run.case(id);
        assert!(
            case["gpu_peak_bytes"].is_null(),
            "unknown, not a delta: {case:#}"
        );
        let note = case["gpu_devices"][0]["note"].as_str().unwrap_or_default();
        assert!(note.contains("device-delta not used"), "{case:#}");
    }
    // Alone on the GPU, the delta stands: without --pack, or packed with
    // no neighbour.
    let run = project.run(&["--gpus", "all"]);
    run.assert_code(0);
    assert_eq!(run.case("g0")["gpu_peak_method"], "device-delta");
    assert_eq!(run.case("g1")["gpu_peak_bytes"].as_u64(), Some(200 * MIB));
    let alone = Project::new(&container_cases(1, "300ms", "gpu_memory = \"1 GiB\""))
        .with_fake_gpus(&config, Variant::Complete);
    let run = alone.run(&["--gpus", "all", "--pack"]);
    run.assert_code(0);
    assert_eq!(run.case("g0")["gpu_peak_method"], "device-delta");
}

#[test]
fn a_budget_that_could_not_be_judged_while_shared_is_judged_alone_and_is_not_flaky() {
    let (config, _) = gpus(1);
    let suite = container_cases(
        2,
        "700ms",
        "gpu_memory = \"1 GiB\"\nbudget = { gpu = \"2 GiB\" }",
    );
    let project = Project::new(&suite).with_fake_gpus(&config, Variant::Complete);
    let run = project.run(&["--gpus", "all", "--pack"]);
    run.assert_code(0);
    for id in ["g0", "g1"] {
        let case = run.case(id);
        assert_eq!(case["status"], "passed", "{case:#}");
        assert_eq!(case["gpu_peak_method"], "device-delta", "measured alone");
        assert_eq!(case["retried_alone"]["flaky"], false, "{case:#}");
    }
    assert_eq!(run.results()["summary"]["flaky"], 0);
    assert!(!run.stderr.contains("FLAKY"), "{}", run.stderr);
}

#[test]
fn a_case_whose_known_peak_fits_no_gpu_runs_on_a_whole_one() {
    let (config, _) = gpus(2);
    let project = Project::new(&gpu_cases(2, "100ms", "gpu_memory = \"7800 MiB\""))
        .with_fake_gpus(&config, Variant::Complete);
    let run = project.run(&["--gpus", "all", "--pack"]);
    run.assert_code(0);
    let results = run.results();
    assert_eq!(results["not_run"], serde_json::json!([]), "{results:#}");
    for id in ["g0", "g1"] {
        assert_eq!(run.case(id)["status"], "passed");
        assert!(run.case(id)["gpu_sharing"].is_null());
    }
}

#[test]
fn pool_mistakes_are_refused_before_anything_runs() {
    let (config, _) = gpus(2);
    let project =
        Project::new(&gpu_cases(1, "100ms", "")).with_fake_gpus(&config, Variant::Complete);
    let refused = |args: &[&str], expected: &str| {
        let run = project.run(args);
        run.assert_code(2);
        assert!(run.stderr.contains(expected), "{args:?}: {}", run.stderr);
        assert!(
            !project.out().join("cases").exists(),
            "{args:?}: nothing ran"
        );
    };
    refused(&["--gpu", "all"], "use `--gpus all`");
    refused(&["--gpu", "0,1"], "use `--gpus 0,1`");
    refused(&["--gpus", "required"], "use `--gpu required`");
    refused(&["--gpus", "7"], "`7` names no GPU");
    refused(&["--gpus", "0,0"], "named twice");
    refused(&["--pack"], "--gpus");
    refused(&["--gpus", "all", "--gpu", "off"], "GPU mode is off");

    let hidden =
        Project::new(&gpu_cases(1, "100ms", "")).with_fake_gpus(&config, Variant::Complete);
    let mut command = hidden.run_command();
    command
        .args(["--gpus", "1"])
        .env("CUDA_VISIBLE_DEVICES", "0");
    let run = hidden.finish(command);
    run.assert_code(2);
    assert!(run.stderr.contains("hidden from oomgate"), "{}", run.stderr);

    let sets_its_own = Project::new(&gpu_cases(
        1,
        "100ms",
        "env = { CUDA_VISIBLE_DEVICES = \"1\" }",
    ))
    .with_fake_gpus(&config, Variant::Complete);
    let run = sets_its_own.run(&["--gpus", "all"]);
    run.assert_code(2);
    assert!(
        run.stderr.contains("sets CUDA_VISIBLE_DEVICES"),
        "{}",
        run.stderr
    );

    // Regression (issue 20): without NVML, `--gpus all` said "see the note
    // above", and no note was above. The fake library without its
    // configuration is a machine whose driver is not loaded.
    let mut no_driver =
        Project::new(&gpu_cases(1, "100ms", "")).with_fake_gpus(&config, Variant::Complete);
    no_driver
        .env
        .retain(|(name, _)| name != "OOMGATE_FAKE_NVML_CONFIG");
    let run = no_driver.run(&["--gpus", "all"]);
    run.assert_code(3);
    let lines: Vec<&str> = run.stderr.lines().collect();
    assert_eq!(lines.len(), 1, "{}", run.stderr);
    assert!(
        lines[0].contains("--gpus needs NVML to read the GPUs, and it could not be loaded: ")
            && lines[0].contains("the NVIDIA driver is not loaded"),
        "{}",
        run.stderr
    );
    assert!(!no_driver.out().join("cases").exists(), "nothing ran");

    let too_big =
        Project::new(&gpu_cases(1, "100ms", "gpus = 3")).with_fake_gpus(&config, Variant::Complete);
    let run = too_big.run(&["--gpus", "all"]);
    run.assert_code(2);
    assert!(
        run.stderr
            .contains("needs 3 GPUs (`gpus = 3`), but the pool has 2"),
        "{}",
        run.stderr
    );
}

#[test]
fn a_two_gpu_case_gets_two_whole_gpus_and_a_host_only_case_none() {
    let (config, uuids) = gpus(2);
    let gpu_alloc = toml_str(&workload("gpu_alloc.py"));
    let suite = format!(
        "[suite]\nname = \"sizes\"\nsample_interval = \"20ms\"\n\
         [[case]]\nname = \"two\"\ngpus = 2\ncommand = [\"python3\", {gpu_alloc}, \"--mib\", \"300\", \"--hold\", \"300ms\"]\n\
         [[case]]\nname = \"host\"\ngpus = 0\ncommand = [\"sh\", \"-c\", \"echo \\\"[$CUDA_VISIBLE_DEVICES]\\\"; exec python3 {alloc_path} --mib 16 --hold 300ms\"]\n",
        alloc_path = workload("alloc.py"),
    );
    let project = Project::new(&suite).with_fake_gpus(&config, Variant::Complete);
    let run = project.run(&["--gpus", "all"]);
    run.assert_code(0);
    let two = run.case("two");
    let visible: BTreeSet<&str> = two["cuda_visible_devices"]
        .as_str()
        .expect("set")
        .split(',')
        .collect();
    assert_eq!(
        visible,
        uuids.iter().map(String::as_str).collect::<BTreeSet<_>>()
    );
    assert_eq!(two["gpus"], 2);
    let host = run.case("host");
    assert_eq!(host["cuda_visible_devices"], "", "no GPU: {host:#}");
    let stdout =
        std::fs::read_to_string(project.out().join("cases/host/stdout.log")).expect("stdout");
    assert!(stdout.contains("[]"), "{stdout}");
}

#[test]
fn a_packed_case_that_fails_alone_too_fails_with_both_attempts() {
    let project = packed_pair(
        "\"--mib\", \"512\", \"--hold\", \"1s\"",
        "\"--mib\", \"512\", \"--hold\", \"50ms\", \"--exit\", \"2\"",
    );
    let run = project.run(&["--gpus", "all", "--pack"]);
    run.assert_code(1);
    let b = run.case("b");
    assert_eq!(b["status"], "failed", "{b:#}");
    assert_eq!(b["retried_alone"]["flaky"], false, "{b:#}");
    assert_eq!(b["retried_alone"]["first_attempt"]["status"], "failed");
    assert_eq!(run.results()["summary"]["flaky"], 0);
    let junit = std::fs::read_to_string(project.out().join("junit.xml")).expect("junit");
    assert!(junit.contains("<rerunFailure"), "{junit}");
    assert!(!junit.contains("<flakyFailure"), "{junit}");
}

#[test]
fn ctrl_c_stops_every_running_case_and_leaves_nothing() {
    let pids = tempfile::tempdir().expect("tempdir");
    let mut suite = "[suite]\nname = \"stop\"\n[defaults]\nkill_grace = \"1s\"\n".to_string();
    for name in ["x", "y"] {
        suite.push_str(&format!(
            "[[case]]\nname = \"{name}\"\ncommand = [\"sh\", \"-c\", \"sleep 60 & echo $! > {}; wait\"]\n",
            pids.path().join(format!("{name}.pid")).display()
        ));
    }
    let project = Project::new(&suite);
    let child = project
        .run_command()
        .args(["--jobs", "2", "--gpu", "off"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn oomgate");
    let timeout = std::time::Duration::from_secs(30);
    let sleeps: Vec<i32> = ["x", "y"]
        .iter()
        .map(|name| wait_for_pid(&pids.path().join(format!("{name}.pid")), timeout))
        .collect();
    let oomgate_pid = i32::try_from(child.id()).expect("pid");
    // SAFETY: signalling the oomgate process this test started.
    unsafe {
        libc::kill(oomgate_pid, libc::SIGINT);
    }
    let run = Run::from(child.wait_with_output().expect("wait"), project.out());
    run.assert_code(130);
    for name in ["x", "y"] {
        assert_eq!(run.case(name)["status"], "interrupted");
    }
    for pid in sleeps {
        assert!(!alive(pid), "pid {pid} outlived the run");
    }
}

#[test]
fn a_case_whose_supervisor_is_killed_leaves_nothing_when_cases_run_at_once() {
    let pids = tempfile::tempdir().expect("tempdir");
    let pid_file = pids.path().join("sleep.pid");
    // The workload's parent is its supervisor: killed from outside, it
    // leaves the shell and its sleep to oomgate, out of the case's scope.
    let suite = format!(
        "[suite]\nname = \"orphans\"\n[defaults]\nkill_grace = \"1s\"\n\
         [[case]]\nname = \"orphaned\"\ncommand = [\"sh\", \"-c\", \"sleep 60 & echo $! > {}; kill -9 $PPID; wait\"]\n\
         [[case]]\nname = \"neighbour\"\ncommand = [\"sleep\", \"1\"]\n",
        pid_file.display()
    );
    let project = Project::new(&suite);
    let run = project.run(&["--jobs", "2", "--gpu", "off", "--host-method", "cgroup"]);
    assert_ne!(run.case("orphaned")["status"], "passed", "{}", run.stderr);
    assert_eq!(run.case("neighbour")["status"], "passed");
    let sleep = read_pid(&pid_file);
    assert!(!alive(sleep), "pid {sleep} outlived its case");
}

//! GPU measurement end to end, on the fake NVML driver loaded through the
//! normal library path: the real binary, the real nvml-wrapper code path.

mod common;

use common::fake_nvml::*;
use common::*;

#[test]
fn peak_sums_every_instance_and_child_of_the_case() {
    let project = gpu_project(
        &gpu_suite(
            "20ms",
            "\"--mib\", \"512\", \"--child-mib\", \"256\", \"--hold\", \"1500ms\"",
            "concurrency = 2",
        ),
        &two_devices(false),
    );
    let run = project.run(&[]);
    run.assert_code(0);
    let case = run.case("c");
    assert_eq!(
        mib(&case["gpu_peak_bytes"]),
        Some(2 * (512 + 256)),
        "{case:#}"
    );
    assert_eq!(case["gpu_peak_method"], "sampled@20ms");
    let device = &case["gpu_devices"][0];
    assert_eq!(device["uuid"], UUID_0);
    assert_eq!(mib(&device["before_bytes"]), Some(256));
    assert_eq!(mib(&device["device_peak_bytes"]), Some(256 + 1536));
    assert_eq!(
        mib(&case["gpu_devices"][1]["peak_bytes"]),
        Some(0),
        "nothing ran on GPU 1"
    );
    let results = run.results();
    assert_eq!(results["gpu"]["driver_version"], "550.54.15");
    assert_eq!(results["gpu"]["cuda_driver_version"], "12.4");
    assert_eq!(results["gpu"]["devices"][1]["uuid"], UUID_1);
    assert_eq!(results["measurement"]["gpu_method"], "nvml");
    // The timeline (and report.html's chart) has the devices' use too.
    let timeline = read_json(&project.out().join("cases/c/timeline.json"));
    let device_max = timeline["points"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| p["gpu_device_bytes"].as_u64())
        .max();
    assert_eq!(
        device_max.map(|b| b / MIB),
        Some(2 * 256 + 1536),
        "both devices' use: {timeline}"
    );
    let html = std::fs::read_to_string(project.out().join("report.html")).expect("report.html");
    assert!(
        html.contains("gpu device used") && html.contains("gpu (case)"),
        "chart series"
    );
    assert!(
        run.stderr.contains("gpu peak 1.50 GiB (sampled@20ms)"),
        "{}",
        run.stderr
    );
}

#[test]
fn container_pids_fall_back_to_the_device_delta_and_say_so() {
    let project = gpu_project(
        &gpu_suite(
            "20ms",
            "\"--mib\", \"768\", \"--pid-offset\", \"1000000\", \"--hold\", \"1s\"",
            "",
        ),
        &two_devices(false),
    );
    let run = project.run(&[]);
    run.assert_code(0);
    let case = run.case("c");
    assert_eq!(case["gpu_devices"][0]["method"], "device-delta", "{case:#}");
    assert_eq!(mib(&case["gpu_devices"][0]["peak_bytes"]), Some(768));
    assert_eq!(
        case["gpu_peak_method"], "device-delta",
        "GPU 1, untouched, does not count"
    );
    assert_eq!(mib(&case["gpu_peak_bytes"]), Some(768));
    assert!(
        run.stderr
            .contains("device-delta: no process of the case was seen"),
        "{}",
        run.stderr
    );
    let junit = std::fs::read_to_string(project.out().join("junit.xml")).expect("junit");
    assert!(
        junit.contains("device-delta: no process of the case was seen"),
        "{junit}"
    );
}

#[test]
fn unavailable_memory_is_unknown_never_zero() {
    let project = gpu_project(
        &gpu_suite(
            "20ms",
            "\"--mib\", \"512\", \"--unavailable\", \"--hold\", \"500ms\"",
            "budget = { gpu = \"1 GiB\" }",
        ),
        &two_devices(false),
    );
    let run = project.run(&[]);
    run.assert_code(1);
    let case = run.case("c");
    assert!(case["gpu_peak_bytes"].is_null(), "{case:#}");
    assert_eq!(case["gpu_devices"][0]["method"], "unavailable");
    // A budget that cannot be verified fails, its figure unknown.
    assert_eq!(case["failure_kind"], "budget", "{case:#}");
    let budget = check(&case, "budget.gpu");
    assert_eq!(budget["passed"], false, "{budget:#}");
    assert_eq!(budget["outcome"], "unknown", "{budget:#}");
    assert!(budget["figure_bytes"].is_null(), "{budget:#}");
}

#[test]
fn driver_accounting_catches_a_spike_shorter_than_the_interval() {
    let project = gpu_project(
        &gpu_suite(
            "1s",
            "\"--mib\", \"2048\", \"--pattern\", \"spike\", \"--base-mib\", \"128\", \"--spike-ms\", \"2\", \"--hold\", \"1200ms\"",
            "",
        ),
        &two_devices(true),
    );
    let run = project.run(&[]);
    run.assert_code(0);
    let device = &run.case("c")["gpu_devices"][0];
    assert_eq!(
        mib(&device["sampled_peak_bytes"]),
        Some(128),
        "sampling missed the spike: {device:#}"
    );
    assert_eq!(mib(&device["accounting_peak_bytes"]), Some(2048));
    assert_eq!(mib(&device["peak_bytes"]), Some(2048));
    assert_eq!(device["method"], "driver-accounting");
}

#[test]
fn headroom_breach_stops_the_case_early() {
    let project = gpu_project(
        &gpu_suite(
            "20ms",
            "\"--mib\", \"1024\", \"--pattern\", \"leak\", \"--hold\", \"60s\"",
            "budget = { gpu_fraction = 0.5 }",
        ),
        &two_devices(false),
    );
    let started = std::time::Instant::now();
    let run = project.run(&[]);
    run.assert_code(1);
    assert!(
        started.elapsed() < std::time::Duration::from_secs(40),
        "not stopped early"
    );
    let case = run.case("c");
    assert_eq!(case["status"], "failed");
    assert_eq!(case["failure_kind"], "headroom", "{case:#}");
    let headroom = assert_breached(&case, "budget.gpu_fraction.gpu0");
    assert_eq!(mib(&headroom["limit_bytes"]), Some(4096), "{headroom:#}");
    assert_eq!(headroom["facts"]["headroom"]["fraction"], 0.5);
    // Stopped by oomgate, not ended on its own.
    assert!(case["instances"][0]["exit"]["signal"].is_u64(), "{case:#}");
}

#[test]
fn gpu_budget_breach_names_the_figure_and_method() {
    let project = gpu_project(
        &gpu_suite(
            "20ms",
            "\"--mib\", \"512\", \"--hold\", \"30s\"",
            "budget = { gpu = \"256 MiB\" }",
        ),
        &two_devices(false),
    );
    let run = project.run(&[]);
    run.assert_code(1);
    let case = run.case("c");
    assert_eq!(case["failure_kind"], "budget", "{case:#}");
    let budget = assert_breached(&case, "budget.gpu");
    assert_eq!(mib(&budget["figure_bytes"]), Some(512), "{budget:#}");
    assert_eq!(mib(&budget["limit_bytes"]), Some(256), "{budget:#}");
    assert_eq!(
        budget["facts"]["budget"]["method"]["gpu"]["method"], "sampled@20ms",
        "{budget:#}"
    );
}

#[test]
fn a_workload_that_fills_the_device_fails_with_the_pytorch_message() {
    let project = gpu_project(
        &gpu_suite("20ms", "\"--mib\", \"9000\"", ""),
        &two_devices(false),
    );
    let run = project.run(&[]);
    run.assert_code(1);
    let stderr =
        std::fs::read_to_string(project.out().join("cases/c/stderr.log")).expect("stderr.log");
    assert!(stderr.starts_with("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 8.79 GiB. GPU 0 has a total capacity of 8.00 GiB"), "{stderr}");
}

#[test]
fn foreign_processes_warn_by_default_and_are_left_alone() {
    let project = gpu_project(
        &gpu_suite("20ms", "\"--mib\", \"64\", \"--hold\", \"200ms\"", ""),
        &two_devices(false),
    );
    let foreign = Foreign::start(&project, UUID_0, GIB);
    let run = project.run(&[]);
    run.assert_code(0);
    let case = run.case("c");
    assert_eq!(
        case["foreign_processes"][0]["pid"],
        foreign.pid(),
        "{case:#}"
    );
    assert_eq!(case["foreign_processes"][0]["name"], "sleep");
    assert!(
        run.stderr.contains(&format!(
            "pid {} (sleep) on GPU 0 using 1.00 GiB",
            foreign.pid()
        )),
        "{}",
        run.stderr
    );
    assert!(
        alive(i32::try_from(foreign.pid()).expect("pid")),
        "oomgate touched a process it did not start"
    );
    // The foreign process's memory is not the case's.
    assert_eq!(mib(&case["gpu_peak_bytes"]), Some(64));
}

#[test]
fn foreign_processes_fail_the_case_when_the_suite_says_so() {
    let suite = gpu_suite("20ms", "\"--mib\", \"64\"", "")
        .replace("[suite]\n", "[suite]\nforeign_processes = \"fail\"\n");
    let project = gpu_project(&suite, &two_devices(false));
    let foreign = Foreign::start(&project, UUID_0, GIB);
    let run = project.run(&[]);
    run.assert_code(1);
    let case = run.case("c");
    assert_eq!(case["status"], "error");
    assert_eq!(case["failure_kind"], "foreign-processes", "{case:#}");
    assert!(
        case["instances"][0]["exit"].is_null(),
        "the case must not have run"
    );
    assert!(alive(i32::try_from(foreign.pid()).expect("pid")));
}

#[test]
fn cuda_visible_devices_selects_by_index_and_by_uuid() {
    for value in ["1", UUID_1, "GPU-1111"] {
        let suite = gpu_suite(
            "20ms",
            "\"--mib\", \"300\", \"--hold\", \"500ms\"",
            &format!(
                "env = {{ CUDA_VISIBLE_DEVICES = \"{value}\", CUDA_DEVICE_ORDER = \"PCI_BUS_ID\" }}"
            ),
        );
        let project = gpu_project(&suite, &two_devices(false));
        let run = project.run(&[]);
        run.assert_code(0);
        let case = run.case("c");
        let devices = case["gpu_devices"].as_array().expect("devices");
        assert_eq!(devices.len(), 1, "{value}: {case:#}");
        assert_eq!(devices[0]["uuid"], UUID_1, "{value}");
        assert_eq!(mib(&devices[0]["peak_bytes"]), Some(300), "{value}");
        assert_eq!(case["cuda_visible_devices"], value);
    }
}

#[test]
fn required_gpu_without_a_driver_exits_3_with_one_line() {
    // The fake library without its configuration behaves like a machine
    // whose driver is not loaded.
    let mut project = gpu_project(
        &gpu_suite("20ms", "\"--mib\", \"64\"", ""),
        &two_devices(false),
    );
    project.env.retain(|(k, _)| k != "OOMGATE_FAKE_NVML_CONFIG");
    let run = project.run(&["--gpu", "required"]);
    run.assert_code(3);
    let lines: Vec<&str> = run.stderr.lines().collect();
    assert_eq!(lines.len(), 1, "{}", run.stderr);
    assert!(
        lines[0].contains("GPU memory is required"),
        "{}",
        run.stderr
    );
    assert!(
        lines[0].contains("the NVIDIA driver is not loaded"),
        "{}",
        run.stderr
    );

    // auto: one note, and host memory is still measured.
    let run = project.run(&["--gpu", "auto"]);
    run.assert_code(1); // gpu_alloc.py itself needs the configuration
    assert_eq!(
        run.stderr.matches("GPU memory is not measured").count(),
        1,
        "{}",
        run.stderr
    );
    assert!(run.case("c")["host_peak_bytes"].as_u64().is_some());
}

#[test]
fn gpus_command_text_and_json() {
    let project = gpu_project("", &two_devices(true));
    let foreign = Foreign::start(&project, UUID_1, 2 * GIB);
    let output = project
        .oomgate()
        .arg("gpus")
        .env("CUDA_VISIBLE_DEVICES", "1")
        .output()
        .expect("run");
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(
        text.starts_with("NVIDIA driver 550.54.15, CUDA driver API 12.4, 2 device(s)"),
        "{text}"
    );
    assert!(
        text.contains(&format!("GPU 1  Fake H100 80GB  {UUID_1}")),
        "{text}"
    );
    assert!(
        text.contains("memory       8.00 GiB total, 2.25 GiB used, 5.75 GiB free"),
        "{text}"
    );
    assert!(text.contains("accounting on, persistence on"), "{text}");
    assert!(
        text.contains(&format!("pid {} (sleep) 2.00 GiB", foreign.pid())),
        "{text}"
    );
    assert!(
        text.contains("CUDA_VISIBLE_DEVICES=\"1\": a CUDA program here sees GPU 1"),
        "{text}"
    );

    let output = project
        .oomgate()
        .args(["gpus", "--json"])
        .env_remove("CUDA_VISIBLE_DEVICES")
        .output()
        .expect("run");
    assert_eq!(output.status.code(), Some(0));
    let json: serde_json::Value = serde_json::from_slice(&output.stdout).expect("JSON");
    assert_eq!(json["nvml"]["available"], true);
    assert_eq!(json["devices"][1]["processes"][0]["pid"], foreign.pid());
    assert_eq!(json["devices"][0]["total_bytes"], 8 * GIB);
    assert_eq!(json["visible_indices"], serde_json::json!([0, 1]));
}

#[test]
fn gpus_without_nvml_exits_3_with_one_line() {
    let mut project = gpu_project("", &two_devices(false));
    project.env.retain(|(k, _)| k != "OOMGATE_FAKE_NVML_CONFIG");
    let output = project.oomgate().arg("gpus").output().expect("run");
    assert_eq!(output.status.code(), Some(3));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("no GPU can be inspected"), "{stderr}");

    // With --json, stdout is still one JSON document saying so.
    let output = project
        .oomgate()
        .args(["gpus", "--json"])
        .output()
        .expect("run");
    assert_eq!(output.status.code(), Some(3));
    let json: serde_json::Value = serde_json::from_slice(&output.stdout).expect("JSON on stdout");
    assert_eq!(json["nvml"]["available"], false);
    assert_eq!(json["devices"], serde_json::json!([]));
    assert!(
        json["nvml"]["reason"]
            .as_str()
            .is_some_and(|e| e.contains("no GPU can be inspected")),
        "{json}"
    );
}

#[test]
fn a_library_missing_a_symbol_is_a_clear_error_not_a_crash() {
    let project = Project::new(&gpu_suite(
        "20ms",
        "\"--mib\", \"64\", \"--hold\", \"100ms\"",
        "",
    ))
    .with_fake_gpus(&two_devices(false), Variant::MissingProcessList);
    let output = project.oomgate().arg("gpus").output().expect("run");
    assert_eq!(output.status.code(), Some(3));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("lacks nvmlDeviceGetComputeRunningProcesses_v3"),
        "{stderr}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");

    let run = project.run(&[]);
    run.assert_code(0);
    assert!(
        run.stderr
            .contains("lacks nvmlDeviceGetComputeRunningProcesses_v3"),
        "{}",
        run.stderr
    );
}

/// Regression: driver accounting summed processes that ran one after
/// another, reporting twice the real peak.
#[test]
fn accounting_does_not_add_up_processes_that_ran_one_after_another() {
    let script = format!(
        "python3 {0} --mib 1024 --hold 300ms && python3 {0} --mib 1024 --hold 300ms",
        workload("gpu_alloc.py")
    );
    let suite = format!(
        "[suite]\nname = \"g\"\nsample_interval = \"20ms\"\n[[case]]\nname = \"c\"\ncommand = [\"sh\", \"-c\", {}]\n",
        toml_str(&script)
    );
    let project = gpu_project(&suite, &two_devices(true));
    let run = project.run(&[]);
    run.assert_code(0);
    let device = &run.case("c")["gpu_devices"][0];
    assert_eq!(
        mib(&device["accounting_peak_bytes"]),
        Some(1024),
        "{device:#}"
    );
    assert_eq!(mib(&device["peak_bytes"]), Some(1024));
}

/// Regression: a MIG instance that cannot be mapped gave a figure of 0 and
/// passed every GPU budget.
#[test]
fn an_unmappable_mig_device_makes_gpu_figures_unknown() {
    let project = gpu_project(
        &gpu_suite(
            "20ms",
            "\"--mib\", \"3000\", \"--device\", \"0\", \"--hold\", \"300ms\"",
            "env = { CUDA_VISIBLE_DEVICES = \"MIG-abcd\" }\nbudget = { gpu = \"1 GiB\" }",
        ),
        &two_devices(false),
    );
    let run = project.run(&[]);
    run.assert_code(1);
    let case = run.case("c");
    assert!(case["gpu_peak_bytes"].is_null(), "{case:#}");
    assert_eq!(case["gpu_peak_method"], "unavailable");
    assert!(run.stderr.contains("MIG instance"), "{}", run.stderr);
    let budget = check(&case, "budget.gpu");
    assert_eq!(budget["passed"], false, "{budget:#}");
    assert_eq!(budget["outcome"], "unknown", "{budget:#}");
}

#[test]
fn a_leak_across_soak_runs_on_the_fake_gpu_is_detected() {
    let leak = "duration = \"4s\"\nleak = { warmup = 1, max_growth = \"64 MiB\" }";
    let project = gpu_project(
        &gpu_suite(
            "20ms",
            "\"--mib\", \"256\", \"--grow-per-run\", \"64\", \"--hold\", \"150ms\"",
            leak,
        ),
        &two_devices(false),
    );
    let run = project.run(&[]);
    run.assert_code(1);
    let case = run.case("c");
    assert_eq!(case["failure_kind"], "leak", "{case:#}");
    let leak_check = check(&case, "leak");
    assert_eq!(leak_check["passed"], false, "{leak_check:#}");
    assert_eq!(leak_check["outcome"], "breached", "{leak_check:#}");
    let trend = &case["leak"];
    assert_eq!(trend["source"], "soak-runs", "{case:#}");
    assert_eq!(
        trend["slope_bytes_per_iteration"].as_f64(),
        Some((64 * MIB) as f64),
        "{case:#}"
    );
    assert!(
        trend["growth_bytes"].as_f64() > leak_check["limit_bytes"].as_f64(),
        "{case:#}"
    );

    // The same soak without growth passes.
    let project = gpu_project(
        &gpu_suite("20ms", "\"--mib\", \"256\", \"--hold\", \"150ms\"", leak),
        &two_devices(false),
    );
    project.run(&[]).assert_code(0);
}

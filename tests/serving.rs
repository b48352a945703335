//! Server cases on real processes: a stand-in inference server
//! (`fixtures/workloads/server.py`) under a stand-in load client
//! (`load.py`), measured apart; budgets, readiness, deaths and stops; a
//! capacity search of the concurrency the server holds; no server process
//! left behind.

mod common;

use common::fake_nvml::*;
use common::*;

/// A case whose load client sends `requests` to the server of
/// `server_args`, `extra` added to the case.
fn serving_suite(server_args: &str, client_args: &str, extra: &str) -> String {
    format!(
        "[suite]\nname = \"serving\"\nsample_interval = \"20ms\"\n[defaults]\ntimeout = \"2m\"\n[[case]]\nname = \"serve\"\ncommand = [\"python3\", {load}, \"--url\", \"http://127.0.0.1:{{port}}/generate\"{client_args}]\n{extra}\nserver = {{ command = [\"python3\", {server}, \"--port\", \"{{port}}\"{server_args}], ready = \"http://127.0.0.1:{{port}}/health\", kill_grace = \"2s\" }}\n",
        load = toml_str(&workload("load.py")),
        server = toml_str(&workload("server.py")),
    )
}

/// Every pid a server wrote to its pid file (itself, its children).
fn pids(path: &std::path::Path) -> Vec<i32> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|line| line.trim().parse().ok())
        .collect()
}

fn assert_none_alive(path: &std::path::Path) {
    let pids = pids(path);
    assert!(!pids.is_empty(), "the server wrote its pids");
    for pid in pids {
        assert!(!alive(pid), "server process {pid} survived the case");
    }
}

fn mib(value: &serde_json::Value) -> u64 {
    value
        .as_u64()
        .unwrap_or_else(|| panic!("a figure, not {value}"))
        / MIB
}

#[test]
fn a_server_under_load_is_measured_apart_from_its_client() {
    let config = format!(
        "driver 550.54.15\ncuda 12040\n{}",
        device(UUID_0, 8 * GIB, 256 * MIB, false, "Fake H100 80GB")
    );
    let project = Project::new(&serving_suite(
        ", \"--model-mib\", \"160\", \"--gpu-mib\", \"600\", \"--pids\", \"pids.txt\"",
        ", \"--requests\", \"30\", \"--concurrency\", \"3\", \"--mib\", \"48\"",
        "concurrency = 2\nclient_budget = { host = \"1 GiB\" }",
    ))
    .with_fake_gpus(&config, Variant::Complete);
    let run = project.run(&["--gpu", "required"]);
    run.assert_code(0);
    let case = run.case("serve");
    assert_eq!(case["status"], "passed", "{case:#}");

    // The case's own figures are the server's: its model, not the client's
    // memory on top of it.
    let server_peak = mib(&case["host_peak_bytes"]);
    assert!(
        (160..160 + 48).contains(&server_peak),
        "the server's host peak holds its 160 MiB model and not the client's 2 × 48 MiB: {server_peak} MiB"
    );
    assert_eq!(mib(&case["gpu_peak_bytes"]), 600, "{case:#}");
    let client = &case["client"];
    let client_peak = mib(&client["host_peak_bytes"]);
    assert!(
        (48..160).contains(&client_peak),
        "the client's host peak holds its 48 MiB, not the server's model: {client_peak} MiB"
    );
    assert_eq!(
        client["gpu_peak_bytes"], 0,
        "the client holds no GPU memory: {client:#}"
    );

    let server = &case["server"];
    assert!(server["port"].as_u64().is_some_and(|p| p > 0), "{server:#}");
    assert!(server["ready_after_s"].as_f64().is_some(), "{server:#}");
    assert_eq!(server["stopped_with"], "SIGTERM");
    assert_eq!(
        server["command"][3], "{port}",
        "recorded as written, so the lock does not change with the port"
    );
    assert!(mib(&server["load_host_peak_bytes"]) >= 160, "{server:#}");
    assert!(
        project.out().join("cases/serve/server.stderr.log").exists(),
        "the server's output has its own log"
    );

    let timeline = read_json(&project.out().join("cases/serve/timeline.json"));
    let phases = &timeline["server"];
    assert!(phases["ready_at_ms"].as_u64().is_some(), "{phases:#}");
    assert!(phases["startup_host_peak"]["bytes"].as_u64().is_some());
    assert!(phases["load_host_peak"]["bytes"].as_u64().is_some());
    assert!(
        timeline["points"]
            .as_array()
            .is_some_and(|points| points.iter().any(|p| p["client_host_bytes"].is_u64())),
        "the client's figures are on the timeline beside the server's"
    );
    let first_client = timeline["points"]
        .as_array()
        .and_then(|points| points.first())
        .map(|p| p["client_host_bytes"].clone());
    assert_eq!(
        first_client,
        Some(serde_json::Value::Null),
        "no client figure before the client starts"
    );
    let html = std::fs::read_to_string(project.out().join("report.html")).expect("html");
    assert!(
        html.contains("server ready") && html.contains("client host RSS"),
        "the chart marks the readiness and draws the client"
    );
    let junit = std::fs::read_to_string(project.out().join("junit.xml")).expect("junit");
    assert!(junit.contains("server: ready after"), "{junit}");
    assert!(junit.contains("load client: host peak"), "{junit}");
    let summary = std::fs::read_to_string(project.out().join("summary.md")).expect("summary");
    assert!(
        summary.contains("### Servers under load")
            && summary.contains("**`serve`**: `server: ready after"),
        "{summary}"
    );
    assert_none_alive(&project.path().join("pids.txt"));
}

#[test]
fn in_a_container_the_devices_rise_is_the_servers_and_says_what_it_holds() {
    let config = format!(
        "driver 550.54.15\ncuda 12040\n{}",
        device(UUID_0, 8 * GIB, 256 * MIB, false, "Fake H100 80GB")
    );
    let project = Project::new(&serving_suite(
        ", \"--gpu-mib\", \"600\", \"--gpu-pid-offset\", \"1000000\", \"--pids\", \"pids.txt\"",
        ", \"--requests\", \"10\"",
        "",
    ))
    .with_fake_gpus(&config, Variant::Complete);
    let run = project.run(&["--gpu", "required"]);
    run.assert_code(0);
    let case = run.case("serve");
    assert_eq!(case["gpu_peak_method"], "device-delta", "{case:#}");
    assert_eq!(mib(&case["gpu_peak_bytes"]), 600);
    let note = case["gpu_devices"][0]["note"].as_str().unwrap_or("");
    assert!(note.contains("load client's GPU memory"), "{note}");
    let client = &case["client"];
    assert_eq!(
        client["gpu_peak_bytes"],
        serde_json::Value::Null,
        "the same rise is never the client's too: {client:#}"
    );
    assert_none_alive(&project.path().join("pids.txt"));
}

#[test]
fn a_server_over_its_budget_fails_the_case() {
    let project = Project::new(&serving_suite(
        ", \"--model-mib\", \"200\", \"--pids\", \"pids.txt\"",
        ", \"--requests\", \"5\", \"--mib\", \"8\"",
        "budget = { host = \"150 MiB\" }\nclient_budget = { host = \"1 GiB\" }",
    ));
    let run = project.run(&["--gpu", "off"]);
    run.assert_code(1);
    let case = run.case("serve");
    assert_eq!(case["status"], "failed", "{case:#}");
    assert_eq!(case["failure_kind"], "budget");
    let checks: Vec<(&str, bool)> = case["checks"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| (c["name"].as_str().unwrap_or(""), c["passed"] == true))
        .collect();
    assert!(checks.contains(&("budget.host", false)), "{checks:?}");
    assert!(
        checks.contains(&("client.budget.host", true)),
        "the client is judged on its own budget: {checks:?}"
    );
    assert_none_alive(&project.path().join("pids.txt"));
}

/// A server whose model fits its budget and whose load does not: the
/// budget is checked live on the figure that is gated at the end (the
/// tree's floors, PSS and VmHWM included), so the breach stops the case
/// under load, long before the load would have ended, and the check's
/// figure is the case's host peak.
#[test]
fn a_server_pushed_over_its_budget_by_its_load_is_stopped_under_load() {
    let project = Project::new(&serving_suite(
        ", \"--model-mib\", \"64\", \"--per-request-mib\", \"48\", \"--request-ms\", \"400\", \"--pids\", \"pids.txt\"",
        ", \"--requests\", \"400\", \"--concurrency\", \"4\"",
        "budget = { host = \"160 MiB\" }\nclient_budget = { host = \"1 GiB\" }",
    ));
    let run = project.run(&["--gpu", "off"]);
    run.assert_code(1);
    let case = run.case("serve");
    assert_eq!(case["failure_kind"], "budget", "{case:#}");
    let check = assert_breached(&case, "budget.host");
    // Stopped live: oomgate stopped the server, which did not exit.
    assert!(case["server"]["stopped_with"].is_string(), "{case:#}");
    assert_eq!(
        check["figure_bytes"], case["host_peak_bytes"],
        "the breach is judged on the gated figure: {case:#}"
    );
    assert!(mib(&case["host_peak_bytes"]) >= 160, "{case:#}");
    // Under load: after the server was ready, and long before 400 requests
    // of 400 ms at 4 at once (40 s) would have ended.
    let ready = case["server"]["ready_after_s"].as_f64().unwrap_or(f64::NAN);
    let wall = case["wall_time_s"].as_f64().unwrap_or(f64::NAN);
    assert!(
        ready < wall && wall < 30.0,
        "ready after {ready} s, stopped after {wall} s"
    );
    assert_none_alive(&project.path().join("pids.txt"));
}

#[test]
fn a_client_over_its_budget_fails_the_case_and_says_it_was_the_client() {
    let project = Project::new(&serving_suite(
        ", \"--model-mib\", \"16\"",
        ", \"--requests\", \"5\", \"--mib\", \"120\"",
        "budget = { host = \"1 GiB\" }\nclient_budget = { host = \"64 MiB\" }",
    ));
    let run = project.run(&["--gpu", "off"]);
    run.assert_code(1);
    let case = run.case("serve");
    assert_eq!(case["failure_kind"], "budget", "{case:#}");
    // The client's budget failed it, not the server's.
    let client = assert_breached(&case, "client.budget.host");
    assert_eq!(mib(&client["limit_bytes"]), 64, "{client:#}");
    assert_eq!(check(&case, "budget.host")["passed"], true, "{case:#}");
}

#[test]
fn a_server_that_dies_before_it_is_ready_fails_within_a_second() {
    let project = Project::new(&serving_suite(
        ", \"--oom-at-startup\", \"--startup\", \"0.3s\", \"--died-at\", \"died.txt\", \"--pids\", \"pids.txt\"",
        "",
        "",
    ));
    // Minutes to get ready: only its death can end the case this soon.
    let suite = std::fs::read_to_string(project.suite()).expect("suite");
    std::fs::write(
        project.suite(),
        suite.replace(
            "kill_grace = \"2s\"",
            "kill_grace = \"2s\", ready_timeout = \"1m\"",
        ),
    )
    .expect("suite");
    let run = project.run(&["--gpu", "off"]);
    run.assert_code(1);
    let case = run.case("serve");
    assert_eq!(case["status"], "failed", "{case:#}");
    assert_eq!(
        case["failure_kind"], "gpu-oom",
        "diagnosed from the server's output"
    );
    // It exited on its own, never ready.
    assert_eq!(case["server"]["exit"]["code"], 1, "{case:#}");
    assert_eq!(case["server"]["stopped_with"], serde_json::Value::Null);
    assert_eq!(case["server"]["ready_after_s"], serde_json::Value::Null);
    assert_eq!(
        case["client"]["host_peak_bytes"],
        serde_json::Value::Null,
        "a client that never ran has no figure"
    );
    assert_eq!(case["instances"][0]["runs"], 0, "the load never started");

    let died: f64 = std::fs::read_to_string(project.path().join("died.txt"))
        .expect("the server wrote when it died")
        .trim()
        .parse()
        .expect("a time");
    let started = chrono::DateTime::parse_from_rfc3339(case["started_at"].as_str().expect("start"))
        .expect("an RFC 3339 time");
    let ended =
        started.timestamp_micros() as f64 / 1e6 + case["wall_time_s"].as_f64().expect("wall");
    assert!(
        ended - died < 1.0,
        "the case ended {:.3}s after its server died",
        ended - died
    );
    assert_none_alive(&project.path().join("pids.txt"));
}

#[test]
fn a_server_that_dies_under_load_is_diagnosed_from_its_output() {
    let project = Project::new(&serving_suite(
        ", \"--oom-after\", \"4\", \"--pids\", \"pids.txt\"",
        ", \"--requests\", \"20\", \"--concurrency\", \"2\"",
        "",
    ));
    let run = project.run(&["--gpu", "off"]);
    run.assert_code(1);
    let case = run.case("serve");
    assert_eq!(case["failure_kind"], "gpu-oom", "{case:#}");
    assert_eq!(
        case["diagnosis"]["oom"]["requested_bytes"],
        2u64 << 30,
        "{case:#}"
    );
    // It exited on its own, after it was ready: under load.
    assert_eq!(case["server"]["exit"]["code"], 1, "{case:#}");
    assert!(case["server"]["ready_after_s"].as_f64().is_some());
    assert_eq!(case["server"]["stopped_with"], serde_json::Value::Null);
    assert_none_alive(&project.path().join("pids.txt"));
}

#[test]
fn a_failing_client_fails_the_case_with_its_own_output() {
    let project = Project::new(&serving_suite(
        ", \"--pids\", \"pids.txt\"",
        ", \"--requests\", \"2\", \"--exit\", \"3\"",
        "",
    ));
    let run = project.run(&["--gpu", "off"]);
    run.assert_code(1);
    let case = run.case("serve");
    assert_eq!(case["status"], "failed", "{case:#}");
    assert_eq!(case["failure_kind"], "crash", "{case:#}");
    assert_eq!(case["instances"][0]["exit"]["code"], 3, "{case:#}");
    assert_eq!(case["server"]["stopped_with"], "SIGTERM");
    let junit = std::fs::read_to_string(project.out().join("junit.xml")).expect("junit");
    assert!(
        junit.contains("2/2 requests"),
        "the client's own output is the one shown: {junit}"
    );
    assert_none_alive(&project.path().join("pids.txt"));
}

#[test]
fn a_server_never_ready_times_out_and_one_ignoring_its_signal_is_killed() {
    let project = Project::new(&serving_suite(
        ", \"--ignore-term\", \"--pids\", \"pids.txt\"",
        "",
        "",
    ));
    let suite = std::fs::read_to_string(project.suite()).expect("suite");
    std::fs::write(
        project.suite(),
        suite.replace("/health\"", "/missing\"").replace(
            "kill_grace = \"2s\"",
            "kill_grace = \"1s\", ready_timeout = \"2s\"",
        ),
    )
    .expect("suite");
    let run = project.run(&["--gpu", "off"]);
    run.assert_code(1);
    let case = run.case("serve");
    assert_eq!(case["status"], "timed-out", "{case:#}");
    let message = case["message"].as_str().unwrap_or("");
    assert!(
        message.contains("the server was not ready after 2.0s")
            && message.contains("/missing answered 404"),
        "{message}"
    );
    assert_eq!(
        case["server"]["exit"]["signal"], 9,
        "SIGTERM was ignored: {case:#}"
    );
    assert!(run.stderr.contains("then SIGKILL"), "{}", run.stderr);
    assert_none_alive(&project.path().join("pids.txt"));
}

#[test]
fn the_concurrency_a_server_holds_is_searched_with_a_fresh_server_per_probe() {
    let suite = format!(
        "[suite]\nname = \"serving\"\nsample_interval = \"20ms\"\n[[case]]\nname = \"holds\"\ncommand = [\"python3\", {load}, \"--url\", \"http://127.0.0.1:{{port}}/generate\", \"--requests\", \"2\", \"--concurrency\", \"1\"]\nsearch = {{ param = \"concurrency\", max = 16 }}\nserver = {{ command = [\"python3\", {server}, \"--port\", \"{{port}}\", \"--max-in-flight\", \"4\", \"--request-ms\", \"1500\", \"--pids\", \"pids.txt\"], ready = {{ log = \"ready on port\" }} }}\n",
        load = toml_str(&workload("load.py")),
        server = toml_str(&workload("server.py")),
    );
    let project = Project::new(&suite);
    let run = project.run(&["--gpu", "off"]);
    run.assert_code(0);
    let case = run.case("holds");
    assert_eq!(case["capacity"]["value"], 4, "{:#}", case["capacity"]);
    let probes = case["capacity"]["probes"].as_array().map_or(0, Vec::len);
    let servers = pids(&project.path().join("pids.txt")).len();
    assert_eq!(servers, probes, "one fresh server per probe");
    assert!(
        run.stderr.contains("largest concurrency that fits: 4"),
        "{}",
        run.stderr
    );
    assert_none_alive(&project.path().join("pids.txt"));
}

#[test]
fn parallel_server_cases_get_their_own_ports() {
    let mut suite = "[suite]\nname = \"serving\"\nsample_interval = \"20ms\"\n".to_string();
    for i in 0..3 {
        suite.push_str(&format!(
            "[[case]]\nname = \"s{i}\"\ncommand = [\"python3\", {load}, \"--url\", \"http://127.0.0.1:{{port}}/generate\", \"--requests\", \"10\"]\nserver = {{ command = [\"python3\", {server}, \"--port\", \"{{port}}\", \"--model-mib\", \"{}\", \"--pids\", \"pids.txt\"], ready = \"tcp://127.0.0.1:{{port}}\" }}\n",
            32 * (i + 1),
            load = toml_str(&workload("load.py")),
            server = toml_str(&workload("server.py")),
        ));
    }
    let project = Project::new(&suite);
    let run = project.run(&["--gpu", "off", "--jobs", "3"]);
    run.assert_code(0);
    let results = run.results();
    let mut ports = std::collections::BTreeSet::new();
    for (i, case) in results["cases"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
    {
        ports.insert(case["server"]["port"].as_u64());
        let peak = mib(&case["host_peak_bytes"]);
        let model = 32 * (i as u64 + 1);
        assert!(
            (model..model + 32).contains(&peak),
            "case s{i}'s peak is its own server's ({model} MiB model): {peak} MiB"
        );
    }
    assert_eq!(ports.len(), 3, "{ports:?}");
    assert_none_alive(&project.path().join("pids.txt"));
}

#[test]
fn the_vllm_example_suite_is_valid() {
    let stdout = check_in_repository("examples/serving/vllm.toml");
    assert!(
        stdout.contains("ready on http://127.0.0.1:{port}/health"),
        "{stdout}"
    );
    assert!(stdout.contains("search:      largest ctx"), "{stdout}");
    assert!(
        stdout.contains(r"output:      kv_tokens from the logs (last match of /GPU KV cache size: ([\d,]+) tokens/), higher is better, tolerance 1%"),
        "{stdout}"
    );
}

#[test]
fn the_lock_keeps_the_servers_command_and_names_a_change_of_it() {
    let project = Project::new(&serving_suite(
        ", \"--model-mib\", \"32\"",
        ", \"--requests\", \"4\"",
        "",
    ));
    project.run(&["--gpu", "off"]).assert_code(0);
    project.lock_from_results().assert_code(0);
    let lock = std::fs::read_to_string(project.lock_path()).expect("lock");
    assert!(lock.contains(".server]"), "{lock}");
    assert!(lock.contains("\"{port}\""), "the port as written: {lock}");

    let run = project.run(&["--gpu", "off"]);
    run.assert_code(0);
    let changes = &run.case("serve")["baseline"]["changes"];
    assert!(
        changes.as_array().is_none_or(Vec::is_empty),
        "another port is no change: {changes}"
    );

    let suite = std::fs::read_to_string(project.suite()).expect("suite");
    std::fs::write(project.suite(), suite.replace("\"32\"", "\"48\"")).expect("suite");
    let run = project.run(&["--gpu", "off"]);
    let changes = run.case("serve")["baseline"]["changes"].to_string();
    assert!(changes.contains("server command:"), "{changes}");
}

#[test]
fn a_plain_case_after_a_server_case_still_stops_what_it_leaves() {
    // Without a cgroup, only the scan finds what a workload left: it must
    // not keep the server case's scope.
    let suite = format!(
        "{}[[case]]\nname = \"plain\"\ncommand = [\"sh\", \"-c\", \"setsid sleep 300 & echo $! > left.pid; sleep 0.3\"]\n",
        serving_suite("", ", \"--requests\", \"2\"", "")
    );
    let project = Project::new(&suite);
    let run = project.run(&["--gpu", "off", "--host-method", "procfs"]);
    run.assert_code(0);
    let case = run.case("plain");
    assert_eq!(case["leftover_processes"], 1, "{case:#}");
    let left = read_pid(&project.path().join("left.pid"));
    assert!(!alive(left), "the plain case's leftover {left} survived");
}

#[test]
fn with_repeats_the_clients_figures_are_its_largest_runs() {
    // The client holds 120 MiB in its first run, 16 MiB in the second.
    let load = toml_str(&workload("load.py"));
    let suite = serving_suite("", "", "repeat = 2\nclient_budget = { host = \"1 GiB\" }").replace(
        &format!("command = [\"python3\", {load}, \"--url\", \"http://127.0.0.1:{{port}}/generate\"]"),
        &format!(
            "command = [\"sh\", \"-c\", \"if [ -e ran ]; then m=16; else m=120; touch ran; fi; exec python3 {} --url http://127.0.0.1:{{port}}/generate --requests 2 --mib $m\"]",
            workload("load.py")
        ),
    );
    assert!(suite.contains("touch ran"), "{suite}");
    let project = Project::new(&suite);
    let run = project.run(&["--gpu", "off"]);
    run.assert_code(0);
    let case = run.case("serve");
    assert!(
        mib(&case["client"]["host_peak_bytes"]) >= 120,
        "{:#}",
        case["client"]
    );
    let check = case["checks"]
        .as_array()
        .and_then(|checks| checks.iter().find(|c| c["name"] == "client.budget.host"))
        .cloned()
        .unwrap_or_default();
    assert!(mib(&check["figure_bytes"]) >= 120, "{check:#}");
}

#[test]
fn a_server_that_grows_round_after_round_of_load_fails_as_a_leak() {
    let project = Project::new(&serving_suite(
        ", \"--leak-mib\", \"8\", \"--pids\", \"pids.txt\"",
        ", \"--requests\", \"3\", \"--concurrency\", \"1\"",
        "duration = \"4s\"\nleak = { warmup = 1, max_growth = \"16 MiB\" }",
    ));
    let run = project.run(&["--gpu", "off"]);
    run.assert_code(1);
    let case = run.case("serve");
    assert_eq!(case["failure_kind"], "leak", "{case:#}");
    assert!(
        case["instances"][0]["runs"]
            .as_u64()
            .is_some_and(|runs| runs >= 4),
        "the load ran in rounds: {}",
        case["instances"][0]
    );
    assert_none_alive(&project.path().join("pids.txt"));
}

/// vLLM's "GPU KV cache size: N tokens", read from the server's log as
/// `output.kv_tokens`, locked, and gated against the lock: a pool within
/// 1% passes; one 23.7% smaller (vllm#50780) fails as a regression with
/// both figures and the line it was read at; a server that no longer
/// prints it fails the gate it can no longer verify.
#[test]
fn a_kv_cache_size_the_server_prints_is_locked_and_gated() {
    let suite = |tokens: u64| {
        serving_suite(
            &format!(", \"--kv-tokens\", \"{tokens}\""),
            ", \"--requests\", \"3\"",
            "metrics_from_output = [{ name = \"kv_tokens\", regex = 'KV cache size: ([\\d,]+) tokens', better = \"higher\" }]",
        )
    };
    let project = Project::new(&suite(1_489_281));
    let run = project.run(&[]);
    run.assert_code(0);
    let case = run.case("serve");
    let output = &case["outputs"][0];
    assert_eq!(output["name"], "kv_tokens", "{case:#}");
    assert_eq!(output["value"], 1_489_281.0, "{output:#}");
    assert_eq!(output["matches"], 1, "{output:#}");
    let at = output["at"].as_str().unwrap_or_default();
    assert!(
        at.starts_with("cases/serve/server.stderr.log:"),
        "{output:#}"
    );

    project.lock(&[]).assert_code(0);
    let lock = std::fs::read_to_string(project.lock_path()).expect("lock");
    assert!(
        lock.contains("[cases.serve.outputs.kv_tokens]") && lock.contains("value = 1489281.0"),
        "{lock}"
    );

    std::fs::write(project.suite(), suite(1_480_000)).expect("suite");
    let run = project.run(&[]);
    run.assert_code(0);
    let within = check(&run.case("serve"), "baseline.output.kv_tokens");
    assert_eq!(within["outcome"], "within", "{within:#}");

    std::fs::write(project.suite(), suite(1_135_957)).expect("suite");
    let run = project.run(&[]);
    run.assert_code(1);
    let case = run.case("serve");
    assert_eq!(case["failure_kind"], "regression", "{case:#}");
    let breached = assert_breached(&case, "baseline.output.kv_tokens");
    let message = breached["message"].as_str().unwrap_or_default();
    assert!(
        message.starts_with(
            "output.kv_tokens 1,135,957 < 1,474,388.19 least accepted (locked 1,489,281, −23.7%; higher is better, tolerance 1%), printed at cases/serve/server.stderr.log:"
        ),
        "{message}"
    );
    assert!(
        run.stderr.contains("output.kv_tokens 1,135,957 <"),
        "{}",
        run.stderr
    );
    let junit = std::fs::read_to_string(project.out().join("junit.xml")).expect("junit");
    assert!(
        junit.contains(r#"<property name="output.kv_tokens" value="1135957"/>"#),
        "{junit}"
    );
    let html = std::fs::read_to_string(project.out().join("report.html")).expect("html");
    let chart = html
        .split("<h3>Numbers from the logs</h3>")
        .nth(1)
        .and_then(|rest| rest.split("</svg>").next())
        .unwrap_or_else(|| panic!("no chart of the numbers from the logs"));
    assert!(
        chart.contains(">1,135,957<")
            && chart.contains(">1,489,281<")
            && chart.contains("least accepted 1,474,388.19"),
        "{chart}"
    );

    std::fs::write(project.suite(), suite(0)).expect("suite");
    let run = project.run(&[]);
    run.assert_code(1);
    let case = run.case("serve");
    assert_eq!(
        case["outputs"][0]["value"],
        serde_json::Value::Null,
        "{case:#}"
    );
    assert_eq!(case["status"], "failed", "{case:#}");
    let unknown = check(&case, "baseline.output.kv_tokens");
    assert_eq!(unknown["passed"], false, "{unknown:#}");
    assert_eq!(unknown["outcome"], "unknown", "{unknown:#}");
    assert!(
        unknown["message"].as_str().is_some_and(|m| m.starts_with(
            "output.kv_tokens was not printed: no line matched its regex; locked 1,489,281"
        )),
        "{unknown:#}"
    );
}

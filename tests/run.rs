//! `oomgate run` end to end: the real binary, real workloads, real /proc.

mod common;

use std::time::{Duration, Instant};

use common::running::Running;
use common::*;

/// A suite whose one case `c` runs alloc.py with these (TOML-quoted) arguments.
fn alloc_suite(args: &str) -> String {
    single_case_suite("c", "alloc.py", args)
}

#[test]
fn quickstart_suite_passes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let suite = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("suites/quickstart.toml");
    let out = dir.path().join("out");
    let output = oomgate()
        .arg("run")
        .arg(&suite)
        .arg("--out")
        .arg(&out)
        .output()
        .expect("run");
    let run = Run::from(output, out.clone());
    run.assert_code(0);
    let results = run.results();
    assert_eq!(results["schema"], oomgate::results::SCHEMA_VERSION);
    assert_eq!(results["summary"]["passed"], 5, "{results:#}");
    assert!(results["finished_at"].is_string());
    let soak = run.case("soak");
    assert!(
        soak["instances"][0]["runs"].as_u64().unwrap_or(0) >= 2,
        "soak relaunched: {soak:#}"
    );
    let concurrent = run.case("concurrent-x3");
    assert_eq!(concurrent["instances"].as_array().map(Vec::len), Some(3));
    for log in [
        "stdout.log",
        "stdout.1.log",
        "stdout.2.log",
        "timeline.json",
    ] {
        assert!(out.join("cases/concurrent-x3").join(log).is_file(), "{log}");
    }
    // One plain line per finished case when stderr is not a terminal.
    assert_eq!(run.stderr.matches("PASS [").count(), 5, "{}", run.stderr);
    assert!(run.stderr.contains("5 passed, 0 failed"), "{}", run.stderr);
}

/// Run alloc.py with these arguments as a passing case; its host peak in MiB.
fn measured_peak_mib(alloc_args: &str) -> u64 {
    let project = Project::new(&alloc_suite(alloc_args));
    let run = project.run(&[]);
    run.assert_code(0);
    run.case("c")["host_peak_bytes"]
        .as_u64()
        .expect("peak measured")
        / MIB
}

#[test]
fn measures_300_mib_within_ten_percent() {
    let peak = measured_peak_mib("\"--mib\", \"300\", \"--hold\", \"1s\"");
    assert!(
        (270..=330).contains(&peak),
        "peak {peak} MiB is not within 10% of 300 MiB"
    );
}

#[test]
fn parent_and_child_are_measured_as_their_sum() {
    let peak =
        measured_peak_mib("\"--mib\", \"200\", \"--child-mib\", \"150\", \"--hold\", \"1500ms\"");
    // 350 MiB of data plus two interpreters; either process alone is far less.
    assert!(
        (340..=420).contains(&peak),
        "peak {peak} MiB is not the sum of parent and child"
    );
}

#[test]
fn grandchildren_count_too() {
    let peak = measured_peak_mib(
        "\"--mib\", \"50\", \"--child-mib\", \"50\", \"--grandchild-mib\", \"150\", \"--hold\", \"1500ms\"",
    );
    assert!(
        (245..=320).contains(&peak),
        "peak {peak} MiB is not the sum of three generations"
    );
}

#[test]
fn budget_breach_fails_and_stops_the_case_early() {
    let suite = format!(
        "{}budget = {{ host = \"200 MiB\" }}\nkill_grace = \"1s\"\n",
        alloc_suite("\"--mib\", \"400\", \"--hold\", \"60s\"")
    );
    let project = Project::new(&suite);
    let started = Instant::now();
    let run = project.run(&[]);
    run.assert_code(1);
    assert!(
        started.elapsed() < Duration::from_secs(40),
        "the case was not stopped early"
    );
    let case = run.case("c");
    assert_eq!(case["status"], "failed");
    assert_eq!(case["failure_kind"], "budget", "{case:#}");
    let budget = assert_breached(&case, "budget.host");
    assert_eq!(budget["limit_bytes"], 200 * MIB);
    // Stopped by oomgate, not ended on its own.
    assert!(case["instances"][0]["exit"]["signal"].is_u64(), "{case:#}");
    assert!(case["wall_time_s"].as_f64().unwrap_or(99.0) < 30.0);
    assert_eq!(case["checks"][0]["name"], "budget.host");
    assert!(case["host_peak_bytes"].as_u64().unwrap_or(0) > 200 * MIB);
    assert!(run.stderr.contains("FAIL ["), "{}", run.stderr);
}

#[test]
fn a_peak_within_budget_passes() {
    let suite = format!(
        "{}budget = {{ host = \"200 MiB\" }}\n",
        alloc_suite("\"--mib\", \"64\", \"--hold\", \"300ms\"")
    );
    let project = Project::new(&suite);
    let run = project.run(&[]);
    run.assert_code(0);
    assert_eq!(run.case("c")["checks"][0]["passed"], true);
}

#[test]
fn non_zero_exit_fails_the_case() {
    let project = Project::new(&alloc_suite(
        "\"--mib\", \"8\", \"--hold\", \"10ms\", \"--exit\", \"3\"",
    ));
    let run = project.run(&[]);
    run.assert_code(1);
    let case = run.case("c");
    assert_eq!(case["status"], "failed");
    assert_eq!(case["failure_kind"], "crash", "{case:#}");
    assert_eq!(case["checks"], serde_json::json!([]), "no limit failed it");
    assert_eq!(case["instances"][0]["exit"]["code"], 3);
}

#[test]
fn environment_reaches_every_instance() {
    // Python's f-string braces are escaped: `{k}` would be a placeholder.
    let script = "import os; print(' '.join(f'{{k}}={{os.environ.get(k)}}' for k in ['OOMGATE_CASE','OOMGATE_INSTANCE','OOMGATE_CONCURRENCY','SIZE','FROM_DEFAULTS']))";
    let suite = format!(
        "[suite]\nname = \"t\"\n[defaults]\nenv = {{ FROM_DEFAULTS = \"yes\", SIZE = \"0\" }}\n[[case]]\nname = \"env-{{n}}\"\ncommand = [\"python3\", \"-c\", {}]\nmatrix = {{ n = [7] }}\nenv = {{ SIZE = \"{{n}}\" }}\nconcurrency = 2\n",
        toml_str(script)
    );
    let project = Project::new(&suite);
    project.run(&[]).assert_code(0);
    let case_dir = project.out().join("cases/env-7");
    let first = std::fs::read_to_string(case_dir.join("stdout.log")).expect("stdout.log");
    let second = std::fs::read_to_string(case_dir.join("stdout.1.log")).expect("stdout.1.log");
    assert_eq!(
        first.trim(),
        "OOMGATE_CASE=env-7 OOMGATE_INSTANCE=0 OOMGATE_CONCURRENCY=2 SIZE=7 FROM_DEFAULTS=yes"
    );
    assert_eq!(
        second.trim(),
        "OOMGATE_CASE=env-7 OOMGATE_INSTANCE=1 OOMGATE_CONCURRENCY=2 SIZE=7 FROM_DEFAULTS=yes"
    );
}

#[test]
fn extra_report_paths_are_written_too() {
    let project = Project::new(&alloc_suite("\"--mib\", \"8\", \"--hold\", \"10ms\""));
    let junit = project.path().join("reports/oomgate.xml");
    let json = project.path().join("reports/results.json");
    let run = project.run(&[
        "--junit",
        &junit.display().to_string(),
        "--json",
        &json.display().to_string(),
    ]);
    run.assert_code(0);
    assert!(
        std::fs::read_to_string(&junit)
            .expect("junit")
            .contains("<testcase name=\"c\"")
    );
    assert_eq!(read_json(&json)["cases"][0]["id"], "c");
    assert!(project.out().join("junit.xml").is_file());
}

#[test]
fn a_rerun_replaces_stale_logs() {
    let project = Project::new(&alloc_suite("\"--mib\", \"8\", \"--hold\", \"10ms\""));
    let stale = project.out().join("cases/c/stdout.3.log");
    std::fs::create_dir_all(stale.parent().expect("parent")).expect("mkdir");
    std::fs::write(project.out().join(".oomgate-out"), "").expect("the marker");
    std::fs::write(&stale, "old").expect("write");
    project.run(&[]).assert_code(0);
    assert!(
        !stale.exists(),
        "logs of an earlier run were left in the case folder"
    );
}

/// Regression: a process whose name the kernel cut inside a multi-byte
/// character could not be parsed from /proc, so its memory was invisible
/// and a case far over budget passed with a peak of 0 B.
#[test]
fn processes_with_non_utf8_names_are_measured() {
    let python = std::process::Command::new("python3")
        .args(["-c", "import sys; print(sys.executable)"])
        .output()
        .expect("python3");
    let python = String::from_utf8_lossy(&python.stdout).trim().to_string();
    let dir = tempfile::tempdir().expect("tempdir");
    // 'a' and five 3-byte characters: the 15-byte comm ends mid-character.
    let script = dir.path().join("a模型训练脚本.py");
    let body = std::fs::read_to_string(workloads().join("alloc.py")).expect("alloc.py");
    let body = body.replacen("#!/usr/bin/env python3", &format!("#!{python}"), 1);
    std::fs::write(&script, body).expect("write script");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let suite = format!(
        "[suite]\nname = \"t\"\nsample_interval = \"20ms\"\n[[case]]\nname = \"c\"\ncommand = [{}, \"--mib\", \"200\", \"--hold\", \"1s\"]\nbudget = {{ host = \"100 MiB\" }}\nkill_grace = \"1s\"\n",
        toml_str(&script.display().to_string())
    );
    let project = Project::new(&suite);
    let run = project.run(&[]);
    run.assert_code(1);
    let case = run.case("c");
    assert!(
        case["host_peak_bytes"].as_u64().unwrap_or(0) > 100 * MIB,
        "{case:#}"
    );
}

/// Regression: a case folder that could not be made ended the run before
/// any report was finished, so the cases already measured were lost from
/// summary.md and report.html (and the last second of them from
/// results.json). The earlier folder of the second case holds a mount
/// point, which nothing removes (a file in its place would simply be
/// removed: `cases/` is oomgate's).
#[test]
fn a_case_folder_that_cannot_be_made_still_leaves_full_reports() {
    let project = Project::new(
        "[suite]\nname = \"t\"\n\
         [[case]]\nname = \"first\"\ncommand = [\"true\"]\n\
         [[case]]\nname = \"second\"\ncommand = [\"true\"]\n",
    );
    std::fs::create_dir_all(project.out().join("cases")).expect("cases/");
    std::fs::write(project.out().join(".oomgate-out"), "").expect("the marker");
    let _held = match SmallDisk::mount(&project.out().join("cases/second/held"), "64k") {
        Ok(disk) => disk,
        Err(why) => {
            eprintln!("skipped: cannot mount a tmpfs in the case folder ({why}); needs root");
            return;
        }
    };
    let run = project.run(&[]);
    run.assert_code(3);
    let results = run.results();
    assert_eq!(results["cases"][0]["id"], "first", "{results:#}");
    assert_eq!(results["not_run"], serde_json::json!(["second"]));
    assert!(results["finished_at"].is_string());
    assert!(project.out().join("summary.md").exists());
    assert!(project.out().join("report.html").exists());
}

/// A file a workload left where a later case's folder goes (`cases/` is
/// in its reach) is removed, and the case runs.
#[test]
fn a_file_where_a_case_folder_goes_is_removed() {
    let project =
        Project::new("[suite]\nname = \"t\"\n[[case]]\nname = \"second\"\ncommand = [\"true\"]\n");
    std::fs::create_dir_all(project.out().join("cases")).expect("cases/");
    std::fs::write(project.out().join(".oomgate-out"), "").expect("the marker");
    std::fs::write(project.out().join("cases/second"), "in the way").expect("write");
    let run = project.run(&[]);
    run.assert_code(0);
    assert!(project.out().join("cases/second").is_dir());
}

/// Regression: an `[environment]` command that left a background child
/// held the run until the probe timeout (60 s), its child was counted
/// against the first case, and its output was kept whole (300 MB).
#[test]
fn environment_commands_end_with_their_own_process_and_are_bounded() {
    let dir = tempfile::tempdir().expect("tempdir");
    let pid_file = dir.path().join("background.pid");
    let project = Project::new(&format!(
        "[suite]\nname = \"t\"\n\
         [environment]\ncommands = {{ bg = [\"sh\", \"-c\", {}], big = [\"python3\", \"-c\", \"print('x' * 3000000)\"] }}\n\
         [[case]]\nname = \"a\"\ncommand = [\"true\"]\n",
        toml_str(&format!(
            "sleep 30 & echo $! > {}; echo hi",
            pid_file.display()
        ))
    ));
    let started = Instant::now();
    let run = project.run(&[]);
    run.assert_code(0);
    // Generous on a loaded machine, far below the 60 s probe timeout.
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "{:?}",
        started.elapsed()
    );
    let results = run.results();
    let commands = &results["environment"]["commands"];
    assert_eq!(commands["bg"]["output"], "hi", "{commands:#}");
    let big = commands["big"]["output"].as_str().unwrap_or_default();
    assert!(big.len() <= 1024 * 1024 + 100, "{} bytes kept", big.len());
    assert!(
        big.ends_with("cut at 1048576 bytes]"),
        "{}",
        &big[big.len() - 60..]
    );
    let background = read_pid(&pid_file);
    assert!(!alive(background), "the probe's background child survived");
    assert_eq!(run.case("a")["leftover_processes"], 0);
}

/// `nohup oomgate run …`: a hangup, which oomgate was started ignoring,
/// neither stops the run nor reaches the workload (it inherits the signal
/// ignored, as without oomgate).
#[test]
fn a_hangup_oomgate_was_started_ignoring_does_not_stop_the_run() {
    use std::os::unix::process::CommandExt;
    let project = Project::new("");
    let dir = project.path().display().to_string();
    let script = format!(
        "grep SigIgn /proc/self/status; touch {dir}/started; \
         while [ ! -e {dir}/go ]; do sleep 0.05; done"
    );
    std::fs::write(
        project.suite(),
        format!(
            "[suite]\nname = \"t\"\ngpu = \"off\"\n[[case]]\nname = \"a\"\ncommand = [\"sh\", \"-c\", {}]\n",
            toml_str(&script)
        ),
    )
    .expect("write suite");
    let mut command = project.run_command();
    // SAFETY: only `signal` between fork and exec.
    unsafe {
        command.pre_exec(|| {
            libc::signal(libc::SIGHUP, libc::SIG_IGN);
            Ok(())
        });
    }
    let mut running = Running::spawn(&project, command);
    running.wait_for(&project.path().join("started"));
    // SAFETY: signalling the oomgate process this test started.
    unsafe {
        libc::kill(running.pid(), libc::SIGHUP);
    }
    std::thread::sleep(Duration::from_millis(300));
    std::fs::write(project.path().join("go"), "").expect("go");
    let run = running.finish_within_a_minute();
    run.assert_code(0);
    assert_eq!(run.case("a")["status"], "passed");
    let log = std::fs::read_to_string(project.out().join("cases/a/stdout.log")).expect("log");
    let mask = log
        .trim()
        .strip_prefix("SigIgn:")
        .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
        .expect("a SigIgn line");
    assert_ne!(mask & (1 << (libc::SIGHUP - 1)), 0, "{log}");
}

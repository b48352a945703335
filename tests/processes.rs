//! Process control: timeouts, leftovers, launch failures and Ctrl-C, with
//! real process trees. Every test asserts that no process survives.

mod common;

use std::time::Duration;

use common::*;

fn tree_suite(pid_dir: &std::path::Path, flags: &[&str], limits: &str) -> String {
    let mut command = vec![
        toml_str("python3"),
        toml_str(&workload("tree.py")),
        toml_str("--pid-dir"),
        toml_str(&pid_dir.display().to_string()),
    ];
    command.extend(flags.iter().map(|f| toml_str(f)));
    format!(
        "[suite]\nname = \"t\"\nsample_interval = \"20ms\"\n[[case]]\nname = \"tree\"\ncommand = [{}]\n{limits}\n",
        command.join(", ")
    )
}

fn assert_all_dead(pid_dir: &std::path::Path) {
    for role in ["parent", "child", "grandchild"] {
        let pid = read_pid(&pid_dir.join(format!("{role}.pid")));
        assert!(!alive(pid), "{role} {pid} survived the case");
    }
}

#[test]
fn timeout_kills_the_whole_tree_including_the_grandchild() {
    let pids = tempfile::tempdir().expect("tempdir");
    let project = Project::new(&tree_suite(
        pids.path(),
        &[],
        "timeout = \"3s\"\nkill_grace = \"1s\"",
    ));
    let run = project.run(&[]);
    run.assert_code(1);
    let case = run.case("tree");
    assert_eq!(case["status"], "timed-out");
    assert!(
        case["message"]
            .as_str()
            .unwrap_or_default()
            .starts_with("timed out after 3.0s"),
        "{case:#}"
    );
    assert_all_dead(pids.path());
    assert!(run.stderr.contains("TIMEOUT ["), "{}", run.stderr);
}

#[test]
fn timeout_kills_a_detached_grandchild_that_ignores_sigterm() {
    let pids = tempfile::tempdir().expect("tempdir");
    let project = Project::new(&tree_suite(
        pids.path(),
        &["--detach", "--ignore-term"],
        "timeout = \"3s\"\nkill_grace = \"500ms\"",
    ));
    let run = project.run(&[]);
    run.assert_code(1);
    assert_eq!(run.case("tree")["status"], "timed-out");
    assert_all_dead(pids.path());
}

#[test]
fn processes_left_behind_are_stopped_and_reported() {
    let pids = tempfile::tempdir().expect("tempdir");
    let project = Project::new(&tree_suite(
        pids.path(),
        &["--parent-exits", "1", "--detach"],
        "kill_grace = \"1s\"",
    ));
    let run = project.run(&[]);
    run.assert_code(0);
    let case = run.case("tree");
    assert_eq!(case["status"], "passed");
    assert_eq!(case["leftover_processes"], 2, "{case:#}");
    assert!(
        run.stderr.contains("2 process(es) were still running"),
        "{}",
        run.stderr
    );
    assert_all_dead(pids.path());
}

#[test]
fn a_command_that_cannot_start_fails_only_its_case() {
    let project = Project::new(
        "[suite]\nname = \"t\"\n\
         [[case]]\nname = \"not-on-path\"\ncommand = [\"no-such-command-oomgate\"]\n\
         [[case]]\nname = \"missing-file\"\ncommand = [\"./missing.sh\"]\n\
         [[case]]\nname = \"not-executable\"\ncommand = [\"./plain.txt\"]\n\
         [[case]]\nname = \"missing-cwd\"\ncommand = [\"true\"]\ncwd = \"nowhere\"\n\
         [[case]]\nname = \"fine\"\ncommand = [\"true\"]\n",
    );
    std::fs::write(project.path().join("plain.txt"), "not a program").expect("write");
    let run = project.run(&[]);
    run.assert_code(1);
    let expectations = [
        (
            "not-on-path",
            "cannot start `no-such-command-oomgate`: command not found on PATH",
        ),
        ("missing-file", "missing.sh does not exist"),
        ("not-executable", "plain.txt is not executable"),
        ("missing-cwd", "nowhere does not exist"),
    ];
    for (id, fragment) in expectations {
        let case = run.case(id);
        assert_eq!(case["status"], "error", "{case:#}");
        let message = case["message"].as_str().unwrap_or_default();
        assert!(
            message.contains(fragment),
            "{id}: `{fragment}` not in `{message}`"
        );
    }
    assert_eq!(run.case("fine")["status"], "passed");
    assert_eq!(run.results()["summary"]["error"], 4);
}

#[test]
fn interrupt_stops_the_case_writes_results_and_exits_130() {
    let pids = tempfile::tempdir().expect("tempdir");
    let suite = format!(
        "{}[[case]]\nname = \"never\"\ncommand = [\"true\"]\n",
        tree_suite(pids.path(), &["--detach"], "kill_grace = \"1s\"")
    );
    let project = Project::new(&suite);
    let child = project
        .run_command()
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn oomgate");
    wait_for_pid(&pids.path().join("grandchild.pid"), Duration::from_secs(30));
    let oomgate_pid = i32::try_from(child.id()).expect("pid");
    // SAFETY: signalling the oomgate process this test started.
    unsafe {
        libc::kill(oomgate_pid, libc::SIGINT);
    }
    let output = child.wait_with_output().expect("wait");
    let run = Run::from(output, project.out());
    run.assert_code(130);
    let results = run.results();
    assert_eq!(results["interrupted"], true);
    assert_eq!(run.case("tree")["status"], "interrupted");
    assert_eq!(results["not_run"], serde_json::json!(["never"]));
    assert_all_dead(pids.path());
    let junit = std::fs::read_to_string(project.out().join("junit.xml")).expect("junit");
    assert!(
        junit.contains("not run: oomgate was interrupted"),
        "{junit}"
    );
}

/// SIGKILL to oomgate itself (a cancelled CI job): nothing of the case may
/// survive it, neither the grandchild that left the process group with
/// setsid() nor a double-forked daemon, all of them ignoring SIGTERM.
#[test]
fn sigkill_to_oomgate_ends_every_process_of_the_case() {
    let pids = tempfile::tempdir().expect("tempdir");
    let project = Project::new(&tree_suite(
        pids.path(),
        &["--detach", "--daemon", "--ignore-term"],
        "",
    ));
    let mut child = project
        .run_command()
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn oomgate");
    let roles = ["parent", "child", "grandchild", "daemon"];
    let started: Vec<(&str, i32)> = roles
        .iter()
        .map(|role| {
            let path = pids.path().join(format!("{role}.pid"));
            (*role, wait_for_pid(&path, Duration::from_secs(30)))
        })
        .collect();
    for (role, pid) in &started {
        assert!(alive(*pid), "{role} {pid} is not running before the kill");
    }
    child.kill().expect("SIGKILL oomgate");
    child.wait().expect("wait for oomgate");
    // The target is well under 2 s (scripts/bench-kill.sh measures it);
    // the test only allows for a slow, loaded machine.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let survivors: Vec<&(&str, i32)> = started.iter().filter(|(_, pid)| alive(*pid)).collect();
        if survivors.is_empty() {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "survived oomgate's SIGKILL: {survivors:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

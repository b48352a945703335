//! The command-line contract: subcommands, exit codes, errors with
//! locations, and paths that do not depend on the current directory.

mod common;

use common::*;

const VALID: &str = "[suite]\nname = \"s\"\n[[case]]\nname = \"a-{n}\"\ncommand = [\"true\"]\nmatrix = { n = [1, 2] }\n[[case]]\nname = \"b\"\ncommand = [\"./script.sh\", \"x y\"]\n";

#[test]
fn malformed_suite_exits_2_with_file_and_line_and_runs_nothing() {
    let project = Project::new(
        "[suite]\nname = \"s\"\n[[case]]\nname = \"a\"\ncommand = [\"true\"]\ntmeout = \"5m\"\n",
    );
    let run = project.run(&[]);
    run.assert_code(2);
    assert!(
        run.stderr.contains("suite.toml:6:1: unknown key `tmeout`"),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr.contains("did you mean `timeout`?"),
        "{}",
        run.stderr
    );
    assert!(
        !project.out().exists(),
        "nothing may be written for an invalid suite"
    );
}

#[test]
fn toml_syntax_error_exits_2_with_location() {
    let project = Project::new("[suite]\nname = \"s\n");
    let run = project.run(&[]);
    run.assert_code(2);
    assert!(run.stderr.contains("suite.toml:2:"), "{}", run.stderr);
}

#[test]
fn missing_suite_file_exits_2() {
    let run = Run::from(
        oomgate()
            .args(["run", "/nonexistent/suite.toml"])
            .output()
            .expect("run"),
        "out".into(),
    );
    run.assert_code(2);
    assert!(
        run.stderr
            .contains("cannot read suite /nonexistent/suite.toml"),
        "{}",
        run.stderr
    );
}

#[test]
fn unknown_flag_exits_2() {
    let output = oomgate()
        .args(["run", "suite.toml", "--no-such-flag"])
        .output()
        .expect("run");
    assert_eq!(output.status.code(), Some(2));
}

#[test]
fn filter_matching_nothing_exits_2() {
    let project = Project::new(VALID);
    let run = project.run(&["--filter", "zzz"]);
    run.assert_code(2);
    assert!(run.stderr.contains("no case of"), "{}", run.stderr);
    assert!(run.stderr.contains("a-1, a-2, b"), "{}", run.stderr);
}

#[test]
fn list_prints_expanded_ids() {
    let project = Project::new(VALID);
    let output = oomgate()
        .arg("list")
        .arg(project.suite())
        .output()
        .expect("run");
    assert_eq!(output.status.code(), Some(0));
    assert_eq!(String::from_utf8_lossy(&output.stdout), "a-1\na-2\nb\n");
    let output = oomgate()
        .arg("list")
        .arg(project.suite())
        .args(["--filter", "a-"])
        .output()
        .expect("run");
    assert_eq!(String::from_utf8_lossy(&output.stdout), "a-1\na-2\n");
}

#[test]
fn an_equals_filter_takes_one_case_alone() {
    let project = Project::new(
        "[suite]\nname = \"s\"\n[[case]]\nname = \"train\"\ncommand = [\"true\"]\n[[case]]\nname = \"train-offload\"\ncommand = [\"true\"]\n",
    );
    let list = |filter: &str| {
        let output = oomgate()
            .arg("list")
            .arg(project.suite())
            .args(["--filter", filter])
            .output()
            .expect("run");
        (
            output.status.code(),
            String::from_utf8_lossy(&output.stdout).into_owned(),
        )
    };
    assert_eq!(list("train"), (Some(0), "train\ntrain-offload\n".into()));
    assert_eq!(list("=train"), (Some(0), "train\n".into()));
    assert_eq!(list("=trai").0, Some(2), "a whole id, not a prefix");
}

#[test]
fn python_stands_for_the_suites_interpreter() {
    // The suite names an interpreter that does not exist; --python names
    // one that does, and the environment records it.
    let project = Project::new(
        "[suite]\nname = \"s\"\n[environment]\npython = \"no-such-python\"\npackages = [\"pip\"]\n[[case]]\nname = \"a\"\ncommand = [\"true\"]\n",
    );
    let run = project.run(&["--python", "python3", "--repeat", "2"]);
    run.assert_code(0);
    let results = project.results();
    let python = &results["environment"]["python"];
    assert_eq!(python["interpreter"], "python3", "{python}");
    assert!(
        python["packages"]["pip"]
            .as_str()
            .is_some_and(|v| v != "absent"),
        "{python}"
    );
    // --repeat: the case ran twice.
    let repeats = results["cases"][0]["repeats"]
        .as_array()
        .map_or(0, Vec::len);
    assert_eq!(repeats, 2, "{}", results["cases"][0]);
}

#[test]
fn check_prints_the_plan_and_runs_nothing() {
    let project = Project::new(VALID);
    let output = oomgate()
        .arg("check")
        .arg(project.suite())
        .output()
        .expect("run");
    assert_eq!(output.status.code(), Some(0));
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(text.contains("3 case(s)"), "{text}");
    assert!(text.contains("\na-2\n  command:     true\n"), "{text}");
    assert!(text.contains("command:     ./script.sh 'x y'"), "{text}");
    let program = project
        .path()
        .canonicalize()
        .expect("canonical")
        .join("script.sh");
    assert!(
        text.contains(&format!("program:     {}", program.display())),
        "{text}"
    );
    assert!(!project.out().exists());
}

#[test]
fn help_has_examples_and_exit_codes() {
    for sub in ["run", "check", "list"] {
        let output = oomgate().args([sub, "--help"]).output().expect("run");
        assert_eq!(output.status.code(), Some(0));
        let text = String::from_utf8_lossy(&output.stdout);
        assert!(
            text.contains(&format!("oomgate {sub} suites/")),
            "{sub}: {text}"
        );
        assert!(text.contains("Exit codes"), "{sub}: {text}");
    }
    let output = oomgate().arg("--help").output().expect("run");
    assert!(String::from_utf8_lossy(&output.stdout).contains("130  interrupted"));
}

#[test]
fn unwritable_out_dir_exits_3_before_running() {
    let project = Project::new(
        "[suite]\nname = \"s\"\n[[case]]\nname = \"a\"\ncommand = [\"touch\", \"ran\"]\n",
    );
    let blocker = project.path().join("blocker");
    std::fs::write(&blocker, "a file where a folder should be").expect("write");
    let run = Run::from(
        oomgate()
            .arg("run")
            .arg(project.suite())
            .arg("--out")
            .arg(blocker.join("out"))
            .output()
            .expect("run"),
        blocker.join("out"),
    );
    run.assert_code(3);
    assert!(run.stderr.contains("cannot write to"), "{}", run.stderr);
    assert!(
        !project.path().join("ran").exists(),
        "a case ran before the out dir was checked"
    );
}

#[test]
fn paths_resolve_from_the_suite_not_the_current_directory() {
    let project = Project::new(
        "[suite]\nname = \"s\"\nworkdir = \"work\"\n[[case]]\nname = \"a\"\ncommand = [\"./bin/hello.sh\"]\ncwd = \"sub\"\n",
    );
    let sub = project.path().join("work/sub");
    std::fs::create_dir_all(sub.join("bin")).expect("mkdir");
    let script = sub.join("bin/hello.sh");
    std::fs::write(&script, "#!/bin/sh\npwd\necho \"$OOMGATE_OUT\"\n").expect("write");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).expect("chmod");

    // Started from an unrelated directory, with a relative suite path.
    let elsewhere = tempfile::tempdir().expect("tempdir");
    let relative_suite = pathdiff(project.suite(), elsewhere.path());
    let output = oomgate()
        .current_dir(elsewhere.path())
        .arg("run")
        .arg(&relative_suite)
        .arg("--out")
        .arg("out")
        .output()
        .expect("run");
    let run = Run::from(output, elsewhere.path().join("out"));
    run.assert_code(0);
    let printed =
        std::fs::read_to_string(elsewhere.path().join("out/cases/a/stdout.log")).expect("log");
    let lines: Vec<&str> = printed.lines().collect();
    assert_eq!(
        lines[0],
        sub.canonicalize().expect("canonical").display().to_string()
    );
    // OOMGATE_OUT is absolute even though --out was relative.
    assert_eq!(
        lines[1],
        elsewhere.path().join("out/cases/a").display().to_string()
    );
}

/// `target` relative to `base`, through `..` components.
fn pathdiff(target: std::path::PathBuf, base: &std::path::Path) -> std::path::PathBuf {
    let depth = base.components().count() - 1;
    let mut relative = std::path::PathBuf::new();
    for _ in 0..depth {
        relative.push("..");
    }
    relative.join(target.strip_prefix("/").expect("absolute"))
}

#[test]
fn unsafe_case_names_stay_inside_the_out_dir() {
    let project = Project::new(
        "[suite]\nname = \"s\"\n[[case]]\nname = \"../../escape\"\ncommand = [\"true\"]\n[[case]]\nname = \"a/b\"\ncommand = [\"true\"]\n",
    );
    project.run(&[]).assert_code(0);
    assert!(
        project
            .out()
            .join("cases/_._.._escape/stdout.log")
            .is_file()
    );
    assert!(project.out().join("cases/a_b/stdout.log").is_file());
    assert!(!project.path().join("escape").exists());
    let results = project.results();
    assert_eq!(results["cases"][0]["id"], "../../escape");
}

/// Regression: `--out .` (or any folder of the user's) had oomgate replace
/// and delete files there, e.g. a user's own `./cases` folder; and a
/// folder holding only the user's own `junit.xml` was taken for an earlier
/// oomgate's layout and its file replaced.
#[test]
fn a_folder_that_is_not_an_out_dir_is_refused_and_left_alone() {
    let project =
        Project::new("[suite]\nname = \"s\"\n[[case]]\nname = \"a\"\ncommand = [\"true\"]\n");
    let theirs = project.path().join("theirs");
    std::fs::create_dir_all(theirs.join("cases/a")).expect("mkdir");
    std::fs::write(theirs.join("cases/a/keep.txt"), "mine").expect("write");
    std::fs::write(theirs.join("notes.md"), "mine").expect("write");
    let run_in = |out: &std::path::Path| {
        let mut command = project.oomgate();
        command
            .arg("run")
            .arg(project.suite())
            .arg("--out")
            .arg(out);
        project.finish(command)
    };
    let run = run_in(&theirs);
    run.assert_code(2);
    assert!(
        run.stderr.contains("not an oomgate out dir"),
        "{}",
        run.stderr
    );
    assert!(run.stderr.contains("notes.md"), "{}", run.stderr);
    assert_eq!(
        std::fs::read_to_string(theirs.join("cases/a/keep.txt"))
            .ok()
            .as_deref(),
        Some("mine")
    );
    assert!(!theirs.join("results.json").exists());

    // An empty folder is oomgate's: claimed, and used again.
    let empty = project.path().join("empty");
    std::fs::create_dir(&empty).expect("mkdir");
    run_in(&empty).assert_code(0);
    assert!(empty.join(".oomgate-out").is_file());
    run_in(&empty).assert_code(0);

    // A folder holding only the user's own report of another tool
    // (pytest's --junitxml), or a results.json, is not taken for oomgate's
    // layout: refused, listed, untouched.
    for name in ["junit.xml", "results.json", "summary.md"] {
        let reports = project.path().join(format!("reports-{name}"));
        std::fs::create_dir(&reports).expect("mkdir");
        std::fs::write(reports.join(name), "theirs").expect("write");
        let run = run_in(&reports);
        run.assert_code(2);
        assert!(
            run.stderr.contains(name) && run.stderr.contains("--adopt-out-dir"),
            "{}",
            run.stderr
        );
        assert_eq!(
            std::fs::read_to_string(reports.join(name)).ok().as_deref(),
            Some("theirs")
        );
        assert!(!reports.join(".oomgate-out").exists());
    }

    // One an oomgate from before the marker wrote is adopted when asked,
    // once: marked, then used as any out dir.
    let earlier = project.path().join("earlier");
    std::fs::create_dir_all(earlier.join("cases/a")).expect("mkdir");
    std::fs::write(earlier.join("results.json"), "{}").expect("write");
    run_in(&earlier).assert_code(2);
    let mut adopt = project.oomgate();
    adopt
        .arg("run")
        .arg(project.suite())
        .arg("--out")
        .arg(&earlier)
        .arg("--adopt-out-dir");
    project.finish(adopt).assert_code(0);
    assert!(earlier.join(".oomgate-out").is_file());
    run_in(&earlier).assert_code(0);
    // --adopt-out-dir takes no folder with anything else in it.
    let mut adopt = project.oomgate();
    adopt
        .arg("run")
        .arg(project.suite())
        .arg("--out")
        .arg(&theirs)
        .arg("--adopt-out-dir");
    let run = project.finish(adopt);
    run.assert_code(2);
    assert!(run.stderr.contains("notes.md"), "{}", run.stderr);
}

/// Regression: `oomgate check /dev/zero` read until it was killed, and a
/// 50 MB blank suite took gigabytes.
#[test]
fn a_suite_must_be_a_regular_file_of_sane_size() {
    let check = |path: &std::path::Path| {
        let output = oomgate()
            .arg("check")
            .arg(path)
            .output()
            .expect("run oomgate check");
        (
            output.status.code(),
            String::from_utf8_lossy(&output.stderr).into_owned(),
        )
    };
    let (code, stderr) = check(std::path::Path::new("/dev/zero"));
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("not a regular file"), "{stderr}");
    let dir = tempfile::tempdir().expect("tempdir");
    let huge = dir.path().join("huge.toml");
    std::fs::write(&huge, " ".repeat(2 * 1024 * 1024)).expect("write");
    let (code, stderr) = check(&huge);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("a suite may have"), "{stderr}");
}

/// Regression (issue 20): a suite with invalid UTF-8 was refused with no
/// place ("stream did not contain valid UTF-8").
#[test]
fn a_suite_that_is_not_utf8_is_a_located_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    let latin1 = dir.path().join("latin1.toml");
    std::fs::write(
        &latin1,
        b"[suite]\nname = \"s\"\n[[case]]\nname = \"caf\xe9\"\ncommand = [\"true\"]\n",
    )
    .expect("write");
    let output = oomgate()
        .arg("check")
        .arg(&latin1)
        .output()
        .expect("run oomgate check");
    let stderr = String::from_utf8_lossy(&output.stderr);
    let code = output.status.code();
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "{}:4:12: not UTF-8: byte(s) 0xE9 here are not a character\n  |\n4 | name = \"caf{}\"\n  |            ^\n  = help: a suite is TOML, which is UTF-8 text: save the file as UTF-8",
            latin1.display(),
            char::REPLACEMENT_CHARACTER
        )),
        "{stderr}"
    );
}

#[test]
fn check_shows_each_cases_limits_and_leak_check() {
    let project = Project::new(
        "[suite]\nname = \"l\"\n[[case]]\nname = \"a\"\ncommand = [\"true\"]\nlimits = { \"metric.tokens_per_s\" = \">= 1500\", \"probe.peak_allocated\" = \"<= 1 GiB\" }\nleak = { warmup = 3, max_growth = \"64 MiB\" }\n",
    );
    let output = project
        .oomgate()
        .arg("check")
        .arg(project.suite())
        .output()
        .expect("run oomgate check");
    let shown = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{shown}");
    assert!(
        shown.contains("  checks:      metric.tokens_per_s >= 1500, probe.peak_allocated <= 1 GiB, leak: growth at most 64.0 MiB after 3 warm-up iteration(s)"),
        "{shown}"
    );
}

/// oomgate's stderr as a terminal shows it: run with stderr on a new
/// pseudo-terminal of `rows`x`cols` (0x0: no size), the bytes it drew.
fn stderr_on_a_pty(
    project: &Project,
    rows: u16,
    cols: u16,
    env: &[(&str, &str)],
    extra: &[&str],
) -> String {
    let script = r#"
import fcntl, os, pty, struct, subprocess, sys, termios
rows, cols = int(sys.argv[1]), int(sys.argv[2])
master, slave = pty.openpty()
if rows or cols:
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
child = subprocess.Popen(sys.argv[3:], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=slave)
os.close(slave)
out = b""
while True:
    try:
        chunk = os.read(master, 65536)
    except OSError:
        break
    if not chunk:
        break
    out += chunk
child.wait()
sys.stdout.buffer.write(out)
"#;
    let mut command = std::process::Command::new("python3");
    command
        .arg("-c")
        .arg(script)
        .arg(rows.to_string())
        .arg(cols.to_string())
        .arg(env!("CARGO_BIN_EXE_oomgate"))
        .arg("run")
        .arg(project.suite())
        .arg("--out")
        .arg(project.out())
        .args(extra)
        .env_remove("CI")
        .env_remove("GITHUB_ACTIONS")
        .env_remove("GITLAB_CI")
        .env_remove("BUILDKITE")
        .env_remove("JENKINS_URL")
        .env_remove("TF_BUILD")
        .env_remove("TEAMCITY_VERSION")
        .env_remove("CIRCLECI")
        .env_remove("BITBUCKET_BUILD_NUMBER")
        .env_remove("NO_COLOR")
        .env("TERM", "xterm");
    for (key, value) in env {
        command.env(key, value);
    }
    let output = command.output().expect("run under a pty");
    String::from_utf8_lossy(&output.stdout).into_owned()
}

#[test]
fn the_live_display_redraws_only_on_an_interactive_terminal() {
    let project = Project::new(
        "[suite]\nname = \"p\"\n[[case]]\nname = \"slow\"\ncommand = [\"sleep\", \"0.6\"]\n",
    );
    // indicatif clears and redraws its line with `ESC [2K` / `ESC [1A`.
    let redraws = |text: &str| text.contains("\u{1b}[2K") || text.contains("\u{1b}[1A");
    let interactive = stderr_on_a_pty(&project, 24, 80, &[], &[]);
    assert!(
        redraws(&interactive),
        "a live line on a sized terminal:\n{interactive:?}"
    );
    for (what, rows, cols, env, extra) in [
        ("CI=true", 24, 80, vec![("CI", "true")], vec![]),
        (
            "JENKINS_URL",
            24,
            80,
            vec![("JENKINS_URL", "http://ci")],
            vec![],
        ),
        ("a 0x0 terminal", 0, 0, vec![], vec![]),
        (
            "--progress lines",
            24,
            80,
            vec![],
            vec!["--progress", "lines"],
        ),
    ] {
        let text = stderr_on_a_pty(&project, rows, cols, &env, &extra);
        assert!(!redraws(&text), "{what}: no redraws:\n{text:?}");
        assert!(
            text.contains("slow"),
            "{what}: the finished line:\n{text:?}"
        );
    }
    // The finished case's line, as `lines` prints it.
    let finished = |text: &str| {
        text.lines()
            .any(|l| l.contains("PASS") && l.contains("ms] "))
    };
    let lines = stderr_on_a_pty(&project, 24, 80, &[], &["--progress", "lines"]);
    assert!(finished(&lines), "{lines:?}");
    let quiet = stderr_on_a_pty(&project, 24, 80, &[], &["--progress", "none"]);
    assert!(!redraws(&quiet) && quiet.contains("Summary"), "{quiet:?}");
    assert!(!finished(&quiet), "no per-case line:\n{quiet:?}");
}

#[test]
fn partitions_split_the_cases_and_are_recorded() {
    let project = Project::new(
        "[suite]\nname = \"p\"\n[[case]]\nname = \"c{i}\"\ncommand = [\"true\"]\nmatrix = { i = [1, 2, 3, 4, 5] }\n",
    );
    let mut seen = Vec::new();
    for index in 1..=3 {
        let partition = format!("count:{index}/3");
        let run = project.run(&["--partition", &partition]);
        run.assert_code(0);
        let results = run.results();
        assert_eq!(
            results["partition"],
            serde_json::json!({ "kind": "count", "index": index, "total": 3 })
        );
        for case in results["cases"].as_array().into_iter().flatten() {
            seen.push(case["id"].as_str().unwrap_or_default().to_string());
        }
    }
    seen.sort();
    assert_eq!(
        seen,
        ["c1", "c2", "c3", "c4", "c5"],
        "every case in one shard"
    );

    // More shards than cases: an empty shard runs nothing, says so, passes.
    let empty = project.run(&["--partition", "count:6/6"]);
    empty.assert_code(0);
    assert!(
        empty
            .stderr
            .contains("note: shard count:6/6 holds none of the 5 case(s)"),
        "{}",
        empty.stderr
    );
    assert_eq!(empty.results()["cases"], serde_json::json!([]));

    let bad = project.run(&["--partition", "count:0/3"]);
    bad.assert_code(2);
    assert!(bad.stderr.contains("is not a partition"), "{}", bad.stderr);
}

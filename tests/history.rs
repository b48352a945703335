//! The run history end to end, with the real binary and a real SQLite
//! file: a run records itself (once, with its commit and branch), `history
//! show` draws it, `history add` backfills results and keeps each run
//! once, a shard records nothing and its merge records the run, a history
//! that cannot be reached changes no verdict (unless the suite requires
//! it), a file that is no history is refused and left as it is, four
//! processes recording at once lose no run, and no secret is stored.

mod common;

use std::path::Path;
use std::process::Command;

use common::*;

fn suite(extra_suite_keys: &str) -> String {
    format!(
        "[suite]\nname = \"h\"\nsample_interval = \"20ms\"\n{extra_suite_keys}\n\
         [[case]]\nname = \"small\"\ncommand = [\"python3\", {}, \"--mib\", \"8\", \"--hold\", \"50ms\"]\n\n\
         [[case]]\nname = \"bigger\"\ncommand = [\"python3\", {}, \"--mib\", \"24\", \"--hold\", \"50ms\"]\n",
        toml_str(&workload("alloc.py")),
        toml_str(&workload("alloc.py")),
    )
}

fn show_json(project: &Project, history: &Path, extra: &[&str]) -> serde_json::Value {
    let output = project
        .oomgate()
        .args(["history", "show", "--json", "--history"])
        .arg(history)
        .args(extra)
        .output()
        .expect("history show");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("JSON")
}

#[test]
fn a_run_records_itself_once_and_history_show_draws_it() {
    let project = Project::new(&suite("history = \"runs.sqlite\""));
    let history = project.path().join("runs.sqlite");
    let mut ids = Vec::new();
    for _ in 0..2 {
        let run = project.run(&[
            "--no-baseline",
            "--gpu",
            "off",
            "--branch",
            "main",
            "--commit",
            "abc1234",
        ]);
        run.assert_code(0);
        assert!(
            run.stderr.contains("history: recorded run"),
            "{}",
            run.stderr
        );
        ids.push(
            run.results()["run_id"]
                .as_str()
                .expect("a run id")
                .to_string(),
        );
    }
    assert_ne!(ids[0], ids[1]);
    let shown = show_json(&project, &history, &[]);
    let runs = shown["runs"].as_array().expect("runs");
    assert_eq!(runs.len(), 2);
    assert_eq!(runs[1]["run_id"], ids[1].as_str());
    assert_eq!(runs[1]["commit"], "abc1234");
    assert_eq!(runs[1]["branch"], "main");
    assert_eq!(runs[1]["recorded_by"], "run");
    let small = runs[1]["cases"]
        .as_array()
        .and_then(|cases| cases.iter().find(|c| c["id"] == "small"))
        .expect("the case");
    let host = &small["figures"]["host_peak_bytes"];
    assert!(host["value"].as_f64().expect("a figure") > 8.0 * MIB as f64);
    assert!(host["method"].as_str().is_some());
    assert_eq!(small["status"], "passed");
    // Its checks are kept as results.json holds them.
    assert!(small["checks"].as_array().is_some());

    let table = project
        .oomgate()
        .args(["history", "show", "--history"])
        .arg(&history)
        .output()
        .expect("history show");
    let text = String::from_utf8_lossy(&table.stdout);
    assert!(text.contains("2 runs"), "{text}");
    let row = text
        .lines()
        .find(|l| l.starts_with("bigger"))
        .unwrap_or_else(|| panic!("no row for bigger:\n{text}"));
    assert!(
        row.contains("host_peak_bytes") && row.contains(" 2 "),
        "{row}"
    );

    // The same results added again: the run is there already.
    let again = project
        .oomgate()
        .args(["history", "add", "--history"])
        .arg(&history)
        .arg(project.out())
        .output()
        .expect("history add");
    let said = String::from_utf8_lossy(&again.stdout);
    assert!(
        said.contains("recorded 0 run(s); 1 already there"),
        "{said}"
    );
    assert_eq!(
        show_json(&project, &history, &[])["runs"]
            .as_array()
            .map(Vec::len),
        Some(2)
    );
}

#[test]
fn results_without_a_run_id_are_added_once_under_their_content() {
    let project = Project::new(&suite(""));
    let old = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/results/schema-4-facts.json");
    let history = project.path().join("backfill.sqlite");
    for expected in ["recorded 1 run(s)", "recorded 0 run(s); 1 already there"] {
        let output = project
            .oomgate()
            .args([
                "history",
                "add",
                "--commit",
                "0ld",
                "--branch",
                "main",
                "--history",
            ])
            .arg(format!("sqlite:{}", history.display()))
            .arg(&old)
            .output()
            .expect("history add");
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        let said = String::from_utf8_lossy(&output.stdout);
        assert!(said.contains(expected), "{said}");
    }
    let runs = show_json(&project, &history, &[])["runs"].clone();
    assert_eq!(runs.as_array().map(Vec::len), Some(1));
    assert_eq!(runs[0]["recorded_by"], "add");
    assert_eq!(runs[0]["commit"], "0ld");
    let id = runs[0]["run_id"].as_str().expect("an id");
    assert_eq!(id.len(), 36, "a UUID: {id}");
}

#[test]
fn a_shard_records_nothing_and_its_merge_records_the_run_once() {
    let project = Project::new(&suite(""));
    let history = project.path().join("fleet.sqlite");
    let location = format!("sqlite:{}", history.display());
    let shard = project.run(&[
        "--no-baseline",
        "--gpu",
        "off",
        "--partition",
        "count:1/1",
        "--history",
        &location,
    ]);
    shard.assert_code(0);
    assert!(
        shard.stderr.contains("a shard records nothing"),
        "{}",
        shard.stderr
    );
    assert!(!history.exists());
    for expected in ["history: recorded run", "was already recorded"] {
        let merged = project
            .oomgate()
            .arg("merge")
            .arg(project.out())
            .arg("--out")
            .arg(project.path().join("merged"))
            .args(["--history", &location])
            .output()
            .expect("merge");
        let stderr = String::from_utf8_lossy(&merged.stderr);
        assert!(merged.status.success(), "{stderr}");
        assert!(stderr.contains(expected), "{stderr}");
    }
    let runs = show_json(&project, &history, &[])["runs"].clone();
    assert_eq!(runs.as_array().map(Vec::len), Some(1));
    assert_eq!(runs[0]["recorded_by"], "merge");
}

#[test]
fn a_history_out_of_reach_changes_no_verdict_unless_the_suite_requires_it() {
    let unreachable = "history = \"/nonexistent-oomgate-folder/h.sqlite\"";
    let project = Project::new(&suite(unreachable));
    let run = project.run(&["--no-baseline", "--gpu", "off"]);
    run.assert_code(0);
    assert!(
        run.stderr
            .contains("warning: history: this run was not recorded"),
        "{}",
        run.stderr
    );

    let required = Project::new(&suite(&format!("{unreachable}\nhistory_required = true")));
    let run = required.run(&["--no-baseline", "--gpu", "off"]);
    run.assert_code(3);
    assert!(
        run.stderr.contains("history_required = true"),
        "{}",
        run.stderr
    );
    // The reports were written all the same.
    assert_eq!(run.results()["summary"]["passed"], 2);

    // --no-history records nothing, whatever the suite says.
    let run = required.run(&["--no-baseline", "--gpu", "off", "--no-history"]);
    run.assert_code(0);
}

#[test]
fn a_file_that_is_no_history_is_refused_and_left_as_it_is() {
    let project = Project::new(&suite(""));
    let notes = project.path().join("notes.txt");
    std::fs::write(&notes, "not a database\n").expect("written");
    let run = project.run(&[
        "--no-baseline",
        "--gpu",
        "off",
        "--history",
        &format!("sqlite:{}", notes.display()),
    ]);
    run.assert_code(0);
    assert!(
        run.stderr.contains("not an SQLite database"),
        "{}",
        run.stderr
    );
    assert_eq!(
        std::fs::read_to_string(&notes).expect("read"),
        "not a database\n"
    );
    let shown = project
        .oomgate()
        .args(["history", "show", "--history"])
        .arg(format!("sqlite:{}", notes.display()))
        .output()
        .expect("show");
    assert_eq!(shown.status.code(), Some(3));
    let bad = project
        .oomgate()
        .args(["history", "show", "--history", "mysql://db/h"])
        .output()
        .expect("show");
    assert_eq!(bad.status.code(), Some(2));
}

#[test]
fn four_processes_recording_into_one_file_at_once_lose_no_run() {
    let project = Project::new(&suite(""));
    let template: serde_json::Value = read_json(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/results/schema-4-facts.json"),
    );
    let history = project.path().join("shared.sqlite");
    let mut children = Vec::new();
    for writer in 0..4 {
        let mut files = Vec::new();
        for n in 0..5 {
            let mut results = template.clone();
            results["run_id"] =
                serde_json::json!(format!("00000000-0000-4000-8000-0000000{writer}{n:04}"));
            let path = project.path().join(format!("r{writer}-{n}.json"));
            std::fs::write(&path, results.to_string()).expect("written");
            files.push(path);
        }
        let mut command: Command = project.oomgate();
        command
            .args(["history", "add", "--history"])
            .arg(format!("sqlite:{}", history.display()))
            .args(&files);
        children.push(command.spawn().expect("history add"));
    }
    for mut child in children {
        assert!(child.wait().expect("waited").success());
    }
    let runs = show_json(&project, &history, &["--last", "100"])["runs"].clone();
    assert_eq!(runs.as_array().map(Vec::len), Some(20));
}

#[test]
fn no_secret_reaches_the_history() {
    let secret = "hx7-Q2w9-zL4p-secret-value";
    let mut project = Project::new(&suite(""));
    project.env.push(("DEPLOY_TOKEN".into(), secret.into()));
    let history = project.path().join("s.sqlite");
    let run = project.run(&[
        "--no-baseline",
        "--gpu",
        "off",
        "--branch",
        &format!("fix-{secret}"),
        "--history",
        &format!("sqlite:{}", history.display()),
    ]);
    run.assert_code(0);
    let shown = show_json(&project, &history, &[]).to_string();
    assert!(!shown.contains(secret), "{shown}");
    assert!(shown.contains("fix-"), "{shown}");
    for file in ["s.sqlite", "s.sqlite-wal"] {
        let path = project.path().join(file);
        if let Ok(bytes) = std::fs::read(&path) {
            let text = String::from_utf8_lossy(&bytes);
            assert!(!text.contains(secret), "{file} holds the secret");
        }
    }
}

/// A suite whose one case holds `mib` MiB, with a creep limit.
fn growing(mib: u32, extra_suite_keys: &str) -> String {
    format!(
        "[suite]\nname = \"creeping\"\nsample_interval = \"20ms\"\nhistory = \"h.sqlite\"\n{extra_suite_keys}\n\
         [[case]]\nname = \"grow\"\ncommand = [\"python3\", {}, \"--mib\", \"{mib}\", \"--hold\", \"50ms\"]\n",
        toml_str(&workload("alloc.py")),
    )
}

fn run_at(project: &Project, mib: u32, extra: &str, args: &[&str]) -> Run {
    std::fs::write(project.suite(), growing(mib, extra)).expect("suite");
    let mut all = vec!["--gpu", "off", "--branch", "main"];
    all.extend_from_slice(args);
    project.run(&all)
}

fn check_named(run: &Run, name: &str) -> Option<serde_json::Value> {
    run.case("grow")["checks"]
        .as_array()
        .and_then(|checks| checks.iter().find(|c| c["name"] == name).cloned())
}

#[test]
fn creep_that_a_relock_after_each_step_hides_fails_against_the_ratchet() {
    // Steps of about +3% under a 10% tolerance, re-locked after each:
    // the lock never sees red; the ratchet does, past +10% in all (the
    // workload's interpreter adds about 14 MiB to each).
    let creep = "creep = { limit = \"10%\", window = \"30d\" }\ntolerance = { relative = \"10%\", absolute = \"0 MiB\" }";
    let project = Project::new(&growing(200, creep));
    for _ in 0..3 {
        run_at(&project, 200, creep, &["--no-baseline"]).assert_code(0);
    }
    project.lock_from_results().assert_code(0);
    let mut last = None;
    for mib in [206, 212, 218, 224] {
        let run = run_at(&project, mib, creep, &[]);
        let against_lock = check_named(&run, "baseline.host").expect("a baseline check");
        assert_eq!(against_lock["passed"], true, "{against_lock:#}");
        if mib < 224 {
            run.assert_code(0);
            project.lock_from_results().assert_code(0);
        }
        last = Some(run);
    }
    let run = last.expect("runs");
    run.assert_code(1);
    let creep = check_named(&run, "creep.host").expect("a creep check");
    assert_eq!(creep["passed"], false, "{creep:#}");
    assert_eq!(creep["outcome"], "breached");
    let message = creep["message"].as_str().unwrap_or_default();
    assert!(message.contains("over its ratchet"), "{message}");
    assert!(message.contains("creep limit 10%"), "{message}");
    assert_eq!(run.case("grow")["failure_kind"], "creep");
    // The run is recorded all the same, red.
    let shown = show_json(&project, &project.path().join("h.sqlite"), &[]);
    assert_eq!(shown["runs"].as_array().map(Vec::len), Some(7));
    assert_eq!(shown["runs"][6]["passed"], false);
}

#[test]
fn accepted_growth_moves_the_ratchet_and_a_step_is_named() {
    let creep = "creep = { limit = \"10%\" }";
    let project = Project::new(&growing(200, creep));
    for _ in 0..3 {
        run_at(&project, 200, creep, &["--no-baseline"]).assert_code(0);
    }
    let grown = run_at(&project, 300, creep, &["--no-baseline"]);
    grown.assert_code(1);
    let step = check_named(&grown, "step.host").expect("a step");
    assert_eq!(step["passed"], true, "a step is a notice: {step:#}");
    assert!(
        step["message"]
            .as_str()
            .unwrap_or_default()
            .contains("stepped +"),
        "{step:#}"
    );

    let history = project.path().join("h.sqlite");
    let accepted = project
        .oomgate()
        .args([
            "history",
            "accept",
            "grow",
            "--reason",
            "a bigger buffer, on purpose",
            "--by",
            "ada",
            "--branch",
            "main",
            "--history",
        ])
        .arg(format!("sqlite:{}", history.display()))
        .output()
        .expect("accept");
    assert!(
        accepted.status.success(),
        "{}",
        String::from_utf8_lossy(&accepted.stderr)
    );
    let said = String::from_utf8_lossy(&accepted.stdout);
    assert!(said.contains("accepted grow host_peak_bytes"), "{said}");

    let after = run_at(&project, 300, creep, &["--no-baseline"]);
    after.assert_code(0);
    let creep_check = check_named(&after, "creep.host").expect("a creep check");
    let message = creep_check["message"].as_str().unwrap_or_default();
    assert!(message.contains("accepted on main"), "{message}");
    assert!(message.contains("by ada"), "{message}");
    // Another branch is held against its own runs only: none yet.
    let elsewhere = {
        std::fs::write(project.suite(), growing(300, creep)).expect("suite");
        project.run(&["--gpu", "off", "--branch", "topic", "--no-baseline"])
    };
    elsewhere.assert_code(0);
    assert!(check_named(&elsewhere, "creep.host").is_none());
}

#[test]
fn a_creep_limit_is_checked_where_it_is_written() {
    let project = Project::new(&growing(
        10,
        "creep = { limit = \"ten percent\", action = \"shout\" }",
    ));
    let run = project.run(&["--gpu", "off"]);
    run.assert_code(2);
    assert!(run.stderr.contains("creep.limit"), "{}", run.stderr);
    assert!(run.stderr.contains("creep.action"), "{}", run.stderr);
    assert!(run.stderr.contains("suite.toml:5:"), "{}", run.stderr);
}

#[test]
fn a_creep_with_action_warn_passes_and_says_so() {
    let creep = "creep = { limit = \"10%\", action = \"warn\" }";
    let project = Project::new(&growing(200, creep));
    for _ in 0..3 {
        run_at(&project, 200, creep, &["--no-baseline"]).assert_code(0);
    }
    let run = run_at(&project, 300, creep, &["--no-baseline"]);
    run.assert_code(0);
    let creep_check = check_named(&run, "creep.host").expect("a creep check");
    assert_eq!(
        (
            creep_check["passed"].clone(),
            creep_check["outcome"].clone()
        ),
        (true.into(), "breached".into())
    );
    assert!(
        run.stderr.contains("history: grow: host peak") && run.stderr.contains("a warning only"),
        "{}",
        run.stderr
    );
    assert!(run.stderr.contains("stepped +"), "{}", run.stderr);
    let summary = std::fs::read_to_string(project.out().join("summary.md")).expect("summary");
    assert!(summary.contains("Against the run history"), "{summary}");
    // A sparkline of the case's host peak over its 4 runs.
    assert!(summary.contains("grow: ▁▁▁█ host peak"), "{summary}");
    // report.html draws the case over its runs, the ratchet and the limit.
    let page = std::fs::read_to_string(project.out().join("report.html")).expect("page");
    assert!(page.contains("Over its last runs"), "no trend chart");
    assert!(page.contains("creep limit"), "no creep limit drawn");
    assert!(page.contains("step: this run"), "no step drawn");
    assert_eq!(
        run.case("grow")["trend"]["past"].as_array().map(Vec::len),
        Some(3)
    );
}

/// A fresh history in the test PostgreSQL server (a schema of its own),
/// or `None` without one: said, and a failure under `CI=true` or
/// `OOMGATE_REQUIRE_POSTGRES=1` (as .ci/run sets).
fn postgres_history() -> Option<String> {
    let Some(url) = std::env::var("OOMGATE_TEST_POSTGRES")
        .ok()
        .filter(|u| !u.is_empty())
    else {
        let required = std::env::var("CI").ok().as_deref() == Some("true")
            || std::env::var("OOMGATE_REQUIRE_POSTGRES").ok().as_deref() == Some("1");
        assert!(
            !required,
            "OOMGATE_TEST_POSTGRES is not set: .ci/run starts a PostgreSQL server for this test"
        );
        eprintln!(
            "SKIPPED: OOMGATE_TEST_POSTGRES is not set (eval \"$(scripts/postgres-throwaway.sh start)\")"
        );
        return None;
    };
    let schema = format!("t_{}", uuid::Uuid::new_v4().simple());
    let mut config: postgres::Config = url.parse().expect("the URL");
    if let Ok(password) = std::env::var("PGPASSWORD") {
        config.password(password);
    }
    let mut client = config.connect(postgres::NoTls).expect("the test server");
    client
        .batch_execute(&format!("CREATE SCHEMA {schema}"))
        .expect("a schema");
    let joiner = if url.contains('?') { '&' } else { '?' };
    Some(format!("{url}{joiner}options=-csearch_path%3D{schema}"))
}

#[test]
fn eight_processes_recording_into_one_postgres_history_lose_no_run() {
    let Some(history) = postgres_history() else {
        return;
    };
    let project = Project::new(&suite(""));
    let template: serde_json::Value = read_json(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/results/schema-4-facts.json"),
    );
    let mut children = Vec::new();
    for writer in 0..8 {
        let mut files = Vec::new();
        for n in 0..3 {
            let mut results = template.clone();
            results["run_id"] =
                serde_json::json!(format!("00000000-0000-4000-8000-0000000{writer}{n:04}"));
            let path = project.path().join(format!("p{writer}-{n}.json"));
            std::fs::write(&path, results.to_string()).expect("written");
            files.push(path);
        }
        let mut command: Command = project.oomgate();
        command
            .args(["history", "add", "--history", &history])
            .args(&files);
        children.push(command.spawn().expect("history add"));
    }
    for mut child in children {
        assert!(child.wait().expect("waited").success());
    }
    let output = project
        .oomgate()
        .args([
            "history",
            "show",
            "--json",
            "--last",
            "100",
            "--history",
            &history,
        ])
        .output()
        .expect("show");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let shown: serde_json::Value = serde_json::from_slice(&output.stdout).expect("JSON");
    assert_eq!(shown["runs"].as_array().map(Vec::len), Some(24));
    // The password is never written: not in the URL, nor in what is shown.
    if let Ok(password) = std::env::var("PGPASSWORD") {
        assert!(!String::from_utf8_lossy(&output.stdout).contains(&password));
    }
}

#[test]
fn a_run_records_into_postgres_and_is_held_against_it() {
    let Some(history) = postgres_history() else {
        return;
    };
    let creep = "creep = { limit = \"10%\" }";
    let project = Project::new(&growing(200, creep));
    for _ in 0..3 {
        run_at(
            &project,
            200,
            creep,
            &["--no-baseline", "--history", &history],
        )
        .assert_code(0);
    }
    let grown = run_at(
        &project,
        300,
        creep,
        &["--no-baseline", "--history", &history],
    );
    grown.assert_code(1);
    assert_eq!(grown.case("grow")["failure_kind"], "creep");
    assert!(
        grown.stderr.contains("history: recorded run"),
        "{}",
        grown.stderr
    );
}

/// TLS as the URL's `sslmode` says: `require` encrypts without checking
/// the throwaway server's self-signed certificate; `verify-full` checks
/// it against the system's roots and refuses it, saying why.
#[test]
fn postgres_tls_follows_the_sslmode() {
    if std::env::var("OOMGATE_TEST_POSTGRES_TLS").ok().as_deref() != Some("1") {
        eprintln!("SKIPPED: the test server speaks no TLS (OOMGATE_TEST_POSTGRES_TLS is not 1)");
        return;
    }
    let Some(history) = postgres_history() else {
        return;
    };
    let project = Project::new(&suite(""));
    let show = |url: &str| {
        project
            .oomgate()
            .args(["history", "show", "--history", url])
            .output()
            .expect("show")
    };
    let required = show(&history.replace("sslmode=disable", "sslmode=require"));
    assert!(
        required.status.success(),
        "{}",
        String::from_utf8_lossy(&required.stderr)
    );
    let verified = show(&history.replace("sslmode=disable", "sslmode=verify-full"));
    assert_eq!(verified.status.code(), Some(3));
    let said = String::from_utf8_lossy(&verified.stderr);
    assert!(said.contains("invalid peer certificate"), "{said}");
}

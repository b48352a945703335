//! Faults are loud and data is kept: a file oomgate cannot write stops the
//! launching of cases and exits 3, naming the path and the OS error, while
//! whatever can still be written is; a closed stdout or stderr silences
//! output, never the run.

mod common;

use std::process::Stdio;

use common::*;

/// Regression: on a full disk the first case's output was lost, the cases
/// after it ran with nowhere to write and were not recorded, and
/// timeline.json failing was only a warning.
#[test]
fn a_full_out_dir_stops_the_launching_and_exits_3() {
    let project_dir = tempfile::tempdir().expect("tempdir");
    let ran_later = project_dir.path().join("a later case ran");
    let suite = format!(
        "[suite]\nname = \"full\"\n\
         [[case]]\nname = \"fills\"\ncommand = [\"sh\", \"-c\", \"head -c 400000 /dev/zero; exit 0\"]\n\
         [[case]]\nname = \"second\"\ncommand = [\"touch\", {ran}]\n\
         [[case]]\nname = \"third\"\ncommand = [\"touch\", {ran}]\n",
        ran = toml_str(&ran_later.display().to_string())
    );
    std::fs::write(project_dir.path().join("suite.toml"), suite).expect("suite");
    let disk = match SmallDisk::mount(&project_dir.path().join("disk"), "256k") {
        Ok(disk) => disk,
        Err(why) => {
            eprintln!("skipped: cannot mount a 256 KiB tmpfs to fill ({why}); needs root");
            return;
        }
    };
    let out = disk.dir.join("out");
    // A second results.json off the full disk: what could be kept is.
    let kept = project_dir.path().join("kept.json");
    let output = oomgate()
        .arg("run")
        .arg(project_dir.path().join("suite.toml"))
        .arg("--out")
        .arg(&out)
        .arg("--json")
        .arg(&kept)
        .output()
        .expect("run oomgate");
    let run = Run::from(output, out.clone());
    run.assert_code(3);
    let case_dir = out.join("cases/fills");
    let error = run
        .stderr
        .lines()
        .find(|line| line.starts_with("error: "))
        .unwrap_or_else(|| panic!("no error line:\n{}", run.stderr));
    assert!(
        error.contains(&case_dir.display().to_string())
            && error.contains("No space left on device"),
        "the error names the path and the OS error: {error}"
    );
    assert!(
        error.contains("2 not run: second, third"),
        "and the cases not run: {error}"
    );
    assert!(!ran_later.exists(), "a case was launched after the fault");
    assert!(!out.join("cases/second").exists(), "{}", run.stderr);

    let results = read_json(&kept);
    let ids: Vec<&str> = results["cases"]
        .as_array()
        .map(|cases| cases.iter().filter_map(|c| c["id"].as_str()).collect())
        .unwrap_or_default();
    assert_eq!(ids, ["fills"], "{results:#}");
    assert_eq!(results["not_run"], serde_json::json!(["second", "third"]));
    assert!(results["finished_at"].is_string());
    let fault = results["fault"].as_str().unwrap_or_default();
    assert!(
        fault.contains(&case_dir.display().to_string()) && fault.contains("No space left"),
        "{fault}"
    );
    // A timeline cut short is not left behind as one.
    assert!(!case_dir.join("timeline.json").exists());
    drop(disk);
}

/// Regression: after a case filled the disk, results.json and junit.xml on
/// that disk were the last checkpoint: the case that filled it listed as
/// `running`, no fault, no end. Room reserved at the start is freed for
/// the final reports: they tell the run's real end.
#[test]
fn after_a_full_disk_the_reports_on_it_tell_the_truth() {
    let project = Project::new(
        "[suite]\nname = \"full\"\ngpu = \"off\"\n\
         [[case]]\nname = \"a\"\ncommand = [\"sh\", \"-c\", \"sleep 1.2\"]\n\
         [[case]]\nname = \"fills\"\ncommand = [\"sh\", \"-c\", \"sleep 1.2; head -c 900000 /dev/zero; exit 0\"]\n\
         [[case]]\nname = \"c\"\ncommand = [\"true\"]\n",
    );
    let disk = match SmallDisk::mount(&project.path().join("disk"), "512k") {
        Ok(disk) => disk,
        Err(why) => {
            eprintln!("skipped: cannot mount a 512 KiB tmpfs to fill ({why}); needs root");
            return;
        }
    };
    let out = disk.dir.join("out");
    let mut command = project.oomgate();
    command
        .arg("run")
        .arg(project.suite())
        .arg("--out")
        .arg(&out);
    let run = Run::from(command.output().expect("run oomgate"), out.clone());
    run.assert_code(3);
    let results = read_json(&out.join("results.json"));
    let statuses: Vec<(&str, &str)> = results["cases"]
        .as_array()
        .map(|cases| {
            cases
                .iter()
                .filter_map(|c| Some((c["id"].as_str()?, c["status"].as_str()?)))
                .collect()
        })
        .unwrap_or_default();
    assert_eq!(
        statuses,
        [("a", "passed"), ("fills", "passed")],
        "{results:#}"
    );
    assert_eq!(results["not_run"], serde_json::json!(["c"]));
    assert!(results["finished_at"].is_string(), "{results:#}");
    let fault = results["fault"].as_str().unwrap_or_default();
    assert!(
        fault.contains(&out.join("cases/fills").display().to_string())
            && fault.contains("No space left on device"),
        "{fault}"
    );
    let junit = std::fs::read_to_string(out.join("junit.xml")).unwrap_or_default();
    assert!(junit.contains("name=\"fills\""), "{junit}");
    assert!(
        !junit.contains("stopped before this case finished"),
        "{junit}"
    );
    assert!(
        !out.join(".oomgate-reserve").exists(),
        "the reserve is left behind"
    );
    drop(disk);
}

/// Regression: a report that failed at the end stopped the other reports
/// from being written, and its error named no path.
#[test]
fn a_report_on_a_full_device_exits_3_and_every_other_report_is_written() {
    let project = Project::new(
        "[suite]\nname = \"t\"\n\
         [[case]]\nname = \"fails\"\ncommand = [\"false\"]\n\
         [[case]]\nname = \"passes\"\ncommand = [\"true\"]\n",
    );
    let run = project.run(&["--junit", "/dev/full"]);
    // A failing case would be exit 1: the write failure comes first.
    run.assert_code(3);
    assert!(
        run.stderr.contains("/dev/full: No space left on device"),
        "{}",
        run.stderr
    );
    let results = run.results();
    assert_eq!(results["summary"]["failed"], 1);
    assert_eq!(results["summary"]["passed"], 1);
    assert_eq!(results["not_run"], serde_json::json!([]));
    assert!(results["finished_at"].is_string());
    for report in ["junit.xml", "summary.md", "report.html"] {
        let text = std::fs::read_to_string(project.out().join(report)).expect(report);
        assert!(text.contains("passes"), "{report} is complete");
    }
}

/// The run's cases, in order, from results.json.
fn case_ids(project: &Project) -> Vec<String> {
    project.results()["cases"]
        .as_array()
        .map(|cases| {
            cases
                .iter()
                .filter_map(|c| c["id"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

fn failing_then_passing() -> Project {
    Project::new(
        "[suite]\nname = \"t\"\n\
         [[case]]\nname = \"fails\"\ncommand = [\"false\"]\n\
         [[case]]\nname = \"after\"\ncommand = [\"true\"]\n",
    )
}

#[test]
fn a_closed_stdout_with_annotations_changes_nothing_but_the_output() {
    let project = failing_then_passing();
    // `>&-`: oomgate starts with no stdout at all.
    let mut command = std::process::Command::new("sh");
    command
        .arg("-c")
        .arg("exec \"$@\" >&-")
        .arg("sh")
        .arg(env!("CARGO_BIN_EXE_oomgate"))
        .arg("run")
        .arg(project.suite())
        .arg("--out")
        .arg(project.out())
        .env("NO_COLOR", "1")
        .env("GITHUB_ACTIONS", "true");
    let run = project.finish(command);
    run.assert_code(1);
    assert_eq!(case_ids(&project), ["fails", "after"], "{}", run.stderr);
}

#[test]
fn a_closed_stderr_changes_nothing_but_the_output_and_is_said_once() {
    let project = failing_then_passing();
    let mut child = project
        .run_command()
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start oomgate");
    drop(child.stderr.take()); // the reader went away
    let output = child.wait_with_output().expect("oomgate");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(1), "{stdout}");
    assert_eq!(case_ids(&project), ["fails", "after"]);
    assert_eq!(
        stdout.matches("cannot write to stderr").count(),
        1,
        "one warning on stdout: {stdout}"
    );
}

#[test]
fn a_closed_stderr_never_writes_into_a_report_on_stdout() {
    let project = failing_then_passing();
    let mut child = project
        .run_command()
        .args(["--json", "/dev/stdout"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start oomgate");
    drop(child.stderr.take());
    let output = child.wait_with_output().expect("oomgate");
    assert_eq!(output.status.code(), Some(1));
    let printed: serde_json::Value =
        serde_json::from_slice(&output.stdout).expect("only the report on stdout");
    assert_eq!(printed["cases"][1]["id"], "after");
}

#[test]
fn an_unwritable_job_summary_leaves_a_failing_verdict_as_it_is() {
    let project = failing_then_passing();
    let missing = project.path().join("no/such/folder/summary.md");
    let mut command = project.run_command();
    command.env("GITHUB_STEP_SUMMARY", &missing);
    let run = project.finish(command);
    run.assert_code(1);
    assert!(
        run.stderr.contains(&format!(
            "warning: cannot append the summary to $GITHUB_STEP_SUMMARY ({})",
            missing.display()
        )),
        "{}",
        run.stderr
    );
    assert!(project.out().join("summary.md").exists());
}

/// Regression: a timeline.json that could not be written was a warning,
/// and the run went on and passed.
#[test]
fn a_case_file_that_cannot_be_written_is_named_in_every_report() {
    // The workload puts a folder where its timeline belongs.
    let project = Project::new(
        "[suite]\nname = \"t\"\n\
         [[case]]\nname = \"blocks\"\ncommand = [\"sh\", \"-c\", \"mkdir \\\"$OOMGATE_OUT/timeline.json\\\"\"]\n\
         [[case]]\nname = \"next\"\ncommand = [\"true\"]\n",
    );
    let run = project.run(&[]);
    // Every case that ran passed: the write failure alone makes it 3.
    run.assert_code(3);
    let timeline = project.out().join("cases/blocks/timeline.json");
    let named = format!("cannot write {}: Is a directory", timeline.display());
    assert!(run.stderr.contains(&named), "{}", run.stderr);
    assert!(
        !project.out().join("cases/next").exists(),
        "next was launched"
    );

    let results = run.results();
    assert_eq!(run.case("blocks")["status"], "passed");
    assert_eq!(results["not_run"], serde_json::json!(["next"]));
    assert!(
        results["fault"]
            .as_str()
            .is_some_and(|fault| fault.starts_with(&named)),
        "{results:#}"
    );
    let junit = std::fs::read_to_string(project.out().join("junit.xml")).expect("junit.xml");
    let document = roxmltree::Document::parse(&junit).expect("valid XML");
    let next = document
        .descendants()
        .find(|n| n.has_tag_name("testcase") && n.attribute("name") == Some("next"))
        .expect("a testcase for the case not run");
    let error = next
        .children()
        .find(|n| n.has_tag_name("error"))
        .expect("an error, not a skip");
    assert!(
        error
            .attribute("message")
            .is_some_and(|m| m.contains(&named)),
        "{junit}"
    );
    for page in ["summary.md", "report.html"] {
        let text = std::fs::read_to_string(project.out().join(page)).expect(page);
        assert!(
            text.contains("oomgate stopped launching cases"),
            "{page}: {text}"
        );
    }
}

/// Regression: `lock --output /dev/zero` read the device as the previous
/// lock without end (oomgate grew until the kernel killed it), and a lock
/// path that was a device would have been renamed over.
#[test]
fn a_lock_path_that_is_a_device_is_refused_neither_read_nor_replaced() {
    use std::os::unix::fs::FileTypeExt;
    let project = failing_then_passing();
    for args in [
        vec!["lock", "--output", "/dev/zero"],
        vec!["run", "--baseline", "/dev/zero"],
    ] {
        // A memory limit, so a regression fails the test instead of the
        // machine.
        let mut command = std::process::Command::new("sh");
        command
            .arg("-c")
            .arg("ulimit -v 1000000 && exec \"$@\"")
            .arg("sh")
            .arg(env!("CARGO_BIN_EXE_oomgate"))
            .arg(args[0])
            .arg(project.suite())
            .args(&args[1..])
            .arg("--out")
            .arg(project.out());
        let run = project.finish(command);
        run.assert_code(2);
        assert!(
            run.stderr.contains("/dev/zero: not a regular file"),
            "{}",
            run.stderr
        );
    }
    let meta = std::fs::metadata("/dev/zero").expect("/dev/zero");
    assert!(meta.file_type().is_char_device(), "/dev/zero was replaced");
}

/// Regression: an out dir claimed by an earlier run passed the checks on
/// a full disk, and the cases ran with nowhere to write.
#[test]
fn an_out_dir_on_a_full_disk_is_refused_before_anything_runs() {
    let project = Project::new("");
    let ran = project.path().join("ran");
    let suite = format!(
        "[suite]\nname = \"t\"\n[[case]]\nname = \"a\"\ncommand = [\"touch\", {}]\n",
        toml_str(&ran.display().to_string())
    );
    std::fs::write(project.suite(), suite).expect("suite");
    let disk = match SmallDisk::mount(&project.path().join("disk"), "64k") {
        Ok(disk) => disk,
        Err(why) => {
            eprintln!("skipped: cannot mount a 64 KiB tmpfs to fill ({why}); needs root");
            return;
        }
    };
    let out = disk.dir.join("out");
    std::fs::create_dir_all(&out).expect("out dir");
    std::fs::write(out.join(".oomgate-out"), "claimed by an earlier run").expect("marker");
    // Fill what is left; the write that fails is the one that fills it.
    let _ = std::fs::write(disk.dir.join("filler"), vec![0u8; 128 * 1024]);
    let mut command = oomgate();
    command
        .arg("run")
        .arg(project.suite())
        .arg("--out")
        .arg(&out);
    let run = project.finish(command);
    run.assert_code(3);
    assert!(
        run.stderr.contains(&format!(
            "cannot write to {}: No space left on device",
            out.display()
        )),
        "{}",
        run.stderr
    );
    assert!(!ran.exists(), "the case ran");
    drop(disk);
}

#[test]
fn annotations_stay_out_of_a_report_on_stdout() {
    let project = failing_then_passing();
    let mut command = project.run_command();
    command
        .arg("--json")
        .arg("/dev/stdout")
        .env("GITHUB_ACTIONS", "true");
    let run = project.finish(command);
    run.assert_code(1);
    let json: serde_json::Value = serde_json::from_str(&run.stdout)
        .unwrap_or_else(|e| panic!("stdout is one JSON document ({e}):\n{}", run.stdout));
    assert_eq!(json["cases"].as_array().map(Vec::len), Some(2));
    assert!(
        run.stderr.contains("no GitHub annotations"),
        "{}",
        run.stderr
    );
}

//! Nothing oomgate writes clobbers what is not its own: one writer per out
//! dir, no report over an input, no write through a link a workload
//! planted, no report that hangs on a FIFO.

mod common;

use common::running::Running;
use common::*;

/// A case that says it started and runs until `go` appears beside the
/// suite.
fn waiting_suite() -> Project {
    let project = Project::new("");
    let script = format!(
        "touch {dir}/started; while [ ! -e {dir}/go ]; do sleep 0.05; done; echo first-run-output",
        dir = project.path().display()
    );
    std::fs::write(
        project.suite(),
        format!(
            "[suite]\nname = \"w\"\ngpu = \"off\"\n[[case]]\nname = \"a\"\ncommand = [\"sh\", \"-c\", {}]\n",
            toml_str(&script)
        ),
    )
    .expect("write suite");
    project
}

#[test]
fn a_second_run_into_a_held_out_dir_is_refused_and_the_first_stays_whole() {
    let project = waiting_suite();
    let mut first = Running::start(&project);
    first.wait_for(&project.path().join("started"));
    let log = project.out().join("cases/a/stdout.log");
    assert!(log.exists(), "the first run's log");

    let second = project.run(&[]);
    second.assert_code(2);
    assert!(
        second
            .stderr
            .contains(&format!("in use by another oomgate (pid {})", first.pid())),
        "{}",
        second.stderr
    );
    // `lock` into the same dir is refused the same way.
    let lock = project.lock(&[]);
    lock.assert_code(2);
    assert!(
        lock.stderr.contains("in use by another oomgate"),
        "{}",
        lock.stderr
    );
    // A report path inside the held out dir, from a run with an out dir
    // of its own, is refused too: it would replace the first run's file.
    let elsewhere = project.path().join("elsewhere");
    for (flag, report) in [
        ("--json", project.out().join("results.json")),
        ("--junit", project.out().join("cases/a/junit.xml")),
    ] {
        let mut command = project.oomgate();
        command
            .arg("run")
            .arg(project.suite())
            .arg("--out")
            .arg(&elsewhere)
            .arg(flag)
            .arg(&report);
        let third = project.finish(command);
        third.assert_code(2);
        assert!(
            third.stderr.contains(&format!(
                "the out dir another oomgate (pid {}) is writing",
                first.pid()
            )),
            "{}",
            third.stderr
        );
    }
    assert!(log.exists(), "the second run deleted the first one's log");

    std::fs::write(project.path().join("go"), "").expect("go");
    let first = first.finish();
    first.assert_code(0);
    let case = first.case("a");
    assert_eq!(case["status"], "passed");
    let stdout = std::fs::read_to_string(&log).expect("log");
    assert!(stdout.contains("first-run-output"), "{stdout}");
    // Released at the end: the next run gets the dir.
    std::fs::remove_file(project.path().join("started")).ok();
    project.run(&[]).assert_code(0);
}

#[test]
fn a_report_over_an_input_is_refused_before_anything_runs() {
    let project = Project::new(
        "[suite]\nname = \"t\"\ngpu = \"off\"\n[[case]]\nname = \"a\"\ncommand = [\"true\"]\n",
    );
    let suite_text = std::fs::read_to_string(project.suite()).expect("suite");
    let suite = project.suite().display().to_string();
    for flag in ["--junit", "--json"] {
        let run = project.run(&[flag, &suite]);
        run.assert_code(2);
        assert!(run.stderr.contains("is the suite"), "{}", run.stderr);
    }
    // Through a symlink too.
    let link = project.path().join("report.xml");
    std::os::unix::fs::symlink(project.suite(), &link).expect("symlink");
    let run = project.run(&["--junit", &link.display().to_string()]);
    run.assert_code(2);
    assert_eq!(
        std::fs::read_to_string(project.suite()).expect("suite"),
        suite_text
    );
    assert!(!project.out().join("results.json").exists(), "a case ran");

    // The baseline lock being read.
    project.run(&[]).assert_code(0);
    project.lock_from_results().assert_code(0);
    let lock_text = std::fs::read_to_string(project.lock_path()).expect("lock");
    let lock = project.lock_path().display().to_string();
    let run = project.run(&["--json", &lock]);
    run.assert_code(2);
    assert!(
        run.stderr.contains("is the baseline lock"),
        "{}",
        run.stderr
    );
    assert_eq!(
        std::fs::read_to_string(project.lock_path()).expect("lock"),
        lock_text
    );

    // `lock --output` over the suite, or over the results it locks.
    let results = project.out().join("results.json").display().to_string();
    for output in [&suite, &results] {
        let run = project.lock(&["--from", &results, "--output", output]);
        run.assert_code(2);
        assert!(run.stderr.contains("(the lock) is"), "{}", run.stderr);
    }
    // A fresh `lock` run whose lock would be its own results.json.
    let run = project.lock(&["--output", &results]);
    run.assert_code(2);
    assert!(
        run.stderr.contains("a report of the run it locks"),
        "{}",
        run.stderr
    );
    assert_eq!(
        std::fs::read_to_string(project.suite()).expect("suite"),
        suite_text
    );

    // The GitHub job summary is not a report's to replace.
    let job_summary = project.path().join("step-summary.md");
    std::fs::write(&job_summary, "earlier steps\n").expect("write");
    let mut command = project.run_command();
    command
        .env("GITHUB_STEP_SUMMARY", &job_summary)
        .args(["--junit", &job_summary.display().to_string()]);
    let run = project.finish(command);
    run.assert_code(2);
    assert!(run.stderr.contains("GitHub job summary"), "{}", run.stderr);
}

#[test]
fn character_devices_take_any_number_of_reports() {
    let project = Project::new(
        "[suite]\nname = \"t\"\ngpu = \"off\"\n[[case]]\nname = \"a\"\ncommand = [\"true\"]\n",
    );
    project
        .run(&["--junit", "/dev/null", "--json", "/dev/null"])
        .assert_code(0);
}

fn mkfifo(path: &std::path::Path) {
    let c_path = std::ffi::CString::new(path.display().to_string()).expect("path");
    // SAFETY: mkfifo reads a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c_path.as_ptr(), 0o600) }, 0, "mkfifo");
}

#[test]
fn a_fifo_no_one_reads_fails_the_run_naming_it_instead_of_hanging() {
    let project = Project::new(
        "[suite]\nname = \"t\"\ngpu = \"off\"\n[[case]]\nname = \"a\"\ncommand = [\"true\"]\n",
    );
    let fifo = project.path().join("nobody-reads.xml");
    mkfifo(&fifo);
    let running = Running::start_with(&project, &["--junit", &fifo.display().to_string()]);
    let run = running.finish_within_a_minute();
    run.assert_code(3);
    assert!(
        run.stderr.contains(&fifo.display().to_string())
            && run.stderr.contains("no reader opened the FIFO"),
        "{}",
        run.stderr
    );
    // The files in the out dir were written whatever became of the FIFO.
    assert_eq!(run.case("a")["status"], "passed");
}

#[test]
fn sigterm_ends_a_wait_on_a_fifo_at_once() {
    let project = Project::new(
        "[suite]\nname = \"t\"\ngpu = \"off\"\n[[case]]\nname = \"a\"\ncommand = [\"true\"]\n",
    );
    let fifo = project.path().join("nobody-reads.json");
    mkfifo(&fifo);
    let mut running = Running::start_with(&project, &["--json", &fifo.display().to_string()]);
    // The pages come just before results.json: oomgate is at the FIFO.
    running.wait_for(&project.out().join("report.html"));
    // SAFETY: kill sends a signal to the oomgate this test started.
    assert_eq!(unsafe { libc::kill(running.pid(), libc::SIGTERM) }, 0);
    let run = running.finish_within_a_minute();
    assert!(
        run.stderr.contains("oomgate was asked to stop"),
        "{}",
        run.stderr
    );
    assert_ne!(run.code, Some(0), "{}", run.stderr);
}

#[test]
fn links_a_workload_plants_in_its_case_folder_are_never_followed() {
    let project = Project::new("");
    let foreign = project.path().join("foreign.txt");
    std::fs::write(&foreign, "FOREIGN-CONTENT\n").expect("write");
    // Case a replaces its logs and its timeline with links to a file
    // elsewhere; case b runs after it.
    let attack = format!(
        "echo before; ln -s {f} $OOMGATE_OUT/timeline.json; \
         rm $OOMGATE_OUT/stdout.log $OOMGATE_OUT/stderr.log; \
         ln -s {f} $OOMGATE_OUT/stdout.log; ln -s {f} $OOMGATE_OUT/stderr.log; exit 1",
        f = foreign.display(),
    );
    std::fs::write(
        project.suite(),
        format!(
            "[suite]\nname = \"t\"\ngpu = \"off\"\n\
             [[case]]\nname = \"a\"\ncommand = [\"sh\", \"-c\", {}]\n\
             [[case]]\nname = \"b\"\ncommand = [\"sh\", \"-c\", \"echo b-output\"]\n",
            toml_str(&attack)
        ),
    )
    .expect("write suite");

    let run = project.run(&[]);
    run.assert_code(1);
    assert_eq!(
        std::fs::read_to_string(&foreign).expect("foreign"),
        "FOREIGN-CONTENT\n",
        "written through a planted link"
    );
    assert_eq!(run.case("a")["status"], "failed");
    assert_eq!(run.case("b")["status"], "passed");
    for report in ["results.json", "junit.xml", "report.html", "summary.md"] {
        let text = std::fs::read_to_string(project.out().join(report)).expect(report);
        assert!(
            !text.contains("FOREIGN-CONTENT"),
            "{report} carries a file the workload linked to"
        );
    }
    let junit = std::fs::read_to_string(project.out().join("junit.xml")).expect("junit");
    assert!(
        junit.contains("a symbolic link"),
        "the tail says why it is missing"
    );
    let timeline = project.out().join("cases/a/timeline.json");
    let meta = std::fs::symlink_metadata(&timeline).expect("timeline");
    assert!(meta.is_file(), "the planted timeline link was not replaced");
}

#[test]
fn a_cases_folder_swapped_for_a_link_is_never_written_through() {
    let project = Project::new("");
    let elsewhere = project.path().join("elsewhere");
    std::fs::create_dir_all(elsewhere.join("a")).expect("mkdir");
    std::fs::create_dir_all(elsewhere.join("b")).expect("mkdir");
    std::fs::write(elsewhere.join("b/keep"), "keep").expect("write");
    let armed = project.path().join("armed");
    std::fs::write(&armed, "").expect("arm");
    // While armed, case a moves `cases` away and leaves a link to a folder
    // that has one named like each case.
    let attack = format!(
        "if [ -e {armed} ]; then mv {o}/cases {o}/cases.moved; ln -s {e} {o}/cases; fi",
        armed = armed.display(),
        o = project.out().display(),
        e = elsewhere.display(),
    );
    std::fs::write(
        project.suite(),
        format!(
            "[suite]\nname = \"t\"\ngpu = \"off\"\n\
             [[case]]\nname = \"a\"\ncommand = [\"sh\", \"-c\", {}]\n\
             [[case]]\nname = \"b\"\ncommand = [\"true\"]\n",
            toml_str(&attack)
        ),
    )
    .expect("write suite");
    let untouched = |elsewhere: &std::path::Path| {
        let mut names: Vec<String> = std::fs::read_dir(elsewhere.join("a"))
            .expect("a")
            .chain(std::fs::read_dir(elsewhere.join("b")).expect("b"))
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(names, ["keep"], "written into the linked folder");
    };

    // Case a's own files cannot be written where they belong: a write
    // fault naming the link, no more cases launched.
    let run = project.run(&[]);
    run.assert_code(3);
    assert!(
        run.stderr.contains("cases: a symbolic link"),
        "{}",
        run.stderr
    );
    untouched(&elsewhere);

    // The next run removes the link (never what it points to) and runs.
    std::fs::remove_file(&armed).expect("disarm");
    project.run(&[]).assert_code(0);
    untouched(&elsewhere);
    let cases = project.out().join("cases");
    assert!(
        !std::fs::symlink_metadata(&cases)
            .expect("cases")
            .is_symlink()
    );
}

/// The next case's folder is made while the case before it runs (its
/// `mkdir` and logs off the path between the two): what that case's
/// workload writes there is gone when the next case starts; where a
/// folder of that name is there already (an earlier run's), nothing is
/// made ahead, so a case that then never starts keeps it; and one made
/// for a case that never starts is removed.
#[test]
fn a_folder_made_ahead_is_fresh_when_its_case_starts_and_gone_if_it_never_does() {
    let project = Project::new("");
    let dir = project.path().display().to_string();
    let meddler = format!(
        "for i in $(seq 200); do \
           if [ -f $OOMGATE_OUT/../b/stdout.log ]; then touch {dir}/saw-b; break; fi; sleep 0.05; \
         done; echo meddling >> $OOMGATE_OUT/../b/stdout.log"
    );
    let suite = |a: &str, b: &str| {
        format!(
            "[suite]\nname = \"t\"\ngpu = \"off\"\n\
             [[case]]\nname = \"a\"\ncommand = [\"sh\", \"-c\", {}]\n\
             [[case]]\nname = \"b\"\ncommand = [\"sh\", \"-c\", {}]\n",
            toml_str(a),
            toml_str(b)
        )
    };
    std::fs::write(project.suite(), suite(&meddler, "echo earlier-run")).expect("write suite");
    project.run(&[]).assert_code(0);
    assert!(
        project.path().join("saw-b").exists(),
        "b's folder was made while a ran"
    );
    let b_log = project.out().join("cases/b/stdout.log");
    assert_eq!(
        std::fs::read_to_string(&b_log).expect("b's log"),
        "earlier-run\n",
        "b's log holds a's meddling"
    );

    // Interrupted while a runs: b never starts, and its earlier folder
    // stays as it was.
    let waits = format!("touch {dir}/started; sleep 30");
    std::fs::write(project.suite(), suite(&waits, "echo second-run")).expect("write suite");
    let mut running = Running::start(&project);
    running.wait_for(&project.path().join("started"));
    // SAFETY: signalling the oomgate process this test started.
    unsafe {
        libc::kill(running.pid(), libc::SIGINT);
    }
    let run = running.finish_within_a_minute();
    run.assert_code(130);
    assert_eq!(run.results()["not_run"], serde_json::json!(["b"]));
    assert_eq!(
        std::fs::read_to_string(&b_log).expect("b's earlier log"),
        "earlier-run\n"
    );

    // A case new to the out dir: its folder is made ahead, and removed
    // when the run is interrupted before it starts.
    std::fs::remove_file(project.path().join("started")).expect("reset");
    let fresh = suite(&waits, "true").replace("name = \"b\"", "name = \"c\"");
    std::fs::write(project.suite(), fresh).expect("write suite");
    let mut running = Running::start(&project);
    running.wait_for(&project.path().join("started"));
    let c = project.out().join("cases/c");
    running.wait_for(&c.join("stdout.log"));
    // SAFETY: signalling the oomgate process this test started.
    unsafe {
        libc::kill(running.pid(), libc::SIGINT);
    }
    let run = running.finish_within_a_minute();
    run.assert_code(130);
    assert_eq!(run.results()["not_run"], serde_json::json!(["c"]));
    assert!(!c.exists(), "the folder of a case that never started");
}

/// A workload that plants links at the out dir's own report names
/// (`$OOMGATE_OUT/../../results.json` and the rest) to files elsewhere:
/// nothing is written through them, in that run or in a later one, the
/// reports are oomgate's own files, and the links are said.
#[test]
fn links_planted_at_the_out_dirs_reports_are_never_written_through() {
    const REPORTS: [&str; 4] = ["results.json", "junit.xml", "summary.md", "report.html"];
    let project = Project::new("");
    let victims = project.path().join("victims");
    std::fs::create_dir(&victims).expect("mkdir");
    for name in REPORTS {
        std::fs::write(victims.join(name), "VICTIM\n").expect("write");
    }
    let plant = REPORTS
        .iter()
        .map(|name| {
            format!(
                "ln -sf {} \"$OOMGATE_OUT/../../{name}\"",
                victims.join(name).display()
            )
        })
        .collect::<Vec<_>>()
        .join("; ");
    std::fs::write(
        project.suite(),
        format!(
            "[suite]\nname = \"t\"\ngpu = \"off\"\n\
             [[case]]\nname = \"a\"\ncommand = [\"sh\", \"-c\", {}]\n\
             [[case]]\nname = \"b\"\ncommand = [\"true\"]\n",
            toml_str(&plant)
        ),
    )
    .expect("write suite");
    let untouched = || {
        for name in REPORTS {
            assert_eq!(
                std::fs::read_to_string(victims.join(name)).expect("victim"),
                "VICTIM\n",
                "{name} written through a planted link"
            );
        }
    };
    let is_own_file = |name: &str| {
        let meta = std::fs::symlink_metadata(project.out().join(name)).expect(name);
        assert!(meta.is_file(), "{name} is oomgate's own file: {meta:?}");
    };

    let run = project.run(&[]);
    run.assert_code(0);
    untouched();
    for name in REPORTS {
        is_own_file(name);
        assert!(
            run.stderr.contains(&format!(
                "{} was a symbolic link",
                project.out().join(name).display()
            )),
            "{name} said: {}",
            run.stderr
        );
    }
    assert_eq!(run.case("b")["status"], "passed");

    // Links left from before (a run killed before it wrote its reports):
    // a later harmless run removes them before anything is written.
    std::fs::write(
        project.suite(),
        "[suite]\nname = \"t\"\ngpu = \"off\"\n[[case]]\nname = \"b\"\ncommand = [\"true\"]\n",
    )
    .expect("write suite");
    for name in REPORTS {
        let at = project.out().join(name);
        std::fs::remove_file(&at).expect("remove");
        std::os::unix::fs::symlink(victims.join(name), &at).expect("link");
    }
    let later = project.run(&[]);
    later.assert_code(0);
    untouched();
    for name in REPORTS {
        is_own_file(name);
    }
    assert!(
        later.stderr.contains("was a symbolic link"),
        "{}",
        later.stderr
    );
}

/// A workload that leaves a folder thousands of levels deep in its case
/// folder (deeper than oomgate may open descriptors): the next run into
/// the out dir empties it and runs, rather than fail on "Too many open
/// files".
#[test]
fn a_very_deep_folder_left_in_a_case_folder_is_removed_by_the_next_run() {
    const DEEP: &str = "
import os
fd = os.open(os.environ['OOMGATE_OUT'], os.O_RDONLY)
for _ in range(2000):
    os.mkdir('d', dir_fd=fd)
    below = os.open('d', os.O_RDONLY, dir_fd=fd)
    os.close(fd)
    fd = below
";
    let project = Project::new(&format!(
        "[suite]\nname = \"t\"\ngpu = \"off\"\n[[case]]\nname = \"a\"\ncommand = [\"python3\", \"-c\", {}]\n",
        toml_str(DEEP)
    ));
    // oomgate may hold 1,024 descriptors at most: fewer than the levels.
    let limited = || {
        let mut command = project.run_command();
        // SAFETY: setrlimit is async-signal-safe; it only lowers a limit of
        // the child about to execute oomgate.
        unsafe {
            std::os::unix::process::CommandExt::pre_exec(&mut command, || {
                let limit = libc::rlimit {
                    rlim_cur: 1024,
                    rlim_max: 1024,
                };
                if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        project.finish(command)
    };
    limited().assert_code(0);
    assert!(
        project.out().join("cases/a/d/d/d").is_dir(),
        "the tree was made"
    );
    let again = limited();
    again.assert_code(0);
    assert_eq!(again.case("a")["status"], "passed");
}

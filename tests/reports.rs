//! Reports stay valid and oomgate stays small whatever a workload prints,
//! and whatever the number of cases; each file is written when it is due.

mod common;

use common::*;

fn spew_suite(args: &str) -> String {
    single_case_suite("spew", "spew.py", args)
}

#[test]
fn nasty_output_keeps_junit_valid_xml() {
    let project = Project::new(&spew_suite("\"--nasty\", \"--exit\", \"1\""));
    let run = project.run(&[]);
    run.assert_code(1);
    let xml = std::fs::read_to_string(project.out().join("junit.xml")).expect("junit.xml");
    let document =
        roxmltree::Document::parse(&xml).unwrap_or_else(|e| panic!("invalid XML: {e}\n{xml}"));
    let case = document
        .descendants()
        .find(|n| n.has_tag_name("testcase"))
        .expect("a testcase");
    assert_eq!(case.attribute("name"), Some("spew"));
    let failure = case
        .children()
        .find(|n| n.has_tag_name("failure"))
        .expect("a failure element");
    // The case's own message, as results.json has it.
    let message = run.message("spew");
    assert!(!message.is_empty());
    assert_eq!(failure.attribute("message"), Some(message.as_str()));
    assert_eq!(failure.attribute("type"), Some("crash"));
    let failure_text = failure.text().unwrap_or_default();
    assert!(
        failure_text.contains("host peak:"),
        "figures in the failure body: {failure_text}"
    );
    let system_err = case
        .children()
        .find(|n| n.has_tag_name("system-err"))
        .and_then(|n| n.text())
        .expect("system-err");
    // Text survives; escapes and control bytes do not.
    assert!(system_err.contains("red bold green"), "{system_err}");
    assert!(
        system_err.contains("cdata end ]]> and <tag attr=\"x\"> & ampersand"),
        "{system_err}"
    );
    assert!(
        !system_err.contains('\u{1b}') && !system_err.contains('\0'),
        "{system_err:?}"
    );
    let properties: Vec<_> = case
        .descendants()
        .filter(|n| n.has_tag_name("property"))
        .map(|n| {
            (
                n.attribute("name").unwrap_or_default(),
                n.attribute("value").unwrap_or_default(),
            )
        })
        .collect();
    assert!(
        properties
            .iter()
            .any(|(name, _)| *name == "host_peak_bytes"),
        "{properties:?}"
    );
}

/// Regression (issue 20): a workload's NUL, ESC and other control bytes
/// reached summary.md (the GitHub job summary) raw, through its exception.
#[test]
fn summary_md_holds_no_control_bytes_of_a_workloads_output() {
    let dir = tempfile::tempdir().expect("tempdir");
    let text = dir.path().join("error.txt");
    let mut error = b"Traceback (most recent call last):\n  File \"train.py\", line 1\n".to_vec();
    error.extend_from_slice(
        b"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. nul\x00 esc\x1b[31mred\x1b[0m bell\x07 bs\x08 vt\x0b ff\x0c so\x0e us\x1f del\x7f cr\rend\n",
    );
    // C1 controls as UTF-8 (NEL, CSI), and a tab, which stays.
    error.extend_from_slice("  c1 \u{85} csi \u{9b}2J\ttab kept\n".as_bytes());
    std::fs::write(&text, error).expect("write the error text");
    let suite = format!(
        "[suite]\nname = \"t\"\nsample_interval = \"20ms\"\n\n[[case]]\nname = \"nasty\"\ncommand = [\"sh\", \"-c\", {}]\n",
        toml_str(&format!("cat '{}' >&2; exit 1", text.display()))
    );
    let project = Project::new(&suite);
    let step_summary = project.path().join("step-summary.md");
    let mut command = project.run_command();
    command.env("GITHUB_STEP_SUMMARY", &step_summary);
    let run = project.finish(command);
    run.assert_code(1);
    for path in [project.out().join("summary.md"), step_summary] {
        let summary = std::fs::read_to_string(&path).expect("summary.md");
        let stray: Vec<char> = summary
            .chars()
            .filter(|c| c.is_control() && *c != '\n' && *c != '\t')
            .collect();
        assert!(
            stray.is_empty(),
            "{stray:?} in {}:\n{summary:?}",
            path.display()
        );
        // Each shown as an escape, colours dropped, the text around them
        // kept, the tab and the lines too.
        assert!(
            summary.contains("CUDA out of memory. Tried to allocate 2.00 GiB. nul\\u{0} escred bell\\u{7} bs\\u{8} vt\\u{b} ff\\u{c} so\\u{e} us\\u{1f} del\\u{7f} cr\\rend\n    c1 \\u{85} csi \\u{9b}2J\ttab kept"),
            "{}:\n{summary}",
            path.display()
        );
    }
}

#[test]
fn hundreds_of_mib_of_output_keep_oomgate_small() {
    let project = Project::new(&spew_suite("\"--mib\", \"300\""));
    let run = project.run(&[]);
    run.assert_code(0);
    let log = project.out().join("cases/spew/stdout.log");
    let size = std::fs::metadata(&log).expect("stdout.log").len();
    assert!(
        size >= 300 * MIB,
        "the whole output is on disk ({size} bytes)"
    );
    let runner_rss = run.results()["runner_max_rss_bytes"]
        .as_u64()
        .expect("runner rss recorded");
    assert!(
        runner_rss < 64 * MIB,
        "oomgate itself grew to {} MiB",
        runner_rss / MIB
    );
    // Reports carry a bounded tail, not the output.
    let junit = std::fs::metadata(project.out().join("junit.xml"))
        .expect("junit")
        .len();
    assert!(junit < 256 * 1024, "junit.xml is {junit} bytes");
}

#[test]
fn results_json_has_the_documented_shape() {
    let project = Project::new(&spew_suite("\"--mib\", \"1\""));
    project.run(&[]).assert_code(0);
    let results = project.results();
    for key in [
        "schema",
        "oomgate_version",
        "suite",
        "host",
        "started_at",
        "finished_at",
        "measurement",
        "summary",
        "cases",
    ] {
        assert!(results.get(key).is_some(), "missing {key}");
    }
    let case = &results["cases"][0];
    for key in [
        "id",
        "params",
        "command",
        "status",
        "wall_time_s",
        "host_peak_bytes",
        "gpu_peak_bytes",
        "checks",
        "instances",
        "dir",
        "timeline",
    ] {
        assert!(case.get(key).is_some(), "missing cases[].{key}");
    }
    assert!(
        case["gpu_peak_bytes"].is_null(),
        "GPU is not measured, so null, never 0"
    );
    assert_eq!(case["instances"][0]["stdout_log"], "cases/spew/stdout.log");
    let timeline = read_json(&project.out().join("cases/spew/timeline.json"));
    assert!(timeline["samples"].as_u64().unwrap_or(0) >= 1);
    assert_eq!(timeline["host_peak"]["bytes"], case["host_peak_bytes"]);
}

/// `n` cases running `true`, named `c0000`…, with one failing case `fail`
/// (long enough to be sampled, so it has a timeline) at position `fail_at`.
fn many_cases_suite(n: usize, fail_at: usize) -> String {
    let mut suite = String::from("[suite]\nname = \"many\"\nsample_interval = \"20ms\"\n");
    for i in 0..n {
        if i == fail_at {
            suite.push_str(
                "\n[[case]]\nname = \"fail\"\ncommand = [\"sh\", \"-c\", \"sleep 0.3; exit 1\"]\n",
            );
        }
        suite.push_str(&format!(
            "\n[[case]]\nname = \"c{i:04}\"\ncommand = [\"true\"]\n"
        ));
    }
    suite
}

/// The text of one case's section in report.html, if it has one.
fn html_section<'a>(html: &'a str, id: &str) -> Option<&'a str> {
    let start = html.find(&format!("<section id=\"case-{id}\""))?;
    let length = html[start..].find("</section>")?;
    Some(&html[start..start + length])
}

#[test]
fn hundreds_of_cases_make_complete_reports() {
    const CASES: usize = 300;
    let project = Project::new(&many_cases_suite(CASES, 137));
    let run = project.run(&[]);
    run.assert_code(1);
    let ids: Vec<String> = (0..CASES)
        .map(|i| format!("c{i:04}"))
        .chain(["fail".to_string()])
        .collect();

    // results.json: the last checkpoint is the whole run.
    let results = run.results();
    assert_eq!(results["summary"]["passed"], CASES);
    assert_eq!(results["summary"]["failed"], 1);
    assert!(results["finished_at"].is_string(), "the final write");
    let in_json: Vec<&str> = results["cases"]
        .as_array()
        .expect("cases")
        .iter()
        .filter_map(|c| c["id"].as_str())
        .collect();
    assert_eq!(in_json.len(), CASES + 1);
    for id in &ids {
        assert!(in_json.contains(&id.as_str()), "{id} in results.json");
    }

    // junit.xml: valid, one testcase per case, the one failure.
    let xml = std::fs::read_to_string(project.out().join("junit.xml")).expect("junit.xml");
    let document = roxmltree::Document::parse(&xml).expect("valid XML");
    let testcases: Vec<_> = document
        .descendants()
        .filter(|n| n.has_tag_name("testcase"))
        .collect();
    assert_eq!(testcases.len(), CASES + 1);
    let failed: Vec<_> = testcases
        .iter()
        .filter(|t| t.children().any(|n| n.has_tag_name("failure")))
        .filter_map(|t| t.attribute("name"))
        .collect();
    assert_eq!(failed, ["fail"]);

    // summary.md: a row per case.
    let summary = std::fs::read_to_string(project.out().join("summary.md")).expect("summary.md");
    assert!(
        summary.starts_with("## oomgate: many — 300 passed, 1 failed"),
        "{summary}"
    );
    for id in &ids {
        assert!(
            summary.contains(&format!("\n| `{id}` | ")),
            "{id} in summary.md"
        );
    }

    // report.html: every case in the table, a bounded number of sections,
    // and the failure among them with its chart.
    let html = std::fs::read_to_string(project.out().join("report.html")).expect("report.html");
    let table = &html[..html.find("</table>").expect("the table")];
    assert_eq!(
        table.matches("<tr").count(),
        CASES + 2,
        "a header and a row per case"
    );
    for id in &ids {
        assert!(table.contains(&format!(">{id}<")), "{id} in the table");
    }
    let sections = html.matches("<section ").count();
    assert!((1..=50).contains(&sections), "{sections} charted cases");
    // At most a chart per section, and the overview of them at the top.
    assert!(html.matches("<svg").count() <= sections + 1);
    assert!(
        html.contains(&format!("{sections} of {} cases have a chart", CASES + 1)),
        "the page says how many are charted"
    );
    let failure = html_section(&html, "fail").expect("the failing case has a section");
    assert!(failure.contains("<svg"), "and a chart: {failure}");
    let why = project.results()["cases"]
        .as_array()
        .and_then(|cases| cases.iter().find(|c| c["id"] == "fail"))
        .and_then(|case| case["message"].as_str())
        .map(str::to_string)
        .expect("why the case failed, in results.json");
    assert!(table.contains(&why), "the table says why a case failed");
}

/// The workload of a case that runs after `first`: it passes only if
/// results.json already holds `first` and no page has been written yet.
const CHECKS_THE_FIRST_CHECKPOINT: &str = r#"out="$OOMGATE_OUT/../.."
for i in $(seq 1 300); do
  grep -q '"id": "first"' "$out/results.json" 2>/dev/null && break
  sleep 0.1
done
grep -q '"id": "first"' "$out/results.json" || { echo "results.json lacks the first case" >&2; exit 1; }
for page in summary.md report.html; do
  if [ -e "$out/$page" ]; then echo "$page written before the end" >&2; exit 1; fi
done
"#;

#[test]
fn results_are_checkpointed_after_the_first_case_and_pages_written_at_the_end() {
    let suite = format!(
        "[suite]\nname = \"t\"\nsample_interval = \"20ms\"\n\n[[case]]\nname = \"first\"\ncommand = [\"true\"]\n\n[[case]]\nname = \"second\"\ncommand = [\"sh\", \"-c\", {}]\ntimeout = \"60s\"\n",
        toml_str(CHECKS_THE_FIRST_CHECKPOINT)
    );
    let project = Project::new(&suite);
    // Pages of an earlier run in the same out dir must not pass for this
    // run's while it goes on.
    std::fs::create_dir_all(project.out()).expect("out dir");
    std::fs::write(project.out().join(".oomgate-out"), "").expect("the marker");
    for page in ["summary.md", "report.html"] {
        std::fs::write(project.out().join(page), "an earlier run").expect("stale page");
    }
    let run = project.run(&[]);
    run.assert_code(0);
    assert_eq!(run.case("second")["status"], "passed");
    for page in ["summary.md", "report.html"] {
        let text = std::fs::read_to_string(project.out().join(page)).expect(page);
        assert!(text.contains("second"), "{page} written at the end: {text}");
    }
}

#[test]
fn failures_beyond_the_chart_cap_are_in_the_table() {
    const FAILURES: usize = 60;
    let mut suite = String::from("[suite]\nname = \"cap\"\nsample_interval = \"20ms\"\n");
    for i in 0..FAILURES {
        suite.push_str(&format!(
            "\n[[case]]\nname = \"f{i:02}\"\ncommand = [\"false\"]\n"
        ));
    }
    let project = Project::new(&suite);
    project.run(&[]).assert_code(1);
    let html = std::fs::read_to_string(project.out().join("report.html")).expect("report.html");
    assert_eq!(html.matches("<section ").count(), 50, "the cap");
    // The first failures in run order have sections; the rest have rows.
    assert!(html_section(&html, "f49").is_some());
    assert!(html_section(&html, "f50").is_none());
    assert!(
        html.contains("<tr id=\"case-f59\" class=\"fail\">"),
        "{html}"
    );
    assert!(
        html.contains("10 more cases that did not pass are over the cap"),
        "the page says so"
    );
}

fn true_suite() -> Project {
    Project::new("[suite]\nname = \"t\"\n[[case]]\nname = \"a\"\ncommand = [\"true\"]\n")
}

/// Regression: report paths that were not regular files were renamed over:
/// `--junit /dev/null` replaced /dev/null with a file (as root).
#[test]
fn a_device_is_written_in_place_never_replaced() {
    use std::os::unix::fs::FileTypeExt;
    let project = true_suite();
    let run = project.run(&["--junit", "/dev/null", "--json", "/dev/null"]);
    run.assert_code(0);
    let meta = std::fs::metadata("/dev/null").expect("/dev/null");
    assert!(meta.file_type().is_char_device(), "/dev/null was replaced");
    // `--json /dev/stdout` prints the results (the terminal display is on
    // stderr).
    let run = project.run(&["--json", "/dev/stdout"]);
    run.assert_code(0);
    let printed: serde_json::Value = serde_json::from_str(&run.stdout).expect("JSON on stdout");
    assert_eq!(printed["cases"][0]["id"], "a");
}

#[test]
fn a_fifo_gets_the_report_once_at_the_end() {
    let project = true_suite();
    let fifo = project.path().join("junit.fifo");
    let c_path = std::ffi::CString::new(fifo.display().to_string()).expect("path");
    // SAFETY: mkfifo reads a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c_path.as_ptr(), 0o600) }, 0, "mkfifo");
    let reader = {
        let fifo = fifo.clone();
        std::thread::spawn(move || std::fs::read_to_string(fifo).expect("read the fifo"))
    };
    let run = project.run(&["--junit", &fifo.display().to_string()]);
    run.assert_code(0);
    let xml = reader.join().expect("reader");
    assert!(roxmltree::Document::parse(&xml).is_ok(), "{xml}");
    assert!(xml.contains("testcase name=\"a\""), "{xml}");
    use std::os::unix::fs::FileTypeExt;
    let meta = std::fs::symlink_metadata(&fifo).expect("fifo");
    assert!(meta.file_type().is_fifo(), "the FIFO was replaced");
}

#[test]
fn a_symlinked_report_path_replaces_its_target_and_stays_a_link() {
    let project = true_suite();
    let target = project.path().join("reports/real.json");
    std::fs::create_dir_all(target.parent().expect("parent")).expect("mkdir");
    std::fs::write(&target, "old").expect("write");
    // A private report stays private, and its owner's.
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    if root {
        std::os::unix::fs::chown(&target, Some(4321), Some(4321)).expect("chown");
    }
    let link = project.path().join("results-link.json");
    std::os::unix::fs::symlink("reports/real.json", &link).expect("symlink");
    let run = project.run(&["--json", &link.display().to_string()]);
    run.assert_code(0);
    let meta = std::fs::symlink_metadata(&link).expect("link");
    assert!(meta.file_type().is_symlink(), "the link became a file");
    let written = read_json(&target);
    assert_eq!(written["cases"][0]["id"], "a");
    let meta = std::fs::metadata(&target).expect("target");
    assert_eq!(meta.mode() & 0o7777, 0o600, "the mode was not kept");
    if root {
        assert_eq!(
            (meta.uid(), meta.gid()),
            (4321, 4321),
            "the owner was not kept"
        );
    }
}

#[test]
fn a_report_over_another_or_among_the_logs_is_refused() {
    let project = true_suite();
    let out = project.out();
    let clash = out.join("results.json").display().to_string();
    let run = project.run(&["--junit", &clash]);
    run.assert_code(2);
    assert!(run.stderr.contains("are the same file"), "{}", run.stderr);
    let among_logs = out.join("cases/a/stdout.log").display().to_string();
    std::fs::create_dir_all(out.join("cases/a")).expect("mkdir");
    let run = project.run(&["--json", &among_logs]);
    run.assert_code(2);
    assert!(run.stderr.contains("cases/ folder"), "{}", run.stderr);
}

/// Regression: an unwritable GITHUB_STEP_SUMMARY turned a pass into exit
/// 3 without naming the path.
#[test]
fn an_unwritable_job_summary_is_a_warning_not_a_failure() {
    let project = true_suite();
    let missing = project.path().join("no/such/folder/summary.md");
    let mut command = project.run_command();
    command.env("GITHUB_STEP_SUMMARY", &missing);
    let run = project.finish(command);
    run.assert_code(0);
    assert!(
        run.stderr.contains(&format!("({})", missing.display())),
        "{}",
        run.stderr
    );
}

/// Regression: with GITHUB_ACTIONS=true, a closed stdout made oomgate exit
/// 3 mid-run with the remaining cases not recorded.
#[test]
fn a_closed_stdout_does_not_stop_the_suite() {
    let project = Project::new(
        "[suite]\nname = \"t\"\n\
         [[case]]\nname = \"fails\"\ncommand = [\"false\"]\n\
         [[case]]\nname = \"after\"\ncommand = [\"true\"]\n",
    );
    let mut child = project
        .run_command()
        .env("GITHUB_ACTIONS", "true")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start oomgate");
    drop(child.stdout.take()); // the reader went away
    let output = child.wait_with_output().expect("oomgate");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    let results = project.results();
    let ids: Vec<&str> = results["cases"]
        .as_array()
        .map(|cases| cases.iter().filter_map(|c| c["id"].as_str()).collect())
        .unwrap_or_default();
    assert_eq!(ids, ["fails", "after"], "{stderr}");
}

//! Text oomgate did not write — a frame's name in a memory snapshot, an
//! allocator value in a hand-edited lock, a pytest file's name — is shown
//! clean on every output: no control character, bidi override or
//! noncharacter raw, no `::error` workflow command at a line's start, no
//! Markdown image that would load from elsewhere.

mod common;

use std::path::Path;

use common::*;

/// A frame name an attacker chose: a workflow command on a line of its
/// own, a terminal title (OSC … BEL), a right-to-left override, a
/// noncharacter, a Markdown image.
const EVIL_FRAME: &str = "attention\n::error title=pwned::frame\u{1b}]0;owned\u{7}\u{202e}gpj\u{fffe} ![t](https://evil.test/p.png)";

fn python_path() -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    format!(
        "{}:{}",
        root.join("python").display(),
        root.join("fixtures/python").display()
    )
}

fn suite(base: &str) -> String {
    format!(
        "[suite]\nname = \"p\"\nsample_interval = \"20ms\"\n[[case]]\nname = \"train\"\ncommand = [\"python3\", {}, \"--steps\", \"3\", \"--base-mib\", \"{base}\"]\nenv = {{ OOMGATE_SNAPSHOT = \"exit\", PYTHONPATH = {} }}\n",
        toml_str(&workload("probe_train.py")),
        toml_str(&python_path())
    )
}

/// What no output may hold: a raw unsafe character (newline and tab
/// aside), a line that starts the attacker's workflow command.
fn assert_clean(what: &str, text: &str) {
    let raw: Vec<char> = text
        .chars()
        .filter(|&c| {
            let n = c as u32;
            (c.is_control() && c != '\n' && c != '\t')
                || matches!(n, 0x200E | 0x200F | 0x202A..=0x202E | 0x2066..=0x2069)
                || n & 0xFFFE == 0xFFFE
        })
        .collect();
    assert!(raw.is_empty(), "{what} holds {raw:?} raw:\n{text}");
    for line in text.lines() {
        assert!(
            !line.trim_start().starts_with("::error title=pwned"),
            "{what} starts a workflow command: {line:?}\n{text}"
        );
    }
}

/// `line` without its code spans (a run of backticks to the next run of
/// the same length).
fn outside_code_spans(line: &str) -> String {
    let mut out = String::new();
    let mut rest = line;
    while let Some(start) = rest.find('`') {
        out.push_str(&rest[..start]);
        let ticks = rest[start..].len() - rest[start..].trim_start_matches('`').len();
        let after = &rest[start + ticks..];
        let mut at = 0;
        let close = loop {
            match after[at..].find('`') {
                None => break None,
                Some(i) => {
                    let run = after[at + i..].len() - after[at + i..].trim_start_matches('`').len();
                    if run == ticks {
                        break Some(at + i + run);
                    }
                    at += i + run;
                }
            }
        };
        match close {
            Some(end) => rest = &after[end..],
            None => {
                out.push_str(&rest[start..start + ticks]);
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

/// A frame named by an attacker, and a lock whose allocator value was
/// edited by hand to hold a workflow command, through a failing run: the
/// terminal, the annotations, junit.xml, report.html, summary.md (and the
/// job summary), `oomgate diff` and `oomgate sites` show both escaped.
#[test]
fn a_frame_name_and_a_locks_allocator_value_are_clean_on_every_output() {
    let mut project = Project::new(&suite("512"));
    project
        .env
        .push(("STANDIN_SNAPSHOT_ATTENTION".into(), EVIL_FRAME.into()));
    project.run(&[]).assert_code(0);
    project.lock_from_results().assert_code(0);
    let lock = std::fs::read_to_string(project.lock_path()).expect("lock");
    let edited = lock.replace(
        "expandable_segments = \"False\"",
        "expandable_segments = \"False\\n::error title=pwned::lock\\u001b]0;owned\\u0007\\u202e\"",
    );
    assert_ne!(
        edited, lock,
        "the lock keeps the allocator's settings:\n{lock}"
    );
    std::fs::write(project.lock_path(), edited).expect("lock");

    std::fs::write(project.suite(), suite("1100")).expect("suite");
    project
        .env
        .push(("STANDIN_SNAPSHOT_GROW_MIB".into(), "500".into()));
    let summary_path = project.path().join("step-summary.md");
    project.env.push(("GITHUB_ACTIONS".into(), "true".into()));
    project.env.push((
        "GITHUB_STEP_SUMMARY".into(),
        summary_path.display().to_string(),
    ));
    let run = project.run(&[]);
    run.assert_code(1);
    let message = run.message("train");
    assert!(
        message.contains(
            "attention\\n::error title=pwned::frame\\u{1b}]0;owned\\u{7}\\u{202e}gpj\\u{fffe}"
        ),
        "the frame's name, escaped, in the message: {message}"
    );
    assert!(
        message.contains("allocator expandable_segments False\\n::error title=pwned::lock\\u{1b}]0;owned\\u{7}\\u{202e} → False"),
        "the lock's value, escaped: {message}"
    );
    assert_clean("stderr", &run.stderr);
    assert_clean("stdout (annotations)", &run.stdout);
    assert!(
        run.stderr.contains("::error title=pwned::frame"),
        "{}",
        run.stderr
    );
    for file in ["junit.xml", "report.html", "summary.md"] {
        let text = std::fs::read_to_string(project.out().join(file)).expect(file);
        assert_clean(file, &text);
        assert!(
            text.contains("\\u{202e}"),
            "{file} shows the override:\n{text}"
        );
    }
    for (name, path) in [
        ("summary.md", project.out().join("summary.md")),
        ("the job summary", summary_path),
    ] {
        let text = std::fs::read_to_string(path).expect(name);
        assert!(text.contains("![t](https://evil.test/p.png)"), "{text}");
        for line in text.lines() {
            let outside = outside_code_spans(line);
            assert!(
                !outside.contains("![") && !outside.contains("](") && !outside.contains('<'),
                "{name}: live markup outside a code span: {line:?}"
            );
        }
    }

    let diff = project.diff_lock_and_results();
    diff.assert_code(1);
    assert_clean("oomgate diff", &diff.stdout);
    assert_clean("oomgate diff's stderr", &diff.stderr);

    for json in [false, true] {
        let mut command = project.oomgate();
        command.arg("sites").arg(project.out().join("results.json"));
        if json {
            command.arg("--json");
        }
        let output = command.output().expect("oomgate sites");
        let text = String::from_utf8_lossy(&output.stdout);
        assert_eq!(output.status.code(), Some(0), "{text}");
        assert_clean("oomgate sites", &text);
        if json {
            let value: serde_json::Value = serde_json::from_str(&text).expect("json");
            assert_eq!(
                value["train"]["sites"][0]["site"],
                format!("model.py:88 {EVIL_FRAME}"),
                "the same value"
            );
            assert!(text.contains("\\u202egpj\\ufffe"), "escaped: {text}");
        } else {
            assert!(
                text.contains("model.py:88 attention\\n::error title=pwned::frame"),
                "{text}"
            );
        }
    }
}

/// A snapshot read directly, its allocator's value a workflow command:
/// `oomgate sites` prints it escaped.
#[test]
fn oomgate_sites_on_a_pickle_prints_its_text_escaped() {
    let dir = tempfile::tempdir().expect("temp dir");
    let pickle = dir.path().join("memory_snapshot.pickle");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/snapshots/make_snapshot.py");
    let status = std::process::Command::new("python3")
        .arg(script)
        .arg(&pickle)
        .arg("basic")
        .arg("--workdir")
        .arg(dir.path())
        .arg("--setting")
        .arg("expandable_segments=True\n::error title=pwned::pickle\u{1b}[2K\u{9b}")
        .status()
        .expect("python3");
    assert!(status.success());
    let output = oomgate()
        .arg("sites")
        .arg(&pickle)
        .output()
        .expect("oomgate sites");
    let text = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(0), "{text}");
    assert_clean("oomgate sites", &text);
    assert!(
        text.contains("expandable_segments=True\\n::error title=pwned::pickle\\u{1b}[2K\\u{9b}"),
        "{text}"
    );
}

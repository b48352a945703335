//! `[[pytest]]`: a pytest suite gated by oomgate, one case per test, run
//! by the real binary with a real pytest (scripts/pytest-venv.sh) on real
//! test modules: markers at every level, parametrized ids, a test over its
//! budget failing alone, collection errors, shards, JUnit names, merges
//! without a test environment, and budgets proposed from a run.

mod common;

use common::pytest::python;
use common::*;

/// A project with a pytest suite in `tests/` (and `pytest.ini`, strict
/// about markers as many teams are) and a suite whose `[[pytest]]` has
/// `extra` lines.
fn project(files: &[(&str, &str)], extra: &str) -> Project {
    let python = toml_str(&python().display().to_string());
    let project = Project::new(&format!(
        "[suite]\nname = \"unit\"\nsample_interval = \"20ms\"\n\n[[pytest]]\npaths = [\"tests\"]\npython = {python}\n{extra}\n"
    ));
    std::fs::write(
        project.path().join("pytest.ini"),
        "[pytest]\naddopts = --strict-markers\n",
    )
    .expect("pytest.ini");
    for (name, text) in files {
        let path = project.path().join("tests").join(name);
        std::fs::create_dir_all(path.parent().expect("a folder")).expect("tests/");
        std::fs::write(&path, text).expect("a test file");
    }
    project
}

/// `oomgate check` or `list` of the project's suite.
fn inspect(project: &Project, command: &str) -> Run {
    let output = project
        .oomgate()
        .arg(command)
        .arg(project.suite())
        .output()
        .expect("oomgate");
    Run::from(output, project.out())
}

/// Markers at module, class and function level, parametrized tests, a
/// test that holds more host memory than its marker allows.
const MODEL: &str = r#"
import pytest

pytestmark = pytest.mark.oomgate(host="512 MiB", timeout="2m")

def hold(mib):
    return b"\x01" * (mib * 1024 * 1024)

@pytest.mark.oomgate(host="256 MiB", repeat=2, creep={"limit": "5%", "action": "warn"})
class TestForward:
    @pytest.mark.parametrize("dtype", ["bf16", "fp32"])
    def test_forward(self, dtype):
        assert len(hold(8)) > 0

    @pytest.mark.oomgate(host="64 MiB", creep="15%")
    def test_grows(self):
        data = hold(160)
        assert len(data) > 0

def test_unmarked():
    assert len(hold(8)) > 0
"#;

const FORWARD_BF16: &str = "tests/test_model.py::TestForward::test_forward[bf16]";
const FORWARD_FP32: &str = "tests/test_model.py::TestForward::test_forward[fp32]";
const GROWS: &str = "tests/test_model.py::TestForward::test_grows";
const UNMARKED: &str = "tests/test_model.py::test_unmarked";

/// Each test is a case named by its node id, and its budget is the
/// closest marker's: function over class over module over `[[pytest]]`.
#[test]
fn each_test_is_a_case_with_its_closest_markers() {
    let project = project(&[("test_model.py", MODEL)], "budget = { host = \"1 GiB\" }");
    let list = inspect(&project, "list");
    assert_eq!(
        list.stdout.lines().collect::<Vec<_>>(),
        [FORWARD_BF16, FORWARD_FP32, GROWS, UNMARKED],
        "{}",
        list.stderr
    );
    // A whole node id is that test; any other text, every test that
    // holds it (both parametrizations, and `test_grows` beside them).
    let listed = |filter: &str| {
        let output = project
            .oomgate()
            .args([
                "list",
                &project.suite().display().to_string(),
                "--filter",
                filter,
            ])
            .output()
            .expect("oomgate list");
        String::from_utf8_lossy(&output.stdout)
            .lines()
            .map(String::from)
            .collect::<Vec<_>>()
    };
    assert_eq!(listed(FORWARD_BF16), [FORWARD_BF16]);
    assert_eq!(
        listed("tests/test_model.py::TestForward::test_"),
        [FORWARD_BF16, FORWARD_FP32, GROWS]
    );
    let check = inspect(&project, "check");
    check.assert_code(0);
    let text = &check.stdout;
    let limits_of = |id: &str| {
        let block = text
            .split("\n\n")
            .find(|b| b.starts_with(id))
            .unwrap_or_else(|| panic!("{id} in check:\n{text}"));
        block
            .lines()
            .find(|l| l.trim_start().starts_with("limits:"))
            .unwrap_or_default()
            .to_string()
    };
    for (id, expected, layer) in [
        (GROWS, "budget host 64.0 MiB", "function"),
        (GROWS, "repeat 2", "class"),
        (FORWARD_BF16, "budget host 256.0 MiB", "class"),
        (UNMARKED, "budget host 512.0 MiB", "module"),
        (UNMARKED, "timeout 2m", "module"),
        (GROWS, "creep 15% over 30days", "function"),
        (FORWARD_BF16, "creep 5% over 30days (warn)", "class"),
    ] {
        let limits = limits_of(id);
        assert!(limits.contains(expected), "{id}: {layer}: {limits}");
    }
}

/// A test's outcome as pytest words it: an assertion that failed is
/// `test-failed` with pytest's message, not a crash; a skipped test and
/// an expected failure are `skipped` (and JUnit's `<skipped>`, typed as
/// pytest's own junitxml types them), an unexpected pass passes, and an
/// error in setup is `error` (`test-error`), JUnit's `<error>` as pytest
/// writes it.
#[test]
fn outcomes_are_pytests_and_a_failed_assertion_is_no_crash() {
    let outcomes = r#"
import pytest

def test_passes():
    assert 1 + 1 == 2

def test_asserts():
    assert 1 + 1 == 3, "arithmetic is broken"

def test_skips():
    pytest.skip("needs a GPU")

@pytest.mark.xfail(reason="known bug")
def test_known_bug():
    assert False

@pytest.mark.xfail(reason="fixed since")
def test_fixed_bug():
    assert True

@pytest.fixture
def broken():
    raise RuntimeError("the fixture failed")

def test_setup_fails(broken):
    pass
"#;
    let project = project(&[("test_outcomes.py", outcomes)], "");
    let run = project.run(&[]);
    run.assert_code(1);
    let case = |name: &str| run.case(&format!("tests/test_outcomes.py::{name}"));
    // (test, status, failure kind, pytest's outcome)
    let table = [
        ("test_passes", "passed", None, "passed"),
        ("test_asserts", "failed", Some("test-failed"), "failed"),
        ("test_skips", "skipped", None, "skipped"),
        ("test_known_bug", "skipped", None, "xfailed"),
        ("test_fixed_bug", "passed", None, "xpassed"),
        ("test_setup_fails", "error", Some("test-error"), "error"),
    ];
    for (test, status, kind, outcome) in table {
        let case = case(test);
        assert_eq!(case["status"], status, "{case:#}");
        assert_eq!(case["failure_kind"].as_str(), kind, "{case:#}");
        assert_eq!(case["probe"]["pytest"]["outcome"], outcome, "{case:#}");
    }
    let asserts = case("test_asserts");
    assert_eq!(asserts["diagnosis"]["kind"], "test-failed", "{asserts:#}");
    let message = asserts["probe"]["pytest"]["message"]
        .as_str()
        .unwrap_or_default();
    assert!(message.contains("arithmetic is broken"), "{asserts:#}");
    assert_eq!(
        case("test_skips")["probe"]["pytest"]["message"],
        "needs a GPU"
    );
    let setup = case("test_setup_fails");
    assert_eq!(setup["probe"]["pytest"]["when"], "setup");
    assert_eq!(setup["diagnosis"]["kind"], "test-error", "{setup:#}");
    assert!(
        setup["message"]
            .as_str()
            .is_some_and(|m| m.contains("test-error") && m.contains("the fixture failed")),
        "{setup:#}"
    );
    assert_eq!(case("test_skips")["message"], "skipped: needs a GPU");
    let summary = &run.results()["summary"];
    assert_eq!(
        (
            &summary["passed"],
            &summary["skipped"],
            &summary["failed"],
            &summary["error"]
        ),
        (&2.into(), &2.into(), &1.into(), &1.into()),
        "{summary:#}"
    );
    assert!(
        run.stderr
            .contains("2 passed, 2 skipped, 1 failed, 1 errored"),
        "{}",
        run.stderr
    );
    let junit = std::fs::read_to_string(project.out().join("junit.xml")).expect("junit.xml");
    for skipped in [
        r#"<skipped message="needs a GPU" type="pytest.skip"/>"#,
        r#"<skipped message="known bug" type="pytest.xfail"/>"#,
    ] {
        assert!(junit.contains(skipped), "{skipped} in\n{junit}");
    }
    assert!(junit.contains(r#"type="test-error""#), "{junit}");
    assert_eq!(junit.matches("<error ").count(), 1, "{junit}");
}

/// A skip is added to what oomgate measured, never over it: a skipped
/// test over its budget fails. A skipped test is not locked (its figures
/// are of the skip), and a test locked when it ran is not compared while
/// it is skipped: its baseline stays.
#[test]
fn a_skip_never_hides_a_breach_and_is_neither_locked_nor_compared() {
    const TESTS: &str = r#"
import os, pytest

@pytest.mark.oomgate(host="32 MiB")
def test_skips_after_a_burst():
    data = b"\x01" * (64 << 20)
    pytest.skip("too late")

def test_sometimes():
    if os.environ.get("SKIP_IT"):
        pytest.skip("not today")
    data = b"\x01" * (48 << 20)
    assert data
"#;
    let project = project(&[("test_skip.py", TESTS)], "");
    let run = project.run(&[]);
    run.assert_code(1);
    let burst = run.case("tests/test_skip.py::test_skips_after_a_burst");
    assert_eq!(burst["status"], "failed", "{burst:#}");
    assert_eq!(burst["failure_kind"], "budget", "{burst:#}");
    assert_eq!(burst["probe"]["pytest"]["outcome"], "skipped", "{burst:#}");

    let ran = project.run(&["--filter", "test_sometimes"]);
    ran.assert_code(0);
    project.lock_from_results().assert_code(0);
    let mut skipping = project.run_command();
    skipping
        .args(["--filter", "test_sometimes"])
        .env("SKIP_IT", "1");
    let skipped = project.finish(skipping);
    skipped.assert_code(0);
    let case = skipped.case("tests/test_skip.py::test_sometimes");
    assert_eq!(case["status"], "skipped", "{case:#}");
    assert!(case["baseline"].is_null(), "not compared: {case:#}");
    // Locking the skipped run keeps the baseline of the run that ran.
    let lock_before = std::fs::read_to_string(project.lock_path()).expect("the lock");
    let relock = project.lock_from_results();
    relock.assert_code(0);
    assert!(
        relock
            .stderr
            .contains("skipped by pytest, so not locked (their previous baseline was kept)"),
        "{}",
        relock.stderr
    );
    let lock_after = std::fs::read_to_string(project.lock_path()).expect("the lock");
    let figure = |lock: &str| {
        lock.lines()
            .find(|l| l.trim_start().starts_with("host_peak_bytes"))
            .map(str::to_string)
    };
    assert_eq!(figure(&lock_before), figure(&lock_after));
    assert!(figure(&lock_after).is_some(), "{lock_after}");
}

/// A project whose addopts ask pytest-xdist for workers: each test still
/// runs in a process oomgate measures (`-n 0`), said once, and no xdist
/// worker runs it; the tests run that many at once instead, in sessions
/// of their own (as `--jobs 2`), unless `--jobs` says otherwise.
#[test]
fn xdist_workers_from_the_projects_addopts_are_not_started_per_test() {
    let in_the_measured_process = r#"
import os
import time

def ran(name):
    with open(os.path.join(os.path.dirname(__file__), name + ".pid"), "w") as out:
        out.write(str(os.getpid()))
    time.sleep(0.3)

def test_one():
    assert "PYTEST_XDIST_WORKER" not in os.environ, "ran in an xdist worker"
    ran("one")

def test_two():
    assert "PYTEST_XDIST_WORKER" not in os.environ, "ran in an xdist worker"
    ran("two")
"#;
    let project = project(&[("test_workers.py", in_the_measured_process)], "");
    std::fs::write(
        project.path().join("pytest.ini"),
        "[pytest]\naddopts = --strict-markers -n 2\n",
    )
    .expect("pytest.ini");
    let run = project.run(&[]);
    run.assert_code(0);
    for test in ["test_one", "test_two"] {
        let case = run.case(&format!("tests/test_workers.py::{test}"));
        assert_eq!(case["status"], "passed", "{case:#}");
        let command = case["command"].as_array().expect("a command");
        let n = command
            .iter()
            .position(|a| a == "-n")
            .expect("-n in the command");
        assert_eq!(command[n + 1], "0", "{case:#}");
    }
    let said = run
        .stderr
        .matches("pytest-xdist is asked for `-n 2`")
        .count();
    assert_eq!(said, 1, "{}", run.stderr);
    let pid = |name: &str| {
        std::fs::read_to_string(project.path().join("tests").join(format!("{name}.pid")))
            .expect("the test's pid")
    };
    assert_ne!(pid("one"), pid("two"), "two sessions at once, as `-n 2`");
    project.run(&["--jobs", "1"]).assert_code(0);
    assert_eq!(pid("one"), pid("two"), "`--jobs 1`: one session");
}

/// The test over its marker's budget fails, alone; the others pass; the
/// JUnit report names them as pytest's own report does.
#[test]
fn a_test_over_its_budget_fails_alone_and_junit_names_it_as_pytest_does() {
    let project = project(&[("test_model.py", MODEL)], "");
    let run = project.run(&[]);
    run.assert_code(1);
    let grows = run.case(GROWS);
    assert_eq!(grows["status"], "failed", "{grows:#}");
    assert_eq!(grows["failure_kind"], "budget", "{grows:#}");
    assert!(
        grows["host_peak_bytes"]
            .as_u64()
            .is_some_and(|b| b > 64 * MIB),
        "the test was stopped over its 64 MiB: {grows:#}"
    );
    assert_eq!(grows["pytest"]["file"], "tests/test_model.py");
    for id in [FORWARD_BF16, FORWARD_FP32, UNMARKED] {
        assert_eq!(run.case(id)["status"], "passed", "{:#}", run.case(id));
    }
    let junit = std::fs::read_to_string(project.out().join("junit.xml")).expect("junit.xml");
    for (classname, name) in [
        ("tests.test_model.TestForward", "test_forward[bf16]"),
        ("tests.test_model.TestForward", "test_grows"),
        ("tests.test_model", "test_unmarked"),
    ] {
        let attributes = format!("name=\"{name}\" classname=\"{classname}\"");
        assert!(junit.contains(&attributes), "{attributes} in\n{junit}");
    }
    assert_eq!(
        run.results()["pytest_cases"].as_array().map(Vec::len),
        Some(4),
        "every collected test recorded"
    );
}

/// A module that does not import is exit 2 with pytest's own words; a
/// marker keyword oomgate does not know is exit 2 naming the test.
#[test]
fn collection_errors_and_bad_markers_are_bad_input() {
    let broken = project(
        &[("test_broken.py", "import pytest\ndef test_x(:\n    pass\n")],
        "",
    );
    let run = broken.run(&[]);
    run.assert_code(2);
    assert!(run.stderr.contains("could not collect"), "{}", run.stderr);
    assert!(
        run.stderr.contains("SyntaxError"),
        "pytest's message: {}",
        run.stderr
    );
    assert!(!broken.out().join("results.json").exists(), "nothing ran");

    let marked = project(
        &[(
            "test_marks.py",
            "import pytest\n\n@pytest.mark.oomgate(vram=\"8 GiB\")\ndef test_a():\n    pass\n\n@pytest.mark.oomgate(gpu=\"eight\")\ndef test_b():\n    pass\n",
        )],
        "",
    );
    let check = inspect(&marked, "check");
    check.assert_code(2);
    let said = &check.stderr;
    assert!(
        said.contains("tests/test_marks.py:3: tests/test_marks.py::test_a")
            && said.contains("no keyword `vram`"),
        "{said}"
    );
    assert!(
        said.contains("tests/test_marks.py::test_b") && said.contains("`gpu`"),
        "{said}"
    );

    let empty = project(&[("test_none.py", "x = 1\n")], "");
    let run = empty.run(&[]);
    run.assert_code(2);
    assert!(run.stderr.contains("collected no test"), "{}", run.stderr);

    // The plugin kept out by the table's own args: said, never a run
    // that measured nothing.
    let unplugged = project(
        &[("test_a.py", "def test_a():\n    pass\n")],
        "args = [\"-p\", \"no:oomgate_pytest\"]",
    );
    let run = unplugged.run(&[]);
    run.assert_code(2);
    assert!(
        run.stderr.contains("oomgate's plugin wrote nothing"),
        "{}",
        run.stderr
    );
}

/// A test file whose name holds a newline and ESC (pytest cannot be given
/// its node id to run) is refused at collection, located at the test, its
/// name escaped; a NaN or infinite marker value names the test, its line
/// and the keyword — never "the collection's report cannot be read".
#[test]
fn control_characters_in_a_node_id_and_nan_markers_are_located_errors() {
    let named = project(
        &[
            ("test_ok.py", "def test_fine():\n    pass\n"),
            (
                "test_a\n::error title=pwned::x\u{1b}[2K.py",
                "def test_evil():\n    pass\n",
            ),
        ],
        "",
    );
    for command in ["check", "run"] {
        let said = match command {
            "run" => named.run(&[]),
            _ => inspect(&named, command),
        };
        said.assert_code(2);
        let stderr = &said.stderr;
        assert!(
            stderr.contains("tests/test_a\\n::error title=pwned::x\\u{1b}[2K.py:1: tests/test_a\\n::error title=pwned::x\\u{1b}[2K.py::test_evil: the test's node id holds a control character"),
            "{stderr}"
        );
        assert!(!stderr.contains('\u{1b}'), "{stderr}");
        assert!(
            !stderr.lines().any(|l| l.starts_with("::error")),
            "{stderr}"
        );
    }
    assert!(!named.out().join("results.json").exists(), "nothing ran");

    for (value, shown) in [("float('nan')", "nan"), ("float('-inf')", "-inf")] {
        let marked = project(
            &[(
                "test_nan.py",
                &format!(
                    "import pytest\n\n\n@pytest.mark.oomgate(gpu_fraction={value})\ndef test_a():\n    pass\n"
                ),
            )],
            "",
        );
        let check = inspect(&marked, "check");
        check.assert_code(2);
        let said = &check.stderr;
        assert!(
            said.contains(&format!("tests/test_nan.py:4: tests/test_nan.py::test_a: @pytest.mark.oomgate `gpu_fraction`: {shown} (not a finite number) is not a value a marker can hold")),
            "{said}"
        );
        assert!(!said.contains("cannot be read"), "{said}");
    }
}

/// A `[[pytest]]` refuses the keys that name one case, before pytest runs.
#[test]
fn case_only_keys_are_refused_in_a_pytest_table() {
    let project = Project::new(
        "[suite]\nname = \"unit\"\n\n[[pytest]]\npaths = [\"tests\"]\ncommand = [\"pytest\"]\ngranularity = \"module\"\n",
    );
    let check = inspect(&project, "check");
    check.assert_code(2);
    let said = &check.stderr;
    assert!(
        said.contains(":6:") && said.contains("`command` is not a `[[pytest]]` key"),
        "{said}"
    );
    assert!(
        said.contains(":7:") && said.contains("`granularity` must be"),
        "{said}"
    );
}

/// Shards deal the tests between them; a merge with `--suite` needs no
/// test environment (the parts recorded what they collected) and still
/// says which tests no part ran.
#[test]
fn shards_split_the_tests_and_merge_without_collecting() {
    let project = project(&[("test_model.py", MODEL)], "");
    // The suite's environment is a link, removed before the merge: a
    // merge that collected would fail.
    let link = project.path().join("venv");
    let venv = python()
        .parent()
        .and_then(|bin| bin.parent())
        .map(std::path::Path::to_path_buf);
    std::os::unix::fs::symlink(venv.expect("a venv"), &link).expect("link the venv");
    let suite = std::fs::read_to_string(project.suite()).expect("suite");
    let suite = suite.replace(
        &toml_str(&python().display().to_string()),
        "\"./venv/bin/python\"",
    );
    std::fs::write(project.suite(), suite).expect("suite");

    let shard = |index: &str| {
        let out = project.path().join(format!("shard-{index}"));
        let output = project
            .oomgate()
            .args([
                "run",
                "--partition",
                &format!("count:{index}/2"),
                "--filter",
                "test_forward",
                "--out",
            ])
            .arg(&out)
            .arg(project.suite())
            .output()
            .expect("oomgate run");
        let run = Run::from(output, out.clone());
        run.assert_code(0);
        run
    };
    let first = shard("1");
    assert_eq!(first.results()["cases"].as_array().map(Vec::len), Some(1));
    std::fs::remove_file(&link).expect("remove the link");
    let merged = project.path().join("merged");
    let output = project
        .oomgate()
        .arg("merge")
        .arg(project.path().join("shard-1"))
        .arg("--suite")
        .arg(project.suite())
        .arg("--out")
        .arg(&merged)
        .output()
        .expect("oomgate merge");
    let merge = Run::from(output, merged.clone());
    merge.assert_code(1);
    let results = merge.results();
    let not_run: Vec<&str> = results["not_run"]
        .as_array()
        .map(|ids| ids.iter().filter_map(|i| i.as_str()).collect())
        .unwrap_or_default();
    assert_eq!(not_run, [FORWARD_FP32, GROWS, UNMARKED], "{results:#}");
    let junit = std::fs::read_to_string(merged.join("junit.xml")).expect("junit.xml");
    assert!(
        junit.contains("name=\"test_unmarked\" classname=\"tests.test_model\""),
        "a test no part ran keeps its pytest names:\n{junit}"
    );
}

/// `granularity = "file"`: a file is one case, judged by its module-level
/// marker; test-level markers are said to be ignored.
#[test]
fn a_file_can_be_one_case() {
    let project = project(&[("test_model.py", MODEL)], "granularity = \"file\"");
    let run = project.run(&[]);
    run.assert_code(0);
    let results = run.results();
    let ids: Vec<&str> = results["cases"]
        .as_array()
        .map(|cases| cases.iter().filter_map(|c| c["id"].as_str()).collect())
        .unwrap_or_default();
    assert_eq!(ids, ["tests/test_model.py"], "{results:#}");
    assert!(
        run.stderr.contains("are ignored") && run.stderr.contains("TestForward"),
        "{}",
        run.stderr
    );
}

/// A profiled run proposes each test's marker from its peaks; the lock
/// of that run gates the next one, pytest cases and all.
#[test]
fn budgets_are_proposed_from_a_run_and_the_lock_gates_pytest_cases() {
    let project = project(&[("test_model.py", MODEL)], "");
    project.run(&["--filter", "test_forward"]).assert_code(0);
    let output = project
        .oomgate()
        .args(["budgets", "--factor", "1.5"])
        .arg(project.out().join("results.json"))
        .output()
        .expect("oomgate budgets");
    let text = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(0), "{text}");
    let marker = text
        .lines()
        .skip_while(|l| !l.starts_with(&format!("# {FORWARD_BF16}:")))
        .nth(1)
        .unwrap_or_default();
    assert!(
        marker.starts_with("@pytest.mark.oomgate(host=\"") && marker.ends_with(" MiB\")"),
        "{text}"
    );
    project.lock_from_results().assert_code(0);
    let lock = std::fs::read_to_string(project.lock_path()).expect("the lock");
    assert!(lock.contains(FORWARD_BF16), "{lock}");
    let again = project.run(&["--filter", "test_forward"]);
    again.assert_code(0);
    assert!(
        again.case(FORWARD_BF16)["baseline"].is_object(),
        "compared with the lock: {:#}",
        again.case(FORWARD_BF16)
    );
    // The plugin's folder is new each run, and no part of a test's
    // definition: nothing "changed since the baseline".
    assert!(
        !again.stderr.contains("changed since the baseline"),
        "{}",
        again.stderr
    );
}

/// A lock taken with every test in a process of its own gates a run in
/// the shared session without a false regression: the figures measure
/// different things (all the test's process held, against what the test
/// added), so they are not compared, and the run passes.
#[test]
fn a_change_of_mode_is_not_compared_and_not_a_regression() {
    const TESTS: &str = "def test_holds():\n    data = b'\\x01' * (40 << 20)\n    assert data\n";
    let isolated = project(&[("test_mode.py", TESTS)], "isolate = true");
    isolated.run(&[]).assert_code(0);
    isolated.lock_from_results().assert_code(0);
    let suite = std::fs::read_to_string(isolated.suite()).expect("the suite");
    std::fs::write(isolated.suite(), suite.replace("isolate = true", "")).expect("the suite");
    let shared = isolated.run(&[]);
    shared.assert_code(0);
    let case = shared.case("tests/test_mode.py::test_holds");
    assert_eq!(case["host_method"], "pytest-session", "{case:#}");
    assert_eq!(case["status"], "passed", "{case:#}");
    assert_eq!(case["baseline"]["host"]["outcome"], "skipped", "{case:#}");
}

/// Under plain pytest the wheel's plugin registers the marker (no warning,
/// `--strict-markers` passes) and, without CUDA, checks nothing.
#[test]
fn plain_pytest_accepts_the_marker_through_the_plugin() {
    let project = project(&[("test_model.py", MODEL)], "");
    let output = std::process::Command::new(python())
        .args([
            "-m",
            "pytest",
            "-q",
            "-p",
            "oomgate_probe.pytest_plugin",
            "-k",
            "test_forward or unmarked",
        ])
        .env(
            "PYTHONPATH",
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("python"),
        )
        .env_remove("OOMGATE_METRICS")
        .current_dir(project.path())
        .output()
        .expect("pytest");
    let said = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(0), "{said}");
    assert!(said.contains("3 passed"), "{said}");
    assert!(!said.contains("PytestUnknownMarkWarning"), "{said}");
}

/// A test that plants bytecode for oomgate's plugin (the plain pyc and
/// pytest's assertion-rewrite pyc, their headers giving the real source's
/// mtime and size, as a poisoner would): neither a later test of the same
/// run nor a later, separate run of another suite reports a failing test
/// as passed. Bytecode writing is left on, as on ordinary CI runners.
#[test]
fn a_test_cannot_poison_the_plugin_of_later_tests_or_runs() {
    const POISON: &str = r#"
import importlib._bootstrap_external as external, os, stat, sys
from _pytest.assertion.rewrite import PYC_TAIL

FORCE_PASS = '''
import pytest as _pytest_for_poison
@_pytest_for_poison.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.failed:
        report.outcome = "passed"
        report.longrepr = None
'''

def test_plant():
    module = sys.modules["oomgate_pytest"]
    source = module.__file__
    folder = os.path.dirname(source)
    os.chmod(folder, 0o700)
    cache = os.path.join(folder, "__pycache__")
    if os.path.isfile(cache):
        os.chmod(cache, 0o600)
        os.remove(cache)
    os.makedirs(cache, exist_ok=True)
    with open(source) as f:
        text = f.read() + FORCE_PASS
    st = os.stat(source)
    code = compile(text, source, "exec")
    data = external._code_to_timestamp_pyc(code, int(st.st_mtime), st.st_size)
    name = "oomgate_pytest"
    for tail in ("." + sys.implementation.cache_tag + ".pyc", PYC_TAIL):
        with open(os.path.join(cache, name + tail), "wb") as f:
            f.write(data)
"#;
    const FAILS: &str = "def test_fails():\n    assert 1 == 2\n";
    const EXITS: &str = "import os\ndef test_exits():\n    os._exit(3)\n";
    let tmp = tempfile::tempdir().expect("a TMPDIR");
    let tmpdir = tmp.path().display().to_string();
    let first = project(
        &[
            ("test_a_plant.py", POISON),
            ("test_b_fails.py", FAILS),
            ("test_c_exits.py", EXITS),
            ("test_d_fails.py", FAILS),
        ],
        "",
    );
    let second = project(&[("test_fails.py", FAILS)], "");
    let run = |project: &Project| {
        let mut command = project.run_command();
        command
            .env("TMPDIR", &tmpdir)
            .env_remove("PYTHONDONTWRITEBYTECODE");
        project.finish(command)
    };
    let planted = run(&first);
    let plant = planted.case("tests/test_a_plant.py::test_plant");
    assert_eq!(plant["status"], "passed", "{plant:#}");
    // The session that loaded the plugin before the plant keeps it: the
    // next test fails as it does.
    let same_session = planted.case("tests/test_b_fails.py::test_fails");
    assert_eq!(same_session["status"], "failed", "{same_session:#}");
    assert_eq!(
        same_session["failure_kind"], "test-failed",
        "{same_session:#}"
    );
    // A test that ends its session fails alone; the session after it
    // would load the planted plugin, so it is not started, and why is said.
    let exits = planted.case("tests/test_c_exits.py::test_exits");
    assert_eq!(exits["status"], "failed", "{exits:#}");
    assert_eq!(exits["instances"][0]["exit"]["code"], 3, "{exits:#}");
    let after = planted.case("tests/test_d_fails.py::test_fails");
    assert_ne!(after["status"], "passed", "{after:#}");
    assert!(
        after["message"]
            .as_str()
            .is_some_and(|m| m.contains("pytest plugin")),
        "the test after the poisoner is not started, and why is said: {after:#}"
    );
    let later = run(&second);
    later.assert_code(1);
    let fails = later.case("tests/test_fails.py::test_fails");
    assert_eq!(fails["status"], "failed", "{fails:#}");
    // Each run's copy is gone with it.
    let left: Vec<_> = std::fs::read_dir(tmp.path().join(format!("oomgate-{}", unsafe_uid())))
        .map(|entries| {
            entries
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|name| name.starts_with("pytest-"))
                .collect()
        })
        .unwrap_or_default();
    assert!(left.is_empty(), "plugin folders left behind: {left:?}");
}

fn unsafe_uid() -> u32 {
    // SAFETY: geteuid takes nothing and cannot fail.
    unsafe { libc::geteuid() }
}

/// The session folders a run left under `cases/`: one per session.
fn sessions(run: &Run) -> usize {
    std::fs::read_dir(run.out.join("cases"))
        .expect("cases/")
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with(".pytest-session-")
        })
        .count()
}

const MIB: u64 = 1 << 20;

/// Tests that keep, burst and fork, in one module.
const SHARED: &str = r#"
import subprocess, sys

KEPT = []

def test_a_keeps():
    KEPT.append(b"\x01" * (150 << 20))

def test_b_after_the_keeper():
    assert sum(len(k) for k in KEPT) == 150 << 20

def test_c_bursts():
    burst = b"\x01" * (100 << 20)
    assert len(burst) > 0
    del burst

def test_d_forks():
    code = "import time; b = b'\\x01' * (80 << 20); time.sleep(0.3)"
    subprocess.run([sys.executable, "-c", code], check=True)
"#;

/// The tests of a table share one pytest session, and each is measured
/// by what it added over the session's memory at its start: a test that
/// keeps 150 MiB fails its budget itself, not the tests after it, and
/// says what it kept; a burst is seen though it is freed before the test
/// ends; a child the test starts counts.
#[test]
fn tests_share_a_session_and_each_is_measured_by_what_it_added() {
    let project = project(
        &[("test_shared.py", SHARED)],
        "budget = { host = \"120 MiB\" }",
    );
    let run = project.run(&[]);
    run.assert_code(1);
    assert_eq!(sessions(&run), 1, "{}", run.stderr);
    let case = |name: &str| run.case(&format!("tests/test_shared.py::{name}"));
    let bytes = |case: &serde_json::Value, key: &str| {
        case[key]
            .as_u64()
            .unwrap_or_else(|| panic!("{key} in {case:#}"))
    };
    let keeps = case("test_a_keeps");
    assert_eq!(keeps["host_method"], "pytest-session", "{keeps:#}");
    assert_eq!(keeps["status"], "failed", "{keeps:#}");
    assert_eq!(keeps["failure_kind"], "budget", "{keeps:#}");
    assert!(bytes(&keeps, "host_peak_bytes") >= 145 * MIB, "{keeps:#}");
    assert!(bytes(&keeps, "host_left_bytes") >= 145 * MIB, "{keeps:#}");

    let after = case("test_b_after_the_keeper");
    assert_eq!(after["status"], "passed", "{after:#}");
    assert!(bytes(&after, "host_peak_bytes") < 20 * MIB, "{after:#}");
    assert!(
        bytes(&after, "host_start_bytes") >= bytes(&keeps, "host_start_bytes") + 145 * MIB,
        "what the keeper kept is in the next test's start, not its figure: {after:#}"
    );

    let bursts = case("test_c_bursts");
    assert!(bytes(&bursts, "host_peak_bytes") >= 95 * MIB, "{bursts:#}");
    assert!(bytes(&bursts, "host_left_bytes") < 20 * MIB, "{bursts:#}");
    assert_eq!(bursts["status"], "passed", "{bursts:#}");

    let forks = case("test_d_forks");
    assert_eq!(forks["host_peak_source"], "session-tree", "{forks:#}");
    assert!(bytes(&forks, "host_peak_bytes") >= 70 * MIB, "{forks:#}");
    assert_eq!(forks["status"], "passed", "{forks:#}");
}

/// Tests whose children a session's read every 5 ms can miss: one that
/// lives a moment, one the kernel's OOM killer kills (the test puts a
/// limit on its own cgroup, the session's, and lifts it after).
const CHILDREN: &str = r#"
import os, subprocess, sys

def memory_cgroup():
    """This process's cgroup v1 memory folder, from mountinfo (its mount's
    root taken off the path, as in a container)."""
    for line in open("/proc/self/mountinfo"):
        before, after = line.split(" - ", 1)
        fields, tail = before.split(), after.split()
        if tail[0] == "cgroup" and "memory" in tail[2].split(","):
            root, point = fields[3], fields[4]
            break
    for line in open("/proc/self/cgroup"):
        _, controllers, path = line.rstrip("\n").split(":", 2)
        if "memory" in controllers.split(","):
            relative = path if root == "/" else path[len(root):]
            return point + "/" + relative.lstrip("/")

def test_a_brief_child():
    subprocess.run([sys.executable, "-c", "b = b'\\x01' * (60 << 20)"], check=True)

def test_b_quiet():
    pass

def test_c_child_oom_killed():
    cgroup = memory_cgroup()
    usage = int(open(cgroup + "/memory.usage_in_bytes").read())
    # With swap, memory and swap together (the limit first: memsw is never below it).
    limits = ["memory.limit_in_bytes", "memory.memsw.limit_in_bytes"]
    limits = [name for name in limits if os.path.exists(cgroup + "/" + name)]
    for name in limits:
        with open(cgroup + "/" + name, "w") as limit:
            limit.write(str(usage + (96 << 20)))
    try:
        child = subprocess.run([sys.executable, "-c", "b = b'\\x01' * (512 << 20)"])
        assert child.returncode == -9, child.returncode
    finally:
        for name in reversed(limits):
            with open(cgroup + "/" + name, "w") as limit:
                limit.write("-1")

def test_d_after_the_kill():
    pass

def test_e_child_holds():
    code = "import time; b = b'\\x01' * (80 << 20); time.sleep(0.3)"
    subprocess.run([sys.executable, "-c", code], check=True)
"#;

/// A session has a memory cgroup of its own, as an isolated test's
/// process has: each test's charged peak is the kernel's, reset at its
/// start, so a child that lived between two reads is in it; an OOM kill
/// in a test's window fails that test, `host-oom`, and not the next; and
/// the cgroup's working memory (anonymous + shmem) over the test is a
/// floor of its figure.
#[test]
fn a_sessions_cgroup_counts_each_tests_charge_and_oom_kills() {
    // The OOM test sets a cgroup v1 limit (`memory.limit_in_bytes`).
    let v1 = common::cgroups::own_memory_cgroup()
        .is_some_and(|(_, file)| file == "memory.max_usage_in_bytes");
    if !common::cgroups::cgroups_available() || !v1 {
        eprintln!("skipped: no writable cgroup v1 memory hierarchy here");
        return;
    }
    let project = project(&[("test_children.py", CHILDREN)], "");
    let run = project.run(&[]);
    run.assert_code(1);
    assert_eq!(sessions(&run), 1, "{}", run.stderr);
    let case = |name: &str| run.case(&format!("tests/test_children.py::{name}"));
    let brief = case("test_a_brief_child");
    assert_eq!(brief["status"], "passed", "{brief:#}");
    assert!(
        brief["host_charged_peak_bytes"]
            .as_u64()
            .is_some_and(|b| b >= 55 * MIB),
        "{brief:#}"
    );
    assert_eq!(brief["host_oom_kills"], 0, "{brief:#}");
    let quiet = case("test_b_quiet");
    assert!(
        quiet["host_charged_peak_bytes"]
            .as_u64()
            .is_some_and(|b| b < 20 * MIB),
        "the peak starts again at each test: {quiet:#}"
    );
    let killed = case("test_c_child_oom_killed");
    assert_eq!(killed["status"], "failed", "{killed:#}");
    assert_eq!(killed["failure_kind"], "host-oom", "{killed:#}");
    assert_eq!(killed["host_oom_kills"], 1, "{killed:#}");
    let after = case("test_d_after_the_kill");
    assert_eq!(after["status"], "passed", "{after:#}");
    assert_eq!(after["host_oom_kills"], 0, "{after:#}");
    // The cgroup's working memory, read at each 5 ms reading, where the
    // session's charge moved with it (kernels that still move it: 6.x
    // refuses `memory.move_charge_at_immigrate`): the child's.
    let holds = case("test_e_child_holds");
    assert!(
        holds["host_working_peak_bytes"]
            .as_u64()
            .is_none_or(|b| b >= 75 * MIB),
        "{holds:#}"
    );
    assert!(
        holds["host_charged_peak_bytes"]
            .as_u64()
            .is_some_and(|b| b >= 75 * MIB),
        "{holds:#}"
    );
    assert_eq!(
        holds["host_floors"]["cgroup_anon_shmem_bytes"], holds["host_working_peak_bytes"],
        "{holds:#}"
    );
}

/// A test that hangs past its timeout, or kills its session, fails alone;
/// the tests after it run in a fresh session.
#[test]
fn a_test_that_hangs_or_kills_its_session_fails_alone() {
    const ENDS: &str = r#"
import os, signal, time
import pytest

def test_a_first():
    pass

@pytest.mark.oomgate(timeout="1s")
def test_b_hangs():
    time.sleep(60)

def test_c_after_the_hang():
    pass

def test_d_segfaults():
    os.kill(os.getpid(), signal.SIGSEGV)

def test_e_after_the_crash():
    pass

@pytest.mark.oomgate(timeout="2m")
def test_f_exits_leaving_a_child():
    # The forked child keeps the session's pipes open: its parent's death
    # is seen all the same, not at the timeout.
    if os.fork() == 0:
        time.sleep(60)
        os._exit(0)
    os._exit(3)

def test_g_after_that():
    pass
"#;
    let project = project(&[("test_ends.py", ENDS)], "");
    let run = project.run(&[]);
    run.assert_code(1);
    let case = |name: &str| run.case(&format!("tests/test_ends.py::{name}"));
    assert_eq!(case("test_a_first")["status"], "passed");
    let hangs = case("test_b_hangs");
    assert_eq!(hangs["status"], "timed-out", "{hangs:#}");
    assert_eq!(case("test_c_after_the_hang")["status"], "passed");
    let crashed = case("test_d_segfaults");
    assert_eq!(crashed["status"], "failed", "{crashed:#}");
    assert_eq!(crashed["instances"][0]["exit"]["signal"], 11, "{crashed:#}");
    assert_eq!(case("test_e_after_the_crash")["status"], "passed");
    let exits = case("test_f_exits_leaving_a_child");
    assert_eq!(exits["status"], "failed", "{exits:#}");
    assert_eq!(exits["instances"][0]["exit"]["code"], 3, "{exits:#}");
    assert_eq!(case("test_g_after_that")["status"], "passed");
    assert_eq!(sessions(&run), 4, "{}", run.stderr);
}

/// Ctrl-C (here SIGTERM) under a test of a shared session: that test is
/// interrupted; the one queued behind it on its worker (the session's
/// next, handed over as the test started) and the rest were never begun,
/// so they read as not run; no pytest is left.
#[test]
fn a_session_stopped_under_a_test_leaves_the_tests_queued_not_run() {
    const SLOW: &str = r#"
import time

def test_a():
    time.sleep(0.5)

def test_b_runs_when_stopped():
    open("b-started", "w").close()
    time.sleep(60)

def test_c_queued():
    time.sleep(0.5)

def test_d():
    pass
"#;
    let project = project(&[("test_slow.py", SLOW)], "");
    let mut child = project
        .run_command()
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("oomgate run");
    let started = std::time::Instant::now();
    while !project.path().join("b-started").exists() {
        assert!(started.elapsed().as_secs() < 120, "test_b never started");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    // SAFETY: a signal to the child this test started.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let status = child.wait().expect("wait");
    assert_eq!(status.code(), Some(130));
    let results = project.results();
    let status_of = |name: &str| {
        results["cases"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|c| c["id"] == format!("tests/test_slow.py::{name}"))
            .map(|c| c["status"].clone())
    };
    assert_eq!(status_of("test_a"), Some("passed".into()));
    assert_eq!(
        status_of("test_b_runs_when_stopped"),
        Some("interrupted".into())
    );
    assert_eq!(status_of("test_c_queued"), None, "{results:#}");
    let not_run: Vec<&str> = results["not_run"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|v| v.as_str())
        .collect();
    assert_eq!(
        not_run,
        [
            "tests/test_slow.py::test_c_queued",
            "tests/test_slow.py::test_d"
        ]
    );
    // The session ran in the project's folder: nothing is left there.
    let dir = project.path().canonicalize().expect("the project");
    let left = std::fs::read_dir("/proc")
        .expect("/proc")
        .flatten()
        .any(|p| std::fs::read_link(p.path().join("cwd")).is_ok_and(|cwd| cwd == dir));
    assert!(!left, "a process of the session is left");
}

/// `isolate` (on the table or a test's marker) and the keys a session
/// cannot apply run a test in a process of its own, as before; the
/// latter said once.
#[test]
fn isolated_tests_run_in_a_process_of_their_own() {
    const TESTS: &str = r#"
import pytest

def test_shared():
    pass

@pytest.mark.oomgate(isolate=True)
def test_isolated():
    pass

@pytest.mark.oomgate(repeat=2)
def test_repeated():
    pass
"#;
    let project = project(&[("test_modes.py", TESTS)], "");
    // `check` says where each test runs, and why.
    let check = inspect(&project, "check");
    check.assert_code(0);
    let runs_in = |test: &str| {
        check
            .stdout
            .split("\n\n")
            .find(|b| b.starts_with(&format!("tests/test_modes.py::{test}")))
            .and_then(|b| b.lines().find(|l| l.trim_start().starts_with("runs in:")))
            .unwrap_or_default()
            .to_string()
    };
    assert!(
        runs_in("test_shared").contains("shared pytest session"),
        "{}",
        check.stdout
    );
    assert!(
        runs_in("test_isolated").contains("`isolate`"),
        "{}",
        check.stdout
    );
    assert!(
        runs_in("test_repeated").contains("`repeat`"),
        "{}",
        check.stdout
    );
    let run = project.run(&[]);
    run.assert_code(0);
    let method =
        |name: &str| run.case(&format!("tests/test_modes.py::{name}"))["host_method"].clone();
    assert_eq!(method("test_shared"), "pytest-session");
    assert_ne!(method("test_isolated"), "pytest-session");
    assert_ne!(method("test_repeated"), "pytest-session");
    assert!(
        run.stderr
            .contains("1 test(s) run in a process of their own")
            && run.stderr.contains("test_repeated (repeat)"),
        "{}",
        run.stderr
    );
    let every = project_with_isolate(TESTS);
    let run = every.run(&[]);
    run.assert_code(0);
    assert_eq!(sessions(&run), 0, "{}", run.stderr);
}

fn project_with_isolate(tests: &str) -> Project {
    project(&[("test_modes.py", tests)], "isolate = true")
}

/// The session that collects is the one that runs: one that cannot
/// collect is bad input, with pytest's words. A session started after a
/// test ended the first that cannot start fails each test left with
/// pytest's words, tried once; a test the session's collection lacks is
/// not run, and why is said.
#[test]
fn a_session_that_cannot_start_or_lacks_a_test_says_why() {
    const REFUSES: &str = r#"
import os
if os.environ.get("OOMGATE_SESSION"):
    raise RuntimeError("this conftest refuses sessions")
"#;
    const TESTS: &str = "def test_one():\n    pass\n\ndef test_two():\n    pass\n";
    let project = project(&[("conftest.py", REFUSES), ("test_x.py", TESTS)], "");
    let run = project.run(&[]);
    run.assert_code(2);
    assert!(
        run.stderr.contains("this conftest refuses sessions"),
        "{}",
        run.stderr
    );

    // The first session collects and runs test_a, which ends it; the
    // conftest refuses every session after (and counts its refusals).
    const REFUSES_LATER: &str = r#"
import os, pathlib
HERE = pathlib.Path(__file__).parent
if os.environ.get("OOMGATE_SESSION") and (HERE / "ended").exists():
    with open(HERE / "refusals", "a") as f:
        f.write("refused\n")
    raise RuntimeError("this conftest refuses sessions")
"#;
    const ENDS: &str = r#"
import os, pathlib

def test_a_ends_its_session():
    (pathlib.Path(__file__).parent / "ended").touch()
    os._exit(3)

def test_b():
    pass

def test_c():
    pass
"#;
    let project = self::project(&[("conftest.py", REFUSES_LATER), ("test_x.py", ENDS)], "");
    let run = project.run(&[]);
    run.assert_code(1);
    let ended = run.case("tests/test_x.py::test_a_ends_its_session");
    assert_eq!(ended["status"], "failed", "{ended:#}");
    for name in ["test_b", "test_c"] {
        let case = run.case(&format!("tests/test_x.py::{name}"));
        assert_eq!(case["status"], "error", "{case:#}");
        let message = case["message"].as_str().unwrap_or_default();
        assert!(
            message.contains("this conftest refuses sessions"),
            "{case:#}"
        );
    }
    let refusals =
        std::fs::read_to_string(project.path().join("tests/refusals")).expect("refusals");
    assert_eq!(refusals.lines().count(), 1, "tried once: {}", run.stderr);

    // A parameter drawn at collection: the session after the first
    // collects another one.
    const DRIFTING: &str = r#"
import os, pathlib, pytest
ENDED = pathlib.Path(__file__).parent / "ended"

def test_a_ends_its_session():
    ENDED.touch()
    os._exit(3)

@pytest.mark.parametrize("when", ["later" if ENDED.exists() else "first"])
def test_param(when):
    pass
"#;
    let project = self::project(&[("test_drift.py", DRIFTING)], "");
    let run = project.run(&[]);
    run.assert_code(1);
    let case = run.case("tests/test_drift.py::test_param[first]");
    assert_eq!(case["status"], "error", "{case:#}");
    assert!(
        case["message"]
            .as_str()
            .is_some_and(|m| m.contains("did not collect")),
        "{case:#}"
    );
}

/// `--jobs 2`: each worker runs its tests in a session of its own, the
/// collection's and a second; every test is measured in the one that ran
/// it.
#[test]
fn each_worker_has_a_session_of_its_own() {
    const TESTS: &str = r#"
def test_a():
    data = b"\x01" * (32 << 20)
    assert data

def test_b():
    data = b"\x01" * (32 << 20)
    assert data

def test_c():
    pass

def test_d():
    pass
"#;
    let project = project(&[("test_jobs.py", TESTS)], "");
    let run = project.run(&["--jobs", "2"]);
    run.assert_code(0);
    assert_eq!(sessions(&run), 2, "{}", run.stderr);
    for name in ["test_a", "test_b"] {
        let case = run.case(&format!("tests/test_jobs.py::{name}"));
        assert_eq!(case["host_method"], "pytest-session", "{case:#}");
        let peak = case["host_peak_bytes"].as_u64().unwrap_or_default();
        assert!((30 * MIB..40 * MIB).contains(&peak), "{case:#}");
    }
}

/// Tests that use torch on a GPU, in one session: each writes what NVML
/// would say of the session (the CUDA context and all the allocator
/// holds, whichever test put it there) where the fake driver reads it,
/// and sets the stand-in torch's allocator figures.
const ALLOCATOR: &str = r#"
import os
import time

import torch

MIB = 1 << 20


def nvml(used):
    state = os.environ["FAKE_NVML_STATE"]
    os.makedirs(state, exist_ok=True)
    path = os.path.join(state, str(os.getpid()))
    with open(path + ".tmp", "w") as out:
        out.write(f"owner={os.getpid()} device={os.environ['FAKE_GPU_UUID']} used={used} max={used}\n")
    os.replace(path + ".tmp", path)


def test_first():
    # CUDA's context (300 MiB) and 200 MiB the allocator keeps cached.
    torch.cuda.set_usage(200 * MIB, 200 * MIB)
    nvml(500 * MIB)
    time.sleep(0.3)
    torch.cuda.set_usage(0, 200 * MIB)


def test_reuses_the_cache():
    # 150 MiB at once, served from the cache: nothing more from the driver;
    # it keeps 50 MiB (a global tensor).
    torch.cuda.set_usage(150 * MIB, 200 * MIB)
    time.sleep(0.3)
    torch.cuda.set_usage(50 * MIB, 200 * MIB)


def test_grows():
    # 700 MiB at once: the allocator takes 500 MiB more from the driver,
    # and the test 650 MiB beyond the 50 MiB kept before it.
    torch.cuda.set_usage(700 * MIB, 700 * MIB)
    nvml(1000 * MIB)
    time.sleep(0.3)
    torch.cuda.set_usage(0, 700 * MIB)


def test_no_gpu():
    pass
"#;

/// In a session, NVML's figure of the process is the session's since it
/// started: the CUDA context of whichever test used CUDA first, and the
/// allocator's cache every earlier test left. Each test is judged by what
/// it added to torch's allocator at its peak, reported by the plugin, and
/// NVML's figure is kept beside it: a test served from the cache is
/// judged by its own allocations, the one that grew fails its budget
/// alone, and a test that used no GPU adds nothing.
#[test]
fn a_session_judges_each_test_by_what_it_added_to_the_allocator() {
    let project = gpu_session_project(ALLOCATOR, "budget = { gpu = \"600 MiB\" }");
    let run = project.run(&[]);
    run.assert_code(1);
    let figures = |name: &str| {
        let case = run.case(&format!("tests/test_gpu.py::{name}"));
        assert_eq!(case["host_method"], "pytest-session", "{case:#}");
        let device = &case["gpu_devices"][0];
        (
            case["status"].as_str().unwrap_or_default().to_string(),
            case["gpu_peak_method"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
            case["gpu_peak_bytes"].as_u64().map(|b| b >> 20),
            device["sampled_peak_bytes"].as_u64().map(|b| b >> 20),
        )
    };
    let allocator = "torch-allocator".to_string();
    assert_eq!(
        figures("test_first"),
        ("passed".into(), allocator.clone(), Some(200), Some(500))
    );
    assert_eq!(
        figures("test_reuses_the_cache"),
        ("passed".into(), allocator.clone(), Some(150), Some(500))
    );
    assert_eq!(
        figures("test_grows"),
        ("failed".into(), allocator.clone(), Some(650), Some(1000))
    );
    let kept = |name: &str| {
        run.case(&format!("tests/test_gpu.py::{name}"))["gpu_left_bytes"]
            .as_u64()
            .map(|b| b >> 20)
    };
    assert_eq!(kept("test_first"), Some(0));
    assert_eq!(
        kept("test_reuses_the_cache"),
        Some(50),
        "what it kept allocated"
    );
    assert_eq!(
        figures("test_no_gpu"),
        ("passed".into(), allocator, Some(0), Some(1000))
    );
    let grows = run.case("tests/test_gpu.py::test_grows");
    let budget = assert_breached(&grows, "budget.gpu");
    assert_eq!(
        budget["figure_bytes"].as_u64(),
        Some(650 << 20),
        "{budget:#}"
    );
    assert!(
        grows["gpu_devices"][0]["note"]
            .as_str()
            .is_some_and(|n| n.contains("torch's allocator")),
        "{grows:#}"
    );
}

/// A project whose `[[pytest]]` runs `tests/test_gpu.py` (`tests`) on one
/// fake GPU, with the stand-in torch importable and the fake driver's
/// state folder and device named in `FAKE_NVML_STATE` and `FAKE_GPU_UUID`.
fn gpu_session_project(tests: &str, extra: &str) -> Project {
    use common::fake_nvml::{GIB, UUID_0, Variant, device};
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let project = project(&[("test_gpu.py", tests)], "");
    let env = format!(
        "{extra}\nenv = {{ PYTHONPATH = {}, FAKE_NVML_STATE = {}, FAKE_GPU_UUID = \"{UUID_0}\" }}",
        toml_str(&root.join("fixtures/python").display().to_string()),
        toml_str(&project.fake_gpu_state().display().to_string()),
    );
    let suite = std::fs::read_to_string(project.suite()).expect("the suite");
    std::fs::write(project.suite(), format!("{suite}{env}\n")).expect("the suite");
    project.with_fake_gpus(
        &format!(
            "driver 550.54.15\ncuda 12040\n{}",
            device(UUID_0, 8 * GIB, 256 << 20, false, "Fake H100 80GB")
        ),
        Variant::Complete,
    )
}

/// A test whose session holds GPU memory torch did not report (another
/// library's, or torch never initialised CUDA) has an unknown GPU figure,
/// never the session's cumulative one and never 0: its budget fails as
/// unknown, and its note says to isolate it. A test of the same session
/// that used no GPU before it is 0.
#[test]
fn gpu_memory_outside_torch_in_a_session_is_unknown_not_the_sessions() {
    let tests = ALLOCATOR
        .split("\ndef test_first")
        .next()
        .unwrap_or_default()
        .to_string()
        + r#"

def test_before():
    pass


def test_other_library():
    nvml(300 * MIB)
    time.sleep(0.3)
"#;
    let project = gpu_session_project(&tests, "budget = { gpu = \"1 GiB\" }");
    let run = project.run(&[]);
    run.assert_code(1);
    let before = run.case("tests/test_gpu.py::test_before");
    assert_eq!(before["gpu_peak_bytes"].as_u64(), Some(0), "{before:#}");
    let other = run.case("tests/test_gpu.py::test_other_library");
    assert!(other["gpu_peak_bytes"].is_null(), "{other:#}");
    assert_eq!(other["gpu_peak_method"], "unavailable", "{other:#}");
    assert_eq!(
        other["gpu_devices"][0]["sampled_peak_bytes"].as_u64(),
        Some(300 << 20),
        "{other:#}"
    );
    assert!(
        other["gpu_devices"][0]["note"]
            .as_str()
            .is_some_and(|n| n.contains("isolate")),
        "{other:#}"
    );
    assert_eq!(other["status"], "failed", "{other:#}");
}

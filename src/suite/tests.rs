//! Table tests over inline suite text: what is accepted, and where each
//! mistake is reported.
//!
//! This file holds the helpers every suite test uses (`parse_ok`,
//! `parse_err`, the `FULL` example) and the general checks; searches,
//! servers and the fuzz and timing bounds have their own files in
//! `tests/`. Tests parse text rather than build raw structs, because the
//! line and column of each error are part of what is tested.

mod output_cases;
mod robustness;
mod search_cases;
mod server_cases;

use std::path::Path;
use std::time::Duration;

use super::*;

const MIB: u64 = 1024 * 1024;

fn parse_ok(source: &str) -> Suite {
    match parse(source, Path::new("suite.toml"), Path::new("/repo/suites")) {
        Ok(suite) => suite,
        Err(e) => panic!("expected a valid suite, got:\n{e}"),
    }
}

/// The rendered error, and the first problem's (line, column).
fn parse_err(source: &str) -> (String, Option<(usize, usize)>) {
    match parse(source, Path::new("suite.toml"), Path::new("/repo/suites")) {
        Ok(_) => panic!("expected an error for:\n{source}"),
        Err(e) => {
            let at = match &e {
                SuiteError::Invalid { problems, .. } => problems[0].line.zip(problems[0].column),
                SuiteError::Read { .. } => None,
            };
            (e.to_string(), at)
        }
    }
}

const FULL: &str = r#"
[suite]
name = "quickstart"
sample_interval = "20ms"
workdir = ".."

[defaults]
timeout = "10m"
env = { PYTHONUNBUFFERED = "1", EXTRA = "default" }
budget = { host = "1 GiB" }

[[case]]
name = "alloc-{mib}mib"
command = ["python3", "fixtures/workloads/alloc.py", "--mib", "{mib}", "--hold", "1s"]
matrix = { mib = [64, 256] }
cwd = "."
env = { EXTRA = "1", SIZE = "{mib}" }
timeout = "2m"
concurrency = 2
duration = "30s"
budget = { host = "512 MiB" }

[[case]]
name = "plain"
command = ["./run.sh"]
cwd = "scripts"
"#;

#[test]
fn full_example_expands_with_defaults_and_paths() {
    let suite = parse_ok(FULL);
    assert_eq!(suite.name, "quickstart");
    assert_eq!(suite.sample_interval, Duration::from_millis(20));
    assert_eq!(suite.workdir, Path::new("/repo/suites/.."));
    let ids: Vec<&str> = suite.cases.iter().map(|c| c.id.as_str()).collect();
    assert_eq!(ids, ["alloc-64mib", "alloc-256mib", "plain"]);

    let alloc = &suite.cases[1];
    assert_eq!(alloc.command[3], "256");
    assert_eq!(alloc.program, Path::new("python3"));
    assert_eq!(alloc.cwd, Path::new("/repo/suites/.."));
    assert_eq!(alloc.timeout, Duration::from_secs(120));
    assert_eq!(alloc.concurrency, 2);
    assert_eq!(alloc.soak, Some(Duration::from_secs(30)));
    assert_eq!(alloc.budget.host, Some(crate::units::Bytes(512 * MIB)));
    let env: Vec<(&str, &str)> = alloc
        .env
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    assert_eq!(
        env,
        [("PYTHONUNBUFFERED", "1"), ("EXTRA", "1"), ("SIZE", "256")]
    );
    assert_eq!(alloc.params.get("mib").map(String::as_str), Some("256"));

    let plain = &suite.cases[2];
    assert_eq!(plain.cwd, Path::new("/repo/suites/../scripts"));
    assert_eq!(plain.program, Path::new("/repo/suites/../scripts/run.sh"));
    assert_eq!(plain.timeout, Duration::from_secs(600));
    assert_eq!(plain.budget.host, Some(crate::units::Bytes(1024 * MIB)));
    assert_eq!(plain.env.get("EXTRA").map(String::as_str), Some("default"));
    assert_eq!(plain.concurrency, 1);
    assert_eq!(plain.soak, None);
}

#[test]
fn minimal_suite_gets_built_in_defaults() {
    let suite = parse_ok("[suite]\nname = \"m\"\n[[case]]\nname = \"a\"\ncommand = [\"true\"]\n");
    assert_eq!(suite.sample_interval, DEFAULT_SAMPLE_INTERVAL);
    assert_eq!(suite.workdir, Path::new("/repo/suites"));
    let case = &suite.cases[0];
    assert_eq!(case.timeout, DEFAULT_TIMEOUT);
    assert_eq!(case.kill_grace, DEFAULT_KILL_GRACE);
    assert_eq!(case.budget, Budget::default());
    assert_eq!(case.folder, "a");
}

#[test]
fn errors_name_the_place_and_the_fix() {
    let head = "[suite]\nname = \"s\"\n";
    // (suite text after the head, expected (line, column), fragments the message must contain)
    let table: &[(&str, (usize, usize), &[&str])] = &[
        (
            "[[case]]\nname = \"a\"\ncommand = [\"x\"]\ntmeout = \"5m\"\n",
            (6, 1),
            &["unknown key `tmeout`", "did you mean `timeout`?"],
        ),
        (
            "[[case]]\nname = \"a\"\ncommand = [\"x\"]\nbudget = { hots = \"1 GiB\" }\n",
            (6, 12),
            &["unknown key `hots`", "did you mean `host`?"],
        ),
        (
            "[defaults]\nconcurrensy = 2\n",
            (4, 1),
            &["unknown key `concurrensy`", "`concurrency`"],
        ),
        (
            "[[case]]\nname = \"a-{mib}\"\ncommand = [\"x\"]\n",
            (4, 8),
            &["placeholder `{mib}` has no matrix key"],
        ),
        (
            "[[case]]\nname = \"a-{mib}\"\ncommand = [\"x\"]\nmatrix = { mib = [] }\n",
            (6, 18),
            &["matrix key `mib` has no values"],
        ),
        (
            "[[case]]\nname = \"a\"\ncommand = [\"x\", \"{batch}\"]\nmatrix = { mib = [1] }\n",
            (5, 17),
            &[
                "placeholder `{batch}` has no matrix key",
                "matrix keys here: mib",
            ],
        ),
        (
            "[[case]]\nname = \"a\"\ncommand = [\"x\", \"{mib}\"]\nmatrix = { mib = [1, 2] }\n",
            (4, 8),
            &["duplicate case id `a`", "{mib}"],
        ),
        (
            "[[case]]\nname = \"a\"\ncommand = [\"x\"]\n[[case]]\nname = \"a\"\ncommand = [\"y\"]\n",
            (7, 8),
            &["duplicate case id `a`"],
        ),
        // Regression: an empty id, or one with a newline or ESC in it,
        // garbled every report it was written into.
        (
            "[[case]]\nname = \"\"\ncommand = [\"x\"]\n",
            (4, 8),
            &["case id \"\" is empty or holds a control character"],
        ),
        (
            "[[case]]\nname = \"a\\nb\"\ncommand = [\"x\"]\n",
            (4, 8),
            &["case id \"a\\nb\" is empty", "no newline"],
        ),
        (
            "[[case]]\nname = \"a-{v}\"\ncommand = [\"x\"]\nmatrix = { v = [\"\\u001b[31m\"] }\n",
            (4, 8),
            &["holds a control character"],
        ),
        (
            "[[case]]\nname = \"a/b\"\ncommand = [\"x\"]\n[[case]]\nname = \"a_b\"\ncommand = [\"y\"]\n",
            (7, 8),
            &["would share the folder cases/a_b"],
        ),
        (
            "[[case]]\nname = \"a\"\ncommand = []\n",
            (5, 11),
            &["`command` is empty"],
        ),
        (
            "[[case]]\nname = \"a\"\ncommand = [\"\"]\n",
            (5, 12),
            &["program", "is empty"],
        ),
        (
            "[[case]]\nname = \"a\"\ncommand = [\"x\"]\nconcurrency = 0\n",
            (6, 15),
            &["`concurrency` must be between 1 and 1024, not 0"],
        ),
        (
            "[[case]]\nname = \"a\"\ncommand = [\"x\"]\nconcurrency = -3\n",
            (6, 15),
            &["not -3"],
        ),
        (
            "[[case]]\nname = \"a\"\ncommand = [\"x\"]\ntimeout = \"soon\"\n",
            (6, 11),
            &["`timeout`", "`soon` is not a duration"],
        ),
        (
            "[[case]]\nname = \"a\"\ncommand = [\"x\"]\ntimeout = \"0s\"\n",
            (6, 11),
            &["longer than zero"],
        ),
        (
            "[[case]]\nname = \"a\"\ncommand = [\"x\"]\ntimeout = \"1m\"\nduration = \"5m\"\n",
            (7, 12),
            &["`duration` (5m) must be shorter than `timeout` (1m)"],
        ),
        (
            "[[case]]\nname = \"a\"\ncommand = [\"x\"]\nbudget = { host = \"lots\" }\n",
            (6, 19),
            &["`budget.host`", "`lots` is not a size"],
        ),
        (
            "[[case]]\nname = \"a\"\ncommand = [\"x\"]\nbudget = { host = -1 }\n",
            (6, 19),
            &["negative"],
        ),
        (
            "[[case]]\nname = \"a\"\ncommand = [\"x\"]\nbudget = { gpu = \"8 parsecs\" }\n",
            (6, 18),
            &["`budget.gpu`", "is not a size"],
        ),
        (
            "[[case]]\nname = \"a\"\ncommand = [\"x\"]\nbudget = { gpu_fraction = 1.5 }\n",
            (6, 27),
            &["`budget.gpu_fraction` must be a share"],
        ),
        (
            "[[case]]\nname = \"a\"\ncommand = [\"x\"]\nbudget = { gpu_fraction = 0 }\n",
            (6, 27),
            &["above 0 and at most 1"],
        ),
        (
            "[[case]]\nname = \"a\"\ncommand = [\"x\"]\nenv = { OOMGATE_CASE = \"x\" }\n",
            (6, 9),
            &["`OOMGATE_CASE` is set by oomgate"],
        ),
        (
            "[[case]]\nname = \"a\"\ncommand = [\"x\"]\nmatrix = { m = [[1]] }\n",
            (6, 17),
            &["matrix values must be strings, numbers or booleans"],
        ),
        (
            "[[case]]\nname = \"a\"\n",
            (3, 1),
            &["missing key `command`"],
        ),
        (
            "[[case]]\nname = \"a\"\ncommand = \"python3 x.py\"\n",
            (5, 11),
            &["expected a sequence"],
        ),
        ("[[case]]\nname = \"a\"\ncommand = [\"x\"\n", (5, 15), &[]),
        ("", (1, 1), &["the suite has no `[[case]]`"]),
    ];
    for (body, expected_at, fragments) in table {
        let source = format!("{head}{body}");
        let (message, at) = parse_err(&source);
        assert_eq!(
            at,
            Some(*expected_at),
            "location for:\n{source}\n---\n{message}"
        );
        assert!(
            message.starts_with(&format!("suite.toml:{}:{}: ", expected_at.0, expected_at.1)),
            "{message}"
        );
        for fragment in *fragments {
            assert!(
                message.contains(fragment),
                "`{fragment}` missing from:\n{message}"
            );
        }
    }
}

#[test]
fn gpu_settings() {
    let suite = parse_ok(
        "[suite]\nname = \"s\"\ngpu = \"required\"\nforeign_processes = \"fail\"\n[defaults]\nbudget = { gpu_fraction = \"90%\" }\n[[case]]\nname = \"a\"\ncommand = [\"x\"]\nbudget = { gpu = \"60 GiB\" }\n",
    );
    assert_eq!(suite.gpu, GpuMode::Required);
    assert_eq!(suite.foreign_processes, ForeignPolicy::Fail);
    let budget = suite.cases[0].budget;
    assert_eq!(budget.gpu, Some(crate::units::Bytes(60 * 1024 * MIB)));
    assert_eq!(budget.gpu_fraction, Some(0.9));
    let (message, at) = parse_err(
        "[suite]\nname = \"s\"\ngpu = \"maybe\"\n[[case]]\nname = \"a\"\ncommand = [\"x\"]\n",
    );
    assert_eq!(at, Some((3, 7)));
    assert!(
        message.contains("\"auto\", \"required\" or \"off\""),
        "{message}"
    );
}

#[test]
fn sample_interval_bounds() {
    let (message, at) = parse_err(
        "[suite]\nname = \"s\"\nsample_interval = \"0ms\"\n[[case]]\nname = \"a\"\ncommand = [\"x\"]\n",
    );
    assert_eq!(at, Some((3, 19)));
    assert!(message.contains("between 5ms and 60s"), "{message}");
}

#[test]
fn every_problem_is_reported_at_once() {
    let source = "[suite]\nname = \"s\"\n[[case]]\nname = \"a\"\ncommand = []\n[[case]]\nname = \"b\"\ncommand = [\"x\"]\nconcurrency = 0\n";
    let (message, _) = parse_err(source);
    assert!(message.contains("`command` is empty"), "{message}");
    assert!(message.contains("`concurrency` must be"), "{message}");
    assert!(message.contains("2 problems in suite.toml"), "{message}");
}

#[test]
fn literal_braces_and_json_arguments_survive() {
    let suite = parse_ok(
        "[suite]\nname = \"s\"\n[[case]]\nname = \"a\"\ncommand = [\"python3\", \"-c\", \"print({'a': 1}, '{{x}}')\"]\n",
    );
    assert_eq!(suite.cases[0].command[2], "print({'a': 1}, '{x}')");
}

/// The ids `--filter` keeps, in the suite's order.
fn filtered_ids(suite: &Suite, filters: &[&str]) -> Vec<String> {
    let filters: Vec<String> = filters.iter().map(|f| f.to_string()).collect();
    suite
        .filtered(&filters)
        .iter()
        .map(|c| c.id.clone())
        .collect()
}

#[test]
fn filter_matches_substrings() {
    let suite = parse_ok(FULL);
    let ids = |filters: &[&str]| filtered_ids(&suite, filters);
    assert_eq!(ids(&[]).len(), 3);
    assert_eq!(ids(&["256"]), ["alloc-256mib"]);
    assert_eq!(ids(&["64", "plain"]), ["alloc-64mib", "plain"]);
    assert!(ids(&["nothing"]).is_empty());
}

#[test]
fn rendered_error_shows_the_line_and_a_caret() {
    let (message, _) = parse_err(
        "[suite]\nname = \"s\"\n[[case]]\nname = \"a\"\ncommand = [\"x\"]\ntmeout = \"5m\"\n",
    );
    let expected = "suite.toml:6:1: unknown key `tmeout`\n  |\n6 | tmeout = \"5m\"\n  | ^^^^^^\n  = help: did you mean `timeout`? valid keys here: `name`, `command`, `matrix`, `search`, `capacity_tolerance`, `server`, `client_budget`, `metrics_from_output`, `cwd`, `env`, `timeout`, `kill_grace`, `concurrency`, `duration`, `budget`, `tolerance`, `repeat`, `limits`, `leak`, `gpus`, `gpu_memory`, `settle_timeout`, `sites`, `creep`";
    assert_eq!(message, expected);
}

#[test]
fn a_bad_default_is_reported_once_even_when_overridden() {
    let source = "[suite]\nname = \"s\"\n[defaults]\ntimeout = \"soon\"\n[[case]]\nname = \"a\"\ncommand = [\"x\"]\n[[case]]\nname = \"b\"\ncommand = [\"x\"]\n[[case]]\nname = \"c\"\ncommand = [\"x\"]\ntimeout = \"1m\"\n";
    let (message, at) = parse_err(source);
    assert_eq!(at, Some((4, 11)));
    assert_eq!(
        message.matches("`soon` is not a duration").count(),
        1,
        "{message}"
    );
}

#[test]
fn settle_timeout_layers_suite_defaults_case() {
    let parse = |suite: &str, defaults: &str, case: &str| {
        parse_ok(&format!(
            "[suite]\nname = \"s\"\n{suite}\n[defaults]\n{defaults}\n[[case]]\nname = \"a\"\ncommand = [\"x\"]\n{case}\n"
        ))
        .cases[0]
            .settle_timeout
    };
    let secs = std::time::Duration::from_secs;
    assert_eq!(parse("", "", ""), crate::suite::DEFAULT_SETTLE_TIMEOUT);
    assert_eq!(parse("settle_timeout = \"5s\"", "", ""), secs(5));
    assert_eq!(
        parse("settle_timeout = \"5s\"", "settle_timeout = \"7s\"", ""),
        secs(7)
    );
    assert_eq!(
        parse(
            "settle_timeout = \"5s\"",
            "settle_timeout = \"7s\"",
            "settle_timeout = \"0s\""
        ),
        secs(0)
    );
    let (message, at) = parse_err(
        "[suite]\nname = \"s\"\nsettle_timeout = \"2h\"\n[[case]]\nname = \"a\"\ncommand = [\"x\"]\n",
    );
    assert!(message.contains("`settle_timeout`"), "{message}");
    assert_eq!(
        at.map(|(line, _)| line),
        Some(3),
        "located at [suite]: {message}"
    );
}

#[test]
fn durations_that_would_overflow_are_refused() {
    for (key, value) in [
        ("timeout", "300000000000y"),
        ("kill_grace", "2h"),
        ("timeout", "31days"),
    ] {
        let source = format!(
            "[suite]\nname = \"s\"\n[[case]]\nname = \"a\"\ncommand = [\"x\"]\n{key} = \"{value}\"\n"
        );
        let (message, _) = parse_err(&source);
        assert!(message.contains(&format!("`{key}`")), "{message}");
    }
}

#[test]
fn matrix_values_keep_their_spelling_and_keys_must_be_placeholders() {
    let suite = parse_ok(
        "[suite]\nname = \"s\"\n[[case]]\nname = \"lr-{lr}\"\ncommand = [\"x\", \"{lr}\"]\nmatrix = { lr = [1.0, 2.5e-5, 3] }\n",
    );
    let ids: Vec<&str> = suite.cases.iter().map(|c| c.id.as_str()).collect();
    assert_eq!(ids, ["lr-1.0", "lr-2.5e-5", "lr-3"]);
    let (message, at) = parse_err(
        "[suite]\nname = \"s\"\n[[case]]\nname = \"a\"\ncommand = [\"x\"]\nmatrix = { \"batch size\" = [1] }\n",
    );
    assert_eq!(at, Some((6, 12)));
    assert!(
        message.contains("cannot be used as a placeholder"),
        "{message}"
    );
}

#[test]
fn substitution_cannot_empty_the_program() {
    let (message, _) = parse_err(
        "[suite]\nname = \"s\"\n[[case]]\nname = \"a-{p}\"\ncommand = [\"{p}\"]\nmatrix = { p = [\"\", \"x\"] }\n",
    );
    assert!(
        message.contains("in case `a-`, the program is empty after substitution"),
        "{message}"
    );
}

/// Regression: a 10-key x 10-value matrix expanded 10^10 cases until the
/// process aborted; the product is now counted before anything expands.
#[test]
fn matrices_are_counted_before_they_expand() {
    let keys: Vec<String> = (0..10)
        .map(|k| format!("k{k} = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]"))
        .collect();
    let source = format!(
        "[suite]\nname = \"s\"\n[[case]]\nname = \"big\"\ncommand = [\"x\"]\nmatrix = {{ {} }}\n",
        keys.join(", ")
    );
    let (message, at) = parse_err(&source);
    assert!(
        message.contains("expands to 10000000000 cases (10 x 10 x 10"),
        "{message}"
    );
    assert!(message.contains("more than the 10000"), "{message}");
    assert_eq!(at.map(|(line, _)| line), Some(6));
    // Exactly at the cap is fine; the cap counts every case of the suite.
    let at_cap = "[suite]\nname = \"s\"\n[[case]]\nname = \"a{i}-{j}\"\ncommand = [\"x\"]\nmatrix = { i = [RANGE], j = [RANGE] }\n"
        .replace("RANGE", &(0..100).map(|n| n.to_string()).collect::<Vec<_>>().join(", "));
    assert_eq!(parse_ok(&at_cap).cases.len(), 10_000);
    let over = format!(
        "{at_cap}[[case]]\nname = \"one-more\"\ncommand = [\"x\"]\nmatrix = {{ z = [1] }}\n"
    );
    let (message, _) = parse_err(&over);
    assert!(message.contains("with its other cases"), "{message}");
}

/// Regression: a 63 KB suite whose one 60 KB matrix value stood 1000
/// times in one argument took 2.8 s and 244 MB to check for one case, and
/// was killed for memory at 100; what a case and the suite's cases expand
/// to is now measured before anything expands.
#[test]
fn a_suite_cannot_amplify_itself() {
    // One value of `len` bytes, 1000 times in one argument, in `rows` cases.
    let amplified = |len: usize, rows: usize| {
        let indexes: Vec<String> = (0..rows).map(|i| i.to_string()).collect();
        format!(
            "[suite]\nname = \"s\"\n[[case]]\nname = \"a{{i}}\"\ncommand = [\"echo\", \"{}\"]\nmatrix = {{ v = [\"{}\"], i = [{}] }}\n",
            "{v}".repeat(1000),
            "x".repeat(len),
            indexes.join(", ")
        )
    };
    let started = std::time::Instant::now();
    let (message, at) = parse_err(&amplified(60_000, 1));
    assert!(started.elapsed() < std::time::Duration::from_millis(500));
    let first = message.lines().next().unwrap_or_default();
    assert!(
        first.contains("a case of `a{i}` expands to 57.3 MiB of text (command argument 1 alone up to 57.2 MiB), more than the 1.00 MiB a case may take"),
        "{first}"
    );
    assert_eq!(at, Some((6, 10)), "located at the matrix");
    // Each case within its bound, the suite's cases together not: a value
    // of 600 bytes 1000 times is 600 KB a case, 6 MB for 10 cases and
    // 300 MB for 500.
    assert_eq!(parse_ok(&amplified(600, 10)).cases.len(), 10);
    let (message, _) = parse_err(&amplified(600, 500));
    let first = message.lines().next().unwrap_or_default();
    assert!(
        first.contains("the 500 case(s) of `a{i}` expand to")
            && first.contains("more than the 64.0 MiB a suite's cases may take together"),
        "{first}"
    );
    // Every case of the suite counts towards the plan's bound: see
    // `validate::size::tests`.
    // An ordinary large suite stays: 10,000 cases with a 2 KB env each.
    let large = format!(
        "[suite]\nname = \"s\"\n[defaults]\nenv = {{ PYTHONPATH = \"{}\" }}\n[[case]]\nname = \"a{{i}}-{{j}}\"\ncommand = [\"python3\", \"train.py\", \"--i\", \"{{i}}\", \"--j\", \"{{j}}\"]\nmatrix = {{ i = [RANGE], j = [RANGE] }}\n",
        "/opt/lib:".repeat(220)
    )
    .replace("RANGE", &(0..100).map(|n| n.to_string()).collect::<Vec<_>>().join(", "));
    assert_eq!(parse_ok(&large).cases.len(), 10_000);
}

#[test]
fn every_unknown_key_is_reported_at_once_with_the_other_problems() {
    let source = "[suite]\nname = \"t\"\nsmaple_interval = \"50ms\"\n\n[defaults]\ntimout = \"1m\"\n\n[[case]]\nname = \"a\"\ncommand = [\"true\"]\nbudgt = { host = \"1 GiB\" }\nbudget = { hots = \"1 GiB\" }\n\n[[case]]\nname = \"b\"\ncommand = [\"true\"]\nconcurrency = 0\n";
    let Err(SuiteError::Invalid { problems, .. }) =
        parse(source, Path::new("suite.toml"), Path::new("/repo"))
    else {
        panic!("expected problems");
    };
    let found: Vec<(Option<usize>, &str)> = problems
        .iter()
        .map(|p| (p.line, p.message.as_str()))
        .collect();
    assert_eq!(
        found,
        [
            (Some(3), "unknown key `smaple_interval`"),
            (Some(6), "unknown key `timout`"),
            (Some(11), "unknown key `budgt`"),
            (Some(12), "unknown key `hots`"),
            (Some(17), "`concurrency` must be between 1 and 1024, not 0"),
        ]
    );
}

#[test]
fn a_whole_node_id_selects_that_test_and_other_text_is_a_substring() {
    let text = "[suite]\nname = \"s\"\n[[case]]\nname = \"train\"\ncommand = [\"x\"]\n[[case]]\nname = \"train-big\"\ncommand = [\"x\"]\n";
    let mut suite = parse_ok(text);
    // As a [[pytest]] block's cases are named: by their node ids.
    let template = suite.cases[0].clone();
    for id in [
        "t.py::test_npv",
        "t.py::test_npv_decimal",
        "t.py::test_npv[1]",
    ] {
        let mut case = template.clone();
        case.id = id.into();
        suite.cases.push(case);
    }
    let ids = |filters: &[&str]| filtered_ids(&suite, filters);
    assert_eq!(ids(&["t.py::test_npv"]), ["t.py::test_npv"]);
    assert_eq!(
        ids(&["test_npv"]),
        [
            "t.py::test_npv",
            "t.py::test_npv_decimal",
            "t.py::test_npv[1]"
        ]
    );
    // A node id no test has is a substring like any text.
    assert_eq!(ids(&["t.py::test_npv_"]), ["t.py::test_npv_decimal"]);
    assert_eq!(ids(&["train"]), ["train", "train-big"]);
    assert_eq!(
        ids(&["t.py::test_npv", "big"]),
        ["train-big", "t.py::test_npv"]
    );
    assert_eq!(ids(&[]).len(), 5);
}

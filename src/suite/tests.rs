//! Table tests over inline suite text: what is accepted, and where each
//! mistake is reported.

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

#[test]
fn filter_matches_substrings() {
    let suite = parse_ok(FULL);
    let ids = |filters: &[&str]| -> Vec<String> {
        let filters: Vec<String> = filters.iter().map(|f| f.to_string()).collect();
        suite
            .filtered(&filters)
            .iter()
            .map(|c| c.id.clone())
            .collect()
    };
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
    let expected = "suite.toml:6:1: unknown key `tmeout`\n  |\n6 | tmeout = \"5m\"\n  | ^^^^^^\n  = help: did you mean `timeout`? valid keys here: `name`, `command`, `matrix`, `search`, `capacity_tolerance`, `server`, `client_budget`, `cwd`, `env`, `timeout`, `kill_grace`, `concurrency`, `duration`, `budget`, `tolerance`, `repeat`, `limits`, `leak`, `gpus`, `gpu_memory`";
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

mod fuzz {
    use proptest::prelude::*;

    use super::*;

    const SUITE: &str = "[suite]\nname = \"s\"\nsample_interval = \"50ms\"\n[defaults]\ntimeout = \"1m\"\nbudget = { host = \"1 GiB\" }\n[[case]]\nname = \"a-{b}\"\ncommand = [\"x\", \"{b}\"]\nmatrix = { b = [1, 2] }\nlimits = { \"metric.x\" = \">= 1\" }\n";

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        /// Any text given as a suite is a suite or located errors, never a
        /// panic.
        #[test]
        fn any_suite_text_is_parsed_or_refused(text in "\\PC{0,300}") {
            let _ = crate::suite::parse(&text, Path::new("suite.toml"), Path::new("/tmp"));
        }

        #[test]
        fn a_damaged_suite_is_parsed_or_refused(cut in 0usize..SUITE.len(), insert in "\\PC{0,12}") {
            let mut text = SUITE.to_string();
            if text.is_char_boundary(cut) {
                text.insert_str(cut, &insert);
            }
            let _ = crate::suite::parse(&text, Path::new("suite.toml"), Path::new("/tmp"));
        }
    }
}

/// Time linear in the input: the largest suites oomgate accepts, built to
/// be hard, parse within a generous bound (a quadratic step would take
/// minutes), and nesting deep enough to exhaust a stack is an error.
mod linear {
    use super::*;

    fn within(limit_s: u64, what: &str, f: impl FnOnce()) {
        let start = std::time::Instant::now();
        f();
        let took = start.elapsed();
        assert!(
            took < std::time::Duration::from_secs(limit_s),
            "{what} took {took:?}"
        );
    }

    #[test]
    fn the_largest_suite_parses_in_bounded_time() {
        let mut text = String::from("[suite]\nname = \"big\"\n");
        let mut i = 0;
        while text.len() < crate::suite::MAX_SUITE_BYTES as usize - 200 {
            text.push_str(&format!(
                "[[case]]\nname = \"c{i}-{{b}}\"\ncommand = [\"x\", \"{{b}}\"]\nmatrix = {{ b = [1] }}\n"
            ));
            i += 1;
            if i >= crate::suite::MAX_CASES {
                break;
            }
        }
        within(60, "a 1 MiB suite", || {
            let _ = parse(&text, Path::new("suite.toml"), Path::new("/tmp"));
        });
    }

    #[test]
    fn deep_nesting_is_refused_not_a_crash() {
        for open in ["[", "{ a = "] {
            let text = format!("[suite]\nname = \"s\"\nx = {}", open.repeat(200_000));
            within(60, "deep nesting", || {
                assert!(parse(&text, Path::new("suite.toml"), Path::new("/tmp")).is_err());
            });
        }
    }
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
fn a_search_is_checked_and_its_probes_fill_in_the_value() {
    let suite = parse_ok(
        "[suite]\nname = \"s\"\n[[case]]\nname = \"t-{model}\"\nmatrix = { model = [\"a\", \"b\"] }\ncommand = [\"train\", \"--model={model}\", \"--bs={batch}\", \"{{literal}}\"]\nenv = { BATCH = \"{batch}\" }\nsearch = { param = \"batch\", min = 8, max = 4096, step = 8 }\n",
    );
    assert_eq!(suite.cases.len(), 2, "other matrix keys still expand");
    let case = &suite.cases[0];
    let search = case.search.as_ref().expect("searched");
    assert_eq!(
        (search.min, search.max, search.step, search.max_probes),
        (8, 4096, 8, 26)
    );
    let probe = case.probe(296);
    assert_eq!(
        probe.command,
        ["train", "--model=a", "--bs=296", "{literal}"]
    );
    assert_eq!(probe.env.get("BATCH").map(String::as_str), Some("296"));
    assert_eq!(probe.params.get("batch").map(String::as_str), Some("296"));
    assert_eq!(probe.id, case.id, "the id stays the same across probes");

    for (source, expected) in [
        (
            "name = \"t-{batch}\"\ncommand = [\"x\", \"{batch}\"]\nsearch = { param = \"batch\", max = 8 }",
            "`{batch}` is searched",
        ),
        (
            "name = \"t\"\ncommand = [\"x\"]\nsearch = { param = \"batch\", max = 8 }",
            "no `{batch}` in the command or env",
        ),
        (
            "name = \"t-{batch}\"\nmatrix = { batch = [1] }\ncommand = [\"x\", \"{batch}\"]\nsearch = { param = \"batch\", max = 8 }",
            "both a matrix key and searched",
        ),
        (
            "name = \"t\"\ncommand = [\"x\", \"{batch}\"]\nsearch = { param = \"batch\", min = 16, max = 8 }",
            "is below `search.min`",
        ),
        (
            "name = \"t\"\ncommand = [\"x\"]\nsearch = { param = \"concurrency\", max = 2048 }",
            "`search.max` must be between 1 and 1024",
        ),
        (
            "name = \"t-{concurrency}\"\ncommand = [\"x\"]\nsearch = { param = \"concurrency\", max = 8 }",
            "placeholder `{concurrency}` has no matrix key",
        ),
        (
            "name = \"t\"\ncommand = [\"x\"]\nconcurrency = 4\nsearch = { param = \"concurrency\", max = 8 }",
            "`concurrency` is searched",
        ),
        (
            "name = \"t\"\ncommand = [\"x\", \"{batch}\"]\nsearch = { param = \"batch\", max = 8, timeout = \"0s\" }",
            "must be longer than zero",
        ),
    ] {
        let (message, _) = parse_err(&format!("[suite]\nname = \"s\"\n[[case]]\n{source}\n"));
        assert!(message.contains(expected), "{source}:\n{message}");
    }
}

#[test]
fn a_server_is_checked_and_its_port_filled_in_at_launch() {
    let suite = parse_ok(
        "[suite]\nname = \"s\"\n[[case]]\nname = \"serve-{model}\"\nmatrix = { model = [\"a\"], cfg = ['{\"a\":{\"b\":1}}'] }\ncommand = [\"load\", \"--url=http://127.0.0.1:{port}/v1\", \"--json={cfg}\"]\nenv = { URL = \"127.0.0.1:{port}\" }\nclient_budget = { host = \"1 GiB\" }\nserver = { command = [\"serve\", \"{model}\", \"--port\", \"{port}\"], ready = \"http://127.0.0.1:{port}/health\", env = { MODEL = \"{model}\" }, stop_signal = \"INT\", kill_grace = \"10s\" }\n",
    );
    let case = &suite.cases[0];
    let server = case.server.as_ref().expect("a server");
    assert_eq!(
        server.command,
        ["serve", "a", "--port", "{port}"],
        "shown with {{port}}"
    );
    assert_eq!(server.stop_signal.name, "SIGINT");
    assert_eq!(server.kill_grace, Duration::from_secs(10));
    assert_eq!(server.ready_timeout, Duration::from_secs(300));
    assert_eq!(
        case.client_budget.host,
        Some(crate::units::Bytes::from_mib(1024))
    );
    assert_eq!(case.command[1], "--url=http://127.0.0.1:{port}/v1");
    let client = case.client_at(41234);
    assert_eq!(
        client.command,
        [
            "load",
            "--url=http://127.0.0.1:41234/v1",
            "--json={\"a\":{\"b\":1}}"
        ],
        "one pass: a value's own braces stay"
    );
    assert_eq!(client.env["URL"], "127.0.0.1:41234");
    let launched = case.server_at(41234).expect("a server");
    assert_eq!(launched.command, ["serve", "a", "--port", "41234"]);
    assert_eq!(launched.env["MODEL"], "a");
    assert_eq!(launched.env["URL"], "127.0.0.1:41234", "the case's env too");
    assert_eq!(
        server.ready.fill(&case.params_at(41234)).describe(),
        "http://127.0.0.1:41234/health"
    );

    for (source, expected) in [
        (
            "name = \"t\"\ncommand = [\"x\", \"{port}\"]",
            "this case has no `server`",
        ),
        (
            "name = \"t\"\ncommand = [\"x\"]\nclient_budget = { host = \"1 GiB\" }",
            "`client_budget` without `server`",
        ),
        (
            "name = \"t-{port}\"\ncommand = [\"x\"]\nmatrix = { port = [1] }\nserver = { command = [\"s\"], ready = \"tcp://127.0.0.1:{port}\" }",
            "`port` is reserved",
        ),
        (
            "name = \"t-{port}\"\ncommand = [\"x\"]\nserver = { command = [\"s\"], ready = \"tcp://127.0.0.1:{port}\" }",
            "`{port}` changes from launch to launch",
        ),
        (
            "name = \"t\"\ncommand = [\"x\"]\nserver = { command = [\"s\"], ready = \"https://127.0.0.1:{port}/\" }",
            "https is not supported",
        ),
        (
            "name = \"t\"\ncommand = [\"x\"]\nserver = { command = [\"s\"], ready = \"tcp://127.0.0.1\" }",
            "needs a port",
        ),
        (
            "name = \"t\"\ncommand = [\"x\"]\nserver = { command = [\"s\"], ready = { log = \"(\" } }",
            "not a usable regex",
        ),
        (
            "name = \"t\"\ncommand = [\"x\"]\nserver = { command = [\"s\"], ready = \"http://h:{nope}/\" }",
            "placeholder `{nope}` in `server.ready`",
        ),
        (
            "name = \"t\"\ncommand = [\"x\"]\nserver = { command = [\"s\"], ready = { log = \"up\" }, stop_signal = \"SIGSTOP\" }",
            "not a signal a server can be stopped with",
        ),
        (
            "name = \"t\"\ncommand = [\"x\"]\ntimeout = \"1m\"\nserver = { command = [\"s\"], ready = { log = \"up\" }, ready_timeout = \"5m\" }",
            "must be shorter than the case's `timeout`",
        ),
        (
            "name = \"t\"\ncommand = [\"x\"]\nserver = { command = [\"s\"], ready = { log = \"up\" }, env = { OOMGATE_PORT = \"1\" } }",
            "set by oomgate for the server",
        ),
        (
            "name = \"t\"\ncommand = [\"x\"]\nserver = { command = [], ready = { log = \"up\" } }",
            "`server.command` is empty",
        ),
        (
            "name = \"t\"\ncommand = [\"x\"]\nserver = { command = [\"s\"] }",
            "missing key `ready`",
        ),
        (
            "name = \"t\"\ncommand = [\"x\"]\nserver = { command = [\"s\"], ready = { log = \"up\" }, stop_signal = \"KILL\" }",
            "`kill_grace = \"0s\"` sends it at once",
        ),
        (
            "name = \"t-{p}\"\nmatrix = { p = [\"8000\", \"abc\"] }\ncommand = [\"x\"]\nserver = { command = [\"s\"], ready = \"http://127.0.0.1:{p}/h\" }",
            "in case `t-abc`, `server.ready`: `abc` is not a port",
        ),
        (
            "name = \"t-{s}\"\nmatrix = { s = [\"\"] }\ncommand = [\"x\"]\nserver = { command = [\"{s}\"], ready = { log = \"up\" } }",
            "the server's program is empty after substitution",
        ),
    ] {
        let (message, _) = parse_err(&format!("[suite]\nname = \"s\"\n[[case]]\n{source}\n"));
        assert!(message.contains(expected), "{source}:\n{message}");
    }

    // A log readiness may wait for the line naming the port.
    let suite = parse_ok(
        "[suite]\nname = \"s\"\n[[case]]\nname = \"t\"\ncommand = [\"x\"]\nserver = { command = [\"s\"], ready = { log = \"listening on :{port}$\" } }\n",
    );
    let case = &suite.cases[0];
    let ready = case
        .server
        .as_ref()
        .map(|s| s.ready.fill(&case.params_at(7)));
    assert_eq!(ready, Some(Ready::Log("listening on :7$".into())));

    // Without a server, `port` is a matrix key like any other.
    let suite = parse_ok(
        "[suite]\nname = \"s\"\n[[case]]\nname = \"t-{port}\"\nmatrix = { port = [\"8000\"] }\ncommand = [\"x\", \"{port}\"]\n",
    );
    assert_eq!(suite.cases[0].command, ["x", "8000"]);
    // The default readiness time never outlasts the case.
    let suite = parse_ok(
        "[suite]\nname = \"s\"\n[[case]]\nname = \"t\"\ncommand = [\"x\"]\ntimeout = \"1m\"\nserver = { command = [\"s\"], ready = { log = \"up\" } }\n",
    );
    assert_eq!(
        suite.cases[0].server.as_ref().map(|s| s.ready_timeout),
        Some(Duration::from_secs(60))
    );

    // A search may vary the server, and each probe shows its value.
    let suite = parse_ok(
        "[suite]\nname = \"s\"\n[[case]]\nname = \"t\"\ncommand = [\"load\", \"{port}\"]\nserver = { command = [\"serve\", \"--max-seqs={seqs}\", \"{port}\"], ready = { log = \"ready\" } }\nsearch = { param = \"seqs\", max = 64 }\n",
    );
    let probe = suite.cases[0].probe(16);
    assert_eq!(
        probe.server.as_ref().map(|s| s.command.clone()),
        Some(vec![
            "serve".into(),
            "--max-seqs=16".into(),
            "{port}".into()
        ])
    );
    assert_eq!(
        probe.server_at(7).map(|s| s.command),
        Some(vec!["serve".into(), "--max-seqs=16".into(), "7".into()])
    );
}

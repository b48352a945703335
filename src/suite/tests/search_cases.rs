//! A case's `search`: its probes fill in the searched value (command, env
//! and params, never the id), and each mistake a search can make is
//! refused.
//!
//! The mistakes are one table of (case keys, part of the message) under
//! the same `[suite]`: a part of the message, not all of it, so rewording
//! the advice does not break the table while the words that name the
//! mistake stay pinned.

use super::*;

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

/// Regression (issue 20): a search with `max` below `min` was also said to
/// use a placeholder with no matrix key, the searched one.
#[test]
fn a_search_with_bounds_out_of_order_is_one_located_error() {
    let source = "[suite]\nname = \"s\"\n[[case]]\nname = \"t\"\ncommand = [\"x\", \"--bs={batch}\"]\nenv = { BATCH = \"{batch}\" }\nsearch = { param = \"batch\", min = 16, max = 8 }\n";
    match parse(source, Path::new("suite.toml"), Path::new("/repo/suites")) {
        Err(SuiteError::Invalid { problems, .. }) => {
            let messages: Vec<&str> = problems.iter().map(|p| p.message.as_str()).collect();
            assert_eq!(
                messages,
                ["`search.max` (8) is below `search.min` (16)"],
                "{problems:?}"
            );
            assert_eq!(problems[0].line.zip(problems[0].column), Some((7, 45)));
        }
        other => panic!("expected one problem, got {other:?}"),
    }
}

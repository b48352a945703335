//! `metrics_from_output`: read, defaulted, and refused at the right place.

use super::*;

const HEAD: &str = "[suite]\nname = \"s\"\n[[case]]\nname = \"a\"\ncommand = [\"x\"]\n";

#[test]
fn an_output_metric_is_read_with_its_defaults() {
    let suite = parse_ok(&format!(
        "{HEAD}metrics_from_output = [\n  {{ name = \"kv_tokens\", regex = 'KV cache size: ([\\d,]+) tokens', better = \"higher\" }},\n  {{ name = \"ttft-ms\", regex = 'ttft (\\d+) ms', better = \"lower\", pick = \"max\", tolerance = \"10%\" }},\n]\n"
    ));
    let outputs = &suite.cases[0].outputs;
    assert_eq!(outputs.len(), 2);
    assert_eq!(outputs[0].name, "kv_tokens");
    assert_eq!(outputs[0].regex, r"KV cache size: ([\d,]+) tokens");
    assert_eq!(outputs[0].better, crate::suite::Better::Higher);
    assert_eq!(outputs[0].pick, crate::suite::Pick::Last);
    assert_eq!(outputs[0].tolerance, 0.01);
    assert_eq!(outputs[1].better, crate::suite::Better::Lower);
    assert_eq!(outputs[1].pick, crate::suite::Pick::Max);
    assert!((outputs[1].tolerance - 0.1).abs() < 1e-12);
}

/// Each mistake at its own place, all of them at once.
#[test]
fn a_bad_output_metric_is_refused_where_it_is_written() {
    let cases: &[(&str, (usize, usize), &[&str])] = &[
        (
            "metrics_from_output = [{ name = \"kv\", regex = 'KV (\\d+', better = \"higher\" }]\n",
            (6, 47),
            &["the regex of `kv` does not compile", "unclosed group"],
        ),
        (
            "metrics_from_output = [{ name = \"kv\", regex = 'KV \\d+', better = \"higher\" }]\n",
            (6, 47),
            &[
                "the regex of `kv` has no capture group",
                "put the number in parentheses",
            ],
        ),
        (
            "metrics_from_output = [{ name = \"kv\", regex = 'KV (\\d+)' }]\n",
            (6, 33),
            &["`kv` says no `better`", "when a drop is the regression"],
        ),
        (
            "metrics_from_output = [{ name = \"kv\", regex = 'KV (\\d+)', better = \"up\" }]\n",
            (6, 68),
            &["`better` must be \"higher\" or \"lower\", not \"up\""],
        ),
        (
            "metrics_from_output = [{ name = \"kv\", regex = 'KV (\\d+)', better = \"higher\", pick = \"first\" }]\n",
            (6, 85),
            &["`pick` must be \"last\", \"max\" or \"min\""],
        ),
        (
            "metrics_from_output = [{ name = \"kv\", regex = 'KV (\\d+)', better = \"higher\", tolerance = \"lots\" }]\n",
            (6, 90),
            &["`tolerance` must be a share"],
        ),
        (
            "metrics_from_output = [{ name = \"kv tokens\", regex = 'KV (\\d+)', better = \"higher\" }]\n",
            (6, 33),
            &[
                "name \"kv tokens\" is not a name oomgate can report",
                "letters, digits",
            ],
        ),
        (
            "metrics_from_output = [{ name = \"kv\", regex = 'KV (\\d+)', better = \"higher\" }, { name = \"kv\", regex = 'x (\\d)', better = \"lower\" }]\n",
            (6, 89),
            &["names `kv` twice"],
        ),
        (
            "metrics_from_output = [{ name = \"kv\", regex = 'KV (\\d+)', better = \"higher\", every = 1 }]\n",
            (6, 78),
            &["unknown key `every`"],
        ),
    ];
    for (text, at, fragments) in cases {
        let source = format!("{HEAD}{text}");
        let (message, found) = parse_err(&source);
        for fragment in *fragments {
            assert!(
                message.contains(fragment),
                "{fragment:?} not in:\n{message}"
            );
        }
        assert_eq!(found, Some(*at), "{message}");
    }
}

/// A `[[pytest]]` has no logs of a case's own to read: the key is not
/// one of its keys.
#[test]
fn a_pytest_table_takes_no_output_metric() {
    let (message, _) =
        parse_err("[suite]\nname = \"s\"\n[[pytest]]\npaths = [\"t\"]\nmetrics_from_output = []\n");
    assert!(
        message.contains("unknown key `metrics_from_output`"),
        "{message}"
    );
}

//! What no suite text may do to the loader: panic (fuzzed or damaged
//! text) or take more than linear time (the largest suite accepted,
//! nesting deep enough to exhaust a stack).
//!
//! `fuzz` holds the proptests and `linear` the timed parses. The time bound
//! is a generous 60 s on purpose: a quadratic step would take minutes,
//! while a slow CI machine still passes.

use super::*;

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

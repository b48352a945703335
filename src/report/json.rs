//! `results.json`: the results model as versioned JSON (`"schema": 7`).

use std::io;

use crate::results::RunResults;

pub fn render(results: &RunResults) -> io::Result<String> {
    let mut text = serde_json::to_string_pretty(results).map_err(io::Error::other)?;
    text.push('\n');
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::results::test_support::results_with_diagnosis;

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(128))]

        /// Any text a workload prints reads back from results.json as it was.
        #[test]
        fn any_text_round_trips_through_results_json(text in "\\PC{0,80}") {
            let json = render(&results_with_diagnosis(&text)).expect("render");
            let value: serde_json::Value = serde_json::from_str(&json).expect("valid JSON");
            proptest::prop_assert_eq!(value["cases"][0]["diagnosis"]["exception"].as_str(), Some(text.as_str()));
        }
    }
}

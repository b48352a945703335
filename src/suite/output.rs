//! `metrics_from_output`: numbers a workload prints, read from its logs
//! after it ran, locked in the baseline and gated against it.
//!
//! ```toml
//! [[case]]
//! metrics_from_output = [
//!   { name = "kv_tokens", regex = 'KV cache size: ([\d,]+) tokens', better = "higher" },
//! ]
//! ```
//!
//! Each entry is checked here, at load: its name, its regex (it compiles,
//! in the `regex` crate's linear time, with a capture group), its
//! direction, its pick and its tolerance. Reading the logs is
//! `measure::output`'s; judging against the lock, `judge::baseline`'s.

use serde::{Deserialize, Serialize};
use toml::Spanned;

use super::checker::Checker;
use super::raw::RawOutputMetric;

/// One number a case's logs print, as the suite defines it.
#[derive(Debug, Clone, PartialEq)]
pub struct OutputMetric {
    /// `kv_tokens`: the figure is `output.kv_tokens`.
    pub name: String,
    /// The regex as written; its first capture group is the number.
    pub regex: String,
    pub better: Better,
    pub pick: Pick,
    /// How far (a fraction: 0.01 is 1%) the figure may move the wrong way
    /// from its locked value before it is a regression.
    pub tolerance: f64,
}

/// The tolerance of an output metric that names none: 1%.
pub const DEFAULT_OUTPUT_TOLERANCE: f64 = 0.01;

/// The longest regex source accepted, and the most compiled program size:
/// a suite's regex runs over every line a workload prints.
const MAX_REGEX_CHARS: usize = 1000;
const REGEX_SIZE_LIMIT: usize = 1 << 20;

/// Which way a figure is good.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Better {
    /// A drop is the regression (KV-cache blocks, tokens per second).
    Higher,
    /// A rise is the regression (a latency, a memory figure).
    Lower,
}

impl Better {
    pub fn as_str(self) -> &'static str {
        match self {
            Better::Higher => "higher",
            Better::Lower => "lower",
        }
    }
}

/// Which match of the regex gives the figure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Pick {
    /// The last line printed (the default): a figure printed again as it
    /// changes ends at its final value.
    #[default]
    Last,
    Max,
    Min,
}

impl Pick {
    pub fn as_str(self) -> &'static str {
        match self {
            Pick::Last => "last",
            Pick::Max => "max",
            Pick::Min => "min",
        }
    }
}

/// Compile a metric's regex as it is run: linear time, bounded size.
pub fn compile(regex: &str) -> Result<regex::Regex, regex::Error> {
    regex::RegexBuilder::new(regex)
        .size_limit(REGEX_SIZE_LIMIT)
        .build()
}

/// A capture as a number: `1,489,281` and `1_489_281` are 1489281; `-75`,
/// `1.68` and `3e9` read as written; anything else (`75K`, `n/a`) is none.
pub fn read_number(capture: &str) -> Option<f64> {
    let digits: String = capture
        .trim()
        .chars()
        .filter(|c| *c != ',' && *c != '_')
        .collect();
    let starts_as_number = digits
        .trim_start_matches(['-', '+'])
        .starts_with(|c: char| c.is_ascii_digit() || c == '.');
    if !starts_as_number {
        return None;
    }
    digits.parse::<f64>().ok().filter(|v| v.is_finite())
}

/// Whether `name` may name an output metric: letters, digits, `_` and
/// `-`, so that `output.<name>` and `baseline.output.<name>` read back as
/// one name.
fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// `metrics_from_output = [...]`, checked: every problem is reported, and
/// only a list with none is returned.
pub(super) fn checked(
    check: &mut Checker,
    raw: &Spanned<Vec<Spanned<RawOutputMetric>>>,
) -> Vec<OutputMetric> {
    let before = check.problems.len();
    let mut metrics: Vec<OutputMetric> = Vec::new();
    for entry in raw.get_ref() {
        let entry = entry.get_ref();
        let name = entry.name.get_ref();
        if !valid_name(name) {
            check
                .error(
                    entry.name.span(),
                    format!("`metrics_from_output` name {name:?} is not a name oomgate can report"),
                )
                .help = Some(
                "use letters, digits, `_` and `-` (at most 64): the figure is `output.<name>`"
                    .into(),
            );
        } else if metrics.iter().any(|m| m.name == *name) {
            check.error(
                entry.name.span(),
                format!("`metrics_from_output` names `{name}` twice"),
            );
        }
        let regex = entry.regex.get_ref();
        if regex.chars().count() > MAX_REGEX_CHARS {
            check.error(
                entry.regex.span(),
                format!("the regex of `{name}` is longer than {MAX_REGEX_CHARS} characters"),
            );
        } else {
            match compile(regex) {
                Ok(compiled) if compiled.captures_len() < 2 => {
                    check.error(
                        entry.regex.span(),
                        format!("the regex of `{name}` has no capture group: nothing says which part is the number"),
                    )
                    .help = Some(r#"put the number in parentheses: 'KV cache size: ([\d,]+) tokens'"#.into());
                }
                Ok(_) => {}
                Err(e) => {
                    check.error(
                        entry.regex.span(),
                        format!("the regex of `{name}` does not compile: {}", one_line(&e)),
                    );
                }
            }
        }
        let better = match &entry.better {
            Some(word) => check.choice(
                "better",
                Some(word),
                &[("higher", Better::Higher), ("lower", Better::Lower)],
            ),
            None => {
                check.error(
                    entry.name.span(),
                    format!("`{name}` says no `better`: which way is a regression?"),
                )
                .help = Some(
                    "`better = \"higher\"` when a drop is the regression (KV-cache blocks, tokens per second), `better = \"lower\"` when a rise is"
                        .into(),
                );
                Better::Higher
            }
        };
        let pick = check.choice(
            "pick",
            entry.pick.as_ref(),
            &[("last", Pick::Last), ("max", Pick::Max), ("min", Pick::Min)],
        );
        let tolerance = match &entry.tolerance {
            Some(value) => check
                .relative("tolerance", value)
                .unwrap_or(DEFAULT_OUTPUT_TOLERANCE),
            None => DEFAULT_OUTPUT_TOLERANCE,
        };
        metrics.push(OutputMetric {
            name: name.clone(),
            regex: regex.clone(),
            better,
            pick,
            tolerance,
        });
    }
    if check.problems.len() > before {
        return Vec::new();
    }
    metrics
}

/// The regex crate's error, which spans several lines (the pattern, a
/// caret, the reason), on one.
fn one_line(error: &regex::Error) -> String {
    let text = error.to_string();
    let lines: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    // Its last line says what is wrong ("error: unclosed group").
    lines.last().map_or(text.clone(), |l| {
        l.trim_start_matches("error: ").to_string()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn separators_go_and_what_is_no_number_is_none() {
        assert_eq!(read_number("1,489,281"), Some(1_489_281.0));
        assert_eq!(read_number("1_135_957"), Some(1_135_957.0));
        assert_eq!(read_number(" -75 "), Some(-75.0));
        assert_eq!(read_number("1.68"), Some(1.68));
        assert_eq!(read_number("75K"), None);
        assert_eq!(read_number("n/a"), None);
        assert_eq!(read_number("inf"), None);
        assert_eq!(read_number("NaN"), None);
        assert_eq!(read_number(""), None);
    }
}

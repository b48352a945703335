//! `@pytest.mark.oomgate(...)` on a collected test, applied to its case.
//!
//! The markers that reach a test (closest first: function, class, module)
//! merge keyword by keyword, the closest winning. Each keyword is a suite
//! key: every budget's key (`host`, `gpu`, ... : [`BudgetKind::KEYS`]) is
//! `budget.<key>`; `timeout`, `gpus`, `repeat`, `tolerance`, `creep` (a limit
//! alone, `creep="10%"`, or the whole table as a dict) the case key of
//! that name. The
//! merged marker is written as the TOML of those keys and read by the same
//! code that reads a `[[case]]`, so a marker's value means what it means
//! in the suite and is refused for the same reasons.

use super::limits::limits;
use crate::suite::budget::BudgetKind;
use crate::suite::case::Case;
use crate::suite::checker::Checker;
use crate::suite::pytest::CollectedMarker;
use crate::suite::raw::{RawSettings, RawSettingsRef};

/// The keywords that are case keys, after the budgets'.
const CASE_KEYWORDS: [&str; 5] = ["timeout", "gpus", "repeat", "tolerance", "creep"];

/// `isolate`: the test in a process of its own, not in its table's
/// shared session. No suite key: a `[[pytest]]` table says it for all.
const ISOLATE: &str = "isolate";

/// The marker keywords, in the order the docs list them: the budgets',
/// then the case keys', then `isolate`.
fn marker_keywords() -> impl Iterator<Item = &'static str> {
    BudgetKind::KEYS
        .into_iter()
        .chain(CASE_KEYWORDS)
        .chain([ISOLATE])
}

/// What the markers of a test said beyond its case's settings.
#[derive(Debug, Default)]
pub(in crate::suite) struct Applied {
    /// What is wrong with them, one line each (the case is then left as
    /// it was).
    pub problems: Vec<String>,
    /// `isolate=True`.
    pub isolate: bool,
}

/// Apply the markers (closest first) to `case`.
pub(in crate::suite) fn apply_markers(case: &mut Case, markers: &[&CollectedMarker]) -> Applied {
    let mut isolate = false;
    let problems = apply(case, markers, &mut isolate);
    Applied { problems, isolate }
}

fn apply(case: &mut Case, markers: &[&CollectedMarker], isolate: &mut bool) -> Vec<String> {
    let mut problems = Vec::new();
    let mut merged: indexmap::IndexMap<&str, &serde_json::Value> = indexmap::IndexMap::new();
    for marker in markers {
        if !marker.args.is_empty() {
            problems.push(format!(
                "@pytest.mark.oomgate on {} takes keywords only (host=, gpu=, ...), not {} positional argument(s)",
                marker.node,
                marker.args.len()
            ));
        }
        for (key, value) in &marker.kwargs {
            merged.entry(key.as_str()).or_insert(value);
        }
    }
    let mut table = toml::Table::new();
    let mut budget = toml::Table::new();
    for (key, value) in merged {
        let value = match to_toml(value) {
            Ok(value) => value,
            Err(why) => {
                problems.push(format!("@pytest.mark.oomgate `{key}`: {why}"));
                continue;
            }
        };
        match key {
            key if BudgetKind::from_key(key).is_some() => {
                budget.insert(key.to_string(), value);
            }
            // A number of seconds, as Python code often writes a timeout.
            "timeout" => {
                let value = match value {
                    toml::Value::Integer(n) => toml::Value::String(format!("{n}s")),
                    toml::Value::Float(f) => {
                        toml::Value::String(format!("{}ms", (f * 1000.0).round()))
                    }
                    other => other,
                };
                table.insert(key.to_string(), value);
            }
            "gpus" | "repeat" | "tolerance" => {
                table.insert(key.to_string(), value);
            }
            // `creep="10%"` is the limit alone; a dict is the whole table.
            "creep" => {
                let value = match value {
                    toml::Value::Table(table) => toml::Value::Table(table),
                    limit => {
                        toml::Value::Table(toml::Table::from_iter([("limit".to_string(), limit)]))
                    }
                };
                table.insert(key.to_string(), value);
            }
            ISOLATE => match value {
                toml::Value::Boolean(b) => *isolate = b,
                _ => problems.push(format!(
                    "@pytest.mark.oomgate `{ISOLATE}` is True or False, not {value}"
                )),
            },
            other => problems.push(format!(
                "@pytest.mark.oomgate has no keyword `{other}`; it takes {}",
                marker_keywords().collect::<Vec<_>>().join(", ")
            )),
        }
    }
    if !budget.is_empty() {
        table.insert("budget".to_string(), toml::Value::Table(budget));
    }
    if !problems.is_empty() || table.is_empty() {
        if !problems.is_empty() {
            *isolate = false;
        }
        return problems;
    }
    let text = table.to_string();
    let raw: RawSettings = match toml::from_str(&text) {
        Ok(raw) => raw,
        Err(e) => return vec![format!("@pytest.mark.oomgate: {}", e.message().trim())],
    };
    let mut check = Checker {
        source: &text,
        problems: Vec::new(),
    };
    let own = raw.settings();
    let set = limits(&mut check, own, RawSettingsRef::default(), case.tolerance);
    if !check.problems.is_empty() {
        return check
            .problems
            .into_iter()
            .map(|d| {
                // The suite's words name `budget.gpu`; the marker says `gpu`.
                let message = d.message.replace("`budget.", "`");
                match d.help {
                    Some(help) => format!("@pytest.mark.oomgate: {message} ({help})"),
                    None => format!("@pytest.mark.oomgate: {message}"),
                }
            })
            .collect();
    }
    case.budget = set.budget.over(case.budget);
    if let (Some(_), Some(timeout)) = (own.timeout, set.timeout) {
        case.timeout = timeout;
    }
    if own.gpus.is_some() {
        case.gpus = set.gpus;
    }
    if own.repeat.is_some() {
        case.repeat = set.repeat;
    }
    if own.creep.is_some() {
        case.creep = set.creep;
    }
    case.tolerance = set.tolerance;
    Vec::new()
}

/// A marker's value as TOML; Python's `None` and objects JSON cannot hold
/// have no TOML form.
fn to_toml(value: &serde_json::Value) -> Result<toml::Value, String> {
    use serde_json::Value;
    Ok(match value {
        Value::Null => return Err("None is not a value; leave the keyword out".into()),
        Value::Bool(b) => toml::Value::Boolean(*b),
        Value::Number(n) => match n.as_i64() {
            Some(i) => toml::Value::Integer(i),
            None => toml::Value::Float(n.as_f64().ok_or("a number out of range")?),
        },
        Value::String(s) => toml::Value::String(s.clone()),
        Value::Array(items) => {
            toml::Value::Array(items.iter().map(to_toml).collect::<Result<_, _>>()?)
        }
        Value::Object(map) => {
            if let Some(Value::String(shown)) = map.get("__unsupported__") {
                return Err(format!(
                    "{shown} is not a value a marker can hold (a string, number, bool or dict)"
                ));
            }
            let mut table = toml::Table::new();
            for (k, v) in map {
                table.insert(k.clone(), to_toml(v)?);
            }
            toml::Value::Table(table)
        }
    })
}

#[cfg(test)]
mod tests {
    /// The pytest plugin lists the keywords too (in its marker's help):
    /// the same ones, in the same order.
    #[test]
    fn the_plugin_lists_the_marker_keywords() {
        let plugin = include_str!("../../../python/oomgate_probe/pytest_plugin.py");
        let listed: Vec<String> = super::marker_keywords()
            .map(|keyword| format!("\"{keyword}\""))
            .collect();
        let keywords = format!("KEYWORDS = ({})", listed.join(", "));
        assert!(plugin.contains(&keywords), "the plugin's {keywords}");
        let help: Vec<String> = super::marker_keywords()
            .map(|keyword| format!("{keyword}="))
            .collect();
        let help = format!("oomgate({})", help.join(", "));
        assert!(plugin.contains(&help), "the plugin's {help}");
    }
}

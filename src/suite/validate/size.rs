//! What a case's matrix rows expand to, in bytes, counted from its
//! templates and its matrix values before any row is expanded: a 60 KB
//! value used 1000 times in an argument would otherwise be expanded into
//! 60 MB per case before anything could refuse it, and a suite of such
//! rows would take more memory than the machine has.
//!
//! A row's text is its id, command, env (names and values), cwd and
//! server's command and env with its values in, and the values
//! themselves; every row of the case keeps its command and env as written
//! too. The largest row is the one with each key's longest value (every
//! combination is a row); the rows' total is exact: each value of a key is
//! in `rows / values` rows.

use std::collections::HashMap;

use indexmap::IndexMap;

use super::shared::{CaseInput, merged_env, pick};
use crate::suite::checker::Checker;
use crate::suite::model::{MAX_CASE_BYTES, MAX_PLAN_BYTES};
use crate::suite::template::sized;
use crate::units::Bytes;

/// One matrix key's values, measured.
struct Key {
    count: u128,
    longest: u128,
    total: u128,
}

/// Whether the case's rows fit [`MAX_CASE_BYTES`] each and what is left
/// of `room` (of [`MAX_PLAN_BYTES`]) together; what they take is taken
/// from `room`. A case that does not fit is reported, at its matrix, and
/// must not be expanded.
pub(super) fn checked_size(
    check: &mut Checker,
    case: &CaseInput,
    matrix: &IndexMap<String, Vec<String>>,
    room: &mut u64,
) -> bool {
    let raw = case.raw;
    let keys: HashMap<&str, Key> = matrix
        .iter()
        .map(|(name, values)| {
            let key = Key {
                count: values.len().max(1) as u128,
                longest: values.iter().map(|v| v.len() as u128).max().unwrap_or(0),
                total: values.iter().map(|v| v.len() as u128).sum(),
            };
            (name.as_str(), key)
        })
        .collect();
    let rows: u128 = keys.values().map(|k| k.count).product();
    // The values themselves, kept as each row's params.
    let mut largest_row: u128 = keys.values().map(|k| k.longest).sum();
    let mut total: u128 = keys.values().map(|k| rows / k.count * k.total).sum();
    let mut templates: Vec<(String, &str, usize)> = vec![("name".into(), raw.name.get_ref(), 0)];
    for (i, arg) in raw.command.get_ref().iter().enumerate() {
        templates.push((format!("command argument {i}"), arg.get_ref(), 0));
    }
    for (name, value) in merged_env(case.own, case.defaults) {
        let name = name.get_ref();
        templates.push((format!("env {name}"), value.get_ref(), name.len() + 1));
    }
    if let Some(cwd) = pick(case.own.cwd, case.defaults.cwd) {
        templates.push(("cwd".into(), cwd.get_ref(), 0));
    }
    if let Some(server) = case.server {
        for (i, arg) in server.command.get_ref().iter().enumerate() {
            templates.push((format!("server command argument {i}"), arg.get_ref(), 0));
        }
        for (name, value) in server.env.iter().flatten() {
            let name = name.get_ref();
            templates.push((
                format!("server env {name}"),
                value.get_ref(),
                name.len() + 1,
            ));
        }
    }
    let mut largest: (u128, &str) = (0, "name");
    for (what, text, extra) in &templates {
        let (fixed, names) = sized(text);
        let fixed = (fixed + extra) as u128;
        let mut most = fixed;
        let mut all = rows * fixed;
        for name in names {
            match keys.get(name) {
                Some(key) => {
                    most += key.longest;
                    all += rows / key.count * key.total;
                }
                // Left as written: `{port}`, a searched value's `{batch}`.
                None => {
                    most += name.len() as u128 + 2;
                    all += rows * (name.len() as u128 + 2);
                }
            }
        }
        largest_row += most;
        // Each row keeps the template as written, too.
        total += all + rows * text.len() as u128;
        if most > largest.0 {
            largest = (most, what.as_str());
        }
    }
    let bytes = |n: u128| Bytes(u64::try_from(n).unwrap_or(u64::MAX));
    let span = match &raw.matrix {
        Some(matrix) => matrix.span(),
        None => raw.name.span(),
    };
    if largest_row > u128::from(MAX_CASE_BYTES) {
        check
            .error(
                span.clone(),
                format!(
                    "a case of `{}` expands to {} of text ({} alone up to {}), more than the {} a case may take",
                    raw.name.get_ref(),
                    bytes(largest_row),
                    largest.1,
                    bytes(largest.0),
                    Bytes(MAX_CASE_BYTES)
                ),
            )
            .help = Some(
            "a matrix value is copied wherever its placeholder stands: pass a large input as a file the command reads, not as a value".into(),
        );
        return false;
    }
    if total > u128::from(*room) {
        check
            .error(
                span,
                format!(
                    "the {rows} case(s) of `{}` expand to {} of text, more than the {} a suite's cases may take together{}",
                    raw.name.get_ref(),
                    bytes(total),
                    Bytes(MAX_PLAN_BYTES),
                    if *room < MAX_PLAN_BYTES { " with its other cases" } else { "" }
                ),
            )
            .help = Some("split it into several suites, or make its values or env shorter".into());
        return false;
    }
    *room -= u64::try_from(total).unwrap_or(u64::MAX);
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::suite::raw::{RawSettingsRef, RawSuiteFile};

    /// The one `[[case]]` of `source` measured against `room`: whether it
    /// fits, what is left, and the first problem.
    fn measured(source: &str, mut room: u64) -> (bool, u64, Option<String>) {
        let raw: RawSuiteFile = toml::from_str(source).expect("a suite");
        let case = raw.cases[0].get_ref();
        let input = CaseInput {
            raw: case,
            own: case.settings(),
            defaults: RawSettingsRef::default(),
            server: case.server.as_ref().map(toml::Spanned::get_ref),
        };
        let mut matrix = IndexMap::new();
        for (key, values) in case.matrix.iter().flat_map(|m| m.get_ref()) {
            let texts = values.get_ref().iter().map(|v| v.get_ref().to_string());
            matrix.insert(key.get_ref().clone(), texts.collect());
        }
        let mut check = Checker {
            source,
            problems: Vec::new(),
        };
        let fits = checked_size(&mut check, &input, &matrix, &mut room);
        (
            fits,
            room,
            check.problems.first().map(|p| p.message.clone()),
        )
    }

    #[test]
    fn the_rows_text_is_counted_exactly_before_expansion() {
        // Two rows: `run {v}` as written (7) and expanded (4 + 1 + 3, the
        // values quoted by to_string: `"ab"`, `"cd"`), the name `c{v}`
        // (4 written, 1 + 4 expanded), the values (4 each).
        let source = "[suite]\nname = \"s\"\n[[case]]\nname = \"c{v}\"\ncommand = [\"run {v}\"]\nmatrix = { v = [\"ab\", \"cd\"] }\n";
        let per_row = (7 + 8) + (4 + 5) + 4;
        let (fits, left, _) = measured(source, 1000);
        assert!(fits);
        assert_eq!(1000 - left, 2 * per_row);
    }

    #[test]
    fn the_plan_counts_the_cases_before_it() {
        let source = "[suite]\nname = \"s\"\n[[case]]\nname = \"c{v}\"\ncommand = [\"run {v}\"]\nmatrix = { v = [\"ab\", \"cd\"] }\n";
        let (fits, left, problem) = measured(source, 10);
        assert!(!fits);
        assert_eq!(left, 10, "nothing taken from the room");
        let problem = problem.unwrap_or_default();
        assert!(
            problem.contains("the 2 case(s) of `c{v}` expand to 56 B of text")
                && problem.contains("with its other cases"),
            "{problem}"
        );
    }
}

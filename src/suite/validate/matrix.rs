//! A case's `matrix`: each key checked as a placeholder name, each value
//! read as the text it puts in, and the rows counted against the room left
//! in the suite before any row is expanded.
//!
//! [`checked_matrix`] gives the matrix as `key → values as text`, in file
//! order. A bad key or value is reported and the matrix is still built from
//! what could be read, so the checks after it (placeholders, search) run
//! and report too; only a matrix too large to hold stops the case there.

use indexmap::IndexMap;
use toml::Spanned;

use crate::suite::checker::Checker;
use crate::suite::model::MAX_CASES;
use crate::suite::raw::RawCase;
use crate::suite::template::is_identifier;

/// The case's matrix (empty without one), its rows taken from `room`.
/// `None` when it expands to more cases than `room` holds (reported).
pub(super) fn checked_matrix(
    check: &mut Checker,
    raw: &RawCase,
    room: &mut usize,
) -> Option<IndexMap<String, Vec<String>>> {
    // Matrix: each key a non-empty list of scalars.
    let mut matrix: IndexMap<String, Vec<String>> = IndexMap::new();
    let Some(raw_matrix) = &raw.matrix else {
        *room = room.saturating_sub(1);
        return Some(matrix);
    };
    if raw_matrix.get_ref().is_empty() {
        check.error(
            raw_matrix.span(),
            "`matrix` is empty: remove it or give it a key",
        );
    }
    for (key, values) in raw_matrix.get_ref() {
        if !is_identifier(key.get_ref()) {
            check
                .error(
                    key.span(),
                    format!(
                        "matrix key `{}` cannot be used as a placeholder",
                        key.get_ref()
                    ),
                )
                .help =
                Some("use letters, digits, `_` and `-`, starting with a letter or `_`".into());
        }
        if values.get_ref().is_empty() {
            check
                .error(
                    values.span(),
                    format!("matrix key `{}` has no values", key.get_ref()),
                )
                .help = Some("an empty list would expand to no cases at all".into());
        }
        let mut texts = Vec::new();
        for value in values.get_ref() {
            match scalar_text(value, check.source) {
                Some(text) => texts.push(text),
                None => {
                    check.error(
                        value.span(),
                        format!(
                            "matrix values must be strings, numbers or booleans, found a {}",
                            value.get_ref().type_str()
                        ),
                    );
                }
            }
        }
        matrix.insert(key.get_ref().clone(), texts);
    }
    // Counted before anything is expanded: 10 keys of 10 values are
    // 10^10 cases, which no machine holds.
    let product = matrix
        .values()
        .try_fold(1usize, |product, values| product.checked_mul(values.len()));
    if product.is_none_or(|product| product > *room) {
        let sizes: Vec<String> = matrix.values().map(|v| v.len().to_string()).collect();
        let count = product.map_or("more than 2^64".to_string(), |p| p.to_string());
        check
            .error(
                raw_matrix.span(),
                format!(
                    "the matrix expands to {count} cases ({}), more than the {MAX_CASES} a suite may hold{}",
                    sizes.join(" x "),
                    if *room < MAX_CASES { " with its other cases" } else { "" }
                ),
            )
            .help = Some("split it into several suites, or fewer values per key".into());
        return None;
    }
    *room -= product.unwrap_or(0);
    Some(matrix)
}

/// A matrix value as the text substituted into commands. Floats keep the
/// spelling the suite used (`1.0`, `2.5e-5`), not Rust's reformatting.
fn scalar_text(value: &Spanned<toml::Value>, source: &str) -> Option<String> {
    match value.get_ref() {
        toml::Value::String(s) => Some(s.clone()),
        toml::Value::Integer(n) => Some(n.to_string()),
        toml::Value::Float(f) => Some(
            source
                .get(value.span())
                .map(|text| text.trim().replace('_', ""))
                .unwrap_or_else(|| f.to_string()),
        ),
        toml::Value::Boolean(b) => Some(b.to_string()),
        _ => None,
    }
}

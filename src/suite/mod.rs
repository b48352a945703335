//! Suite files: from TOML text to a list of checked, fully expanded [`Case`]s.
//!
//! Loading happens in two passes, the way nextest reads its config: `raw`
//! mirrors the file with serde (so unknown keys and wrong types are caught
//! with their spans), then `validate` turns it into domain types — sizes,
//! durations, absolute paths, matrix rows — collecting every problem before
//! returning. Nothing is launched unless the whole suite is valid.
//!
//! Relative paths never depend on where oomgate was started: `workdir` is
//! relative to the suite file's folder, `cwd` to the workdir, and a command
//! whose first element contains `/` to the case's working directory.

mod budget;
mod case;
mod checked;
mod checker;
mod located;
mod model;
mod output;
mod parity;
mod partition;
mod pytest;
mod pytest_table;
mod raw;
mod search;
mod secrets;
mod server;
mod template;
mod validate;

use std::path::Path;

pub use budget::{Budget, BudgetKind, BudgetValue, Takes};
pub use case::{Case, PytestSession};
pub use checked::{Suite, filter_matches};
pub use located::{Diagnostic, Located, SuiteError};
pub use model::{
    Creep, CreepAction, DEFAULT_CREEP_WINDOW, DEFAULT_KILL_GRACE, DEFAULT_SAMPLE_INTERVAL,
    DEFAULT_SETTLE_TIMEOUT, DEFAULT_SITES_DEPTH, DEFAULT_SPREAD_K, DEFAULT_TIMEOUT, DriftPolicy,
    EnvironmentSpec, ForeignPolicy, GpuMode, Leak, Limit, LimitOp, MAX_CASE_BYTES, MAX_CASES,
    MAX_PLAN_BYTES, MAX_SUITE_BYTES, RESERVED_ENV, Tolerance, Tolerances,
};
pub use output::{
    Better, DEFAULT_OUTPUT_TOLERANCE, OutputMetric, Pick, compile as output_regex, read_number,
};
pub use parity::{Parity, ParityFigure, ParityOp, ParityRule, ParityUnit};
pub use partition::{Partition, PartitionKind};
pub use pytest::{
    Collected, CollectedMarker, CollectedTest, Granularity, PYTEST_PLUGIN_MODULE, PytestTest,
    junit_names,
};
pub use pytest_table::{Expanded, PytestSource};
pub use secrets::{server_env, suite_secrets};
pub use server::{
    HttpTarget, PORT, Ready, ReadyError, RowError, Server, StopSignal, TargetError, http_target,
    tcp_target,
};
pub use template::{Templates, fnv1a, folder_name, shell_join};
pub use validate::needs_own_process;

pub fn load(path: &Path) -> Result<Suite, SuiteError> {
    load_with(path, None)
}

/// Load a suite as [`load`] does, with `python` (when given) as its
/// `[environment] python` and the interpreter of `[[pytest]]` tables that
/// name none (`--python`; `oomgate bisect` runs a case in an environment
/// of its own this way).
pub fn load_with(path: &Path, python: Option<&str>) -> Result<Suite, SuiteError> {
    let read_error = |source| SuiteError::Read {
        path: path.to_path_buf(),
        source,
    };
    // A suite is a regular file of a sane size: `/dev/zero` or a FIFO
    // would be read until oomgate is killed.
    let bytes = crate::files::read_input_bytes(path, MAX_SUITE_BYTES, "a suite").map_err(|e| {
        read_error(match e.kind() {
            std::io::ErrorKind::InvalidInput => {
                std::io::Error::other("not a regular file (a suite is a TOML file)")
            }
            _ => e,
        })
    })?;
    let source = String::from_utf8(bytes).map_err(|e| not_utf8(path, e))?;
    let absolute = std::path::absolute(path).map_err(|source| SuiteError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let folder = absolute.parent().unwrap_or(Path::new("/")).to_path_buf();
    parse_with(&source, path, &folder, python)
}

/// A suite that is not UTF-8 (TOML is): a located error at its first
/// invalid byte, shown in the line as the replacement character.
fn not_utf8(path: &Path, error: std::string::FromUtf8Error) -> SuiteError {
    let at = error.utf8_error().valid_up_to();
    let bytes = error.as_bytes();
    let invalid = error.utf8_error().error_len().unwrap_or(bytes.len() - at);
    let shown: Vec<String> = bytes[at..at + invalid]
        .iter()
        .map(|b| format!("0x{b:02X}"))
        .collect();
    let text = String::from_utf8_lossy(bytes);
    let diagnostic = Diagnostic::new(
        Some(at..at + '\u{FFFD}'.len_utf8()),
        format!(
            "not UTF-8: byte(s) {} here are not a character",
            shown.join(" ")
        ),
    )
    .with_help("a suite is TOML, which is UTF-8 text: save the file as UTF-8");
    SuiteError::Invalid {
        path: path.to_path_buf(),
        problems: vec![Located::resolve(&text, diagnostic)],
    }
}

/// Validate suite text. `path` is only used in messages; relative paths in
/// the suite resolve from `folder`.
pub fn parse(source: &str, path: &Path, folder: &Path) -> Result<Suite, SuiteError> {
    parse_with(source, path, folder, None)
}

/// [`parse`], with `python` as `[environment] python` (see [`load_with`]).
fn parse_with(
    source: &str,
    path: &Path,
    folder: &Path,
    python: Option<&str>,
) -> Result<Suite, SuiteError> {
    let invalid = |diagnostics: Vec<Diagnostic>| SuiteError::Invalid {
        path: path.to_path_buf(),
        problems: diagnostics
            .into_iter()
            .map(|d| Located::resolve(source, d))
            .collect(),
    };
    let mut document = toml::de::DeTable::parse(source)
        .map_err(|e| invalid(vec![located::from_toml_error(&e, source)]))?;
    // Every unknown key at once: each is noted and taken out of the
    // document, and the rest is read again (serde stops at the first).
    let mut problems = Vec::new();
    let mut raw = loop {
        use serde::Deserialize;
        match raw::RawSuiteFile::deserialize(toml::de::Deserializer::from(document.clone())) {
            Ok(raw) => break raw,
            Err(error) => {
                let diagnostic = located::from_toml_error(&error, source);
                let removed = diagnostic.message.starts_with("unknown key")
                    && problems.len() < MAX_UNKNOWN_KEYS
                    && error
                        .span()
                        .is_some_and(|span| remove_key(document.get_mut(), &span));
                problems.push(diagnostic);
                if !removed {
                    return Err(invalid(problems));
                }
            }
        }
    };
    if let Some(python) = python {
        override_python(&mut raw, python);
    }
    match validate::validate(raw, source, path, folder) {
        Ok(suite) if problems.is_empty() => Ok(suite),
        Ok(_) => Err(invalid(problems)),
        Err(more) => {
            problems.extend(more);
            Err(invalid(problems))
        }
    }
}

/// Put `python` in the suite's `[environment]` (made when it has none),
/// as if the file said it; its span is the table's, or the file's start.
fn override_python(raw: &mut raw::RawSuiteFile, python: &str) {
    let environment = raw.environment.get_or_insert_with(|| {
        toml::Spanned::new(
            0..0,
            raw::RawEnvironment {
                python: None,
                packages: None,
                freeze: None,
                commands: None,
            },
        )
    });
    let span = environment.span();
    environment.get_mut().python = Some(toml::Spanned::new(span, python.to_string()));
}

/// The most unknown keys reported from one suite (the rest are left to
/// the next check).
const MAX_UNKNOWN_KEYS: usize = 100;

/// Take the key whose name sits at `span` out of the document, wherever it
/// is; whether there was one.
fn remove_key(table: &mut toml::de::DeTable<'_>, span: &std::ops::Range<usize>) -> bool {
    let found = table.keys().find(|key| key.span() == *span).cloned();
    if let Some(key) = found {
        return table.remove(&key).is_some();
    }
    table
        .iter_mut()
        .any(|(_, value)| remove_key_in(value.get_mut(), span))
}

fn remove_key_in(value: &mut toml::de::DeValue<'_>, span: &std::ops::Range<usize>) -> bool {
    match value {
        toml::de::DeValue::Table(table) => remove_key(table, span),
        toml::de::DeValue::Array(array) => array
            .iter_mut()
            .any(|item| remove_key_in(item.get_mut(), span)),
        _ => false,
    }
}

#[cfg(test)]
mod tests;

//! What every subcommand shares: the exit codes it earns (`Outcome`), the
//! errors that end it (`CliError`, each mapped to its code here and only
//! here), loading a suite and its plan, printing.

use crate::pytest::session::Parked;
use std::process::ExitCode;

use crate::baseline::LockError;
use crate::run::RunError;
use crate::suite::{Case, Suite, SuiteError};

/// The outcomes oomgate reports through its exit status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Passed = 0,
    CasesFailed = 1,
    BadInput = 2,
    Infrastructure = 3,
    /// `bisect --check`: this commit cannot be judged (`git bisect`'s skip).
    CannotTell = 125,
    /// `bisect --check`: bad input or a broken environment, not the
    /// figure's answer (`git bisect run` aborts).
    BisectAbort = 128,
    Interrupted = 130,
}

impl From<Outcome> for ExitCode {
    fn from(outcome: Outcome) -> Self {
        ExitCode::from(outcome as u8)
    }
}

/// A problem that ends oomgate before or outside the cases' verdicts.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    #[error(transparent)]
    Suite(#[from] SuiteError),
    #[error("{0}")]
    BadInput(String),
    #[error("{0}")]
    Infrastructure(String),
    #[error(transparent)]
    Run(#[from] RunError),
    #[error(transparent)]
    Lock(#[from] LockError),
}

/// A folder that is someone else's, or another oomgate's now, is the
/// user's choice of `--out` (exit 2); one that cannot be written is not.
impl From<crate::files::OutDirError> for CliError {
    fn from(error: crate::files::OutDirError) -> Self {
        use crate::files::OutDirError;
        match error {
            OutDirError::NotOurs { .. } | OutDirError::InUse { .. } => {
                CliError::BadInput(error.to_string())
            }
            OutDirError::Io { .. } => CliError::Infrastructure(error.to_string()),
        }
    }
}

impl CliError {
    pub fn outcome(&self) -> Outcome {
        match self {
            CliError::Suite(SuiteError::Invalid { .. }) | CliError::BadInput(_) => {
                Outcome::BadInput
            }
            // A suite path that cannot be read is the user's input too.
            CliError::Suite(SuiteError::Read { .. }) => Outcome::BadInput,
            CliError::Infrastructure(_) | CliError::Run(_) => Outcome::Infrastructure,
            CliError::Lock(LockError::Write { .. }) => Outcome::Infrastructure,
            CliError::Lock(_) => Outcome::BadInput,
        }
    }
}

/// Load a suite and put its secrets in force: the secret-named values of
/// every env layer, its secret flags' values and its `redact` patterns are
/// masked in everything written from here on (see `crate::redact`). Its
/// warnings are said here, once.
pub(super) fn load_suite(path: &std::path::Path, python: Option<&str>) -> Result<Suite, CliError> {
    load(path, python, None).map(|(suite, _)| suite)
}

/// Load a suite as [`load_suite`] does, and collect its `[[pytest]]` tests
/// into cases (imports the test modules: pytest runs).
pub(super) fn load_collected(
    path: &std::path::Path,
    python: Option<&str>,
) -> Result<Suite, CliError> {
    load(path, python, Some(crate::pytest::Collecting::Only)).map(|(suite, _)| suite)
}

/// Load a suite to run it: a `[[pytest]]` whose tests share a session is
/// collected by that session, which then runs them: the sessions, parked.
pub(super) fn load_to_run(
    path: &std::path::Path,
    python: Option<&str>,
) -> Result<(Suite, Parked), CliError> {
    load(path, python, Some(crate::pytest::Collecting::Session))
}

fn load(
    path: &std::path::Path,
    python: Option<&str>,
    collect: Option<crate::pytest::Collecting>,
) -> Result<(Suite, Parked), CliError> {
    let mut suite = crate::suite::load_with(path, python)?;
    let mut notes = Vec::new();
    let mut parked = Parked::default();
    if let Some(how) = collect {
        // The suite's own secrets are masked in what pytest says, too.
        crate::redact::install(&crate::suite::suite_secrets(
            &suite.name,
            &suite.cases,
            &suite.redact,
        ));
        (notes, parked) = crate::pytest::collect(&mut suite, how).map_err(|e| match e {
            crate::pytest::CollectError::Plugin { .. } => CliError::Infrastructure(e.to_string()),
            _ => CliError::BadInput(format!("{}: {e}", suite.path.display())),
        })?;
    }
    crate::redact::install(&crate::suite::suite_secrets(
        &suite.name,
        &suite.cases,
        &suite.redact,
    ));
    for warning in &suite.warnings {
        write_stderr(&warning.display_with(&suite.path).to_string());
    }
    for note in notes {
        write_stderr(&format!("warning: {note}"));
    }
    Ok((suite, parked))
}

/// Print to stdout; a closed pipe (`oomgate list s.toml | head -1`) is not
/// an error worth a panic.
pub(super) fn write_stdout(text: &str) {
    use std::io::Write;
    let text = crate::redact::mask_written(text);
    let _ = std::io::stdout().lock().write_all(text.as_bytes());
}

/// Print a line to stderr; a closed stream is said once on stdout, then
/// ignored (see `report::terminal::to_stderr`).
pub fn write_stderr(line: &str) {
    crate::report::terminal::to_stderr(line);
}

/// The cases of this shard (`--partition`, after the filters). An empty
/// shard is said, not an error: with few cases and many shards, some are.
pub(super) fn shard<'s>(
    suite: &'s Suite,
    filters: &[String],
    partition: Option<crate::suite::Partition>,
) -> Result<Vec<&'s Case>, CliError> {
    let cases = plan(suite, filters)?;
    let Some(partition) = partition else {
        return Ok(cases);
    };
    let shard = partition.select(&cases);
    if shard.is_empty() {
        write_stderr(&format!(
            "note: shard {partition} holds none of the {} case(s): nothing to run",
            cases.len()
        ));
    }
    Ok(shard)
}

/// The cases to run. A filter that matches nothing is a mistake, not a pass.
pub(super) fn plan<'s>(suite: &'s Suite, filters: &[String]) -> Result<Vec<&'s Case>, CliError> {
    let cases = suite.filtered(filters);
    if cases.is_empty() {
        let ids: Vec<&str> = suite.cases.iter().map(|c| c.id.as_str()).collect();
        return Err(CliError::BadInput(format!(
            "no case of {} matches --filter {}; case ids: {}",
            suite.path.display(),
            filters.join(" --filter "),
            ids.join(", ")
        )));
    }
    Ok(cases)
}

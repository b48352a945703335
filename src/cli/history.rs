//! `oomgate history` (add, show, prune), and the recording of a run by
//! `run`, `lock` and `merge` ([`record`]).
//!
//! Where the history is: `--history`, else `OOMGATE_HISTORY`, else the
//! suite's `[suite] history`. A history that cannot be reached is said in
//! one line and changes no verdict, unless the suite says
//! `history_required = true` (exit 3).

use std::path::{Path, PathBuf};

use super::args::{
    HistoryAddArgs, HistoryAt, HistoryCommand, HistoryPruneArgs, HistoryShowArgs, RecordArgs,
};
use super::shared::{CliError, Outcome, write_stderr};
use crate::history::{self, Location, Query, Recorded, RecordedBy, RunEntry, origin};
use crate::results::{RunOrigin, RunResults};

/// The variable that names a history for every command.
pub const HISTORY_VAR: &str = "OOMGATE_HISTORY";

/// Dispatch `oomgate history …`.
pub fn history(command: &HistoryCommand) -> Result<Outcome, CliError> {
    match command {
        HistoryCommand::Add(args) => add(args),
        HistoryCommand::Show(args) => show(args),
        HistoryCommand::Prune(args) => prune(args),
    }
}

/// The origin of a run about to start: the command line, the CI's
/// variables, git in the suite's folder.
pub(super) fn origin_now(args: &RecordArgs, suite_folder: Option<&Path>) -> RunOrigin {
    origin::detect(
        &origin::Given {
            commit: args.commit.clone(),
            branch: args.branch.clone(),
        },
        &origin::process_var,
        suite_folder,
    )
}

/// The history a run records into, if any: `--history`, the variable,
/// the suite's; `None` with `--no-history` or none named.
fn chosen(
    flag: Option<&str>,
    no_history: bool,
    suite: Option<&Location>,
) -> Result<Option<Location>, CliError> {
    if no_history {
        return Ok(None);
    }
    if let Some(text) = flag {
        return parse(text, "--history").map(Some);
    }
    if let Some(text) = std::env::var(HISTORY_VAR)
        .ok()
        .filter(|t| !t.trim().is_empty())
    {
        return parse(&text, HISTORY_VAR).map(Some);
    }
    Ok(suite.cloned())
}

fn parse(text: &str, from: &str) -> Result<Location, CliError> {
    Location::parse(text).map_err(|e| CliError::BadInput(format!("{from}: {e}")))
}

/// The history a `history` subcommand reads: `--history`, else the
/// variable.
fn required(at: &HistoryAt) -> Result<Location, CliError> {
    chosen(at.history.as_deref(), false, None)?.ok_or_else(|| {
        CliError::BadInput(format!(
            "which history? give --history sqlite:PATH (or postgres://…), or set {HISTORY_VAR}"
        ))
    })
}

fn infrastructure(error: history::HistoryError) -> CliError {
    match error {
        history::HistoryError::Location(e) => CliError::BadInput(e.to_string()),
        other => CliError::Infrastructure(other.to_string()),
    }
}

/// What a run that records needs besides its results.
pub(super) struct Recording<'a> {
    pub args: &'a RecordArgs,
    /// The suite's `[suite] history`, and `history_required`.
    pub suite_history: Option<&'a Location>,
    pub required: bool,
    pub by: RecordedBy,
}

/// Record a finished run in its history, if it has one. A shard
/// (`--partition`) records nothing: its merge does. A history that cannot
/// be reached is said in one line; with `history_required` it is exit 3.
pub(super) fn record(results: &RunResults, recording: &Recording<'_>) -> Result<(), CliError> {
    let Some(location) = chosen(
        recording.args.history.as_deref(),
        recording.args.no_history,
        recording.suite_history,
    )?
    else {
        return Ok(());
    };
    if results.partition.is_some() {
        write_stderr(&format!(
            "note: history: a shard records nothing in {}; `oomgate merge` records the whole run",
            location.describe()
        ));
        return Ok(());
    }
    let run_id = results
        .run_id
        .clone()
        .unwrap_or_else(crate::results::run_id::fresh);
    // Results from before origins were kept (a merge of old shards): the
    // CI and git of the command recording them.
    let mut origin = results
        .origin
        .clone()
        .unwrap_or_else(|| origin_now(recording.args, None));
    if let Some(commit) = &recording.args.commit {
        origin.commit = Some(commit.clone());
    }
    if let Some(branch) = &recording.args.branch {
        origin.branch = Some(branch.clone());
    }
    let entry = RunEntry::of(results, &run_id, &origin, recording.by);
    let recorded = history::open(&location, true).and_then(|mut store| store.record(&entry));
    match recorded {
        Ok(recorded) => {
            crate::report::terminal::to_stderr(&crate::report::history::recorded_line(
                &location.describe(),
                &entry,
                recorded,
            ));
            Ok(())
        }
        Err(error) if recording.required => Err(CliError::Infrastructure(format!(
            "history: not recorded ({error}); the suite says history_required = true"
        ))),
        Err(error) => {
            write_stderr(&format!(
                "warning: history: this run was not recorded: {error}; the verdict stands as the lock gives it"
            ));
            Ok(())
        }
    }
}

fn results_file(path: &Path) -> PathBuf {
    if path.is_dir() {
        path.join("results.json")
    } else {
        path.to_path_buf()
    }
}

fn add(args: &HistoryAddArgs) -> Result<Outcome, CliError> {
    let location = required(&args.at)?;
    // Every file read first: one that is no results records nothing.
    let mut entries = Vec::new();
    for path in &args.results {
        let file = results_file(path);
        let text = std::fs::read_to_string(&file)
            .map_err(|e| CliError::BadInput(format!("{}: {e}", file.display())))?;
        let results = crate::results::readback::parse(&text)
            .map_err(|e| CliError::BadInput(format!("{}: {e}", file.display())))?;
        if results.partition.is_some() {
            return Err(CliError::BadInput(format!(
                "{}: the results of one shard (--partition); record the run once, merged: oomgate merge … --history {}",
                file.display(),
                location.describe()
            )));
        }
        let run_id = results
            .run_id
            .clone()
            .unwrap_or_else(|| crate::results::run_id::of_content(text.as_bytes()));
        let mut origin = results.origin.clone().unwrap_or_default();
        if args.commit.is_some() {
            origin.commit = args.commit.clone();
        }
        if args.branch.is_some() {
            origin.branch = args.branch.clone();
        }
        entries.push(RunEntry::of(&results, &run_id, &origin, RecordedBy::Add));
    }
    let mut store = history::open(&location, true).map_err(infrastructure)?;
    let (mut new, mut already) = (0, 0);
    for entry in &entries {
        match store.record(entry).map_err(infrastructure)? {
            Recorded::New => new += 1,
            Recorded::Already => already += 1,
        }
    }
    println!(
        "{}",
        crate::report::history::added_line(&location.describe(), new, already)
    );
    Ok(Outcome::Passed)
}

fn show(args: &HistoryShowArgs) -> Result<Outcome, CliError> {
    let location = required(&args.at)?;
    let mut store = history::open(&location, false).map_err(infrastructure)?;
    let query = Query {
        suite: args.suite.clone(),
        branch: args.branch.clone(),
        case: args.case.clone(),
        testbed: args.testbed.clone(),
        last: Some(args.last as usize),
        details: true,
    };
    if args.json {
        let runs = store.runs(&query).map_err(infrastructure)?;
        /// `history show --json`.
        #[derive(serde::Serialize)]
        struct Shown<'r> {
            history: String,
            schema: u32,
            runs: &'r [RunEntry],
        }
        let shown = Shown {
            history: location.describe(),
            schema: store.schema_version().map_err(infrastructure)?,
            runs: &runs,
        };
        let text = serde_json::to_string_pretty(&shown)
            .map_err(|e| CliError::Infrastructure(format!("cannot write JSON: {e}")))?;
        println!("{}", crate::redact::mask_written(&text));
    } else {
        let figures: Vec<&str> = match args.figure.as_deref() {
            Some(figure) => vec![figure],
            None => vec![
                crate::history::entry::names::GPU_PEAK,
                crate::history::entry::names::HOST_PEAK,
            ],
        };
        let series = store.series(&query, &figures).map_err(infrastructure)?;
        print!(
            "{}",
            crate::redact::mask_written(&crate::report::history::table(
                &location.describe(),
                &series,
                args.figure.as_deref(),
            ))
        );
    }
    Ok(Outcome::Passed)
}

fn prune(args: &HistoryPruneArgs) -> Result<Outcome, CliError> {
    let location = required(&args.at)?;
    let age = chrono::Duration::from_std(args.older_than)
        .map_err(|_| CliError::BadInput("--older-than: too long a duration".into()))?;
    let before = chrono::Utc::now() - age;
    let mut store = history::open(&location, false).map_err(infrastructure)?;
    let removed = store
        .prune(before.timestamp_millis())
        .map_err(infrastructure)?;
    println!(
        "{}: removed {removed} run(s) that started before {}",
        location.describe(),
        before.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
    );
    Ok(Outcome::Passed)
}

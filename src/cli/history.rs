//! `oomgate history` (add, show, prune), and the recording of a run by
//! `run`, `lock` and `merge` ([`record`]).
//!
//! Where the history is: `--history`, else `OOMGATE_HISTORY`, else the
//! suite's `[suite] history`. A history that cannot be reached is said in
//! one line and changes no verdict, unless the suite says
//! `history_required = true` (exit 3).

use std::path::{Path, PathBuf};

use super::args::{
    HistoryAcceptArgs, HistoryAddArgs, HistoryAt, HistoryCommand, HistoryPruneArgs,
    HistoryShowArgs, RecordArgs,
};
use super::shared::{CliError, Outcome, write_stderr};
use crate::history::{self, Acceptance, Location, Query, Recorded, RecordedBy, RunEntry, origin};
use crate::results::{RunOrigin, RunResults};

/// The variable that names a history for every command.
pub const HISTORY_VAR: &str = "OOMGATE_HISTORY";

/// Dispatch `oomgate history …`.
pub fn history(command: &HistoryCommand) -> Result<Outcome, CliError> {
    match command {
        HistoryCommand::Add(args) => add(args),
        HistoryCommand::Show(args) => show(args),
        HistoryCommand::Prune(args) => prune(args),
        HistoryCommand::Accept(args) => accept(args),
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

/// The history `bisect` keeps its steps in (`--history`, the variable,
/// the suite's), opened (made where there is none); `None` when none is
/// named, or it cannot be opened (said in one line).
pub(super) fn store_for(
    flag: Option<&str>,
    no_history: bool,
    suite: &crate::suite::Suite,
) -> Result<Option<Box<dyn history::Store>>, CliError> {
    let Some(location) = chosen(flag, no_history, suite.history.as_ref())? else {
        return Ok(None);
    };
    match history::open(&location, true) {
        Ok(store) => Ok(Some(store)),
        Err(history::HistoryError::Location(e)) => Err(CliError::BadInput(e.to_string())),
        Err(e) => {
            write_stderr(&format!("warning: {e}; every step is run, none kept"));
            Ok(None)
        }
    }
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

/// Each case's past in the history the run records into, for the judge
/// (creep, steps): on the run's branch (a pull request's base branch), in
/// the widest creep window of its cases. `None`: no history named, none
/// there yet, or one that cannot be read (said in one line; with
/// `history_required`, exit 3).
pub(super) fn pasts_for_run(
    suite: &crate::suite::Suite,
    cases: &[&crate::suite::Case],
    args: &RecordArgs,
    origin: &RunOrigin,
) -> Result<Option<crate::history::pasts::Pasts>, CliError> {
    let Some(location) = chosen(
        args.history.as_deref(),
        args.no_history,
        suite.history.as_ref(),
    )?
    else {
        return Ok(None);
    };
    if let Location::Sqlite(path) = &location {
        if !path.exists() {
            return Ok(None);
        }
    }
    let window = cases
        .iter()
        .filter_map(|c| c.creep.map(|creep| creep.window))
        .max()
        .unwrap_or(crate::suite::DEFAULT_CREEP_WINDOW);
    let now_ms = chrono::Utc::now().timestamp_millis();
    let since_ms = now_ms.saturating_sub(i64::try_from(window.as_millis()).unwrap_or(i64::MAX));
    let branch = origin.base_branch.clone().or_else(|| origin.branch.clone());
    let read = history::open(&location, false).and_then(|mut store| {
        let series = store.series(
            &Query {
                suite: Some(suite.name.clone()),
                branch: branch.clone(),
                since_ms: Some(since_ms),
                ..Query::default()
            },
            &crate::history::pasts::JUDGED,
        )?;
        let acceptances = store.acceptances(&suite.name, branch.as_deref())?;
        Ok((series, acceptances))
    });
    match read {
        Ok((series, acceptances)) => Ok(Some(crate::history::pasts::Pasts::new(
            series,
            acceptances,
            branch,
            (since_ms, now_ms),
        ))),
        Err(error) if suite.history_required => Err(CliError::Infrastructure(format!(
            "history: cannot read the runs to hold this one against ({error}); the suite says history_required = true"
        ))),
        Err(error) => {
            write_stderr(&format!(
                "warning: history: no figure is held against its past in this run: {error}"
            ));
            Ok(None)
        }
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

/// Record a run of `suite` (by `run` or `lock`) in its history.
pub(super) fn record_run(
    results: &RunResults,
    args: &RecordArgs,
    suite: &crate::suite::Suite,
) -> Result<(), CliError> {
    record(
        results,
        &Recording {
            args,
            suite_history: suite.history.as_ref(),
            required: suite.history_required,
            by: RecordedBy::Run,
        },
    )
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
        since_ms: None,
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

/// Who accepts: `--by`, else the CI's user, else `$USER`.
fn accepter(by: Option<&str>) -> String {
    if let Some(by) = by {
        return by.to_string();
    }
    [
        "GITHUB_ACTOR",
        "GITLAB_USER_LOGIN",
        "BUILDKITE_BUILD_CREATOR",
        "BUILD_USER_ID",
        "USER",
    ]
    .iter()
    .find_map(|name| std::env::var(name).ok().filter(|v| !v.trim().is_empty()))
    .unwrap_or_else(|| "unknown".to_string())
}

/// The acceptances of `case`'s figures in `run` (each judged figure it
/// has), on `branch`.
fn acceptances_of(
    run: &RunEntry,
    case: &history::CaseEntry,
    branch: Option<&str>,
    by: &str,
    reason: &str,
) -> Vec<Acceptance> {
    let now = chrono::Local::now();
    crate::history::pasts::JUDGED
        .iter()
        .filter_map(|name| {
            let figure = case.figures.get(*name)?;
            Some(Acceptance {
                suite: run.suite.clone(),
                case_id: case.id.clone(),
                testbed: case.testbed.clone(),
                branch: branch.map(str::to_string),
                figure: name.to_string(),
                level: figure.value,
                accepted_ms: now.timestamp_millis(),
                accepted_at: now.to_rfc3339_opts(chrono::SecondsFormat::Millis, false),
                accepted_by: crate::redact::mask_written(by).into_owned(),
                reason: crate::redact::mask_written(reason).into_owned(),
                run_id: Some(run.run_id.clone()),
            })
        })
        .collect()
}

fn accept(args: &HistoryAcceptArgs) -> Result<Outcome, CliError> {
    let location = required(&args.at)?;
    let branch = args
        .branch
        .clone()
        .or_else(|| origin_now(&RecordArgs::default(), Some(Path::new("."))).branch);
    let by = accepter(args.by.as_deref());
    let mut store = history::open(&location, false).map_err(infrastructure)?;
    let mut accepted = Vec::new();
    for case_id in &args.cases {
        // The newest run on the branch that has the case.
        let runs = store
            .runs(&Query {
                suite: args.suite.clone(),
                branch: branch.clone(),
                case: Some(case_id.clone()),
                ..Query::default()
            })
            .map_err(infrastructure)?;
        let suites: std::collections::BTreeSet<&str> = runs
            .iter()
            .filter(|r| !r.cases.is_empty())
            .map(|r| r.suite.as_str())
            .collect();
        if suites.len() > 1 {
            return Err(CliError::BadInput(format!(
                "case `{case_id}` is in runs of several suites ({}); name one with --suite",
                suites.into_iter().collect::<Vec<_>>().join(", ")
            )));
        }
        // A run that failed on its own (an OOM, a crash, a budget) has
        // figures that say little; one that failed only against the
        // lock or its ratchet is the growth being accepted.
        let judged_only = |case: &&history::CaseEntry| {
            case.status == crate::vocabulary::CaseStatus::Passed.as_str()
                || case.failure_kind.as_deref().is_some_and(|kind| {
                    [
                        crate::vocabulary::FailureType::Creep,
                        crate::vocabulary::FailureType::Regression,
                        crate::vocabulary::FailureType::EnvironmentDrift,
                    ]
                    .iter()
                    .any(|ok| ok.as_str() == kind)
                })
        };
        let Some((run, case)) = runs.iter().rev().find_map(|run| {
            run.cases
                .first()
                .filter(judged_only)
                .map(|case| (run, case))
        }) else {
            return Err(CliError::BadInput(format!(
                "case `{case_id}` has no run in {}{} that passed, or failed only against its lock or ratchet",
                location.describe(),
                branch
                    .as_deref()
                    .map(|b| format!(" on branch {b}"))
                    .unwrap_or_default()
            )));
        };
        let these = acceptances_of(run, case, branch.as_deref(), &by, &args.reason);
        if these.is_empty() {
            return Err(CliError::BadInput(format!(
                "case `{case_id}` has no figure to accept in its newest run ({})",
                run.run_id
            )));
        }
        accepted.extend(these);
    }
    store.accept(&accepted).map_err(infrastructure)?;
    for a in &accepted {
        println!(
            "{}",
            crate::report::history::accepted_line(&location.describe(), a)
        );
    }
    Ok(Outcome::Passed)
}

/// `lock --accept REASON`: the locked results' figures accepted as each
/// case's ratchet, in the history the run records into. Said in one line
/// when there is no history, or it cannot be written.
pub(super) fn accept_locked(
    results: &RunResults,
    reason: &str,
    args: &RecordArgs,
    suite_history: Option<&Location>,
) -> Result<(), CliError> {
    let Some(location) = chosen(args.history.as_deref(), args.no_history, suite_history)? else {
        write_stderr(
            "warning: lock --accept: no history is named (--history, OOMGATE_HISTORY, [suite] history); nothing was accepted",
        );
        return Ok(());
    };
    let origin = results
        .origin
        .clone()
        .unwrap_or_else(|| origin_now(args, None));
    let branch = args.branch.clone().or(origin.branch.clone());
    let run_id = results
        .run_id
        .clone()
        .unwrap_or_else(crate::results::run_id::fresh);
    let entry = RunEntry::of(results, &run_id, &origin, RecordedBy::Run);
    let by = accepter(None);
    let accepted: Vec<Acceptance> = entry
        .cases
        .iter()
        .filter(|c| c.status == crate::vocabulary::CaseStatus::Passed.as_str())
        .flat_map(|case| acceptances_of(&entry, case, branch.as_deref(), &by, reason))
        .collect();
    match history::open(&location, true).and_then(|mut store| store.accept(&accepted)) {
        Ok(()) => {
            write_stderr(&format!(
                "history: accepted the locked figures of {} case(s) as their ratchet in {} (\"{reason}\")",
                entry.cases.len(),
                location.describe()
            ));
            Ok(())
        }
        Err(error) => Err(CliError::Infrastructure(format!(
            "lock --accept: the lock was written, the acceptance was not: {error}"
        ))),
    }
}

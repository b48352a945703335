//! `oomgate merge`: the results of a suite's shards (`run --partition
//! M/N` on N CI runners) as the reports of one run.
//!
//! Every part is read and checked before anything is written (exit 2 for a
//! part that cannot be read, parts that overlap or are of other suites;
//! nothing is written then). The merged results come from
//! `results::merge`; this pipeline does the files around it: it claims the
//! out dir as `run` does, brings each case's folder under `OUT/cases/`
//! (hard links where the file system allows), takes the log tails from
//! each part's junit.xml — the part's run masked them with the secrets it
//! knew; the logs themselves are the workloads' unmasked bytes, which a
//! merge job must not copy into reports — and writes results.json,
//! junit.xml, summary.md and report.html through `report::outputs`, masked as
//! a run's are.

use std::path::{Component, Path, PathBuf};

use super::args::MergeArgs;
use super::shared::{CliError, Outcome, write_stderr};
use crate::files::claim_out_dir;
use crate::report::outputs::{ReportFiles, ReportPaths};
use crate::report::terminal::{Progress, Terminal};
use crate::report::{Event, Reporter};
use crate::results::merge::{Part, SuiteCases};
use crate::results::{CaseResult, RunResults};

/// A part as given, and where its files are.
struct Located {
    /// As given on the command line, for messages.
    given: PathBuf,
    /// The part's out dir: its results.json, junit.xml and cases/ are here.
    dir: PathBuf,
    results: PathBuf,
}

/// `oomgate merge DIR... --out OUT [--suite SUITE]`.
pub fn merge(args: &MergeArgs) -> Result<Outcome, CliError> {
    // The suite's secrets are masked in what is written, as in `run`.
    let suite = args
        .suite
        .as_deref()
        .map(|path| super::shared::load_suite(path, None))
        .transpose()?;
    let out_dir = std::path::absolute(&args.out).map_err(|e| {
        CliError::Infrastructure(format!("cannot resolve {}: {e}", args.out.display()))
    })?;
    let located: Vec<Located> = args
        .parts
        .iter()
        .map(|given| locate(given))
        .collect::<Result<_, _>>()?;
    refuse_repeated_parts(&located)?;
    for part in &located {
        refuse_out_dir_of_part(&args.out, part)?;
    }
    let mut parts = Vec::with_capacity(located.len());
    for part in &located {
        let mut read = read_part(part)?;
        // A file older than `failure_kind` (schema 2) says how its cases
        // failed only in words: the judge names the kind from its data.
        for case in &mut read.results.cases {
            if case.failure_kind.is_none() {
                case.failure_kind = crate::judge::failure_kind(case, None);
            }
        }
        parts.push(read);
    }
    // A suite's pytest cases are those its parts collected (recorded in
    // each part's results): the merge job needs no test environment.
    let mut ids: indexmap::IndexSet<String> = suite
        .iter()
        .flat_map(|s| s.cases.iter().map(|c| c.id.clone()))
        .collect();
    if suite.as_ref().is_some_and(|s| !s.pytest.is_empty()) {
        for part in &parts {
            ids.extend(part.results.pytest_cases.iter().cloned());
        }
    }
    let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
    let suite_cases = suite.as_ref().map(|s| SuiteCases {
        name: &s.name,
        path: &s.path,
        ids: &ids,
    });
    let mut notes = Vec::new();
    for (part, place) in parts.iter_mut().zip(&located) {
        take_tails(part, place, &mut notes);
    }
    // A part that ran another definition of a case than the suite's is
    // judged under the suite's, or not passed.
    if let Some(suite) = &suite {
        notes.extend(crate::results::merge::hold_to_definitions(
            &mut parts,
            &suite.cases,
            &suite.workdir,
            &suite.path,
            |case, result| {
                let verdict = crate::judge::judge_limits_again(case, result);
                crate::report::words::word_case(result, &verdict, None);
            },
        ));
    }
    // One case against another, judged on the merged cases: the suite's
    // rules, else every rule a part recorded (each part judged only those
    // whose sides both ran in it).
    let parities = match &suite {
        Some(suite) => suite.parity.clone(),
        None => {
            let recorded: Vec<&[crate::results::ParityResult]> =
                parts.iter().map(|p| p.results.parity.as_slice()).collect();
            crate::judge::recorded_parities(&recorded)
        }
    };
    let mut results = crate::results::merge::merge(parts, suite_cases)
        .map_err(|e| CliError::BadInput(e.to_string()))?;
    results.parity = crate::judge::judge_parity(&parities, &results.cases);
    crate::report::words::word_parities(&mut results.parity);

    // Held until the merged reports are written.
    let _claim = claim_out_dir(&out_dir, args.adopt.adopt_out_dir)?;
    super::outputs::clear_planted_links(&out_dir)?;
    let infrastructure = |e: std::io::Error| {
        CliError::Infrastructure(format!("cannot write to {}: {e}", out_dir.display()))
    };
    crate::files::own_folder(&out_dir.join("cases")).map_err(infrastructure)?;
    bring_case_folders(&results, &located, &out_dir, &mut notes)?;
    for case in &mut results.cases {
        read_probe_series(case, &out_dir);
    }
    notes.extend(crate::results::merge::unfinished_notes(&results.parts));
    notes.extend(crate::results::merge::partition_notes(&results.parts));
    for note in &notes {
        write_stderr(&format!("note: {note}"));
    }

    let mut files = ReportFiles::new(ReportPaths::in_out_dir(&out_dir));
    let finished = Event::RunFinished { results: &results };
    // The summary line's time is the sharded run's, first start to last end.
    let span = results.finished_at.as_deref().and_then(|end| {
        let time = |text: &str| chrono::DateTime::parse_from_rfc3339(text).ok();
        (time(end)? - time(&results.started_at)?).to_std().ok()
    });
    let terminal = Terminal::new(Progress::None);
    let mut terminal = match span {
        Some(span) => terminal.elapsed_before(span),
        None => terminal,
    };
    terminal.handle(&finished).ok();
    let pages = files.handle(&Event::RunFinishing { results: &results });
    let json = files.handle(&finished);
    super::outputs::say_replaced_links();
    pages.and(json).map_err(|e| {
        CliError::Infrastructure(format!("the merged reports were not all written: {e}"))
    })?;
    write_stderr(&format!(
        "merged {} part(s), {} case(s) of suite `{}`, into {}",
        results.parts.len(),
        results.cases.len() + results.not_run.len(),
        results.suite.name,
        args.out.display()
    ));
    super::history::record(
        &results,
        &super::history::Recording {
            args: &args.record,
            suite_history: suite.as_ref().and_then(|s| s.history.as_ref()),
            required: suite.as_ref().is_some_and(|s| s.history_required),
            by: crate::history::RecordedBy::Merge,
        },
    )?;
    Ok(outcome(&results))
}

/// What a merged run earns: the judge's verdict of the run
/// (`judge::run_verdict`), as `run`'s exit is. A part's fault or
/// interruption is history here, not this merge's own: it fails the gate
/// as a failed case does (1), as does a case not run (a shard interrupted,
/// killed, stopped by a write failure, or held by no part) and a killed
/// shard whatever its checkpoint holds.
fn outcome(results: &RunResults) -> Outcome {
    match crate::judge::run_verdict(results) {
        crate::judge::RunVerdict::Passed => Outcome::Passed,
        crate::judge::RunVerdict::CasesFailed
        | crate::judge::RunVerdict::Interrupted
        | crate::judge::RunVerdict::Faulted => Outcome::CasesFailed,
    }
}

/// A part's out dir and results.json from what was given: the folder, or
/// the results.json in it.
fn locate(given: &Path) -> Result<Located, CliError> {
    let bad = |why: String| CliError::BadInput(format!("part {}: {why}", given.display()));
    let meta = std::fs::metadata(given).map_err(|e| bad(e.to_string()))?;
    let (dir, results) = if meta.is_dir() {
        (given.to_path_buf(), given.join("results.json"))
    } else {
        let dir = crate::files::folder_of(given).to_path_buf();
        (dir, given.to_path_buf())
    };
    if !results.exists() {
        return Err(bad(format!(
            "no results.json in it ({}): give the out dir of a shard's `oomgate run`",
            results.display()
        )));
    }
    Ok(Located {
        given: given.to_path_buf(),
        dir,
        results,
    })
}

/// The same results given twice would overlap in every case: say so
/// plainly instead.
fn refuse_repeated_parts(parts: &[Located]) -> Result<(), CliError> {
    let mut seen: Vec<(PathBuf, &Path)> = Vec::new();
    for part in parts {
        let Ok(canonical) = std::fs::canonicalize(&part.results) else {
            continue;
        };
        if let Some((_, first)) = seen.iter().find(|(seen, _)| *seen == canonical) {
            return Err(CliError::BadInput(format!(
                "{} and {} are the same part: give each shard's out dir once",
                first.display(),
                part.given.display()
            )));
        }
        seen.push((canonical, &part.given));
    }
    Ok(())
}

/// The merged out dir must not be a part's, nor hold one: merging replaces
/// its reports and case folders.
fn refuse_out_dir_of_part(out_dir: &Path, part: &Located) -> Result<(), CliError> {
    // Canonical paths: `shards/1/.` and `./shards/1` are one folder.
    let (Ok(out), Ok(dir)) = (
        std::fs::canonicalize(out_dir),
        std::fs::canonicalize(&part.dir),
    ) else {
        return Ok(());
    };
    if dir.starts_with(&out) {
        return Err(CliError::BadInput(format!(
            "--out {} is, or holds, the part {}: the merge would overwrite the part it reads; choose another --out",
            out_dir.display(),
            part.given.display()
        )));
    }
    Ok(())
}

fn read_part(place: &Located) -> Result<Part, CliError> {
    let bad = |why: String| {
        CliError::BadInput(format!(
            "part {}: {}: {why}",
            place.given.display(),
            place.results.display()
        ))
    };
    let text = crate::files::read_input(
        &place.results,
        crate::files::MAX_RESULTS_BYTES,
        "a results file",
    )
    .map_err(|e| bad(e.to_string()))?;
    let part = crate::results::merge::read_part(place.given.clone(), &text)
        .map_err(|e| bad(e.to_string()))?;
    for case in &part.results.cases {
        if let Some(path) = unsafe_path(case) {
            return Err(bad(format!(
                "case `{}` names `{}`, which is not a path inside the out dir's cases/ folder",
                case.id,
                path.display()
            )));
        }
    }
    Ok(part)
}

/// A path of a case (its folder, timeline, logs) that does not stay
/// inside `cases/` of the out dir, if one does not: it is joined to the
/// merged out dir, so a hand-made results.json must not reach outside it.
fn unsafe_path(case: &CaseResult) -> Option<&Path> {
    let inside_cases = |path: &Path| {
        let mut components = path.components();
        components.next() == Some(Component::Normal("cases".as_ref()))
            && components.next().is_some()
            && path.components().all(|c| matches!(c, Component::Normal(_)))
    };
    let paths = [&case.dir, &case.timeline].into_iter().chain(
        case.instances
            .iter()
            .flat_map(|i| [&i.stdout_log, &i.stderr_log]),
    );
    // An empty path is a case with no files (it never started).
    paths
        .map(PathBuf::as_path)
        .find(|path| !path.as_os_str().is_empty() && !inside_cases(path))
}

/// The end of each case's stdout and stderr, from the part's junit.xml.
fn take_tails(part: &mut Part, place: &Located, notes: &mut Vec<String>) {
    if part.results.cases.is_empty() {
        return;
    }
    let path = place.dir.join("junit.xml");
    let read = crate::files::read_input(&path, crate::files::MAX_RESULTS_BYTES, "a JUnit file")
        .map_err(|e| e.to_string())
        .and_then(|xml| {
            crate::report::junit::read_tails(&xml, &mut part.results.cases)
                .map_err(|e| format!("not the XML of a junit.xml: {e}"))
        });
    match read {
        Ok(found) if found == part.results.cases.len() => {}
        Ok(found) => notes.push(format!(
            "{} has {found} of the part's {} cases: the others' log tails are left out of the reports",
            path.display(),
            part.results.cases.len()
        )),
        Err(why) => notes.push(format!(
            "cannot read {} ({why}): the log tails of part {} are left out of the reports",
            path.display(),
            place.given.display()
        )),
    }
}

/// Each case's folder from its part into the merged out dir. A part
/// without its case folders (only results.json was kept) merges still:
/// its cases have no charts, and a note says so once per part.
fn bring_case_folders(
    results: &RunResults,
    parts: &[Located],
    out_dir: &Path,
    notes: &mut Vec<String>,
) -> Result<(), CliError> {
    for (info, place) in results.parts.iter().zip(parts) {
        let mut missing = 0;
        for case in results
            .cases
            .iter()
            .filter(|c| info.cases.contains(&c.id) && !c.dir.as_os_str().is_empty())
        {
            match crate::files::link_or_copy_tree(
                &place.dir.join(&case.dir),
                &out_dir.join(&case.dir),
            ) {
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => missing += 1,
                Err(e) => {
                    return Err(CliError::Infrastructure(format!(
                        "cannot bring the folder of case `{}` into {}: {e}",
                        case.id,
                        out_dir.display()
                    )));
                }
            }
        }
        if missing > 0 {
            notes.push(format!(
                "{missing} case folder(s) of part {} are not in {}: their memory charts are left out of report.html",
                place.given.display(),
                place.dir.join("cases").display()
            ));
        }
    }
    Ok(())
}

/// The probe's per-step series (charted in report.html, not kept in
/// results.json), read again from the case's probe files; the figures
/// results.json holds stay as the run recorded them.
fn read_probe_series(case: &mut CaseResult, out_dir: &Path) {
    let Some(probe) = case.probe.as_mut() else {
        return;
    };
    let dir = out_dir.join(&case.dir);
    let reader = crate::probe::ProbeReader::new(
        case.instances
            .iter()
            .map(|i| {
                let logs = crate::files::case::InstanceLogs::for_instance(&dir, i.index);
                (i.index, logs.metrics)
            })
            .collect(),
    );
    if let Some(read) = reader.finish() {
        probe.series = read.series;
        probe.reserved_series = read.reserved_series;
    }
}

#[cfg(test)]
mod tests {
    use crate::results::{CheckKind, Facts, OrWritten, RunResults};

    /// `fixtures/results/schema-4-facts.json`: written by the schema-4
    /// judge and words, whose facts held some of the judge's words.
    fn schema_4() -> String {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("fixtures/results/schema-4-facts.json");
        std::fs::read_to_string(path).expect("fixture")
    }

    /// Every check worded again from its facts, against the words the
    /// file holds; how many were.
    fn words_as_written(results: &RunResults) -> usize {
        let mut worded = 0;
        for case in &results.cases {
            for check in &case.checks {
                assert!(check.facts.is_some(), "{}: {}", case.id, check.kind);
                assert_eq!(
                    crate::report::words::check_message(check),
                    check.message,
                    "{}: {}",
                    case.id,
                    check.kind
                );
                worded += 1;
            }
        }
        worded
    }

    /// A schema-4 part reads through the reader a merge, `diff` and
    /// `lock --from` share, and every check is worded from its facts as
    /// that oomgate worded it (a merge with `--suite` words them again);
    /// written again as this schema and read back, the same.
    #[test]
    fn a_schema_4_part_reads_and_words_as_it_was_written() {
        let text = schema_4();
        let part = crate::results::merge::read_part("shards/0".into(), &text).expect("part");
        assert_eq!(part.results.schema, 4);
        assert_eq!(words_as_written(&part.results), 22);
        // The words came from its facts, as they were written.
        let host = part.results.cases[0]
            .checks
            .iter()
            .find(|c| c.kind == CheckKind::HostBudget)
            .and_then(|c| c.facts.clone());
        assert!(
            matches!(
                host,
                Some(Facts::Budget { method: OrWritten::Written(ref words), .. }) if words == "vmhwm, cgroup-v1"
            ),
            "{host:?}"
        );

        let mut read =
            crate::results::readback::parse(&text).expect("diff and lock --from read it");
        // A part without a run id is given its content's.
        assert_eq!(read.run_id, None);
        assert_eq!(
            part.results.run_id,
            Some(crate::results::run_id::of_content(text.as_bytes()))
        );
        read.run_id.clone_from(&part.results.run_id);
        let value = |results: &RunResults| serde_json::to_value(results).expect("json");
        assert_eq!(value(&read), value(&part.results));
        let _ = crate::results::readback::lock_of(&read);

        let mut merged = read.clone();
        merged.schema = crate::results::SCHEMA_VERSION;
        let again = serde_json::to_string(&merged).expect("written");
        let again = crate::results::readback::parse(&again).expect("read again");
        assert_eq!(value(&again), value(&merged));
        assert_eq!(words_as_written(&again), 22);
    }
}

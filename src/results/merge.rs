//! Merging the results of a suite's shards (`oomgate run --partition M/N`
//! on N CI runners) into the results of one run: pure functions from
//! each part's [`RunResults`], read back from its results.json, to one
//! `RunResults` the report renderers take as they take a run's.
//!
//! A merged run records each part as it ran ([`PartInfo`]: its host,
//! times, partition, environment and measurement), since shards may run on
//! different machines; the top-level fields that describe one machine are
//! the first part's. Parts must not overlap (a case id in two parts), and
//! must be of one suite and one results schema: each is refused with the
//! parts named, since a merge that silently dropped or doubled a case
//! would gate on the wrong cases. With the suite, its cases that no part
//! holds are listed as not run, and the cases follow its order. A part
//! whose oomgate was killed left a checkpoint: its finished cases count,
//! and the cases it had in flight or never reached — its checkpoint names
//! every case it planned — are not run, so a killed shard merges red with
//! or without the suite.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

use crate::suite::Partition;

use super::{CaseResult, CaseStatus, PartInfo, RunResults, SCHEMA_VERSION, Summary};
use crate::baseline::Drift;

/// One shard's results, read back, and where they came from.
#[derive(Debug, Clone)]
pub struct Part {
    /// As given to `oomgate merge` (its out dir, `shards/2`).
    pub dir: PathBuf,
    pub results: RunResults,
    /// The shard it ran, from its results' `partition` (absent in results
    /// of an unpartitioned run, and of an oomgate without `--partition`).
    pub partition: Option<Partition>,
}

/// Why a results.json cannot be a part of a merge.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PartError {
    #[error("{0}")]
    NotResults(String),
    #[error(
        "results schema {found} is not one this oomgate reads (1 to {known}); merge with the oomgate that ran the shards"
    )]
    Schema { found: u32, known: u32 },
    #[error("these are merged results ({0} parts), not a shard's: merge the shards' own out dirs")]
    Merged(usize),
}

/// A part from the text of its results.json, read by the one reader
/// (`readback::parse`); the error says why it cannot be one (with serde's
/// line and column for a file that is not results).
pub fn read_part(dir: PathBuf, text: &str) -> Result<Part, PartError> {
    let mut results = super::readback::parse(text).map_err(|e| match e {
        super::readback::ReadError::Schema { found, known } => PartError::Schema { found, known },
        other => PartError::NotResults(other.to_string()),
    })?;
    if let Some(parts) = results.merged_from {
        return Err(PartError::Merged(parts));
    }
    // Results from before run ids: the id of their content.
    if results.run_id.is_none() {
        results.run_id = Some(super::run_id::of_content(text.as_bytes()));
    }
    Ok(Part {
        dir,
        partition: results.partition,
        results,
    })
}

/// A part as a merge takes it: a case its oomgate did not finish (listed
/// `running` in a checkpoint) is not run, and so is every case a killed
/// oomgate's checkpoint planned (`planned_cases`) but never reached. A
/// merge must never pass a shard's cases it did not see finish.
fn settle_unfinished(results: &mut RunResults) {
    let (running, finished): (Vec<CaseResult>, Vec<CaseResult>) =
        std::mem::take(&mut results.cases)
            .into_iter()
            .partition(|case| case.status == CaseStatus::Running);
    results.cases = finished;
    let planned = std::mem::take(&mut results.planned_cases);
    let mut unfinished: HashSet<String> = running.into_iter().map(|case| case.id).collect();
    if results.finished_at.is_none() {
        let held: HashSet<&str> = results
            .cases
            .iter()
            .map(|c| c.id.as_str())
            .chain(results.not_run.iter().map(String::as_str))
            .collect();
        let missing: Vec<String> = planned
            .iter()
            .filter(|id| !held.contains(id.as_str()))
            .cloned()
            .collect();
        unfinished.extend(missing);
    }
    // In the planned order where the checkpoint gave it; a case in flight
    // it did not plan (a hand-made file) after them.
    for id in &planned {
        if unfinished.remove(id) {
            results.not_run.push(id.clone());
        }
    }
    let mut rest: Vec<String> = unfinished.into_iter().collect();
    rest.sort_unstable();
    results.not_run.extend(rest);
}

/// The suite the parts ran, when `oomgate merge` is given it: its name and
/// its case ids in order.
#[derive(Debug, Clone, Copy)]
pub struct SuiteCases<'a> {
    pub name: &'a str,
    pub path: &'a Path,
    pub ids: &'a [&'a str],
}

/// Each part's cases held to the suite's definitions of them (`cases`,
/// `workdir` the suite's; `suite` names it in words), before the parts are
/// merged: a merge never passes a case its part ran under another
/// definition. Where only limits a part's figures can be judged under
/// differ ([`super::definition::judged_again`]: budgets, probe limits), a case
/// that passed is judged again under the suite's by `judge_again` (the
/// caller's: `judge::judge_limits_again`, then its words — the model
/// decides and words nothing);
/// one that did not pass stays as it ran, since its run may have been
/// stopped at its old limit. Any other difference — what runs, the
/// tolerances, a definition its results do not record — fails the case as
/// `other-definition`, naming what differs. A case the suite does not
/// define (a `[[pytest]]` test, collected on the runners) is not held.
/// Returns one note per case held, for the merge to say.
pub fn hold_to_definitions(
    parts: &mut [Part],
    cases: &[crate::suite::Case],
    workdir: &Path,
    suite: &Path,
    judge_again: impl Fn(&crate::suite::Case, &mut CaseResult),
) -> Vec<String> {
    let defined: HashMap<&str, &crate::suite::Case> =
        cases.iter().map(|c| (c.id.as_str(), c)).collect();
    let mut notes = Vec::new();
    for part in parts {
        let name = PartInfo::name_of(&part.dir, part.partition.as_ref());
        for result in &mut part.results.cases {
            if result.status == CaseStatus::Running {
                continue;
            }
            let Some(case) = defined.get(result.id.as_str()) else {
                continue;
            };
            let now = super::definition::of(case, workdir);
            let differ = super::definition::differences(&result.definition, &now);
            if differ.is_empty() {
                continue;
            }
            let what = if result.definition.is_empty() {
                "its results record no definition (written by another oomgate?)".to_string()
            } else {
                let verb = if differ.len() == 1 {
                    "differs"
                } else {
                    "differ"
                };
                format!("its {} {verb}", differ.join(", "))
            };
            let judged_again = !result.definition.is_empty()
                && differ.iter().all(|d| super::definition::judged_again(d));
            if judged_again && result.status == CaseStatus::Passed {
                judge_again(case, result);
                notes.push(format!(
                    "case `{}` of part {name} ran under other limits than {} ({what}): judged again under the suite's, it {}",
                    result.id,
                    suite.display(),
                    match result.status {
                        CaseStatus::Passed => "passes",
                        _ => "fails",
                    }
                ));
            } else if judged_again {
                notes.push(format!(
                    "case `{}` of part {name} ran under other limits than {} ({what}): not judged again, since its run did not pass under its own",
                    result.id,
                    suite.display()
                ));
            } else {
                let message = format!(
                    "ran another definition of the case than {}: {what}; run it again with this suite",
                    suite.display()
                );
                notes.push(format!("case `{}` of part {name} {message}", result.id));
                if result.status != CaseStatus::Interrupted {
                    result.status = CaseStatus::Failed;
                    result.failure_kind = Some(crate::vocabulary::FailureType::OtherDefinition);
                }
                result.message = Some(match result.message.take() {
                    Some(before) => format!("{message} (as it ran: {before})"),
                    None => message,
                });
            }
        }
    }
    notes
}

/// Why parts cannot be merged. Each names the parts (as given) it is about.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MergeError {
    #[error(
        "case `{id}` is in two parts, {first} and {second}: each case must come from one shard (a part given twice, or shards of different partitions?)"
    )]
    Overlap {
        id: String,
        first: String,
        second: String,
    },
    #[error(
        "{first} holds results of suite `{first_suite}`, {second} of suite `{second_suite}`: merge the shards of one suite"
    )]
    Suites {
        first: String,
        first_suite: String,
        second: String,
        second_suite: String,
    },
    #[error(
        "{first} has results schema {first_schema}, {second} schema {second_schema}: merge shards that one oomgate version ran"
    )]
    Schemas {
        first: String,
        first_schema: u32,
        second: String,
        second_schema: u32,
    },
    #[error("{part} holds results of suite `{found}`, not of `{expected}` ({path})")]
    NotThisSuite {
        part: String,
        found: String,
        expected: String,
        path: PathBuf,
    },
    #[error(
        "{part} has cases suite `{suite}` ({path}) does not: {ids}; merge with the suite the shards ran"
    )]
    UnknownCases {
        part: String,
        suite: String,
        path: PathBuf,
        ids: String,
    },
    #[error(
        "case `{first_id}` of {first} and case `{second_id}` of {second} have the same folder `{dir}`"
    )]
    SameFolder {
        dir: PathBuf,
        first_id: String,
        first: String,
        second_id: String,
        second: String,
    },
    #[error("no parts to merge")]
    NoParts,
}

/// One set of results from the parts, in the order given. The parts must
/// be of one suite and one schema, and no case may be in two of them.
/// With `suite`, every part's cases must be the suite's; the cases follow
/// the suite's order, and those no part holds are `not_run`. Without it,
/// the cases are in part order. A part whose run did not end (its
/// results.json a checkpoint of a killed oomgate) gives its finished
/// cases; the one it had in flight and those it planned but never reached
/// are `not_run`.
pub fn merge(parts: Vec<Part>, suite: Option<SuiteCases<'_>>) -> Result<RunResults, MergeError> {
    let parts: Vec<Part> = parts
        .into_iter()
        .map(|mut part| {
            settle_unfinished(&mut part.results);
            part
        })
        .collect();
    check_parts(&parts, suite)?;
    let infos: Vec<PartInfo> = parts.iter().map(part_info).collect();
    let run_id = super::run_id::of_parts(parts.iter().filter_map(|p| p.results.run_id.as_deref()));
    let mut parts = parts.into_iter();
    let Some(first) = parts.next() else {
        return Err(MergeError::NoParts);
    };
    let mut merged = first.results;
    // A merged run is no one shard: each part keeps its own in `parts`.
    merged.partition = None;
    let mut planned = merged.summary.planned;
    for part in parts {
        let results = part.results;
        planned += results.summary.planned;
        merged.started_at = earliest(&merged.started_at, &results.started_at);
        merged.finished_at = match (merged.finished_at.take(), results.finished_at) {
            (Some(a), Some(b)) => Some(latest(&a, &b)),
            // A part whose shard never finished leaves the run unfinished.
            _ => None,
        };
        merged.interrupted |= results.interrupted;
        merged.fault = merged.fault.or(results.fault);
        merged.baseline = merged.baseline.or(results.baseline);
        merged.runner_max_rss_bytes = merged
            .runner_max_rss_bytes
            .max(results.runner_max_rss_bytes);
        merged.runner_cpu_s = match (merged.runner_cpu_s, results.runner_cpu_s) {
            (Some(a), Some(b)) => Some(a + b),
            (a, b) => a.or(b),
        };
        merged.cases.extend(results.cases);
        merged.not_run.extend(results.not_run);
    }
    if let Some(suite) = suite {
        let position: HashMap<&str, usize> = suite
            .ids
            .iter()
            .enumerate()
            .map(|(i, id)| (*id, i))
            .collect();
        let at = |id: &str| position.get(id).copied().unwrap_or(usize::MAX);
        // Stable: a case the suite has twice (it cannot) keeps part order.
        merged.cases.sort_by_key(|case| at(&case.id));
        let held: std::collections::HashSet<&str> = merged
            .cases
            .iter()
            .map(|c| c.id.as_str())
            .chain(merged.not_run.iter().map(String::as_str))
            .collect();
        let missing: Vec<String> = suite
            .ids
            .iter()
            .filter(|id| !held.contains(**id))
            .map(|id| id.to_string())
            .collect();
        planned += missing.len();
        merged.not_run.extend(missing);
        merged.not_run.sort_by_key(|id| at(id));
    }
    merged.planned_cases = Vec::new();
    merged.schema = SCHEMA_VERSION;
    merged.run_id = Some(run_id);
    merged.oomgate_version = env!("CARGO_PKG_VERSION").to_string();
    merged.summary = Summary {
        planned,
        ..Summary::default()
    };
    for case in &merged.cases {
        merged.summary.add(case);
    }
    merged.merged_from = Some(infos.len());
    merged.parts = infos;
    Ok(merged)
}

fn check_parts(parts: &[Part], suite: Option<SuiteCases<'_>>) -> Result<(), MergeError> {
    let name = |part: &Part| PartInfo::name_of(&part.dir, part.partition.as_ref());
    let Some(first) = parts.first() else {
        return Ok(());
    };
    for part in &parts[1..] {
        if part.results.suite.name != first.results.suite.name {
            return Err(MergeError::Suites {
                first: name(first),
                first_suite: first.results.suite.name.clone(),
                second: name(part),
                second_suite: part.results.suite.name.clone(),
            });
        }
        if part.results.schema != first.results.schema {
            return Err(MergeError::Schemas {
                first: name(first),
                first_schema: first.results.schema,
                second: name(part),
                second_schema: part.results.schema,
            });
        }
    }
    if let Some(suite) = suite {
        for part in parts {
            if part.results.suite.name != suite.name {
                return Err(MergeError::NotThisSuite {
                    part: name(part),
                    found: part.results.suite.name.clone(),
                    expected: suite.name.to_string(),
                    path: suite.path.to_path_buf(),
                });
            }
            let unknown: Vec<&str> = held(part).filter(|id| !suite.ids.contains(id)).collect();
            if !unknown.is_empty() {
                return Err(MergeError::UnknownCases {
                    part: name(part),
                    suite: suite.name.to_string(),
                    path: suite.path.to_path_buf(),
                    ids: unknown.join(", "),
                });
            }
        }
    }
    let mut owner: HashMap<&str, &Part> = HashMap::new();
    let mut folders: HashMap<&Path, (&str, &Part)> = HashMap::new();
    for part in parts {
        for id in held(part) {
            if let Some(other) = owner.insert(id, part) {
                return Err(MergeError::Overlap {
                    id: id.to_string(),
                    first: name(other),
                    second: name(part),
                });
            }
        }
        // A case with no folder (it never started) shares none.
        for case in part
            .results
            .cases
            .iter()
            .filter(|c| !c.dir.as_os_str().is_empty())
        {
            if let Some((other_id, other)) = folders.insert(&case.dir, (&case.id, part)) {
                return Err(MergeError::SameFolder {
                    dir: case.dir.clone(),
                    first_id: other_id.to_string(),
                    first: name(other),
                    second_id: case.id.clone(),
                    second: name(part),
                });
            }
        }
    }
    Ok(())
}

/// Every case a part holds: those it ran and those it planned but did not.
fn held(part: &Part) -> impl Iterator<Item = &str> {
    part.results
        .cases
        .iter()
        .map(|c| c.id.as_str())
        .chain(part.results.not_run.iter().map(String::as_str))
}

fn part_info(part: &Part) -> PartInfo {
    let results = &part.results;
    PartInfo {
        dir: part.dir.clone(),
        host: results.host.clone(),
        started_at: results.started_at.clone(),
        finished_at: results.finished_at.clone(),
        partition: part.partition,
        environment: results.environment.clone(),
        measurement: results.measurement.clone(),
        gpu: results.gpu.clone(),
        interrupted: results.interrupted,
        fault: results.fault.clone(),
        summary: results.summary,
        cases: results.cases.iter().map(|c| c.id.clone()).collect(),
        not_run: results.not_run.clone(),
    }
}

/// The earlier of two RFC 3339 times (as written: offsets may differ); a
/// time that does not parse loses to one that does.
fn earliest(a: &str, b: &str) -> String {
    pick(a, b, std::cmp::Ordering::Less)
}

fn latest(a: &str, b: &str) -> String {
    pick(a, b, std::cmp::Ordering::Greater)
}

fn pick(a: &str, b: &str, wanted: std::cmp::Ordering) -> String {
    let parse = |text: &str| chrono::DateTime::parse_from_rfc3339(text).ok();
    match (parse(a), parse(b)) {
        (Some(x), Some(y)) if y.cmp(&x) == wanted => b.to_string(),
        (None, Some(_)) => b.to_string(),
        _ => a.to_string(),
    }
}

/// What the parts' recorded partitions say is wrong with the set: shards
/// of different splits (kind or total), a shard given twice, or shards of
/// the split that are not among the parts. Parts without a partition say
/// nothing. Notes, not refusals: a missing shard's cases fail the gate
/// only when the suite is given (they are then not run), and a merge of
/// some shards on purpose is no mistake.
pub fn partition_notes(parts: &[PartInfo]) -> Vec<String> {
    let recorded: Vec<(&PartInfo, &Partition)> = parts
        .iter()
        .filter_map(|part| Some((part, part.partition.as_ref()?)))
        .collect();
    let Some((first_part, first)) = recorded.first() else {
        return Vec::new();
    };
    let mut notes = Vec::new();
    if let Some((other, split)) = recorded
        .iter()
        .find(|(_, p)| p.kind != first.kind || p.total != first.total)
    {
        notes.push(format!(
            "the parts are shards of different splits: {} and {} ({split}); each shard of one split runs its cases once, shards of two do not",
            first_part.name(),
            other.dir.display()
        ));
        return notes;
    }
    let mut seen = std::collections::BTreeSet::new();
    for (part, partition) in &recorded {
        if !seen.insert(partition.index) {
            notes.push(format!(
                "shard {} is given twice ({} is one of them)",
                partition,
                part.dir.display()
            ));
        }
    }
    let missing: Vec<String> = (1..=first.total)
        .filter(|index| !seen.contains(index))
        .map(|index| index.to_string())
        .collect();
    if !missing.is_empty() {
        notes.push(format!(
            "the parts are {} of the {} shards of {}:M/{}: shard(s) {} missing; with --suite their cases are listed as not run",
            seen.len(),
            first.total,
            first.kind,
            first.total,
            missing.join(", ")
        ));
    }
    notes
}

/// What the merge says of each part whose run did not end (no
/// `finished_at`: its oomgate was killed and its results.json is a
/// checkpoint): how many of its cases are not run, and how many it
/// planned without naming them (a checkpoint of an oomgate that did not
/// name its planned cases), which only the suite can list.
pub fn unfinished_notes(parts: &[PartInfo]) -> Vec<String> {
    parts
        .iter()
        .filter(|part| part.finished_at.is_none() && !part.interrupted && part.fault.is_none())
        .map(|part| {
            let mut note = format!(
                "part {} did not finish (its results.json has no finished_at: its oomgate was killed?): {} finished case(s) kept, {} listed as not run",
                part.name(),
                part.cases.len(),
                part.not_run.len()
            );
            let unnamed = part
                .summary
                .planned
                .saturating_sub(part.cases.len() + part.not_run.len());
            if unnamed > 0 {
                note.push_str(&format!(
                    "; {unnamed} more case(s) it planned are not named in it: give --suite to list them as not run"
                ));
            }
            note
        })
        .collect()
}

/// How one part's environment differs from the first part's, for the
/// reports of a merged run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartDrift {
    /// The part, as [`PartInfo::name`] says it.
    pub part: String,
    pub drift: Vec<Drift>,
}

/// Every part after the first whose environment differs from the first
/// part's, with the differences (as `baseline::drift` lists them against a
/// lock); empty when every part ran in the same environment.
pub fn part_drift(results: &RunResults) -> Vec<PartDrift> {
    let Some((first, rest)) = results.parts.split_first() else {
        return Vec::new();
    };
    rest.iter()
        .filter_map(|part| {
            let drift = crate::baseline::drift::drift(&first.environment, &part.environment);
            (!drift.is_empty()).then(|| PartDrift {
                part: part.name(),
                drift,
            })
        })
        .collect()
}

/// Why the figures of a merged run's parts are not comparable (different
/// GPU models, host memory measured by methods that count different
/// pages), one line each; empty when they are. `oomgate lock --from`
/// refuses such a run (see `readback::incomparable_parts`).
pub fn incomparable_parts(results: &RunResults) -> Vec<String> {
    super::readback::incomparable(results, true)
}

#[cfg(test)]
mod tests;

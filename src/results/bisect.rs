//! What a bisect found, as data (`oomgate bisect`, `crate::bisect`): each
//! candidate's run and verdict, the steps found and why, the counts.
//! Below the reports that word it (`report::bisect`: the terminal,
//! bisect.md, bisect.json) and the bisect that makes it.

use std::path::PathBuf;

use serde::Serialize;

/// What one candidate's run says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Verdict {
    /// Its figures stay within the good end's, and no memory check failed.
    Good,
    /// A memory check failed against the good end, a budget or a limit,
    /// or it ran out of memory.
    Bad,
    /// It could not be judged (`git bisect`'s skip).
    Skip,
}

/// Which axis a bisect searched.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Axis {
    Commits,
    Versions,
    PackageSet,
}

/// What a step was in the search.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Role {
    GoodEnd,
    BadEnd,
    Step,
}

/// One candidate: a commit, a version, a set of package changes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Candidate {
    /// Its full name: a commit's whole hash, a version, the set's pins
    /// (`torch==2.10.0 triton==3.5.0`).
    pub id: String,
    /// As the terminal shows it: 12 characters of a hash, a version.
    pub label: String,
    /// A commit's subject line.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub subject: String,
}

/// Where a step not run now came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Taken {
    /// The bisect in the same folder, continued (`--resume`).
    Resumed,
    /// The run history (`--history`): a bisect before ran it.
    History,
}

/// One run of a candidate, as the judge left it.
#[derive(Debug, Clone, Serialize)]
pub struct Step {
    pub candidate: Candidate,
    pub role: Role,
    pub verdict: Verdict,
    /// Why it cannot be told or is bad without a failed check (the
    /// judge's words: an OOM, a crash), or why it did not run (does not
    /// build, install or start).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The memory check that made it bad, as results.json writes checks.
    #[serde(rename = "failed_check", skip_serializing_if = "Option::is_none")]
    pub check: Option<crate::results::Check>,
    /// The gated host peak (results.json's `host_peak_bytes`); `None`
    /// where the run measured none.
    pub host_peak_bytes: Option<u64>,
    /// How it was measured: the floor that set it (`cgroup-anon-shmem`,
    /// `vmhwm`, `rusage-maxrss`, …), results.json's `host_peak_source`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host_peak_source: Option<String>,
    /// The gated GPU peak, and its method (results.json's
    /// `gpu_peak_method`: `nvml-process`, `accounting`, …).
    pub gpu_peak_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpu_peak_method: Option<String>,
    /// The case's folder of this run (logs, timeline, snapshots).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub case_folder: Option<PathBuf>,
    /// Not run now: taken from the bisect resumed, or the history.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub taken_from: Option<Taken>,
    /// The run's case and environment, for the answer's why.
    #[serde(skip)]
    pub ran: Option<Box<Ran>>,
    /// The exit code of `oomgate run` for a run made now (3: it could
    /// not run at all here, which `--check` reports as a broken
    /// environment, not as this commit's answer).
    #[serde(skip)]
    pub exit_code: Option<i32>,
}

impl Step {
    /// A candidate not judged (yet): no figure, no reason.
    pub fn unjudged(candidate: &Candidate, role: Role) -> Step {
        Step {
            candidate: candidate.clone(),
            role,
            verdict: Verdict::Skip,
            reason: None,
            check: None,
            host_peak_bytes: None,
            host_peak_source: None,
            gpu_peak_bytes: None,
            gpu_peak_method: None,
            case_folder: None,
            taken_from: None,
            ran: None,
            exit_code: None,
        }
    }

    /// Why it is bad or cannot be told, in the judge's words (a check's
    /// own message, when it has been worded).
    pub fn why(&self) -> Option<&str> {
        self.reason
            .as_deref()
            .or_else(|| self.check.as_ref().map(|c| c.message.as_str()))
            .filter(|w| !w.is_empty())
    }
}

/// What a step's run left: its case's result, and the environment.
#[derive(Debug, Clone)]
pub struct Ran {
    pub case: crate::results::CaseResult,
    pub environment: crate::environment::Environment,
}

/// A step found: the last good and first bad candidate, and why.
#[derive(Debug, Clone, Serialize)]
pub struct Finding {
    pub last_good: Step,
    pub first_bad: Step,
    /// Candidates between the two that could not be judged: when any,
    /// the first bad is one of them or `first_bad`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub maybe_first_bad: Vec<Candidate>,
    /// The environment's changes from one to the other.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub drift: Vec<String>,
    /// The allocation sites that grew, when the case writes torch
    /// memory snapshots.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sites: Option<String>,
    /// What restores the good figure: a pin, for the package axes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub restore: Option<String>,
}

/// How a bisect ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Ending {
    /// The first bad candidate is known.
    Found,
    /// The bad end does not fail against the good end here.
    NotReproducible,
    /// The first bad is one of several that could not be judged.
    Undecided,
    Interrupted,
}

/// A bisect's answer and its record.
#[derive(Debug, Clone, Serialize)]
pub struct Bisected {
    pub axis: Axis,
    pub suite: PathBuf,
    pub case: String,
    /// The package bisected (the versions axis).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub package: Option<String>,
    pub ending: Ending,
    /// Every step found (one without `--all-steps`), in order.
    pub findings: Vec<Finding>,
    /// Every run, in the order made (ends first).
    pub steps: Vec<Step>,
    /// Runs made by this bisect (steps taken from a resumed one are not).
    pub runs: usize,
    /// Rounds of runs: with a GPU pool, a round runs up to `slots`
    /// candidates at once; without one, each run is a round.
    pub rounds: usize,
    /// Candidates run at once (the GPU pool's slots; 1 without a pool).
    pub slots: usize,
    /// Candidates strictly between the ends.
    pub candidates: usize,
    /// ⌈log2⌉ of what a binary search had to tell apart: the most runs
    /// between the ends it needs when nothing is skipped.
    pub bound: u32,
    pub out: PathBuf,
}

//! `oomgate bisect`: which commit, which package version or which set of
//! package changes made a case grow.
//!
//! Three axes, one way through: the candidates of an axis (`commits`:
//! a git range, each in a worktree of its own; `versions`: one package's
//! versions from the index, installed in turn into one virtual
//! environment; `sets`: subsets of the package changes between two runs)
//! are prepared one at a time and the case is run there by `oomgate run`
//! itself (the same runner, the same judge), judged against a lock made
//! from the good end's run. [`verdict::classify`] reads the judge's
//! verdict as good, bad or cannot-tell; [`search`] chooses the next
//! candidate (binary search, or delta debugging over a set). Both ends
//! are proved first: a bad end that passes against the good end's lock
//! stops the bisect as not reproducible here. What a bisect found is
//! results data (`crate::results::bisect`), worded in
//! `crate::report::bisect`; the command line is in `crate::cli`.

mod axis;
mod cache;
mod commits;
mod drive;
mod folder;
pub mod git;
mod packages;
pub mod pip;
pub mod search;
mod spawn;
pub mod verdict;

use std::ffi::OsString;
use std::path::PathBuf;

pub use crate::results::bisect::{
    Axis, Bisected, Candidate, Ending, Finding, Ran, Role, Step, Taken, Verdict,
};
pub use axis::Progress;
pub use cache::Cache;
pub use drive::{bisect, check, run_flags};
pub use folder::{MARKER, TEMP_PREFIX};

/// What a bisect is asked.
#[derive(Debug, Clone)]
pub struct Options {
    /// The suite, as the user named it.
    pub suite: PathBuf,
    /// The case's id (exactly).
    pub case: String,
    /// The bisect's folder: steps, logs, worktrees, the environment.
    pub out: PathBuf,
    /// Each candidate (and each end) at least this many times.
    pub repeat: Option<u32>,
    /// Take the steps a bisect in `out` already ran.
    pub resume: bool,
    /// Flags handed to each `oomgate run` (`--gpu`, `--host-method`).
    pub run_flags: Vec<OsString>,
    /// With a GPU pool: each slot's GPUs (`0,1`), handed to a run as
    /// `--gpus`; commits run as many at once as there are slots.
    pub gpu_slots: Vec<String>,
}

/// Where to look.
#[derive(Debug, Clone)]
pub enum Range {
    /// The commits after `good` up to `bad`.
    Commits {
        good: String,
        bad: String,
        /// A shell command run in each candidate's worktree first.
        build: Option<String>,
        /// Every commit of the range, not only first parents.
        all_parents: bool,
        all_steps: bool,
    },
    /// One package's versions from `good` to `bad`.
    Versions {
        package: String,
        good: String,
        bad: String,
        index: pip::Index,
        /// Pin every other package as this run recorded it.
        pins_from: Option<PathBuf>,
        all_steps: bool,
    },
    /// The package changes between two runs' recorded environments.
    Sets {
        good_run: PathBuf,
        bad_run: PathBuf,
        index: pip::Index,
    },
}

/// Why a bisect stopped early.
#[derive(Debug, thiserror::Error)]
pub enum BisectError {
    /// The user's input is wrong, or the ends are not what they were
    /// said to be: nothing to bisect.
    #[error("{0}")]
    BadInput(String),
    /// oomgate's surroundings failed it: git, the out dir.
    #[error("{0}")]
    Infrastructure(String),
    #[error("interrupted")]
    Interrupted,
}

//! What an axis is: a way of making candidate `at` ready to run (a
//! worktree built, packages installed) and undoing it, where the case
//! then runs (`Place`), and what a driver tells whoever watches
//! (`Progress`). Below the driver and the axes alike.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::spawn::{Ended, run_logged, tail};
use super::{BisectError, Candidate, Step};
use crate::run::Interrupt;

/// What a driver tells whoever watches: each step as it is judged, and
/// short notes (a worktree made, a build that failed).
pub trait Progress {
    fn step(&mut self, step: &Step, good_end: Option<&Step>);
    fn note(&mut self, text: &str);
    /// The bisect's folder is this bisect's now: a log may be kept there.
    fn claimed(&mut self, out: &Path);
}

/// Where and how one candidate runs.
pub(super) struct Place {
    pub(super) cwd: PathBuf,
    pub(super) suite: PathBuf,
    /// The interpreter to run the suite with (`--python`), first on PATH.
    pub(super) python: Option<PathBuf>,
}

/// A candidate made ready, or why it cannot be judged.
pub(super) enum Prepared {
    Ready(Place),
    Skip(String),
}

/// An axis's way of making a candidate ready, and of undoing it.
pub(super) trait Prepare {
    /// What candidate `at` is, for the history's key: a commit with its
    /// suite and build, a version, a set of pins.
    fn identity(&self, at: usize) -> String;
    /// What every candidate runs in, for the history's key.
    fn environment(&self) -> String;
    /// Whether several candidates can be made ready at once (each
    /// commit has its worktree; the package axes share one environment).
    fn parallel(&self) -> bool {
        false
    }
    fn prepare(
        &mut self,
        at: usize,
        folder: &Path,
        interrupt: &Interrupt,
    ) -> Result<Prepared, BisectError>;
    fn release(&mut self, at: usize);
    /// Remove what it made (worktrees, the environment).
    fn clean_up(&mut self);
}

/// What both linear axes share: their candidates, in order.
pub(super) trait PrepareLinear: Prepare {
    fn candidates(&self) -> &[Candidate];
    fn as_prepare(&mut self) -> &mut dyn Prepare;
}

/// `what`, and the last lines of `log` when it has any.
pub(super) fn with_tail(what: String, log: &Path) -> String {
    match tail(log, 2, &[]) {
        last if last.is_empty() => what,
        last => format!("{what}: {last}"),
    }
}

/// Run `build` with `sh -c` in `dir`, its output in `folder/build.log`;
/// why the candidate cannot be judged when it fails.
pub(super) fn build_in(
    dir: &Path,
    build: &str,
    folder: &Path,
    interrupt: &Interrupt,
) -> Result<Option<String>, BisectError> {
    std::fs::create_dir_all(folder).map_err(|e| {
        BisectError::Infrastructure(format!("cannot make {}: {e}", folder.display()))
    })?;
    let log = folder.join("build.log");
    let mut command = Command::new("sh");
    command.arg("-c").arg(build).current_dir(dir);
    match run_logged(command, &log, interrupt) {
        Ok(Ended::Exited(0)) => Ok(None),
        Ok(Ended::Interrupted) => Err(BisectError::Interrupted),
        Ok(Ended::Exited(code)) => Ok(Some(with_tail(
            format!("does not build (--build exited with code {code})"),
            &log,
        ))),
        Err(e) => Ok(Some(format!("cannot run --build: {e}"))),
    }
}

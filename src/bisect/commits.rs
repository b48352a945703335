//! The commits axis: each commit of the range checked out in a worktree
//! of its own under the bisect's folder, built there, and its suite run.

use std::path::{Path, PathBuf};

use super::axis::{Place, Prepare, PrepareLinear, Prepared, build_in};
use super::git::{Repo, short};
use super::{BisectError, Candidate, Options};
use crate::run::Interrupt;

/// The commits axis: a worktree per candidate, outside the checkout.
pub(super) struct Commits {
    repo: Repo,
    /// The suite's path inside the repository.
    suite: PathBuf,
    build: Option<String>,
    worktrees: PathBuf,
    candidates: Vec<Candidate>,
    made: Vec<PathBuf>,
    /// The user's suite, whose interpreter's packages are what every
    /// commit runs with (asked only when a history keeps steps).
    user_suite: PathBuf,
}

impl Commits {
    pub(super) fn new(
        options: &Options,
        repo: Repo,
        good: &str,
        bad: &str,
        build: Option<String>,
        all_parents: bool,
    ) -> Result<Commits, BisectError> {
        let absolute = std::path::absolute(&options.suite)
            .map_err(|e| BisectError::BadInput(format!("{}: {e}", options.suite.display())))?;
        let top = repo.top.canonicalize().unwrap_or_else(|_| repo.top.clone());
        let folder = absolute
            .parent()
            .and_then(|p| p.canonicalize().ok())
            .unwrap_or_default();
        let suite = folder
            .strip_prefix(&top)
            .map(|p| p.join(absolute.file_name().unwrap_or_default()))
            .map_err(|_| {
                BisectError::BadInput(format!(
                    "{} is not inside the repository {}",
                    options.suite.display(),
                    repo.top.display()
                ))
            })?;
        // Worktrees go in the bisect's folder: never inside the checkout.
        let out = std::path::absolute(&options.out).unwrap_or_else(|_| options.out.clone());
        let out_parent = out.parent().and_then(|p| p.canonicalize().ok());
        if out_parent.is_some_and(|p| p.starts_with(&top)) {
            return Err(BisectError::BadInput(format!(
                "--out {} is inside the repository {}: its worktrees would be written into your checkout; choose a folder outside it",
                options.out.display(),
                repo.top.display()
            )));
        }
        let good_sha = repo.commit(good).map_err(BisectError::BadInput)?;
        let bad_sha = repo.commit(bad).map_err(BisectError::BadInput)?;
        if good_sha == bad_sha {
            return Err(BisectError::BadInput(format!(
                "--good {good} and --bad {bad} are the same commit"
            )));
        }
        if !repo.is_ancestor(&good_sha, &bad_sha) {
            return Err(BisectError::BadInput(format!(
                "--good {good} is not an ancestor of --bad {bad}: a bisect goes forward from the good one"
            )));
        }
        let range = repo
            .range(&good_sha, &bad_sha, all_parents)
            .map_err(BisectError::Infrastructure)?;
        let mut candidates = vec![Candidate {
            label: short(&good_sha).to_string(),
            subject: repo.subject(&good_sha),
            id: good_sha,
        }];
        candidates.extend(range.into_iter().map(|c| Candidate {
            label: short(&c.sha).to_string(),
            id: c.sha,
            subject: c.subject,
        }));
        // Along first parents the range is a line only when the good end
        // is on the bad end's first-parent chain: the first candidate's
        // first parent is the good end then.
        let on_the_line = all_parents
            || candidates.get(1).is_some_and(|first| {
                repo.first_parent(&first.id).as_deref() == Some(candidates[0].id.as_str())
            });
        if !on_the_line || candidates.last().map(|c| c.id.as_str()) != Some(bad_sha.as_str()) {
            return Err(BisectError::BadInput(format!(
                "--bad {bad} is not reached along first parents from --good {good}; try --all-parents"
            )));
        }
        Ok(Commits {
            repo,
            suite,
            build,
            worktrees: options.out.join("worktrees"),
            candidates,
            made: Vec::new(),
            user_suite: options.suite.clone(),
        })
    }

    pub(super) fn repo(&self) -> &Repo {
        &self.repo
    }

    fn worktree(&self, at: usize) -> PathBuf {
        self.worktrees.join(&self.candidates[at].label)
    }

    /// An interpreter the suite names by a path inside the repository
    /// that this commit lacks (an untracked `.venv`): linked to the
    /// user's checkout's, which is read, never written.
    fn link_untracked(&self, worktree: &Path, suite: &Path) -> Vec<String> {
        let Ok(loaded) = crate::suite::load(suite) else {
            return Vec::new();
        };
        let folder = suite.parent().unwrap_or(worktree);
        // Each program by a relative path, from where it is resolved.
        let mut programs: Vec<(PathBuf, String)> = Vec::new();
        programs.extend(
            loaded
                .environment
                .python
                .iter()
                .map(|p| (folder.to_path_buf(), p.clone())),
        );
        let templates = loaded.pytest.iter().map(|p| &p.template);
        for case in loaded.cases.iter().chain(templates) {
            if let Some(program) = case.command.first() {
                programs.push((case.cwd.clone(), program.clone()));
            }
        }
        let mut linked = Vec::new();
        for (from, program) in programs {
            if !program.contains('/') || program.starts_with('/') {
                continue;
            }
            let path = lexical(&from.join(&program));
            if path.exists() {
                continue;
            }
            let Ok(relative) = path.strip_prefix(worktree) else {
                continue;
            };
            let mut prefix = PathBuf::new();
            for part in relative.components() {
                prefix.push(part);
                if !worktree.join(&prefix).exists() {
                    let theirs = self.repo.top.join(&prefix);
                    if theirs.exists()
                        && std::os::unix::fs::symlink(&theirs, worktree.join(&prefix)).is_ok()
                    {
                        linked.push(format!("{} -> {}", prefix.display(), theirs.display()));
                    }
                    break;
                }
            }
        }
        linked
    }
}

/// `path` with its `.` and `..` taken out, without asking the file
/// system (the parts may not exist).
fn lexical(path: &Path) -> PathBuf {
    use std::path::Component;
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

impl Prepare for Commits {
    fn identity(&self, at: usize) -> String {
        format!(
            "commit {}\nsuite {}\nbuild {}",
            self.candidates[at].id,
            self.suite.display(),
            self.build.as_deref().unwrap_or("")
        )
    }

    fn environment(&self) -> String {
        super::pip::interpreter_packages(&self.user_suite)
    }

    fn parallel(&self) -> bool {
        true
    }

    fn prepare(
        &mut self,
        at: usize,
        folder: &Path,
        interrupt: &Interrupt,
    ) -> Result<Prepared, BisectError> {
        let worktree = self.worktree(at);
        if worktree.exists() {
            self.repo.remove_worktree(&worktree);
        }
        std::fs::create_dir_all(&self.worktrees).map_err(|e| {
            BisectError::Infrastructure(format!("cannot make {}: {e}", self.worktrees.display()))
        })?;
        if let Err(why) = self.repo.add_worktree(&worktree, &self.candidates[at].id) {
            return Ok(Prepared::Skip(format!("cannot be checked out: {why}")));
        }
        self.made.push(worktree.clone());
        let suite = worktree.join(&self.suite);
        if !suite.is_file() {
            return Ok(Prepared::Skip(format!(
                "{} is not in this commit",
                self.suite.display()
            )));
        }
        let linked = self.link_untracked(&worktree, &suite);
        if !linked.is_empty() {
            // Said in the step's folder: what the worktree borrowed.
            let _ = std::fs::write(folder.join("linked.txt"), linked.join("\n") + "\n");
        }
        if let Some(build) = &self.build {
            if let Some(why) = build_in(&worktree, build, folder, interrupt)? {
                return Ok(Prepared::Skip(why));
            }
        }
        Ok(Prepared::Ready(Place {
            cwd: worktree,
            suite,
            python: None,
        }))
    }

    fn release(&mut self, at: usize) {
        let worktree = self.worktree(at);
        if self.made.contains(&worktree) {
            self.repo.remove_worktree(&worktree);
            self.made.retain(|w| *w != worktree);
        }
    }

    fn clean_up(&mut self) {
        for worktree in std::mem::take(&mut self.made) {
            self.repo.remove_worktree(&worktree);
        }
        let _ = std::fs::remove_dir(&self.worktrees);
    }
}

impl PrepareLinear for Commits {
    fn candidates(&self) -> &[Candidate] {
        &self.candidates
    }
    fn as_prepare(&mut self) -> &mut dyn Prepare {
        self
    }
}

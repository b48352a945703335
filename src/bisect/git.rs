//! The commits of a range and a worktree for each, outside the user's
//! checkout: the checkout, dirty or not, is never touched.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::spawn::output;

/// A git repository, by its top-level folder.
#[derive(Debug, Clone)]
pub struct Repo {
    pub top: PathBuf,
}

/// `git -C <dir> <args>` with the user's configuration but no pager or
/// prompt.
fn git(dir: &Path) -> Command {
    let mut command = Command::new("git");
    command
        .arg("-C")
        .arg(dir)
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("GIT_PAGER", "cat")
        .env_remove("GIT_DIR")
        .env_remove("GIT_WORK_TREE")
        .env_remove("GIT_INDEX_FILE");
    command
}

impl Repo {
    /// The repository `path` is in.
    pub fn around(path: &Path) -> Result<Repo, String> {
        let dir = if path.is_dir() {
            path
        } else {
            path.parent().unwrap_or(Path::new("."))
        };
        let dir = if dir.as_os_str().is_empty() {
            Path::new(".")
        } else {
            dir
        };
        let mut command = git(dir);
        command.args(["rev-parse", "--show-toplevel"]);
        let top = output(command)
            .map_err(|e| format!("{} is not in a git repository: {e}", path.display()))?;
        Ok(Repo {
            top: PathBuf::from(top.trim()),
        })
    }

    fn git(&self) -> Command {
        git(&self.top)
    }

    /// A revision's full commit hash.
    pub fn commit(&self, rev: &str) -> Result<String, String> {
        if rev.starts_with('-') {
            return Err(format!("`{rev}` is not a revision"));
        }
        let mut command = self.git();
        command.args(["rev-parse", "--verify", "--quiet", "--end-of-options"]);
        command.arg(format!("{rev}^{{commit}}"));
        output(command)
            .map(|sha| sha.trim().to_string())
            .map_err(|_| format!("`{rev}` names no commit of {}", self.top.display()))
    }

    /// Whether `ancestor` is an ancestor of `of` (or the same commit).
    pub fn is_ancestor(&self, ancestor: &str, of: &str) -> bool {
        let mut command = self.git();
        command.args(["merge-base", "--is-ancestor", ancestor, of]);
        output(command).is_ok()
    }

    /// The commits after `good` up to `bad`, oldest first, `bad` last;
    /// along first parents (a merge is one step) unless `all_parents`.
    pub fn range(&self, good: &str, bad: &str, all_parents: bool) -> Result<Vec<Commit>, String> {
        let mut command = self.git();
        command.args(["rev-list", "--reverse", "--format=%H %s"]);
        if !all_parents {
            command.arg("--first-parent");
        } else {
            command.arg("--topo-order");
        }
        command.arg(format!("{good}..{bad}"));
        let text = output(command)?;
        Ok(text
            .lines()
            .filter(|l| !l.starts_with("commit "))
            .filter_map(|l| {
                let (sha, subject) = l.split_once(' ').unwrap_or((l, ""));
                (sha.len() >= 40).then(|| Commit {
                    sha: sha.to_string(),
                    subject: crate::clean::line(subject).into_owned(),
                })
            })
            .collect())
    }

    /// A commit's first parent, if it has one.
    pub fn first_parent(&self, sha: &str) -> Option<String> {
        let mut command = self.git();
        command
            .args(["rev-parse", "--verify", "--quiet"])
            .arg(format!("{sha}^1"));
        output(command).ok().map(|p| p.trim().to_string())
    }

    /// One commit's subject line.
    pub fn subject(&self, sha: &str) -> String {
        let mut command = self.git();
        command.args(["log", "-1", "--format=%s", sha]);
        output(command)
            .map(|s| crate::clean::line(s.trim()).into_owned())
            .unwrap_or_default()
    }

    /// Check `sha` out, detached, in a new worktree at `path`.
    pub fn add_worktree(&self, path: &Path, sha: &str) -> Result<(), String> {
        let mut command = self.git();
        command.args(["worktree", "add", "--detach", "--quiet", "--force"]);
        command.arg(path).arg(sha);
        output(command).map(|_| ())
    }

    /// Remove a worktree this bisect made, its files and git's record of
    /// it. When git cannot (its folder is gone already), the record is
    /// removed by hand: the one whose `gitdir` names this path, never
    /// another worktree's (`git worktree prune` would drop those too).
    pub fn remove_worktree(&self, path: &Path) {
        let mut command = self.git();
        command.args(["worktree", "remove", "--force", "--force"]);
        command.arg(path);
        if output(command).is_ok() {
            return;
        }
        let _ = std::fs::remove_dir_all(path);
        let mut common = self.git();
        common.args(["rev-parse", "--path-format=absolute", "--git-common-dir"]);
        let Ok(common) = output(common) else {
            return;
        };
        let records = PathBuf::from(common.trim()).join("worktrees");
        let ours = path.join(".git");
        for record in std::fs::read_dir(&records).into_iter().flatten().flatten() {
            let gitdir = std::fs::read_to_string(record.path().join("gitdir")).unwrap_or_default();
            if Path::new(gitdir.trim()) == ours {
                let _ = std::fs::remove_dir_all(record.path());
            }
        }
    }

    /// The paths of the repository's worktrees other than its own.
    pub fn worktrees(&self) -> Vec<PathBuf> {
        let mut command = self.git();
        command.args(["worktree", "list", "--porcelain"]);
        output(command)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.strip_prefix("worktree "))
            .map(PathBuf::from)
            .filter(|p| *p != self.top)
            .collect()
    }
}

/// A commit of the range.
#[derive(Debug, Clone)]
pub struct Commit {
    pub sha: String,
    pub subject: String,
}

/// A commit as the terminal shows it: its first 12 characters.
pub fn short(sha: &str) -> &str {
    &sha[..sha.len().min(12)]
}

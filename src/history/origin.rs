//! Where a run came from: its commit and branch, and the CI run that ran
//! it. Given on the command line (`--commit`, `--branch`), else read from
//! the CI's own variables (GitHub Actions, GitLab CI, Buildkite,
//! Jenkins), else asked of git where the suite lives. Each is `None`
//! where none of them says: no repository and no CI is a run all the
//! same.

use std::path::Path;

pub use crate::results::RunOrigin as Origin;

/// What the command line says (`--commit`, `--branch`).
#[derive(Debug, Clone, Default)]
pub struct Given {
    pub commit: Option<String>,
    pub branch: Option<String>,
}

/// The origin of a run: `given` first, then the CI's variables (`var`
/// reads one), then git in `repo` (the suite's folder), when there is one.
pub fn detect(given: &Given, var: &dyn Fn(&str) -> Option<String>, repo: Option<&Path>) -> Origin {
    let mut origin = from_ci(var);
    let need_git = origin.commit.is_none() || origin.branch.is_none();
    if let Some(repo) = repo.filter(|_| need_git) {
        if origin.commit.is_none() {
            origin.commit = git(repo, &["rev-parse", "--verify", "-q", "HEAD"]);
        }
        if origin.branch.is_none() && origin.ci_system.is_none() {
            origin.branch = git(repo, &["symbolic-ref", "-q", "--short", "HEAD"]);
        }
    }
    if let Some(commit) = &given.commit {
        origin.commit = Some(commit.clone());
    }
    if let Some(branch) = &given.branch {
        origin.branch = Some(branch.clone());
    }
    origin
}

/// The process's own environment, as [`detect`] reads it.
pub fn process_var(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

/// What the CI's variables say; all `None` outside a known CI.
pub fn from_ci(var: &dyn Fn(&str) -> Option<String>) -> Origin {
    // Set but empty is unset (GitHub sets GITHUB_HEAD_REF to "" outside
    // pull requests).
    let get = |name: &str| var(name).filter(|v| !v.trim().is_empty());
    let is = |name: &str, value: &str| get(name).is_some_and(|v| v == value);
    if is("GITHUB_ACTIONS", "true") {
        let url = match (
            get("GITHUB_SERVER_URL"),
            get("GITHUB_REPOSITORY"),
            get("GITHUB_RUN_ID"),
        ) {
            (Some(server), Some(repository), Some(id)) => {
                Some(format!("{server}/{repository}/actions/runs/{id}"))
            }
            _ => None,
        };
        return Origin {
            commit: get("GITHUB_SHA"),
            branch: get("GITHUB_HEAD_REF").or_else(|| get("GITHUB_REF_NAME")),
            base_branch: get("GITHUB_BASE_REF"),
            ci_system: Some("github".into()),
            ci_run_id: get("GITHUB_RUN_ID"),
            ci_run_url: url,
        };
    }
    if is("GITLAB_CI", "true") {
        return Origin {
            commit: get("CI_COMMIT_SHA"),
            branch: get("CI_MERGE_REQUEST_SOURCE_BRANCH_NAME")
                .or_else(|| get("CI_COMMIT_BRANCH"))
                .or_else(|| get("CI_COMMIT_REF_NAME")),
            base_branch: get("CI_MERGE_REQUEST_TARGET_BRANCH_NAME"),
            ci_system: Some("gitlab".into()),
            ci_run_id: get("CI_PIPELINE_ID"),
            ci_run_url: get("CI_PIPELINE_URL"),
        };
    }
    if is("BUILDKITE", "true") {
        let pull_request = get("BUILDKITE_PULL_REQUEST").is_some_and(|v| v != "false");
        return Origin {
            // Buildkite says "HEAD" until the checkout resolves it.
            commit: get("BUILDKITE_COMMIT").filter(|c| c != "HEAD"),
            branch: get("BUILDKITE_BRANCH"),
            base_branch: get("BUILDKITE_PULL_REQUEST_BASE_BRANCH").filter(|_| pull_request),
            ci_system: Some("buildkite".into()),
            ci_run_id: get("BUILDKITE_BUILD_ID"),
            ci_run_url: get("BUILDKITE_BUILD_URL"),
        };
    }
    if get("JENKINS_URL").is_some() {
        // A multibranch pipeline's BRANCH_NAME, else the Git plugin's
        // GIT_BRANCH (`origin/main`).
        let branch = get("CHANGE_BRANCH")
            .or_else(|| get("BRANCH_NAME"))
            .or_else(|| {
                get("GIT_BRANCH")
                    .map(|b| b.strip_prefix("origin/").map_or(b.clone(), str::to_string))
            });
        return Origin {
            commit: get("GIT_COMMIT"),
            branch,
            base_branch: get("CHANGE_TARGET"),
            ci_system: Some("jenkins".into()),
            ci_run_id: get("BUILD_TAG").or_else(|| get("BUILD_NUMBER")),
            ci_run_url: get("BUILD_URL"),
        };
    }
    Origin::default()
}

/// One line git prints in `repo`; `None` when git is missing, `repo` is no
/// repository, or git says nothing.
fn git(repo: &Path, args: &[&str]) -> Option<String> {
    let output = std::process::Command::new("git")
        .arg("-C")
        .arg(repo)
        .args(args)
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .output()
        .ok()?;
    if !output.status.success() {
        return None;
    }
    let line = String::from_utf8(output.stdout).ok()?;
    let line = line.trim();
    (!line.is_empty()).then(|| line.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn vars(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |name| map.get(name).cloned()
    }

    #[test]
    fn github_pull_request_names_its_head_and_base() {
        let origin = from_ci(&vars(&[
            ("GITHUB_ACTIONS", "true"),
            ("GITHUB_SHA", "abc123"),
            ("GITHUB_REF_NAME", "42/merge"),
            ("GITHUB_HEAD_REF", "fix-oom"),
            ("GITHUB_BASE_REF", "main"),
            ("GITHUB_RUN_ID", "77"),
            ("GITHUB_SERVER_URL", "https://github.com"),
            ("GITHUB_REPOSITORY", "acme/train"),
        ]));
        assert_eq!(origin.commit.as_deref(), Some("abc123"));
        assert_eq!(origin.branch.as_deref(), Some("fix-oom"));
        assert_eq!(origin.base_branch.as_deref(), Some("main"));
        assert_eq!(origin.ci_system.as_deref(), Some("github"));
        assert_eq!(
            origin.ci_run_url.as_deref(),
            Some("https://github.com/acme/train/actions/runs/77")
        );
    }

    #[test]
    fn github_push_has_no_base_branch() {
        let origin = from_ci(&vars(&[
            ("GITHUB_ACTIONS", "true"),
            ("GITHUB_REF_NAME", "main"),
            ("GITHUB_HEAD_REF", ""),
            ("GITHUB_BASE_REF", ""),
        ]));
        assert_eq!(origin.branch.as_deref(), Some("main"));
        assert_eq!(origin.base_branch, None);
    }

    #[test]
    fn gitlab_buildkite_and_jenkins() {
        let gitlab = from_ci(&vars(&[
            ("GITLAB_CI", "true"),
            ("CI_COMMIT_SHA", "c1"),
            ("CI_COMMIT_REF_NAME", "main"),
            ("CI_PIPELINE_ID", "9"),
            ("CI_PIPELINE_URL", "https://gitlab.example/p/-/pipelines/9"),
        ]));
        assert_eq!(
            (gitlab.commit.as_deref(), gitlab.branch.as_deref()),
            (Some("c1"), Some("main"))
        );
        let mr = from_ci(&vars(&[
            ("GITLAB_CI", "true"),
            ("CI_MERGE_REQUEST_SOURCE_BRANCH_NAME", "topic"),
            ("CI_MERGE_REQUEST_TARGET_BRANCH_NAME", "main"),
            ("CI_COMMIT_REF_NAME", "refs/merge-requests/3/head"),
        ]));
        assert_eq!(
            (mr.branch.as_deref(), mr.base_branch.as_deref()),
            (Some("topic"), Some("main"))
        );
        let buildkite = from_ci(&vars(&[
            ("BUILDKITE", "true"),
            ("BUILDKITE_COMMIT", "HEAD"),
            ("BUILDKITE_BRANCH", "main"),
            ("BUILDKITE_PULL_REQUEST", "false"),
            ("BUILDKITE_PULL_REQUEST_BASE_BRANCH", ""),
        ]));
        assert_eq!(buildkite.commit, None);
        assert_eq!(buildkite.base_branch, None);
        let jenkins = from_ci(&vars(&[
            ("JENKINS_URL", "https://ci.example/"),
            ("GIT_COMMIT", "j1"),
            ("GIT_BRANCH", "origin/release"),
            ("BUILD_URL", "https://ci.example/job/x/5/"),
        ]));
        assert_eq!(jenkins.branch.as_deref(), Some("release"));
        assert_eq!(jenkins.ci_system.as_deref(), Some("jenkins"));
    }

    #[test]
    fn the_command_line_wins_and_nothing_is_none() {
        let given = Given {
            commit: Some("deadbeef".into()),
            branch: None,
        };
        let origin = detect(&given, &vars(&[]), None);
        assert_eq!(origin.commit.as_deref(), Some("deadbeef"));
        assert_eq!(origin.branch, None);
        assert_eq!(
            detect(&Given::default(), &vars(&[]), None),
            Origin::default()
        );
    }
}

//! Where `run` and `lock` write, checked before anything runs: the out dir
//! claimed, every report path writable, no report over an input (the
//! suite, the baseline lock, the environment's interpreter, the job
//! summary), no two reports one file, none among the case logs.

use std::path::{Path, PathBuf};

use super::shared::CliError;
use crate::files::{OutDirClaim, ReportTarget, claim_out_dir, follow_links, no_space_left};
use crate::report::outputs::ReportPaths;
use crate::suite::Suite;

/// Where reports go.
pub(super) struct Outputs<'a> {
    pub(super) out: &'a Path,
    /// `--adopt-out-dir`: take over an out dir of an oomgate from before
    /// the marker.
    pub(super) adopt: bool,
    pub(super) junit: Option<&'a Path>,
    pub(super) json: Option<&'a Path>,
    /// Files no report may replace, each with what it is: what this
    /// command reads (the suite, the baseline lock, the environment's
    /// interpreter). `lock` checks its own output before it runs.
    pub(super) keep: Vec<(&'static str, PathBuf)>,
}

/// The suite's own files a report must never replace: the suite, and the
/// interpreter `[environment]` names by path.
pub(super) fn suite_files(suite: &Suite) -> Vec<(&'static str, PathBuf)> {
    let mut files = vec![("the suite", suite.path.clone())];
    if let Some(python) = suite
        .environment
        .python
        .as_deref()
        .filter(|p| p.contains('/'))
    {
        files.push(("the [environment] python", suite.workdir.join(python)));
    }
    files
}

/// Claim the out dir (held until the claim is dropped) and check that
/// every report path can be written before any GPU time is spent.
pub(super) fn prepare_outputs(
    outputs: &Outputs<'_>,
    out_dir: &Path,
) -> Result<(ReportPaths, OutDirClaim), CliError> {
    let infra = |path: &Path, e: std::io::Error| {
        CliError::Infrastructure(format!("cannot write to {}: {e}", path.display()))
    };
    let claim = claim_out_dir(out_dir, outputs.adopt)?;
    clear_planted_links(out_dir)?;
    crate::files::own_folder(&outputs.out.join("cases")).map_err(|e| infra(outputs.out, e))?;
    // An out dir claimed by an earlier run passes every check above on a
    // full disk: the cases' output would be lost from the first byte.
    let full = |folder: &Path| infra(folder, std::io::Error::from_raw_os_error(libc::ENOSPC));
    if no_space_left(out_dir) {
        return Err(full(out_dir));
    }
    let mut files = ReportPaths::in_out_dir(out_dir);
    for (extra, list) in [
        (outputs.json, &mut files.json),
        (outputs.junit, &mut files.junit),
    ] {
        let Some(path) = extra else { continue };
        if let Some((held, holder)) = crate::files::held_out_dir_around(path) {
            return Err(CliError::BadInput(format!(
                "{} is inside {}, the out dir another oomgate{} is writing: this report would replace that run's file; give it a path outside it",
                path.display(),
                held.display(),
                holder
                    .map(|pid| format!(" (pid {pid})"))
                    .unwrap_or_default()
            )));
        }
        let target = match ReportTarget::of(path) {
            Ok(target) => target,
            Err(e) if e.kind() == std::io::ErrorKind::IsADirectory => {
                return Err(CliError::Infrastructure(e.to_string()));
            }
            Err(e) => return Err(infra(path, e)),
        };
        if let ReportTarget::File(path) = &target {
            let resolved = follow_links(path);
            let folder = crate::files::folder_of(&resolved);
            std::fs::create_dir_all(folder).map_err(|e| infra(folder, e))?;
            tempfile::tempfile_in(folder).map_err(|e| infra(folder, e))?;
            if no_space_left(folder) {
                return Err(full(folder));
            }
        }
        list.push(target);
    }
    refuse_colliding_reports(&files, out_dir)?;
    let reports: Vec<(&str, &Path)> = files
        .json
        .iter()
        .chain(&files.junit)
        .map(|target| ("a report", target.path()))
        .chain([
            ("a report", files.summary_md.as_path()),
            ("a report", files.html.as_path()),
        ])
        .collect();
    let mut keep = outputs.keep.clone();
    if let Some(step_summary) = &files.step_summary {
        keep.push(("the GitHub job summary", step_summary.clone()));
    }
    refuse_overwriting(&reports, &keep)?;
    crate::report::terminal::stdout_carries_report(
        files.json.iter().chain(&files.junit).any(is_stdout),
    );
    Ok((files, claim))
}

/// An output that is one of the files in `keep` would destroy it (the
/// suite replaced by its own JUnit report, the lock by the results that
/// were compared with it): refused before anything runs (exit 2).
pub(super) fn refuse_overwriting(
    outputs: &[(&str, &Path)],
    keep: &[(&'static str, PathBuf)],
) -> Result<(), CliError> {
    let identity = |path: &Path| ReportTarget::File(path.to_path_buf()).identity();
    for (what, path) in outputs {
        let Some(output) = identity(path) else {
            continue;
        };
        if let Some((kept, kept_path)) = keep
            .iter()
            .find(|(_, kept)| identity(kept).as_ref() == Some(&output))
        {
            return Err(CliError::BadInput(format!(
                "{} ({what}) is {} ({}): writing it would destroy what this command reads or writes; give it another path",
                path.display(),
                kept,
                kept_path.display()
            )));
        }
    }
    Ok(())
}

/// Whether a report goes to oomgate's stdout (`--json /dev/stdout`, or a
/// FIFO that stdout is): then nothing else may be written there.
fn is_stdout(target: &ReportTarget) -> bool {
    use std::os::unix::fs::MetadataExt;
    let ReportTarget::Stream(path) = target else {
        return false;
    };
    // The kernel follows /dev/stdout and /proc/self/fd/1 to the pipe or
    // file itself.
    match (
        std::fs::metadata(path),
        std::fs::metadata("/proc/self/fd/1"),
    ) {
        (Ok(report), Ok(stdout)) => report.dev() == stdout.dev() && report.ino() == stdout.ino(),
        _ => false,
    }
}

/// Two reports that are one file would overwrite each other, and a report
/// among the cases' own files would overwrite a log: both are refused
/// before anything runs (exit 2).
fn refuse_colliding_reports(files: &ReportPaths, out_dir: &Path) -> Result<(), CliError> {
    let fixed = [
        ReportTarget::Owned(files.summary_md.clone()),
        ReportTarget::Owned(files.html.clone()),
    ];
    let all: Vec<&ReportTarget> = files
        .json
        .iter()
        .chain(&files.junit)
        .chain(fixed.iter())
        .collect();
    let cases = std::fs::canonicalize(out_dir.join("cases")).ok();
    let mut seen: Vec<(crate::files::FileIdentity, &Path)> = Vec::new();
    for target in all {
        let Some(identity) = target.identity() else {
            continue;
        };
        let resolved = follow_links(target.path());
        let location = resolved
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .and_then(|folder| std::fs::canonicalize(folder).ok());
        if let (Some(location), Some(cases)) = (&location, &cases) {
            if location.starts_with(cases) {
                return Err(CliError::BadInput(format!(
                    "{} is inside the out dir's cases/ folder, which holds the workloads' logs; write the report elsewhere",
                    target.path().display()
                )));
            }
        }
        if let Some((_, other)) = seen.iter().find(|(seen, _)| *seen == identity) {
            return Err(CliError::BadInput(format!(
                "{} and {} are the same file: two reports would overwrite each other; give each its own path",
                other.display(),
                target.path().display()
            )));
        }
        seen.push((identity, target.path()));
    }
    Ok(())
}

/// The out dir's own report names (results.json, junit.xml, summary.md,
/// report.html), once it is claimed: a link there (an earlier run's
/// workload can reach the out dir) is removed, never written through, and
/// said.
pub(super) fn clear_planted_links(out_dir: &Path) -> Result<(), CliError> {
    let paths = ReportPaths::in_out_dir(out_dir);
    let names = paths
        .json
        .iter()
        .chain(&paths.junit)
        .map(crate::files::ReportTarget::path)
        .chain([paths.summary_md.as_path(), paths.html.as_path()]);
    for name in names {
        crate::files::remove_planted_link(name).map_err(|e| {
            CliError::Infrastructure(format!("cannot remove the link at {}: {e}", name.display()))
        })?;
    }
    say_replaced_links();
    Ok(())
}

/// Each link found where a file of the out dir's own goes (and replaced
/// or removed), said once.
pub(super) fn say_replaced_links() {
    for (name, target) in crate::files::take_replaced_links() {
        super::shared::write_stderr(&format!(
            "warning: {} was a symbolic link to {}, which oomgate did not make (a workload can write in the out dir): oomgate replaced the link with its own file and wrote nothing to {}",
            name.display(),
            target.display(),
            target.display()
        ));
    }
}

//! A case's folder in the out dir: made fresh with its log files before
//! it starts, its in-flight entry in the results while it runs, and its
//! shared attempt's files set aside before a retry alone.

use std::io;
use std::path::{Path, PathBuf};

use super::case;
use super::fault::WriteFault;
use super::shared::{Shared, now_rfc3339};
use crate::judge;
use crate::results::{CaseResult, IN_FLIGHT_MESSAGE};
use crate::suite::Case;

/// The entry of a case in flight: what it is, when it started, where its
/// logs are, status `running`; no figure is known yet.
pub(super) fn in_flight(shared: &Shared<'_>, case: &Case, case_dir: &Path) -> CaseResult {
    let mut entry = CaseResult::unmeasured(case.id.clone());
    let recorded = crate::results::assemble::recorded(case);
    entry.params = recorded.params;
    entry.command = recorded.command;
    entry.cwd = case.cwd.clone();
    entry.concurrency = case.concurrency;
    entry.timeout_s = case.timeout.as_secs_f64();
    entry.soak_s = case.soak.map(|d| d.as_secs_f64());
    entry.status = crate::results::CaseStatus::Running;
    entry.failure_kind = judge::failure_kind(&entry, None);
    entry.message = Some(IN_FLIGHT_MESSAGE.to_string());
    entry.started_at = now_rfc3339();
    entry.host.method = shared.measurement.host_method;
    entry.env = recorded.env;
    entry.pytest = case.pytest.clone();
    entry.dir = case_dir
        .strip_prefix(shared.out_dir)
        .unwrap_or(case_dir)
        .to_path_buf();
    entry
}

/// A fresh `cases/<folder>`, with every instance's log files: logs of an
/// earlier run in the same out dir must not be mistaken for this run's,
/// and a case whose output cannot be kept is not launched. A test of a
/// shared pytest session gets its folder only if it has output to keep
/// (`run::session`): making a folder and two files costs more than a
/// short test runs.
pub(super) fn prepare_case_dir(shared: &Shared<'_>, case: &Case) -> Result<PathBuf, WriteFault> {
    let path = case_dir(shared, case);
    own_cases(shared)?;
    match crate::files::remove_tree(&path) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(case_file_fault(&path, e)),
    }
    if shared.in_session(case) {
        return Ok(path);
    }
    make_case_dir(case, &path)?;
    space_left(path)
}

fn case_dir(shared: &Shared<'_>, case: &Case) -> PathBuf {
    shared.out_dir.join("cases").join(&case.folder)
}

fn case_file_fault(at: &Path, source: io::Error) -> WriteFault {
    WriteFault::CaseFile {
        path: at.to_path_buf(),
        source,
    }
}

/// `cases/` checked to be a folder of oomgate's: an earlier case's
/// workload may have swapped it for a link.
fn own_cases(shared: &Shared<'_>) -> Result<(), WriteFault> {
    let cases = shared.out_dir.join("cases");
    crate::files::own_folder(&cases).map_err(|e| case_file_fault(&cases, e))
}

/// `path` (the case's folder, not there; `cases/` checked) made, with
/// empty logs.
fn make_case_dir(case: &Case, path: &Path) -> Result<(), WriteFault> {
    std::fs::create_dir_all(path).map_err(|e| case_file_fault(path, e))?;
    for log in logs(path, case) {
        crate::files::case::create(&log).map_err(|e| case_file_fault(&log, e))?;
    }
    Ok(())
}

/// The log files a case's folder starts with: each instance's stdout and
/// stderr.
fn logs(path: &Path, case: &Case) -> impl Iterator<Item = PathBuf> {
    (0..case.concurrency).flat_map(move |index| {
        let logs = crate::files::case::InstanceLogs::for_instance(path, index);
        [logs.stdout, logs.stderr]
    })
}

/// A case is not launched where nothing more can be written.
fn space_left(path: PathBuf) -> Result<PathBuf, WriteFault> {
    if crate::files::no_space_left(&path) {
        return Err(WriteFault::NoSpace {
            dir: path,
            case_ended: false,
        });
    }
    Ok(path)
}

/// The folder of the case most likely to start next, made while the
/// cases before it run: making a folder and its logs takes a few inodes,
/// which on some file systems costs more than a trivial case runs
/// (hundreds of µs each on ext4, for a block group full of freed inodes),
/// so it is kept off the path from one case to the next. Made only where
/// no folder of that name is there yet (an earlier run's is removed at
/// the case's own start, not before: a case that never starts keeps it);
/// one whose case never starts is removed ([`Ahead::discard`]).
#[derive(Debug, Default)]
pub(super) struct Ahead {
    made: Option<Made>,
}

#[derive(Debug)]
struct Made {
    number: usize,
    path: PathBuf,
    /// `cases/` and the folder as made: a workload may since have swapped
    /// either for a link or another folder, which is then left alone.
    cases: (u64, u64),
    folder: (u64, u64),
}

impl Made {
    fn still_ours(&self) -> bool {
        let cases = self.path.parent().and_then(folder_identity);
        cases == Some(self.cases) && folder_identity(&self.path) == Some(self.folder)
    }
}

/// A folder's device and inode, when `path` is a folder, not a link.
fn folder_identity(path: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::symlink_metadata(path)
        .ok()
        .filter(std::fs::Metadata::is_dir)
        .map(|meta| (meta.dev(), meta.ino()))
}

impl Ahead {
    /// Make case `number`'s folder now, unless one is made already. A
    /// failure is left for the case's own start to meet and report.
    pub(super) fn make(&mut self, shared: &Shared<'_>, number: usize, case: &Case) {
        if self.made.is_some() || shared.in_session(case) || own_cases(shared).is_err() {
            return;
        }
        let path = case_dir(shared, case);
        if std::fs::symlink_metadata(&path).is_ok() {
            return;
        }
        let made = make_case_dir(case, &path);
        let identities = path
            .parent()
            .and_then(folder_identity)
            .zip(folder_identity(&path));
        match (made, identities) {
            (Ok(()), Some((cases, folder))) => {
                self.made = Some(Made {
                    number,
                    path,
                    cases,
                    folder,
                })
            }
            _ => {
                crate::files::remove_tree(&path).ok();
            }
        }
    }

    /// Case `number`'s folder as made ahead and still as made (the same
    /// folder, its logs empty regular files: a workload of the case before
    /// may have written there), or a fresh one.
    pub(super) fn take(
        &mut self,
        shared: &Shared<'_>,
        number: usize,
        case: &Case,
    ) -> Result<PathBuf, WriteFault> {
        let Some(made) = self.made.take_if(|made| made.number == number) else {
            return prepare_case_dir(shared, case);
        };
        let untouched = made.still_ours()
            && logs(&made.path, case).all(|log| {
                std::fs::symlink_metadata(log).is_ok_and(|m| m.is_file() && m.len() == 0)
            });
        if untouched {
            space_left(made.path)
        } else {
            prepare_case_dir(shared, case)
        }
    }

    /// Remove the folder made for a case that did not start, if it is
    /// still the folder made, where it was made.
    pub(super) fn discard(&mut self) {
        if let Some(made) = self.made.take().filter(Made::still_ours) {
            crate::files::remove_tree(&made.path).ok();
        }
    }
}

/// Before a case is retried alone: a marker in its logs, and the shared
/// attempt's probe metrics and timeline set aside (`*.shared-attempt.*`),
/// so the retry is judged on its own.
pub(super) fn keep_shared_attempt(dir: &Path, case: &Case) -> Result<(), WriteFault> {
    let marker = "\n[oomgate] retried alone: the first attempt failed while sharing its GPU\n";
    let fail = |path: &Path, source| WriteFault::CaseFile {
        path: path.to_path_buf(),
        source,
    };
    if let Some(fault) = case::mark_logs(dir, case.concurrency, case.server.is_some(), marker)
        .into_iter()
        .next()
    {
        return Err(fault);
    }
    let mut set_aside = vec![dir.join("timeline.json")];
    set_aside.extend(
        case.server
            .as_ref()
            .map(|_| crate::files::case::InstanceLogs::for_server(dir).metrics),
    );
    set_aside.extend(
        (0..case.concurrency)
            .map(|index| crate::files::case::InstanceLogs::for_instance(dir, index).metrics),
    );
    for path in set_aside {
        let kept = path.with_extension(match path.extension() {
            Some(ext) => format!("shared-attempt.{}", ext.to_string_lossy()),
            None => "shared-attempt".to_string(),
        });
        match std::fs::rename(&path, &kept) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(fail(&path, e)),
        }
    }
    Ok(())
}

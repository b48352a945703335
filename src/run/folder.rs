//! A case's folder in the out dir: made fresh with its log files before
//! it starts, its in-flight entry in the results while it runs, and its
//! shared attempt's files set aside before a retry alone.

use std::io;
use std::path::{Path, PathBuf};

use super::{Shared, WriteFault, case, launch, now_rfc3339, record};
use crate::judge;
use crate::results::{CaseResult, IN_FLIGHT_MESSAGE};
use crate::suite::Case;

/// The entry of a case in flight: what it is, when it started, where its
/// logs are, status `running`; no figure is known yet.
pub(super) fn in_flight(shared: &Shared<'_>, case: &Case, case_dir: &Path) -> CaseResult {
    let mut entry = CaseResult::unmeasured(case.id.clone());
    let recorded = record::recorded(case);
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
/// and a case whose output cannot be kept is not launched.
pub(super) fn prepare_case_dir(shared: &Shared<'_>, case: &Case) -> Result<PathBuf, WriteFault> {
    let path = shared.out_dir.join("cases").join(&case.folder);
    let fail = |at: &Path, source| WriteFault::CaseFile {
        path: at.to_path_buf(),
        source,
    };
    // An earlier case's workload may have swapped `cases` for a link.
    let cases = shared.out_dir.join("cases");
    crate::files::own_folder(&cases).map_err(|e| fail(&cases, e))?;
    match std::fs::remove_dir_all(&path) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(fail(&path, e)),
    }
    std::fs::create_dir_all(&path).map_err(|e| fail(&path, e))?;
    for index in 0..case.concurrency {
        let logs = launch::InstanceLogs::for_instance(&path, index);
        for log in [&logs.stdout, &logs.stderr] {
            crate::files::case::create(log).map_err(|e| fail(log, e))?;
        }
    }
    if crate::files::no_space_left(&path) {
        return Err(WriteFault::NoSpace {
            dir: path,
            case_ended: false,
        });
    }
    Ok(path)
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
            .map(|_| launch::InstanceLogs::for_server(dir).metrics),
    );
    set_aside.extend(
        (0..case.concurrency).map(|index| launch::InstanceLogs::for_instance(dir, index).metrics),
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

//! Files of a run that oomgate could not write, and what that does to the
//! run. The first failure stops the launching of cases (those after it are
//! recorded as not run, with the failure named in every report), the final
//! reports are attempted once more at the end, and oomgate exits 3 whatever
//! the cases' verdicts: a run whose files are incomplete must never pass
//! for a complete one, and a full disk must not cost the results of the
//! cases that already ran. A display that cannot be shown (a closed stdout
//! or stderr) is not a fault: the reporters go quiet instead.

use std::io;
use std::path::PathBuf;

/// A file of the run that oomgate could not write.
#[derive(Debug, thiserror::Error)]
pub enum WriteFault {
    /// A case's folder, a log file, a timeline, a marker line in a log.
    #[error("cannot write {}: {source}", path.display())]
    CaseFile {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// The file system of a case's folder had no space left: output the
    /// workload writes there itself was, or would be, cut short. Seen
    /// before a case starts and when it ends; a disk that filled and was
    /// freed again while the case ran goes unseen.
    #[error("{}", no_space(dir, *case_ended))]
    NoSpace { dir: PathBuf, case_ended: bool },
    /// A report file; the error names its path.
    #[error("cannot write report {0}")]
    Report(#[source] io::Error),
}

fn no_space(dir: &std::path::Path, case_ended: bool) -> String {
    let enospc = io::Error::from_raw_os_error(libc::ENOSPC);
    if case_ended {
        format!(
            "the logs in {} may be cut short: {enospc} on their file system when the case ended",
            dir.display()
        )
    } else {
        format!(
            "cannot keep a case's logs in {}: {enospc} on its file system",
            dir.display()
        )
    }
}

/// Files of a run that could not be written (exit code 3). Returned once
/// the run has recorded all it could.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("{}", describe(during.as_ref(), not_run, at_end.as_ref()))]
    Write {
        /// The first failure while cases ran, which stopped the launching.
        during: Option<WriteFault>,
        /// The cases never started because of it.
        not_run: Vec<String>,
        /// The final reports' own failure.
        at_end: Option<io::Error>,
    },
}

/// How many not-run cases the error names before `…`.
const NAMED: usize = 5;

fn describe(during: Option<&WriteFault>, not_run: &[String], at_end: Option<&io::Error>) -> String {
    let Some(fault) = during else {
        return match at_end {
            Some(error) => format!("cannot write the final reports: {error}"),
            None => "no file failed".to_string(),
        };
    };
    let mut text = fault.to_string();
    if !not_run.is_empty() {
        let mut names = not_run
            .iter()
            .take(NAMED)
            .map(String::as_str)
            .collect::<Vec<_>>()
            .join(", ");
        if not_run.len() > NAMED {
            names.push_str(", …");
        }
        text.push_str(&format!(
            "; no case was launched after it ({} not run: {names})",
            not_run.len()
        ));
    }
    match at_end {
        Some(error) => text.push_str(&format!(
            "; the final reports could not be written either: {error}"
        )),
        None => text.push_str("; the reports were written again at the end"),
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn enospc(path: &str) -> io::Error {
        crate::files::with_path(
            io::Error::from_raw_os_error(libc::ENOSPC),
            std::path::Path::new(path),
        )
    }

    #[test]
    fn the_error_names_the_path_the_os_error_and_the_cases_not_run() {
        let error = RunError::Write {
            during: Some(WriteFault::CaseFile {
                path: PathBuf::from("/out/cases/a/timeline.json"),
                source: io::Error::from_raw_os_error(libc::ENOSPC),
            }),
            not_run: (1..=7).map(|i| format!("c{i}")).collect(),
            at_end: Some(enospc("/out/results.json")),
        };
        assert_eq!(
            error.to_string(),
            "cannot write /out/cases/a/timeline.json: No space left on device (os error 28); \
             no case was launched after it (7 not run: c1, c2, c3, c4, c5, …); \
             the final reports could not be written either: /out/results.json: No space left on device (os error 28)"
        );
    }

    #[test]
    fn a_failure_only_at_the_end_says_so() {
        let error = RunError::Write {
            during: None,
            not_run: Vec::new(),
            at_end: Some(enospc("/dev/full")),
        };
        assert_eq!(
            error.to_string(),
            "cannot write the final reports: /dev/full: No space left on device (os error 28)"
        );
        let error = RunError::Write {
            during: Some(WriteFault::NoSpace {
                dir: PathBuf::from("/out/cases/a"),
                case_ended: true,
            }),
            not_run: Vec::new(),
            at_end: None,
        };
        assert_eq!(
            error.to_string(),
            "the logs in /out/cases/a may be cut short: No space left on device (os error 28) \
             on their file system when the case ended; the reports were written again at the end"
        );
    }
}

//! The report files and when each is written: the one place that decides.
//!
//! [`ReportFiles`] owns every output path and is the only [`Reporter`] that
//! writes files. The formats themselves (`json`, `junit`, `markdown`,
//! `html`) are plain `render` functions of the results model, nextest and
//! hyperfine style: serialising is theirs, writing and timing are here.
//!
//! results.json and junit.xml are checkpoints: written after the first
//! finished case, then after a finished case only when
//! [`CHECKPOINT_INTERVAL`] (or [`CHECKPOINT_COST_FACTOR`] times what the
//! last write took, when the files have grown large) has passed since the
//! last write, and always when the run finishes (also after Ctrl-C).
//! Rewriting them after every case made a suite quadratic in its number of
//! cases; a crash or SIGKILL now loses at most the cases of the last
//! interval, the price of a bounded cost. summary.md (and
//! `$GITHUB_STEP_SUMMARY`) and report.html are read after the run, so they
//! are rendered once, at the end; an earlier run's copies are removed when
//! the run starts, so they are never mistaken for this one's. Every file is replaced atomically ([`write_atomic`]), through
//! symlinks; FIFOs and devices ([`ReportTarget::Stream`]) are written in
//! place once, at the end. The out dir is claimed with a marker file
//! ([`claim_out_dir`]), and a folder that is someone else's is refused.

use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::{Event, Reporter, html, json, junit, markdown};
use crate::results::RunResults;

/// The longest time finished cases wait to reach results.json and
/// junit.xml while the run goes on.
pub const CHECKPOINT_INTERVAL: Duration = Duration::from_secs(1);

/// Replace `path` with `contents` so that a reader (or a crash) never sees
/// a half-written file: write a temporary file beside it, then rename. A
/// symlink is followed: its target is replaced, the link stays.
pub fn write_atomic(path: &Path, contents: &[u8]) -> io::Result<()> {
    let path = &follow_links(path);
    let folder = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    std::fs::create_dir_all(folder)?;
    let mut file = tempfile::NamedTempFile::new_in(folder)?;
    // Temporary files are private (0600); a report or lock is for everyone
    // who may read the folder, as a file written in place would be.
    {
        use std::os::unix::fs::PermissionsExt;
        file.as_file()
            .set_permissions(std::fs::Permissions::from_mode(0o644))?;
    }
    file.write_all(contents)?;
    file.as_file().sync_data()?;
    file.persist(path).map_err(|e| e.error)?;
    Ok(())
}

/// The file that marks a folder as an oomgate out dir: oomgate writes and
/// deletes files in no other folder.
pub const OUT_DIR_MARKER: &str = ".oomgate-out";

/// What an out dir may hold without a marker and still be oomgate's (one
/// written by an earlier oomgate): its own layout, and `lost+found` of a
/// fresh volume.
const OUT_DIR_LAYOUT: [&str; 7] = [
    OUT_DIR_MARKER,
    "results.json",
    "junit.xml",
    "summary.md",
    "report.html",
    "cases",
    "lost+found",
];

/// Why a folder cannot be an out dir.
#[derive(Debug, thiserror::Error)]
pub enum OutDirError {
    #[error(
        "{} is not an oomgate out dir (it holds {}, and no {OUT_DIR_MARKER}): oomgate writes and deletes files there, so it refuses a folder that is someone else's; choose an empty or new folder with --out",
        dir.display(),
        examples.join(", ")
    )]
    NotOurs { dir: PathBuf, examples: Vec<String> },
    #[error("cannot write to {}: {source}", dir.display())]
    Io {
        dir: PathBuf,
        #[source]
        source: io::Error,
    },
}

/// Make `dir` an out dir of oomgate's, or refuse it: a new or empty folder
/// (or one holding only oomgate's own layout, from an earlier version) is
/// claimed with the marker file; a folder with anything else in it and no
/// marker is someone else's and left untouched.
pub fn claim_out_dir(dir: &Path) -> Result<(), OutDirError> {
    let io_error = |source| OutDirError::Io {
        dir: dir.to_path_buf(),
        source,
    };
    if dir.join(OUT_DIR_MARKER).is_file() {
        return Ok(());
    }
    let mut foreign = Vec::new();
    match std::fs::read_dir(dir) {
        Ok(entries) => {
            for entry in entries {
                let name = entry.map_err(io_error)?.file_name();
                let name = name.to_string_lossy().into_owned();
                if !OUT_DIR_LAYOUT.contains(&name.as_str()) {
                    foreign.push(name);
                }
            }
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(io_error(e)),
    }
    if !foreign.is_empty() {
        foreign.sort();
        foreign.truncate(3);
        return Err(OutDirError::NotOurs {
            dir: dir.to_path_buf(),
            examples: foreign,
        });
    }
    std::fs::create_dir_all(dir).map_err(io_error)?;
    std::fs::write(
        dir.join(OUT_DIR_MARKER),
        "This folder is an oomgate out dir: oomgate replaces and deletes only the files it writes here.\n",
    )
    .map_err(io_error)
}

/// Where a symlink chain ends (the path itself when it is none). A link to
/// nothing yet resolves to where its target would be.
pub fn follow_links(path: &Path) -> PathBuf {
    let mut current = path.to_path_buf();
    for _ in 0..40 {
        let is_link = std::fs::symlink_metadata(&current).is_ok_and(|m| m.file_type().is_symlink());
        if !is_link {
            break;
        }
        let Ok(target) = std::fs::read_link(&current) else {
            break;
        };
        current = match current.parent() {
            Some(parent) if target.is_relative() => parent.join(target),
            _ => target,
        };
    }
    current
}

/// How one report reaches its path, decided before anything runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReportTarget {
    /// A regular file, or nothing yet: replaced atomically at every
    /// checkpoint (through a symlink, its target is replaced).
    File(PathBuf),
    /// A FIFO, a device, `/dev/stdout`, anything under /dev or /proc:
    /// written in place, once, when the run ends — never renamed over,
    /// never opened twice.
    Stream(PathBuf),
}

impl ReportTarget {
    /// What `path` is now. A directory is an error.
    pub fn of(path: &Path) -> io::Result<Self> {
        let resolved = follow_links(path);
        let special = [Path::new("/dev"), Path::new("/proc")]
            .iter()
            .any(|root| path.starts_with(root) || resolved.starts_with(root));
        match std::fs::metadata(&resolved) {
            Ok(meta) if meta.is_dir() => Err(io::Error::new(
                io::ErrorKind::IsADirectory,
                format!("{} is a directory, not a file path", path.display()),
            )),
            Ok(meta) if !meta.is_file() || special => Ok(ReportTarget::Stream(path.to_path_buf())),
            _ if special => Ok(ReportTarget::Stream(path.to_path_buf())),
            _ => Ok(ReportTarget::File(path.to_path_buf())),
        }
    }

    pub fn path(&self) -> &Path {
        match self {
            ReportTarget::File(path) | ReportTarget::Stream(path) => path,
        }
    }

    /// The file this target writes, to tell two targets that are one file
    /// apart: the device and inode of what exists, else the resolved path
    /// with its folder made canonical.
    pub fn identity(&self) -> Option<FileIdentity> {
        use std::os::unix::fs::MetadataExt;
        let resolved = follow_links(self.path());
        if let Ok(meta) = std::fs::metadata(&resolved) {
            return Some(FileIdentity::Inode(meta.dev(), meta.ino()));
        }
        let folder = resolved
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        let canonical = std::fs::canonicalize(folder).ok()?;
        Some(FileIdentity::Path(canonical.join(resolved.file_name()?)))
    }

    fn write(&self, contents: &[u8]) -> io::Result<()> {
        match self {
            ReportTarget::File(path) => write_atomic(path, contents),
            ReportTarget::Stream(path) => {
                let mut stream = std::fs::OpenOptions::new().write(true).open(path)?;
                stream.write_all(contents)?;
                stream.flush()
            }
        }
        .map_err(|e| with_path(e, self.path()))
    }
}

/// What makes two report paths one file.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum FileIdentity {
    Inode(u64, u64),
    Path(PathBuf),
}

/// Where each report goes.
#[derive(Debug, Clone)]
pub struct ReportPaths {
    /// results.json in the out dir, plus `--json` when given.
    pub json: Vec<ReportTarget>,
    /// junit.xml in the out dir, plus `--junit` when given.
    pub junit: Vec<ReportTarget>,
    pub summary_md: PathBuf,
    pub html: PathBuf,
    /// The out dir: case timelines are read relative to it for the charts.
    pub out_dir: PathBuf,
    /// `$GITHUB_STEP_SUMMARY`, which summary.md is appended to once.
    pub step_summary: Option<PathBuf>,
}

impl ReportPaths {
    /// The standard files in `out_dir`, with the GitHub step summary taken
    /// from the environment.
    pub fn in_out_dir(out_dir: &Path) -> Self {
        ReportPaths {
            json: vec![ReportTarget::File(out_dir.join("results.json"))],
            junit: vec![ReportTarget::File(out_dir.join("junit.xml"))],
            summary_md: out_dir.join("summary.md"),
            html: out_dir.join("report.html"),
            out_dir: out_dir.to_path_buf(),
            step_summary: markdown::step_summary_from_env(),
        }
    }
}

/// When the next checkpoint of results.json and junit.xml is due. Pure:
/// the caller passes the time, so the decision is tested without a clock.
#[derive(Debug, Clone)]
pub struct Checkpoints {
    interval: Duration,
    last: Option<Instant>,
    /// How long the last write took.
    cost: Duration,
}

/// A checkpoint waits at least this many times as long as the last one
/// took, so writing takes at most about a twentieth of the run however
/// many cases the files hold (a write's cost grows with them: without this,
/// a suite's time grew faster than its number of cases).
pub const CHECKPOINT_COST_FACTOR: u32 = 19;

impl Checkpoints {
    pub fn new(interval: Duration) -> Self {
        Checkpoints {
            interval,
            last: None,
            cost: Duration::ZERO,
        }
    }

    /// Whether a case finished at `now` should be written: the first one
    /// always (a quick first checkpoint shows the run is alive), then once
    /// `interval`, or [`CHECKPOINT_COST_FACTOR`] times the last write's
    /// cost if longer, has passed since the last write.
    pub fn due(&self, now: Instant) -> bool {
        let wait = self
            .interval
            .max(self.cost.saturating_mul(CHECKPOINT_COST_FACTOR));
        self.last
            .is_none_or(|last| now.saturating_duration_since(last) >= wait)
    }

    /// A checkpoint begun at `started` was written at `now`. Counted from
    /// the end of a write.
    pub fn written(&mut self, started: Instant, now: Instant) {
        self.cost = now.saturating_duration_since(started);
        self.last = Some(now);
    }
}

/// Writes every report file, each when it is due.
pub struct ReportFiles {
    paths: ReportPaths,
    checkpoints: Checkpoints,
}

impl ReportFiles {
    pub fn new(paths: ReportPaths) -> Self {
        ReportFiles {
            paths,
            checkpoints: Checkpoints::new(CHECKPOINT_INTERVAL),
        }
    }

    /// results.json and junit.xml to every target that is due: the files
    /// at a checkpoint, and streams too at the end (`last`).
    fn write_checkpoint(&mut self, results: &RunResults, last: bool) -> io::Result<()> {
        let started = Instant::now();
        let due = |target: &&ReportTarget| last || matches!(target, ReportTarget::File(_));
        let json_text = json::render(results)?;
        for target in self.paths.json.iter().filter(due) {
            target.write(json_text.as_bytes())?;
        }
        let junit_text = junit::render(results)?;
        for target in self.paths.junit.iter().filter(due) {
            target.write(junit_text.as_bytes())?;
        }
        self.checkpoints.written(started, Instant::now());
        Ok(())
    }

    /// The pages of an earlier run in the same out dir go when this run
    /// starts: they are only rewritten at its end, and until then (or
    /// after a crash) they would sit beside this run's results.json as if
    /// they described it. The checkpoint files are replaced after the first
    /// case, so they are left alone.
    fn remove_earlier_pages(&self) -> io::Result<()> {
        for path in [&self.paths.summary_md, &self.paths.html] {
            match std::fs::remove_file(path) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(with_path(e, path)),
            }
        }
        Ok(())
    }

    /// Everything, once, when the run is over: the checkpoint files first
    /// (the ones CI tools read), then the pages people read.
    fn write_final(&mut self, results: &RunResults) -> io::Result<()> {
        self.write_checkpoint(results, true)?;
        let summary = markdown::render(results);
        let path = &self.paths.summary_md;
        write_atomic(path, summary.as_bytes()).map_err(|e| with_path(e, path))?;
        if let Some(step_summary) = &self.paths.step_summary {
            // The job summary is a courtesy of the CI system: failing to
            // add to it is said, and changes no verdict.
            if let Err(e) = markdown::append_step_summary(step_summary, &summary) {
                let _ = writeln!(
                    io::stderr().lock(),
                    "warning: cannot append the summary to $GITHUB_STEP_SUMMARY ({}): {e}; the verdict is unchanged",
                    step_summary.display()
                );
            }
        }
        let page = html::render(results, &self.paths.out_dir);
        let path = &self.paths.html;
        write_atomic(path, page.as_bytes()).map_err(|e| with_path(e, path))
    }
}

fn with_path(error: io::Error, path: &Path) -> io::Error {
    io::Error::new(error.kind(), format!("{}: {error}", path.display()))
}

impl Reporter for ReportFiles {
    fn handle(&mut self, event: &Event<'_>) -> io::Result<()> {
        match event {
            Event::CaseFinished { results, .. } if self.checkpoints.due(Instant::now()) => {
                self.write_checkpoint(results, false)
            }
            Event::RunFinished { results } => self.write_final(results),
            Event::RunStarted { .. } => self.remove_earlier_pages(),
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn the_first_finished_case_is_written_at_once() {
        let checkpoints = Checkpoints::new(ms(1000));
        assert!(checkpoints.due(Instant::now()));
    }

    #[test]
    fn later_cases_wait_for_the_interval() {
        let start = Instant::now();
        let mut checkpoints = Checkpoints::new(ms(1000));
        checkpoints.written(start, start);
        for (after, due) in [
            (ms(0), false),
            (ms(1), false),
            (ms(999), false),
            (ms(1000), true), // exactly at the interval
            (ms(1001), true),
            (ms(60_000), true),
        ] {
            assert_eq!(checkpoints.due(start + after), due, "{after:?} after");
        }
    }

    #[test]
    fn the_interval_counts_from_the_last_write() {
        let start = Instant::now();
        let mut checkpoints = Checkpoints::new(ms(1000));
        checkpoints.written(start, start);
        checkpoints.written(start + ms(1500), start + ms(1500));
        assert!(!checkpoints.due(start + ms(2000)));
        assert!(checkpoints.due(start + ms(2500)));
    }

    #[test]
    fn a_clock_behind_the_last_write_is_not_due() {
        // Instants are monotonic, but the decision must not panic or fire
        // if a caller passes an earlier one.
        let start = Instant::now();
        let mut checkpoints = Checkpoints::new(ms(1000));
        checkpoints.written(start + ms(500), start + ms(500));
        assert!(!checkpoints.due(start));
    }

    #[test]
    fn many_quick_cases_make_few_checkpoints() {
        // 2000 cases finishing every 5 ms over 10 s: the first, then about
        // one a second.
        let start = Instant::now();
        let mut checkpoints = Checkpoints::new(CHECKPOINT_INTERVAL);
        let mut written = 0;
        for case in 0..2000 {
            let now = start + ms(5 * case);
            if checkpoints.due(now) {
                checkpoints.written(now, now);
                written += 1;
            }
        }
        assert_eq!(written, 10);
    }

    #[test]
    fn a_costly_checkpoint_spaces_out_the_next() {
        // Files of many cases take 300 ms to write: the next waits 5.7 s,
        // so writing stays a twentieth of the run.
        let start = Instant::now();
        let mut checkpoints = Checkpoints::new(ms(1000));
        checkpoints.written(start, start + ms(300));
        assert!(!checkpoints.due(start + ms(300 + 5699)));
        assert!(checkpoints.due(start + ms(300 + 5700)));
        // Cheap again: back to the interval.
        checkpoints.written(start + ms(3000), start + ms(3010));
        assert!(checkpoints.due(start + ms(4010)));
    }
}

//! The report files and when each is written: the one place that decides.
//!
//! [`ReportFiles`] owns every output path and is the only [`Reporter`] that
//! writes files. The formats themselves (`json`, `junit`, `markdown`,
//! `html`) are plain `render` functions of the results model, nextest and
//! hyperfine style: serialising is theirs, writing and timing are here.
//!
//! results.json and junit.xml are checkpoints: written when the first case
//! starts, then when a case starts or finishes only if
//! [`CHECKPOINT_INTERVAL`] (or [`CHECKPOINT_COST_FACTOR`] times what the
//! last write took, when the files have grown large) has passed since the
//! last write, and always when the run finishes (also after Ctrl-C).
//! Rewriting them after every case made a suite quadratic in its number of
//! cases; a crash or SIGKILL now loses at most the cases finished in the
//! last interval, the price of a bounded cost.
//!
//! A case in flight is listed too, last, with status `running` (in JUnit
//! an error, "oomgate stopped before this case finished"), so that after a
//! SIGKILL the case oomgate was running reads as interrupted, not as
//! missing. A case that starts too soon after a write for a checkpoint is
//! written at the first sampling tick once the wait is over
//! ([`Checkpoints::should_write`]): it is in the files at most the wait
//! plus one `sample_interval` after it started, however long it runs.
//! Writing at every start would make the suite quadratic again; writing
//! only when cases finish would leave out the very case a killed oomgate
//! was running, if it ran longer than the others. summary.md (and
//! `$GITHUB_STEP_SUMMARY`) and report.html are read after the run, so they
//! are rendered once, at the end; an earlier run's copies are removed when
//! the run starts, so they are never mistaken for this one's. How a file is
//! written safely — atomically through symlinks, FIFOs and devices in place
//! once at the end, the out dir's marker — is the business of `crate::files`.

use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::files::{ReportTarget, WriteFailures, with_path, write_owned};

use super::reserve::{RESERVE_NAME, Reserve, out_of_space, reserve_bytes};
use super::{Event, Reporter, html, json, junit, markdown};
use crate::results::RunResults;

/// The longest time finished and started cases wait to reach results.json
/// and junit.xml while the run goes on (more when the files are large).
pub const CHECKPOINT_INTERVAL: Duration = Duration::from_secs(1);

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
            json: vec![ReportTarget::Owned(out_dir.join("results.json"))],
            junit: vec![ReportTarget::Owned(out_dir.join("junit.xml"))],
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
    /// A case started since the last write: the files do not list it yet.
    start_unwritten: bool,
}

/// What happened in the run that may call for a checkpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Moment {
    CaseStarted,
    /// A sampling tick of the case in flight.
    Tick,
    CaseFinished,
}

/// A checkpoint waits at least this many times as long as the last one
/// took, so writing takes at most about a fiftieth of the run however
/// many cases the files hold (a write's cost grows with them: without this,
/// a suite's time grew faster than its number of cases). The price is what
/// a SIGKILL may lose: the cases finished in the last 49 write-times (6 s
/// of cases near the end of a run of 4000 cases of `true`, whose files
/// then take 126 ms to write; see docs/performance.md), where small files
/// lose at most the last second's.
pub const CHECKPOINT_COST_FACTOR: u32 = 49;

impl Checkpoints {
    pub fn new(interval: Duration) -> Self {
        Checkpoints {
            interval,
            last: None,
            cost: Duration::ZERO,
            start_unwritten: false,
        }
    }

    /// Whether to write a checkpoint at `moment`, at `now`: when one is
    /// [`due`](Checkpoints::due) at a case's start or finish, and at a
    /// tick only for a case whose start was not written (it was too soon
    /// after the last write), once the wait is over.
    pub fn should_write(&mut self, moment: Moment, now: Instant) -> bool {
        let due = self.due(now);
        match moment {
            Moment::CaseStarted => {
                self.start_unwritten |= !due;
                due
            }
            Moment::Tick => self.start_unwritten && due,
            Moment::CaseFinished => due,
        }
    }

    /// Whether a checkpoint is due at `now`: the first one always (a quick
    /// first checkpoint shows the run is alive), then once `interval`, or
    /// [`CHECKPOINT_COST_FACTOR`] times the last write's cost if longer,
    /// has passed since the last write.
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
        self.start_unwritten = false;
    }
}

/// A report's text as it is written: with every secret value and secret
/// shape masked (`crate::redact`), a last guard behind the masking done
/// where text enters the results.
fn mask(text: String) -> String {
    match crate::redact::mask_written(&text) {
        std::borrow::Cow::Borrowed(_) => text,
        std::borrow::Cow::Owned(masked) => masked,
    }
}

/// Writes every report file, each when it is due.
pub struct ReportFiles {
    paths: ReportPaths,
    checkpoints: Checkpoints,
    /// Room kept for the reports on the out dir's file system (see
    /// `report::reserve`).
    reserve: Option<Reserve>,
    /// junit.xml's testcases of the last write, reused for the cases
    /// unchanged since (see [`junit::Memo`]).
    junit: junit::Memo,
}

impl ReportFiles {
    pub fn new(paths: ReportPaths) -> Self {
        ReportFiles {
            paths,
            checkpoints: Checkpoints::new(CHECKPOINT_INTERVAL),
            reserve: None,
            junit: junit::Memo::default(),
        }
    }

    /// The run starts: the pages of an earlier run go, and room for this
    /// run's reports is set aside.
    fn start(&mut self, planned: usize) -> io::Result<()> {
        self.remove_earlier_pages()?;
        let path = self.paths.out_dir.join(RESERVE_NAME);
        self.reserve = Some(Reserve::make(&path, reserve_bytes(planned))?);
        Ok(())
    }

    /// A write failed for lack of space: free half the reserve (the
    /// checkpoints) or all of it (`all`: the end); whether anything was.
    fn spend_reserve(&mut self, all: bool) -> bool {
        match self.reserve.as_mut() {
            Some(reserve) if all => {
                reserve.release();
                self.reserve = None;
                true
            }
            Some(reserve) => reserve.release_half(),
            None => false,
        }
    }

    /// results.json and junit.xml to every target that is due: the files
    /// at a checkpoint. Each target is attempted whatever became of the
    /// others; the failures name theirs. A failed write counts as a write
    /// for the pacing: one at a tick (whose error the runner does not act
    /// on) is retried a checkpoint interval later, not at every tick.
    ///
    /// A checkpoint that fails for lack of space frees half the reserve and
    /// is written again, so the files on disk are never a stale one.
    fn write_checkpoint(&mut self, results: &RunResults) -> io::Result<()> {
        let started = Instant::now();
        let attempt = |files: &mut Self| {
            let mut failures = WriteFailures::default();
            failures.note(files.write_json(results, false));
            failures.note(files.write_junit(results, false));
            failures.into_result()
        };
        let mut outcome = attempt(self);
        if outcome.as_ref().is_err_and(out_of_space) && self.spend_reserve(false) {
            outcome = attempt(self);
        }
        self.checkpoints.written(started, Instant::now());
        outcome
    }

    /// results.json, and when there is no room for it whole, the same
    /// without what a reader can do without (see [`compact`]).
    fn write_json_fitting(&self, results: &RunResults, last: bool) -> io::Result<()> {
        match self.write_json(results, last) {
            Err(e) if out_of_space(&e) => self.write_json(&compact(results, &e), last),
            outcome => outcome,
        }
    }

    /// junit.xml, and when there is no room for it whole, the same
    /// without the log tails.
    fn write_junit_fitting(&mut self, results: &RunResults, last: bool) -> io::Result<()> {
        match self.write_junit(results, last) {
            Err(e) if out_of_space(&e) => self.write_junit(&compact(results, &e), last),
            outcome => outcome,
        }
    }

    /// results.json to its files (`last`: and its streams).
    fn write_json(&self, results: &RunResults, last: bool) -> io::Result<()> {
        let text = mask(json::render(results)?);
        write_to(&self.paths.json, &text, last)
    }

    /// junit.xml to its files (`last`: and its streams).
    fn write_junit(&mut self, results: &RunResults, last: bool) -> io::Result<()> {
        let text = mask(junit::render_with(results, &mut self.junit)?);
        write_to(&self.paths.junit, &text, last)
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

    /// The run is over: junit.xml (the file CI tools read first), then
    /// the pages people read. Each is attempted whatever became of the
    /// others. results.json follows with `RunFinished`.
    ///
    /// The reserve is freed first. After a fault, results.json is written
    /// here too, before the pages, so a disk that fills again gives the
    /// room to the files CI reads (it is written once more, with oomgate's
    /// own figures, at `RunFinished`).
    fn write_pages(&mut self, results: &RunResults) -> io::Result<()> {
        self.spend_reserve(true);
        let mut failures = WriteFailures::default();
        failures.note(self.write_junit_fitting(results, true));
        if results.fault.is_some() {
            failures.note(self.write_json_fitting(results, false));
        }
        let summary = mask(markdown::render(results));
        let path = &self.paths.summary_md;
        failures.note(write_owned(path, summary.as_bytes()).map_err(|e| with_path(e, path)));
        if let Some(step_summary) = &self.paths.step_summary {
            // The job summary is a courtesy of the CI system: failing to
            // add to it is said, and changes no verdict.
            if let Err(e) = markdown::append_step_summary(step_summary, &summary) {
                super::terminal::to_stderr(&format!(
                    "warning: cannot append the summary to $GITHUB_STEP_SUMMARY ({}): {e}; the verdict is unchanged",
                    step_summary.display()
                ));
            }
        }
        let page = mask(html::render(results, &self.paths.out_dir));
        let path = &self.paths.html;
        failures.note(write_owned(path, page.as_bytes()).map_err(|e| with_path(e, path)));
        failures.into_result()
    }
}

/// The results without what a reader can do without when the disk has no
/// room for them whole: the log tails (each case's `stdout.log` and
/// `stderr.log` hold them). The fault says so.
fn compact(results: &RunResults, error: &io::Error) -> RunResults {
    let mut compact = results.clone();
    for case in &mut compact.cases {
        case.stdout_tail.clear();
        case.stderr_tail.clear();
    }
    let note = format!(
        "written without the log tails for lack of space ({error}); they are in each case's logs"
    );
    compact.fault = Some(match compact.fault.take() {
        Some(fault) => format!("{fault}; {note}"),
        None => note,
    });
    compact
}

/// One report's text to each of its targets: the files always, streams
/// (FIFOs, devices) only at the end (`last`).
fn write_to(targets: &[ReportTarget], text: &str, last: bool) -> io::Result<()> {
    let mut failures = WriteFailures::default();
    for target in targets
        .iter()
        .filter(|target| last || !matches!(target, ReportTarget::Stream(_)))
    {
        failures.note(target.write(text.as_bytes()));
    }
    failures.into_result()
}

impl Reporter for ReportFiles {
    fn handle(&mut self, event: &Event<'_>) -> io::Result<()> {
        let moment = match event {
            // Written with the end that follows, if due then.
            Event::CaseStarted {
                end_follows: true, ..
            } => {
                self.checkpoints.start_unwritten = true;
                None
            }
            Event::CaseStarted { results, .. } => Some((Moment::CaseStarted, *results)),
            Event::CaseProgress { results, .. } => Some((Moment::Tick, *results)),
            Event::CaseFinished { results, .. } => Some((Moment::CaseFinished, *results)),
            _ => None,
        };
        if let Some((moment, results)) = moment {
            if self.checkpoints.should_write(moment, Instant::now()) {
                return self.write_checkpoint(results);
            }
            return Ok(());
        }
        match event {
            Event::RunFinishing { results } => self.write_pages(results),
            Event::RunFinished { results } => self.write_json_fitting(results, true),
            Event::RunStarted { planned, .. } => self.start(*planned),
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
    fn the_first_case_is_written_when_it_starts() {
        let mut checkpoints = Checkpoints::new(ms(1000));
        assert!(checkpoints.should_write(Moment::CaseStarted, Instant::now()));
    }

    #[test]
    fn a_start_too_soon_after_a_write_is_written_at_the_first_tick_after_the_wait() {
        let start = Instant::now();
        let mut checkpoints = Checkpoints::new(ms(1000));
        checkpoints.written(start, start);
        // A case finished and the next started 10 ms after the last write.
        assert!(!checkpoints.should_write(Moment::CaseFinished, start + ms(5)));
        assert!(!checkpoints.should_write(Moment::CaseStarted, start + ms(10)));
        // Ticks before the wait is over write nothing; the first after does.
        assert!(!checkpoints.should_write(Moment::Tick, start + ms(500)));
        assert!(!checkpoints.should_write(Moment::Tick, start + ms(999)));
        assert!(checkpoints.should_write(Moment::Tick, start + ms(1020)));
        checkpoints.written(start + ms(1020), start + ms(1030));
        // Written: later ticks of the same case write nothing more.
        for after in [2000, 5000, 60_000] {
            assert!(!checkpoints.should_write(Moment::Tick, start + ms(after)));
        }
        // Its finish is written when due, as any.
        assert!(checkpoints.should_write(Moment::CaseFinished, start + ms(60_000)));
    }

    #[test]
    fn ticks_write_nothing_when_the_case_in_flight_is_written() {
        let start = Instant::now();
        let mut checkpoints = Checkpoints::new(ms(1000));
        assert!(checkpoints.should_write(Moment::CaseStarted, start));
        checkpoints.written(start, start);
        for after in [0, 1000, 10_000] {
            assert!(!checkpoints.should_write(Moment::Tick, start + ms(after)));
        }
    }

    #[test]
    fn many_quick_cases_starting_and_finishing_make_few_checkpoints() {
        // 2000 cases of 5 ms over 10 s, a tick at each start: still the
        // first, then about one a second.
        let start = Instant::now();
        let mut checkpoints = Checkpoints::new(CHECKPOINT_INTERVAL);
        let mut written = 0;
        for case in 0..2000 {
            for (moment, at) in [
                (Moment::CaseStarted, 5 * case),
                (Moment::Tick, 5 * case),
                (Moment::CaseFinished, 5 * case + 4),
            ] {
                let now = start + ms(at);
                if checkpoints.should_write(moment, now) {
                    checkpoints.written(now, now);
                    written += 1;
                }
            }
        }
        assert_eq!(written, 10);
    }

    #[test]
    fn a_costly_checkpoint_spaces_out_the_next() {
        // Files of many cases take 300 ms to write: the next waits 14.7 s,
        // so writing stays a fiftieth of the run.
        let start = Instant::now();
        let mut checkpoints = Checkpoints::new(ms(1000));
        checkpoints.written(start, start + ms(300));
        assert!(!checkpoints.due(start + ms(300 + 14_699)));
        assert!(checkpoints.due(start + ms(300 + 14_700)));
        // Cheap again: back to the interval.
        checkpoints.written(start + ms(3000), start + ms(3010));
        assert!(checkpoints.due(start + ms(4010)));
    }
}

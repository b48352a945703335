//! What a person watching `oomgate run` sees, on stderr.
//!
//! On a terminal: a live line for the running case (elapsed time, memory
//! now and peak; with cases running at once, how many and each one's
//! time) drawn by indicatif, and one line per finished case above it. In
//! CI, where stderr is a log file, indicatif draws nothing, so the display
//! prints plain lines instead: one per finished case, plus a `RUNNING`
//! line every minute of a long case so the log never looks hung. Both end
//! with a table of every case and a summary line.
//!
//! A stderr that cannot be written (a pipe whose reader exited) silences
//! the display and every other message, never the run: [`to_stderr`] says
//! so once on stdout, unless a report goes there, and writes nothing more.

use std::io::{self, IsTerminal, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anstyle::{AnsiColor, Style};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use super::{Event, Reporter};
use crate::baseline::Figure;
use crate::clean::line as clean;
use crate::measure::gpu::GpuMethod;
use crate::results::{CaseResult, CaseStatus, CheckKind, RunResults};
use crate::units::{Bytes, bytes_or_unknown, format_duration};

/// How often a long case reports that it is still running, without a TTY.
const HEARTBEAT: Duration = Duration::from_secs(60);

/// stderr failed once: nothing more is written to it. Process-wide, as
/// the stream is.
static STDERR_LOST: AtomicBool = AtomicBool::new(false);

/// A report is written to stdout (`--json /dev/stdout`): the warning that
/// stderr was lost must not go into it.
static STDOUT_CARRIES_REPORT: AtomicBool = AtomicBool::new(false);

/// Say that stdout carries a report, so nothing else is written there.
pub fn stdout_carries_report(carries: bool) {
    STDOUT_CARRIES_REPORT.store(carries, Ordering::Relaxed);
}

/// Whether a report is written to stdout (nothing else may be).
pub fn stdout_is_taken() -> bool {
    STDOUT_CARRIES_REPORT.load(Ordering::Relaxed)
}

/// Write one line to stderr. The first failure ends all writing there and
/// is said once on stdout (unless a report goes to stdout); the run goes
/// on either way, and its exit status still tells the outcome.
pub fn to_stderr(text: &str) {
    if STDERR_LOST.load(Ordering::Relaxed) {
        return;
    }
    // Every message oomgate prints passes here: secrets masked.
    // One `write` a line: `writeln!` makes two (the text, then the
    // newline), which a reader of a shared stderr (a CI log) may see
    // apart, and which cost a system call a case more.
    // Outside text is cleaned where it is put in a line; what was missed
    // cannot act on the terminal here (`clean::terminal`).
    let mut line = crate::clean::terminal(&crate::redact::mask_written(text)).into_owned();
    line.push('\n');
    let Err(error) = io::stderr().lock().write_all(line.as_bytes()) else {
        return;
    };
    if STDERR_LOST.swap(true, Ordering::Relaxed) || STDOUT_CARRIES_REPORT.load(Ordering::Relaxed) {
        return;
    }
    let mut stdout = io::stdout().lock();
    let _ = writeln!(
        stdout,
        "warning: oomgate cannot write to stderr ({error}): its messages stop here; the cases go on, every report is still written, and the exit status tells the outcome"
    )
    .and_then(|()| stdout.flush());
}

/// How progress is shown while cases run (`run --progress`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Progress {
    /// A live line on an interactive terminal; plain lines in CI (`CI`,
    /// `GITHUB_ACTIONS`, `GITLAB_CI`, `BUILDKITE`, `JENKINS_URL`, ... set),
    /// on a terminal with no size (a 0x0 pseudo-terminal), with
    /// `TERM=dumb`, or when stderr is not a terminal.
    #[default]
    Auto,
    /// The live line, redrawn with cursor movement.
    Bar,
    /// One line per finished case, and a `RUNNING` line every minute.
    Lines,
    /// No progress: warnings, the final table and the summary only.
    None,
}

impl Progress {
    /// What `Auto` becomes here.
    fn resolve(self) -> Progress {
        match self {
            Progress::Auto if interactive_stderr() => Progress::Bar,
            Progress::Auto => Progress::Lines,
            chosen => chosen,
        }
    }
}

/// Whether stderr is a terminal a live display can redraw: a TTY with a
/// size, `TERM` not `dumb`, and not under CI (whose log viewers show each
/// redraw as a line, or garble it).
fn interactive_stderr() -> bool {
    let dumb = std::env::var("TERM").is_ok_and(|t| t == "dumb");
    io::stderr().is_terminal() && !under_ci() && !dumb && stderr_has_a_size()
}

/// Variables CI systems set in every job: `CI` (most), and the ones of
/// systems that do not set it.
const CI_VARIABLES: [&str; 9] = [
    "CI",
    "GITHUB_ACTIONS",
    "GITLAB_CI",
    "BUILDKITE",
    "JENKINS_URL",
    "TF_BUILD",
    "TEAMCITY_VERSION",
    "CIRCLECI",
    "BITBUCKET_BUILD_NUMBER",
];

/// Whether oomgate runs in a CI job (a variable above set, and not to
/// `0` or `false`).
fn under_ci() -> bool {
    CI_VARIABLES.iter().any(|name| {
        std::env::var(name)
            .is_ok_and(|v| !v.is_empty() && v != "0" && !v.eq_ignore_ascii_case("false"))
    })
}

/// Whether the terminal on stderr reports a size (`TIOCGWINSZ`); a
/// pseudo-terminal made without one is 0x0.
fn stderr_has_a_size() -> bool {
    // SAFETY: TIOCGWINSZ writes a winsize into the struct we own.
    let mut size: libc::winsize = unsafe { std::mem::zeroed() };
    let ok = unsafe { libc::ioctl(libc::STDERR_FILENO, libc::TIOCGWINSZ, &mut size) } == 0;
    ok && size.ws_col > 0 && size.ws_row > 0
}

pub struct Terminal {
    bar: Option<ProgressBar>,
    /// Per-case lines and heartbeats (off with `Progress::None`).
    progress_lines: bool,
    color: bool,
    started: Instant,
    /// The cases running now, in the order they started.
    running: Vec<Running>,
    planned: usize,
    finished: usize,
}

/// A case running now, as the live line and heartbeats show it.
struct Running {
    id: String,
    index: usize,
    elapsed: Duration,
    host_now: String,
    host_peak: String,
    last_heartbeat: Duration,
}

impl Terminal {
    /// The display `progress` asks for; colours when stderr is a terminal
    /// (and neither `NO_COLOR` nor `TERM=dumb` says otherwise).
    pub fn new(progress: Progress) -> Self {
        let tty = io::stderr().is_terminal();
        let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
        let dumb = std::env::var("TERM").is_ok_and(|t| t == "dumb");
        let progress = progress.resolve();
        Terminal {
            bar: None,
            progress_lines: progress != Progress::None,
            color: tty && !no_color && !dumb,
            started: Instant::now(),
            running: Vec::new(),
            planned: 0,
            finished: 0,
        }
        .with_bar(progress == Progress::Bar)
    }

    /// The summary line's time counted as if the run had started
    /// `elapsed` ago: for results rendered after the fact (`oomgate
    /// merge`, whose run spans its shards).
    pub fn elapsed_before(mut self, elapsed: Duration) -> Self {
        if let Some(started) = Instant::now().checked_sub(elapsed) {
            self.started = started;
        }
        self
    }

    fn with_bar(mut self, live: bool) -> Self {
        if live {
            let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
            bar.set_style(
                ProgressStyle::with_template("{spinner:.cyan} {msg}")
                    .unwrap_or_else(|_| ProgressStyle::default_spinner()),
            );
            self.bar = Some(bar);
        }
        self
    }

    fn paint(&self, style: Style, text: &str) -> String {
        if self.color {
            format!("{style}{text}{style:#}")
        } else {
            text.to_string()
        }
    }

    fn line(&self, text: &str) {
        match &self.bar {
            // to_stderr masks what it prints; the live display here.
            Some(bar) => bar.println(crate::clean::terminal(&crate::redact::mask_written(text))),
            None => to_stderr(text),
        }
    }

    fn status_style(status: CaseStatus) -> Style {
        match status {
            CaseStatus::Passed => AnsiColor::Green.on_default().bold(),
            CaseStatus::Interrupted | CaseStatus::Skipped => AnsiColor::Yellow.on_default().bold(),
            _ => AnsiColor::Red.on_default().bold(),
        }
    }

    /// The live line: the one running case, or how many run and each
    /// one's time.
    fn live_message(&self) -> String {
        match self.running.as_slice() {
            [] => String::new(),
            [one] => format!(
                "[{}/{}] {}  {}  host {}  peak {}",
                one.index + 1,
                self.planned,
                clean(&one.id),
                format_duration(one.elapsed),
                one.host_now,
                one.host_peak
            ),
            many => {
                let each: Vec<String> = many
                    .iter()
                    .map(|r| format!("{} {}", clean(&r.id), format_duration(r.elapsed)))
                    .collect();
                format!(
                    "[{}/{}] {} running: {}",
                    self.finished,
                    self.planned,
                    many.len(),
                    each.join(", ")
                )
            }
        }
    }

    pub(super) fn finished_line(&self, case: &CaseResult) -> String {
        let label = format!("{:>12}", case.label());
        let time = format!(
            "[{:>8}]",
            format_duration(Duration::from_secs_f64(case.wall_time_s))
        );
        let mut text = format!(
            "{} {time} {}  {}",
            self.paint(Self::status_style(case.status), &label),
            self.paint(Style::new().bold(), &clean(&case.id)),
            figures(case)
        );
        if let Some(capacity) = &case.capacity {
            text.push_str(&format!("\n{:>12}   {}", "", clean(&capacity.describe())));
        }
        if let Some(server) = &case.server {
            text.push_str(&format!("\n{:>12}   {}", "", clean(&server.describe())));
        }
        if let Some(client) = &case.client {
            text.push_str(&format!("\n{:>12}   {}", "", clean(&client.describe())));
        }
        for shared in &case.gpu_sharing {
            text.push_str(&format!(
                "\n{:>12}   shared GPU {} with {}",
                "",
                shared.gpu.index,
                clean(&shared.with.join(", "))
            ));
        }
        if let Some(retried) = &case.retried_alone {
            let first = &retried.first_attempt;
            let outcome = match case.status {
                CaseStatus::Passed => "passed alone",
                _ => "failed alone too",
            };
            text.push_str(&format!(
                "\n{:>12}   first attempt, {}: {}; {outcome}",
                "",
                first.circumstance(),
                clean(first.message.as_deref().unwrap_or(first.status.label()))
            ));
        }
        // A skip's reason is in results.json and JUnit, as pytest keeps it
        // to `-rs`; the line says SKIP.
        if let Some(message) = case
            .message
            .as_ref()
            .filter(|_| case.status != CaseStatus::Skipped)
        {
            text.push_str(&format!("\n{:>12}   {}", "", clean(message)));
            if !case.status.ok() {
                for hint in case.diagnosis.iter().flat_map(|d| &d.hints) {
                    text.push_str(&format!("\n{:>12}   hint: {}", "", clean(hint)));
                }
                // A test of a shared session that printed nothing has no
                // folder.
                if !case.dir.as_os_str().is_empty() {
                    text.push_str(&format!(
                        "\n{:>12}   logs: {}",
                        "",
                        clean(&case.dir.display().to_string())
                    ));
                }
            }
        }
        text
    }

    pub(super) fn final_table(&self, results: &RunResults) -> String {
        let with_gpu = results.measurement.gpu_method.is_some();
        let with_baseline = results.baseline.is_some();
        let mut header = vec!["STATUS", "CASE", "TIME", "HOST PEAK", "BUDGET"];
        if with_gpu {
            header.extend(["GPU PEAK", "METHOD"]);
        }
        if with_baseline {
            header.extend(["BASELINE", "DELTA"]);
        }
        let dash = || "-".to_string();
        let mut rows: Vec<(Option<CaseStatus>, Vec<String>)> = results
            .cases
            .iter()
            .map(|case| {
                let budget = case
                    .checks
                    .iter()
                    .find(|c| c.kind == CheckKind::HostBudget)
                    .and_then(|c| c.limit_bytes)
                    .map_or_else(dash, |b| Bytes(b).to_string());
                let mut row = vec![
                    case.label().to_string(),
                    clean(&case.id).into_owned(),
                    format_duration(Duration::from_secs_f64(case.wall_time_s)),
                    case.host_peak().map_or("unknown".to_string(), |b| {
                        format!("{b}{}", super::spread_note(case, Figure::Host))
                    }),
                    budget,
                ];
                if with_gpu {
                    row.push(format!(
                        "{}{}",
                        bytes_or_unknown(case.gpu_peak_bytes),
                        case.gpu_peak_bytes
                            .map(|_| super::spread_note(case, Figure::Gpu))
                            .unwrap_or_default()
                    ));
                    row.push(
                        case.gpu_peak_method
                            .as_ref()
                            .map_or_else(dash, ToString::to_string),
                    );
                }
                if with_baseline {
                    let (baseline, delta) = super::baseline_cells(case);
                    row.extend([baseline, delta]);
                }
                (Some(case.status), row)
            })
            .collect();
        for id in &results.not_run {
            let mut row = vec!["NOT RUN".to_string(), clean(id).into_owned()];
            row.resize(header.len(), dash());
            rows.push((None, row));
        }
        let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
        for (_, row) in &rows {
            for (width, cell) in widths.iter_mut().zip(row) {
                *width = (*width).max(cell.chars().count());
            }
        }
        let render = |cells: &[&str]| -> String {
            let mut line = String::from(" ");
            for (i, (cell, width)) in cells.iter().zip(&widths).enumerate() {
                // Figures read best right-aligned; names and words left-aligned.
                if ["TIME", "HOST PEAK", "BUDGET", "GPU PEAK", "BASELINE"].contains(&header[i]) {
                    line.push_str(&format!("  {cell:>width$}"));
                } else {
                    line.push_str(&format!("  {cell:<width$}"));
                }
            }
            line.trim_end().to_string()
        };
        let mut out = vec![self.paint(Style::new().bold(), &render(&header))];
        for (status, row) in &rows {
            let cells: Vec<&str> = row.iter().map(String::as_str).collect();
            let text = render(&cells);
            out.push(match status {
                Some(status) if !status.ok() => self.paint(Self::status_style(*status), &text),
                _ => text,
            });
        }
        let delta = |c: &CaseResult| {
            c.gpu_devices
                .iter()
                .any(|d| d.method == GpuMethod::DeviceDelta)
        };
        if results.cases.iter().any(delta) {
            out.push(format!(" note: {}", super::DEVICE_DELTA_NOTE));
        }
        let mut tainted = false;
        for case in &results.cases {
            for device in case.gpu_devices.iter().filter(|d| !d.tainted_by.is_empty()) {
                tainted = true;
                out.push(format!(
                    " note: {}: GPU {} by {}{}",
                    clean(&case.id),
                    device.index,
                    device.method,
                    super::taint_mark(device)
                ));
            }
        }
        if tainted {
            out.push(format!(" note: {}", super::TAINTED_NOTE));
        }
        out.join("\n")
    }

    /// What ends a run, each a `line` of its own: a rule, the table of
    /// every case and another rule, each repeated case's spread, the
    /// baseline's notes, and the summary line with the run's `elapsed`
    /// time.
    pub(super) fn closing_lines(&self, results: &RunResults, elapsed: Duration) -> Vec<String> {
        let mut lines = Vec::new();
        let rule = "─".repeat(60);
        lines.push(rule.clone());
        if !results.cases.is_empty() || !results.not_run.is_empty() {
            lines.push(self.final_table(results));
            lines.push(rule);
        }
        for case in &results.cases {
            if let Some(spread) = super::repeat_spread(case) {
                lines.push(format!("{}: {spread}", clean(&case.id)));
            }
        }
        if let Some(baseline) = &results.baseline {
            lines.extend(baseline_notes(results, baseline));
        }
        for notice in super::history_notices(results) {
            lines.push(format!("history: {}", clean(&notice)));
        }
        for parity in &results.parity {
            use crate::results::ParityOutcome;
            let (word, style) = match parity.outcome {
                ParityOutcome::Held => ("HELD", AnsiColor::Green.on_default().bold()),
                ParityOutcome::Broken => ("BROKEN", AnsiColor::Red.on_default().bold()),
                ParityOutcome::Unknown => ("UNKNOWN", AnsiColor::Red.on_default().bold()),
                ParityOutcome::NotJudged => ("NOT JUDGED", AnsiColor::Yellow.on_default()),
            };
            lines.push(format!(
                "{} {}: {}",
                self.paint(style, &format!("{word:>12}")),
                clean(&parity.name),
                clean(&parity.message)
            ));
        }
        let s = &results.summary;
        let mut parts = super::summary_counts(s);
        let broken = results.parity.iter().filter(|p| !p.passed).count();
        if broken > 0 {
            parts.push(format!("{broken} parity rule(s) not held"));
        }
        let uncompared = results
            .cases
            .iter()
            .filter(|c| {
                c.status == crate::results::CaseStatus::Passed
                    && !super::uncompared_figures(c).is_empty()
            })
            .count();
        if uncompared > 0 {
            parts.push(format!("{uncompared} passed with a figure not compared"));
        }
        if !results.not_run.is_empty() {
            parts.push(format!("{} not run", results.not_run.len()));
        }
        let label = if results.fault.is_some() {
            "Stopped"
        } else if results.interrupted {
            "Interrupted"
        } else {
            "Summary"
        };
        let style =
            if s.not_passed() > 0 || broken > 0 || results.interrupted || results.fault.is_some() {
                AnsiColor::Red.on_default().bold()
            } else {
                AnsiColor::Green.on_default().bold()
            };
        lines.push(format!(
            "{} [{:>8}] {} {} run: {}",
            self.paint(style, &format!("{label:>12}")),
            format_duration(elapsed),
            results.cases.len(),
            if results.cases.len() == 1 {
                "case"
            } else {
                "cases"
            },
            parts.join(", ")
        ));
        lines
    }
}

impl Default for Terminal {
    fn default() -> Self {
        Self::new(Progress::Auto)
    }
}

/// What the reader should know about the baseline beyond the table.
fn baseline_notes(results: &RunResults, baseline: &crate::results::BaselineInfo) -> Vec<String> {
    let mut notes = Vec::new();
    if baseline.drift.is_empty() {
        notes.push(format!(
            "baseline {}: environment unchanged",
            clean(&baseline.path.display().to_string())
        ));
    } else {
        notes.push(format!(
            "environment changes since the baseline ({}):",
            clean(&baseline.path.display().to_string())
        ));
        notes.extend(
            baseline
                .drift
                .iter()
                .map(|d| format!("  {}", clean(&d.to_string()))),
        );
    }
    if !baseline.gpu_compared {
        notes.push("GPU figures not compared: the GPU model differs from the baseline's (--compare-across-gpus)".into());
    }
    if !baseline.removed.is_empty() {
        notes.push(format!(
            "in the baseline but no longer in the suite: {}",
            clean(&baseline.removed.join(", "))
        ));
    }
    let improved = super::improved_cases(results);
    if !improved.is_empty() {
        notes.push(format!(
            "improved beyond tolerance: {}; re-lock (oomgate lock) to tighten the gate",
            clean(&improved.join(", "))
        ));
    }

    for case in &results.cases {
        if let Some(comparison) = &case.baseline {
            if !comparison.changes.is_empty() {
                notes.push(format!(
                    "{}: changed since the baseline: {}",
                    clean(&case.id),
                    clean(&comparison.changes.join("; "))
                ));
            }
        }
    }
    // A figure of a locked case that was not compared is said, never
    // counted as passed in silence.
    let uncompared = super::uncompared_in_run(results);
    if !uncompared.is_empty() {
        notes.push(format!(
            "figures not compared with the baseline: {}; re-lock (oomgate lock) to gate them (--require-baseline fails them)",
            clean(&uncompared.join(", "))
        ));
    }
    let unlocked: Vec<&str> = results
        .cases
        .iter()
        .filter(|c| c.baseline.as_ref().is_some_and(|b| !b.locked))
        .map(|c| c.id.as_str())
        .collect();
    if !unlocked.is_empty() {
        notes.push(format!(
            "no baseline yet for: {}",
            clean(&unlocked.join(", "))
        ));
    }
    notes
}

/// `host peak 74.2 MiB (budget 512.0 MiB)`
fn figures(case: &CaseResult) -> String {
    let peak = case
        .host_peak()
        .map_or("unknown".to_string(), |b| b.to_string());
    let mut text = match case
        .checks
        .iter()
        .find(|c| c.kind == CheckKind::HostBudget)
        .and_then(|c| c.limit_bytes)
    {
        Some(limit) => format!("host peak {peak} (budget {})", Bytes(limit)),
        None => format!("host peak {peak}"),
    };
    if let Some(method) = &case.gpu_peak_method {
        let gpu = bytes_or_unknown(case.gpu_peak_bytes);
        // Which devices, by whom, is in the notes under the final table.
        let tainted = case.gpu_devices.iter().any(|d| !d.tainted_by.is_empty());
        let mark = if tainted { ", tainted" } else { "" };
        text.push_str(&format!(", gpu peak {gpu} ({method}{mark})"));
    }
    if let Some(largest) = super::largest_rank(case) {
        text.push_str(&format!("; {largest}"));
    }
    text
}

impl Reporter for Terminal {
    fn handle(&mut self, event: &Event<'_>) -> io::Result<()> {
        match event {
            Event::RunStarted {
                suite,
                planned,
                measurement,
            } => {
                self.started = Instant::now();
                self.planned = *planned;
                let cases = if *planned == 1 { "case" } else { "cases" };
                self.line(&format!(
                    "{} {planned} {cases} from {} (host memory by {}, every {}ms)",
                    self.paint(
                        AnsiColor::Green.on_default().bold(),
                        &format!("{:>12}", "Starting")
                    ),
                    suite.path.display(),
                    measurement.host_method,
                    measurement.sample_interval_ms
                ));
                if let Some(note) = &measurement.gpu_note {
                    self.line(&format!(
                        "{} GPU memory is not measured: {note}",
                        self.paint(
                            AnsiColor::Yellow.on_default().bold(),
                            &format!("{:>12}", "note")
                        ),
                    ));
                }
            }
            Event::CaseStarted { case, index, .. } => {
                self.running.push(Running {
                    id: case.id.clone(),
                    index: *index,
                    elapsed: Duration::ZERO,
                    host_now: "?".to_string(),
                    host_peak: "?".to_string(),
                    last_heartbeat: Duration::ZERO,
                });
                if let Some(bar) = &self.bar {
                    bar.set_message(crate::redact::mask_written(&self.live_message()).into_owned());
                    bar.enable_steady_tick(Duration::from_millis(100));
                }
            }
            Event::CaseProgress {
                case,
                elapsed,
                host_now,
                host_peak,
                ..
            } => {
                let Some(at) = self.running.iter().position(|r| r.id == case.id) else {
                    return Ok(());
                };
                let running = &mut self.running[at];
                running.elapsed = *elapsed;
                running.host_now = host_now.map_or("?".to_string(), |b| b.to_string());
                running.host_peak = host_peak.map_or("?".to_string(), |b| b.to_string());
                let heartbeat_due = *elapsed >= running.last_heartbeat + HEARTBEAT;
                match &self.bar {
                    Some(bar) => bar.set_message(
                        crate::redact::mask_written(&self.live_message()).into_owned(),
                    ),
                    None if self.progress_lines && heartbeat_due => {
                        self.running[at].last_heartbeat = *elapsed;
                        let running = &self.running[at];
                        self.line(&format!(
                            "{:>12} [{:>8}] {}  host {}, peak {}",
                            "RUNNING",
                            format_duration(*elapsed),
                            running.id,
                            running.host_now,
                            running.host_peak
                        ));
                    }
                    None => {}
                }
            }
            Event::CaseFinished { result, .. } => {
                self.running.retain(|r| r.id != result.id);
                self.finished += 1;
                if let Some(bar) = &self.bar {
                    if self.running.is_empty() {
                        bar.disable_steady_tick();
                    }
                    bar.set_message(crate::redact::mask_written(&self.live_message()).into_owned());
                }
                if self.progress_lines {
                    self.line(&self.finished_line(result));
                }
            }
            // The table waits for the run's own figures.
            Event::RunFinishing { .. } => {}
            Event::Warning { message } => {
                self.line(&format!(
                    "{} {message}",
                    self.paint(AnsiColor::Yellow.on_default().bold(), "warning:")
                ));
            }
            Event::RunFinished { results } => {
                if let Some(bar) = self.bar.take() {
                    bar.finish_and_clear();
                }
                for line in self.closing_lines(results, self.started.elapsed()) {
                    self.line(&line);
                }
            }
        }
        Ok(())
    }
}

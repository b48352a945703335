//! Reports: every output oomgate writes, each fed the same events and the
//! same results model.
//!
//! The runner emits [`Event`]s; a [`FanOut`] hands each one to every
//! [`Reporter`] in turn: the terminal display, the GitHub annotations, and
//! `files::ReportFiles`, the one reporter that writes files and decides
//! when each is due (results.json and junit.xml as checkpoints about once a
//! second and at the end, summary.md and report.html once at the end). One
//! file per format, nextest and hyperfine style: each format is a plain
//! `render` of the results model, so adding one touches nothing else, and
//! how often a format is written is never the format's own decision.

pub mod bisect;
pub mod github;
pub mod history;
pub mod html;
pub mod inventory;
pub mod json;
pub mod junit;
pub mod markdown;
pub mod outputs;
pub mod parts;
pub mod reserve;
pub mod terminal;
pub mod words;

#[cfg(test)]
mod snapshots;
#[cfg(test)]
mod snapshots_packed;
#[cfg(test)]
mod snapshots_sentences;

use std::io;
use std::time::Duration;

use crate::results::{CaseResult, CheckKind, Measurement, RunResults};
use crate::suite::{Case, Suite};
use crate::units::{Bytes, bytes_or_unknown};

/// Something that happened during a run.
#[derive(Debug)]
pub enum Event<'a> {
    RunStarted {
        suite: &'a Suite,
        planned: usize,
        measurement: &'a Measurement,
    },
    /// `results` holds every case finished so far and, last, this one in
    /// flight (status `running`), for a checkpoint to list.
    CaseStarted {
        case: &'a Case,
        index: usize,
        planned: usize,
        results: &'a RunResults,
        /// Another case's end is reported right after this start, in the
        /// same turn of the run: a checkpoint due now waits for it (this
        /// case, in flight, is in it all the same), so the case's worker
        /// is not kept waiting while the files are written.
        end_follows: bool,
    },
    /// Once per sampling tick while a case runs; `results` as for
    /// `CaseStarted`.
    CaseProgress {
        case: &'a Case,
        elapsed: Duration,
        host_now: Option<Bytes>,
        host_peak: Option<Bytes>,
        results: &'a RunResults,
    },
    /// `results` holds every case finished so far, this one included.
    CaseFinished {
        result: &'a CaseResult,
        index: usize,
        planned: usize,
        results: &'a RunResults,
    },
    /// The run is over: the pages are written (junit.xml, summary.md,
    /// report.html), before `RunFinished`, so that oomgate's own figures
    /// (`runner_cpu_s`, `runner_max_rss_bytes`) taken between the two
    /// include writing them.
    RunFinishing { results: &'a RunResults },
    /// The run is over and its own figures are in: results.json is
    /// written, the terminal shows the table and the summary.
    RunFinished { results: &'a RunResults },
    /// Something the user should know that is not a case verdict.
    Warning { message: String },
}

pub trait Reporter {
    /// Handle one event. An error is a file that could not be written: the
    /// runner launches no more cases, writes the final reports once more,
    /// and oomgate exits 3. A display that cannot be shown (a closed
    /// stdout or stderr) is no error: the reporter goes quiet instead.
    fn handle(&mut self, event: &Event<'_>) -> io::Result<()>;
}

/// Hands each event to every reporter, in order.
#[derive(Default)]
pub struct FanOut {
    reporters: Vec<Box<dyn Reporter>>,
}

impl FanOut {
    pub fn new(reporters: Vec<Box<dyn Reporter>>) -> Self {
        FanOut { reporters }
    }
}

impl Reporter for FanOut {
    /// Every reporter gets the event, whatever became of the others: a
    /// report that cannot be written must not silence the terminal.
    fn handle(&mut self, event: &Event<'_>) -> io::Result<()> {
        let mut failures = crate::files::WriteFailures::default();
        for reporter in &mut self.reporters {
            failures.note(reporter.handle(event));
        }
        failures.into_result()
    }
}

/// The baseline and delta of a case's main figure (GPU when measured, else
/// host memory), as table cells: `38.0 GiB`, `+8.4% regressed`.
pub fn baseline_cells(case: &CaseResult) -> (String, String) {
    use crate::baseline::Outcome;
    let dash = || "–".to_string();
    if let Some(cells) = capacity_cells(case) {
        return cells;
    }
    let Some(figure) = shown_figure(case) else {
        return (dash(), dash());
    };
    let label = match figure.figure {
        crate::baseline::Figure::Gpu => "",
        crate::baseline::Figure::Host => " (host)",
        crate::baseline::Figure::Working => " (working)",
        crate::baseline::Figure::Allocated => " (allocated)",
        crate::baseline::Figure::Outside => " (outside allocator)",
    };
    let baseline = match figure.outcome {
        Outcome::NoBaseline => "no baseline".to_string(),
        Outcome::Skipped => "not compared".to_string(),
        _ => figure
            .baseline_bytes
            .map_or_else(dash, |b| format!("{}{label}", Bytes(b))),
    };
    let mark = match figure.outcome {
        Outcome::Regressed => " regressed",
        Outcome::Improved => " improved",
        _ => "",
    };
    let delta = match (figure.outcome, figure.delta_ratio) {
        (Outcome::Skipped | Outcome::NoBaseline, _) => dash(),
        (Outcome::Unknown, _) => "unknown".to_string(),
        (_, Some(ratio)) => format!("{}{mark}", crate::baseline::compare::signed_percent(ratio)),
        // A zero baseline has no ratio: show the change itself.
        (_, None) => match figure.delta_bytes {
            Some(0) => "+0.0%".to_string(),
            Some(d) => format!("+{}{mark}", Bytes(d.unsigned_abs())),
            None => dash(),
        },
    };
    (baseline, delta)
}

/// The compared figure a one-line view of a case shows (the tables'
/// baseline and delta, report.html's overview): the first that failed the
/// gate — GPU, host, working memory, allocated — else GPU when there is a
/// GPU figure on either side, else host. `None` without a baseline.
pub fn shown_figure(case: &CaseResult) -> Option<&crate::baseline::FigureComparison> {
    use crate::baseline::Outcome;
    let comparison = case.baseline.as_ref()?;
    let failing = |f: &&crate::baseline::FigureComparison| {
        matches!(f.outcome, Outcome::Regressed | Outcome::Unknown)
    };
    Some(
        [
            &comparison.gpu,
            &comparison.host,
            &comparison.working,
            &comparison.allocated,
        ]
        .into_iter()
        .find(failing)
        .unwrap_or(
            if case.gpu_peak_bytes.is_some() || comparison.gpu.baseline_bytes.is_some() {
                &comparison.gpu
            } else {
                &comparison.host
            },
        ),
    )
}

/// A searched case's cells, when its capacity was compared with a locked
/// one: `88 (batch)`, `88 → 72 regressed`. A capacity is a count, not a
/// size: its change is shown as the two values, never as a percentage of
/// a peak.
fn capacity_cells(case: &CaseResult) -> Option<(String, String)> {
    use crate::results::{CheckOutcome, Facts};
    let check = case.checks.iter().find(|c| c.kind == CheckKind::Capacity)?;
    let Some(Facts::Capacity {
        param,
        value,
        locked: Some(locked),
        ..
    }) = &check.facts
    else {
        return None;
    };
    let mark = match check.outcome {
        Some(CheckOutcome::Breached) => " regressed",
        Some(CheckOutcome::Improved) => " grew",
        _ => "",
    };
    let value = value.map_or("none".to_string(), |v| v.to_string());
    Some((
        format!("{locked} ({param})"),
        format!("{locked} → {value}{mark}"),
    ))
}

/// The cases that improved beyond tolerance against the baseline: worth a
/// re-lock to tighten the gate.
pub fn improved_cases(results: &RunResults) -> Vec<&str> {
    results
        .cases
        .iter()
        .filter(|c| {
            c.baseline
                .as_ref()
                .is_some_and(crate::baseline::CaseComparison::improved)
        })
        .map(|c| c.id.as_str())
        .collect()
}

/// The history's notices of a run: each case's checks against its past
/// that passed yet say something — a step this run, a creep past its
/// limit with `action = "warn"` — as `case: sentence`.
pub fn history_notices(results: &RunResults) -> Vec<String> {
    use crate::results::{CheckKind, CheckOutcome};
    results
        .cases
        .iter()
        .flat_map(|case| {
            case.checks
                .iter()
                .filter(|c| {
                    c.passed
                        && match c.kind {
                            CheckKind::Step(_) => true,
                            CheckKind::Creep(_) => c.outcome == Some(CheckOutcome::Breached),
                            _ => false,
                        }
                })
                .map(move |c| format!("{}: {}", case.id, words::check_message(c)))
        })
        .collect()
}

/// A sparkline line per case whose figure changed against the run
/// history (it stepped, or crept past its limit): `case: ▁▁▂▂█ host peak
/// 214.2 MiB → 246.3 MiB (+15.0%) over 8 runs`.
pub fn history_trends(results: &RunResults) -> Vec<String> {
    use crate::results::{CheckKind, CheckOutcome};
    results
        .cases
        .iter()
        .filter_map(|case| {
            let trend = case.trend.as_ref()?;
            let changed = case.checks.iter().any(|c| match c.kind {
                CheckKind::Step(_) => true,
                CheckKind::Creep(_) => c.outcome == Some(CheckOutcome::Breached),
                _ => false,
            });
            let now = if trend.figure.starts_with("gpu") {
                case.gpu_peak_bytes
            } else {
                case.host.peak_bytes
            }?;
            let first = trend.past.first()?.value_bytes;
            if !changed {
                return None;
            }
            let mut values: Vec<Option<f64>> = trend
                .past
                .iter()
                .map(|p| Some(p.value_bytes as f64))
                .collect();
            values.push(Some(now as f64));
            let change = if first > 0 {
                (now as f64 - first as f64) / first as f64 * 100.0
            } else {
                0.0
            };
            Some(format!(
                "{}: {} {} {} → {} ({change:+.1}%) over {} runs",
                case.id,
                history::sparkline(&values),
                if trend.figure.starts_with("gpu") {
                    "GPU peak"
                } else {
                    "host peak"
                },
                crate::units::Bytes(first),
                crate::units::Bytes(now),
                values.len()
            ))
        })
        .collect()
}

/// The figures of a locked case that were not compared with the lock,
/// each with why: measured another way than locked, or not in the lock
/// (a figure gated since it was locked). Another GPU model is said once
/// for the run, and a moved capacity by its own check.
pub fn uncompared_figures(case: &CaseResult) -> Vec<(crate::baseline::Figure, &'static str)> {
    use crate::baseline::{NotCompared, Outcome};
    let Some(comparison) = case.baseline.as_ref().filter(|b| b.locked) else {
        return Vec::new();
    };
    comparison
        .figures()
        .into_iter()
        .filter_map(|figure| {
            let why = match (&figure.outcome, &figure.not_compared) {
                (
                    Outcome::Skipped,
                    Some(NotCompared::GpuModels | NotCompared::CapacityMoved { .. }),
                ) => return None,
                (Outcome::Skipped, _) => "not comparable",
                (Outcome::NoBaseline, _) if figure.new_bytes.is_some() => "none in the lock",
                _ => return None,
            };
            Some((figure.figure, why))
        })
        .collect()
}

/// Every case's figures not compared: `train (working: none in the lock)`.
pub fn uncompared_in_run(results: &RunResults) -> Vec<String> {
    results
        .cases
        .iter()
        .flat_map(|case| {
            uncompared_figures(case)
                .into_iter()
                .map(move |(figure, why)| format!("{} ({figure}: {why})", case.id))
        })
        .collect()
}

/// `3 passed, 1 failed, 2 timed out`: passed and failed always, the rarer
/// outcomes only when they happened. Shared by the terminal summary line and
/// the Markdown heading so both speak the same words.
pub fn summary_counts(s: &crate::results::Summary) -> Vec<String> {
    let passed = match s.flaky {
        0 => format!("{} passed", s.passed),
        flaky => format!("{} passed ({flaky} flaky)", s.passed),
    };
    let mut counts = vec![passed];
    if s.skipped > 0 {
        counts.push(format!("{} skipped", s.skipped));
    }
    counts.push(format!("{} failed", s.failed));
    for (count, word) in [
        (s.timed_out, "timed out"),
        (s.error, "errored"),
        (s.interrupted, "interrupted"),
    ] {
        if count > 0 {
            counts.push(format!("{count} {word}"));
        }
    }
    counts
}

/// ` (spread 4.10 MiB)` after a figure of a repeated case, so its
/// run-to-run noise is seen beside it; nothing for one run.
pub fn spread_note(case: &CaseResult, figure: crate::baseline::Figure) -> String {
    case.spread(figure)
        .map(|spread| format!(" (spread {})", Bytes(spread)))
        .unwrap_or_default()
}

/// With `repeat > 1`: `3 runs; host peak 70.1 MiB–74.2 MiB (spread
/// 4.10 MiB), gpu peak … (the maximum is compared)`, so run-to-run noise
/// is visible.
pub fn repeat_spread(case: &CaseResult) -> Option<String> {
    if case.repeats.len() < 2 {
        return None;
    }
    let spread = |pick: fn(&crate::results::RepeatFigures) -> Option<u64>| {
        let values: Vec<u64> = case.repeats.iter().filter_map(pick).collect();
        match (values.iter().min(), values.iter().max()) {
            (Some(min), Some(max)) => format!(
                "{}–{} (spread {})",
                Bytes(*min),
                Bytes(*max),
                Bytes(max - min)
            ),
            _ => "unknown".to_string(),
        }
    };
    Some(format!(
        "{} runs; host peak {}, gpu peak {} (the maximum is compared)",
        case.repeats.len(),
        spread(|r| r.host_peak_bytes),
        spread(|r| r.gpu_peak_bytes)
    ))
}

/// Why a case of a merged run is not run when no part held it, wherever
/// one is shown.
pub const NO_PART_MESSAGE: &str = "no part of this merged run ran it (a shard that failed before writing its results, or one left out of the merge)";

/// Why a case of a merged run is not run when its part's oomgate stopped
/// before the run ended, wherever one is shown.
pub const UNFINISHED_MESSAGE: &str = "its shard's oomgate stopped before the case finished (killed: the part's results.json has no finished_at)";

/// What a device-delta figure means, wherever one is shown.
pub const DEVICE_DELTA_NOTE: &str = "device-delta: no process of the case was seen on this GPU (NVML reports host pids inside containers), so the figure is the device's rise during the case, including anyone else's";

/// What a tainted device-delta figure means, wherever one is shown.
pub const TAINTED_NOTE: &str = "tainted: a process not of the case was on the GPU before or while it ran, so its device-delta figure may include that process's memory; it is reported, but no budget or headroom limit is checked against it";

/// ` [tainted by pid 4242 (sleep): not gated]` after a tainted device's
/// method, else nothing.
pub fn taint_mark(device: &crate::measure::gpu::DeviceFigures) -> String {
    match device.tainted_by.as_slice() {
        [] => String::new(),
        pids => format!(" [{}: not gated]", words::tainted_by(pids)),
    }
}

/// `30.0 GiB (sampled@50ms)`, or why there is no figure.
/// A distributed case's largest rank, in one phrase: `largest: rank 3,
/// 4.0 GiB on GPU 3` (by GPU memory; by host memory when none was on a
/// GPU). `None` for a case without ranks.
pub fn largest_rank(case: &CaseResult) -> Option<String> {
    let largest = crate::measure::ranks::largest(&case.ranks)?;
    let count = case.ranks.len();
    let ranks = if count == 1 {
        "1 rank"
    } else {
        &format!("{count} ranks")
    };
    Some(match largest.gpu_peak_bytes {
        Some(gpu) => {
            let on = match largest.devices.as_slice() {
                [] => String::new(),
                [one] => format!(" on GPU {one}"),
                many => format!(
                    " on GPUs {}",
                    many.iter()
                        .map(u32::to_string)
                        .collect::<Vec<_>>()
                        .join(",")
                ),
            };
            format!(
                "{ranks}; largest: rank {}, {}{on}",
                largest.rank,
                Bytes(gpu)
            )
        }
        None => format!(
            "{ranks}; largest: rank {}, host {}",
            largest.rank,
            bytes_or_unknown(largest.host_peak_bytes)
        ),
    })
}

pub fn gpu_summary(case: &CaseResult, measurement: &Measurement) -> String {
    match (
        case.gpu_peak_bytes,
        &case.gpu_peak_method,
        &measurement.gpu_note,
    ) {
        (Some(bytes), Some(method), _) if case.gpu_allocator_floor_bytes.is_some() => format!(
            "{} (the allocator's peak the probe reported, above the {method} figure: a spike was missed between samples)",
            Bytes(bytes)
        ),
        (Some(bytes), Some(method), _) => format!("{} ({method})", Bytes(bytes)),
        (Some(bytes), None, _) => Bytes(bytes).to_string(),
        (None, Some(_), _) => match case
            .gpu_devices
            .iter()
            .find_map(|d| Some((d, d.lost.as_ref()?)))
        {
            Some((device, loss)) => format!(
                "unknown (GPU {} stopped answering NVML {:.2}s into the case: {})",
                device.index, loss.at_s, loss.reason
            ),
            None => match case.gpu_devices.iter().find_map(|d| d.note.as_deref()) {
                Some(note) => format!("unknown ({note})"),
                None => "unknown (NVML reports the memory of a process of the case as unavailable)"
                    .to_string(),
            },
        },
        (None, None, Some(note)) => format!("not measured: {note}"),
        (None, None, None) => "not measured".to_string(),
    }
}

/// `270.2 MiB (283353088 bytes) at 1.20s: rusage-maxrss, cgroup-v1`, or
/// why there is no figure.
pub fn host_summary(case: &CaseResult) -> String {
    let Some(bytes) = case.host.peak_bytes else {
        return format!("unknown (no measurement succeeded; {})", case.host.method);
    };
    let at = case
        .host
        .peak_at_s
        .map_or(String::new(), |at| format!(" at {at:.2}s"));
    let source = case.host.peak_source.map_or(String::new(), |s| {
        format!("{} ({}), ", s.as_str(), s.describe())
    });
    format!(
        "{} ({bytes} bytes){at}: {source}{}",
        Bytes(bytes),
        case.host.method
    )
}

/// Each observed floor of the host peak: `cgroup-anon-shmem 263.6 MiB,
/// pss-sum 192.7 MiB, ...`; empty when none was observed.
pub fn host_floors(case: &CaseResult) -> String {
    use crate::measure::host::HostFloor;
    HostFloor::ALL
        .iter()
        .filter_map(|&floor| {
            let bytes = case.host.floors.get(floor)?;
            Some(format!("{} {}", floor.as_str(), Bytes(bytes)))
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The figures of one case as plain text, for the JUnit failure body and
/// system-out: many CI viewers show neither properties nor attributes, so
/// every number a reader needs is here too.
pub fn case_details(case: &CaseResult, measurement: &Measurement) -> String {
    use std::fmt::Write;

    use crate::process::Exit;
    use crate::units::format_duration;

    let mut out = String::new();
    let status = match &case.message {
        Some(message) => format!("{} — {message}", case.label()),
        None => case.label().to_string(),
    };
    let _ = writeln!(out, "case:        {}", case.id);
    let _ = writeln!(out, "status:      {status}");
    if let Some(capacity) = &case.capacity {
        let _ = writeln!(out, "capacity:    {}", capacity.describe());
        for probe in &capacity.probes {
            let _ = writeln!(
                out,
                "  {}={:<8} {:<8} host peak {}, gpu peak {}",
                capacity.param,
                probe.value,
                probe.status.label(),
                bytes_or_unknown(probe.host_peak_bytes),
                bytes_or_unknown(probe.gpu_peak_bytes)
            );
        }
    }
    if let Some(server) = &case.server {
        let _ = writeln!(out, "{}", server.describe());
        let _ = writeln!(
            out,
            "  logs:      {}, {}",
            server.stdout_log.display(),
            server.stderr_log.display()
        );
    }
    if let Some(client) = &case.client {
        let _ = writeln!(out, "{}", client.describe());
    }
    if let Some(largest) = largest_rank(case) {
        let _ = writeln!(out, "ranks:       {largest}");
        for rank in &case.ranks {
            let _ = writeln!(
                out,
                "  rank {:<4} host peak {}, gpu peak {}{}",
                rank.rank,
                bytes_or_unknown(rank.host_peak_bytes),
                bytes_or_unknown(rank.gpu_peak_bytes),
                match rank.devices.as_slice() {
                    [] => String::new(),
                    devices => format!(
                        " on GPU {}",
                        devices
                            .iter()
                            .map(u32::to_string)
                            .collect::<Vec<_>>()
                            .join(",")
                    ),
                }
            );
        }
    }
    for shared in &case.gpu_sharing {
        let _ = writeln!(
            out,
            "shared GPU:  {} ({}) with {}",
            shared.gpu.index,
            shared.gpu.uuid,
            shared.with.join(", ")
        );
    }
    if let Some(retried) = &case.retried_alone {
        let first = &retried.first_attempt;
        let _ = writeln!(
            out,
            "retried:     alone, after failing with {}: {}",
            first.circumstance(),
            first.message.as_deref().unwrap_or(first.status.label())
        );
    }
    let _ = writeln!(out, "host peak:   {}", host_summary(case));
    let floors = host_floors(case);
    if !floors.is_empty() {
        let _ = writeln!(out, "host floors: {floors}");
    }
    if let Some(working) = case.host.working_peak_bytes {
        let _ = writeln!(
            out,
            "host working memory: {} (anonymous + shmem, as the case cgroup counts it)",
            Bytes(working)
        );
    }
    if let Some(charged) = case.host.charged_peak_bytes {
        let _ = writeln!(
            out,
            "host charged peak: {} ({}, page cache included; not gated)",
            Bytes(charged),
            case.host.method
        );
    }
    if let Some(note) = &case.host.note {
        let _ = writeln!(out, "host note:   {note}");
    }
    if let Some(unsettled) = case.settle.as_ref().and_then(words::unsettled) {
        let _ = writeln!(out, "gpu settle:  {unsettled}");
    }
    for check in &case.checks {
        let verdict = if check.passed { "ok" } else { "FAILED" };
        let _ = writeln!(
            out,
            "{:<12} {verdict}: {}",
            format!("{}:", check.kind),
            check.message
        );
    }
    let _ = writeln!(out, "gpu peak:    {}", gpu_summary(case, measurement));
    for device in &case.gpu_devices {
        let accounting = device.accounting_peak_bytes.map_or(String::new(), |b| {
            format!(", driver accounting {}", Bytes(b))
        });
        let _ = writeln!(
            out,
            "  GPU {} {} ({}): case {} by {}{}{accounting}; device {} peak, {} before, of {}",
            device.index,
            device.name,
            device.uuid,
            bytes_or_unknown(device.peak_bytes),
            device.method,
            taint_mark(device),
            bytes_or_unknown(device.device_peak_bytes),
            bytes_or_unknown(device.before_bytes),
            Bytes(device.total_bytes)
        );
        if device.method == crate::measure::gpu::GpuMethod::DeviceDelta {
            let _ = writeln!(out, "    {DEVICE_DELTA_NOTE}");
        }
        if let Some(note) = &device.note {
            let _ = writeln!(out, "    {note}");
        }
        if let Some(loss) = &device.lost {
            let _ = writeln!(
                out,
                "    lost {:.2}s into the case ({}): not read since, so its figure is unknown",
                loss.at_s, loss.reason
            );
        }
        if !device.tainted_by.is_empty() {
            let _ = writeln!(out, "    {TAINTED_NOTE}");
        }
    }
    if let Some(outside) = &case.outside_allocator {
        let _ = writeln!(
            out,
            "{}",
            words::outside_line("outside:    ", &outside.case)
        );
        if outside.processes.len() > 1 {
            for process in &outside.processes {
                let who = match (process.pid, process.rank) {
                    (Some(pid), Some(rank)) => format!("pid {pid} (rank {rank})"),
                    (Some(pid), None) => format!("pid {pid}"),
                    (None, Some(rank)) => format!("rank {rank}"),
                    (None, None) => format!("instance {}", process.instance),
                };
                let _ = writeln!(
                    out,
                    "{}",
                    words::outside_line(&format!("  {who}:"), &process.figures)
                );
            }
        }
    } else if case
        .probe
        .as_ref()
        .is_some_and(|p| p.peak_reserved.is_some())
        && case.gpu_peak_method.is_some()
    {
        let _ = writeln!(
            out,
            "outside:     unknown: no report of the allocator's `reserved` came while NVML listed the process that made it (a probe that gives no pid beside several processes on a GPU, or NVML's pids not this machine's)"
        );
    }
    for process in &case.foreign_processes {
        let name = process.name.as_deref().unwrap_or("name not visible");
        let used = process
            .used_bytes
            .map_or("unknown memory".to_string(), |b| Bytes(b).to_string());
        let _ = writeln!(
            out,
            "foreign:     pid {} ({name}) on GPU {} using {used}, not started by oomgate",
            process.pid, process.device_index
        );
    }
    // What the probe said of its allocator's figures (JAX on CPU has
    // none; JAX's preallocation makes NVML's figure its pool).
    if let Some(probe) = &case.probe {
        if let Some(allocator) = &probe.allocator {
            let peak = probe.peak_allocated.map_or("no figure".to_string(), |b| {
                format!("peak allocated {}", Bytes(b))
            });
            let _ = writeln!(
                out,
                "allocator:   {allocator} (as the probe reported it: {peak})"
            );
        }
        for note in &probe.allocator_notes {
            let _ = writeln!(out, "  {note}");
        }
    }
    // The numbers its logs printed, each with where, or why there is none.
    for output in &case.outputs {
        let _ = writeln!(out, "{}", words::output_line(output));
    }
    let _ = writeln!(
        out,
        "wall time:   {} (timeout {})",
        format_duration(Duration::from_secs_f64(case.wall_time_s)),
        format_duration(Duration::from_secs_f64(case.timeout_s))
    );
    let exits: Vec<String> = case
        .instances
        .iter()
        .map(|i| {
            let exit = i.exit.map_or("not started".to_string(), Exit::describe);
            let runs = if i.runs > 1 {
                format!(", {} runs", i.runs)
            } else {
                String::new()
            };
            format!("#{} {exit}{runs}", i.index)
        })
        .collect();
    let _ = writeln!(out, "instances:   {}", exits.join("; "));
    if let Some(diagnosis) = &case.diagnosis {
        let _ = writeln!(out, "diagnosis:   {}", diagnosis.kind.as_str());
        for hint in &diagnosis.hints {
            let _ = writeln!(out, "hint:        {hint}");
        }
        if let Some(exception) = &diagnosis.exception {
            let _ = writeln!(out, "exception:\n{exception}");
        }
    }
    if case.leftover_processes > 0 {
        let _ = writeln!(
            out,
            "leftovers:   {} process(es) outlived the command and were stopped",
            case.leftover_processes
        );
    }
    // Each compared figure is a `baseline.*` check above: said once.
    if let Some(comparison) = &case.baseline {
        for change in &comparison.changes {
            let _ = writeln!(out, "changed:     {change} (since the baseline)");
        }
    }
    if let Some(spread) = repeat_spread(case) {
        let _ = writeln!(out, "repeats:     {spread}");
    }
    let _ = writeln!(
        out,
        "samples:     {} ({} failed)",
        case.samples, case.sample_errors
    );
    let _ = writeln!(
        out,
        "command:     {}",
        crate::suite::shell_join(&case.command)
    );
    let _ = writeln!(out, "cwd:         {}", case.cwd.display());
    let _ = writeln!(out, "logs:        {}", case.dir.display());
    out
}

//! A case's memory over time, from its `timeline.json`: the host line,
//! the case's GPU memory (and the devices' use), a server's load client,
//! with the gated peaks, the budgets and the baselines marked.
//!
//! A gated peak is not always a point of the sampled line: the host peak
//! is the largest of the kernel's floors, and a high-water mark (VmHWM,
//! an exited process's `ru_maxrss`) is reached at a moment no one saw;
//! the driver's accounting and the allocator's own peak have no moment
//! either. Such a peak is drawn as a dashed level named by its source,
//! never as a point at an invented time; a peak that is a sample is a
//! point at its moment ([`peak_drawn`]).

use std::path::Path;

use super::plot::{Dash, Level, Mark, Moment, Plot, Series, XKind};
use super::{
    BASELINE_COLOUR, Chart, GPU_BUDGET_COLOUR, GPU_COLOUR, GREY, HOST_COLOUR,
    MAX_POINTS_PER_SERIES, RED, downsample, gpu_matters, level_in_view, limit,
};
use crate::baseline::{FigureComparison, Outcome};
use crate::measure::gpu::GpuMethod;
use crate::measure::host::HostFloor;
use crate::results::{CaseResult, CheckKind};
use crate::units::Bytes;

/// The largest timeline.json a chart is drawn from: oomgate writes a few
/// hundred KiB at most (2048 points per series).
const MAX_TIMELINE_BYTES: u64 = 16 * 1024 * 1024;

/// Where a gated peak is drawn.
#[derive(Debug, Clone, PartialEq)]
pub(in crate::report::html) enum PeakDrawn {
    /// A sample, at the moment it was taken (seconds into the case).
    At { bytes: u64, at_s: f64 },
    /// A level whose moment is not known; `source` names where the figure
    /// comes from (`VmHWM`), `about` says what it is.
    Level {
        bytes: u64,
        source: String,
        about: String,
    },
}

impl PeakDrawn {
    /// `host peak 83.5 MiB (VmHWM)`, `gpu peak 1.37 GiB at 1.24 s`.
    pub(in crate::report::html) fn label(&self, what: &str) -> String {
        match self {
            PeakDrawn::At { bytes, at_s } => {
                format!("{what} peak {} at {at_s:.2} s", Bytes(*bytes))
            }
            PeakDrawn::Level { bytes, source, .. } => {
                format!("{what} peak {} ({source})", Bytes(*bytes))
            }
        }
    }
}

/// The figure's highest sample on the drawn line, and when (seconds).
type LinePeak = Option<(f64, u64)>;

/// Where the gated host or GPU peak of `case` goes on a chart whose line
/// peaks at `line`; `None` without a figure.
pub(in crate::report::html) fn peak_drawn(
    case: &CaseResult,
    gpu: bool,
    line: LinePeak,
) -> Option<PeakDrawn> {
    let bytes = if gpu {
        case.gpu_peak_bytes?
    } else {
        case.host.peak_bytes?
    };
    let runs = case.repeats.len();
    // The label names the source; what else is known is said where a
    // pointer rests on it, so the label fits its column.
    let level = |source: &str, about: &str| {
        let runs = match runs {
            0 | 1 => String::new(),
            n => format!("; the largest of {n} runs, and this chart is one of them"),
        };
        Some(PeakDrawn::Level {
            bytes,
            source: source.to_string(),
            about: format!(
                "{about}{runs}: when it was reached is not known, so it is drawn as a level"
            ),
        })
    };
    if gpu && case.gpu_allocator_floor_bytes.is_some() {
        return level(
            "allocator's peak_reserved",
            "the allocator's peak the probe reported, above every sample: samples missed a spike",
        );
    }
    if let Some((at_s, _)) = line.filter(|(_, top)| *top == bytes) {
        return Some(PeakDrawn::At { bytes, at_s });
    }
    if gpu {
        return match case.gpu_peak_method {
            Some(GpuMethod::DriverAccounting) => level(
                "driver accounting",
                "the driver's own per-process maximum (accounting mode)",
            ),
            Some(GpuMethod::DeviceDelta) => level(
                "device delta",
                "the device's rise during the case (no process of the case was seen)",
            ),
            Some(GpuMethod::Mixed) => level("mixed methods", "its devices' figures, summed"),
            Some(GpuMethod::Allocator) => level(
                "torch allocator",
                "what the test added to torch's allocator at its peak",
            ),
            _ => level("sampled", "the largest sample of another run"),
        };
    }
    let source = case.host.peak_source;
    // A floor the drawn line is made of, read at a known moment (the last
    // read, at the exit, may be above every tick).
    let sampled = matches!(source, Some(HostFloor::CgroupAnonShmem | HostFloor::PssSum));
    if let (true, Some(at_s), 0 | 1) = (sampled, case.host.peak_at_s, runs) {
        return Some(PeakDrawn::At { bytes, at_s });
    }
    let name = match source {
        Some(HostFloor::Vmhwm) => "VmHWM",
        Some(HostFloor::RusageMaxrss) => "ru_maxrss",
        Some(HostFloor::CgroupAnonShmem) => "cgroup",
        Some(HostFloor::PssSum) => "PSS",
        Some(HostFloor::PssAnonShmem) => "PSS anon+shmem",
        Some(HostFloor::SessionTree) => "session tree",
        None => "not a sample",
    };
    let about = source.map_or(
        "a figure no sample of this line reached",
        HostFloor::describe,
    );
    level(name, about)
}

/// One figure of a timeline.json: its points, and its highest sample.
/// Merged points keep their samples' maximum, so the highest point is the
/// highest sample; `exact` (the GPU's `gpu_peak`) has its own moment.
fn line_of(
    timeline: &serde_json::Value,
    key: &str,
    exact: Option<&str>,
) -> (Vec<(f64, f64)>, LinePeak) {
    let all: Vec<(f64, f64)> = timeline["points"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| Some((p["t_ms"].as_f64()? / 1000.0, p[key].as_f64()?)))
        .collect();
    let exact = exact.and_then(|peak| {
        let bytes = timeline[peak]["bytes"].as_u64()?;
        let ms = timeline[peak]["t_ms"].as_f64()?;
        Some((ms / 1000.0, bytes))
    });
    let peak = exact.or_else(|| {
        all.iter()
            .copied()
            .max_by(|a, b| a.1.total_cmp(&b.1))
            .map(|(t, b)| (t, b as u64))
    });
    (downsample(&all, MAX_POINTS_PER_SERIES), peak)
}

/// At most this many ranks get a line of their own: the largest.
const MAX_RANK_LINES: usize = 8;
/// Thin lines, apart from the host's blue, the case's GPU green and the
/// red kept for budgets and failures.
const RANK_COLOURS: [&str; MAX_RANK_LINES] = [
    "#9467bd", "#8c564b", "#e377c2", "#bcbd22", "#17becf", "#ff7f0e", "#7f7f7f", "#393b79",
];

/// A distributed case's ranks (timeline.json's `ranks`): each rank's GPU
/// memory summed over its devices, a thin line each, in rank order; past
/// [`MAX_RANK_LINES`], the largest, and a note says so.
fn rank_lines(timeline: &serde_json::Value, notes: &mut Vec<String>) -> Vec<Series> {
    let Some(ranks) = timeline["ranks"].as_object() else {
        return Vec::new();
    };
    // (rank, its peak, its points)
    type RankLine = (u32, u64, Vec<(f64, f64)>);
    let mut lines: Vec<RankLine> = ranks
        .iter()
        .filter_map(|(rank, line)| {
            let rank: u32 = rank.parse().ok()?;
            let (points, peak) = line_of(line, "gpu_bytes", Some("gpu_peak"));
            (!points.is_empty()).then(|| (rank, peak.map_or(0, |p| p.1), points))
        })
        .collect();
    if lines.len() > MAX_RANK_LINES {
        notes.push(format!(
            "{} ranks: the {MAX_RANK_LINES} with the largest GPU peaks are drawn; every rank's line is in timeline.json (`ranks`).",
            lines.len()
        ));
        lines.sort_by_key(|(rank, peak, _)| (std::cmp::Reverse(*peak), *rank));
        lines.truncate(MAX_RANK_LINES);
    }
    lines.sort_by_key(|(rank, _, _)| *rank);
    lines
        .into_iter()
        .zip(RANK_COLOURS)
        .map(|((rank, _, points), colour)| {
            Series::line(format!("rank {rank} gpu"), points, colour, 1.2)
        })
        .collect()
}

fn read_timeline(case: &CaseResult, out_dir: &Path) -> Option<serde_json::Value> {
    use std::io::Read;
    let mut text = String::new();
    crate::files::case::open_read(&out_dir.join(&case.timeline))
        .ok()?
        .take(MAX_TIMELINE_BYTES)
        .read_to_string(&mut text)
        .ok()?;
    serde_json::from_str(&text).ok()
}

/// The case's memory over time, from its timeline.json; `None` without
/// one, or with no host or GPU point in it.
pub(in crate::report::html) fn chart(case: &CaseResult, out_dir: &Path) -> Option<Chart> {
    let timeline = read_timeline(case, out_dir)?;
    // The timeline's `host_peak` is the case's gated peak, which may be a
    // high-water mark no sample saw: the line's own peak is its points'.
    let (host, host_line_peak) = line_of(&timeline, "host_bytes", None);
    let (gpu, gpu_line_peak) = line_of(&timeline, "gpu_bytes", Some("gpu_peak"));
    if host.is_empty() && gpu.is_empty() {
        return None;
    }
    let (device, _) = line_of(&timeline, "gpu_device_bytes", None);
    // A server case: the figures above are the server's, its load client's
    // are beside them, and the moment it was ready divides the two phases.
    let (client_host, _) = line_of(&timeline, "client_host_bytes", None);
    let (client_gpu, _) = line_of(&timeline, "client_gpu_bytes", None);
    let ready_at = timeline["server"]["ready_at_ms"]
        .as_f64()
        .map(|ms| ms / 1000.0);
    let serving = case.server.is_some();
    let with_gpu = gpu_matters(case) || client_gpu.iter().any(|p| p.1 > 0.0);

    let mut plot = Plot::new(
        format!("Memory over time of {}", case.id),
        "seconds into the case",
        XKind::Seconds,
    );
    let mut notes = Vec::new();
    // A searched case's timeline is one probe's run; its wall time is the
    // whole search's.
    let one_run = match &case.capacity {
        Some(capacity) => {
            let param = &capacity.param;
            notes.push(match capacity.value {
                Some(value) => format!(
                    "This is the run at {param} = {value}, the capacity found; every probe's timeline is in the case's folder (timeline.{param}-<value>.json)."
                ),
                None => format!(
                    "This is the last probe's run; every probe's timeline is in the case's folder (timeline.{param}-<value>.json)."
                ),
            });
            false
        }
        None => {
            plot.x_end = case.wall_time_s;
            true
        }
    };
    if !host.is_empty() {
        let label = if serving {
            "server host RSS"
        } else {
            "host RSS"
        };
        plot.series
            .push(Series::line(label, host, HOST_COLOUR, 2.5));
    }
    if !client_host.is_empty() {
        plot.series
            .push(Series::line("client host RSS", client_host, "#ff7f0e", 1.5));
    }
    if client_gpu.iter().any(|p| p.1 > 0.0) {
        plot.series
            .push(Series::line("client gpu", client_gpu, "#17becf", 1.5));
    }
    if with_gpu && !device.is_empty() {
        plot.series
            .push(Series::line("gpu device used", device, GREY, 1.5).dashed(Dash::Dotted));
    }
    if with_gpu && !gpu.is_empty() {
        let label = if serving {
            "gpu (server)"
        } else {
            "gpu (case)"
        };
        plot.series.push(Series::line(label, gpu, GPU_COLOUR, 2.5));
    }
    if with_gpu {
        plot.series.extend(rank_lines(&timeline, &mut notes));
    }

    // The peaks are drawn last, over a baseline or budget at the same
    // height.
    let mut peak_marks = Vec::new();
    let mut peak_levels = Vec::new();
    let peaks = [
        (false, host_line_peak, HOST_COLOUR, "host"),
        (true, gpu_line_peak, GPU_COLOUR, "gpu"),
    ];
    for (is_gpu, line, colour, what) in peaks {
        if is_gpu && !with_gpu {
            continue;
        }
        let Some(peak) = peak_drawn(case, is_gpu, line) else {
            continue;
        };
        let label = peak.label(what);
        match peak {
            PeakDrawn::At { bytes, at_s } => peak_marks.push(Mark {
                label,
                x: at_s,
                y: bytes as f64,
                colour,
            }),
            PeakDrawn::Level { bytes, about, .. } => peak_levels.push(Level {
                label,
                about: format!("{what} peak {}: {about}", Bytes(bytes)),
                y: bytes as f64,
                colour,
                dash: Dash::Dashed,
            }),
        }
    }
    if let Some(comparison) = &case.baseline {
        for (figure, what) in [(&comparison.host, "host"), (&comparison.gpu, "gpu")] {
            if what == "gpu" && !with_gpu {
                continue;
            }
            if let Some(level) = baseline_level(figure, what) {
                plot.levels.push(level);
            }
        }
    }
    let highest = peak_levels
        .iter()
        .map(|l| l.y)
        .chain(peak_marks.iter().map(|m| m.y))
        .fold(plot.highest_y(), f64::max);
    for (kind, what, colour) in [
        (CheckKind::HostBudget, "host budget", RED),
        (CheckKind::GpuBudget, "gpu budget", GPU_BUDGET_COLOUR),
    ] {
        let Some(bytes) = limit(case, kind) else {
            continue;
        };
        let about = format!("{what}: the case fails above {}", Bytes(bytes));
        level_in_view(&mut plot, &mut notes, highest, (what, about), bytes, colour);
    }
    plot.levels.extend(peak_levels);
    plot.marks.extend(peak_marks);
    if let Some(at) = ready_at {
        plot.moments.push(Moment {
            label: "server ready".into(),
            x: at,
            colour: "#616161",
            dash: Dash::Dashed,
        });
    }
    let oom = case
        .diagnosis
        .as_ref()
        .is_some_and(|d| d.kind == crate::diagnose::FailureKind::GpuOom);
    if one_run && (oom || !case.status.ok()) {
        let label = if oom {
            format!("OOM at {:.2} s", case.wall_time_s)
        } else {
            format!(
                "end ({}) at {:.2} s",
                case.status.as_str(),
                case.wall_time_s
            )
        };
        plot.moments.push(Moment {
            label,
            x: case.wall_time_s,
            colour: "#000",
            dash: Dash::Solid,
        });
    }
    plot.description = describe(&plot, case);
    Some(Chart {
        html: plot.render(),
        notes,
    })
}

/// `gpu baseline 1.00 GiB`, drawn where the lock has the figure.
fn baseline_level(figure: &FigureComparison, what: &str) -> Option<Level> {
    let bytes = figure.baseline_bytes?;
    let floor = figure.floor_breach.map_or(String::new(), |breach| {
        format!(
            " (its floor {} grew {} → {})",
            breach.floor.as_str(),
            Bytes(breach.locked_bytes),
            Bytes(breach.now_bytes)
        )
    });
    let compared = match figure.outcome {
        Outcome::Skipped => ", not compared",
        _ => "",
    };
    Some(Level {
        label: format!("{what} baseline {}{compared}", Bytes(bytes)),
        about: format!(
            "{what} baseline{floor}: {} in the locked run{}",
            Bytes(bytes),
            figure.limit_bytes.map_or(String::new(), |l| format!(
                "; a regression above {}",
                Bytes(l)
            ))
        ),
        y: bytes as f64,
        colour: BASELINE_COLOUR,
        dash: Dash::Fine,
    })
}

/// The chart in words, for a reader who cannot see it.
fn describe(plot: &Plot, case: &CaseResult) -> String {
    let lines: Vec<&str> = plot.series.iter().map(|s| s.label.as_str()).collect();
    let marked: Vec<&str> = plot
        .marks
        .iter()
        .map(|m| m.label.as_str())
        .chain(plot.levels.iter().map(|l| l.label.as_str()))
        .collect();
    format!(
        "{} over {:.2} s of {}. {}.",
        lines.join(", "),
        case.wall_time_s,
        case.id,
        marked.join("; ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::results::HostResult;

    const MIB: u64 = 1024 * 1024;

    fn case_with_host(bytes: u64, source: HostFloor, at_s: f64) -> CaseResult {
        let mut case = CaseResult::unmeasured("c".into());
        case.host = HostResult {
            peak_bytes: Some(bytes),
            peak_at_s: Some(at_s),
            peak_source: Some(source),
            ..HostResult::default()
        };
        case
    }

    /// A user saw the chart level off at 72 MiB under a reported 83.5
    /// MiB peak, marked nowhere: the VmHWM is above every sample.
    #[test]
    fn a_high_water_mark_above_the_line_is_a_level_named_by_its_source() {
        let peak = 83 * MIB + MIB / 2;
        let case = case_with_host(peak, HostFloor::Vmhwm, 1.2);
        let drawn = peak_drawn(&case, false, Some((0.8, 72 * MIB))).expect("a peak");
        assert!(matches!(drawn, PeakDrawn::Level { bytes, .. } if bytes == peak));
        assert_eq!(drawn.label("host"), "host peak 83.5 MiB (VmHWM)");
        for (source, name) in [
            (HostFloor::RusageMaxrss, "(ru_maxrss)"),
            (HostFloor::PssAnonShmem, "(PSS anon+shmem)"),
        ] {
            let case = case_with_host(peak, source, 1.2);
            let label = peak_drawn(&case, false, None)
                .expect("a peak")
                .label("host");
            assert!(label.ends_with(name), "{label}");
        }
    }

    #[test]
    fn a_peak_the_line_reached_is_a_point_at_its_moment() {
        let case = case_with_host(72 * MIB, HostFloor::Vmhwm, 1.5);
        assert_eq!(
            peak_drawn(&case, false, Some((0.8, 72 * MIB))),
            Some(PeakDrawn::At {
                bytes: 72 * MIB,
                at_s: 0.8
            })
        );
        // A sampled floor above the line (read at the exit) keeps its time.
        let case = case_with_host(80 * MIB, HostFloor::CgroupAnonShmem, 1.5);
        assert_eq!(
            peak_drawn(&case, false, Some((0.8, 72 * MIB))),
            Some(PeakDrawn::At {
                bytes: 80 * MIB,
                at_s: 1.5
            })
        );
    }

    #[test]
    fn gpu_peaks_without_a_moment_are_levels() {
        let mut case = CaseResult::unmeasured("c".into());
        case.gpu_peak_bytes = Some(2048 * MIB);
        case.gpu_peak_method = Some(GpuMethod::DriverAccounting);
        let drawn = peak_drawn(&case, true, Some((1.0, 1024 * MIB))).expect("a peak");
        assert_eq!(drawn.label("gpu"), "gpu peak 2.00 GiB (driver accounting)");
        case.gpu_allocator_floor_bytes = Some(2048 * MIB);
        case.gpu_peak_method = Some(GpuMethod::Sampled { interval_ms: 50 });
        let drawn = peak_drawn(&case, true, Some((1.0, 2048 * MIB))).expect("a peak");
        assert!(
            drawn.label("gpu").contains("allocator's peak_reserved"),
            "{drawn:?}"
        );
    }

    /// The chart of a case whose VmHWM is above every sample: the line
    /// levels off at 72 MiB, the peak is a dashed level at 83.5 MiB named
    /// by its source, and no point claims a moment for it.
    #[test]
    fn the_chart_draws_a_high_water_mark_as_a_named_level() {
        let out = tempfile::tempdir().expect("tempdir");
        let points: Vec<String> = (0..20)
            .map(|i| format!("{{\"t_ms\":{},\"host_bytes\":{}}}", i * 100, 72 * MIB))
            .collect();
        std::fs::write(
            out.path().join("timeline.json"),
            format!("{{\"points\":[{}]}}", points.join(",")),
        )
        .expect("write timeline");
        let mut case = case_with_host(83 * MIB + MIB / 2, HostFloor::Vmhwm, 1.9);
        case.timeline = "timeline.json".into();
        case.wall_time_s = 2.0;
        let html = chart(&case, out.path()).expect("a chart").html;
        assert!(
            html.contains(">host peak 83.5 MiB (VmHWM)</text>"),
            "{html}"
        );
        assert!(html.contains("class=\"level\""), "{html}");
        assert!(!html.contains("class=\"mark\""), "{html}");
        // The axis from 0 reaches past the level: 0, 20, … 100 MiB.
        assert!(
            html.contains(">0</text>") && html.contains(">100 MiB</text>"),
            "{html}"
        );
    }

    /// A four-rank case: each rank is a line of its own, named, beside the
    /// case's sum; past eight ranks the largest eight are drawn and the
    /// chart says so.
    #[test]
    fn each_rank_is_a_line_of_its_own() {
        let timeline = |ranks: u32| {
            let line = |bytes: u64| {
                format!(
                    "{{\"gpu_peak\":{{\"bytes\":{bytes},\"t_ms\":100}},\"points\":[{{\"t_ms\":0,\"gpu_bytes\":0}},{{\"t_ms\":100,\"gpu_bytes\":{bytes}}}]}}"
                )
            };
            let lines: Vec<String> = (0..ranks)
                .map(|r| format!("\"{r}\":{}", line(u64::from(r + 1) * 100 * MIB)))
                .collect();
            serde_json::from_str::<serde_json::Value>(&format!(
                "{{\"points\":[],\"ranks\":{{{}}}}}",
                lines.join(",")
            ))
            .expect("json")
        };
        let mut notes = Vec::new();
        let lines = rank_lines(&timeline(4), &mut notes);
        let labels: Vec<&str> = lines.iter().map(|s| s.label.as_str()).collect();
        assert_eq!(
            labels,
            ["rank 0 gpu", "rank 1 gpu", "rank 2 gpu", "rank 3 gpu"]
        );
        assert_eq!(lines[3].points.last(), Some(&(0.1, 400.0 * MIB as f64)));
        assert!(notes.is_empty(), "{notes:?}");

        let lines = rank_lines(&timeline(12), &mut notes);
        let labels: Vec<&str> = lines.iter().map(|s| s.label.as_str()).collect();
        assert_eq!(
            labels.first(),
            Some(&"rank 4 gpu"),
            "the 8 largest: {labels:?}"
        );
        assert_eq!(labels.len(), 8);
        assert!(
            notes[0].starts_with("12 ranks: the 8 with the largest"),
            "{notes:?}"
        );
        // A case without ranks draws none.
        assert!(rank_lines(&serde_json::json!({"points": []}), &mut notes).is_empty());
    }

    #[test]
    fn no_figure_no_peak() {
        let case = CaseResult::unmeasured("c".into());
        assert_eq!(peak_drawn(&case, false, Some((0.1, 5))), None);
        assert_eq!(peak_drawn(&case, true, Some((0.1, 5))), None);
    }
}

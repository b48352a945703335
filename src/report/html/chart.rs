//! A case's charts as inline SVG, drawn by plotters: its memory over time
//! from `timeline.json` (host, the case's GPU memory, the devices' use,
//! budget and baseline lines, the moment the case ended if it did not
//! pass), scaled to the figures rather than to a far budget; and what its
//! probe reported per step, with the fitted leak trend.
//!
//! A timeline holds up to 2048 points per series, more than the chart has
//! pixels for, so each series is [`downsample`]d to
//! [`MAX_POINTS_PER_SERIES`] first. Like the timeline's own merging, it
//! keeps each group's highest point: a peak is never lowered or lost,
//! only the dips between samples may be.

use std::path::Path;

use plotters::prelude::*;

use crate::results::{CaseResult, CaseStatus, CheckKind};

const MIB: f64 = 1024.0 * 1024.0;

/// Points per series in a chart: about one per two pixels of its width.
pub const MAX_POINTS_PER_SERIES: usize = 400;

/// At most `max_points` of `points` (time, value), in time order: runs of
/// consecutive points become their highest one, at the moment it happened.
pub fn downsample(points: &[(f64, f64)], max_points: usize) -> Vec<(f64, f64)> {
    let max_points = max_points.max(1);
    if points.len() <= max_points {
        return points.to_vec();
    }
    // ceil(n / max) per group makes at most `max_points` groups.
    let group = points.len().div_ceil(max_points);
    points
        .chunks(group)
        .filter_map(|run| run.iter().copied().max_by(|a, b| a.1.total_cmp(&b.1)))
        .collect()
}

/// A chart, and what it leaves out and why.
pub(super) struct Chart {
    pub(super) svg: String,
    /// Lines not drawn, in words (`host budget 40.0 GiB: far above …`).
    pub(super) notes: Vec<String>,
}

/// A budget line is drawn when it is within this factor of the highest
/// figure; farther, it would squash the figures into a flat line at the
/// bottom, and it is named under the chart instead.
const BUDGET_IN_VIEW: f64 = 2.0;

/// Text sizes, in the SVG's own pixels (the chart is scaled to the page).
const LABEL_PX: u32 = 18;
const LEGEND_PX: u32 = 17;

/// The largest timeline.json a chart is drawn from: oomgate writes a few
/// hundred KiB at most (2048 points per series).
const MAX_TIMELINE_BYTES: u64 = 16 * 1024 * 1024;

/// The case's memory over time as an SVG, from its timeline.json.
pub(super) fn chart(case: &CaseResult, out_dir: &Path) -> Option<Chart> {
    let text = {
        use std::io::Read;
        let mut text = String::new();
        crate::files::case::open_read(&out_dir.join(&case.timeline))
            .ok()?
            .take(MAX_TIMELINE_BYTES)
            .read_to_string(&mut text)
            .ok()?;
        text
    };
    let timeline: serde_json::Value = serde_json::from_str(&text).ok()?;
    let points = timeline["points"].as_array()?;
    let series = |key: &str| -> Vec<(f64, f64)> {
        let all: Vec<(f64, f64)> = points
            .iter()
            .filter_map(|p| Some((p["t_ms"].as_f64()? / 1000.0, p[key].as_f64()? / MIB)))
            .collect();
        downsample(&all, MAX_POINTS_PER_SERIES)
    };
    let host = series("host_bytes");
    let gpu = series("gpu_bytes");
    let device = series("gpu_device_bytes");
    // A server case: the figures above are the server's, its load client's
    // are beside them, and the moment it was ready divides the two phases.
    let client_host = series("client_host_bytes");
    let client_gpu = series("client_gpu_bytes");
    let ready_at = timeline["server"]["ready_at_ms"]
        .as_f64()
        .map(|ms| ms / 1000.0);
    let serving = case.server.is_some();
    if host.is_empty() && gpu.is_empty() {
        return None;
    }
    let limit = |kind: CheckKind| {
        case.checks
            .iter()
            .find(|c| c.kind == kind)
            .and_then(|c| c.limit_bytes)
    };
    let baseline = |figure: &str| {
        case.baseline.as_ref().and_then(|b| {
            if figure == "host" {
                b.host.baseline_bytes
            } else {
                b.gpu.baseline_bytes
            }
        })
    };
    let highest = host
        .iter()
        .chain(&gpu)
        .chain(&device)
        .chain(&client_host)
        .chain(&client_gpu)
        .map(|p| p.1)
        .fold(0.0, f64::max);
    let mut notes = Vec::new();
    // Baselines are near the figures by nature and always drawn; a budget
    // far above them is named instead, so a regression well under it still
    // shows as a climb, not a flat line.
    let lines: Vec<(&str, f64, RGBColor)> = [
        ("host budget", limit(CheckKind::HostBudget), RED, true),
        ("gpu budget", limit(CheckKind::GpuBudget), MAGENTA, true),
        (
            "host baseline",
            baseline("host"),
            RGBColor(120, 120, 120),
            false,
        ),
        (
            "gpu baseline",
            baseline("gpu"),
            RGBColor(60, 60, 160),
            false,
        ),
    ]
    .into_iter()
    .filter_map(|(name, bytes, color, budget)| {
        let mib = bytes? as f64 / MIB;
        if budget && highest > 0.0 && mib > highest * BUDGET_IN_VIEW {
            notes.push(format!(
                "{name} {} is far above these figures: not drawn, so they keep their scale",
                crate::units::Bytes(bytes?)
            ));
            return None;
        }
        Some((name, mib, color))
    })
    .collect();
    let end = case
        .wall_time_s
        .max(host.iter().chain(&gpu).map(|p| p.0).fold(0.0, f64::max))
        .max(0.1)
        // Room past the end, so the line marking it is not on the frame.
        * 1.03;
    let top = lines.iter().map(|l| l.1).fold(highest.max(1.0), f64::max) * 1.1;

    let mut drawn = Vec::new();
    if !host.is_empty() {
        let label = if serving {
            "server host RSS"
        } else {
            "host RSS"
        };
        drawn.push(Line::new(label, host, BLUE, 2));
    }
    if !client_host.is_empty() {
        drawn.push(Line::new(
            "client host RSS",
            client_host,
            RGBColor(255, 127, 14),
            1,
        ));
    }
    if client_gpu.iter().any(|p| p.1 > 0.0) {
        drawn.push(Line::new(
            "client gpu",
            client_gpu,
            RGBColor(44, 160, 44),
            1,
        ));
    }
    if let Some(at) = ready_at {
        drawn.push(Line::new(
            "server ready",
            vec![(at, 0.0), (at, highest.max(1.0) * 1.1)],
            RGBColor(120, 120, 120),
            1,
        ));
    }
    if !device.is_empty() {
        drawn.push(Line::new(
            "gpu device used",
            device,
            RGBColor(150, 150, 150),
            1,
        ));
    }
    if !gpu.is_empty() {
        let label = if serving {
            "gpu (server)"
        } else {
            "gpu (case)"
        };
        drawn.push(Line::new(label, gpu, GREEN, 2));
    }
    for (name, value, color) in lines {
        drawn.push(Line::new(name, vec![(0.0, value), (end, value)], color, 1));
    }
    let oom = case
        .diagnosis
        .as_ref()
        .is_some_and(|d| d.kind == crate::diagnose::FailureKind::GpuOom);
    if oom || case.status != CaseStatus::Passed {
        let label = if oom { "OOM" } else { "end" };
        let at = case.wall_time_s;
        drawn.push(Line::new(label, vec![(at, 0.0), (at, top)], BLACK, 1));
    }
    let svg = draw((900, 360), (0.0..end, 0.0..top), ("seconds", "MiB"), drawn)?;
    Some(Chart { svg, notes })
}

/// Colours of the probe's series, one per instance and phase.
const SERIES_COLOURS: [RGBColor; 6] = [
    RGBColor(31, 119, 180),
    RGBColor(44, 160, 44),
    RGBColor(255, 127, 14),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(23, 190, 207),
];

/// What the workload's probe reported at each step — `allocated` and
/// `reserved` per instance and phase, the allocator's own view — and, when
/// a leak check ran on it, the fitted trend after warm-up. `None` without a probe
/// series of two steps or more.
pub(super) fn probe_chart(case: &CaseResult) -> Option<String> {
    let probe = case.probe.as_ref()?;
    let points = |values: &[u64]| -> Vec<(f64, f64)> {
        let all: Vec<(f64, f64)> = values
            .iter()
            .enumerate()
            .map(|(i, v)| (i as f64, *v as f64 / MIB))
            .collect();
        downsample(&all, MAX_POINTS_PER_SERIES)
    };
    // Per instance and phase: allocated (thick), and reserved (thin, the
    // same colour) where the workload reports it.
    type Series = (String, Vec<(f64, f64)>, Option<Vec<(f64, f64)>>);
    let series: Vec<Series> = probe
        .series
        .iter()
        .filter(|(_, values)| values.len() >= 2)
        .take(SERIES_COLOURS.len())
        .map(|(key @ (instance, phase), values)| {
            let label = if phase.is_empty() {
                format!("instance {instance}")
            } else {
                format!("{phase}, instance {instance}")
            };
            let reserved = probe
                .reserved_series
                .get(key)
                .filter(|r| r.len() >= 2)
                .map(|r| points(r));
            (label, points(values), reserved)
        })
        .collect();
    if series.is_empty() {
        return None;
    }
    // The trend is drawn over the series the leak was judged on.
    let trend = case
        .leak
        .as_ref()
        .zip(probe.longest_series())
        .and_then(|(leak, (_, values))| {
            let last = values.len().checked_sub(1)? as f64;
            let first = leak.warmup as f64;
            let at = |x: f64| (leak.intercept_bytes + leak.slope_bytes_per_iteration * x) / MIB;
            (last > first).then(|| (leak, vec![(first, at(first)), (last, at(last))]))
        });
    let values = series
        .iter()
        .flat_map(|(_, allocated, reserved)| allocated.iter().chain(reserved.iter().flatten()))
        .map(|p| p.1)
        .chain(trend.iter().flat_map(|(_, line)| line.iter().map(|p| p.1)));
    let (low, high) = values.fold((f64::MAX, f64::MIN), |(lo, hi), v| (lo.min(v), hi.max(v)));
    // Scaled to the figures, not from zero: a growth of a few MiB on top of
    // gigabytes is the point of this chart.
    let pad = ((high - low) * 0.1).max(1.0);
    let (low, high) = ((low - pad).max(0.0), high + pad);
    let steps = series
        .iter()
        .map(|(_, points, _)| points.last().map_or(0.0, |p| p.0))
        .fold(1.0, f64::max);

    let mut drawn = Vec::new();
    for ((label, allocated, reserved), colour) in series.into_iter().zip(SERIES_COLOURS) {
        drawn.push(Line::new(
            format!("allocated ({label})"),
            allocated,
            colour,
            3,
        ));
        if let Some(reserved) = reserved {
            drawn.push(Line::new(
                format!("reserved ({label})"),
                reserved,
                colour,
                1,
            ));
        }
    }
    if let Some((leak, line)) = trend {
        let per = crate::units::Bytes(leak.slope_bytes_per_iteration.abs() as u64);
        let sign = if leak.slope_bytes_per_iteration < 0.0 {
            "-"
        } else {
            "+"
        };
        let label = format!("leak trend: {sign}{per} per step after warm-up");
        drawn.push(Line::new(label, line, RED, 2));
    }
    let svg = draw(
        (900, 300),
        (0.0..steps, low..high),
        ("probe step", "MiB"),
        drawn,
    )?;
    Some(svg)
}

/// A searched case's memory curve: the peak memory of each probe
/// against the searched value, with the GPU budget and the devices' total
/// memory where they are in view, and the capacity found — how the
/// workload scales, and where it will break. `None` without a search of
/// two probes or more with figures.
pub(super) fn capacity_chart(case: &CaseResult) -> Option<Chart> {
    let capacity = case.capacity.as_ref()?;
    let mut probes: Vec<&crate::capacity::Probe> = capacity.probes.iter().collect();
    probes.sort_by_key(|p| p.value);
    // The curve is drawn through the probes that passed; a failed probe's
    // peak is where it stopped (an OOM before allocating reads low), so
    // those are marked apart.
    let series = |passed: bool, pick: fn(&crate::capacity::Probe) -> Option<u64>| {
        probes
            .iter()
            .filter(|p| p.passed() == passed)
            .filter_map(|p| pick(p).map(|b| (p.value as f64, b as f64 / MIB)))
            .collect::<Vec<(f64, f64)>>()
    };
    let host = series(true, |p| p.host_peak_bytes);
    let gpu = series(true, |p| p.gpu_peak_bytes);
    let failed_gpu = series(false, |p| p.gpu_peak_bytes);
    let failed_host = series(false, |p| p.host_peak_bytes);
    if host.len() < 2 && gpu.len() < 2 {
        return None;
    }
    let highest = host
        .iter()
        .chain(&gpu)
        .chain(&failed_gpu)
        .chain(&failed_host)
        .map(|p| p.1)
        .fold(0.0, f64::max);
    let right = probes.last().map_or(1.0, |p| p.value as f64).max(1.0);
    let left = probes
        .first()
        .map_or(0.0, |p| p.value as f64)
        .min(right - 1.0);
    let mut notes = Vec::new();
    let mut limits = Vec::new();
    let device_total: u64 = case.gpu_devices.iter().map(|d| d.total_bytes).sum();
    let budget = case
        .checks
        .iter()
        .find(|c| c.kind == CheckKind::GpuBudget)
        .and_then(|c| c.limit_bytes);
    for (label, bytes, colour) in [
        ("GPU budget", budget, RED),
        (
            "devices' total memory",
            (device_total > 0).then_some(device_total),
            BLACK,
        ),
    ] {
        let Some(bytes) = bytes else { continue };
        let mib = bytes as f64 / MIB;
        if mib <= highest * BUDGET_IN_VIEW {
            limits.push(Line::new(label, vec![(left, mib), (right, mib)], colour, 1));
        } else {
            notes.push(format!(
                "{label}: {} (far above the figures, not drawn)",
                crate::units::Bytes(bytes)
            ));
        }
    }
    let top = limits
        .iter()
        .flat_map(|l| l.points.iter().map(|p| p.1))
        .fold(highest, f64::max)
        * 1.1;
    let mut drawn = Vec::new();
    let with_gpu = gpu.len() >= 2;
    if with_gpu {
        drawn.push(Line::new("GPU peak", gpu, SERIES_COLOURS[0], 3));
    }
    if host.len() >= 2 {
        drawn.push(Line::new("host peak", host, SERIES_COLOURS[1], 3));
    }
    let failed = if with_gpu { failed_gpu } else { failed_host };
    if !failed.is_empty() {
        drawn.push(Line::points(
            "failed probes (peak until they stopped)",
            failed,
            RED,
        ));
    }
    drawn.extend(limits);
    if let Some(value) = capacity.value {
        let at = value as f64;
        drawn.push(Line::new(
            format!("capacity: {} = {value}", capacity.param),
            vec![(at, 0.0), (at, top)],
            SERIES_COLOURS[2],
            2,
        ));
    }
    let svg = draw(
        (900, 320),
        (left..right, 0.0..top.max(1.0)),
        (capacity.param.as_str(), "MiB"),
        drawn,
    )?;
    Some(Chart { svg, notes })
}

/// One line of a chart, with its legend entry; width 0: points only.
struct Line {
    label: String,
    points: Vec<(f64, f64)>,
    colour: RGBColor,
    width: u32,
}

impl Line {
    /// Marked points, not joined.
    fn points(label: impl Into<String>, points: Vec<(f64, f64)>, colour: RGBColor) -> Self {
        Line::new(label, points, colour, 0)
    }

    fn new(
        label: impl Into<String>,
        points: Vec<(f64, f64)>,
        colour: RGBColor,
        width: u32,
    ) -> Self {
        Line {
            label: label.into(),
            points,
            colour,
            width,
        }
    }
}

/// Draw `lines` on axes over the given ranges, with their legend: every
/// chart of the report looks the same way. `None` if plotters fails.
fn draw(
    size: (u32, u32),
    (x, y): (std::ops::Range<f64>, std::ops::Range<f64>),
    (x_desc, y_desc): (&str, &str),
    lines: Vec<Line>,
) -> Option<String> {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, size).into_drawing_area();
        root.fill(&WHITE).ok()?;
        let mut chart = ChartBuilder::on(&root)
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(80)
            .build_cartesian_2d(x, y)
            .ok()?;
        chart
            .configure_mesh()
            .x_desc(x_desc)
            .y_desc(y_desc)
            .label_style(("sans-serif", LABEL_PX))
            .axis_desc_style(("sans-serif", LABEL_PX))
            .light_line_style(WHITE)
            .draw()
            .ok()?;
        for line in lines {
            if line.width == 0 {
                let style = line.colour.filled();
                chart
                    .draw_series(line.points.into_iter().map(|p| Circle::new(p, 6, style)))
                    .ok()?
                    .label(line.label)
                    .legend(move |(x, y)| Circle::new((x + 8, y), 6, style));
                continue;
            }
            let style = line.colour.stroke_width(line.width);
            chart
                .draw_series(LineSeries::new(line.points, style))
                .ok()?
                .label(line.label)
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], style));
        }
        chart
            .configure_series_labels()
            .label_font(("sans-serif", LEGEND_PX))
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()
            .ok()?;
        root.present().ok()?;
    }
    Some(svg)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ramp(n: usize) -> Vec<(f64, f64)> {
        (0..n).map(|i| (i as f64, (i % 7) as f64)).collect()
    }

    fn highest(points: &[(f64, f64)]) -> f64 {
        points.iter().map(|p| p.1).fold(f64::MIN, f64::max)
    }

    #[test]
    fn short_series_are_kept_whole() {
        for n in [0, 1, 399, 400] {
            assert_eq!(downsample(&ramp(n), 400), ramp(n), "{n} points");
        }
    }

    #[test]
    fn long_series_are_bounded() {
        for n in [401, 799, 800, 801, 2048, 100_000] {
            let kept = downsample(&ramp(n), 400);
            assert!(
                kept.len() <= 400 && kept.len() >= 200,
                "{n} -> {}",
                kept.len()
            );
            assert!(kept.windows(2).all(|w| w[0].0 < w[1].0), "in time order");
        }
    }

    #[test]
    fn a_one_sample_spike_survives_with_its_moment() {
        for at in [0, 1, 1023, 2046, 2047] {
            let mut points: Vec<(f64, f64)> = (0..2048).map(|i| (i as f64, 10.0)).collect();
            points[at].1 = 5000.0;
            let kept = downsample(&points, 400);
            assert!(kept.contains(&(at as f64, 5000.0)), "spike at {at}");
            assert_eq!(highest(&kept), highest(&points));
        }
    }

    #[test]
    fn no_value_is_raised_or_invented() {
        let points = ramp(3000);
        for kept in downsample(&points, 400) {
            assert!(points.contains(&kept), "{kept:?} is a real point");
        }
    }

    #[test]
    fn a_zero_bound_still_keeps_the_peak() {
        let kept = downsample(&ramp(50), 0);
        assert_eq!(kept.len(), 1);
        assert_eq!(highest(&kept), 6.0);
    }
}

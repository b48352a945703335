//! One case's memory over time as an inline SVG chart, drawn by plotters
//! from the case's `timeline.json`: host RSS, the case's GPU memory, the
//! devices' use, budget and baseline lines, and the moment the case ended
//! if it did not pass.

use std::path::Path;

use plotters::prelude::*;

use crate::results::{CaseResult, CaseStatus};

const MIB: f64 = 1024.0 * 1024.0;

/// The case's memory over time as an SVG, from its timeline.json.
pub(super) fn chart(case: &CaseResult, out_dir: &Path) -> Option<String> {
    let text = std::fs::read_to_string(out_dir.join(&case.timeline)).ok()?;
    let timeline: serde_json::Value = serde_json::from_str(&text).ok()?;
    let points = timeline["points"].as_array()?;
    let series = |key: &str| -> Vec<(f64, f64)> {
        points
            .iter()
            .filter_map(|p| Some((p["t_ms"].as_f64()? / 1000.0, p[key].as_f64()? / MIB)))
            .collect()
    };
    let host = series("host_bytes");
    let gpu = series("gpu_bytes");
    let device = series("gpu_device_bytes");
    if host.is_empty() && gpu.is_empty() {
        return None;
    }
    let limit = |name: &str| {
        case.checks
            .iter()
            .find(|c| c.name == name)
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
    let lines: Vec<(&str, f64, RGBColor)> = [
        ("host budget", limit("budget.host"), RED),
        ("gpu budget", limit("budget.gpu"), MAGENTA),
        ("host baseline", baseline("host"), RGBColor(120, 120, 120)),
        ("gpu baseline", baseline("gpu"), RGBColor(60, 60, 160)),
    ]
    .into_iter()
    .filter_map(|(name, bytes, color)| bytes.map(|b| (name, b as f64 / MIB, color)))
    .collect();
    let end = case
        .wall_time_s
        .max(host.iter().chain(&gpu).map(|p| p.0).fold(0.0, f64::max))
        .max(0.1);
    let top = host
        .iter()
        .chain(&gpu)
        .chain(&device)
        .map(|p| p.1)
        .chain(lines.iter().map(|l| l.1))
        .fold(1.0, f64::max)
        * 1.1;

    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (900, 320)).into_drawing_area();
        root.fill(&WHITE).ok()?;
        let mut chart = ChartBuilder::on(&root)
            .margin(12)
            .x_label_area_size(32)
            .y_label_area_size(64)
            .build_cartesian_2d(0.0..end, 0.0..top)
            .ok()?;
        chart
            .configure_mesh()
            .x_desc("seconds")
            .y_desc("MiB")
            .light_line_style(WHITE)
            .draw()
            .ok()?;
        if !host.is_empty() {
            chart
                .draw_series(LineSeries::new(host, BLUE.stroke_width(2)))
                .ok()?
                .label("host RSS")
                .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], BLUE));
        }
        if !device.is_empty() {
            let grey = RGBColor(150, 150, 150);
            chart
                .draw_series(LineSeries::new(device, grey.stroke_width(1)))
                .ok()?
                .label("gpu device used")
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], grey));
        }
        if !gpu.is_empty() {
            chart
                .draw_series(LineSeries::new(gpu, GREEN.stroke_width(2)))
                .ok()?
                .label("gpu (case)")
                .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], GREEN));
        }
        for (name, value, color) in &lines {
            let color = *color;
            chart
                .draw_series(LineSeries::new(
                    vec![(0.0, *value), (end, *value)],
                    color.stroke_width(1),
                ))
                .ok()?
                .label(*name)
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], color));
        }
        let oom = case
            .diagnosis
            .as_ref()
            .is_some_and(|d| d.kind == crate::diagnose::FailureKind::GpuOom);
        if oom || case.status != CaseStatus::Passed {
            let label = if oom { "OOM" } else { "end" };
            chart
                .draw_series(LineSeries::new(
                    vec![(case.wall_time_s, 0.0), (case.wall_time_s, top)],
                    BLACK.stroke_width(1),
                ))
                .ok()?
                .label(label)
                .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], BLACK));
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()
            .ok()?;
        root.present().ok()?;
    }
    Some(svg)
}

//! `report.html`: one self-contained page (no network fetches) to look at
//! after a run — the summary table, then per case a memory-over-time chart
//! (host RSS, the case's GPU memory, budget and baseline lines, the moment
//! an OOM ended it), the diagnosis and hints, drift, and the log tails.
//!
//! Charts are drawn by plotters into inline SVG. The memory series come
//! from each case's `timeline.json`, read back when the page is written.

use std::fmt::Write as _;
use std::path::Path;

use plotters::prelude::*;

use super::{baseline_cells, case_details, gpu_summary};
use crate::results::{CaseResult, CaseStatus, RunResults};

const MIB: f64 = 1024.0 * 1024.0;

fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            c if c.is_control() && c != '\n' && c != '\t' => {}
            c => out.push(c),
        }
    }
    out
}

fn status_class(status: CaseStatus) -> &'static str {
    if status == CaseStatus::Passed {
        "pass"
    } else {
        "fail"
    }
}

/// The whole page.
pub fn render(results: &RunResults, out_dir: &Path) -> String {
    let mut page = String::new();
    let title = format!("oomgate: {}", results.suite.name);
    let _ = write!(
        page,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{}</title>\n<style>{STYLE}</style></head><body>\n<h1>{}</h1>\n",
        escape(&title),
        escape(&title)
    );
    let s = &results.summary;
    let _ = writeln!(
        page,
        "<p class=\"meta\">{} passed, {} failed, {} timed out, {} errored · started {} on {} · oomgate {}</p>",
        s.passed,
        s.failed,
        s.timed_out,
        s.error,
        escape(&results.started_at),
        escape(&results.host),
        escape(&results.oomgate_version)
    );
    if let Some(note) = &results.measurement.gpu_note {
        let _ = writeln!(
            page,
            "<p class=\"meta\">GPU memory not measured: {}</p>",
            escape(note)
        );
    }
    page.push_str("<table><tr><th>case</th><th>status</th><th>GPU peak</th><th>baseline</th><th>delta</th><th>host peak</th></tr>\n");
    for case in &results.cases {
        let (baseline, delta) = baseline_cells(case);
        let _ = writeln!(
            page,
            "<tr class=\"{}\"><td><a href=\"#case-{}\">{}</a></td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            status_class(case.status),
            escape(&case.id),
            escape(&case.id),
            case.status.as_str(),
            escape(&match &case.gpu_peak_method {
                Some(_) => gpu_summary(case, &results.measurement),
                None => "not measured".to_string(),
            }),
            escape(&baseline),
            escape(&delta),
            case.host_peak()
                .map_or("unknown".to_string(), |b| b.to_string())
        );
    }
    page.push_str("</table>\n");
    if let Some(baseline) = &results.baseline {
        let _ = writeln!(page, "<h2>Environment drift</h2>");
        if baseline.drift.is_empty() {
            page.push_str("<p>None: the environment matches the baseline's.</p>\n");
        } else {
            page.push_str("<ul>");
            for change in &baseline.drift {
                let _ = write!(page, "<li>{}</li>", escape(&change.to_string()));
            }
            page.push_str("</ul>\n");
        }
    }
    for case in &results.cases {
        case_section(&mut page, case, results, out_dir);
    }
    page.push_str("</body></html>\n");
    page
}

fn case_section(page: &mut String, case: &CaseResult, results: &RunResults, out_dir: &Path) {
    let _ = writeln!(
        page,
        "<section id=\"case-{}\" class=\"{}\"><h2>{} — {}</h2>",
        escape(&case.id),
        status_class(case.status),
        escape(&case.id),
        case.status.as_str()
    );
    if let Some(message) = &case.message {
        let _ = writeln!(page, "<p class=\"message\">{}</p>", escape(message));
    }
    match chart(case, out_dir) {
        Some(svg) => {
            page.push_str("<div class=\"chart\">");
            page.push_str(&svg);
            page.push_str("</div>\n");
        }
        None => page.push_str("<p class=\"meta\">No memory timeline was recorded.</p>\n"),
    }
    if let Some(diagnosis) = &case.diagnosis {
        let _ = writeln!(page, "<h3>Diagnosis: {}</h3>", diagnosis.kind.as_str());
        if !diagnosis.hints.is_empty() {
            page.push_str("<ul>");
            for hint in &diagnosis.hints {
                let _ = write!(page, "<li>{}</li>", escape(hint));
            }
            page.push_str("</ul>\n");
        }
        if let Some(exception) = &diagnosis.exception {
            let _ = writeln!(page, "<pre class=\"exception\">{}</pre>", escape(exception));
        }
    }
    let _ = writeln!(
        page,
        "<details><summary>figures</summary><pre>{}</pre></details>",
        escape(&case_details(case, &results.measurement))
    );
    for (name, tail) in [("stderr", &case.stderr_tail), ("stdout", &case.stdout_tail)] {
        if !tail.is_empty() {
            let _ = writeln!(
                page,
                "<details><summary>end of {name}</summary><pre>{}</pre></details>",
                escape(tail)
            );
        }
    }
    page.push_str("</section>\n");
}

/// The case's memory over time as an SVG, from its timeline.json.
fn chart(case: &CaseResult, out_dir: &Path) -> Option<String> {
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

const STYLE: &str = "body{font-family:system-ui,sans-serif;margin:24px;max-width:1000px;color:#222}\
table{border-collapse:collapse;margin:12px 0}td,th{border:1px solid #ccc;padding:4px 8px;text-align:left}\
tr.fail td,section.fail h2{color:#b00020}tr.pass td:nth-child(2){color:#08701a}\
.meta{color:#666}.message{font-weight:600}pre{background:#f6f6f6;padding:8px;overflow:auto;max-height:400px}\
section{border-top:1px solid #ddd;margin-top:24px}.chart svg{max-width:100%;height:auto}";

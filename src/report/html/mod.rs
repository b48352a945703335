//! `report.html`: one self-contained page (no network fetches) to look at
//! after a run — the summary table, then per case a memory-over-time chart
//! (host RSS, the case's GPU memory, budget and baseline lines, the moment
//! an OOM ended it), the diagnosis and hints, drift, and the log tails.
//!
//! Charts are drawn by plotters into inline SVG. The memory series come
//! from each case's `timeline.json`, read back when the page is written.

use std::fmt::Write as _;
use std::path::Path;

use super::{baseline_cells, case_details, gpu_summary};
use crate::results::{CaseResult, CaseStatus, RunResults};

mod chart;

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
    match chart::chart(case, out_dir) {
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

const STYLE: &str = "body{font-family:system-ui,sans-serif;margin:24px;max-width:1000px;color:#222}\
table{border-collapse:collapse;margin:12px 0}td,th{border:1px solid #ccc;padding:4px 8px;text-align:left}\
tr.fail td,section.fail h2{color:#b00020}tr.pass td:nth-child(2){color:#08701a}\
.meta{color:#666}.message{font-weight:600}pre{background:#f6f6f6;padding:8px;overflow:auto;max-height:400px}\
section{border-top:1px solid #ddd;margin-top:24px}.chart svg{max-width:100%;height:auto}";

//! `report.html`: one self-contained page (no network fetches, no script)
//! to look at after a run — a table with a row for every case (status and
//! why, GPU and host peaks, baseline and delta, wall time), the environment
//! drift, then for the cases that matter a section: a memory-over-time
//! chart (host RSS, the case's GPU memory, budget and baseline lines, the
//! moment an OOM ended it), the diagnosis and hints, the figures, and the
//! log tails.
//!
//! [`render`] builds the page; `files::ReportFiles` writes it once, when
//! the run finishes. The page stays bounded at thousands of cases: up to
//! [`select::CHART_CAP`] cases every case is charted, beyond it only the
//! ones [`select::plan`] picks (failures first, then regressions and the
//! largest peaks), and the page says how many and why. Charts are drawn by
//! plotters into inline SVG from each case's `timeline.json`, read back
//! when the page is rendered and downsampled to a bounded number of points
//! that keeps every peak (`chart.rs`).

use std::fmt::Write as _;
use std::path::Path;

use std::time::Duration;

use select::{CHART_CAP, Candidate, ChartPlan, Reason, TOP_BY_PEAK};

use super::{baseline_cells, case_details, gpu_summary};
use crate::results::{CaseResult, CaseStatus, RunResults};
use crate::units::format_duration;

mod chart;
pub mod select;
mod sites;

fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            c if super::is_stray_control(c) => {}
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
    if let Some(fault) = &results.fault {
        let _ = writeln!(
            page,
            "<p class=\"fault\">oomgate stopped launching cases: {}</p>",
            escape(fault)
        );
    }
    if let Some(note) = &results.measurement.gpu_note {
        let _ = writeln!(
            page,
            "<p class=\"meta\">GPU memory not measured: {}</p>",
            escape(note)
        );
    }
    let candidates: Vec<Candidate> = results.cases.iter().map(Candidate::of).collect();
    let plan = select::plan(&candidates);
    chart_note(&mut page, &plan, results.cases.len());
    page.push_str("<table><tr><th>case</th><th>status</th><th>GPU peak</th><th>baseline</th><th>delta</th><th>host peak</th><th>wall time</th></tr>\n");
    for (index, case) in results.cases.iter().enumerate() {
        table_row(&mut page, case, results, plan.reason(index).is_some());
    }
    for id in &results.not_run {
        let _ = writeln!(
            page,
            "<tr id=\"case-{}\" class=\"fail\"><td>{}</td><td>not run</td><td>–</td><td>–</td><td>–</td><td>–</td><td>–</td></tr>",
            escape(id),
            escape(id)
        );
    }
    page.push_str("</table>\n");
    let no_part = super::parts::held_by_no_part(results);
    if !no_part.is_empty() {
        let _ = writeln!(
            page,
            "<p class=\"fault\">Not run by any part: {} — {}.</p>",
            escape(&no_part.join(", ")),
            escape(super::NO_PART_MESSAGE)
        );
    }
    let unfinished = super::parts::left_by_a_killed_part(results);
    if !unfinished.is_empty() {
        let _ = writeln!(
            page,
            "<p class=\"fault\">Not finished by its part: {} — {}.</p>",
            escape(&unfinished.join(", ")),
            escape(super::UNFINISHED_MESSAGE)
        );
    }
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
    if let Some(parts) = super::parts::of(results) {
        parts_section(&mut page, &parts);
    }
    for (index, _) in &plan.charted {
        if let Some(case) = results.cases.get(*index) {
            case_section(&mut page, case, results, out_dir);
        }
    }
    page.push_str("</body></html>\n");
    page
}

/// A merged run's parts, and where their environments differ.
fn parts_section(page: &mut String, parts: &super::parts::Parts) {
    let _ = writeln!(
        page,
        "<h2>Parts</h2>\n<p class=\"meta\">Merged from {} parts; the environment above is the first's.</p>",
        parts.rows.len()
    );
    page.push_str("<table><tr>");
    for column in super::parts::COLUMNS {
        let _ = write!(page, "<th>{column}</th>");
    }
    page.push_str("</tr>\n");
    for row in &parts.rows {
        page.push_str("<tr>");
        for cell in row {
            let _ = write!(page, "<td>{}</td>", escape(cell));
        }
        page.push_str("</tr>\n");
    }
    page.push_str("</table>\n<h2>Environment differences between parts</h2>\n");
    if parts.drift.is_empty() {
        page.push_str("<p>None: every part ran in the first part's environment.</p>\n");
    } else {
        let _ = writeln!(
            page,
            "<p>Against the first part, {}:</p><ul>",
            escape(&parts.first)
        );
        for (part, drift) in &parts.drift {
            let _ = write!(
                page,
                "<li><b>{}</b>: {}</li>",
                escape(part),
                escape(&drift.join("; "))
            );
        }
        page.push_str("</ul>\n");
    }
    if !parts.incomparable.is_empty() {
        let _ = writeln!(
            page,
            "<p class=\"fault\">Not comparable: {}; {}.</p>",
            escape(&parts.incomparable.join("; ")),
            escape(&super::parts::INCOMPARABLE_NOTE.replace('`', ""))
        );
    }
}

/// One line of the table: every case has one, charted or not. A charted
/// case links to its section; the others carry the anchor themselves.
fn table_row(page: &mut String, case: &CaseResult, results: &RunResults, charted: bool) {
    let id = escape(&case.id);
    let (row_anchor, name) = if charted {
        (String::new(), format!("<a href=\"#case-{id}\">{id}</a>"))
    } else {
        (format!(" id=\"case-{id}\""), id.clone())
    };
    // A case that did not pass says why right here: beyond the chart cap
    // it has no section of its own.
    let why = match (&case.message, case.status) {
        (Some(message), status) if status != CaseStatus::Passed => format!(
            "<br><span class=\"why\">{}</span>",
            escape(&shorten(message, MESSAGE_CHARS))
        ),
        _ => String::new(),
    };
    // Who shared the case's GPUs (`--pack`): the first thing to suspect
    // when a packed case's figures look odd.
    let shared: String = case
        .gpu_sharing
        .iter()
        .map(|s| {
            format!(
                "<br><span class=\"why\">shared GPU {} with {}</span>",
                s.gpu.index,
                escape(&s.with.join(", "))
            )
        })
        .collect();
    let why = why + &shared;
    let (baseline, delta) = baseline_cells(case);
    let gpu = match &case.gpu_peak_method {
        Some(_) => gpu_summary(case, &results.measurement),
        None => "not measured".to_string(),
    };
    let wall = format_duration(Duration::try_from_secs_f64(case.wall_time_s).unwrap_or_default());
    let _ = writeln!(
        page,
        "<tr{row_anchor} class=\"{}\"><td>{name}</td><td>{}{why}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{wall}</td></tr>",
        status_class(case.status),
        if case.flaky() {
            "passed (flaky)"
        } else {
            case.status.as_str()
        },
        escape(&gpu),
        escape(&baseline),
        escape(&delta),
        case.host_peak()
            .map_or("unknown".to_string(), |b| b.to_string())
    );
}

/// The longest message a table row shows; the section or results.json has
/// the rest.
const MESSAGE_CHARS: usize = 200;

fn shorten(text: &str, max_chars: usize) -> String {
    match text.char_indices().nth(max_chars) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_string(),
    }
}

/// Above the table of a large suite: how many cases are charted and why,
/// so a missing chart is never a mystery.
fn chart_note(page: &mut String, plan: &ChartPlan, total: usize) {
    if plan.count(Reason::Every) == total {
        return;
    }
    let parts: Vec<String> = [
        (Reason::NotPassed, "that did not pass".to_string()),
        (
            Reason::Regressed,
            "regressed against the baseline".to_string(),
        ),
        (
            Reason::LargestGpuPeak,
            format!("among the {TOP_BY_PEAK} largest GPU peaks"),
        ),
        (
            Reason::LargestHostPeak,
            format!("among the {TOP_BY_PEAK} largest host peaks"),
        ),
    ]
    .into_iter()
    .filter_map(|(reason, words)| match plan.count(reason) {
        0 => None,
        n => Some(format!("{n} {words}")),
    })
    .collect();
    let charted = plan.charted.len();
    let why = if parts.is_empty() {
        String::new()
    } else {
        format!(": {}", parts.join(", "))
    };
    let _ = write!(
        page,
        "<p class=\"meta\" id=\"charted\">{charted} of {total} cases have a chart and a section below (at most {CHART_CAP}){why}. The table lists every case with its figures; results.json and each case's folder under <code>cases/</code> have the rest."
    );
    if plan.not_passed_uncharted > 0 {
        let _ = write!(
            page,
            " {} more cases that did not pass are over the cap: the table gives their message.",
            plan.not_passed_uncharted
        );
    }
    page.push_str("</p>\n");
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
        Some(chart) => {
            page.push_str("<div class=\"chart\">");
            page.push_str(&chart.svg);
            page.push_str("</div>\n");
            for note in &chart.notes {
                let _ = writeln!(page, "<p class=\"meta\">{}</p>", escape(note));
            }
        }
        None => page.push_str("<p class=\"meta\">No memory timeline was recorded.</p>\n"),
    }
    if let Some(curve) = chart::capacity_chart(case) {
        page.push_str("<h3>Peak memory against the searched value</h3><div class=\"chart\">");
        page.push_str(&curve.svg);
        page.push_str("</div>\n");
        for note in &curve.notes {
            let _ = writeln!(page, "<p class=\"meta\">{}</p>", escape(note));
        }
    }
    if let Some(svg) = sites::sites_chart(case) {
        let sites = case.allocation_sites.as_ref();
        let when = match sites.map(|s| s.from) {
            Some(crate::snapshot::SitesFrom::Dump) => "live when the snapshot was dumped",
            _ => "live at the GPU peak",
        };
        let _ = writeln!(
            page,
            "<h3>Allocation sites ({when})</h3><div class=\"chart\">"
        );
        page.push_str(&svg);
        page.push_str("</div>\n");
        for note in sites.iter().flat_map(|s| &s.notes) {
            let _ = writeln!(page, "<p class=\"meta\">{}</p>", escape(note));
        }
    }
    if let Some(svg) = chart::probe_chart(case) {
        page.push_str("<h3>What the probe reported</h3><div class=\"chart\">");
        page.push_str(&svg);
        page.push_str("</div>\n");
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

const STYLE: &str = "body{font-family:system-ui,sans-serif;font-size:16px;line-height:1.45;margin:24px;max-width:1000px;color:#222}\
table{border-collapse:collapse;margin:12px 0}td,th{border:1px solid #ccc;padding:4px 8px;text-align:left}\
tr.fail td,section.fail h2{color:#b00020}tr.pass td:nth-child(2){color:#08701a}\
.meta{color:#666}.message,.fault{font-weight:600}.fault{color:#b00020}pre{background:#f6f6f6;padding:8px;overflow:auto;max-height:400px}\
section{border-top:1px solid #ddd;margin-top:24px}.chart svg{max-width:100%;height:auto}\
.why{color:#444;font-size:90%}";

#[cfg(test)]
mod tests {
    use super::*;
    use crate::results::test_support::results_with_diagnosis;

    /// The page's elements, in order: what a workload's text could add to
    /// if it were not escaped.
    fn tags(html: &str) -> Vec<String> {
        html.split('<')
            .skip(1)
            .map(|rest| {
                rest.chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '/' || *c == '!')
                    .collect()
            })
            .collect()
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(128))]

        /// Whatever a workload prints, report.html has the same elements
        /// as for plain text: its output is text on the page, never markup.
        #[test]
        fn any_text_is_text_in_report_html(text in "[a-z<>&\"'/ ]{0,60}|\\PC{0,60}") {
            let out_dir = std::path::Path::new("/nonexistent");
            // Never empty: empty output leaves its section out.
            let page = render(&results_with_diagnosis(&format!("x{text}")), out_dir);
            let plain = render(&results_with_diagnosis("plain"), out_dir);
            proptest::prop_assert_eq!(tags(&page), tags(&plain));
        }
    }
}

//! A charted case's section of report.html: its message, its memory over
//! time, its capacity curve, allocation sites and probe steps where it has
//! them, its diagnosis, its figures and the ends of its logs.

use std::fmt::Write as _;
use std::path::Path;

use super::{chart, escape, outputs, outside, sites, status_class};
use crate::report::case_details;
use crate::results::{CaseResult, RunResults};

/// A chart under its heading, and the notes on what it leaves out.
fn chart_with_notes(page: &mut String, heading: Option<&str>, chart: &chart::Chart) {
    if let Some(heading) = heading {
        let _ = writeln!(page, "<h3>{heading}</h3>");
    }
    page.push_str(&chart.html);
    page.push('\n');
    for note in &chart.notes {
        let _ = writeln!(page, "<p class=\"meta\">{}</p>", escape(note));
    }
}

pub(super) fn case_section(
    page: &mut String,
    case: &CaseResult,
    results: &RunResults,
    out_dir: &Path,
) {
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
        Some(chart) => chart_with_notes(page, Some("Memory over time"), &chart),
        None => page.push_str("<p class=\"meta\">No memory timeline was recorded.</p>\n"),
    }
    if let Some(svg) = outside::outside_chart(case) {
        page.push_str("<h3>GPU memory at its peak, inside and outside the allocator</h3><figure class=\"chart\">");
        page.push_str(&svg);
        page.push_str("</figure>\n");
    }
    if let Some(curve) = chart::capacity_chart(case) {
        chart_with_notes(page, Some("Peak memory against the searched value"), &curve);
    }
    if let Some(trend) = chart::trend_chart(case) {
        chart_with_notes(page, Some("Over its last runs (the run history)"), &trend);
    }
    if let Some(svg) = sites::sites_chart(case) {
        let sites = case.allocation_sites.as_ref();
        let when = match sites.map(|s| s.from) {
            Some(crate::snapshot::SitesFrom::Dump) => "live when the snapshot was dumped",
            _ => "live at the GPU peak",
        };
        let _ = writeln!(
            page,
            "<h3>Allocation sites ({when})</h3><figure class=\"chart\">"
        );
        page.push_str(&svg);
        page.push_str("</figure>\n");
        for note in sites.iter().flat_map(|s| &s.notes) {
            let _ = writeln!(page, "<p class=\"meta\">{}</p>", escape(note));
        }
    }
    if let Some(svg) = outputs::outputs_chart(case) {
        page.push_str("<h3>Numbers from the logs</h3><figure class=\"chart\">");
        page.push_str(&svg);
        page.push_str("</figure>\n");
    }
    if let Some(steps) = chart::probe_chart(case, out_dir) {
        chart_with_notes(page, Some("What the probe reported"), &steps);
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

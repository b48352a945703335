//! `report.html`: one self-contained page (no network fetches, no script)
//! to read at a glance after a run — an overview chart of every charted
//! case's peak against its baseline and budget, a table with a row for
//! every case (status and why, GPU and host peaks, baseline and delta,
//! wall time), the environment drift, then for the cases that matter a
//! section (`section.rs`): a memory-over-time chart with the gated peaks,
//! budgets and baselines marked, the capacity and probe charts, the
//! diagnosis and hints, the figures, and the log tails.
//!
//! [`render`] builds the page; `files::ReportFiles` writes it once, when
//! the run finishes. The page uses the window's width: tables and charts
//! scale with it, and text wraps rather than being cut. It stays bounded
//! at thousands of cases: up to [`select::CHART_CAP`] cases every case is
//! charted, beyond it only the ones [`select::plan`] picks (failures
//! first, then regressions and the largest peaks), and the page says how
//! many and why. Charts are inline SVG written by `chart`, from each
//! case's `timeline.json` and probe files, read back when the page is
//! rendered.

use std::fmt::Write as _;
use std::path::Path;

use std::time::Duration;

use select::{CHART_CAP, Candidate, ChartPlan, Reason, TOP_BY_PEAK};

use super::{baseline_cells, gpu_summary};
use crate::results::{CaseResult, CaseStatus, RunResults};
use crate::units::format_duration;

mod chart;
mod outputs;
mod outside;
mod parity;
mod section;
pub mod select;
mod sites;

/// `text` as HTML text: [cleaned](crate::clean::block) (a workload's
/// lines, frame names, a lock's values: no control, bidi or noncharacter
/// left raw), then `&`, `<`, `>`, `"` as entities.
fn escape(text: &str) -> String {
    let text = crate::clean::block(text);
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            c => out.push(c),
        }
    }
    out
}

fn status_class(status: CaseStatus) -> &'static str {
    if status.ok() { "pass" } else { "fail" }
}

/// Past this many cases, the table shows those that did not pass or are
/// charted, and folds the rest (see [`render`]).
const FOLD_AFTER: usize = 500;

/// The head of a table of cases.
const CASES_TABLE: &str = "<table class=\"cases\"><colgroup><col class=\"case\"><col class=\"status\"><col span=\"5\"></colgroup><tr><th>case</th><th>status</th><th>GPU peak</th><th>baseline</th><th>delta</th><th>host peak</th><th>wall time</th></tr>\n";

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
    // The counts the terminal and summary.md say, in the same words.
    let counts = crate::report::summary_counts(&results.summary).join(", ");
    let _ = writeln!(
        page,
        "<p class=\"meta\">{} · started {} on {} · oomgate {}</p>",
        escape(&counts),
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
    let charted: Vec<&CaseResult> = plan
        .charted
        .iter()
        .filter_map(|(index, _)| results.cases.get(*index))
        .collect();
    if let Some(overview) = chart::overview::overview(&charted) {
        page.push_str("<h2>Overview</h2>\n");
        page.push_str(&overview);
        page.push('\n');
    }
    // A browser lays out a long table whole before it shows any of it:
    // past FOLD_AFTER cases, those that passed (or were skipped) and are
    // not charted wait in a closed `<details>`, which is laid out when
    // opened (Chromium opens it too for a link to one of its rows, or a
    // search of the page).
    let fold = results.cases.len() + results.not_run.len() > FOLD_AFTER;
    chart_note(&mut page, &plan, results.cases.len(), fold);
    let folded =
        |index: usize, case: &CaseResult| fold && case.status.ok() && plan.reason(index).is_none();
    page.push_str(CASES_TABLE);
    for (index, case) in results.cases.iter().enumerate() {
        if !folded(index, case) {
            table_row(&mut page, case, results, plan.reason(index).is_some());
        }
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
    let rest = results
        .cases
        .iter()
        .enumerate()
        .filter(|(index, case)| folded(*index, case))
        .count();
    if rest > 0 {
        let _ = writeln!(
            page,
            "<details class=\"rest\"><summary>the other {rest} cases: passed or skipped, not charted</summary>"
        );
        page.push_str(CASES_TABLE);
        for (index, case) in results.cases.iter().enumerate() {
            if folded(index, case) {
                table_row(&mut page, case, results, false);
            }
        }
        page.push_str("</table>\n</details>\n");
    }
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
    parity::parity_section(&mut page, results);
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
    for case in charted {
        section::case_section(&mut page, case, results, out_dir);
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
    // A case that did not pass says why right here, whole (the cell
    // wraps): beyond the chart cap it has no section of its own.
    let why = match (&case.message, case.status) {
        (Some(message), status) if status != CaseStatus::Passed => {
            // A skipped test's message is pytest's reason.
            format!("<br><span class=\"why\">{}</span>", escape(message))
        }
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

/// Above the table of a large suite: how many cases are charted and why,
/// so a missing chart is never a mystery.
fn chart_note(page: &mut String, plan: &ChartPlan, total: usize, folded: bool) {
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
    let table = match folded {
        true => {
            "The table lists every case with its figures, those that passed and have no chart folded after it"
        }
        false => "The table lists every case with its figures",
    };
    let _ = write!(
        page,
        "<p class=\"meta\" id=\"charted\">{charted} of {total} cases have a chart and a section below (at most {CHART_CAP}){why}. {table}; results.json and each case's folder under <code>cases/</code> have the rest."
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

/// The page's look: full width, tables and charts scaling with the
/// window, text that wraps (a long case id, a failure message, a log line)
/// rather than widening the page.
const STYLE: &str = "*{box-sizing:border-box}\
body{font-family:system-ui,sans-serif;font-size:16px;line-height:1.45;margin:0;padding:16px 24px 32px;color:#222}\
h1{margin:0 0 4px}h2{margin:20px 0 8px}\
table{border-collapse:collapse;margin:12px 0;width:100%}td,th{border:1px solid #ccc;padding:4px 8px;text-align:left;vertical-align:top;overflow-wrap:break-word}\
td:nth-child(-n+3){overflow-wrap:anywhere}table.cases col.case{width:18%}table.cases col.status{width:34%}\
tr.fail td,section.fail h2{color:#b00020}tr.pass td:nth-child(2){color:#08701a}\
.meta{color:#555}.message,.fault{font-weight:600;overflow-wrap:anywhere}.fault{color:#b00020}\
pre{background:#f6f6f6;padding:8px;white-space:pre-wrap;overflow-wrap:anywhere;max-height:400px;overflow-y:auto}\
section{border-top:1px solid #ddd;margin-top:24px}\
figure.chart{margin:8px 0 16px}figure.chart svg{display:block;width:100%;height:auto}\
ul.legend{display:flex;flex-wrap:wrap;gap:4px 20px;list-style:none;margin:0 0 6px;padding:0;font-size:15px}\
ul.legend li{display:flex;align-items:center;gap:6px}ul.legend li.note{color:#555;font-style:italic}\
label.scale{font-size:15px;color:#333}#one-scale:checked~svg .bar{width:var(--one)}\
#one-scale:checked~svg line.baseline,#one-scale:checked~svg line.budget{transform:translateX(var(--shift))}\
.swatch{display:inline-block;width:26px;height:0}.swatch.dot{width:12px;height:12px;border-radius:50%}\
.swatch.box{width:14px;height:14px}.swatch.tick{width:0;height:16px}\
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

    /// The status cell cut a failure's message at 200 characters with
    /// `…`: the table is the only place a case over the chart cap says
    /// why it failed, so the whole message is there, wrapping.
    #[test]
    fn a_long_failure_message_is_whole_in_the_table() {
        let message = format!(
            "gpu-oom: {} — the command exited with code 1",
            "tried to allocate 2.00 GiB; ".repeat(20)
        );
        let mut results = crate::results::test_support::results_with_text(&message);
        results.cases[0].stdout_tail.clear();
        results.cases[0].stderr_tail.clear();
        let page = render(&results, Path::new("/nonexistent"));
        let table =
            &page[page.find("<table").expect("a table")..page.find("</table>").expect("its end")];
        assert!(
            table.contains(&format!("<span class=\"why\">{}</span>", escape(&message))),
            "{table}"
        );
        assert!(!table.contains('…'), "{table}");
    }

    /// A suite of thousands: the cases that did not pass, and the charted,
    /// are in the open table; the others fold into a closed `<details>`
    /// (a browser lays a long table out whole before showing it). Every
    /// case keeps one row, its anchor included.
    #[test]
    fn past_500_cases_the_passed_and_uncharted_fold() {
        let one = crate::results::test_support::results_with_text("x");
        let mut results = one.clone();
        results.cases = (0..600)
            .map(|i| {
                let mut case = one.cases[0].clone();
                case.id = format!("t{i:03}");
                case.status = match i {
                    7 => crate::results::CaseStatus::Failed,
                    _ => crate::results::CaseStatus::Passed,
                };
                case
            })
            .collect();
        let page = render(&results, Path::new("/nonexistent"));
        let folded_at = page.find("<details class=\"rest\">").expect("a fold");
        let (open, folded) = page.split_at(folded_at);
        assert!(
            open.contains("<a href=\"#case-t007\">t007</a>"),
            "the failure"
        );
        let rows = |text: &str| text.matches("</td></tr>").count();
        assert_eq!(rows(&page), 600);
        assert!(rows(folded) > 500, "{}", rows(folded));
        assert!(
            folded.contains("the other"),
            "the summary says what is folded"
        );
        assert!(!folded.contains("t007<"), "the failure is not folded");
        // 500 cases or fewer: one table, nothing folded.
        results.cases.truncate(500);
        let page = render(&results, Path::new("/nonexistent"));
        assert!(!page.contains("<details class=\"rest\">"));
        assert_eq!(rows(&page), 500);
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

//! The run at a glance, at the top of report.html: a row per charted case
//! with its peak — GPU where the case uses a GPU, else host — as a bar
//! from 0, its baseline and its budget as marks across the bar, red for a
//! case that failed or regressed. The rows that failed or regressed come
//! first, then the largest changes against the baseline, then the rest in
//! run order; each name links to the case's section. A pytest test is
//! named by its own name (`TestA::test_x[bf16]`) under a heading of its
//! file, which the rows of that file share. A checkbox above the rows
//! draws them all on one scale instead (CSS only: each bar carries its
//! width on the common scale, each mark its shift, the page no script). Each row has its own scale (from 0 to
//! its largest figure): cases of 64 MiB and of 40 GiB sit in one suite,
//! and the question a row answers is how its peak stands against its own
//! baseline and budget. A figure never observed has no bar, never a bar
//! of 0.

use std::fmt::Write as _;

use super::labels::text_width_at;
use super::{BASELINE_COLOUR, HOST_COLOUR, RED, gpu_matters, limit};
use crate::baseline::{Figure, Outcome};
use crate::report::html::escape;
use crate::results::{CaseResult, CheckKind};
use crate::suite::BudgetKind;
use crate::units::Bytes;

/// Narrower than the other charts' SVG, so its text reads larger.
const WIDTH: f64 = 1000.0;
const FONT: f64 = 14.0;
const ROW: f64 = 28.0;
const TOP: f64 = 6.0;
const NAME_RIGHT: f64 = 222.0;
const BAR_LEFT: f64 = 230.0;
const BAR_WIDTH: f64 = 300.0;
const TEXT_LEFT: f64 = 544.0;
const BAR_HEIGHT: f64 = 14.0;

/// One case's row: what is drawn and how it reads.
#[derive(Debug, Clone, PartialEq)]
pub(in crate::report::html) struct Row {
    pub(in crate::report::html) id: String,
    /// What the row is called: the case's id, or a pytest test's name
    /// within its file.
    pub(in crate::report::html) label: String,
    /// A pytest test's file: the heading over its rows.
    pub(in crate::report::html) group: Option<String>,
    /// `GPU`, `host`, `working` or `allocated`: the compared figure that
    /// failed the gate, else the case's main one.
    pub(in crate::report::html) figure: &'static str,
    pub(in crate::report::html) peak: Option<u64>,
    pub(in crate::report::html) baseline: Option<u64>,
    pub(in crate::report::html) delta: Option<f64>,
    pub(in crate::report::html) budget: Option<u64>,
    /// Failed, or its figure regressed: drawn red.
    pub(in crate::report::html) bad: bool,
}

impl Row {
    pub(in crate::report::html) fn of(case: &CaseResult) -> Self {
        let comparison = crate::report::shown_figure(case);
        let figure = comparison.map_or(
            if gpu_matters(case) {
                Figure::Gpu
            } else {
                Figure::Host
            },
            |c| c.figure,
        );
        let regressed = case
            .baseline
            .as_ref()
            .is_some_and(|b| b.figures().iter().any(|f| f.outcome == Outcome::Regressed));
        // The figure's own value: the one its delta is computed from.
        let peak = match figure {
            Figure::Gpu => case.gpu_peak_bytes,
            Figure::Host => case.host.peak_bytes,
            Figure::Working | Figure::Allocated | Figure::Outside => {
                comparison.and_then(|c| c.new_bytes)
            }
        };
        // A test's node id less its file: `TestA::test_x[bf16]`.
        let within_file = case.pytest.as_ref().and_then(|_| {
            let (file, rest) = case.id.split_once("::")?;
            Some((file.to_string(), rest.to_string()))
        });
        let (group, label) = match within_file {
            Some((file, rest)) => (Some(file), rest),
            None => (None, case.id.clone()),
        };
        Row {
            id: case.id.clone(),
            label,
            group,
            figure: match figure {
                Figure::Gpu => "GPU",
                Figure::Host => "host",
                Figure::Working => "working",
                Figure::Allocated => "allocated",
                Figure::Outside => "outside the allocator",
            },
            peak,
            baseline: comparison.and_then(|c| c.baseline_bytes),
            delta: comparison
                .filter(|c| !matches!(c.outcome, Outcome::Skipped | Outcome::NoBaseline))
                .and_then(|c| c.delta_ratio),
            // A budget bounds the GPU or host peak, not the others.
            budget: match figure {
                Figure::Gpu => limit(case, CheckKind::GpuBudget),
                Figure::Host => limit(case, CheckKind::HostBudget),
                Figure::Outside => limit(case, CheckKind::Budget(BudgetKind::GpuOutsideAllocator)),
                Figure::Working | Figure::Allocated => None,
            },
            bad: !case.status.ok() || regressed,
        }
    }

    /// `GPU 1.37 GiB · baseline 1.00 GiB (+36.7%) · budget 3.00 GiB`.
    pub(in crate::report::html) fn words(&self) -> String {
        let mut words = match self.peak {
            Some(peak) => format!("{} {}", self.figure, Bytes(peak)),
            None => format!("{} peak unknown", self.figure),
        };
        if let Some(baseline) = self.baseline {
            let _ = write!(words, " · baseline {}", Bytes(baseline));
            if let Some(delta) = self.delta {
                let _ = write!(
                    words,
                    " ({})",
                    crate::baseline::compare::signed_percent(delta)
                );
            }
        }
        if let Some(budget) = self.budget {
            let _ = write!(words, " · budget {}", Bytes(budget));
        }
        words
    }
}

/// The overview of these cases (in run order), as HTML: a legend above
/// one SVG. `None` without a case.
pub(in crate::report::html) fn overview(cases: &[&CaseResult]) -> Option<String> {
    if cases.is_empty() {
        return None;
    }
    let rows = ordered(cases.iter().map(|c| Row::of(c)).collect());
    let headings = rows
        .iter()
        .enumerate()
        .filter(|(i, row)| row.group.is_some() && (*i == 0 || rows[i - 1].group != row.group))
        .count();
    let bad: Vec<&str> = rows
        .iter()
        .filter(|r| r.bad)
        .map(|r| r.id.as_str())
        .collect();
    let height = TOP * 2.0 + ROW * (rows.len() + headings) as f64;
    let title = "Each case's peak against its baseline and budget";
    let description = match bad.len() {
        0 => format!("{} cases; none failed or regressed.", rows.len()),
        n => format!(
            "{} cases; {n} failed or regressed: {}.",
            rows.len(),
            bad.join(", ")
        ),
    };
    let mut html = String::from("<figure class=\"chart overview\"><ul class=\"legend\">");
    let _ = write!(
        html,
        "<li><span class=\"swatch box\" style=\"background:{HOST_COLOUR}\"></span>peak (GPU where the case uses one, else host)</li>\
<li><span class=\"swatch box\" style=\"background:{RED}\"></span>failed or regressed</li>\
<li><span class=\"swatch tick\" style=\"border-left:3px solid {BASELINE_COLOUR}\"></span>baseline</li>\
<li><span class=\"swatch tick\" style=\"border-left:3px dashed {RED}\"></span>budget</li>\
<li class=\"note\">each row from 0 to its own largest figure</li></ul>\
<input type=\"checkbox\" id=\"one-scale\"><label class=\"scale\" for=\"one-scale\"> one scale for all rows</label>"
    );
    let _ = write!(
        html,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 {WIDTH} {height}\" role=\"img\" aria-label=\"{title}\" font-family=\"sans-serif\" font-size=\"{FONT}\"><title>{title}</title><desc>{}</desc>",
        escape(&description)
    );
    let _ = write!(
        html,
        "<rect class=\"plot-area\" x=\"{BAR_LEFT}\" y=\"{TOP}\" width=\"{BAR_WIDTH}\" height=\"{}\" fill=\"none\"/>",
        ROW * (rows.len() + headings) as f64
    );
    // The common scale: the largest figure of any row.
    let common = rows
        .iter()
        .flat_map(|r| [r.peak, r.baseline, r.budget])
        .flatten()
        .max()
        .unwrap_or(0)
        .max(1) as f64;
    let mut y = TOP;
    for (i, row) in rows.iter().enumerate() {
        if let Some(group) = row
            .group
            .as_ref()
            .filter(|_| i == 0 || rows[i - 1].group != row.group)
        {
            let _ = write!(
                html,
                "<text class=\"group\" x=\"4\" y=\"{:.1}\" font-weight=\"bold\" fill=\"#222\">{}</text>",
                y + ROW / 2.0 + 5.0,
                escape(&fitted_to(group, TEXT_LEFT - 8.0))
            );
            y += ROW;
        }
        draw_row(&mut html, row, y, common);
        y += ROW;
    }
    html.push_str("</svg></figure>");
    Some(html)
}

/// The rows in the order a reader wants them: what failed or regressed
/// first, then the largest changes against the baseline, then the rest,
/// each kept in run order among its equals.
fn ordered(mut rows: Vec<Row>) -> Vec<Row> {
    rows.sort_by(|a, b| {
        let change = |row: &Row| row.delta.map_or(0.0, f64::abs);
        b.bad.cmp(&a.bad).then(change(b).total_cmp(&change(a)))
    });
    rows
}

/// The row's name cut to its column, whole in its title.
fn fitted(name: &str) -> String {
    fitted_to(name, NAME_RIGHT - 4.0)
}

/// `name` cut to `width` at the overview's font, with `…` where cut.
fn fitted_to(name: &str, width: f64) -> String {
    let room = (width / text_width_at("m", FONT)) as usize;
    if name.chars().count() <= room {
        name.to_string()
    } else {
        let kept: String = name.chars().take(room.saturating_sub(1)).collect();
        format!("{kept}…")
    }
}

/// One row, on its own scale; `common`, the largest figure of all rows,
/// is the scale the bar's `--one` width and each mark's `--shift` give
/// for "one scale for all rows".
fn draw_row(svg: &mut String, row: &Row, y: f64, common: f64) {
    let scale = [row.peak, row.baseline, row.budget]
        .into_iter()
        .flatten()
        .max()
        .unwrap_or(0)
        .max(1) as f64;
    let at = |bytes: u64| BAR_LEFT + bytes as f64 / scale * BAR_WIDTH;
    let at_common = |bytes: u64| BAR_LEFT + bytes as f64 / common * BAR_WIDTH;
    let colour = if row.bad { RED } else { HOST_COLOUR };
    let middle = y + ROW / 2.0;
    let _ = write!(
        svg,
        "<g class=\"row{}\"><title>{}: {}</title><a href=\"#case-{}\"><text x=\"{NAME_RIGHT}\" y=\"{:.1}\" text-anchor=\"end\" fill=\"{}\">{}</text></a><rect x=\"{BAR_LEFT}\" y=\"{:.1}\" width=\"{BAR_WIDTH}\" height=\"{BAR_HEIGHT}\" fill=\"#f1f1f1\"/>",
        if row.bad { " bad" } else { "" },
        escape(&row.id),
        escape(&row.words()),
        escape(&row.id),
        middle + 5.0,
        if row.bad { RED } else { "#1a0dab" },
        escape(&fitted(&row.label)),
        middle - BAR_HEIGHT / 2.0
    );
    if let Some(peak) = row.peak {
        let _ = write!(
            svg,
            "<rect class=\"bar\" x=\"{BAR_LEFT}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{BAR_HEIGHT}\" fill=\"{colour}\" style=\"--one:{:.1}px\"/>",
            middle - BAR_HEIGHT / 2.0,
            at(peak) - BAR_LEFT,
            at_common(peak) - BAR_LEFT
        );
    }
    // A tick across the bar: the baseline solid, the budget dashed.
    let marks = [
        (row.baseline, "baseline", BASELINE_COLOUR, ""),
        (row.budget, "budget", RED, " stroke-dasharray=\"4 3\""),
    ];
    for (bytes, class, colour, dash) in marks {
        let Some(bytes) = bytes else { continue };
        let x = at(bytes);
        let _ = write!(
            svg,
            "<line class=\"{class}\" x1=\"{x:.1}\" x2=\"{x:.1}\" y1=\"{:.1}\" y2=\"{:.1}\" stroke=\"{colour}\" stroke-width=\"3\"{dash} style=\"--shift:{:.1}px\"/>",
            middle - 11.0,
            middle + 11.0,
            at_common(bytes) - x
        );
    }
    let _ = write!(
        svg,
        "<text x=\"{TEXT_LEFT}\" y=\"{:.1}\" fill=\"{}\">{}</text></g>",
        middle + 5.0,
        if row.bad { RED } else { "#222" },
        escape(&row.words())
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::baseline::CaseComparison;
    use crate::results::CaseStatus;

    const MIB: u64 = 1024 * 1024;

    fn case(id: &str, status: CaseStatus, host: Option<u64>) -> CaseResult {
        let mut case = CaseResult::unmeasured(id.into());
        case.status = status;
        case.host.peak_bytes = host;
        case
    }

    #[test]
    fn a_regression_is_red_and_says_how_much() {
        let mut regressed = case("grew", CaseStatus::Failed, Some(150 * MIB));
        let mut comparison = CaseComparison::default();
        comparison.host.outcome = Outcome::Regressed;
        comparison.host.baseline_bytes = Some(100 * MIB);
        comparison.host.delta_ratio = Some(0.5);
        regressed.baseline = Some(comparison);
        let fine = case("fine", CaseStatus::Passed, Some(10 * MIB));
        let html = overview(&[&fine, &regressed]).expect("an overview");
        let bad = html.find("<g class=\"row bad\">").expect("a red row");
        assert!(html[bad..].contains(&format!("fill=\"{RED}\"")), "{html}");
        assert!(
            html[bad..].contains("host 150.0 MiB · baseline 100.0 MiB (+50.0%)"),
            "{html}"
        );
        assert_eq!(
            html.matches("<g class=\"row\">").count(),
            1,
            "the passing row is not red"
        );
        assert!(html.contains("1 failed or regressed: grew"), "{html}");
    }

    #[test]
    fn an_unknown_peak_has_no_bar() {
        let unknown = case("lost", CaseStatus::Error, None);
        let html = overview(&[&unknown]).expect("an overview");
        assert!(!html.contains("class=\"bar\""), "{html}");
        assert!(html.contains("host peak unknown"), "{html}");
    }

    #[test]
    fn a_gpu_case_shows_its_gpu_peak_and_budget() {
        let mut gpu = case("train", CaseStatus::Passed, Some(15 * MIB));
        gpu.gpu_peak_bytes = Some(1400 * MIB);
        gpu.checks.push(
            crate::results::Check::new(
                CheckKind::GpuBudget,
                true,
                crate::results::CheckOutcome::Within,
            )
            .limit(Some(3 * 1024 * MIB)),
        );
        let row = Row::of(&gpu);
        assert_eq!(row.words(), "GPU 1.37 GiB · budget 3.00 GiB");
        assert!(!row.bad);
    }

    #[test]
    fn failures_come_first_then_the_largest_changes_and_tests_sit_under_their_file() {
        let changed = |id: &str, delta: f64| {
            let mut case = case(id, CaseStatus::Passed, Some(10 * MIB));
            let mut comparison = CaseComparison::default();
            comparison.host.outcome = Outcome::Within;
            comparison.host.baseline_bytes = Some(10 * MIB);
            comparison.host.delta_ratio = Some(delta);
            case.baseline = Some(comparison);
            case
        };
        let test = |mut case: CaseResult| {
            case.pytest = Some(crate::suite::PytestTest::default());
            case
        };
        let quiet = test(changed("tests/a.py::test_quiet", 0.01));
        let moved = test(changed("tests/b.py::TestB::test_moved[x]", -0.08));
        let failed = test(case(
            "tests/a.py::test_failed",
            CaseStatus::Failed,
            Some(MIB),
        ));
        let plain = case("plain-case", CaseStatus::Passed, Some(MIB));
        let rows = ordered(
            [&quiet, &moved, &plain, &failed]
                .into_iter()
                .map(Row::of)
                .collect(),
        );
        let labels: Vec<(&str, Option<&str>)> = rows
            .iter()
            .map(|r| (r.label.as_str(), r.group.as_deref()))
            .collect();
        assert_eq!(
            labels,
            [
                ("test_failed", Some("tests/a.py")),
                ("TestB::test_moved[x]", Some("tests/b.py")),
                ("test_quiet", Some("tests/a.py")),
                ("plain-case", None),
            ]
        );
        let html = overview(&[&quiet, &moved, &plain, &failed]).expect("an overview");
        // A heading each time the file changes; links still by the whole id.
        assert_eq!(html.matches("class=\"group\"").count(), 3, "{html}");
        assert!(
            html.contains("href=\"#case-tests/a.py::test_failed\""),
            "{html}"
        );
        let first = html.find(">test_failed<").expect("the failed row");
        let next = html.find(">TestB::test_moved[x]<").expect("the moved row");
        assert!(first < next, "{html}");
    }

    #[test]
    fn one_scale_for_all_rows_is_a_checkbox_away() {
        let small = case("small", CaseStatus::Passed, Some(10 * MIB));
        let mut large = case("large", CaseStatus::Passed, Some(40 * MIB));
        large.checks.push(
            crate::results::Check::new(
                CheckKind::HostBudget,
                true,
                crate::results::CheckOutcome::Within,
            )
            .limit(Some(80 * MIB)),
        );
        let html = overview(&[&small, &large]).expect("an overview");
        assert!(
            html.contains("<input type=\"checkbox\" id=\"one-scale\">"),
            "{html}"
        );
        // Each on its own scale, the small bar is full; on the common one
        // (80 MiB, the budget), an eighth of the width.
        let full = format!("width=\"{BAR_WIDTH:.1}\"");
        let bars: Vec<&str> = html.split("class=\"bar\"").skip(1).collect();
        assert!(bars[0].contains(&full), "{html}");
        assert!(
            bars[0].contains(&format!("--one:{:.1}px", BAR_WIDTH / 8.0)),
            "{html}"
        );
        // The budget tick is at the end of its own row's scale and of the
        // common one: no shift.
        assert!(html.contains("--shift:0.0px"), "{html}");
    }
}

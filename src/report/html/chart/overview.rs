//! The run at a glance, at the top of report.html: a row per charted case
//! with its peak — GPU where the case uses a GPU, else host — as a bar
//! from 0, its baseline and its budget as marks across the bar, red for a
//! case that failed or regressed. Each row has its own scale (from 0 to
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
            Figure::Working | Figure::Allocated => comparison.and_then(|c| c.new_bytes),
        };
        Row {
            id: case.id.clone(),
            figure: match figure {
                Figure::Gpu => "GPU",
                Figure::Host => "host",
                Figure::Working => "working",
                Figure::Allocated => "allocated",
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
    let rows: Vec<Row> = cases.iter().map(|c| Row::of(c)).collect();
    let bad: Vec<&str> = rows
        .iter()
        .filter(|r| r.bad)
        .map(|r| r.id.as_str())
        .collect();
    let height = TOP * 2.0 + ROW * rows.len() as f64;
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
<li class=\"note\">each row from 0 to its own largest figure</li></ul>"
    );
    let _ = write!(
        html,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 {WIDTH} {height}\" role=\"img\" aria-label=\"{title}\" font-family=\"sans-serif\" font-size=\"{FONT}\"><title>{title}</title><desc>{}</desc>",
        escape(&description)
    );
    let _ = write!(
        html,
        "<rect class=\"plot-area\" x=\"{BAR_LEFT}\" y=\"{TOP}\" width=\"{BAR_WIDTH}\" height=\"{}\" fill=\"none\"/>",
        ROW * rows.len() as f64
    );
    for (i, row) in rows.iter().enumerate() {
        draw_row(&mut html, row, TOP + ROW * i as f64);
    }
    html.push_str("</svg></figure>");
    Some(html)
}

/// The row's name cut to its column, whole in its title.
fn fitted(name: &str) -> String {
    let room = ((NAME_RIGHT - 4.0) / text_width_at("m", FONT)) as usize;
    if name.chars().count() <= room {
        name.to_string()
    } else {
        let kept: String = name.chars().take(room.saturating_sub(1)).collect();
        format!("{kept}…")
    }
}

fn draw_row(svg: &mut String, row: &Row, y: f64) {
    let scale = [row.peak, row.baseline, row.budget]
        .into_iter()
        .flatten()
        .max()
        .unwrap_or(0)
        .max(1) as f64;
    let at = |bytes: u64| BAR_LEFT + bytes as f64 / scale * BAR_WIDTH;
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
        escape(&fitted(&row.id)),
        middle - BAR_HEIGHT / 2.0
    );
    if let Some(peak) = row.peak {
        let _ = write!(
            svg,
            "<rect class=\"bar\" x=\"{BAR_LEFT}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{BAR_HEIGHT}\" fill=\"{colour}\"/>",
            middle - BAR_HEIGHT / 2.0,
            at(peak) - BAR_LEFT
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
            "<line class=\"{class}\" x1=\"{x:.1}\" x2=\"{x:.1}\" y1=\"{:.1}\" y2=\"{:.1}\" stroke=\"{colour}\" stroke-width=\"3\"{dash}/>",
            middle - 11.0,
            middle + 11.0
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
}

//! report.html's `[[parity]]` section: each rule's verdict, and its two
//! figures as bars from 0 with the bound the rule holds the left side
//! to, a dashed mark; the figures are written beside the bars.

use std::fmt::Write as _;

use super::escape;
use crate::results::{ParityOutcome, RunResults};

const WIDTH: u32 = 420;
const LABEL: u32 = 120;
const HEIGHT: u32 = 48;

/// The section; nothing for a run without a parity rule.
pub(super) fn parity_section(page: &mut String, results: &RunResults) {
    if results.parity.is_empty() {
        return;
    }
    page.push_str("<h2>Parity</h2>\n<table class=\"parity\"><tr><th>rule</th><th>outcome</th><th>figures</th></tr>\n");
    for parity in &results.parity {
        let class = match parity.outcome {
            ParityOutcome::Held => "passed",
            ParityOutcome::Broken | ParityOutcome::Unknown => "failed",
            ParityOutcome::NotJudged => "skipped",
        };
        let _ = write!(
            page,
            "<tr class=\"{class}\"><td>{}<br><code>{}</code> on {}</td><td>{}<p class=\"meta\">{}</p></td><td>",
            escape(&parity.name),
            escape(&parity.rule),
            escape(&parity.figure),
            parity.outcome.as_str(),
            escape(&parity.message)
        );
        page.push_str(&bars(parity));
        page.push_str("</td></tr>\n");
    }
    page.push_str("</table>\n");
}

/// Both sides' figures as bars, and the bound; empty when a side has none.
fn bars(parity: &crate::results::ParityResult) -> String {
    let (Some(lhs), Some(rhs)) = (parity.lhs_value, parity.rhs_value) else {
        return String::new();
    };
    let show = |value: f64| crate::report::words::parity_figure(&parity.figure, value);
    let most = [lhs, rhs, parity.bound.unwrap_or(0.0)]
        .into_iter()
        .fold(0.0_f64, f64::max);
    let span = f64::from(WIDTH - LABEL - 90);
    let width_of = |value: f64| {
        if most <= 0.0 || value <= 0.0 {
            0.0
        } else {
            (value / most * span).round().max(1.0)
        }
    };
    let broken = parity.outcome == ParityOutcome::Broken;
    let mut svg = String::new();
    let _ = write!(
        svg,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 {WIDTH} {HEIGHT}\" width=\"{WIDTH}\" height=\"{HEIGHT}\" font-family=\"sans-serif\" font-size=\"12\" role=\"img\" aria-label=\"{}\">",
        escape(&parity.name)
    );
    for (row, (side, value, colour)) in [
        (&parity.lhs, lhs, if broken { "#b00020" } else { "#1f6fb2" }),
        (&parity.rhs, rhs, "#9aa0a6"),
    ]
    .into_iter()
    .enumerate()
    {
        let y = 4 + 22 * row as u32;
        let shown: String = side.chars().take(16).collect();
        let _ = write!(
            svg,
            "<text x=\"{}\" y=\"{}\" text-anchor=\"end\"><title>{}</title>{}</text><rect x=\"{LABEL}\" y=\"{y}\" width=\"{}\" height=\"14\" fill=\"{colour}\"/><text x=\"{}\" y=\"{}\">{}</text>",
            LABEL - 6,
            y + 12,
            escape(side),
            escape(&shown),
            width_of(value),
            f64::from(LABEL) + width_of(value) + 6.0,
            y + 12,
            escape(&show(value))
        );
    }
    if let Some(bound) = parity.bound.filter(|b| *b > 0.0) {
        let x = f64::from(LABEL) + width_of(bound);
        let _ = write!(
            svg,
            "<line x1=\"{x}\" y1=\"1\" x2=\"{x}\" y2=\"{}\" stroke=\"#b00020\" stroke-width=\"2\" stroke-dasharray=\"3 2\"><title>bound {}</title></line>",
            HEIGHT - 2,
            escape(&show(bound))
        );
    }
    svg.push_str("</svg>");
    svg
}

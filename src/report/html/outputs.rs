//! The numbers a case's logs printed (`metrics_from_output`) as
//! horizontal bars: this run's beside the locked one, each metric on its
//! own scale from 0 (tokens and tokens per second share no unit), the
//! least (or most) accepted value a dashed mark across both, and the
//! figures written beside the bars, never over them.

use std::fmt::Write as _;

use super::escape;
use crate::baseline::{Outcome, OutputComparison};
use crate::report::words::output_number;
use crate::results::CaseResult;

const WIDTH: u32 = 960;
const LABEL: u32 = 260;
const ROW: u32 = 40;
const TOP: u32 = 30;

/// The chart, as inline SVG; `None` for a case with no number from its
/// logs.
pub(super) fn outputs_chart(case: &CaseResult) -> Option<String> {
    if case.outputs.iter().all(|o| o.value.is_none()) {
        return None;
    }
    let compared: &[OutputComparison] = case
        .baseline
        .as_ref()
        .map(|b| b.outputs.as_slice())
        .unwrap_or_default();
    let locked_any = compared.iter().any(|c| c.baseline.is_some());
    let height = TOP + ROW * case.outputs.len() as u32 + 8;
    let span = f64::from(WIDTH - LABEL - 150);
    let mut svg = String::new();
    let _ = write!(
        svg,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 {WIDTH} {height}\" width=\"{WIDTH}\" height=\"{height}\" font-family=\"sans-serif\" font-size=\"13\" role=\"img\" aria-label=\"numbers from the logs\">"
    );
    let _ = write!(
        svg,
        "<rect x=\"{LABEL}\" y=\"6\" width=\"12\" height=\"12\" fill=\"#1f6fb2\"/><text x=\"{}\" y=\"16\">this run</text>",
        LABEL + 16
    );
    if locked_any {
        let _ = write!(
            svg,
            "<rect x=\"{}\" y=\"6\" width=\"12\" height=\"12\" fill=\"#9aa0a6\"/><text x=\"{}\" y=\"16\">baseline</text><line x1=\"{}\" y1=\"6\" x2=\"{}\" y2=\"18\" stroke=\"#b00020\" stroke-width=\"2\" stroke-dasharray=\"3 2\"/><text x=\"{}\" y=\"16\">accepted bound</text>",
            LABEL + 100,
            LABEL + 116,
            LABEL + 206,
            LABEL + 206,
            LABEL + 214
        );
    }
    for (i, output) in case.outputs.iter().enumerate() {
        let y = TOP + ROW * i as u32;
        let comparison = compared.iter().find(|c| c.name == output.name);
        let locked = comparison.and_then(|c| c.baseline);
        let bound = comparison.and_then(|c| c.bound);
        let regressed = comparison.is_some_and(|c| c.outcome == Outcome::Regressed);
        let _ = write!(
            svg,
            "<text x=\"{}\" y=\"{}\" text-anchor=\"end\">output.{}</text>",
            LABEL - 8,
            y + 20,
            escape(&crate::clean::line(&output.name))
        );
        // Bars from 0 on the row's own scale; a negative figure has no bar.
        let most = [output.value, locked, bound]
            .into_iter()
            .flatten()
            .fold(0.0_f64, f64::max);
        let width_of = |value: f64| {
            if most <= 0.0 || value <= 0.0 {
                0.0
            } else {
                (value / most * span).round().max(1.0)
            }
        };
        let bar_y = if locked.is_some() { y + 3 } else { y + 10 };
        match output.value {
            Some(value) => {
                let colour = if regressed { "#b00020" } else { "#1f6fb2" };
                let _ = write!(
                    svg,
                    "<rect x=\"{LABEL}\" y=\"{bar_y}\" width=\"{}\" height=\"14\" fill=\"{colour}\"/><text x=\"{}\" y=\"{}\">{}</text>",
                    width_of(value),
                    f64::from(LABEL) + width_of(value) + 6.0,
                    bar_y + 12,
                    escape(&output_number(value))
                );
            }
            None => {
                let _ = write!(
                    svg,
                    "<text x=\"{}\" y=\"{}\" fill=\"#b00020\">not printed</text>",
                    LABEL + 4,
                    bar_y + 12
                );
            }
        }
        if let Some(locked) = locked {
            let _ = write!(
                svg,
                "<rect x=\"{LABEL}\" y=\"{}\" width=\"{}\" height=\"14\" fill=\"#9aa0a6\"/><text x=\"{}\" y=\"{}\" fill=\"#555\">{}</text>",
                y + 19,
                width_of(locked),
                f64::from(LABEL) + width_of(locked) + 6.0,
                y + 31,
                escape(&output_number(locked))
            );
        }
        if let Some(bound) = bound.filter(|b| *b > 0.0) {
            let x = f64::from(LABEL) + width_of(bound);
            let _ = write!(
                svg,
                "<line x1=\"{x}\" y1=\"{}\" x2=\"{x}\" y2=\"{}\" stroke=\"#b00020\" stroke-width=\"2\" stroke-dasharray=\"3 2\"><title>{} {}</title></line>",
                y + 1,
                y + 35,
                match output.better {
                    crate::suite::Better::Higher => "least accepted",
                    crate::suite::Better::Lower => "most accepted",
                },
                escape(&output_number(bound))
            );
        }
    }
    svg.push_str("</svg>");
    Some(svg)
}

//! The allocation sites of a case as horizontal bars: each site's bytes
//! live at the peak in this run, and in the locked run beside it, so the
//! site that grew is seen at its true size (the axis starts at 0).

use std::fmt::Write as _;

use super::escape;
use crate::results::CaseResult;
use crate::snapshot::CHARTED_SITES;
use crate::units::Bytes;

const WIDTH: u32 = 960;
const LABEL: u32 = 420;
const ROW: u32 = 34;
const TOP: u32 = 30;

/// The chart, as inline SVG; `None` for a case that left no snapshot.
pub(super) fn sites_chart(case: &CaseResult) -> Option<String> {
    let sites = case.allocation_sites.as_ref()?;
    if sites.sites.is_empty() {
        return None;
    }
    let locked = case
        .baseline
        .as_ref()
        .map(|b| b.allocation_sites.as_slice())
        .unwrap_or_default();
    // This run's largest sites, then locked ones it no longer has.
    let mut rows: Vec<(&str, u64, Option<u64>)> = sites
        .sites
        .iter()
        .take(CHARTED_SITES)
        .map(|s| {
            let before = (!locked.is_empty()).then(|| {
                locked
                    .iter()
                    .find(|l| l.site == s.site)
                    .map_or(0, |l| l.bytes)
            });
            (s.site.as_str(), s.bytes, before)
        })
        .collect();
    for gone in locked
        .iter()
        .filter(|l| !sites.sites.iter().any(|s| s.site == l.site))
    {
        if rows.len() >= CHARTED_SITES {
            break;
        }
        rows.push((gone.site.as_str(), 0, Some(gone.bytes)));
    }
    let most = rows
        .iter()
        .map(|(_, now, before)| (*now).max(before.unwrap_or(0)))
        .max()
        .unwrap_or(0)
        .max(1);
    let height = TOP + ROW * rows.len() as u32 + 8;
    let span = f64::from(WIDTH - LABEL - 110);
    let width_of = |bytes: u64| {
        (bytes as f64 / most as f64 * span)
            .round()
            .max(if bytes > 0 { 1.0 } else { 0.0 })
    };
    let mut svg = String::new();
    let _ = write!(
        svg,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 {WIDTH} {height}\" width=\"{WIDTH}\" height=\"{height}\" font-family=\"sans-serif\" font-size=\"13\" role=\"img\" aria-label=\"allocation sites\">"
    );
    // The legend, above the bars.
    let _ = write!(
        svg,
        "<rect x=\"{LABEL}\" y=\"6\" width=\"12\" height=\"12\" fill=\"#1f6fb2\"/><text x=\"{}\" y=\"16\">this run</text>",
        LABEL + 16
    );
    if !locked.is_empty() {
        let _ = write!(
            svg,
            "<rect x=\"{}\" y=\"6\" width=\"12\" height=\"12\" fill=\"#9aa0a6\"/><text x=\"{}\" y=\"16\">baseline</text>",
            LABEL + 100,
            LABEL + 116
        );
    }
    if rows
        .iter()
        .any(|(_, now, before)| before.is_some_and(|b| *now > b))
    {
        let _ = write!(
            svg,
            "<rect x=\"{}\" y=\"6\" width=\"12\" height=\"12\" fill=\"#b00020\"/><text x=\"{}\" y=\"16\">this run, grown</text>",
            LABEL + 200,
            LABEL + 216
        );
    }
    for (i, (site, now, before)) in rows.iter().enumerate() {
        let y = TOP + ROW * i as u32;
        // A frame name is one line: its newline shown as `\n` too.
        let site = crate::clean::line(site);
        let shown: String = if site.chars().count() > 58 {
            format!("{}…", site.chars().take(57).collect::<String>())
        } else {
            site.to_string()
        };
        let _ = write!(
            svg,
            "<text x=\"{}\" y=\"{}\" text-anchor=\"end\"><title>{}</title>{}</text>",
            LABEL - 8,
            y + 17,
            escape(&site),
            escape(&shown)
        );
        let grew = before.is_some_and(|b| *now > b);
        let colour = if grew { "#b00020" } else { "#1f6fb2" };
        let bar_y = if before.is_some() { y + 2 } else { y + 8 };
        let _ = write!(
            svg,
            "<rect x=\"{LABEL}\" y=\"{bar_y}\" width=\"{}\" height=\"13\" fill=\"{colour}\"/><text x=\"{}\" y=\"{}\">{}</text>",
            width_of(*now),
            f64::from(LABEL) + width_of(*now) + 6.0,
            bar_y + 11,
            Bytes(*now)
        );
        if let Some(before) = before {
            let _ = write!(
                svg,
                "<rect x=\"{LABEL}\" y=\"{}\" width=\"{}\" height=\"13\" fill=\"#9aa0a6\"/><text x=\"{}\" y=\"{}\" fill=\"#555\">{}</text>",
                y + 16,
                width_of(*before),
                f64::from(LABEL) + width_of(*before) + 6.0,
                y + 27,
                Bytes(*before)
            );
        }
    }
    svg.push_str("</svg>");
    Some(svg)
}

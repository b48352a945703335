//! Where a case's GPU memory was at its GPU peak, as one bar from 0:
//! what its allocator had allocated, what it reserved and did not use,
//! and what was outside it (the CUDA context, NCCL, CUDA graphs), each a
//! segment named in the legend above, its size written beside the bar.

use std::fmt::Write as _;

use super::escape;
use crate::results::CaseResult;
use crate::units::Bytes;

const WIDTH: u32 = 960;
const BAR: u32 = 760;

/// The chart, as inline SVG; `None` for a case whose probe's figures
/// were never set against NVML's.
pub(super) fn outside_chart(case: &CaseResult) -> Option<String> {
    let at = case.outside_allocator.as_ref()?.case;
    let unused = at.fragmentation_bytes;
    let allocated = unused.map(|u| at.reserved_bytes.saturating_sub(u));
    let segments: Vec<(&str, &str, u64)> = match (allocated, unused) {
        (Some(allocated), Some(unused)) => vec![
            ("allocated", "#1f6fb2", allocated),
            ("reserved, not allocated", "#8ab4d8", unused),
            ("outside the allocator", "#e8710a", at.bytes),
        ],
        _ => vec![
            ("reserved by the allocator", "#1f6fb2", at.reserved_bytes),
            ("outside the allocator", "#e8710a", at.bytes),
        ],
    };
    let total: u64 = segments.iter().map(|(_, _, b)| *b).sum::<u64>().max(1);
    let mut svg = String::new();
    let _ = write!(
        svg,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 {WIDTH} 64\" width=\"{WIDTH}\" height=\"64\" font-family=\"sans-serif\" font-size=\"13\" role=\"img\" aria-label=\"GPU memory at its peak, inside and outside the allocator\">"
    );
    let mut legend_x = 0;
    for (name, colour, bytes) in &segments {
        let label = format!("{name} {}", Bytes(*bytes));
        let _ = write!(
            svg,
            "<rect x=\"{legend_x}\" y=\"4\" width=\"12\" height=\"12\" fill=\"{colour}\"/><text x=\"{}\" y=\"14\">{}</text>",
            legend_x + 16,
            escape(&label)
        );
        legend_x += 16 + 8 * label.chars().count() as u32 + 20;
    }
    let mut x = 0.0;
    for (name, colour, bytes) in &segments {
        let width = *bytes as f64 / total as f64 * f64::from(BAR);
        let _ = write!(
            svg,
            "<rect x=\"{x:.1}\" y=\"28\" width=\"{width:.1}\" height=\"22\" fill=\"{colour}\"><title>{} {}</title></rect>",
            escape(name),
            Bytes(*bytes)
        );
        x += width;
    }
    let _ = write!(
        svg,
        "<text x=\"{}\" y=\"44\">NVML {}</text></svg>",
        BAR + 8,
        Bytes(at.gpu_bytes)
    );
    Some(svg)
}

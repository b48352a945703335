//! Where a chart's labels go: the column right of the plot, each label
//! as near the line it names as the others allow (joined to it by a
//! leader when moved), and the rows above the plot for the labels of
//! vertical lines. Text is never measured by a browser here, so its width
//! is estimated from the font size, generously.

use std::fmt::Write as _;

use crate::report::html::escape;

/// Text size, and the height of a label's line, in the SVG's pixels.
pub(super) const FONT: f64 = 16.0;
pub(super) const LINE: f64 = 20.0;

/// How wide `text` is drawn, near enough to keep labels apart: sans-serif
/// glyphs average a little over half the font size.
pub(super) fn text_width(text: &str) -> f64 {
    text_width_at(text, FONT)
}

/// The same at another font size.
pub(super) fn text_width_at(text: &str, font: f64) -> f64 {
    text.chars().count() as f64 * font * 0.58
}

/// A label of the right column, and the height it would like.
pub(super) struct SideLabel {
    pub(super) wanted: f64,
    pub(super) text: String,
    pub(super) about: String,
    pub(super) colour: &'static str,
}

/// The right column's labels, each as near its line as the others allow,
/// joined to it by a short leader when moved.
pub(super) fn draw_side_labels(
    svg: &mut String,
    right: f64,
    (low, high): (f64, f64),
    mut labels: Vec<SideLabel>,
) {
    labels.sort_by(|a, b| a.wanted.total_cmp(&b.wanted));
    let wanted: Vec<f64> = labels.iter().map(|l| l.wanted).collect();
    let placed = spread(&wanted, LINE, low, high);
    for (label, at) in labels.iter().zip(placed) {
        let text_x = right + 18.0;
        let _ = write!(
            svg,
            "<polyline points=\"{:.1},{:.1} {:.1},{:.1} {:.1},{:.1}\" fill=\"none\" stroke=\"{}\" stroke-width=\"1\"/><text class=\"ref-label\" x=\"{text_x:.1}\" y=\"{:.1}\" fill=\"{}\"><title>{}</title>{}</text>",
            right,
            label.wanted,
            right + 8.0,
            at,
            right + 14.0,
            at,
            label.colour,
            at + FONT * 0.35,
            label.colour,
            escape(&label.about),
            escape(&label.text)
        );
    }
}

/// Positions for labels that want `wanted` (sorted), at least `gap`
/// apart, within `low..=high` where they fit: each moves as little as
/// the others let it.
pub(super) fn spread(wanted: &[f64], gap: f64, low: f64, high: f64) -> Vec<f64> {
    let mut placed: Vec<f64> = Vec::with_capacity(wanted.len());
    for &y in wanted {
        let floor = placed.last().map_or(low, |last| last + gap);
        placed.push(y.max(floor));
    }
    // Pushed past the bottom: move the last ones back up.
    let mut ceiling = high;
    for y in placed.iter_mut().rev() {
        *y = y.min(ceiling);
        ceiling = *y - gap;
    }
    placed
}

/// For labels centred at `x` of width `w`, the row each takes (0: the
/// nearest the plot) so that no two in a row overlap.
pub(super) fn stack_in_rows(labels: &[(f64, f64)]) -> Vec<usize> {
    let mut rows: Vec<Vec<(f64, f64)>> = Vec::new();
    labels
        .iter()
        .map(|&(centre, width)| {
            let span = (centre - width / 2.0 - 8.0, centre + width / 2.0 + 8.0);
            let free =
                |row: &Vec<(f64, f64)>| row.iter().all(|(a, b)| span.1 <= *a || span.0 >= *b);
            let row = rows.iter().position(free).unwrap_or(rows.len());
            if row == rows.len() {
                rows.push(Vec::new());
            }
            rows[row].push(span);
            row
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_keep_their_place_when_they_have_room() {
        assert_eq!(
            spread(&[10.0, 50.0, 90.0], 19.0, 0.0, 200.0),
            [10.0, 50.0, 90.0]
        );
    }

    #[test]
    fn close_labels_are_pushed_apart_and_kept_in_bounds() {
        let placed = spread(&[100.0, 101.0, 102.0], 19.0, 0.0, 200.0);
        assert_eq!(placed, [100.0, 119.0, 138.0]);
        let placed = spread(&[195.0, 196.0, 197.0], 19.0, 0.0, 200.0);
        assert_eq!(placed, [162.0, 181.0, 200.0]);
        assert!(placed.windows(2).all(|w| w[1] - w[0] >= 19.0));
    }

    #[test]
    fn moment_labels_that_would_overlap_take_another_row() {
        let rows = stack_in_rows(&[(100.0, 80.0), (150.0, 80.0), (400.0, 80.0), (120.0, 20.0)]);
        assert_eq!(rows, [0, 1, 0, 2]);
    }
}

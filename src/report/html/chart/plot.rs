//! How every x–y chart of report.html is drawn: [`Plot`] holds what to
//! draw in the figures' own values (bytes, seconds, a count) and
//! [`Plot::render`] writes it as an HTML legend above an inline SVG.
//!
//! Nothing is ever drawn over the data but the data itself: the legend is
//! HTML above the plot (it wraps with the page's width), a horizontal line
//! (a budget, a baseline, a peak whose moment is unknown) and a marked
//! point are named in a column to the right of the plot, and a vertical
//! line (the end, a capacity) above it, each label moved only along its
//! margin so that labels never overlap each other. The SVG is written by
//! hand rather than through a plotting crate: its labels, classes and
//! accessible names are what make the chart readable and testable, and no
//! crate placed them outside the plot.

use std::fmt::Write as _;

use super::axis::{self, Ticks};
use super::labels::{FONT, LINE, SideLabel, draw_side_labels, stack_in_rows, text_width};
use crate::report::html::escape;

/// The SVG's own width; it is scaled to the page's.
pub(super) const WIDTH: f64 = 1100.0;
const PLOT_HEIGHT: f64 = 280.0;
const LEFT: f64 = 100.0;
const BOTTOM: f64 = 58.0;

/// The pattern of a line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Dash {
    Solid,
    Dashed,
    /// Shorter dashes: a line drawn over another of `Dashed` shows both.
    Fine,
    Dotted,
}

impl Dash {
    fn svg(self) -> &'static str {
        match self {
            Dash::Solid => "",
            Dash::Dashed => " stroke-dasharray=\"9 6\"",
            Dash::Fine => " stroke-dasharray=\"3 4\"",
            Dash::Dotted => " stroke-dasharray=\"2 4\"",
        }
    }

    fn css(self) -> &'static str {
        match self {
            Dash::Solid => "solid",
            Dash::Dashed | Dash::Fine => "dashed",
            Dash::Dotted => "dotted",
        }
    }
}

/// How a series is drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Shape {
    Line,
    /// Joined, each point marked.
    LineAndDots,
    Dots,
    /// Open circles: figures of another run (a locked one).
    Rings,
}

/// One series of points, `(x, y)`, in time (or value) order.
#[derive(Debug, Clone)]
pub(super) struct Series {
    pub(super) label: String,
    pub(super) points: Vec<(f64, f64)>,
    pub(super) colour: &'static str,
    pub(super) width: f64,
    pub(super) dash: Dash,
    pub(super) shape: Shape,
}

impl Series {
    pub(super) fn line(
        label: impl Into<String>,
        points: Vec<(f64, f64)>,
        colour: &'static str,
        width: f64,
    ) -> Self {
        Series {
            label: label.into(),
            points,
            colour,
            width,
            dash: Dash::Solid,
            shape: Shape::Line,
        }
    }

    pub(super) fn shaped(mut self, shape: Shape) -> Self {
        self.shape = shape;
        self
    }

    pub(super) fn dashed(mut self, dash: Dash) -> Self {
        self.dash = dash;
        self
    }
}

/// A horizontal line across the plot at a figure, named at its right end;
/// `about` says more where a pointer rests on it.
#[derive(Debug, Clone)]
pub(super) struct Level {
    pub(super) label: String,
    pub(super) about: String,
    pub(super) y: f64,
    pub(super) colour: &'static str,
    pub(super) dash: Dash,
}

/// A point marked on the plot (a peak at its moment), named to the right
/// with a dotted guide from the point.
#[derive(Debug, Clone)]
pub(super) struct Mark {
    pub(super) label: String,
    pub(super) x: f64,
    pub(super) y: f64,
    pub(super) colour: &'static str,
}

/// A vertical line at a moment or a value, named above the plot.
#[derive(Debug, Clone)]
pub(super) struct Moment {
    pub(super) label: String,
    pub(super) x: f64,
    pub(super) colour: &'static str,
    pub(super) dash: Dash,
}

/// A shaded span of x, in the legend.
#[derive(Debug, Clone)]
pub(super) struct Band {
    pub(super) label: String,
    pub(super) from: f64,
    pub(super) to: f64,
    pub(super) fill: &'static str,
}

/// What the x axis counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum XKind {
    Seconds,
    Count,
}

/// A chart to draw: y in bytes from 0, x from 0 to at least `x_end`.
#[derive(Debug, Clone)]
pub(super) struct Plot {
    /// Its accessible name (`Memory over time of train-gpu`).
    pub(super) title: String,
    /// What it shows in a sentence or two, for readers that cannot see it.
    pub(super) description: String,
    pub(super) x_title: String,
    pub(super) x_kind: XKind,
    pub(super) x_end: f64,
    pub(super) series: Vec<Series>,
    pub(super) levels: Vec<Level>,
    pub(super) marks: Vec<Mark>,
    pub(super) moments: Vec<Moment>,
    pub(super) bands: Vec<Band>,
}

impl Plot {
    pub(super) fn new(title: String, x_title: &str, x_kind: XKind) -> Self {
        Plot {
            title,
            description: String::new(),
            x_title: x_title.to_string(),
            x_kind,
            x_end: 0.0,
            series: Vec::new(),
            levels: Vec::new(),
            marks: Vec::new(),
            moments: Vec::new(),
            bands: Vec::new(),
        }
    }

    /// The highest figure drawn: a point, a level or a mark.
    pub(super) fn highest_y(&self) -> f64 {
        self.series
            .iter()
            .flat_map(|s| s.points.iter().map(|p| p.1))
            .chain(self.levels.iter().map(|l| l.y))
            .chain(self.marks.iter().map(|m| m.y))
            .filter(|y| y.is_finite())
            .fold(0.0, f64::max)
    }

    /// The y axis: from 0 past every figure drawn.
    pub(super) fn y_ticks(&self) -> Ticks {
        axis::byte_ticks(self.highest_y())
    }

    /// The x axis: from 0 past every point, line and band.
    pub(super) fn x_ticks(&self) -> Ticks {
        let highest = self
            .series
            .iter()
            .flat_map(|s| s.points.iter().map(|p| p.0))
            .chain(self.marks.iter().map(|m| m.x))
            .chain(self.moments.iter().map(|m| m.x))
            .chain(self.bands.iter().flat_map(|b| [b.from, b.to]))
            .filter(|x| x.is_finite())
            .fold(self.x_end, f64::max);
        match self.x_kind {
            XKind::Seconds => axis::time_ticks(highest),
            XKind::Count => axis::count_ticks(highest),
        }
    }

    /// The legend and the chart, as HTML.
    pub(super) fn render(&self) -> String {
        let x = self.x_ticks();
        let y = self.y_ticks();
        let mut right_labels: Vec<SideLabel> = Vec::new();
        // The right column is as wide as its longest label.
        let right_width = self
            .levels
            .iter()
            .map(|l| l.label.as_str())
            .chain(self.marks.iter().map(|m| m.label.as_str()))
            .map(text_width)
            .fold(0.0, f64::max);
        let right = if right_width > 0.0 {
            (right_width + 30.0).clamp(140.0, 480.0)
        } else {
            28.0
        };
        let plot_width = WIDTH - LEFT - right;
        let moment_rows = stack_in_rows(
            &self
                .moments
                .iter()
                .map(|m| {
                    let centre = LEFT + m.x / x.top * plot_width;
                    let half = text_width(&m.label) / 2.0;
                    centre.clamp(half + 4.0, WIDTH - half - 4.0)
                })
                .zip(self.moments.iter().map(|m| text_width(&m.label)))
                .collect::<Vec<_>>(),
        );
        let rows = moment_rows.iter().copied().max().map_or(0, |r| r + 1);
        let top = 14.0 + rows as f64 * LINE;
        let frame = Frame {
            left: LEFT,
            top,
            width: plot_width,
            height: PLOT_HEIGHT,
            x_top: x.top,
            y_top: y.top,
        };
        let height = top + PLOT_HEIGHT + BOTTOM;

        let mut svg = String::new();
        let _ = write!(
            svg,
            "<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 {WIDTH} {height}\" role=\"img\" aria-label=\"{}\" font-family=\"sans-serif\" font-size=\"{FONT}\"><title>{}</title><desc>{}</desc>",
            escape(&self.title),
            escape(&self.title),
            escape(&self.description)
        );
        let _ = write!(
            svg,
            "<rect class=\"plot-area\" x=\"{LEFT}\" y=\"{top}\" width=\"{plot_width:.1}\" height=\"{PLOT_HEIGHT}\" fill=\"#fff\" stroke=\"#bbb\"/>"
        );
        for band in &self.bands {
            let (from, to) = (frame.x(band.from), frame.x(band.to));
            let _ = write!(
                svg,
                "<rect class=\"band\" x=\"{:.1}\" y=\"{top}\" width=\"{:.1}\" height=\"{PLOT_HEIGHT}\" fill=\"{}\" opacity=\"0.18\"><title>{}</title></rect>",
                from.min(to),
                (to - from).abs(),
                band.fill,
                escape(&band.label)
            );
        }
        frame.axes(&mut svg, &x, &y, &self.x_title);
        for series in &self.series {
            draw_series(&mut svg, &frame, series);
        }
        for level in &self.levels {
            let at = frame.y(level.y);
            let _ = write!(
                svg,
                "<line class=\"level\" x1=\"{LEFT}\" x2=\"{:.1}\" y1=\"{at:.1}\" y2=\"{at:.1}\" stroke=\"{}\" stroke-width=\"2\"{}><title>{}</title></line>",
                frame.right(),
                level.colour,
                level.dash.svg(),
                escape(&level.about)
            );
            right_labels.push(SideLabel {
                wanted: at,
                text: level.label.clone(),
                about: level.about.clone(),
                colour: level.colour,
            });
        }
        for mark in &self.marks {
            let (px, py) = (frame.x(mark.x), frame.y(mark.y));
            let _ = write!(
                svg,
                "<line class=\"guide\" x1=\"{px:.1}\" x2=\"{:.1}\" y1=\"{py:.1}\" y2=\"{py:.1}\" stroke=\"{}\" stroke-width=\"1\" stroke-dasharray=\"2 4\"/><circle class=\"mark\" cx=\"{px:.1}\" cy=\"{py:.1}\" r=\"7\" fill=\"{}\" stroke=\"#fff\" stroke-width=\"2\"><title>{}</title></circle>",
                frame.right(),
                mark.colour,
                mark.colour,
                escape(&mark.label)
            );
            right_labels.push(SideLabel {
                wanted: py,
                text: mark.label.clone(),
                about: mark.label.clone(),
                colour: mark.colour,
            });
        }
        for (moment, row) in self.moments.iter().zip(&moment_rows) {
            let at = frame.x(moment.x);
            let half = text_width(&moment.label) / 2.0;
            let centre = at.clamp(half + 4.0, WIDTH - half - 4.0);
            let label_y = top - 6.0 - *row as f64 * LINE;
            let _ = write!(
                svg,
                "<line class=\"moment\" x1=\"{at:.1}\" x2=\"{at:.1}\" y1=\"{top}\" y2=\"{:.1}\" stroke=\"{}\" stroke-width=\"2\"{}/><text class=\"moment-label\" x=\"{centre:.1}\" y=\"{label_y:.1}\" text-anchor=\"middle\" fill=\"{}\">{}</text>",
                top + PLOT_HEIGHT,
                moment.colour,
                moment.dash.svg(),
                moment.colour,
                escape(&moment.label)
            );
        }
        // Within the plot's height: below it, the x axis's labels.
        draw_side_labels(
            &mut svg,
            frame.right(),
            (frame.top + FONT * 0.4, frame.bottom() - 2.0),
            right_labels,
        );
        svg.push_str("</svg>");

        let mut html = String::from("<figure class=\"chart\">");
        html.push_str(&self.legend());
        html.push_str(&svg);
        html.push_str("</figure>");
        html
    }

    /// The series and bands, each with a sample of its line.
    fn legend(&self) -> String {
        let mut legend = String::from("<ul class=\"legend\">");
        for series in &self.series {
            let swatch = match series.shape {
                Shape::Dots => format!(
                    "<span class=\"swatch dot\" style=\"background:{}\"></span>",
                    series.colour
                ),
                Shape::Rings => format!(
                    "<span class=\"swatch dot\" style=\"border:2px solid {}\"></span>",
                    series.colour
                ),
                Shape::Line | Shape::LineAndDots => format!(
                    "<span class=\"swatch\" style=\"border-top:{}px {} {}\"></span>",
                    series.width.clamp(2.0, 4.0),
                    series.dash.css(),
                    series.colour
                ),
            };
            let _ = write!(legend, "<li>{swatch}{}</li>", escape(&series.label));
        }
        for band in &self.bands {
            let _ = write!(
                legend,
                "<li><span class=\"swatch box\" style=\"background:{}\"></span>{}</li>",
                band.fill,
                escape(&band.label)
            );
        }
        legend.push_str("</ul>");
        legend
    }
}

/// Where the plot area is, and its scale.
struct Frame {
    left: f64,
    top: f64,
    width: f64,
    height: f64,
    x_top: f64,
    y_top: f64,
}

impl Frame {
    fn x(&self, value: f64) -> f64 {
        let share = if self.x_top > 0.0 {
            value / self.x_top
        } else {
            0.0
        };
        self.left + share.clamp(0.0, 1.0) * self.width
    }

    fn y(&self, value: f64) -> f64 {
        let share = if self.y_top > 0.0 {
            value / self.y_top
        } else {
            0.0
        };
        self.top + self.height - share.clamp(0.0, 1.0) * self.height
    }

    fn right(&self) -> f64 {
        self.left + self.width
    }

    fn bottom(&self) -> f64 {
        self.top + self.height
    }

    /// Grid lines at the y ticks, tick labels, and the axes' titles.
    fn axes(&self, svg: &mut String, x: &Ticks, y: &Ticks, x_title: &str) {
        for (value, label) in &y.marks {
            let at = self.y(*value);
            let _ = write!(
                svg,
                "<line x1=\"{:.1}\" x2=\"{:.1}\" y1=\"{at:.1}\" y2=\"{at:.1}\" stroke=\"#e4e4e4\"/><text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\" fill=\"#444\">{}</text>",
                self.left,
                self.right(),
                self.left - 8.0,
                at + FONT * 0.35,
                escape(label)
            );
        }
        for (i, (value, label)) in x.marks.iter().enumerate() {
            let at = self.x(*value);
            // The last label ends at the plot's edge, clear of the labels
            // to its right.
            let anchor = if i + 1 == x.marks.len() {
                "end"
            } else {
                "middle"
            };
            let _ = write!(
                svg,
                "<line x1=\"{at:.1}\" x2=\"{at:.1}\" y1=\"{:.1}\" y2=\"{:.1}\" stroke=\"#888\"/><text x=\"{at:.1}\" y=\"{:.1}\" text-anchor=\"{anchor}\" fill=\"#444\">{}</text>",
                self.bottom(),
                self.bottom() + 5.0,
                self.bottom() + 21.0,
                escape(label)
            );
        }
        let _ = write!(
            svg,
            "<line x1=\"{:.1}\" x2=\"{:.1}\" y1=\"{:.1}\" y2=\"{:.1}\" stroke=\"#444\"/><text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\" fill=\"#222\">{}</text>",
            self.left,
            self.right(),
            self.bottom(),
            self.bottom(),
            self.left + self.width / 2.0,
            self.bottom() + 44.0,
            escape(x_title)
        );
    }
}

fn draw_series(svg: &mut String, frame: &Frame, series: &Series) {
    if series.points.is_empty() {
        return;
    }
    let _ = write!(
        svg,
        "<g class=\"series\"><title>{}</title>",
        escape(&series.label)
    );
    if matches!(series.shape, Shape::Line | Shape::LineAndDots) {
        let mut path = String::new();
        for (i, (x, y)) in series.points.iter().enumerate() {
            let _ = write!(
                path,
                "{}{:.1},{:.1}",
                if i == 0 { "M" } else { "L" },
                frame.x(*x),
                frame.y(*y)
            );
        }
        let _ = write!(
            svg,
            "<path d=\"{path}\" fill=\"none\" stroke=\"{}\" stroke-width=\"{}\" stroke-linejoin=\"round\"{}/>",
            series.colour,
            series.width,
            series.dash.svg()
        );
    }
    let dot = match series.shape {
        Shape::Line => None,
        Shape::LineAndDots => Some((4.0, series.colour, "none")),
        Shape::Dots => Some((6.0, series.colour, "none")),
        Shape::Rings => Some((7.0, "#fff", series.colour)),
    };
    if let Some((radius, fill, stroke)) = dot {
        for (x, y) in &series.points {
            let _ = write!(
                svg,
                "<circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"{radius}\" fill=\"{fill}\" stroke=\"{stroke}\" stroke-width=\"2.5\"/>",
                frame.x(*x),
                frame.y(*y)
            );
        }
    }
    svg.push_str("</g>");
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plot_with(series: Vec<Series>) -> Plot {
        let mut plot = Plot::new("t".into(), "seconds", XKind::Seconds);
        plot.series = series;
        plot
    }

    #[test]
    fn the_y_axis_starts_at_zero_and_reaches_past_every_line() {
        let mut plot = plot_with(vec![Series::line(
            "flat",
            vec![(0.0, 72.0 * 1048576.0), (2.0, 72.0 * 1048576.0)],
            "#000",
            2.0,
        )]);
        assert_eq!(plot.y_ticks().marks[0].0, 0.0);
        plot.levels.push(Level {
            label: "budget 100 MiB".into(),
            about: String::new(),
            y: 100.0 * 1048576.0,
            colour: "#c00",
            dash: Dash::Dashed,
        });
        assert!(plot.y_ticks().top >= 100.0 * 1048576.0);
    }

    /// The longest label a chart writes stays inside the SVG, which cuts
    /// what is drawn past its edge.
    #[test]
    fn the_longest_side_label_fits_in_the_chart() {
        let mut plot = plot_with(vec![Series::line(
            "gpu (case)",
            vec![(0.0, 1.0), (1.0, 2.0)],
            "#000",
            2.0,
        )]);
        let label = "gpu peak 1023.9 GiB (allocator's peak_reserved)";
        plot.levels.push(Level {
            label: label.into(),
            about: String::new(),
            y: 2.0,
            colour: "#000",
            dash: Dash::Dashed,
        });
        let html = plot.render();
        let at = html.find("class=\"ref-label\" x=\"").expect("a side label") + 22;
        let x: f64 = html[at..at + html[at..].find('"').expect("x")]
            .parse()
            .expect("a number");
        assert!(
            x + text_width(label) <= WIDTH,
            "{x} + {} > {WIDTH}",
            text_width(label)
        );
    }

    #[test]
    fn the_legend_is_outside_the_svg() {
        let html = plot_with(vec![Series::line(
            "host RSS",
            vec![(0.0, 1.0), (1.0, 2.0)],
            "#000",
            2.0,
        )])
        .render();
        let legend = html.find("<ul class=\"legend\">").expect("a legend");
        let svg = html.find("<svg").expect("an svg");
        assert!(legend < svg, "the legend comes before the chart: {html}");
        assert!(html[legend..svg].contains("host RSS"));
        assert!(!html[svg..].contains("class=\"legend\""));
    }
}

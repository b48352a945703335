//! The words of the run history: the line a run prints when it is
//! recorded, and `oomgate history show`'s table, a sparkline per case.

use std::fmt::Write as _;

use crate::history::entry::names;
use crate::history::trend::{Steadiness, steps};
use crate::history::{Recorded, RunEntry, Series};
use crate::units::Bytes;

/// The eight heights of a sparkline, lowest first.
const BARS: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];
/// A run without the figure.
const GAP: char = '·';

/// `history: recorded run 6f1c… (12 cases, commit 3f2a9c1 on main) in sqlite:h.sqlite`.
pub fn recorded_line(location: &str, entry: &RunEntry, recorded: Recorded) -> String {
    let short = entry.run_id.get(..8).unwrap_or(&entry.run_id);
    let mut from = String::new();
    match (&entry.commit, &entry.branch) {
        (Some(commit), Some(branch)) => {
            let _ = write!(from, ", commit {} on {branch}", short_commit(commit));
        }
        (Some(commit), None) => {
            let _ = write!(from, ", commit {}", short_commit(commit));
        }
        (None, Some(branch)) => {
            let _ = write!(from, ", on {branch}");
        }
        (None, None) => {}
    }
    match recorded {
        Recorded::New => format!(
            "history: recorded run {short} ({} case{}{from}) in {location}",
            entry.cases.len(),
            if entry.cases.len() == 1 { "" } else { "s" }
        ),
        Recorded::Already => {
            format!("history: run {short} was already recorded in {location}; nothing changed")
        }
    }
}

/// `history accept`'s line for one figure.
pub fn accepted_line(location: &str, a: &crate::history::Acceptance) -> String {
    let on = a
        .branch
        .as_deref()
        .map(|b| format!(" on {b}"))
        .unwrap_or_default();
    format!(
        "{location}: accepted {} {} = {} as its ratchet{on} (by {}: \"{}\")",
        a.case_id,
        a.figure,
        figure_value(&a.figure, a.level),
        a.accepted_by,
        a.reason
    )
}

/// `history add`'s line.
pub fn added_line(location: &str, new: usize, already: usize) -> String {
    let mut line = format!("{location}: recorded {new} run(s)");
    if already > 0 {
        let _ = write!(line, "; {already} already there, left as they were");
    }
    line
}

fn short_commit(commit: &str) -> &str {
    commit.get(..10).unwrap_or(commit)
}

/// A figure's value as a reader reads it: a size for `…_bytes`, else
/// the number.
pub fn figure_value(figure: &str, value: f64) -> String {
    if figure.ends_with("_bytes") && value.is_finite() && value >= 0.0 {
        Bytes(value.round() as u64).to_string()
    } else if value.fract() == 0.0 && value.abs() < 1e15 {
        format!("{}", value as i64)
    } else {
        format!("{value:.3}")
    }
}

/// The least span a sparkline's bars stand for, as a share of the
/// largest value: noise of a few tenths of a percent draws flat, not as a
/// full-height swing.
const LEAST_SPAN: f64 = 0.05;

/// The most columns a sparkline takes: more runs are drawn in buckets.
const SPARK_WIDTH: usize = 60;

/// `values` in at most `width` buckets of consecutive runs, each the
/// largest of its bucket (a memory figure's worst), `None` where a bucket
/// has none.
fn bucketed(values: &[Option<f64>], width: usize) -> Vec<Option<f64>> {
    if values.len() <= width {
        return values.to_vec();
    }
    (0..width)
        .map(|bucket| {
            let from = bucket * values.len() / width;
            let to = ((bucket + 1) * values.len() / width).max(from + 1);
            values[from..to]
                .iter()
                .flatten()
                .copied()
                .fold(None, |most: Option<f64>, v| {
                    Some(most.map_or(v, |m| m.max(v)))
                })
        })
        .collect()
}

/// A sparkline of `values` (`None`: a run without the figure), from their
/// smallest upward over their range, or over `LEAST_SPAN` (5%) of the
/// largest when the range is smaller.
pub fn sparkline(values: &[Option<f64>]) -> String {
    let seen: Vec<f64> = values.iter().flatten().copied().collect();
    let low = seen.iter().copied().fold(f64::INFINITY, f64::min);
    let high = seen.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let span = (high - low).max(high.abs() * LEAST_SPAN);
    values
        .iter()
        .map(|value| match value {
            None => GAP,
            Some(_) if span <= 0.0 || !span.is_finite() => BARS[0],
            Some(v) => {
                let at = ((v - low) / span * (BARS.len() - 1) as f64).round();
                BARS[(at as usize).min(BARS.len() - 1)]
            }
        })
        .collect()
}

/// `oomgate history show`: a header, then a row per case and testbed: the
/// figure (`asked`, else the GPU peak where the case has one, else the
/// host peak), how many runs had it, its first and last value, the
/// change, its steps up and down (`history::trend`), and a sparkline over
/// the runs (oldest on the left). `series`
/// holds [`names::GPU_PEAK`] and [`names::HOST_PEAK`] unless a figure was
/// asked for.
pub fn table(location: &str, series: &Series, asked: Option<&str>) -> String {
    let mut out = String::new();
    let runs = &series.runs;
    let (Some(first_run), Some(last_run)) = (runs.first(), runs.last()) else {
        let _ = writeln!(out, "{location}: no runs recorded that match");
        return out;
    };
    let day = |at: &str| at.get(..10).unwrap_or(at).to_string();
    let _ = writeln!(
        out,
        "{location}: {} run{}, {} to {} (oldest on the left; {GAP}: a run without the figure)",
        runs.len(),
        if runs.len() == 1 { "" } else { "s" },
        day(&first_run.started_at),
        day(&last_run.started_at)
    );
    if series.cases.is_empty() {
        let _ = writeln!(out, "no case matches");
        return out;
    }
    // values[case][figure][run]
    let mut values = vec![vec![vec![None; runs.len()]; series.figures.len()]; series.cases.len()];
    for point in &series.points {
        values[point.case as usize][point.figure as usize][point.run as usize] = Some(point.value);
    }
    let at = |name: &str| series.figures.iter().position(|f| f == name);
    let mut rows = vec![[
        "case".to_string(),
        "testbed".to_string(),
        "figure".to_string(),
        "runs".to_string(),
        "first".to_string(),
        "last".to_string(),
        "change".to_string(),
        "steps".to_string(),
        "trend".to_string(),
    ]];
    for ((id, testbed), figures) in series.cases.iter().zip(&values) {
        let has = |index: Option<usize>| index.filter(|&i| figures[i].iter().any(Option::is_some));
        let chosen = match asked {
            Some(name) => at(name),
            None => has(at(names::GPU_PEAK)).or_else(|| at(names::HOST_PEAK)),
        };
        let Some(chosen) = chosen else {
            continue;
        };
        let figure = series.figures[chosen].as_str();
        let values = &figures[chosen];
        let seen: Vec<f64> = values.iter().flatten().copied().collect();
        let (first, last) = (seen.first().copied(), seen.last().copied());
        let change = match (first, last) {
            (Some(a), Some(b)) if a > 0.0 => percent((b - a) / a * 100.0),
            _ => "-".to_string(),
        };
        // Steps up (+) and down (−), as the judge finds them.
        let steadiness = if figure == names::PROBE_ALLOCATED {
            Steadiness::Exact
        } else {
            Steadiness::Sampled
        };
        let found = steps(&seen, steadiness);
        let up = found.iter().filter(|s| s.after > s.before).count();
        let steps_cell = match (up, found.len() - up) {
            (0, 0) => "-".to_string(),
            (up, 0) => format!("+{up}"),
            (0, down) => format!("−{down}"),
            (up, down) => format!("+{up} −{down}"),
        };
        rows.push([
            id.clone(),
            testbed.clone().unwrap_or_else(|| "-".into()),
            figure.to_string(),
            seen.len().to_string(),
            first.map_or("-".into(), |v| figure_value(figure, v)),
            last.map_or("-".into(), |v| figure_value(figure, v)),
            change,
            steps_cell,
            sparkline(&bucketed(values, SPARK_WIDTH)),
        ]);
    }
    let widths: Vec<usize> = (0..9)
        .map(|col| {
            rows.iter()
                .map(|r| r[col].chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    for row in &rows {
        let mut line = String::new();
        for (col, cell) in row.iter().enumerate() {
            let pad = widths[col].saturating_sub(cell.chars().count());
            // Numbers right-aligned, text left-aligned; the last column
            // is not padded.
            if col == 8 {
                line.push_str(cell);
            } else if (3..=7).contains(&col) {
                let _ = write!(line, "{}{cell}  ", " ".repeat(pad));
            } else {
                let _ = write!(line, "{cell}{}  ", " ".repeat(pad));
            }
        }
        let _ = writeln!(out, "{}", line.trim_end());
    }
    out
}

/// `+6.6%`, and `0.0%` for a change that rounds to none (never `-0.0%`).
fn percent(change: f64) -> String {
    if change.abs() < 0.05 {
        "0.0%".to_string()
    } else {
        format!("{change:+.1}%")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sparklines_scale_from_smallest_to_largest_and_show_gaps() {
        assert_eq!(sparkline(&[Some(1.0), Some(2.0), None, Some(8.0)]), "▁▂·█");
        assert_eq!(sparkline(&[Some(5.0), Some(5.0)]), "▁▁");
        assert_eq!(sparkline(&[None]), "·");
        // A tenth of a percent of noise draws flat; +16% in steps draws
        // the steps.
        assert_eq!(sparkline(&[Some(1000.0), Some(1001.0), Some(999.0)]), "▁▁▁");
        assert_eq!(
            sparkline(&[Some(100.0), Some(103.0), Some(106.0), Some(116.0)]),
            "▁▂▄█"
        );
        assert_eq!(percent(-0.01), "0.0%");
        // Many runs are drawn in buckets, each its largest.
        let many: Vec<Option<f64>> = (0..120).map(|i| Some(f64::from(i))).collect();
        let drawn = bucketed(&many, 60);
        assert_eq!(drawn.len(), 60);
        assert_eq!(drawn[0], Some(1.0));
        assert_eq!(drawn[59], Some(119.0));
        assert_eq!(percent(6.6), "+6.6%");
    }

    #[test]
    fn values_read_as_sizes_or_numbers() {
        assert_eq!(figure_value("gpu_peak_bytes", 1_610_612_736.0), "1.50 GiB");
        assert_eq!(figure_value("capacity", 64.0), "64");
    }
}

//! What the workload's probe reported at each step, one labelled series
//! each: per search probe for a searched case (`batch = 192`, from the
//! probe lines each probe left apart), else per instance and phase
//! (`allocated` thick, `reserved` thin, the allocator's own view), with
//! the fitted leak trend after warm-up when a leak check ran on the
//! steps. Each series starts at its own first step: the steps of two
//! probes are never laid end to end.

use std::path::Path;

use super::plot::{Dash, Level, Mark, Plot, Series, XKind};
use super::{BASELINE_COLOUR, Chart, MAX_POINTS_PER_SERIES, PALETTE, RED, downsample};
use crate::capacity::Capacity;
use crate::files::case::InstanceLogs;
use crate::probe::{ProbeReader, ProbeSummary};
use crate::results::CaseResult;
use crate::units::Bytes;

/// The steps of one series, as chart points.
fn points(values: &[u64]) -> Vec<(f64, f64)> {
    let all: Vec<(f64, f64)> = values
        .iter()
        .enumerate()
        .map(|(i, v)| (i as f64, *v as f64))
        .collect();
    downsample(&all, MAX_POINTS_PER_SERIES)
}

/// The most instances a search probe's files are looked for.
const MAX_INSTANCES: u32 = 256;

/// What one search probe reported, from the files it left
/// (`metrics.batch-192.jsonl`, `metrics.1.batch-192.jsonl`, …).
fn probe_summary(dir: &Path, param: &str, value: u64) -> Option<ProbeSummary> {
    let mut files: Vec<(u32, std::path::PathBuf)> = (0..MAX_INSTANCES)
        .map(|i| {
            (
                i,
                InstanceLogs::for_instance(dir, i).probe_metrics(param, value),
            )
        })
        .take_while(|(i, path)| *i == 0 || path.is_file())
        .collect();
    let server = InstanceLogs::for_server(dir).probe_metrics(param, value);
    if server.is_file() {
        files.push((MAX_INSTANCES, server));
    }
    ProbeReader::new(files).finish()
}

/// One series per search probe: the longest `allocated` series each left,
/// the largest values first kept when there are more than colours.
fn search_series(case: &CaseResult, capacity: &Capacity, out_dir: &Path) -> (Vec<Series>, usize) {
    let dir = out_dir.join(&case.dir);
    let mut probes: Vec<_> = capacity.probes.iter().collect();
    probes.sort_by_key(|p| p.value);
    let found: Vec<(&crate::capacity::Probe, Vec<u64>)> = probes
        .into_iter()
        .filter_map(|p| {
            let summary = probe_summary(&dir, &capacity.param, p.value)?;
            let (_, values) = summary.longest_series()?;
            (values.len() >= 2).then(|| (p, values.clone()))
        })
        .collect();
    let left_out = found.len().saturating_sub(PALETTE.len());
    let series = found
        .into_iter()
        .skip(left_out)
        .zip(PALETTE)
        .map(|((probe, values), colour)| {
            let outcome = match (Some(probe.value) == capacity.value, probe.passed()) {
                (true, _) => " (the capacity)",
                (false, true) => "",
                (false, false) => " (failed)",
            };
            let label = format!("{} = {}{outcome}", capacity.param, probe.value);
            let series = Series::line(label, points(&values), colour, 2.5);
            if probe.passed() {
                series
            } else {
                series.dashed(Dash::Dashed)
            }
        })
        .collect();
    (series, left_out)
}

/// Per instance and phase: `allocated`, and `reserved` where reported.
fn step_series(probe: &ProbeSummary) -> (Vec<Series>, usize) {
    let long: Vec<_> = probe
        .series
        .iter()
        .filter(|(_, values)| values.len() >= 2)
        .collect();
    let left_out = long.len().saturating_sub(PALETTE.len() / 2);
    let mut series = Vec::new();
    for (((instance, phase), values), colour) in
        long.into_iter().zip(PALETTE).take(PALETTE.len() / 2)
    {
        let label = if phase.is_empty() {
            format!("instance {instance}")
        } else {
            format!("{phase}, instance {instance}")
        };
        series.push(Series::line(
            format!("allocated ({label})"),
            points(values),
            colour,
            3.0,
        ));
        if let Some(reserved) = probe
            .reserved_series
            .get(&(*instance, phase.clone()))
            .filter(|r| r.len() >= 2)
        {
            series.push(
                Series::line(format!("reserved ({label})"), points(reserved), colour, 1.5)
                    .dashed(Dash::Dashed),
            );
        }
    }
    (series, left_out)
}

/// The figure the baseline compares, `probe.peak_allocated`: a point at
/// its step when a step reported it, else a level (a `peak_allocated`
/// between steps has no step); and its baseline.
fn mark_allocated(plot: &mut Plot, case: &CaseResult, probe: &ProbeSummary) {
    if let Some(peak) = probe.peak_allocated {
        let label = format!("allocated peak {}", Bytes(peak));
        let at = probe
            .series
            .values()
            .filter(|values| values.len() >= 2)
            .find_map(|values| values.iter().position(|b| *b == peak));
        match at {
            Some(step) => plot.marks.push(Mark {
                label: format!("{label} at step {step}"),
                x: step as f64,
                y: peak as f64,
                colour: PEAK_COLOUR,
            }),
            None => plot.levels.push(Level {
                label: format!("{label} (peak_allocated)"),
                about: format!(
                    "{label}: the allocator's own peak the workload reported, between steps; at which step is not known"
                ),
                y: peak as f64,
                colour: PEAK_COLOUR,
                dash: Dash::Dashed,
            }),
        }
    }
    let baseline = case
        .baseline
        .as_ref()
        .and_then(|b| b.allocated.baseline_bytes);
    if let Some(bytes) = baseline {
        plot.levels.push(Level {
            label: format!("allocated baseline {}", Bytes(bytes)),
            about: format!("allocated baseline: {} in the locked run", Bytes(bytes)),
            y: bytes as f64,
            colour: BASELINE_COLOUR,
            dash: Dash::Fine,
        });
    }
}

/// The colour of the allocated peak's mark: apart from every series'.
const PEAK_COLOUR: &str = "#212121";

/// The chart; `None` without a series of two steps or more.
pub(in crate::report::html) fn probe_chart(case: &CaseResult, out_dir: &Path) -> Option<Chart> {
    let probe = case.probe.as_ref()?;
    let (mut series, left_out, what) = match &case.capacity {
        Some(capacity) => {
            let (series, left_out) = search_series(case, capacity, out_dir);
            (series, left_out, "search probes with smaller values")
        }
        None => {
            let (series, left_out) = step_series(probe);
            (series, left_out, "series (instance and phase)")
        }
    };
    if series.is_empty() {
        // A searched case whose probes left no files of their own (results
        // of an older oomgate): its own steps, as any case's.
        let (own, _) = step_series(probe);
        series = own;
    }
    if series.is_empty() {
        return None;
    }
    let mut plot = Plot::new(
        format!("What the probe of {} reported per step", case.id),
        "probe step (from each series' first)",
        XKind::Count,
    );
    plot.series = series;
    // The trend is drawn over the steps the leak was judged on.
    let trend = case
        .leak
        .as_ref()
        .filter(|leak| leak.of_probe_steps())
        .zip(probe.longest_series())
        .and_then(|(leak, (_, values))| {
            let last = values.len().checked_sub(1)? as f64;
            let first = leak.warmup as f64;
            let at = |x: f64| (leak.intercept_bytes + leak.slope_bytes_per_iteration * x).max(0.0);
            (last > first).then(|| (leak, vec![(first, at(first)), (last, at(last))]))
        });
    if let Some((leak, line)) = trend {
        let per = Bytes(leak.slope_bytes_per_iteration.abs() as u64);
        let sign = if leak.slope_bytes_per_iteration < 0.0 {
            "-"
        } else {
            "+"
        };
        let label = format!("leak trend: {sign}{per} per step after warm-up");
        plot.series
            .push(Series::line(label, line, RED, 2.5).dashed(Dash::Dashed));
    }
    mark_allocated(&mut plot, case, probe);
    plot.description = format!(
        "{} series of the probe's steps: {}.",
        plot.series.len(),
        plot.series
            .iter()
            .map(|s| s.label.as_str())
            .collect::<Vec<_>>()
            .join("; ")
    );
    let notes = match left_out {
        0 => Vec::new(),
        n => vec![format!(
            "{n} more {what} not drawn, to keep the lines apart"
        )],
    };
    Some(Chart {
        html: plot.render(),
        notes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capacity::Probe;

    const MIB: u64 = 1024 * 1024;

    fn write_probe_lines(path: &Path, mib: &[u64]) {
        let lines: String = mib
            .iter()
            .enumerate()
            .map(|(step, m)| {
                format!(
                    "{{\"event\":\"step\",\"step\":{step},\"allocated\":{}}}\n",
                    m * MIB
                )
            })
            .collect();
        std::fs::write(path, lines).expect("write probe lines");
    }

    /// A searched case's probe chart laid the steps of every probe end
    /// to end, one staircase; each probe is its own labelled series now.
    #[test]
    fn a_searched_case_gets_one_series_per_probe() {
        let out = tempfile::tempdir().expect("tempdir");
        let dir = out.path().join("cases/cap");
        std::fs::create_dir_all(&dir).expect("mkdir");
        let mut case = CaseResult::unmeasured("cap".into());
        case.dir = "cases/cap".into();
        let mut probes = Vec::new();
        for (value, passed) in [(16, true), (288, false), (144, true)] {
            write_probe_lines(
                &dir.join(format!("metrics.batch-{value}.jsonl")),
                &[value / 8, value / 4, value / 2],
            );
            probes.push(Probe {
                wall_time_s: 0.1,
                ..Probe::ended(value, passed)
            });
        }
        case.capacity = Some(Capacity {
            param: "batch".into(),
            step: None,
            value: Some(144),
            complete: true,
            probes,
        });
        case.probe = Some(ProbeSummary::default());
        let html = probe_chart(&case, out.path()).expect("a chart").html;
        let legend = &html[..html.find("<svg").expect("svg")];
        for label in [
            "batch = 16<",
            "batch = 144 (the capacity)<",
            "batch = 288 (failed)<",
        ] {
            assert!(legend.contains(label), "{label} in {legend}");
        }
        assert_eq!(html.matches("<g class=\"series\">").count(), 3, "{html}");
        // Each series from step 0: three steps, not nine in a row.
        assert!(
            html.contains(">2</text>") && !html.contains(">4</text>"),
            "{html}"
        );
    }

    #[test]
    fn instances_and_phases_are_apart_and_labelled() {
        let mut probe = ProbeSummary::default();
        probe
            .series
            .insert((0, "forward".into()), vec![MIB, 2 * MIB, 3 * MIB]);
        probe
            .series
            .insert((0, "backward".into()), vec![2 * MIB, 3 * MIB]);
        probe
            .reserved_series
            .insert((0, "forward".into()), vec![4 * MIB, 4 * MIB]);
        probe.series.insert((1, String::new()), vec![MIB]); // one step: no line
        let mut case = CaseResult::unmeasured("p".into());
        case.probe = Some(probe);
        let html = probe_chart(&case, Path::new("/nonexistent"))
            .expect("a chart")
            .html;
        for label in [
            "allocated (forward, instance 0)",
            "reserved (forward, instance 0)",
            "allocated (backward, instance 0)",
        ] {
            assert!(html.contains(label), "{label}");
        }
        assert!(!html.contains("instance 1"), "{html}");
        // No figure of the probe's peak: nothing marked.
        assert!(!html.contains("allocated peak"), "{html}");
    }

    #[test]
    fn the_allocated_peak_is_marked_at_its_step_or_as_a_level() {
        let mut probe = ProbeSummary::default();
        probe
            .series
            .insert((0, String::new()), vec![MIB, 3 * MIB, 2 * MIB]);
        probe.peak_allocated = Some(3 * MIB);
        let mut case = CaseResult::unmeasured("p".into());
        case.probe = Some(probe.clone());
        let html = probe_chart(&case, Path::new("/nonexistent"))
            .expect("a chart")
            .html;
        assert!(
            html.contains(">allocated peak 3.00 MiB at step 1<"),
            "{html}"
        );
        // Reported between steps (`peak_allocated`): no step to put it at.
        probe.peak_allocated = Some(5 * MIB);
        case.probe = Some(probe);
        let html = probe_chart(&case, Path::new("/nonexistent"))
            .expect("a chart")
            .html;
        assert!(
            html.contains(">allocated peak 5.00 MiB (peak_allocated)<"),
            "{html}"
        );
        assert!(html.contains("class=\"level\""), "{html}");
    }
}

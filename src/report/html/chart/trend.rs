//! A case's figure over its recent runs in the run history: the past
//! runs (those that failed apart), this run's figure, the ratchet and the
//! creep limit above it, the lock's level, and each step.

use super::plot::{Dash, Mark, Moment, Plot, Series, Shape, XKind};
use super::{BASELINE_COLOUR, Chart, GPU_COLOUR, HOST_COLOUR, RED, level_in_view};
use crate::results::CaseResult;
use crate::units::Bytes;

/// The chart; `None` without a trend.
pub(in crate::report::html) fn trend_chart(case: &CaseResult) -> Option<Chart> {
    let trend = case.trend.as_ref()?;
    let gpu = trend.figure.starts_with("gpu");
    let (what, colour) = if gpu {
        ("GPU peak", GPU_COLOUR)
    } else {
        ("host peak", HOST_COLOUR)
    };
    let now = if gpu {
        case.gpu_peak_bytes
    } else {
        case.host.peak_bytes
    };
    let on = trend
        .branch
        .as_deref()
        .map(|b| format!(" on {b}"))
        .unwrap_or_default();
    let mut plot = Plot::new(
        format!("{what} of {} over its last runs{on}", case.id),
        "run (oldest first; this run last)",
        XKind::Count,
    );
    let points = |passed: bool| -> Vec<(f64, f64)> {
        trend
            .past
            .iter()
            .enumerate()
            .filter(|(_, p)| p.passed == passed)
            .map(|(at, p)| (at as f64 + 1.0, p.value_bytes as f64))
            .collect()
    };
    plot.series.push(
        Series::line(
            format!("{what}, runs that passed"),
            points(true),
            colour,
            2.0,
        )
        .shaped(Shape::LineAndDots),
    );
    let failed = points(false);
    if !failed.is_empty() {
        plot.series
            .push(Series::line("runs that failed", failed, RED, 0.0).shaped(Shape::Dots));
    }
    let this_run = trend.past.len() as f64 + 1.0;
    if let Some(now) = now {
        plot.marks.push(Mark {
            label: format!("this run: {}", Bytes(now)),
            x: this_run,
            y: now as f64,
            colour: "#000",
        });
    }
    let highest = plot.highest_y().max(now.unwrap_or(0) as f64);
    let mut notes = Vec::new();
    if let Some(ratchet) = trend.ratchet_bytes {
        level_in_view(
            &mut plot,
            &mut notes,
            highest,
            ("ratchet", format!("ratchet: {}", Bytes(ratchet))),
            ratchet,
            BASELINE_COLOUR,
        );
        if let Some(limit) = trend.creep_limit {
            let bound = (ratchet as f64 * (1.0 + limit)).round() as u64;
            level_in_view(
                &mut plot,
                &mut notes,
                highest,
                (
                    "creep limit",
                    format!(
                        "creep limit: {:.0}% over the ratchet, {}",
                        limit * 100.0,
                        Bytes(bound)
                    ),
                ),
                bound,
                RED,
            );
        }
    }
    let locked = case.baseline.as_ref().and_then(|b| {
        if gpu {
            b.gpu.baseline_bytes
        } else {
            b.host.baseline_bytes
        }
    });
    if let Some(locked) = locked {
        level_in_view(
            &mut plot,
            &mut notes,
            highest,
            ("locked", format!("the lock's {what}: {}", Bytes(locked))),
            locked,
            "#6d4c41",
        );
    }
    for &at in &trend.steps {
        plot.moments.push(Moment {
            label: if at == trend.past.len() {
                "step: this run".to_string()
            } else {
                format!("step at run {}", at + 1)
            },
            x: at as f64 + 1.0,
            colour: "#e65100",
            dash: Dash::Fine,
        });
    }
    plot.x_end = this_run;
    plot.description = format!(
        "{} past run(s){on} and this one; {} step(s){}.",
        trend.past.len(),
        trend.steps.len(),
        match (trend.ratchet_bytes, trend.creep_limit) {
            (Some(ratchet), Some(limit)) => format!(
                "; ratchet {}, creep limit {:.0}%",
                Bytes(ratchet),
                limit * 100.0
            ),
            _ => String::new(),
        }
    );
    Some(Chart {
        html: plot.render(),
        notes,
    })
}

//! A searched case's memory curve: the peak memory of each probe against
//! the searched value, the capacity found beside the locked one (the span
//! between them shaded: a shrink is seen on the curve, not only read in
//! the message), the locked run's peak at its capacity, and the GPU budget
//! and the devices' total memory where they are in view — how the
//! workload scales, and where it breaks.

use super::plot::{Band, Dash, Moment, Plot, Series, Shape, XKind};
use super::{BASELINE_COLOUR, Chart, GPU_COLOUR, HOST_COLOUR, RED, level_in_view, limit};
use crate::capacity::Probe;
use crate::results::{CaseResult, CheckKind, Facts};
use crate::units::Bytes;

/// The capacity the lock holds for the case, from its capacity check.
pub(in crate::report::html) fn locked_capacity(case: &CaseResult) -> Option<u64> {
    case.checks
        .iter()
        .filter(|c| c.kind == CheckKind::Capacity)
        .find_map(|c| match &c.facts {
            Some(Facts::Capacity { locked, .. }) => *locked,
            _ => None,
        })
}

/// The curve; `None` without a search of two probes or more with figures.
pub(in crate::report::html) fn capacity_chart(case: &CaseResult) -> Option<Chart> {
    let capacity = case.capacity.as_ref()?;
    let mut probes: Vec<&Probe> = capacity.probes.iter().collect();
    probes.sort_by_key(|p| p.value);
    // The curve is drawn through the probes that passed; a failed probe's
    // peak is where it stopped (an OOM before allocating reads low), so
    // those are marked apart.
    let series = |passed: bool, pick: fn(&Probe) -> Option<u64>| {
        probes
            .iter()
            .filter(|p| p.passed() == passed)
            .filter_map(|p| pick(p).map(|b| (p.value as f64, b as f64)))
            .collect::<Vec<(f64, f64)>>()
    };
    let host = series(true, |p| p.host_peak_bytes);
    let gpu = series(true, |p| p.gpu_peak_bytes);
    let with_gpu = gpu.len() >= 2 && gpu.iter().any(|p| p.1 > 0.0);
    let with_host = host.len() >= 2;
    if !with_gpu && !with_host {
        return None;
    }
    let failed = if with_gpu {
        series(false, |p| p.gpu_peak_bytes)
    } else {
        series(false, |p| p.host_peak_bytes)
    };
    let param = capacity.param.as_str();
    let mut plot = Plot::new(
        format!("Peak memory of {} against {param}", case.id),
        param,
        XKind::Count,
    );
    if with_gpu {
        plot.series
            .push(Series::line("GPU peak", gpu, GPU_COLOUR, 3.0).shaped(Shape::LineAndDots));
    }
    if with_host {
        plot.series
            .push(Series::line("host peak", host, HOST_COLOUR, 3.0).shaped(Shape::LineAndDots));
    }
    if !failed.is_empty() {
        plot.series.push(
            Series::line("failed probes (peak until they stopped)", failed, RED, 0.0)
                .shaped(Shape::Dots),
        );
    }
    let locked = locked_capacity(case);
    if let (Some(locked), Some(comparison)) = (locked, &case.baseline) {
        // The case's figures are its capacity probe's, and so were the
        // locked run's: its peaks sit at the locked capacity.
        for (figure, what, colour, drawn) in [
            (&comparison.gpu, "GPU", GPU_COLOUR, with_gpu),
            (&comparison.host, "host", HOST_COLOUR, with_host),
        ] {
            if let Some(bytes) = figure.baseline_bytes.filter(|_| drawn) {
                plot.series.push(
                    Series::line(
                        format!(
                            "locked run's {what} peak ({param} = {locked}: {})",
                            Bytes(bytes)
                        ),
                        vec![(locked as f64, bytes as f64)],
                        colour,
                        2.0,
                    )
                    .shaped(Shape::Rings),
                );
            }
        }
    }
    let highest = plot.highest_y();
    let mut notes = Vec::new();
    let device_total: u64 = case.gpu_devices.iter().map(|d| d.total_bytes).sum();
    for (label, bytes, colour) in [
        ("GPU budget", limit(case, CheckKind::GpuBudget), RED),
        (
            "devices' total memory",
            (device_total > 0).then_some(device_total),
            "#000",
        ),
    ] {
        let Some(bytes) = bytes else { continue };
        let about = format!("{label}: {}", Bytes(bytes));
        level_in_view(
            &mut plot,
            &mut notes,
            highest,
            (label, about),
            bytes,
            colour,
        );
    }
    if let Some(value) = capacity.value {
        plot.moments.push(Moment {
            label: format!("capacity: {param} = {value}"),
            x: value as f64,
            colour: "#e65100",
            dash: Dash::Solid,
        });
    }
    if let Some(locked) = locked {
        plot.moments.push(Moment {
            label: format!("locked: {param} = {locked}"),
            x: locked as f64,
            colour: BASELINE_COLOUR,
            dash: Dash::Fine,
        });
        match capacity.value {
            Some(value) if value < locked => plot.bands.push(Band {
                label: format!("capacity lost since the lock: {param} {locked} → {value}"),
                from: value as f64,
                to: locked as f64,
                fill: RED,
            }),
            Some(value) if value > locked => plot.bands.push(Band {
                label: format!("capacity gained since the lock: {param} {locked} → {value}"),
                from: locked as f64,
                to: value as f64,
                fill: GPU_COLOUR,
            }),
            _ => {}
        }
    }
    plot.description = format!(
        "{}. {} probes; {}.",
        capacity.describe(),
        probes.len(),
        match (capacity.value, locked) {
            (Some(value), Some(locked)) => format!("{param} {value} now, {locked} locked"),
            (Some(value), None) => format!("{param} {value}, no locked capacity"),
            (None, Some(locked)) => format!("no {param} fits now, {locked} locked"),
            (None, None) => "no capacity found".to_string(),
        }
    );
    Some(Chart {
        html: plot.render(),
        notes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::baseline::CaseComparison;
    use crate::capacity::Capacity;
    use crate::results::{Check, CheckOutcome};

    const MIB: u64 = 1024 * 1024;

    fn probe(value: u64, passed: bool) -> Probe {
        Probe {
            host_peak_bytes: Some(value * MIB / 2),
            gpu_peak_bytes: Some(value * MIB),
            wall_time_s: 1.0,
            ..Probe::ended(value, passed)
        }
    }

    /// A search that found 192 where the lock holds 288.
    fn shrunk() -> CaseResult {
        let mut case = CaseResult::unmeasured("cap".into());
        case.capacity = Some(Capacity {
            param: "batch".into(),
            step: Some(16),
            value: Some(192),
            complete: true,
            probes: vec![
                probe(16, true),
                probe(144, true),
                probe(192, true),
                probe(208, false),
            ],
        });
        let mut check = Check::new(CheckKind::Capacity, false, CheckOutcome::Breached);
        check.facts = Some(Facts::Capacity {
            param: "batch".into(),
            value: Some(192),
            complete: true,
            probes: 4,
            locked: Some(288),
            least_accepted: Some(288),
            tolerance: Default::default(),
            lock_counts: None,
            counts: None,
            required: false,
        });
        case.checks.push(check);
        let mut comparison = CaseComparison {
            locked: true,
            ..CaseComparison::default()
        };
        comparison.gpu.baseline_bytes = Some(288 * MIB);
        case.baseline = Some(comparison);
        case
    }

    #[test]
    fn the_locked_capacity_is_drawn_beside_the_current_one() {
        let html = capacity_chart(&shrunk()).expect("a chart").html;
        assert!(html.contains("capacity: batch = 192"), "{html}");
        assert!(html.contains("locked: batch = 288"), "{html}");
        assert!(
            html.contains("capacity lost since the lock: batch 288 → 192"),
            "{html}"
        );
        assert!(
            html.contains("locked run's GPU peak (batch = 288: 288.0 MiB)"),
            "{html}"
        );
        // The x axis reaches the locked value though no probe ran there.
        assert!(html.contains(">300</text>"), "{html}");
    }

    #[test]
    fn without_a_lock_only_the_capacity_found() {
        let mut case = shrunk();
        case.checks.clear();
        case.baseline = None;
        let html = capacity_chart(&case).expect("a chart").html;
        assert!(html.contains("capacity: batch = 192"));
        assert!(
            !html.contains("locked:") && !html.contains("since the lock"),
            "{html}"
        );
    }
}

//! The axes of report.html's charts: every axis starts at 0 and is cut
//! into 1, 2 or 5 × 10ⁿ steps of one unit — bytes in B, KiB, MiB, GiB or
//! TiB, time in seconds, minutes or hours, counts as they are — so a
//! change is seen at its true size and every tick reads as a round number
//! (`0, 20, 40, 60, 80 MiB`, never `71.0, 71.2, … 73.0`).

/// The ticks of one axis, from 0 to `top` (the last tick), in the axis's
/// own values (bytes, seconds, a count).
#[derive(Debug, Clone, PartialEq)]
pub(in crate::report::html) struct Ticks {
    pub(in crate::report::html) top: f64,
    /// Each tick's value and its label (`20 MiB`, `1.5 s`).
    pub(in crate::report::html) marks: Vec<(f64, String)>,
}

/// About this many steps between 0 and the top; the step is rounded up to
/// 1, 2 or 5 × 10ⁿ, so an axis has 3 to 6 of them.
const STEPS: f64 = 5.0;

/// The smallest 1, 2 or 5 × 10ⁿ that is at least `raw`.
pub(in crate::report::html) fn nice_step(raw: f64) -> f64 {
    if !raw.is_finite() || raw <= 0.0 {
        return 1.0;
    }
    let magnitude = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * magnitude)
        .find(|step| *step >= raw * (1.0 - 1e-9))
        .unwrap_or(10.0 * magnitude)
}

/// Ticks from 0 past `highest` in `unit`-sized units named `name`; the
/// step at least `least_step` units (1 for counts).
fn ticks_in(highest: f64, unit: f64, name: &str, least_step: f64) -> Ticks {
    let in_units = (highest / unit).max(0.0);
    let step = nice_step(in_units / STEPS).max(least_step);
    let steps = (in_units / step - 1e-9).ceil().max(1.0);
    let decimals = decimals_of(step);
    let marks = (0..=steps as u64)
        .map(|i| {
            let value = i as f64 * step;
            let label = match (value == 0.0, name.is_empty()) {
                (true, _) => "0".to_string(),
                (false, true) => format!("{value:.decimals$}"),
                (false, false) => format!("{value:.decimals$} {name}"),
            };
            (value * unit, label)
        })
        .collect();
    Ticks {
        top: steps * step * unit,
        marks,
    }
}

/// Decimals a step of this size needs: none for 1 and up, one for 0.5 and
/// 0.2, two for 0.05 …
fn decimals_of(step: f64) -> usize {
    if step >= 1.0 {
        0
    } else {
        (-step.log10().floor()).max(0.0) as usize
    }
}

const BYTE_UNITS: [(&str, f64); 5] = [
    ("B", 1.0),
    ("KiB", 1024.0),
    ("MiB", 1024.0 * 1024.0),
    ("GiB", 1024.0 * 1024.0 * 1024.0),
    ("TiB", 1024.0 * 1024.0 * 1024.0 * 1024.0),
];

/// A byte axis from 0 to at least `highest` bytes, in the largest unit
/// the highest figure is at least one of (an empty chart: 0 to 1 MiB).
pub(in crate::report::html) fn byte_ticks(highest: f64) -> Ticks {
    if !highest.is_finite() || highest <= 0.0 {
        let (name, unit) = BYTE_UNITS[2];
        return ticks_in(unit, unit, name, 0.0);
    }
    let (name, unit) = BYTE_UNITS
        .into_iter()
        .rev()
        .find(|(_, unit)| highest >= *unit)
        .unwrap_or(BYTE_UNITS[0]);
    // Bytes come whole: a step below one byte would be a fraction.
    let least = if unit == 1.0 { 1.0 } else { 0.0 };
    ticks_in(highest, unit, name, least)
}

/// A time axis from 0 to at least `end` seconds, in seconds up to two
/// minutes, then minutes up to two hours, then hours; values stay seconds.
pub(in crate::report::html) fn time_ticks(end_s: f64) -> Ticks {
    let end_s = if end_s.is_finite() && end_s > 0.0 {
        end_s
    } else {
        1.0
    };
    let (name, unit) = if end_s <= 120.0 {
        ("s", 1.0)
    } else if end_s <= 7200.0 {
        ("min", 60.0)
    } else {
        ("h", 3600.0)
    };
    ticks_in(end_s, unit, name, 0.0)
}

/// A count axis (steps, a searched value) from 0 to at least `highest`,
/// in whole steps.
pub(in crate::report::html) fn count_ticks(highest: f64) -> Ticks {
    let highest = if highest.is_finite() && highest > 0.0 {
        highest
    } else {
        1.0
    };
    ticks_in(highest, 1.0, "", 1.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: f64 = 1024.0 * 1024.0;
    const GIB: f64 = 1024.0 * MIB;

    fn labels(ticks: &Ticks) -> Vec<&str> {
        ticks.marks.iter().map(|(_, l)| l.as_str()).collect()
    }

    #[test]
    fn steps_are_one_two_or_five_times_a_power_of_ten() {
        for (raw, step) in [
            (0.14, 0.2),
            (1.0, 1.0),
            (1.01, 2.0),
            (2.5, 5.0),
            (7.0, 10.0),
            (14.4, 20.0),
            (0.0004, 0.0005),
            (300.0, 500.0),
        ] {
            assert!((nice_step(raw) - step).abs() < 1e-12, "{raw} -> {step}");
        }
        assert_eq!(nice_step(0.0), 1.0);
        assert_eq!(nice_step(f64::NAN), 1.0);
    }

    /// A flat 72 MiB line once got a 71–73 axis with 0.2 steps: a
    /// wobble of a few KiB looked like a cliff.
    #[test]
    fn a_flat_72_mib_line_gets_an_axis_from_zero_in_round_mib() {
        let ticks = byte_ticks(72.0 * MIB);
        assert_eq!(
            labels(&ticks),
            ["0", "20 MiB", "40 MiB", "60 MiB", "80 MiB"]
        );
        assert_eq!(ticks.marks[0].0, 0.0);
        assert_eq!(ticks.top, 80.0 * MIB);
    }

    #[test]
    fn the_unit_follows_the_highest_figure() {
        assert_eq!(
            labels(&byte_ticks(1.37 * GIB)),
            ["0", "0.5 GiB", "1.0 GiB", "1.5 GiB"]
        );
        assert_eq!(
            labels(&byte_ticks(3.0 * GIB)),
            ["0", "1 GiB", "2 GiB", "3 GiB"]
        );
        assert_eq!(
            labels(&byte_ticks(900.0 * MIB)),
            ["0", "200 MiB", "400 MiB", "600 MiB", "800 MiB", "1000 MiB"]
        );
        assert_eq!(labels(&byte_ticks(3.0)), ["0", "1 B", "2 B", "3 B"]);
    }

    #[test]
    fn the_top_tick_is_never_below_the_highest_figure() {
        for highest in [1023.0, 1025.0, 72.5 * MIB, 80.0 * MIB, 79.9 * GIB] {
            let ticks = byte_ticks(highest);
            assert!(ticks.top >= highest, "{highest}: top {}", ticks.top);
            assert!(ticks.top < highest * 2.5, "{highest}: top {}", ticks.top);
            assert!((3..=7).contains(&ticks.marks.len()), "{:?}", labels(&ticks));
        }
    }

    #[test]
    fn nothing_to_draw_still_makes_an_axis() {
        assert_eq!(
            labels(&byte_ticks(0.0)),
            ["0", "0.2 MiB", "0.4 MiB", "0.6 MiB", "0.8 MiB", "1.0 MiB"]
        );
        assert_eq!(labels(&count_ticks(0.0)), ["0", "1"]);
        assert_eq!(time_ticks(f64::NAN).top, 1.0);
    }

    #[test]
    fn time_reads_in_seconds_then_minutes_then_hours() {
        assert_eq!(
            labels(&time_ticks(1.65)),
            ["0", "0.5 s", "1.0 s", "1.5 s", "2.0 s"]
        );
        assert_eq!(labels(&time_ticks(600.0))[1], "2 min");
        assert_eq!(labels(&time_ticks(86_400.0))[1], "5 h");
        assert_eq!(time_ticks(600.0).marks[1].0, 120.0, "values stay seconds");
    }

    #[test]
    fn counts_step_in_whole_numbers() {
        assert_eq!(labels(&count_ticks(3.0)), ["0", "1", "2", "3"]);
        assert_eq!(labels(&count_ticks(288.0)), ["0", "100", "200", "300"]);
    }
}

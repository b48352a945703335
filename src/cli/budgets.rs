//! `oomgate budgets RESULTS`: the budgets a profiled run's figures call
//! for, as `@pytest.mark.oomgate(...)` markers or as suite TOML, so a team
//! writes its per-test budgets from measurements, not by hand.

use std::fmt::Write as _;

use super::args::{BudgetFormat, BudgetsArgs};
use super::shared::{CliError, Outcome, write_stderr, write_stdout};
use crate::results::{CaseResult, CaseStatus};

/// `oomgate budgets`.
pub fn budgets(args: &BudgetsArgs) -> Result<Outcome, CliError> {
    let text = crate::files::read_input(
        &args.results,
        crate::files::MAX_RESULTS_BYTES,
        "a results file",
    )
    .map_err(|e| {
        CliError::BadInput(format!(
            "cannot read results {}: {e}",
            args.results.display()
        ))
    })?;
    let results = crate::results::readback::parse(&text)
        .map_err(|why| CliError::BadInput(format!("{}: {why}", args.results.display())))?;
    let chosen: Vec<&CaseResult> = results
        .cases
        .iter()
        .filter(|c| {
            args.filter.is_empty()
                || args
                    .filter
                    .iter()
                    .any(|f| crate::suite::filter_matches(&c.id, f))
        })
        .collect();
    if chosen.is_empty() {
        return Err(CliError::BadInput(format!(
            "{} has no case{}",
            args.results.display(),
            if args.filter.is_empty() {
                String::new()
            } else {
                format!(" matching --filter {}", args.filter.join(" --filter "))
            }
        )));
    }
    let (text, skipped) = render(&chosen, args.factor, args.format);
    write_stdout(&text);
    if !skipped.is_empty() {
        write_stderr(&format!(
            "note: no budget proposed for {}",
            skipped.join("; ")
        ));
    }
    Ok(Outcome::Passed)
}

/// The proposals, and the cases given none (with why).
pub fn render(cases: &[&CaseResult], factor: f64, format: BudgetFormat) -> (String, Vec<String>) {
    let mut text = String::new();
    let mut skipped = Vec::new();
    for case in cases {
        if case.status != CaseStatus::Passed {
            skipped.push(format!(
                "{} (it did not pass: its figures are not its needs)",
                case.id
            ));
            continue;
        }
        if format == BudgetFormat::Marker && case.pytest.is_none() {
            skipped.push(format!(
                "{} (not a pytest test: use --format toml)",
                case.id
            ));
            continue;
        }
        let mut keys = Vec::new();
        let mut measured = Vec::new();
        if let Some(host) = case.host.peak_bytes {
            keys.push(("host", proposed(host, factor)));
            measured.push(format!("host {}", crate::units::Bytes(host)));
        }
        match case.gpu_peak_bytes {
            Some(gpu) => {
                keys.push(("gpu", proposed(gpu, factor)));
                measured.push(format!("gpu {}", crate::units::Bytes(gpu)));
            }
            None => measured.push("gpu not measured".to_string()),
        }
        if keys.is_empty() {
            skipped.push(format!("{} (no figure was measured)", case.id));
            continue;
        }
        let _ = writeln!(text, "# {}: {} (× {factor})", case.id, measured.join(", "));
        let written: Vec<String> = match format {
            BudgetFormat::Marker => keys.iter().map(|(k, v)| format!("{k}=\"{v}\"")).collect(),
            BudgetFormat::Toml => keys.iter().map(|(k, v)| format!("{k} = \"{v}\"")).collect(),
        };
        let _ = match format {
            BudgetFormat::Marker => writeln!(text, "@pytest.mark.oomgate({})", written.join(", ")),
            BudgetFormat::Toml => writeln!(text, "budget = {{ {} }}", written.join(", ")),
        };
    }
    (text, skipped)
}

/// `bytes × factor`, rounded up to a size a person writes: whole MiB
/// below 1 GiB, tenths of a GiB above; never below the target as the suite
/// reads the size back (`8.8 GiB` is a few bytes under 8 GiB × 1.1).
fn proposed(bytes: u64, factor: f64) -> String {
    const MIB: u64 = 1024 * 1024;
    const GIB: u64 = 1024 * MIB;
    let target = (bytes as f64 * factor).ceil() as u64;
    let written = |step: u64| {
        if target < GIB {
            format!("{} MiB", (target.div_ceil(MIB) + step).max(1))
        } else {
            let tenths = (u128::from(target) * 10).div_ceil(u128::from(GIB)) + u128::from(step);
            format!("{}.{} GiB", tenths / 10, tenths % 10)
        }
    };
    let reads = |text: &str| text.parse::<crate::units::Bytes>().map_or(0, |b| b.get());
    (0..4)
        .map(written)
        .find(|text| reads(text) >= target)
        .unwrap_or_else(|| written(4))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proposals_round_up_to_sizes_a_person_writes() {
        let mib = 1024 * 1024;
        let table = [
            (0, 1.1, "1 MiB"),
            (10 * mib, 1.0, "10 MiB"),
            (10 * mib + 1, 1.0, "11 MiB"),
            (100 * mib, 1.1, "111 MiB"),
            (1000 * mib, 1.1, "1.1 GiB"),
            (8 * 1024 * mib, 1.1, "8.9 GiB"),
            (8 * 1024 * mib, 1.0, "8.0 GiB"),
            (8 * 1024 * mib + 1, 1.0, "8.1 GiB"),
        ];
        for (bytes, factor, expected) in table {
            assert_eq!(proposed(bytes, factor), expected, "{bytes} × {factor}");
            let back: crate::units::Bytes = expected.parse().expect("a size the suite reads");
            assert!(
                back.get() as f64 >= bytes as f64 * factor,
                "{expected} covers {bytes} × {factor}"
            );
        }
    }
}

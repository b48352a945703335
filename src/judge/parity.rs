//! `[[parity]]`: once a run's cases are in, each rule of one case's
//! figure against another's, judged on their results. `run` judges the
//! rules of its suite; `merge` judges again every rule its parts
//! recorded, on the merged cases, so a rule whose sides ran in two
//! shards is judged once both are present. Nothing here is worded.

use crate::results::{CaseResult, CaseStatus, ParityOutcome, ParityResult};
use crate::suite::{Parity, ParityFigure};

/// A case's figure for a parity; `Err`: why it has none.
fn figure_of(case: &CaseResult, figure: &ParityFigure) -> Result<f64, String> {
    let bytes = |value: Option<u64>, what: &str| {
        value
            .map(|b| b as f64)
            .ok_or_else(|| format!("`{}` has no {what}", case.id))
    };
    match figure {
        ParityFigure::GpuPeak => bytes(
            case.gpu_peak_bytes,
            "GPU peak (GPU memory was not measured)",
        ),
        ParityFigure::HostPeak => bytes(case.host.peak_bytes, "host peak"),
        ParityFigure::WorkingPeak => bytes(
            case.host.working_peak_bytes,
            "working-memory peak (it needs a memory cgroup of the case's own)",
        ),
        ParityFigure::ProbePeakAllocated => bytes(
            case.probe.as_ref().and_then(|p| p.peak_allocated),
            "allocated peak (its probe reported none)",
        ),
        ParityFigure::ProbePeakReserved => bytes(
            case.probe.as_ref().and_then(|p| p.peak_reserved),
            "reserved peak (its probe reported none)",
        ),
        ParityFigure::WallTime => Ok(case.wall_time_s),
        ParityFigure::Output(name) => case
            .outputs
            .iter()
            .find(|o| o.name == *name)
            .and_then(|o| o.value)
            .ok_or_else(|| format!("`{}` printed no `{name}`", case.id)),
    }
}

/// Where one side of a rule stands.
enum Side {
    /// Its figure.
    Figure(f64),
    /// It did not run here: the rule is left to a merge.
    NotHere(String),
    /// It ran without the figure: the rule cannot be verified.
    NoFigure(String),
}

impl Side {
    fn of(cases: &[CaseResult], id: &str, figure: &ParityFigure) -> Side {
        match cases.iter().find(|c| c.id == id) {
            None => Side::NotHere(format!(
                "`{id}` did not run here (another shard's, filtered out, or not run)"
            )),
            Some(case) if case.status == CaseStatus::Skipped => {
                Side::NotHere(format!("`{id}` was skipped"))
            }
            Some(case) => figure_of(case, figure).map_or_else(Side::NoFigure, Side::Figure),
        }
    }

    fn value(&self) -> Option<f64> {
        match self {
            Side::Figure(value) => Some(*value),
            Side::NotHere(_) | Side::NoFigure(_) => None,
        }
    }
}

/// Every parity judged on `cases`.
pub fn judge_parity(parities: &[Parity], cases: &[CaseResult]) -> Vec<ParityResult> {
    parities
        .iter()
        .map(|parity| {
            let sides = [
                Side::of(cases, &parity.lhs, &parity.figure),
                Side::of(cases, &parity.rhs, &parity.figure),
            ];
            let (lhs_value, rhs_value) = (sides[0].value(), sides[1].value());
            let bound = rhs_value.map(|rhs| parity.rule.bound(rhs));
            // A side that did not run leaves the rule to a merge, before one
            // that ran without its figure makes it unverifiable.
            let not_here = sides.iter().find_map(|s| match s {
                Side::NotHere(why) => Some(why.clone()),
                _ => None,
            });
            let no_figure = sides.iter().find_map(|s| match s {
                Side::NoFigure(why) => Some(why.clone()),
                _ => None,
            });
            let (outcome, missing) = match (not_here, no_figure, lhs_value.zip(bound)) {
                (Some(why), _, _) => (ParityOutcome::NotJudged, Some(why)),
                (None, Some(why), _) => (ParityOutcome::Unknown, Some(why)),
                (None, None, Some((lhs, bound))) if parity.rule.op.holds(lhs, bound) => {
                    (ParityOutcome::Held, None)
                }
                (None, None, _) => (ParityOutcome::Broken, None),
            };
            ParityResult {
                name: parity.name.clone(),
                lhs: parity.lhs.clone(),
                rhs: parity.rhs.clone(),
                figure: parity.figure.name(),
                rule: parity.text.clone(),
                lhs_value,
                rhs_value,
                bound,
                passed: matches!(outcome, ParityOutcome::Held | ParityOutcome::NotJudged),
                outcome,
                missing,
                // Worded at the output (`report::words::word_parities`).
                message: String::new(),
            }
        })
        .collect()
}

/// The parities a run's results recorded, read back as rules (`oomgate
/// merge`: every part's, each once). One that no longer reads is left
/// out: its part said it as it ran.
pub fn recorded(results: &[&[ParityResult]]) -> Vec<Parity> {
    let mut parities: Vec<Parity> = Vec::new();
    for recorded in results.iter().flat_map(|r| r.iter()) {
        let Ok(parity) = Parity::read(
            &recorded.name,
            &recorded.lhs,
            &recorded.rhs,
            &recorded.figure,
            &recorded.rule,
        ) else {
            continue;
        };
        if !parities.contains(&parity) {
            parities.push(parity);
        }
    }
    parities
}

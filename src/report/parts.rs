//! What the pages of a merged run (`oomgate merge`) add, shared by
//! summary.md and report.html so both say the same: a row per part (where
//! and when it ran, which shard, how its cases went), where the parts'
//! environments differ from the first part's, and whether their figures
//! are comparable enough to lock. A run, and a merge of one part, add
//! nothing: their pages are a run's.

use crate::results::{NotRunReason, RunResults};

/// The columns of [`Parts::rows`].
pub const COLUMNS: [&str; 6] = ["part", "host", "shard", "cases", "started", "finished"];

/// The parts section of a merged run's pages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Parts {
    pub rows: Vec<[String; 6]>,
    /// The part the others are compared with.
    pub first: String,
    /// Per part that differs from the first: its name and the differences
    /// (`torch 2.4.1 → 2.5.0`).
    pub drift: Vec<(String, Vec<String>)>,
    /// Why the parts' figures are not comparable; empty when they are.
    pub incomparable: Vec<String>,
}

/// Said when the parts' figures are not comparable.
pub const INCOMPARABLE_NOTE: &str =
    "their figures are not comparable, so `oomgate lock --from` refuses this merged run";

/// The section, for a run merged from more than one part.
pub fn of(results: &RunResults) -> Option<Parts> {
    if results.parts.len() < 2 {
        return None;
    }
    let rows = results
        .parts
        .iter()
        .map(|part| {
            let mut cases = super::summary_counts(&part.summary);
            if !part.not_run.is_empty() {
                cases.push(format!("{} not run", part.not_run.len()));
            }
            if part.fault.is_some() {
                cases.push("stopped by a write failure".to_string());
            } else if part.interrupted {
                cases.push("interrupted".to_string());
            }
            [
                part.dir.display().to_string(),
                part.host.clone(),
                part.partition
                    .as_ref()
                    .map_or("–".to_string(), ToString::to_string),
                cases.join(", "),
                part.started_at.clone(),
                part.finished_at
                    .clone()
                    .unwrap_or_else(|| "did not finish".to_string()),
            ]
        })
        .collect();
    Some(Parts {
        rows,
        first: results.parts.first().map(|p| p.name()).unwrap_or_default(),
        drift: crate::results::merge::part_drift(results)
            .into_iter()
            .map(|d| (d.part, d.drift.iter().map(ToString::to_string).collect()))
            .collect(),
        incomparable: crate::results::merge::incomparable_parts(results),
    })
}

/// The cases of a merged run that no part held, when it was given the
/// suite: named apart, since they are the ones a missing shard cost.
pub fn held_by_no_part(results: &RunResults) -> Vec<&str> {
    not_run_for(results, NotRunReason::NoPart)
}

/// The cases of a merged run that a killed shard did not finish: named
/// apart, since they are the ones its kill cost.
pub fn left_by_a_killed_part(results: &RunResults) -> Vec<&str> {
    not_run_for(results, NotRunReason::Unfinished)
}

fn not_run_for<'a>(results: &'a RunResults, reason: NotRunReason<'_>) -> Vec<&'a str> {
    results
        .not_run
        .iter()
        .filter(|id| results.not_run_reason(id) == reason)
        .map(String::as_str)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::results::merge::{Part, SuiteCases, merge};

    fn part(dir: &str, index: u32, ids: &[&str], torch: &str, gpu: &str) -> Part {
        let mut results = crate::results::test_support::passed_results(ids);
        results.host = format!("runner-{index}");
        results.environment.gpu_models = vec![gpu.to_string()];
        results.environment.python = Some(crate::environment::PythonEnvironment {
            interpreter: "python3".into(),
            packages: [("torch".to_string(), torch.to_string())].into(),
            ..Default::default()
        });
        Part {
            dir: dir.into(),
            results,
            partition: Some(crate::suite::Partition {
                kind: crate::suite::PartitionKind::Count,
                index,
                total: 2,
            }),
        }
    }

    #[test]
    fn a_merged_run_lists_its_parts_and_where_they_differ() {
        let ids = ["a", "b", "c"];
        let merged = merge(
            vec![
                part("shards/1", 1, &["a"], "2.4.1", "H100 (80.0 GiB)"),
                part("shards/2", 2, &["b"], "2.5.0", "A100 (40.0 GiB)"),
            ],
            Some(SuiteCases {
                name: "s",
                path: std::path::Path::new("s.toml"),
                ids: &ids,
            }),
        )
        .expect("merged");
        let markdown = crate::report::markdown::render(&merged);
        for line in [
            "**Not run by any part**: `c` — no part of this merged run ran it",
            "| part | host | shard | cases | started | finished |",
            "| `shards/2` | `runner-2` | `count:2/2` | `1 passed, 0 failed` | `2026-12-03T00:00:00.000+00:00` | `did not finish` |",
            "Against the first part, `shards/1 (count:1/2)`:",
            "- **`shards/2 (count:2/2)`**: `gpu 0 H100 (80.0 GiB) → A100 (40.0 GiB); torch 2.4.1 → 2.5.0`",
            "**Not comparable**: `GPU models differ: shards/1 (count:1/2) on H100, shards/2 (count:2/2) on A100`; their figures are not comparable, so `oomgate lock --from` refuses this merged run.",
        ] {
            assert!(markdown.contains(line), "{line}\n{markdown}");
        }
        let page = crate::report::html::render(&merged, std::path::Path::new("/nonexistent"));
        for text in [
            "<h2>Parts</h2>",
            "<td>shards/2</td><td>runner-2</td><td>count:2/2</td>",
            "<li><b>shards/2 (count:2/2)</b>: gpu 0 H100 (80.0 GiB) → A100 (40.0 GiB); torch 2.4.1 → 2.5.0</li>",
            "so oomgate lock --from refuses this merged run.",
            "Not run by any part: c",
        ] {
            assert!(page.contains(text), "{text}\n{page}");
        }
    }

    #[test]
    fn one_part_or_parts_alike_add_only_what_is_true() {
        let alone =
            merge(vec![part("shards/1", 1, &["a"], "2.4.1", "H100")], None).expect("merged");
        assert_eq!(of(&alone), None);
        let alike = merge(
            vec![
                part("shards/1", 1, &["a"], "2.4.1", "H100"),
                part("shards/2", 2, &["b"], "2.4.1", "H100"),
            ],
            None,
        )
        .expect("merged");
        let markdown = crate::report::markdown::render(&alike);
        assert!(
            markdown.contains("None: every part ran in the first part's environment."),
            "{markdown}"
        );
        assert!(!markdown.contains("Not comparable"), "{markdown}");
        assert!(!markdown.contains("Not run by any part"), "{markdown}");
    }
}

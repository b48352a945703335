//! Merging parts: order, not-run cases, what each part keeps, and every
//! way parts are refused, with the parts named.

use super::*;
use crate::results::test_support::json;
use crate::results::{CaseStatus, NotRunReason};

/// Results of suite `s` holding these cases (passed, each in its folder),
/// finished, by this oomgate.
fn results(ids: &[&str]) -> RunResults {
    let mut results = crate::results::test_support::passed_results(ids);
    results.finished_at = Some("2026-12-03T00:05:00.000+00:00".into());
    results.oomgate_version = env!("CARGO_PKG_VERSION").into();
    results
}

fn part(dir: &str, index: u32, ids: &[&str]) -> Part {
    Part {
        dir: dir.into(),
        results: results(ids),
        partition: Some(crate::suite::Partition {
            kind: crate::suite::PartitionKind::Count,
            index,
            total: 2,
        }),
    }
}

fn ids(results: &RunResults) -> Vec<&str> {
    results.cases.iter().map(|c| c.id.as_str()).collect()
}

const SUITE_IDS: [&str; 5] = ["a", "b", "c", "d", "e"];

fn suite() -> SuiteCases<'static> {
    SuiteCases {
        name: "s",
        path: Path::new("s.toml"),
        ids: &SUITE_IDS,
    }
}

#[test]
fn parts_merge_in_part_order_or_the_suites() {
    let mut second = part("shards/2", 2, &["b", "d"]);
    second.results.started_at = "2026-12-02T23:59:00.000+00:00".into();
    // Later as text, earlier in time: 00:00 UTC.
    second.results.finished_at = Some("2026-12-03T01:00:00.000+01:00".into());
    second.results.cases[0].status = CaseStatus::Failed;
    second.results.host = "runner-2".into();
    let parts = vec![part("shards/1", 1, &["a", "c"]), second];

    let merged = merge(parts.clone(), None).expect("merged");
    assert_eq!(ids(&merged), ["a", "c", "b", "d"]);
    assert_eq!(merged.merged_from, Some(2));
    assert_eq!(merged.schema, SCHEMA_VERSION);
    assert_eq!(
        merged.summary,
        Summary {
            planned: 4,
            passed: 3,
            failed: 1,
            ..Summary::default()
        }
    );
    // The run spans every part: the earliest start, the latest end.
    assert_eq!(merged.started_at, "2026-12-02T23:59:00.000+00:00");
    assert_eq!(
        merged.finished_at.as_deref(),
        Some("2026-12-03T00:05:00.000+00:00")
    );
    // The first part's machine; every part's own in `parts`.
    assert_eq!(merged.host, "h");
    let hosts: Vec<&str> = merged.parts.iter().map(|p| p.host.as_str()).collect();
    assert_eq!(hosts, ["h", "runner-2"]);
    assert_eq!(merged.parts[1].cases, ["b", "d"]);
    assert_eq!(merged.parts[1].name(), "shards/2 (count:2/2)");
    assert!(merged.not_run.is_empty());

    let ordered = merge(parts, Some(suite())).expect("merged");
    assert_eq!(ids(&ordered), ["a", "b", "c", "d"]);
    // The suite's case no part ran is not run, and counted as planned.
    assert_eq!(ordered.not_run, ["e"]);
    assert_eq!(ordered.not_run_reason("e"), NotRunReason::NoPart);
    assert_eq!(ordered.summary.planned, 5);
}

#[test]
fn a_part_that_did_not_finish_keeps_its_own_cases_not_run() {
    let mut stopped = part("shards/2", 2, &["b"]);
    stopped.results.not_run = vec!["d".into()];
    stopped.results.summary.planned = 2;
    stopped.results.interrupted = true;
    stopped.results.finished_at = None;
    let merged = merge(
        vec![part("shards/1", 1, &["a", "c"]), stopped],
        Some(suite()),
    )
    .expect("merged");
    assert_eq!(merged.not_run, ["d", "e"]);
    assert_eq!(merged.not_run_reason("d"), NotRunReason::Interrupted);
    assert_eq!(merged.not_run_reason("e"), NotRunReason::NoPart);
    assert!(merged.interrupted);
    assert_eq!(merged.finished_at, None);
    assert_eq!(merged.summary.planned, 5);
}

/// Regression (issue 20): a shard whose oomgate was killed merged green,
/// its case in flight `running` and the cases it never reached missing.
#[test]
fn a_killed_part_gives_its_finished_cases_and_the_rest_not_run() {
    // Killed while `d` ran, before `e` started: a checkpoint.
    let killed = || {
        let mut killed = part("shards/2", 2, &["b", "d"]);
        killed.results.cases[1].status = CaseStatus::Running;
        killed.results.finished_at = None;
        killed.results.summary.planned = 3;
        killed.results.planned_cases = vec!["b".into(), "d".into(), "e".into()];
        killed
    };
    for with_suite in [None, Some(suite())] {
        let merged =
            merge(vec![part("shards/1", 1, &["a", "c"]), killed()], with_suite).expect("merged");
        assert_eq!(merged.not_run, ["d", "e"], "{with_suite:?}");
        assert!(
            merged.cases.iter().all(|c| c.status != CaseStatus::Running),
            "{with_suite:?}"
        );
        for id in ["d", "e"] {
            assert_eq!(merged.not_run_reason(id), NotRunReason::Unfinished);
        }
        assert_eq!(merged.finished_at, None);
        assert_eq!(merged.summary.planned, 5);
        assert_eq!(merged.summary.passed, 3);
        assert!(merged.planned_cases.is_empty());
        assert_eq!(merged.parts[1].cases, ["b"]);
        assert_eq!(merged.parts[1].not_run, ["d", "e"]);
        assert_eq!(
            unfinished_notes(&merged.parts),
            [
                "part shards/2 (count:2/2) did not finish (its results.json has no finished_at: its oomgate was killed?): 1 finished case(s) kept, 2 listed as not run"
            ]
        );
    }
    assert_eq!(
        ids(&merge(
            vec![part("shards/1", 1, &["a", "c"]), killed()],
            Some(suite())
        )
        .expect("merged")),
        ["a", "b", "c"]
    );
    // A checkpoint that does not name its planned cases (an older
    // oomgate's): the case in flight is not run, and the note says how many
    // more only the suite can name.
    let mut unnamed = killed();
    unnamed.results.planned_cases.clear();
    let merged = merge(vec![unnamed], None).expect("merged");
    assert_eq!(merged.not_run, ["d"]);
    assert_eq!(
        unfinished_notes(&merged.parts),
        [
            "part shards/2 (count:2/2) did not finish (its results.json has no finished_at: its oomgate was killed?): 1 finished case(s) kept, 1 listed as not run; 1 more case(s) it planned are not named in it: give --suite to list them as not run"
        ]
    );
    // A killed shard's planned cases are its own: another part holding one
    // overlaps it (the shard run again, given beside the killed one).
    assert!(matches!(
        merge(vec![killed(), part("shards/3", 2, &["e"])], None),
        Err(MergeError::Overlap { .. })
    ));
}

#[test]
fn one_part_merged_alone_is_that_part() {
    let alone = part("out", 1, &["a", "b"]);
    let merged = merge(vec![alone.clone()], None).expect("merged");
    let plain = |mut results: RunResults| {
        results.merged_from = None;
        results.parts.clear();
        // A merge is a run of its own, with its own id.
        results.run_id = None;
        json(&results)
    };
    assert_eq!(plain(merged), plain(alone.results));
}

#[test]
fn a_merge_is_one_run_whatever_the_order_of_its_parts() {
    let with_id = |dir: &str, shard: u32, cases: &[&str], id: &str| {
        let mut part = part(dir, shard, cases);
        part.results.run_id = Some(id.into());
        part
    };
    let one = merge(
        vec![
            with_id("shards/1", 1, &["a"], "id-1"),
            with_id("shards/2", 2, &["b"], "id-2"),
        ],
        None,
    )
    .expect("merged");
    let again = merge(
        vec![
            with_id("shards/2", 2, &["b"], "id-2"),
            with_id("shards/1", 1, &["a"], "id-1"),
        ],
        None,
    )
    .expect("merged");
    assert!(one.run_id.is_some());
    assert_eq!(one.run_id, again.run_id);
    assert_ne!(one.run_id.as_deref(), Some("id-1"));
}

#[test]
fn overlapping_parts_are_refused_naming_the_case_and_both_parts() {
    let refused = merge(
        vec![
            part("shards/1", 1, &["a", "b"]),
            part("shards/2", 2, &["c", "b"]),
        ],
        None,
    )
    .expect_err("overlap");
    assert_eq!(
        refused.to_string(),
        "case `b` is in two parts, shards/1 (count:1/2) and shards/2 (count:2/2): each case must come from one shard (a part given twice, or shards of different partitions?)"
    );
    // A case one part ran and another planned but did not run overlaps too.
    let mut planned = part("shards/2", 2, &["c"]);
    planned.results.not_run = vec!["a".into()];
    assert!(matches!(
        merge(vec![part("shards/1", 1, &["a"]), planned], None),
        Err(MergeError::Overlap { .. })
    ));
}

#[test]
fn parts_of_other_suites_or_schemas_are_refused() {
    let mut other = part("shards/2", 2, &["b"]);
    other.results.suite.name = "train".into();
    let refused = merge(vec![part("shards/1", 1, &["a"]), other], None).expect_err("suites");
    assert_eq!(
        refused.to_string(),
        "shards/1 (count:1/2) holds results of suite `s`, shards/2 (count:2/2) of suite `train`: merge the shards of one suite"
    );
    let mut older = part("shards/2", 2, &["b"]);
    older.results.schema = 2;
    let refused = merge(vec![part("shards/1", 1, &["a"]), older], None).expect_err("schemas");
    assert!(
        refused.to_string().starts_with(&format!(
            "shards/1 (count:1/2) has results schema {SCHEMA_VERSION}, shards/2 (count:2/2) schema 2"
        )),
        "{refused}"
    );
    let refused =
        merge(vec![part("shards/1", 1, &["a", "z"])], Some(suite())).expect_err("unknown");
    assert_eq!(
        refused.to_string(),
        "shards/1 (count:1/2) has cases suite `s` (s.toml) does not: z; merge with the suite the shards ran"
    );
    let mut renamed = suite();
    renamed.name = "t";
    assert!(matches!(
        merge(vec![part("shards/1", 1, &["a"])], Some(renamed)),
        Err(MergeError::NotThisSuite { .. })
    ));
    let mut same_folder = part("shards/2", 2, &["b"]);
    same_folder.results.cases[0].dir = "cases/a".into();
    assert!(matches!(
        merge(vec![part("shards/1", 1, &["a"]), same_folder], None),
        Err(MergeError::SameFolder { .. })
    ));
    let mut no_folders = (part("shards/1", 1, &["a"]), part("shards/2", 2, &["b"]));
    no_folders.0.results.cases[0].dir = PathBuf::new();
    no_folders.1.results.cases[0].dir = PathBuf::new();
    assert!(merge(vec![no_folders.0, no_folders.1], None).is_ok());
    assert_eq!(merge(Vec::new(), None).err(), Some(MergeError::NoParts));
}

#[test]
fn a_part_is_read_with_its_partition_or_refused_saying_why() {
    let text = json(&results(&["a"]));
    let read = read_part("out".into(), &text).expect("a part");
    assert_eq!(read.partition, None);
    assert_eq!(ids(&read.results), ["a"]);
    // The field a partitioned run adds, read whether or not this oomgate
    // writes it (set, not added: an oomgate with --partition writes null).
    let with = |partition: serde_json::Value| {
        let mut value: serde_json::Value = serde_json::from_str(&text).expect("json");
        value["partition"] = partition;
        value.to_string()
    };
    let hashed = with(serde_json::json!({"kind": "hash", "index": 3, "total": 4}));
    let read = read_part("out".into(), &hashed).expect("a part");
    assert_eq!(
        read.partition.map(|p| p.to_string()).as_deref(),
        Some("hash:3/4")
    );
    let read = read_part("out".into(), &with(serde_json::Value::Null)).expect("a part");
    assert_eq!(read.partition, None);

    for (text, why) in [
        (
            "{",
            "not an oomgate results file: EOF while parsing an object at line 1 column 1",
        ),
        (
            r#"{"schema": 99}"#,
            "results schema 99 is not one this oomgate reads",
        ),
        (
            r#"{"schema": 3, "merged_from": 2}"#,
            "these are merged results (2 parts)",
        ),
        (
            r#"{"schema": 3, "suite": 1}"#,
            "not readable as oomgate results (schema 3): invalid type: integer `1`",
        ),
    ] {
        let refused = read_part("out".into(), text)
            .expect_err("refused")
            .to_string();
        assert!(refused.starts_with(why), "{refused}");
    }
}

#[test]
fn differences_between_parts_are_listed_against_the_first() {
    let mut second = part("shards/2", 2, &["b"]);
    second.results.environment.driver_version = Some("560.1".into());
    second.results.environment.gpu_models = vec!["A100 (40.0 GiB)".into()];
    let mut first = part("shards/1", 1, &["a"]);
    first.results.environment.driver_version = Some("550.54.15".into());
    first.results.environment.gpu_models = vec!["H100 (80.0 GiB)".into()];
    let same = part("shards/3", 2, &["c"]);
    let mut merged = merge(vec![first, second], None).expect("merged");
    let drift = part_drift(&merged);
    assert_eq!(drift.len(), 1);
    assert_eq!(drift[0].part, "shards/2 (count:2/2)");
    let lines: Vec<String> = drift[0].drift.iter().map(ToString::to_string).collect();
    assert_eq!(
        lines,
        [
            "gpu 0 H100 (80.0 GiB) → A100 (40.0 GiB)",
            "driver 550.54.15 → 560.1"
        ]
    );
    assert_eq!(
        incomparable_parts(&merged),
        ["GPU models differ: shards/1 (count:1/2) on H100, shards/2 (count:2/2) on A100"]
    );
    merged.parts.truncate(1);
    assert!(part_drift(&merged).is_empty() && incomparable_parts(&merged).is_empty());
    let alike = merge(vec![part("shards/1", 1, &["a"]), same], None).expect("merged");
    assert!(part_drift(&alike).is_empty());
}

#[test]
fn recorded_partitions_say_which_shards_are_missing_or_mixed() {
    let info = |dir: &str, partition: Option<(&str, u32, u32)>| PartInfo {
        partition: partition.map(|(kind, index, total)| crate::suite::Partition {
            kind: match kind {
                "hash" => crate::suite::PartitionKind::Hash,
                _ => crate::suite::PartitionKind::Count,
            },
            index,
            total,
        }),
        ..part_info(&part(dir, 1, &[]))
    };
    let all = [
        info("s1", Some(("count", 1, 3))),
        info("s2", Some(("count", 2, 3))),
        info("s3", Some(("count", 3, 3))),
    ];
    assert_eq!(partition_notes(&all), Vec::<String>::new());
    assert_eq!(
        partition_notes(&[all[0].clone(), all[2].clone()]),
        [
            "the parts are 2 of the 3 shards of count:M/3: shard(s) 2 missing; with --suite their cases are listed as not run"
        ]
    );
    assert_eq!(
        partition_notes(&[all[0].clone(), info("h2", Some(("hash", 2, 3)))]),
        [
            "the parts are shards of different splits: s1 (count:1/3) and h2 (hash:2/3); each shard of one split runs its cases once, shards of two do not"
        ]
    );
    assert_eq!(
        partition_notes(&[
            all[0].clone(),
            all[1].clone(),
            all[2].clone(),
            info("again", Some(("count", 2, 3)))
        ]),
        ["shard count:2/3 is given twice (again is one of them)"]
    );
    // Without partitions, nothing is known.
    assert!(partition_notes(&[info("a", None), info("b", None)]).is_empty());
}

/// A suite of one case `a`, as loaded from `folder`.
fn defined(folder: &str, text: &str) -> crate::suite::Suite {
    let source = format!("[suite]\nname = \"s\"\n\n[[case]]\nname = \"a\"\n{text}");
    crate::suite::parse(&source, Path::new("suite.toml"), Path::new(folder))
        .unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn a_definition_is_the_same_in_any_checkout_and_names_what_differs() {
    let of = |folder: &str, text: &str| {
        let suite = defined(folder, text);
        crate::results::definition::of(&suite.cases[0], &suite.workdir)
    };
    let base = "command = [\"./train.sh\", \"--x\", \"1\"]\ncwd = \"work\"\n";
    // Two runners' checkouts in other folders agree.
    assert_eq!(of("/home/runner/repo", base), of("/builds/repo", base));
    let tightened = format!("{base}budget = {{ host = \"16 MiB\" }}\n");
    assert_eq!(
        crate::results::definition::differences(&of("/r", base), &of("/r", &tightened)),
        ["budget.host"]
    );
    let moved = "command = [\"./train.sh\", \"--x\", \"2\"]\ncwd = \"other\"\n";
    assert_eq!(
        crate::results::definition::differences(&of("/r", base), &of("/r", moved)),
        ["command", "cwd"]
    );
    // A secret's value is hashed in its recorded form only.
    let secret = |token: &str| of("/r", &format!("{base}env = {{ HF_TOKEN = \"{token}\" }}\n"));
    assert_ne!(
        secret("hf_aaaaaaaaaaaaaaaaaaaa"),
        secret("hf_bbbbbbbbbbbbbbbbbbbb")
    );
}

#[test]
fn a_passed_case_is_judged_again_under_tighter_limits_and_another_command_fails() {
    let v1 = defined(
        "/r",
        "command = [\"true\"]\nbudget = { host = \"1 GiB\" }\n",
    );
    let v2 = defined(
        "/r",
        "command = [\"true\"]\nbudget = { host = \"16 MiB\" }\n",
    );
    let v3 = defined(
        "/r",
        "command = [\"false\"]\nbudget = { host = \"1 GiB\" }\n",
    );
    let ran = |status: CaseStatus| {
        let mut part = part("shards/1", 1, &["a"]);
        let case = &mut part.results.cases[0];
        case.status = status;
        case.host.peak_bytes = Some(48 << 20);
        case.definition = crate::results::definition::of(&v1.cases[0], &v1.workdir);
        part
    };
    let held = |suite: &crate::suite::Suite, status: CaseStatus| {
        let mut parts = vec![ran(status)];
        let notes = hold_to_definitions(
            &mut parts,
            &suite.cases,
            &suite.workdir,
            &suite.path,
            |case, result| {
                let verdict = crate::judge::judge_limits_again(case, result);
                crate::report::words::word_case(result, &verdict, None);
            },
        );
        (parts.remove(0).results.cases.remove(0), notes)
    };
    let (same, notes) = held(&v1, CaseStatus::Passed);
    assert_eq!((same.status, notes.len()), (CaseStatus::Passed, 0));

    let (tightened, notes) = held(&v2, CaseStatus::Passed);
    assert_eq!(tightened.status, CaseStatus::Failed);
    assert_eq!(
        tightened.failure_kind,
        Some(crate::vocabulary::FailureType::Budget)
    );
    assert!(notes[0].contains("judged again"), "{notes:?}");
    // A run that failed under its own limits is not judged again.
    let (failed, _) = held(&v2, CaseStatus::Failed);
    assert_eq!(failed.status, CaseStatus::Failed);

    let (other, _) = held(&v3, CaseStatus::Passed);
    assert_eq!(other.status, CaseStatus::Failed);
    assert_eq!(
        other.failure_kind,
        Some(crate::vocabulary::FailureType::OtherDefinition)
    );
    assert!(
        other
            .message
            .as_deref()
            .unwrap_or_default()
            .contains("its command differs"),
        "{:?}",
        other.message
    );
}

//! The history against a real SQLite file.

use std::collections::BTreeMap;

use super::entry::{CaseEntry, Figure, RecordedBy, RunEntry};
use super::*;

fn run(id: &str, started_ms: i64, branch: &str, gpu_peak: f64) -> RunEntry {
    let mut figures = BTreeMap::new();
    figures.insert(
        entry::names::GPU_PEAK.to_string(),
        Figure {
            value: gpu_peak,
            method: Some("sampled@50ms".into()),
        },
    );
    figures.insert(
        entry::names::HOST_PEAK.to_string(),
        Figure {
            value: 1e9,
            method: Some("cgroup-v1".into()),
        },
    );
    RunEntry {
        run_id: id.into(),
        started_at: "2026-12-01T00:00:00.000+00:00".into(),
        started_ms,
        recorded_at: "2026-12-01T00:10:00.000+00:00".into(),
        recorded_by: RecordedBy::Run,
        suite: "train".into(),
        suite_fingerprint: "f".into(),
        commit: Some(format!("c-{id}")),
        branch: Some(branch.into()),
        base_branch: None,
        ci_system: None,
        ci_run_id: None,
        ci_run_url: None,
        host: "runner-1".into(),
        driver_version: Some("550.54".into()),
        cuda_version: Some("12.4".into()),
        gpu_models: vec!["NVIDIA H100 80GB HBM3 (79.6 GiB)".into()],
        packages: BTreeMap::from([("torch".to_string(), "2.5.1".to_string())]),
        oomgate_version: "0.1.0".into(),
        passed: true,
        interrupted: false,
        cases_run: 2,
        cases_failed: 0,
        cases: vec![
            CaseEntry {
                id: "train-bs64".into(),
                testbed: Some("NVIDIA H100 80GB HBM3 ×1".into()),
                status: "passed".into(),
                failure_kind: None,
                wall_time_s: 12.5,
                figures: figures.clone(),
                tolerances: Some(serde_json::json!({"gpu": "5%"})),
                checks: serde_json::json!([{"kind": "budget"}]),
            },
            CaseEntry {
                id: "host-only".into(),
                testbed: None,
                status: "failed".into(),
                failure_kind: Some("budget".into()),
                wall_time_s: 1.0,
                figures: BTreeMap::new(),
                tolerances: None,
                checks: serde_json::json!([]),
            },
        ],
    }
}

fn at(dir: &tempfile::TempDir) -> Location {
    Location::Sqlite(dir.path().join("history.sqlite"))
}

#[test]
fn a_run_is_read_back_as_recorded_and_recorded_once() {
    let dir = tempfile::tempdir().expect("a folder");
    let location = at(&dir);
    let mut store = open(&location, true).expect("a new history");
    let first = run("r1", 1_000, "main", 4e9);
    assert_eq!(store.record(&first).expect("recorded"), Recorded::New);
    assert_eq!(store.record(&first).expect("again"), Recorded::Already);
    drop(store);
    let mut store = open(&location, false).expect("the history again");
    assert_eq!(store.schema_version().expect("a version"), SCHEMA_VERSION);
    let runs = store
        .runs(&Query {
            details: true,
            ..Query::default()
        })
        .expect("runs");
    assert_eq!(runs, vec![first]);
}

#[test]
fn runs_come_oldest_first_and_filter_by_branch_case_and_testbed() {
    let dir = tempfile::tempdir().expect("a folder");
    let mut store = open(&at(&dir), true).expect("a new history");
    for (id, ms, branch) in [
        ("b", 2_000, "main"),
        ("a", 1_000, "main"),
        ("c", 3_000, "topic"),
    ] {
        store.record(&run(id, ms, branch, 1e9)).expect("recorded");
    }
    let ids = |runs: Vec<RunEntry>| runs.into_iter().map(|r| r.run_id).collect::<Vec<_>>();
    let all = store.runs(&Query::default()).expect("runs");
    assert_eq!(ids(all), ["a", "b", "c"]);
    let last_two = store
        .runs(&Query {
            last: Some(2),
            ..Query::default()
        })
        .expect("runs");
    assert_eq!(ids(last_two), ["b", "c"]);
    let main = store
        .runs(&Query {
            branch: Some("main".into()),
            ..Query::default()
        })
        .expect("runs");
    assert_eq!(ids(main), ["a", "b"]);
    let one_case = store
        .runs(&Query {
            case: Some("train-bs64".into()),
            ..Query::default()
        })
        .expect("runs");
    assert!(
        one_case
            .iter()
            .all(|r| r.cases.len() == 1 && r.cases[0].id == "train-bs64")
    );
    assert_eq!(one_case[0].cases[0].figures.len(), 2);
    // Without details, no checks are read.
    assert_eq!(one_case[0].cases[0].checks, serde_json::Value::Null);
    let host_only = store
        .runs(&Query {
            testbed: Some(String::new()),
            ..Query::default()
        })
        .expect("runs");
    assert!(
        host_only
            .iter()
            .all(|r| r.cases.len() == 1 && r.cases[0].testbed.is_none())
    );
}

#[test]
fn prune_removes_old_runs_with_their_cases_and_figures() {
    let dir = tempfile::tempdir().expect("a folder");
    let mut store = open(&at(&dir), true).expect("a new history");
    store
        .record(&run("old", 1_000, "main", 1e9))
        .expect("recorded");
    store
        .record(&run("new", 5_000, "main", 1e9))
        .expect("recorded");
    assert_eq!(store.prune(2_000).expect("pruned"), 1);
    let runs = store.runs(&Query::default()).expect("runs");
    assert_eq!(runs.len(), 1);
    // Recording the pruned run again is a new run: nothing of it was left.
    assert_eq!(
        store
            .record(&run("old", 1_000, "main", 1e9))
            .expect("recorded"),
        Recorded::New
    );
}

#[test]
fn a_file_that_is_no_history_is_refused_and_left_as_it_is() {
    let dir = tempfile::tempdir().expect("a folder");
    let path = dir.path().join("notes.txt");
    std::fs::write(&path, "my notes, not a database\n").expect("written");
    let error = open(&Location::Sqlite(path.clone()), true)
        .err()
        .expect("refused");
    assert!(matches!(error, HistoryError::Foreign { .. }), "{error}");
    assert!(
        error.to_string().contains("not an SQLite database"),
        "{error}"
    );
    assert_eq!(
        std::fs::read_to_string(&path).expect("read"),
        "my notes, not a database\n"
    );

    let other = dir.path().join("app.db");
    {
        let connection = rusqlite::Connection::open(&other).expect("sqlite");
        connection
            .execute_batch("CREATE TABLE users (name TEXT); INSERT INTO users VALUES ('ada');")
            .expect("a table");
    }
    let before = std::fs::read(&other).expect("read");
    let error = open(&Location::Sqlite(other.clone()), true)
        .err()
        .expect("refused");
    assert!(error.to_string().contains("its tables: users"), "{error}");
    assert_eq!(std::fs::read(&other).expect("read"), before);

    let missing = dir.path().join("missing.sqlite");
    let error = open(&Location::Sqlite(missing.clone()), false)
        .err()
        .expect("no history");
    assert!(
        error.to_string().contains("no history there yet"),
        "{error}"
    );
    assert!(!missing.exists());
}

#[test]
fn a_damaged_history_is_refused() {
    let dir = tempfile::tempdir().expect("a folder");
    let location = at(&dir);
    let Location::Sqlite(path) = &location else {
        unreachable!()
    };
    {
        let mut store = open(&location, true).expect("a new history");
        store
            .record(&run("r1", 1_000, "main", 1e9))
            .expect("recorded");
    }
    // Checkpoint the WAL into the file, then damage the page after the
    // header.
    {
        let connection = rusqlite::Connection::open(path).expect("sqlite");
        connection
            .pragma_update(None, "journal_mode", "DELETE")
            .expect("journal mode");
    }
    let mut bytes = std::fs::read(path).expect("read");
    for byte in bytes.iter_mut().skip(100).take(4000) {
        *byte = 0xA5;
    }
    std::fs::write(path, &bytes).expect("written");
    let refused =
        open(&location, false).and_then(|mut store| store.runs(&Query::default()).map(|_| ()));
    let error = refused.expect_err("refused");
    assert!(
        error.to_string().contains("damaged") || error.to_string().contains("not an SQLite"),
        "{error}"
    );
}

#[test]
fn a_newer_schema_is_refused_with_a_clear_error() {
    let dir = tempfile::tempdir().expect("a folder");
    let location = at(&dir);
    drop(open(&location, true).expect("a new history"));
    let Location::Sqlite(path) = &location else {
        unreachable!()
    };
    {
        let connection = rusqlite::Connection::open(path).expect("sqlite");
        connection
            .execute(
                "INSERT INTO oomgate_history VALUES (?1, '9.9.9', 'later')",
                [SCHEMA_VERSION + 1],
            )
            .expect("a newer version");
    }
    let error = open(&location, true).err().expect("refused");
    assert!(matches!(error, HistoryError::Newer { .. }), "{error}");
    assert!(
        error.to_string().contains("newer than this oomgate's"),
        "{error}"
    );
}

#[test]
fn four_writers_at_once_lose_no_run() {
    let dir = tempfile::tempdir().expect("a folder");
    let location = at(&dir);
    std::thread::scope(|scope| {
        for writer in 0..4 {
            let location = location.clone();
            scope.spawn(move || {
                // Each its own connection, creating and migrating at once.
                let mut store = open(&location, true).expect("the history");
                for n in 0..10 {
                    let id = format!("w{writer}-{n}");
                    store
                        .record(&run(&id, i64::from(writer * 100 + n), "main", 1e9))
                        .expect("recorded");
                }
            });
        }
    });
    let mut store = open(&location, false).expect("the history");
    assert_eq!(store.runs(&Query::default()).expect("runs").len(), 40);
}

#[test]
fn locations() {
    assert_eq!(
        Location::parse("sqlite:ci/history.sqlite").ok(),
        Some(Location::Sqlite("ci/history.sqlite".into()))
    );
    assert_eq!(
        Location::parse("history.sqlite").ok(),
        Some(Location::Sqlite("history.sqlite".into()))
    );
    assert!(matches!(
        Location::parse("postgres://u:pw@db/h"),
        Ok(Location::Postgres(_))
    ));
    assert!(Location::parse("mysql://db/h").is_err());
    assert!(Location::parse("sqlite:").is_err());
    assert_eq!(
        Location::Postgres(
            "postgresql://ci:s3cr3t-pass@db.internal:5432/oomgate?sslmode=require".into()
        )
        .describe(),
        "postgresql://ci:***@db.internal:5432/oomgate?sslmode=require"
    );
    assert_eq!(
        Location::parse("sqlite:h.sqlite")
            .map(|l| l.relative_to(std::path::Path::new("/suites")))
            .ok(),
        Some(Location::Sqlite("/suites/h.sqlite".into()))
    );
}

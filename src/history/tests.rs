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

/// The variable that names the test PostgreSQL server (`.ci/run` starts
/// one: scripts/postgres-throwaway.sh).
const POSTGRES_VAR: &str = "OOMGATE_TEST_POSTGRES";

/// A fresh, empty history in the test server (a schema of its own), or
/// `None` where there is no server: said loudly, and a failure under
/// `CI=true`, where `.ci/run` starts one.
fn postgres() -> Option<Location> {
    let Some(url) = std::env::var(POSTGRES_VAR).ok().filter(|u| !u.is_empty()) else {
        let required = std::env::var("CI").ok().as_deref() == Some("true")
            || std::env::var("OOMGATE_REQUIRE_POSTGRES").ok().as_deref() == Some("1");
        assert!(
            !required,
            "{POSTGRES_VAR} is not set under CI=true (or OOMGATE_REQUIRE_POSTGRES=1): .ci/run starts a PostgreSQL server for these tests"
        );
        eprintln!(
            "SKIPPED the PostgreSQL half of this test: {POSTGRES_VAR} is not set (eval \"$(scripts/postgres-throwaway.sh start)\" starts a server)"
        );
        return None;
    };
    let schema = format!("t_{}", uuid::Uuid::new_v4().simple());
    let mut config: ::postgres::Config = url.parse().expect("the test server's URL");
    if let Ok(password) = std::env::var("PGPASSWORD") {
        config.password(password);
    }
    let mut client = config.connect(::postgres::NoTls).expect("the test server");
    client
        .batch_execute(&format!("CREATE SCHEMA {schema}"))
        .expect("a schema");
    let joiner = if url.contains('?') { '&' } else { '?' };
    Some(Location::Postgres(format!(
        "{url}{joiner}options=-csearch_path%3D{schema}"
    )))
}

/// Run `test` on a new SQLite history and, where there is a server, on a
/// new PostgreSQL one.
fn on_every_store(test: impl Fn(&Location)) {
    let dir = tempfile::tempdir().expect("a folder");
    test(&at(&dir));
    if let Some(location) = postgres() {
        test(&location);
    }
}

#[test]
fn a_run_is_read_back_as_recorded_and_recorded_once() {
    on_every_store(read_back);
}

fn read_back(location: &Location) {
    let location = location.clone();
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
fn a_bisect_step_is_kept_once_and_found_by_its_key() {
    on_every_store(bisect_steps);
}

fn bisect_steps(location: &Location) {
    let mut store = open(location, true).expect("a new history");
    assert_eq!(store.bisect_step("k1").expect("read"), None);
    let step = |results: &str| crate::history::BisectStep {
        key: "k1".into(),
        suite: "suite.toml".into(),
        case_id: "train".into(),
        candidate: "0123abcd".into(),
        results: results.into(),
    };
    store
        .keep_bisect_step(&step("{\"first\": true}"))
        .expect("kept");
    store
        .keep_bisect_step(&step("{\"second\": true}"))
        .expect("kept again");
    drop(store);
    let mut store = open(location, false).expect("the history again");
    assert_eq!(
        store.bisect_step("k1").expect("read"),
        Some("{\"first\": true}".into())
    );
    assert_eq!(store.bisect_step("k2").expect("read"), None);
    // A bisect's steps are no runs of the suite.
    assert!(store.runs(&Query::default()).expect("runs").is_empty());
}

#[test]
fn runs_come_oldest_first_and_filter_by_branch_case_and_testbed() {
    on_every_store(filters);
}

fn filters(location: &Location) {
    let mut store = open(location, true).expect("a new history");
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
    on_every_store(prunes);
}

fn prunes(location: &Location) {
    let mut store = open(location, true).expect("a new history");
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
    on_every_store(four_writers);
}

fn four_writers(location: &Location) {
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
    let mut store = open(location, false).expect("the history");
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

#[test]
fn a_postgres_database_with_tables_of_its_own_is_refused() {
    let Some(location) = postgres() else {
        return;
    };
    let Location::Postgres(url) = &location else {
        unreachable!()
    };
    let mut config: ::postgres::Config = url.parse().expect("the URL");
    if let Ok(password) = std::env::var("PGPASSWORD") {
        config.password(password);
    }
    let mut client = config.connect(::postgres::NoTls).expect("the server");
    client
        .batch_execute("CREATE TABLE runs (id INTEGER); INSERT INTO runs VALUES (1)")
        .expect("an application's table");
    let error = open(&location, true).err().expect("refused");
    assert!(error.to_string().contains("not oomgate's"), "{error}");
    let rows: i64 = client
        .query_one("SELECT count(*) FROM runs", &[])
        .expect("its table is untouched")
        .get(0);
    assert_eq!(rows, 1);
}

#[test]
fn a_newer_postgres_schema_is_refused() {
    let Some(location) = postgres() else {
        return;
    };
    drop(open(&location, true).expect("a new history"));
    let Location::Postgres(url) = &location else {
        unreachable!()
    };
    let mut config: ::postgres::Config = url.parse().expect("the URL");
    if let Ok(password) = std::env::var("PGPASSWORD") {
        config.password(password);
    }
    let mut client = config.connect(::postgres::NoTls).expect("the server");
    client
        .execute(
            "INSERT INTO oomgate_history VALUES ($1, '9.9.9', 'later')",
            &[&(SCHEMA_VERSION as i32 + 1)],
        )
        .expect("a newer version");
    let error = open(&location, true).err().expect("refused");
    assert!(matches!(error, HistoryError::Newer { .. }), "{error}");
}

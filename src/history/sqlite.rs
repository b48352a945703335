//! The history in an SQLite file: SQLite built into oomgate (rusqlite,
//! bundled), in WAL mode with a busy timeout, so that several local
//! processes may record into one file at once.
//!
//! A file that is not an oomgate history — not SQLite at all, or SQLite
//! with other tables — is refused and left as it is. Migrations run in
//! one `BEGIN IMMEDIATE` transaction: SQLite's write lock, so two
//! processes never migrate at once, and the second sees the first's work.

use std::collections::HashMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::Duration;

use rusqlite::{
    Connection, OpenFlags, OptionalExtension, Row, ToSql, TransactionBehavior, named_params, params,
};

use super::entry::{CaseEntry, Figure, RecordedBy, RunEntry, json_text, now_text};
use super::schema::{Dialect, KNOWN, MARKER_TABLE, MIGRATIONS, for_dialect};
use super::{Acceptance, HistoryError, Point, Query, Recorded, RunHead, Series, Store};

/// How long a writer waits for another's lock before it gives up.
const BUSY_TIMEOUT: Duration = Duration::from_secs(60);

/// The runs a query chooses, newest first (they are read oldest first).
const CHOSEN_RUNS: &str = "SELECT run_key FROM runs
     WHERE (:suite IS NULL OR suite = :suite) AND (:branch IS NULL OR branch = :branch)
       AND (:since IS NULL OR started_ms >= :since)
     ORDER BY started_ms DESC, run_id DESC LIMIT :limit";

/// The parameters of [`CHOSEN_RUNS`].
fn chosen<'q>(query: &'q Query, limit: &'q i64) -> Vec<(&'static str, &'q dyn ToSql)> {
    vec![
        (":suite", &query.suite),
        (":branch", &query.branch),
        (":limit", limit),
        (":since", &query.since_ms),
    ]
}

/// The first 16 bytes of every SQLite database file.
const HEADER: &[u8; 16] = b"SQLite format 3\0";

pub(super) struct SqliteStore {
    path: PathBuf,
    connection: Connection,
}

impl SqliteStore {
    pub(super) fn open(path: &Path, create: bool) -> Result<SqliteStore, HistoryError> {
        let location = format!("sqlite:{}", path.display());
        let foreign = |why: String| HistoryError::Foreign {
            location: location.clone(),
            why,
        };
        let existed = match std::fs::metadata(path) {
            Ok(meta) if meta.is_dir() => return Err(foreign("is a folder".into())),
            Ok(meta) => {
                if meta.len() > 0 {
                    let mut head = [0u8; 16];
                    let read =
                        std::fs::File::open(path).and_then(|mut file| file.read_exact(&mut head));
                    match read {
                        Ok(()) if &head == HEADER => {}
                        Ok(()) | Err(_) => {
                            return Err(foreign(
                                "is not an SQLite database (it does not start with SQLite's header)"
                                    .into(),
                            ));
                        }
                    }
                }
                true
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                if !create {
                    return Err(HistoryError::Database {
                        location,
                        message: "no history there yet (a run with --history records the first)"
                            .into(),
                    });
                }
                false
            }
            Err(e) => {
                return Err(HistoryError::Database {
                    location,
                    message: e.to_string(),
                });
            }
        };
        let mut flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        if !existed {
            flags |= OpenFlags::SQLITE_OPEN_CREATE;
        }
        let connection =
            Connection::open_with_flags(path, flags).map_err(|e| database(&location, &e))?;
        let mut store = SqliteStore {
            path: path.to_path_buf(),
            connection,
        };
        store.prepare()?;
        Ok(store)
    }

    fn error(&self, error: &rusqlite::Error) -> HistoryError {
        database(&self.location(), error)
    }

    /// The connection's settings, the file checked to be a history (or
    /// empty), and the schema migrated.
    fn prepare(&mut self) -> Result<(), HistoryError> {
        let c = &self.connection;
        c.busy_timeout(BUSY_TIMEOUT).map_err(|e| self.error(&e))?;
        // A damaged file fails here, on its first read.
        let tables = self.tables()?;
        if !tables.is_empty() && !tables.iter().any(|t| t == MARKER_TABLE) {
            return Err(HistoryError::Foreign {
                location: self.location(),
                why: format!(
                    "is an SQLite database of something else (its tables: {})",
                    tables.join(", ")
                ),
            });
        }
        let c = &self.connection;
        // WAL: readers never block the writer, writers queue on the lock.
        // Switching a new file to it takes the file whole, which SQLite
        // refuses at once (no busy handler) while another process does.
        busy_retry(|| {
            c.pragma_update_and_check(None, "journal_mode", "WAL", |row| row.get::<_, String>(0))
        })
        .map_err(|e| self.error(&e))?;
        c.pragma_update(None, "synchronous", "NORMAL")
            .map_err(|e| self.error(&e))?;
        c.pragma_update(None, "foreign_keys", "ON")
            .map_err(|e| self.error(&e))?;
        self.migrate()
    }

    fn tables(&self) -> Result<Vec<String>, HistoryError> {
        busy_retry(|| {
            let mut statement = self
                .connection
                .prepare("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")?;
            statement
                .query_map([], |row| row.get::<_, String>(0))?
                .collect::<Result<Vec<String>, _>>()
        })
        .map_err(|e| self.error(&e))
    }

    /// Apply the migrations this history lacks, under SQLite's write lock.
    fn migrate(&mut self) -> Result<(), HistoryError> {
        let found =
            busy_retry(|| migrate_once(&mut self.connection)).map_err(|e| self.error(&e))?;
        if found > KNOWN {
            return Err(HistoryError::Newer {
                location: self.location(),
                found,
                known: KNOWN,
            });
        }
        Ok(())
    }
}

/// One try at migrating: the version the history was at (a newer one
/// than this oomgate knows is left as it is).
fn migrate_once(connection: &mut Connection) -> rusqlite::Result<u32> {
    let transaction = connection.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let marked: bool = transaction.query_row(
        "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = ?1",
        [MARKER_TABLE],
        |row| row.get::<_, i64>(0),
    )? > 0;
    let version: u32 = if marked {
        transaction
            .query_row("SELECT max(version) FROM oomgate_history", [], |row| {
                row.get::<_, Option<u32>>(0)
            })?
            .unwrap_or(0)
    } else {
        0
    };
    if version > KNOWN {
        return Ok(version);
    }
    for (at, statements) in MIGRATIONS.iter().enumerate().skip(version as usize) {
        transaction.execute_batch(&for_dialect(statements, Dialect::Sqlite))?;
        transaction.execute(
            "INSERT INTO oomgate_history (version, oomgate_version, applied_at) VALUES (?1, ?2, ?3)",
            params![at as u32 + 1, env!("CARGO_PKG_VERSION"), now_text()],
        )?;
    }
    transaction.commit()?;
    Ok(version)
}

fn is_busy(error: &rusqlite::Error) -> bool {
    matches!(
        error.sqlite_error_code(),
        Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked)
    )
}

/// `step` again while SQLite says another connection holds the lock
/// where it does not wait itself (a journal mode switched, a lock
/// upgrade it refuses to avoid a deadlock), for up to [`BUSY_TIMEOUT`].
fn busy_retry<T>(mut step: impl FnMut() -> rusqlite::Result<T>) -> rusqlite::Result<T> {
    let deadline = std::time::Instant::now() + BUSY_TIMEOUT;
    let mut pause = Duration::from_millis(2);
    loop {
        match step() {
            Err(error) if is_busy(&error) && std::time::Instant::now() < deadline => {
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(100));
            }
            done => return done,
        }
    }
}

fn database(location: &str, error: &rusqlite::Error) -> HistoryError {
    let message = match error.sqlite_error_code() {
        Some(rusqlite::ErrorCode::NotADatabase) => {
            return HistoryError::Foreign {
                location: location.to_string(),
                why: "is not an SQLite database".into(),
            };
        }
        Some(rusqlite::ErrorCode::DatabaseCorrupt) => {
            return HistoryError::Foreign {
                location: location.to_string(),
                why: format!("is a damaged SQLite database ({error})"),
            };
        }
        Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked) => format!(
            "another process held the history's lock past oomgate's wait of {}s ({error})",
            BUSY_TIMEOUT.as_secs()
        ),
        _ => error.to_string(),
    };
    HistoryError::Database {
        location: location.to_string(),
        message,
    }
}

impl Store for SqliteStore {
    fn location(&self) -> String {
        format!("sqlite:{}", self.path.display())
    }

    fn schema_version(&mut self) -> Result<u32, HistoryError> {
        self.connection
            .query_row("SELECT max(version) FROM oomgate_history", [], |row| {
                row.get::<_, Option<u32>>(0)
            })
            .map(Option::unwrap_or_default)
            .map_err(|e| self.error(&e))
    }

    fn record(&mut self, run: &RunEntry) -> Result<Recorded, HistoryError> {
        let location = self.location();
        let fail = |e: rusqlite::Error| database(&location, &e);
        let transaction = self
            .connection
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(fail)?;
        let run_key: Option<i64> = transaction
            .query_row(
                "INSERT INTO runs (run_id, started_at, started_ms, recorded_at, recorded_by, suite,
                    suite_fingerprint, commit_sha, branch, base_branch, ci_system, ci_run_id,
                    ci_run_url, host, driver_version, cuda_version, gpu_models, packages,
                    oomgate_version, passed, interrupted, cases_run, cases_failed)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16,
                    ?17, ?18, ?19, ?20, ?21, ?22, ?23)
                 ON CONFLICT (run_id) DO NOTHING
                 RETURNING run_key",
                params![
                    run.run_id,
                    run.started_at,
                    run.started_ms,
                    run.recorded_at,
                    run.recorded_by.as_str(),
                    run.suite,
                    run.suite_fingerprint,
                    run.commit,
                    run.branch,
                    run.base_branch,
                    run.ci_system,
                    run.ci_run_id,
                    run.ci_run_url,
                    run.host,
                    run.driver_version,
                    run.cuda_version,
                    json_text(&run.gpu_models),
                    json_text(&run.packages),
                    run.oomgate_version,
                    run.passed,
                    run.interrupted,
                    run.cases_run as i64,
                    run.cases_failed as i64,
                ],
                |row| row.get(0),
            )
            .optional()
            .map_err(fail)?;
        let Some(run_key) = run_key else {
            transaction.commit().map_err(fail)?;
            return Ok(Recorded::Already);
        };
        {
            // A case is numbered once per suite and testbed.
            let mut case_key = transaction
                .prepare(
                    "INSERT INTO cases (suite, case_id, testbed) VALUES (?1, ?2, ?3)
                     ON CONFLICT (suite, case_id, testbed) DO UPDATE SET case_id = excluded.case_id
                     RETURNING case_key",
                )
                .map_err(fail)?;
            let mut text_key = transaction
                .prepare(
                    "INSERT INTO texts (body) VALUES (?1)
                     ON CONFLICT (body) DO UPDATE SET body = excluded.body
                     RETURNING text_key",
                )
                .map_err(fail)?;
            let mut texts: HashMap<String, i64> = HashMap::new();
            let mut case_insert = transaction
                .prepare(
                    "INSERT INTO case_runs (run_key, case_key, status, failure_kind, wall_time_s,
                        tolerances_key, checks)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                )
                .map_err(fail)?;
            let mut figure_insert = transaction
                .prepare(
                    "INSERT INTO figures (run_key, case_key, figure, value, method, passed)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                )
                .map_err(fail)?;
            for case in &run.cases {
                let key: i64 = case_key
                    .query_row(
                        params![run.suite, case.id, case.testbed.as_deref().unwrap_or("")],
                        |row| row.get(0),
                    )
                    .map_err(fail)?;
                let tolerances = match case.tolerances.as_ref().map(json_text) {
                    None => None,
                    Some(body) => match texts.get(&body) {
                        Some(&key) => Some(key),
                        None => {
                            let key: i64 = text_key
                                .query_row([&body], |row| row.get(0))
                                .map_err(fail)?;
                            texts.insert(body, key);
                            Some(key)
                        }
                    },
                };
                case_insert
                    .execute(params![
                        run_key,
                        key,
                        case.status,
                        case.failure_kind,
                        case.wall_time_s,
                        tolerances,
                        json_text(&case.checks),
                    ])
                    .map_err(fail)?;
                let passed = case.passed();
                for (name, figure) in &case.figures {
                    figure_insert
                        .execute(params![
                            run_key,
                            key,
                            name,
                            figure.value,
                            figure.method,
                            passed
                        ])
                        .map_err(fail)?;
                }
            }
        }
        transaction.commit().map_err(fail)?;
        Ok(Recorded::New)
    }

    fn runs(&mut self, query: &Query) -> Result<Vec<RunEntry>, HistoryError> {
        let location = self.location();
        let fail = |e: rusqlite::Error| database(&location, &e);
        let limit: i64 = query.last.map_or(-1, |n| n as i64);
        const CHOSEN: &str = CHOSEN_RUNS;
        let transaction = self.connection.transaction().map_err(fail)?;
        let mut runs: Vec<RunEntry> = Vec::new();
        let mut at: HashMap<i64, usize> = HashMap::new();
        {
            let mut statement = transaction
                .prepare(&format!(
                    "SELECT run_key, run_id, started_at, started_ms, recorded_at, recorded_by,
                        suite, suite_fingerprint, commit_sha, branch, base_branch, ci_system,
                        ci_run_id, ci_run_url, host, driver_version, cuda_version, gpu_models,
                        packages, oomgate_version, passed, interrupted, cases_run, cases_failed
                     FROM runs WHERE run_key IN ({CHOSEN})
                     ORDER BY started_ms, run_id"
                ))
                .map_err(fail)?;
            let mut rows = statement.query(&*chosen(query, &limit)).map_err(fail)?;
            while let Some(row) = rows.next().map_err(fail)? {
                let key: i64 = row.get(0).map_err(fail)?;
                at.insert(key, runs.len());
                runs.push(run_of(row).map_err(fail)?);
            }
        }
        let mut case_at: HashMap<(i64, i64), (usize, usize)> = HashMap::new();
        {
            let details = if query.details {
                "(SELECT body FROM texts WHERE text_key = cr.tolerances_key), cr.checks"
            } else {
                "NULL, NULL"
            };
            let mut statement = transaction
                .prepare(&format!(
                    "SELECT cr.run_key, cr.case_key, c.case_id, c.testbed, cr.status,
                        cr.failure_kind, cr.wall_time_s, {details}
                     FROM case_runs cr JOIN cases c ON c.case_key = cr.case_key
                     WHERE cr.run_key IN ({CHOSEN})
                       AND (:case IS NULL OR c.case_id = :case)
                       AND (:testbed IS NULL OR c.testbed = :testbed)
                     ORDER BY cr.rowid"
                ))
                .map_err(fail)?;
            let mut rows = statement
                .query(
                    &*chosen(query, &limit)
                        .into_iter()
                        .chain([
                            (":case", &query.case as &dyn ToSql),
                            (":testbed", &query.testbed as &dyn ToSql),
                        ])
                        .collect::<Vec<_>>(),
                )
                .map_err(fail)?;
            while let Some(row) = rows.next().map_err(fail)? {
                let run_key: i64 = row.get(0).map_err(fail)?;
                let case_key: i64 = row.get(1).map_err(fail)?;
                let Some(&run) = at.get(&run_key) else {
                    continue;
                };
                let testbed: String = row.get(3).map_err(fail)?;
                let parse = |text: Option<String>| {
                    text.and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
                };
                let case = CaseEntry {
                    id: row.get(2).map_err(fail)?,
                    testbed: (!testbed.is_empty()).then_some(testbed),
                    status: row.get(4).map_err(fail)?,
                    failure_kind: row.get(5).map_err(fail)?,
                    wall_time_s: row.get(6).map_err(fail)?,
                    figures: Default::default(),
                    tolerances: parse(row.get(7).map_err(fail)?),
                    checks: parse(row.get(8).map_err(fail)?).unwrap_or(serde_json::Value::Null),
                };
                case_at.insert((run_key, case_key), (run, runs[run].cases.len()));
                runs[run].cases.push(case);
            }
        }
        {
            let mut statement = transaction
                .prepare(&format!(
                    // The cases read above are the ones kept.
                    "SELECT f.run_key, f.case_key, f.figure, f.value, f.method
                     FROM figures f WHERE f.run_key IN ({CHOSEN})"
                ))
                .map_err(fail)?;
            let mut rows = statement.query(&*chosen(query, &limit)).map_err(fail)?;
            while let Some(row) = rows.next().map_err(fail)? {
                let key: (i64, i64) = (row.get(0).map_err(fail)?, row.get(1).map_err(fail)?);
                let Some(&(run, case)) = case_at.get(&key) else {
                    continue;
                };
                runs[run].cases[case].figures.insert(
                    row.get(2).map_err(fail)?,
                    Figure {
                        value: row.get(3).map_err(fail)?,
                        method: row.get(4).map_err(fail)?,
                    },
                );
            }
        }
        transaction.commit().map_err(fail)?;
        Ok(runs)
    }

    fn series(&mut self, query: &Query, figures: &[&str]) -> Result<Series, HistoryError> {
        let location = self.location();
        let fail = |e: rusqlite::Error| database(&location, &e);
        let limit: i64 = query.last.map_or(-1, |n| n as i64);
        const CHOSEN: &str = CHOSEN_RUNS;
        let transaction = self.connection.transaction().map_err(fail)?;
        let mut series = Series {
            figures: figures.iter().map(|f| f.to_string()).collect(),
            ..Series::default()
        };
        let mut run_at: HashMap<i64, u32> = HashMap::new();
        {
            let mut statement = transaction
                .prepare(&format!(
                    "SELECT run_key, run_id, started_at, started_ms, commit_sha, branch, passed
                     FROM runs WHERE run_key IN ({CHOSEN}) ORDER BY started_ms, run_id"
                ))
                .map_err(fail)?;
            let mut rows = statement.query(&*chosen(query, &limit)).map_err(fail)?;
            while let Some(row) = rows.next().map_err(fail)? {
                run_at.insert(row.get(0).map_err(fail)?, series.runs.len() as u32);
                series.runs.push(RunHead {
                    run_id: row.get(1).map_err(fail)?,
                    started_at: row.get(2).map_err(fail)?,
                    started_ms: row.get(3).map_err(fail)?,
                    commit: row.get(4).map_err(fail)?,
                    branch: row.get(5).map_err(fail)?,
                    passed: row.get(6).map_err(fail)?,
                });
            }
        }
        let figure_at: HashMap<&str, u16> = figures
            .iter()
            .enumerate()
            .map(|(i, f)| (*f, i as u16))
            .collect();
        // The cases the query selects, by key: few, read once.
        let mut chosen_cases: HashMap<i64, (String, Option<String>)> = HashMap::new();
        {
            let mut statement = transaction
                .prepare(
                    "SELECT case_key, case_id, testbed FROM cases
                     WHERE (:suite IS NULL OR suite = :suite) AND (:case IS NULL OR case_id = :case)
                       AND (:testbed IS NULL OR testbed = :testbed)",
                )
                .map_err(fail)?;
            let mut rows = statement
                .query(named_params! {
                    ":suite": query.suite, ":case": query.case, ":testbed": query.testbed,
                })
                .map_err(fail)?;
            while let Some(row) = rows.next().map_err(fail)? {
                let testbed: String = row.get(2).map_err(fail)?;
                chosen_cases.insert(
                    row.get(0).map_err(fail)?,
                    (
                        row.get(1).map_err(fail)?,
                        (!testbed.is_empty()).then_some(testbed),
                    ),
                );
            }
        }
        let mut case_at: HashMap<i64, u32> = HashMap::new();
        {
            // The figures asked for, as a JSON list (one parameter, read
            // by SQLite's json_each).
            let names = serde_json::to_string(figures).unwrap_or_else(|_| "[]".into());
            let mut statement = transaction
                .prepare(&format!(
                    "SELECT f.run_key, f.case_key, f.figure, f.value, f.passed
                     FROM figures f
                     WHERE f.run_key IN ({CHOSEN})
                       AND f.figure IN (SELECT value FROM json_each(:figures))
                     ORDER BY f.run_key, f.case_key"
                ))
                .map_err(fail)?;
            let mut rows = statement
                .query(
                    &*chosen(query, &limit)
                        .into_iter()
                        .chain([(":figures", &names as &dyn ToSql)])
                        .collect::<Vec<_>>(),
                )
                .map_err(fail)?;
            while let Some(row) = rows.next().map_err(fail)? {
                let Some(&run) = run_at.get(&row.get::<_, i64>(0).map_err(fail)?) else {
                    continue;
                };
                let case_key: i64 = row.get(1).map_err(fail)?;
                let case = match case_at.get(&case_key) {
                    Some(&at) => at,
                    None => {
                        let Some(case) = chosen_cases.get(&case_key) else {
                            continue;
                        };
                        series.cases.push(case.clone());
                        let at = series.cases.len() as u32 - 1;
                        case_at.insert(case_key, at);
                        at
                    }
                };
                let figure: String = row.get(2).map_err(fail)?;
                let Some(&figure) = figure_at.get(figure.as_str()) else {
                    continue;
                };
                series.points.push(Point {
                    run,
                    case,
                    figure,
                    value: row.get(3).map_err(fail)?,
                    passed: row.get(4).map_err(fail)?,
                });
            }
        }
        transaction.commit().map_err(fail)?;
        Ok(series)
    }

    fn accept(&mut self, acceptances: &[Acceptance]) -> Result<(), HistoryError> {
        let location = self.location();
        let fail = |e: rusqlite::Error| database(&location, &e);
        let transaction = self
            .connection
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(fail)?;
        {
            let mut insert = transaction
                .prepare(
                    "INSERT INTO accepts (suite, case_id, testbed, branch, figure, level,
                        accepted_ms, accepted_at, accepted_by, reason, run_id)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
                )
                .map_err(fail)?;
            for a in acceptances {
                insert
                    .execute(params![
                        a.suite,
                        a.case_id,
                        a.testbed.as_deref().unwrap_or(""),
                        a.branch.as_deref().unwrap_or(""),
                        a.figure,
                        a.level,
                        a.accepted_ms,
                        a.accepted_at,
                        a.accepted_by,
                        a.reason,
                        a.run_id,
                    ])
                    .map_err(fail)?;
            }
        }
        transaction.commit().map_err(fail)
    }

    fn acceptances(
        &mut self,
        suite: &str,
        branch: Option<&str>,
    ) -> Result<Vec<Acceptance>, HistoryError> {
        let location = self.location();
        let fail = |e: rusqlite::Error| database(&location, &e);
        let mut statement = self
            .connection
            .prepare(
                "SELECT suite, case_id, testbed, branch, figure, level, accepted_ms, accepted_at,
                    accepted_by, reason, run_id
                 FROM accepts WHERE suite = ?1 AND branch = ?2
                 ORDER BY accepted_ms, accept_key",
            )
            .map_err(fail)?;
        let rows = statement
            .query_map(params![suite, branch.unwrap_or("")], |row| {
                let testbed: String = row.get(2)?;
                let branch: String = row.get(3)?;
                Ok(Acceptance {
                    suite: row.get(0)?,
                    case_id: row.get(1)?,
                    testbed: (!testbed.is_empty()).then_some(testbed),
                    branch: (!branch.is_empty()).then_some(branch),
                    figure: row.get(4)?,
                    level: row.get(5)?,
                    accepted_ms: row.get(6)?,
                    accepted_at: row.get(7)?,
                    accepted_by: row.get(8)?,
                    reason: row.get(9)?,
                    run_id: row.get(10)?,
                })
            })
            .map_err(fail)?;
        rows.collect::<Result<Vec<_>, _>>().map_err(fail)
    }

    fn bisect_step(&mut self, key: &str) -> Result<Option<String>, HistoryError> {
        let location = self.location();
        self.connection
            .query_row(super::BISECT_STEP, [key], |row| row.get::<_, String>(0))
            .optional()
            .map_err(|e| database(&location, &e))
    }

    fn keep_bisect_step(&mut self, step: &super::BisectStep) -> Result<(), HistoryError> {
        let location = self.location();
        busy_retry(|| {
            self.connection.execute(
                super::KEEP_BISECT_STEP,
                params![
                    step.key,
                    step.suite,
                    step.case_id,
                    step.candidate,
                    now_text(),
                    step.results
                ],
            )
        })
        .map(|_| ())
        .map_err(|e| database(&location, &e))
    }

    fn prune(&mut self, before_ms: i64) -> Result<usize, HistoryError> {
        let location = self.location();
        let fail = |e: rusqlite::Error| database(&location, &e);
        let transaction = self
            .connection
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(fail)?;
        let removed = transaction
            .execute("DELETE FROM runs WHERE started_ms < ?1", [before_ms])
            .map_err(fail)?;
        transaction.commit().map_err(fail)?;
        Ok(removed)
    }
}

/// A run's row (its columns from `run_key` on, as `runs` selects them),
/// without its cases.
fn run_of(row: &Row<'_>) -> rusqlite::Result<RunEntry> {
    Ok(RunEntry {
        run_id: row.get(1)?,
        started_at: row.get(2)?,
        started_ms: row.get(3)?,
        recorded_at: row.get(4)?,
        recorded_by: RecordedBy::parse(&row.get::<_, String>(5)?).unwrap_or(RecordedBy::Add),
        suite: row.get(6)?,
        suite_fingerprint: row.get(7)?,
        commit: row.get(8)?,
        branch: row.get(9)?,
        base_branch: row.get(10)?,
        ci_system: row.get(11)?,
        ci_run_id: row.get(12)?,
        ci_run_url: row.get(13)?,
        host: row.get(14)?,
        driver_version: row.get(15)?,
        cuda_version: row.get(16)?,
        gpu_models: serde_json::from_str(&row.get::<_, String>(17)?).unwrap_or_default(),
        packages: serde_json::from_str(&row.get::<_, String>(18)?).unwrap_or_default(),
        oomgate_version: row.get(19)?,
        passed: row.get(20)?,
        interrupted: row.get(21)?,
        cases_run: row.get::<_, i64>(22)?.max(0) as u64,
        cases_failed: row.get::<_, i64>(23)?.max(0) as u64,
        cases: Vec::new(),
    })
}

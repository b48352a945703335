//! The history in PostgreSQL, for a fleet of runners writing one history:
//! the same schema as SQLite's (`schema`, PostgreSQL's dialect), through
//! the synchronous `postgres` client.
//!
//! - **Password**: the URL's, else `PGPASSWORD`, else the first line of
//!   the file `OOMGATE_HISTORY_PASSWORD_FILE` names. It is never written:
//!   messages name the history by its URL with the password masked.
//! - **TLS** (rustls, no system OpenSSL) as the URL's `sslmode` says,
//!   with libpq's meanings: `disable`; `prefer` (the default) and
//!   `require` encrypt without checking the server's certificate;
//!   `verify-ca` checks it against the system's roots; `verify-full`
//!   checks its host name too.
//! - **Migrations** run in one transaction under an advisory lock
//!   (`pg_advisory_xact_lock`): two writers never migrate at once.
//! - A database that holds a table of the history's names (`runs`,
//!   `cases`, ...) but no `oomgate_history` is someone else's: refused.

use std::collections::HashMap;
use std::str::FromStr;

use postgres::{Client, Transaction};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};

use super::entry::{CaseEntry, Figure, RecordedBy, RunEntry, json_text, now_text};
use super::schema::{Dialect, KNOWN, MARKER_TABLE, MIGRATIONS, TABLES, for_dialect};
use super::{Acceptance, HistoryError, Point, Query, Recorded, RunHead, Series, Store};

/// The advisory lock migrations hold ("oomgate" in ASCII).
const MIGRATION_LOCK: i64 = 0x006f_6f6d_6761_7465;

/// The variable naming a file whose first line is the password.
pub const PASSWORD_FILE_VAR: &str = "OOMGATE_HISTORY_PASSWORD_FILE";

pub(super) struct PgStore {
    location: String,
    client: Client,
}

/// How the server's certificate is checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verify {
    Nothing,
    Certificate,
    CertificateAndHost,
}

/// The URL as the client reads it (`verify-ca` and `verify-full` become
/// `require`, checked by the TLS connector), and what to check.
fn split_sslmode(url: &str) -> (String, Verify) {
    for (mode, verify) in [
        ("sslmode=verify-full", Verify::CertificateAndHost),
        ("sslmode=verify-ca", Verify::Certificate),
    ] {
        if url.contains(mode) {
            return (url.replace(mode, "sslmode=require"), verify);
        }
    }
    (url.to_string(), Verify::Nothing)
}

/// The TLS client a connection uses (whether it encrypts at all is the
/// URL's `sslmode`): the server's certificate checked against the
/// system's roots as `verify` says.
fn tls_config(verify: Verify) -> Result<rustls::ClientConfig, rustls::Error> {
    use std::sync::Arc;
    // ring, not aws-lc-rs (rustls's default, which builds with cmake):
    // rustls 0.23.48 marks ring's provider deprecated for its lack of
    // post-quantum key exchange, which PostgreSQL servers do not offer.
    #[allow(deprecated)]
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()?;
    if verify == Verify::Nothing {
        return Ok(builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(Unchecked(provider)))
            .with_no_client_auth());
    }
    let mut roots = rustls::RootCertStore::empty();
    roots.add_parsable_certificates(rustls_native_certs::load_native_certs().certs);
    let roots = Arc::new(roots);
    if verify == Verify::CertificateAndHost {
        return Ok(builder.with_root_certificates(roots).with_no_client_auth());
    }
    let checked = rustls::client::WebPkiServerVerifier::builder_with_provider(roots, provider)
        .build()
        .map_err(|e| rustls::Error::General(e.to_string()))?;
    Ok(builder
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AnyName(checked)))
        .with_no_client_auth())
}

/// `prefer` and `require`, as libpq reads them: encrypted, the
/// certificate not checked (its signature of the handshake still is).
#[derive(Debug)]
struct Unchecked(std::sync::Arc<rustls::crypto::CryptoProvider>);

impl ServerCertVerifier for Unchecked {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// `verify-ca`: the chain checked against the roots, not the host name.
#[derive(Debug)]
struct AnyName(std::sync::Arc<rustls::client::WebPkiServerVerifier>);

impl ServerCertVerifier for AnyName {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        use rustls::{CertificateError, Error};
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp, now)
        {
            Err(Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

/// The password when the URL has none: `PGPASSWORD`, else the file's.
fn password_from(var: &dyn Fn(&str) -> Option<String>) -> Result<Option<String>, String> {
    if let Some(password) = var("PGPASSWORD").filter(|p| !p.is_empty()) {
        return Ok(Some(password));
    }
    let Some(file) = var(PASSWORD_FILE_VAR).filter(|f| !f.is_empty()) else {
        return Ok(None);
    };
    let text = std::fs::read_to_string(&file)
        .map_err(|e| format!("{PASSWORD_FILE_VAR} names {file}, which cannot be read: {e}"))?;
    Ok(text.lines().next().map(|line| line.trim_end().to_string()))
}

impl PgStore {
    pub(super) fn open(url: &str, location: String) -> Result<PgStore, HistoryError> {
        let failed = |message: String| HistoryError::Database {
            location: location.clone(),
            message,
        };
        let (url, verify) = split_sslmode(url);
        let mut config = postgres::Config::from_str(&url)
            .map_err(|e| failed(format!("not a PostgreSQL URL this oomgate reads: {e}")))?;
        if config.get_password().is_none() {
            let var = |name: &str| std::env::var(name).ok();
            if let Some(password) = password_from(&var).map_err(failed)? {
                config.password(password);
            }
        }
        let tls = tls_config(verify).map_err(|e| failed(format!("TLS: {e}")))?;
        let client = config
            .connect(tokio_postgres_rustls::MakeRustlsConnect::new(tls))
            .map_err(|e| failed(format!("cannot connect: {}", describe(&e))))?;
        let mut store = PgStore { location, client };
        store.migrate()?;
        Ok(store)
    }

    fn error(&self, error: &postgres::Error) -> HistoryError {
        database(&self.location, error)
    }

    fn migrate(&mut self) -> Result<(), HistoryError> {
        let location = self.location.clone();
        let fail = |e: postgres::Error| database(&location, &e);
        let mut transaction = self.client.transaction().map_err(fail)?;
        transaction
            .execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])
            .map_err(fail)?;
        let present: Vec<String> = transaction
            .query(
                "SELECT table_name::text FROM information_schema.tables
                 WHERE table_schema = current_schema() AND table_name = ANY($1)",
                &[&TABLES
                    .iter()
                    .chain([&MARKER_TABLE])
                    .map(|t| t.to_string())
                    .collect::<Vec<String>>()],
            )
            .map_err(fail)?
            .iter()
            .map(|row| row.get(0))
            .collect();
        let marked = present.iter().any(|t| t == MARKER_TABLE);
        if !marked && !present.is_empty() {
            return Err(HistoryError::Foreign {
                location,
                why: format!(
                    "holds tables of the history's names that are not oomgate's ({}); give the history a database or schema of its own",
                    present.join(", ")
                ),
            });
        }
        let version: u32 = if marked {
            let found: Option<i32> = transaction
                .query_one("SELECT max(version) FROM oomgate_history", &[])
                .map_err(fail)?
                .get(0);
            found.and_then(|v| u32::try_from(v).ok()).unwrap_or(0)
        } else {
            0
        };
        if version > KNOWN {
            return Err(HistoryError::Newer {
                location,
                found: version,
                known: KNOWN,
            });
        }
        for (at, statements) in MIGRATIONS.iter().enumerate().skip(version as usize) {
            transaction
                .batch_execute(&for_dialect(statements, Dialect::Postgres))
                .map_err(fail)?;
            transaction
                .execute(
                    "INSERT INTO oomgate_history (version, oomgate_version, applied_at) VALUES ($1, $2, $3)",
                    &[&(at as i32 + 1), &env!("CARGO_PKG_VERSION"), &now_text()],
                )
                .map_err(fail)?;
        }
        transaction.commit().map_err(fail)
    }
}

fn database(location: &str, error: &postgres::Error) -> HistoryError {
    HistoryError::Database {
        location: location.to_string(),
        message: describe(error),
    }
}

/// The server's own words for an error (its SQLSTATE and message), else
/// the client's, with what caused it.
fn describe(error: &postgres::Error) -> String {
    if let Some(db) = error.as_db_error() {
        return format!("{} ({})", db.message(), db.code().code());
    }
    let mut text = error.to_string();
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// The runs a query chooses, newest first: `$1` suite, `$2` branch, `$3`
/// since, `$4` limit (NULL: all).
const CHOSEN_RUNS: &str = "SELECT run_key FROM runs
     WHERE ($1::text IS NULL OR suite = $1) AND ($2::text IS NULL OR branch = $2)
       AND ($3::bigint IS NULL OR started_ms >= $3)
     ORDER BY started_ms DESC, run_id DESC LIMIT $4";

fn limit_of(query: &Query) -> Option<i64> {
    query.last.map(|n| i64::try_from(n).unwrap_or(i64::MAX))
}

fn run_of(row: &postgres::Row) -> RunEntry {
    let count = |at: usize| u64::try_from(row.get::<_, i32>(at)).unwrap_or(0);
    RunEntry {
        run_id: row.get(1),
        started_at: row.get(2),
        started_ms: row.get(3),
        recorded_at: row.get(4),
        recorded_by: RecordedBy::parse(row.get::<_, &str>(5)).unwrap_or(RecordedBy::Add),
        suite: row.get(6),
        suite_fingerprint: row.get(7),
        commit: row.get(8),
        branch: row.get(9),
        base_branch: row.get(10),
        ci_system: row.get(11),
        ci_run_id: row.get(12),
        ci_run_url: row.get(13),
        host: row.get(14),
        driver_version: row.get(15),
        cuda_version: row.get(16),
        gpu_models: serde_json::from_str(row.get::<_, &str>(17)).unwrap_or_default(),
        packages: serde_json::from_str(row.get::<_, &str>(18)).unwrap_or_default(),
        oomgate_version: row.get(19),
        passed: row.get::<_, i32>(20) != 0,
        interrupted: row.get::<_, i32>(21) != 0,
        cases_run: count(22),
        cases_failed: count(23),
        cases: Vec::new(),
    }
}

/// The key of a text kept once (`texts`).
fn text_key(
    transaction: &mut Transaction<'_>,
    known: &mut HashMap<String, i64>,
    body: String,
) -> Result<i64, postgres::Error> {
    if let Some(&key) = known.get(&body) {
        return Ok(key);
    }
    let key: i64 = transaction
        .query_one(
            "INSERT INTO texts (body) VALUES ($1)
             ON CONFLICT (body) DO UPDATE SET body = excluded.body RETURNING text_key",
            &[&body],
        )?
        .get(0);
    known.insert(body, key);
    Ok(key)
}

impl Store for PgStore {
    fn location(&self) -> String {
        self.location.clone()
    }

    fn schema_version(&mut self) -> Result<u32, HistoryError> {
        let found: Option<i32> = self
            .client
            .query_one("SELECT max(version) FROM oomgate_history", &[])
            .map_err(|e| self.error(&e))?
            .get(0);
        Ok(found.and_then(|v| u32::try_from(v).ok()).unwrap_or(0))
    }

    fn record(&mut self, run: &RunEntry) -> Result<Recorded, HistoryError> {
        let location = self.location.clone();
        let fail = |e: postgres::Error| database(&location, &e);
        let mut transaction = self.client.transaction().map_err(fail)?;
        let cases_run = i32::try_from(run.cases_run).unwrap_or(i32::MAX);
        let cases_failed = i32::try_from(run.cases_failed).unwrap_or(i32::MAX);
        let inserted = transaction
            .query_opt(
                "INSERT INTO runs (run_id, started_at, started_ms, recorded_at, recorded_by, suite,
                    suite_fingerprint, commit_sha, branch, base_branch, ci_system, ci_run_id,
                    ci_run_url, host, driver_version, cuda_version, gpu_models, packages,
                    oomgate_version, passed, interrupted, cases_run, cases_failed)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16,
                    $17, $18, $19, $20, $21, $22, $23)
                 ON CONFLICT (run_id) DO NOTHING
                 RETURNING run_key",
                &[
                    &run.run_id,
                    &run.started_at,
                    &run.started_ms,
                    &run.recorded_at,
                    &run.recorded_by.as_str(),
                    &run.suite,
                    &run.suite_fingerprint,
                    &run.commit,
                    &run.branch,
                    &run.base_branch,
                    &run.ci_system,
                    &run.ci_run_id,
                    &run.ci_run_url,
                    &run.host,
                    &run.driver_version,
                    &run.cuda_version,
                    &json_text(&run.gpu_models),
                    &json_text(&run.packages),
                    &run.oomgate_version,
                    &i32::from(run.passed),
                    &i32::from(run.interrupted),
                    &cases_run,
                    &cases_failed,
                ],
            )
            .map_err(fail)?;
        let Some(row) = inserted else {
            transaction.commit().map_err(fail)?;
            return Ok(Recorded::Already);
        };
        let run_key: i64 = row.get(0);
        let case_key = transaction
            .prepare(
                "INSERT INTO cases (suite, case_id, testbed) VALUES ($1, $2, $3)
                 ON CONFLICT (suite, case_id, testbed) DO UPDATE SET case_id = excluded.case_id
                 RETURNING case_key",
            )
            .map_err(fail)?;
        let case_insert = transaction
            .prepare(
                "INSERT INTO case_runs (run_key, case_key, status, failure_kind, wall_time_s,
                    tolerances_key, checks)
                 VALUES ($1, $2, $3, $4, $5, $6, $7)",
            )
            .map_err(fail)?;
        let figure_insert = transaction
            .prepare(
                "INSERT INTO figures (run_key, case_key, figure, value, method, passed)
                 VALUES ($1, $2, $3, $4, $5, $6)",
            )
            .map_err(fail)?;
        let mut texts = HashMap::new();
        for case in &run.cases {
            let testbed = case.testbed.as_deref().unwrap_or("");
            let key: i64 = transaction
                .query_one(&case_key, &[&run.suite, &case.id, &testbed])
                .map_err(fail)?
                .get(0);
            let tolerances = match case.tolerances.as_ref().map(json_text) {
                Some(body) => Some(text_key(&mut transaction, &mut texts, body).map_err(fail)?),
                None => None,
            };
            transaction
                .execute(
                    &case_insert,
                    &[
                        &run_key,
                        &key,
                        &case.status,
                        &case.failure_kind,
                        &case.wall_time_s,
                        &tolerances,
                        &json_text(&case.checks),
                    ],
                )
                .map_err(fail)?;
            let passed = i32::from(case.passed());
            for (name, figure) in &case.figures {
                transaction
                    .execute(
                        &figure_insert,
                        &[&run_key, &key, name, &figure.value, &figure.method, &passed],
                    )
                    .map_err(fail)?;
            }
        }
        transaction.commit().map_err(fail)?;
        Ok(Recorded::New)
    }

    fn runs(&mut self, query: &Query) -> Result<Vec<RunEntry>, HistoryError> {
        let location = self.location.clone();
        let fail = |e: postgres::Error| database(&location, &e);
        let limit = limit_of(query);
        let mut transaction = self.client.transaction().map_err(fail)?;
        let mut runs: Vec<RunEntry> = Vec::new();
        let mut at: HashMap<i64, usize> = HashMap::new();
        let rows = transaction
            .query(
                &format!(
                    "SELECT run_key, run_id, started_at, started_ms, recorded_at, recorded_by,
                        suite, suite_fingerprint, commit_sha, branch, base_branch, ci_system,
                        ci_run_id, ci_run_url, host, driver_version, cuda_version, gpu_models,
                        packages, oomgate_version, passed, interrupted, cases_run, cases_failed
                     FROM runs WHERE run_key IN ({CHOSEN_RUNS})
                     ORDER BY started_ms, run_id"
                ),
                &[&query.suite, &query.branch, &query.since_ms, &limit],
            )
            .map_err(fail)?;
        for row in &rows {
            at.insert(row.get(0), runs.len());
            runs.push(run_of(row));
        }
        let details = if query.details {
            "(SELECT body FROM texts WHERE text_key = cr.tolerances_key), cr.checks"
        } else {
            "NULL::text, NULL::text"
        };
        let rows = transaction
            .query(
                &format!(
                    "SELECT cr.run_key, cr.case_key, c.case_id, c.testbed, cr.status,
                        cr.failure_kind, cr.wall_time_s, {details}
                     FROM case_runs cr JOIN cases c ON c.case_key = cr.case_key
                     WHERE cr.run_key IN ({CHOSEN_RUNS})
                       AND ($5::text IS NULL OR c.case_id = $5)
                       AND ($6::text IS NULL OR c.testbed = $6)
                     ORDER BY cr.run_key, cr.case_key"
                ),
                &[
                    &query.suite,
                    &query.branch,
                    &query.since_ms,
                    &limit,
                    &query.case,
                    &query.testbed,
                ],
            )
            .map_err(fail)?;
        let mut case_at: HashMap<(i64, i64), (usize, usize)> = HashMap::new();
        for row in &rows {
            let run_key: i64 = row.get(0);
            let case_key: i64 = row.get(1);
            let Some(&run) = at.get(&run_key) else {
                continue;
            };
            let testbed: String = row.get(3);
            let parse = |text: Option<String>| {
                text.and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
            };
            let case = CaseEntry {
                id: row.get(2),
                testbed: (!testbed.is_empty()).then_some(testbed),
                status: row.get(4),
                failure_kind: row.get(5),
                wall_time_s: row.get(6),
                figures: Default::default(),
                tolerances: parse(row.get(7)),
                checks: parse(row.get(8)).unwrap_or(serde_json::Value::Null),
            };
            case_at.insert((run_key, case_key), (run, runs[run].cases.len()));
            runs[run].cases.push(case);
        }
        let rows = transaction
            .query(
                &format!(
                    "SELECT f.run_key, f.case_key, f.figure, f.value, f.method
                     FROM figures f WHERE f.run_key IN ({CHOSEN_RUNS})"
                ),
                &[&query.suite, &query.branch, &query.since_ms, &limit],
            )
            .map_err(fail)?;
        for row in &rows {
            let key: (i64, i64) = (row.get(0), row.get(1));
            let Some(&(run, case)) = case_at.get(&key) else {
                continue;
            };
            runs[run].cases[case].figures.insert(
                row.get(2),
                Figure {
                    value: row.get(3),
                    method: row.get(4),
                },
            );
        }
        transaction.commit().map_err(fail)?;
        Ok(runs)
    }

    fn series(&mut self, query: &Query, figures: &[&str]) -> Result<Series, HistoryError> {
        let location = self.location.clone();
        let fail = |e: postgres::Error| database(&location, &e);
        let limit = limit_of(query);
        let mut transaction = self.client.transaction().map_err(fail)?;
        let mut series = Series {
            figures: figures.iter().map(|f| f.to_string()).collect(),
            ..Series::default()
        };
        let mut run_at: HashMap<i64, u32> = HashMap::new();
        let rows = transaction
            .query(
                &format!(
                    "SELECT run_key, run_id, started_at, started_ms, commit_sha, branch, passed
                     FROM runs WHERE run_key IN ({CHOSEN_RUNS}) ORDER BY started_ms, run_id"
                ),
                &[&query.suite, &query.branch, &query.since_ms, &limit],
            )
            .map_err(fail)?;
        for row in &rows {
            run_at.insert(row.get(0), series.runs.len() as u32);
            series.runs.push(RunHead {
                run_id: row.get(1),
                started_at: row.get(2),
                started_ms: row.get(3),
                commit: row.get(4),
                branch: row.get(5),
                passed: row.get::<_, i32>(6) != 0,
            });
        }
        let mut chosen_cases: HashMap<i64, (String, Option<String>)> = HashMap::new();
        let rows = transaction
            .query(
                "SELECT case_key, case_id, testbed FROM cases
                 WHERE ($1::text IS NULL OR suite = $1) AND ($2::text IS NULL OR case_id = $2)
                   AND ($3::text IS NULL OR testbed = $3)",
                &[&query.suite, &query.case, &query.testbed],
            )
            .map_err(fail)?;
        for row in &rows {
            let testbed: String = row.get(2);
            chosen_cases.insert(
                row.get(0),
                (row.get(1), (!testbed.is_empty()).then_some(testbed)),
            );
        }
        let names: Vec<String> = series.figures.clone();
        let figure_at: HashMap<&str, u16> = figures
            .iter()
            .enumerate()
            .map(|(i, f)| (*f, i as u16))
            .collect();
        let mut case_at: HashMap<i64, u32> = HashMap::new();
        let rows = transaction
            .query(
                &format!(
                    "SELECT f.run_key, f.case_key, f.figure, f.value, f.passed
                     FROM figures f
                     WHERE f.run_key IN ({CHOSEN_RUNS}) AND f.figure = ANY($5)
                     ORDER BY f.run_key, f.case_key"
                ),
                &[&query.suite, &query.branch, &query.since_ms, &limit, &names],
            )
            .map_err(fail)?;
        for row in &rows {
            let Some(&run) = run_at.get(&row.get::<_, i64>(0)) else {
                continue;
            };
            let case_key: i64 = row.get(1);
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
            let Some(&figure) = figure_at.get(row.get::<_, &str>(2)) else {
                continue;
            };
            series.points.push(Point {
                run,
                case,
                figure,
                value: row.get(3),
                passed: row.get::<_, i32>(4) != 0,
            });
        }
        transaction.commit().map_err(fail)?;
        Ok(series)
    }

    fn accept(&mut self, acceptances: &[Acceptance]) -> Result<(), HistoryError> {
        let location = self.location.clone();
        let fail = |e: postgres::Error| database(&location, &e);
        let mut transaction = self.client.transaction().map_err(fail)?;
        let insert = transaction
            .prepare(
                "INSERT INTO accepts (suite, case_id, testbed, branch, figure, level,
                    accepted_ms, accepted_at, accepted_by, reason, run_id)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)",
            )
            .map_err(fail)?;
        for a in acceptances {
            transaction
                .execute(
                    &insert,
                    &[
                        &a.suite,
                        &a.case_id,
                        &a.testbed.as_deref().unwrap_or(""),
                        &a.branch.as_deref().unwrap_or(""),
                        &a.figure,
                        &a.level,
                        &a.accepted_ms,
                        &a.accepted_at,
                        &a.accepted_by,
                        &a.reason,
                        &a.run_id,
                    ],
                )
                .map_err(fail)?;
        }
        transaction.commit().map_err(fail)
    }

    fn acceptances(
        &mut self,
        suite: &str,
        branch: Option<&str>,
    ) -> Result<Vec<Acceptance>, HistoryError> {
        let rows = self
            .client
            .query(
                "SELECT suite, case_id, testbed, branch, figure, level, accepted_ms, accepted_at,
                    accepted_by, reason, run_id
                 FROM accepts WHERE suite = $1 AND branch = $2
                 ORDER BY accepted_ms, accept_key",
                &[&suite, &branch.unwrap_or("")],
            )
            .map_err(|e| self.error(&e))?;
        Ok(rows
            .iter()
            .map(|row| {
                let testbed: String = row.get(2);
                let branch: String = row.get(3);
                Acceptance {
                    suite: row.get(0),
                    case_id: row.get(1),
                    testbed: (!testbed.is_empty()).then_some(testbed),
                    branch: (!branch.is_empty()).then_some(branch),
                    figure: row.get(4),
                    level: row.get(5),
                    accepted_ms: row.get(6),
                    accepted_at: row.get(7),
                    accepted_by: row.get(8),
                    reason: row.get(9),
                    run_id: row.get(10),
                }
            })
            .collect())
    }

    fn bisect_step(&mut self, key: &str) -> Result<Option<String>, HistoryError> {
        let row = self
            .client
            .query_opt(super::BISECT_STEP, &[&key])
            .map_err(|e| self.error(&e))?;
        Ok(row.map(|row| row.get::<_, String>(0)))
    }

    fn keep_bisect_step(&mut self, step: &super::BisectStep) -> Result<(), HistoryError> {
        self.client
            .execute(
                super::KEEP_BISECT_STEP,
                &[
                    &step.key,
                    &step.suite,
                    &step.case_id,
                    &step.candidate,
                    &now_text(),
                    &step.results,
                ],
            )
            .map(|_| ())
            .map_err(|e| self.error(&e))
    }

    fn prune(&mut self, before_ms: i64) -> Result<usize, HistoryError> {
        let removed = self
            .client
            .execute("DELETE FROM runs WHERE started_ms < $1", &[&before_ms])
            .map_err(|e| self.error(&e))?;
        Ok(usize::try_from(removed).unwrap_or(usize::MAX))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_tls_mode_builds_its_client() {
        for verify in [
            Verify::Nothing,
            Verify::Certificate,
            Verify::CertificateAndHost,
        ] {
            assert!(tls_config(verify).is_ok(), "{verify:?}");
        }
    }

    #[test]
    fn sslmodes_read_as_libpq_reads_them() {
        assert_eq!(
            split_sslmode("postgres://h/db?sslmode=verify-full"),
            (
                "postgres://h/db?sslmode=require".to_string(),
                Verify::CertificateAndHost
            )
        );
        assert_eq!(
            split_sslmode("postgres://h/db?sslmode=verify-ca").1,
            Verify::Certificate
        );
        assert_eq!(
            split_sslmode("postgres://h/db?sslmode=require").1,
            Verify::Nothing
        );
    }

    #[test]
    fn a_password_comes_from_the_environment_or_a_file() {
        let dir = tempfile::tempdir().expect("a folder");
        let file = dir.path().join("pw");
        std::fs::write(&file, "s3cret\nignored\n").expect("written");
        let path = file.display().to_string();
        let env = |pairs: Vec<(&'static str, String)>| {
            move |name: &str| {
                pairs
                    .iter()
                    .find(|(k, _)| *k == name)
                    .map(|(_, v)| v.clone())
            }
        };
        assert_eq!(
            password_from(&env(vec![("PGPASSWORD", "from-env".into())])),
            Ok(Some("from-env".into()))
        );
        assert_eq!(
            password_from(&env(vec![(PASSWORD_FILE_VAR, path)])),
            Ok(Some("s3cret".into()))
        );
        assert_eq!(password_from(&env(vec![])), Ok(None));
        assert!(password_from(&env(vec![(PASSWORD_FILE_VAR, "/nonexistent/pw".into())])).is_err());
    }
}

//! The ledger: every run kept in a history, so that a figure is held
//! against its own past and not only against the lock.
//!
//! A history is a database: an SQLite file (the default: one file, SQLite
//! built into oomgate) or, for a fleet of runners writing one history,
//! PostgreSQL. Both hold the same schema (`schema`), versioned with
//! forward migrations applied under a lock, and both sit behind one
//! trait, [`Store`]. What a run records is a [`entry::RunEntry`], made from
//! its results; where it came from (commit, branch, CI run) is
//! [`origin`]'s. A history that cannot be reached never changes a run's
//! verdict (see docs/history.md).

pub mod entry;
pub mod origin;
pub mod pasts;
mod postgres;
mod schema;
mod sqlite;
pub mod trend;

pub use crate::files::HistoryLocation as Location;
pub use entry::{CaseEntry, Figure, RecordedBy, RunEntry};
pub use postgres::PASSWORD_FILE_VAR;
pub use schema::KNOWN as SCHEMA_VERSION;

/// Why a history cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum HistoryError {
    #[error("{0}")]
    Location(#[from] crate::files::LocationError),
    #[error("{location}: {why}; oomgate never writes into a file that is not its own history")]
    Foreign { location: String, why: String },
    #[error(
        "{location}: the history's schema is version {found}, newer than this oomgate's {known}; record with the newer oomgate that migrated it"
    )]
    Newer {
        location: String,
        found: u32,
        known: u32,
    },
    #[error("{location}: {message}")]
    Database { location: String, message: String },
}

/// Whether a run was new to the history.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Recorded {
    New,
    /// A run with its id was there already: nothing was changed.
    Already,
}

/// Which runs to read.
#[derive(Debug, Clone, Default)]
pub struct Query {
    /// Only runs of this suite.
    pub suite: Option<String>,
    /// Only runs of this branch.
    pub branch: Option<String>,
    /// Only this case (its id, exactly).
    pub case: Option<String>,
    /// Only cases on this testbed (`""`: those that ran on no GPU).
    pub testbed: Option<String>,
    /// The newest N runs (all of them: `None`).
    pub last: Option<usize>,
    /// With each case's tolerances and checks (read only when asked: a
    /// table of figures needs neither).
    pub details: bool,
    /// Only runs that started at or after this (milliseconds since the
    /// epoch).
    pub since_ms: Option<i64>,
}

/// A level of a case's figure accepted as its new ratchet (`oomgate
/// history accept`, `lock --accept`): who, when and why.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Acceptance {
    pub suite: String,
    pub case_id: String,
    pub testbed: Option<String>,
    /// The branch whose ratchet it moves (`None`: runs of no known branch).
    pub branch: Option<String>,
    pub figure: String,
    pub level: f64,
    pub accepted_ms: i64,
    pub accepted_at: String,
    pub accepted_by: String,
    pub reason: String,
    /// The run whose figure was accepted.
    pub run_id: Option<String>,
}

/// Some figures of some cases over the runs a [`Query`] chose, compactly:
/// what `history show` draws and what a figure is held against, without
/// each run's whole entry.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Series {
    /// The runs, oldest first.
    pub runs: Vec<RunHead>,
    /// Each case and testbed (`None`: no GPU), in the order first seen.
    pub cases: Vec<(String, Option<String>)>,
    /// The figures asked for, by name.
    pub figures: Vec<String>,
    /// Every value: in which run, of which case, which figure (indices
    /// into the lists above), and whether the case passed in that run.
    pub points: Vec<Point>,
}

/// A run of a [`Series`]: when, from where, and whether it passed.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct RunHead {
    pub run_id: String,
    pub started_at: String,
    pub started_ms: i64,
    pub commit: Option<String>,
    pub branch: Option<String>,
    pub passed: bool,
}

/// One value of a [`Series`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Point {
    pub run: u32,
    pub case: u32,
    pub figure: u16,
    pub value: f64,
    /// The case passed (or was skipped) in that run.
    pub passed: bool,
}

/// A history, whatever holds it.
pub trait Store {
    /// Where it is, for messages.
    fn location(&self) -> String;
    /// Record a run; a run whose id is there already is left as it is.
    fn record(&mut self, run: &RunEntry) -> Result<Recorded, HistoryError>;
    /// The runs `query` selects, oldest first, each with the cases it
    /// selects.
    fn runs(&mut self, query: &Query) -> Result<Vec<RunEntry>, HistoryError>;
    /// `figures` of the cases and runs `query` selects (its `details` is
    /// not read).
    fn series(&mut self, query: &Query, figures: &[&str]) -> Result<Series, HistoryError>;
    /// Record acceptances (each a figure's new ratchet).
    fn accept(&mut self, acceptances: &[Acceptance]) -> Result<(), HistoryError>;
    /// The acceptances of `suite` on `branch`, oldest first.
    fn acceptances(
        &mut self,
        suite: &str,
        branch: Option<&str>,
    ) -> Result<Vec<Acceptance>, HistoryError>;
    /// Remove the runs that started before `before_ms` (milliseconds
    /// since the epoch); how many.
    fn prune(&mut self, before_ms: i64) -> Result<usize, HistoryError>;
    /// The schema version the history is at.
    fn schema_version(&mut self) -> Result<u32, HistoryError>;
    /// A bisect step's results.json kept under `key`, if any.
    fn bisect_step(&mut self, key: &str) -> Result<Option<String>, HistoryError>;
    /// Keep a bisect step's results.json (masked, as oomgate writes it);
    /// a key kept already is left as it is.
    fn keep_bisect_step(&mut self, step: &BisectStep) -> Result<(), HistoryError>;
}

/// A bisect step's run, as the history keeps it.
#[derive(Debug, Clone)]
pub struct BisectStep {
    pub key: String,
    pub suite: String,
    pub case_id: String,
    /// The candidate: a commit, a version, a set of pins.
    pub candidate: String,
    pub results: String,
}

/// The statement that keeps a bisect step, the same in both databases
/// (SQLite 3.24's upsert clause is PostgreSQL's).
pub(crate) const KEEP_BISECT_STEP: &str =
    "INSERT INTO bisect_steps (step_key, suite, case_id, candidate, recorded_at, results)
     VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (step_key) DO NOTHING";

/// The statement that reads one back.
pub(crate) const BISECT_STEP: &str = "SELECT results FROM bisect_steps WHERE step_key = $1";

/// Open the history at `location`, migrated to this oomgate's schema;
/// `create`: make it where there is none (to record), else a history that
/// does not exist is an error (to read).
pub fn open(location: &Location, create: bool) -> Result<Box<dyn Store>, HistoryError> {
    match location {
        Location::Sqlite(path) => Ok(Box::new(sqlite::SqliteStore::open(path, create)?)),
        Location::Postgres(url) => Ok(Box::new(postgres::PgStore::open(url, location.describe())?)),
    }
}

#[cfg(test)]
mod tests;

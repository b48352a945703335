//! oomgate: a CI acceptance-test runner that catches out-of-memory before
//! production.
//!
//! The pipeline, one direction only: [`suite`] (TOML to checked cases) →
//! [`run`] (launch, sample with [`measure`], stop; each run a
//! [`record`] of what it measured) → [`judge`] (pure decisions, against the
//! [`baseline`]) → [`results`] (the model, assembled from measurements) →
//! [`report`] (the words, and every output) → exit code ([`cli`]); below
//! them all, [`files`] (writing safely, the out dir, the case folder's
//! layout). `docs/architecture.md` is the map.

pub mod baseline;
pub mod bisect;
pub mod capacity;
pub mod clean;
pub mod cli;
pub mod diagnose;
pub mod environment;
pub mod files;
pub mod history;
pub mod judge;
pub mod leak;
pub mod measure;
pub mod probe;
pub mod process;
pub mod pytest;
pub mod record;
pub mod redact;
pub mod report;
pub mod results;
pub mod run;
pub mod snapshot;
pub mod suite;
pub mod units;
pub mod vocabulary;

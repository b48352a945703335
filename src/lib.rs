//! oomgate: a CI acceptance-test runner that catches out-of-memory before
//! production. See `docs/architecture.md` for the map of this crate.

pub mod suite;
pub mod units;

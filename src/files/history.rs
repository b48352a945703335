//! Where a run history is (`--history`, `[suite] history`,
//! `OOMGATE_HISTORY`): read here, below the suite that names one and the
//! history that opens it (`crate::history`).

use std::path::{Path, PathBuf};

/// Why text names no history.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct LocationError(pub String);

/// Where a history is: `sqlite:PATH` or `postgres://…`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HistoryLocation {
    Sqlite(PathBuf),
    Postgres(String),
}

impl HistoryLocation {
    /// `sqlite:PATH` (a path alone is taken as an SQLite file, as is
    /// `sqlite://PATH`), `postgres://…` or `postgresql://…`.
    pub fn parse(text: &str) -> Result<HistoryLocation, LocationError> {
        let text = text.trim();
        if text.is_empty() {
            return Err(LocationError(
                "an empty history location; give sqlite:PATH or postgres://HOST/DB".into(),
            ));
        }
        if text.starts_with("postgres://") || text.starts_with("postgresql://") {
            return Ok(HistoryLocation::Postgres(text.to_string()));
        }
        let path = text
            .strip_prefix("sqlite://")
            .or_else(|| text.strip_prefix("sqlite:"))
            .unwrap_or(text);
        if let Some((scheme, _)) = path.split_once("://") {
            return Err(LocationError(format!(
                "`{scheme}://` is not a history this oomgate writes; give sqlite:PATH or postgres://HOST/DB"
            )));
        }
        if path.is_empty() {
            return Err(LocationError(
                "`sqlite:` names no file; give sqlite:PATH".into(),
            ));
        }
        Ok(HistoryLocation::Sqlite(PathBuf::from(path)))
    }

    /// Resolved against `base` (the suite's folder, for `[suite] history`).
    pub fn relative_to(self, base: &Path) -> HistoryLocation {
        match self {
            HistoryLocation::Sqlite(path) if path.is_relative() => {
                HistoryLocation::Sqlite(base.join(path))
            }
            other => other,
        }
    }

    /// For messages: the file, or the URL with its password masked.
    pub fn describe(&self) -> String {
        match self {
            HistoryLocation::Sqlite(path) => format!("sqlite:{}", path.display()),
            HistoryLocation::Postgres(url) => without_password(url),
        }
    }
}

/// `postgres://user:secret@host/db` → `postgres://user:***@host/db`.
fn without_password(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return crate::redact::mask_written(url).into_owned();
    };
    let (authority, tail) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let authority = match authority.rsplit_once('@') {
        Some((user_info, host)) => match user_info.split_once(':') {
            Some((user, _password)) => format!("{user}:***@{host}"),
            None => format!("{user_info}@{host}"),
        },
        None => authority.to_string(),
    };
    crate::redact::mask_written(&format!("{scheme}://{authority}{tail}")).into_owned()
}

//! What the checks of one case share: its settings over `[defaults]`
//! (`pick`, `merged_env`), the case as they read it (`CaseInput`), its
//! env checked, and its program and paths resolved without the file
//! system. Below every check of `validate/`.

use std::path::{Path, PathBuf};

use indexmap::IndexMap;
use toml::Spanned;

use crate::suite::checker::Checker;
use crate::suite::model::RESERVED_ENV;
use crate::suite::raw::{RawCase, RawServer, RawSettingsRef};

/// Effective settings of one case: its own keys over `[defaults]`.
pub(super) fn pick<'a, T>(case: Option<&'a T>, defaults: Option<&'a T>) -> Option<&'a T> {
    case.or(defaults)
}

/// One `[[case]]` as its checks read it: its own keys, its settings over
/// `[defaults]`, its server.
#[derive(Clone, Copy)]
pub(super) struct CaseInput<'a> {
    pub(super) raw: &'a RawCase,
    pub(super) own: RawSettingsRef<'a>,
    pub(super) defaults: RawSettingsRef<'a>,
    pub(super) server: Option<&'a RawServer>,
}

/// Environment: names that a process environment can hold, none reserved.
pub(super) fn check_env(
    check: &mut Checker,
    own: RawSettingsRef<'_>,
    defaults: RawSettingsRef<'_>,
) {
    for (key, value) in merged_env(own, defaults) {
        let name = key.get_ref();
        if name.is_empty() || name.contains('=') || name.contains('\0') {
            check.error(
                key.span(),
                format!("`{name}` is not a valid environment variable name"),
            );
        } else if RESERVED_ENV.contains(&name.as_str()) {
            check.error(
                key.span(),
                format!("`{name}` is set by oomgate for every instance"),
            );
        }
        if value.get_ref().contains('\0') {
            check.error(
                value.span(),
                "contains a NUL byte, which no environment value can hold",
            );
        }
    }
}

/// `[defaults].env` overlaid with the case's `env`, keeping first-seen order.
pub(super) fn merged_env<'a>(
    own: RawSettingsRef<'a>,
    defaults: RawSettingsRef<'a>,
) -> IndexMap<&'a Spanned<String>, &'a Spanned<String>> {
    let mut merged: IndexMap<&Spanned<String>, &Spanned<String>> = IndexMap::new();
    for env in [defaults.env, own.env].into_iter().flatten() {
        for (key, value) in env {
            // Spanned hashes by value, so the case's value replaces the default's.
            merged.insert(key, value);
        }
    }
    merged
}

/// A program with a `/` is a path relative to the case's directory; a bare
/// name is looked up on PATH at launch, like a shell would.
pub(super) fn resolve_program(program: &str, cwd: &Path) -> PathBuf {
    if program.contains('/') {
        lexical_join(cwd, Path::new(program))
    } else {
        PathBuf::from(program)
    }
}

/// Join and drop `.` components without touching the file system (the
/// folder may not exist yet; that is reported when the case launches).
pub(super) fn lexical_join(base: &Path, relative: &Path) -> PathBuf {
    let joined = base.join(relative);
    joined
        .components()
        .filter(|c| !matches!(c, std::path::Component::CurDir))
        .collect()
}

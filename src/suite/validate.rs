//! Second pass over a suite: raw TOML values to checked [`Case`]s.
//!
//! Every check pushes a [`Diagnostic`] and carries on with a placeholder
//! value, so one run of `oomgate check` lists every mistake in the file.
//!
//! The steps of one `[[case]]` live in `validate/`: `matrix` (its keys and
//! values, counted), `placeholders` (what each `{name}` names, and where it
//! may stand), `limits` (time, memory, repeats, GPUs) and `rows` (one
//! [`Case`] per matrix row). `expand_case` runs them, and the checks kept
//! here, in the order their problems are listed.

mod limits;
mod markers;
mod matrix;
mod placeholders;
mod pytest;
pub use pytest::needs_own_process;
mod rows;
mod shared;
mod size;

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::time::Duration;

use indexmap::IndexMap;
use toml::Spanned;

use self::limits::{budget_keys, limits};
use self::shared::{CaseInput, check_env, lexical_join};
use super::budget::Budget;
use super::case::Case;
use super::checked::Suite;
use super::checker::Checker;
use super::located::Diagnostic;
use super::model::{
    DEFAULT_SAMPLE_INTERVAL, DriftPolicy, EnvironmentSpec, ForeignPolicy, GpuMode, MAX_CASES,
    Tolerances,
};
use super::raw::{RawCase, RawEnvironment, RawSettingsRef, RawSuiteFile};
use super::search::search_spec;
use super::server;

const MIN_SAMPLE_INTERVAL: Duration = Duration::from_millis(5);
const MAX_SAMPLE_INTERVAL: Duration = Duration::from_secs(60);

pub(super) fn validate(
    raw: RawSuiteFile,
    source: &str,
    path: &Path,
    folder: &Path,
) -> Result<Suite, Vec<Diagnostic>> {
    let mut check = Checker {
        source,
        problems: Vec::new(),
    };
    let suite_table = raw.suite.get_ref();

    let name = suite_table.name.get_ref().trim().to_string();
    if name.is_empty() {
        check.error(
            suite_table.name.span(),
            "`name` is empty: give the suite a name",
        );
    }
    let sample_interval = match &suite_table.sample_interval {
        None => DEFAULT_SAMPLE_INTERVAL,
        Some(text) => match check.duration("sample_interval", text) {
            Some(d) if (MIN_SAMPLE_INTERVAL..=MAX_SAMPLE_INTERVAL).contains(&d) => d,
            Some(_) => {
                check
                    .error(text.span(), "`sample_interval` must be between 5ms and 60s")
                    .help =
                    Some("50ms is a good start; shorter intervals catch shorter spikes".into());
                DEFAULT_SAMPLE_INTERVAL
            }
            None => DEFAULT_SAMPLE_INTERVAL,
        },
    };
    let gpu = check.choice(
        "gpu",
        suite_table.gpu.as_ref(),
        &[
            ("auto", GpuMode::Auto),
            ("required", GpuMode::Required),
            ("off", GpuMode::Off),
        ],
    );
    let foreign_processes = check.choice(
        "foreign_processes",
        suite_table.foreign_processes.as_ref(),
        &[("warn", ForeignPolicy::Warn), ("fail", ForeignPolicy::Fail)],
    );
    let on_drift = check.choice(
        "on_drift",
        suite_table.on_drift.as_ref(),
        &[("warn", DriftPolicy::Warn), ("fail", DriftPolicy::Fail)],
    );
    let workdir = match &suite_table.workdir {
        None => folder.to_path_buf(),
        Some(dir) => lexical_join(folder, Path::new(dir.get_ref())),
    };
    let suite_tolerance = check.tolerance(Tolerances::default(), suite_table.tolerance.as_ref());
    let mut redact = Vec::new();
    for pattern in suite_table.redact.iter().flatten() {
        match crate::redact::compile_pattern(pattern.get_ref()) {
            Ok(_) => redact.push(pattern.get_ref().clone()),
            Err(e) => {
                check
                    .error(pattern.span(), format!("`redact` pattern is not usable: {e}"))
                    .help = Some(
                    "a pattern is a regex (Rust syntax); a capture group masks only what it captures, e.g. \"ticket=(\\w+)\"".into(),
                );
            }
        }
    }
    let environment = environment_spec(&mut check, raw.environment.as_ref().map(|e| e.get_ref()));
    let history = suite_table.history.as_ref().and_then(|text| {
        match crate::files::HistoryLocation::parse(text.get_ref()) {
            Ok(location) => Some(location.relative_to(folder)),
            Err(e) => {
                check.error(text.span(), format!("`history`: {e}")).help = Some(
                    "a history is `sqlite:PATH` (a file beside the suite when relative) or `postgres://HOST/DB` (docs/history.md)".into(),
                );
                None
            }
        }
    });

    let mut defaults = raw
        .defaults
        .as_ref()
        .map(|d| d.get_ref().settings())
        .unwrap_or_default();
    // `[suite] settle_timeout` is the layer under `[defaults]`.
    defaults.settle_timeout = defaults
        .settle_timeout
        .or(suite_table.settle_timeout.as_ref());
    defaults.creep = defaults.creep.or(suite_table.creep.as_ref());
    if raw.defaults.is_some() {
        // Checked on their own too, so a bad default is reported even when
        // every case overrides it (duplicates are dropped below).
        limits(
            &mut check,
            defaults,
            RawSettingsRef::default(),
            suite_tolerance,
        );
    }
    if raw.cases.is_empty() && raw.pytests.is_empty() {
        check
            .error(raw.suite.span(), "the suite has no `[[case]]` and no `[[pytest]]`")
            .help = Some("add at least one [[case]] with a `name` and a `command`, or a [[pytest]] with the `paths` of a pytest suite".into());
    }

    let mut cases = Vec::new();
    let mut id_spans = Vec::new();
    let mut room = MAX_CASES;
    let mut bytes_room = super::model::MAX_PLAN_BYTES;
    let mut seen_ids: HashSet<String> = HashSet::new();
    let mut seen_folders: HashMap<String, String> = HashMap::new();
    for raw_case in &raw.cases {
        let raw_case = raw_case.get_ref();
        for case in expand_case(
            &mut check,
            raw_case,
            defaults,
            suite_tolerance,
            &workdir,
            &mut room,
            &mut bytes_room,
        ) {
            let name_span = raw_case.name.span();
            // An id is written into every report (a JUnit name, a Markdown
            // row, a terminal line): it must be something to see, and no
            // control character may rewrite the line it stands on.
            if case.id.trim().is_empty() || case.id.chars().any(char::is_control) {
                let shown: String = case.id.escape_debug().collect();
                check
                    .error(
                        name_span,
                        format!("case id \"{shown}\" is empty or holds a control character"),
                    )
                    .help = Some(
                    "a case's name (with its matrix values in) must be visible text: no newline, tab or escape"
                        .to_string(),
                );
                continue;
            }
            if seen_ids.contains(&case.id) {
                check
                    .error(name_span, format!("duplicate case id `{}`", case.id))
                    .help = Some(duplicate_help(raw_case));
                continue;
            }
            if let Some(other) = seen_folders.get(&case.folder) {
                check
                    .error(
                        name_span,
                        format!(
                            "case ids `{other}` and `{}` would share the folder cases/{}",
                            case.id, case.folder
                        ),
                    )
                    .help = Some(
                    "rename one of them; folder names keep only letters, digits, `.`, `_` and `-`"
                        .into(),
                );
                continue;
            }
            seen_ids.insert(case.id.clone());
            seen_folders.insert(case.folder.clone(), case.id.clone());
            cases.push(case);
            id_spans.push(name_span);
        }
    }
    let warnings = secret_ids(&mut check, &name, &cases, &id_spans, &redact);
    let parity = super::parity::checked(&mut check, &raw.parities, &cases);
    let pytest = raw
        .pytests
        .iter()
        .enumerate()
        .filter_map(|(index, table)| {
            pytest::source(
                &mut check,
                index,
                table,
                defaults,
                suite_tolerance,
                &workdir,
                environment.python.as_deref(),
            )
        })
        .collect();

    // A default inherited by several cases is checked once per case.
    let mut seen = HashSet::new();
    check
        .problems
        .retain(|p| seen.insert((p.span.clone(), p.message.clone())));
    if check.problems.is_empty() {
        Ok(Suite {
            name,
            path: path.to_path_buf(),
            workdir,
            sample_interval,
            gpu,
            foreign_processes,
            on_drift,
            environment,
            redact,
            history,
            history_required: suite_table.history_required.unwrap_or(false),
            cases,
            parity,
            pytest,
            pytest_plugin: None,
            xdist_workers: None,
            warnings: warnings
                .into_iter()
                .map(|w| super::located::Located::resolve(source, w))
                .collect(),
        })
    } else {
        Err(check.problems)
    }
}

/// A case id is written into every report, the lock and a folder name, so
/// it is never masked: one that holds a secret's value (a secret-named
/// variable's, a secret flag's, a `redact` pattern's match) is an error,
/// located; one that only looks like a token is the user's name for the
/// case, and a warning.
fn secret_ids(
    check: &mut Checker<'_>,
    suite: &str,
    cases: &[Case],
    spans: &[std::ops::Range<usize>],
    patterns: &[String],
) -> Vec<Diagnostic> {
    let redactor = super::secrets::suite_secrets(suite, cases, patterns).redactor();
    let mut warnings = Vec::new();
    for (case, span) in cases.iter().zip(spans) {
        let masked = redactor.mask_suite(&case.id);
        if masked != case.id.as_str() {
            check
                .error(
                    span.clone(),
                    format!("case id `{masked}` holds a secret"),
                )
                .help = Some(
                "it holds the value of a secret-named variable or a secret flag, or matches a `redact` pattern, and a case id is written into every report and the lock: name the case without it, e.g. with a matrix key that is not the secret".into(),
            );
        } else if redactor.mask(&case.id) != case.id.as_str() {
            warnings.push(Diagnostic::new(
                Some(span.clone()),
                format!(
                    "warning: case id `{}` looks like a token; it is the case's name, so reports and the lock write it as it is",
                    case.id
                ),
            ));
        }
    }
    warnings
}

fn duplicate_help(raw_case: &RawCase) -> String {
    match &raw_case.matrix {
        Some(matrix) => {
            let keys: Vec<String> = matrix
                .get_ref()
                .keys()
                .map(|k| format!("{{{}}}", k.get_ref()))
                .collect();
            format!(
                "put every matrix key in the name so each row gets its own id: {}",
                keys.join(" ")
            )
        }
        None => "case names must be unique after matrix expansion".to_string(),
    }
}

/// Check one `[[case]]` and expand its matrix. Returns no cases when the
/// case itself is invalid (its problems are recorded in `check`).
///
/// The steps run in the order their problems are listed, and a later step
/// still runs after an earlier one failed, so every mistake is reported
/// (only a matrix too large to expand stops the case at once).
fn expand_case(
    check: &mut Checker,
    raw: &RawCase,
    defaults: RawSettingsRef<'_>,
    suite_tolerance: Tolerances,
    workdir: &Path,
    room: &mut usize,
    bytes_room: &mut u64,
) -> Vec<Case> {
    let before = check.problems.len();
    let case = CaseInput {
        raw,
        own: raw.settings(),
        defaults,
        server: raw.server.as_ref().map(Spanned::get_ref),
    };
    let Some(matrix) = matrix::checked_matrix(check, raw, room) else {
        return Vec::new();
    };
    // Measured before anything is expanded, as the matrix was counted.
    if !size::checked_size(check, &case, &matrix, bytes_room) {
        return Vec::new();
    }
    let search = raw
        .search
        .as_ref()
        .and_then(|spec| search_spec(check, spec, raw.capacity_tolerance.as_ref(), &matrix));
    placeholders::check_port_not_taken(check, &case, &matrix);
    check_companion_keys(check, &case);
    let searched = search.as_ref().map(|s| s.param.as_str());
    if let Some(param) = searched.filter(|p| *p != crate::capacity::CONCURRENCY) {
        placeholders::check_searched_placeholder(check, &case, param);
    }
    placeholders::check_port_placement(check, &case);
    check_searched_concurrency(check, &case, searched);
    // The parameter a search names is known even when the search itself
    // was refused (bounds out of order): its placeholder is no second,
    // spurious error.
    let named = raw
        .search
        .as_ref()
        .map(|spec| spec.get_ref().param.get_ref().as_str());
    placeholders::check_placeholders_known(check, &case, &matrix, searched.or(named));
    check_command(check, raw);
    check_env(check, case.own, case.defaults);

    let limits = limits(check, case.own, defaults, suite_tolerance);
    let server = raw
        .server
        .as_ref()
        .and_then(|spec| server::server(check, spec, limits.timeout));
    let outputs = raw
        .metrics_from_output
        .as_ref()
        .map(|list| super::output::checked(check, list))
        .unwrap_or_default();
    let mut client_budget = Budget::default();
    if let Some(raw_budget) = raw.client_budget.as_ref().filter(|_| case.server.is_some()) {
        client_budget = budget_keys(check, "client_budget", [Some(raw_budget)]);
    }
    if check.problems.len() > before {
        return Vec::new();
    }
    let (Some(timeout), Some(kill_grace)) = (limits.timeout, limits.kill_grace) else {
        return Vec::new();
    };
    let settled = rows::Settled {
        timeout,
        kill_grace,
        limits,
        search,
        server,
        client_budget,
        outputs,
    };
    rows::expand_rows(check, &case, workdir, &matrix, settled)
}

/// Keys that mean something only beside another: `client_budget` judges a
/// server's load client, `capacity_tolerance` compares a search's capacity.
fn check_companion_keys(check: &mut Checker, case: &CaseInput) {
    let raw = case.raw;
    if let (None, Some(budget)) = (case.server, &raw.client_budget) {
        check.error(
            budget.span(),
            "`client_budget` without `server`: the case's own figures are its command's, judged by `budget`",
        );
    }
    if let (None, Some(tolerance)) = (&raw.search, &raw.capacity_tolerance) {
        check.error(
            tolerance.span(),
            "`capacity_tolerance` without `search`: there is no capacity to compare",
        );
    }
}

/// A searched `concurrency` is set by the search for each probe, so the
/// case may not set it as well.
fn check_searched_concurrency(check: &mut Checker, case: &CaseInput, searched: Option<&str>) {
    if let (Some(crate::capacity::CONCURRENCY), Some(key)) = (searched, case.own.concurrency) {
        check.error(
            key.span(),
            "`concurrency` is searched: the search sets it for each probe",
        );
    }
}

/// Command: a non-empty argv whose program is not empty, and no NUL byte
/// in it or in the name.
fn check_command(check: &mut Checker, raw: &RawCase) {
    let command = raw.command.get_ref();
    match command.first() {
        None => {
            check.error(raw.command.span(), "`command` is empty").help =
                Some("write the argv as a list, e.g. command = [\"python3\", \"train.py\"]".into());
        }
        Some(program) if program.get_ref().trim().is_empty() => {
            check.error(
                program.span(),
                "the program (first element of `command`) is empty",
            );
        }
        Some(_) => {}
    }
    for arg in command.iter().chain(std::iter::once(&raw.name)) {
        if arg.get_ref().contains('\0') {
            check.error(
                arg.span(),
                "contains a NUL byte, which no process argument can hold",
            );
        }
    }
}

/// `[environment]`: checked, with defaults. Python packages need an
/// interpreter; `python3` is assumed when packages or freeze are asked.
fn environment_spec(check: &mut Checker, raw: Option<&RawEnvironment>) -> EnvironmentSpec {
    let Some(raw) = raw else {
        return EnvironmentSpec::default();
    };
    let packages: Vec<String> = raw
        .packages
        .iter()
        .flatten()
        .map(|p| p.get_ref().trim().to_string())
        .collect();
    for package in raw.packages.iter().flatten() {
        if package.get_ref().trim().is_empty() {
            check.error(package.span(), "an empty package name");
        }
    }
    let freeze = raw.freeze.unwrap_or(false);
    let python = match &raw.python {
        Some(python) if python.get_ref().trim().is_empty() => {
            check.error(
                python.span(),
                "`python` is empty: name the interpreter the workloads use",
            );
            None
        }
        Some(python) => Some(python.get_ref().clone()),
        None if !packages.is_empty() || freeze => Some("python3".to_string()),
        None => None,
    };
    let mut commands = IndexMap::new();
    for (name, argv) in raw.commands.iter().flatten() {
        if argv.get_ref().is_empty() || argv.get_ref()[0].get_ref().trim().is_empty() {
            check.error(
                argv.span(),
                format!("command `{}` is empty", name.get_ref()),
            );
            continue;
        }
        commands.insert(
            name.get_ref().clone(),
            argv.get_ref().iter().map(|a| a.get_ref().clone()).collect(),
        );
    }
    EnvironmentSpec {
        python,
        packages,
        freeze,
        commands,
    }
}

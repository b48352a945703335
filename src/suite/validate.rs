//! Second pass over a suite: raw TOML values to checked [`Case`]s.
//!
//! Every check pushes a [`Diagnostic`] and carries on with a placeholder
//! value, so one run of `oomgate check` lists every mistake in the file.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use indexmap::IndexMap;

use crate::units::Bytes;
use toml::Spanned;

use super::checker::Checker;
use super::raw::{RawCase, RawEnvironment, RawSettingsRef, RawSuiteFile};
use super::search::search_spec;
use super::server::{self, PORT};
use super::template::{expand_matrix, folder_name, is_identifier, placeholders, substitute};
use super::{
    Budget, Case, DEFAULT_KILL_GRACE, DEFAULT_SAMPLE_INTERVAL, DEFAULT_TIMEOUT, Diagnostic,
    DriftPolicy, EnvironmentSpec, ForeignPolicy, GpuMode, Leak, Limit, MAX_CASE_TIME, MAX_CASES,
    RESERVED_ENV, Suite, Templates, Tolerances,
};

const MIN_SAMPLE_INTERVAL: Duration = Duration::from_millis(5);
const MAX_SAMPLE_INTERVAL: Duration = Duration::from_secs(60);

/// Effective settings of one case: its own keys over `[defaults]`.
fn pick<'a, T>(case: Option<&'a T>, defaults: Option<&'a T>) -> Option<&'a T> {
    case.or(defaults)
}

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

    let defaults = raw
        .defaults
        .as_ref()
        .map(|d| d.get_ref().as_ref())
        .unwrap_or_default();
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
    if raw.cases.is_empty() {
        check
            .error(raw.suite.span(), "the suite has no `[[case]]`")
            .help = Some("add at least one [[case]] with a `name` and a `command`".into());
    }

    let mut cases = Vec::new();
    let mut room = MAX_CASES;
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
        ) {
            let name_span = raw_case.name.span();
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
        }
    }

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
            cases,
        })
    } else {
        Err(check.problems)
    }
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
fn expand_case(
    check: &mut Checker,
    raw: &RawCase,
    defaults: RawSettingsRef<'_>,
    suite_tolerance: Tolerances,
    workdir: &Path,
    room: &mut usize,
) -> Vec<Case> {
    let before = check.problems.len();
    let own = raw.settings();

    // Matrix: each key a non-empty list of scalars.
    let mut matrix: IndexMap<String, Vec<String>> = IndexMap::new();
    if let Some(raw_matrix) = &raw.matrix {
        if raw_matrix.get_ref().is_empty() {
            check.error(
                raw_matrix.span(),
                "`matrix` is empty: remove it or give it a key",
            );
        }
        for (key, values) in raw_matrix.get_ref() {
            if !is_identifier(key.get_ref()) {
                check
                    .error(
                        key.span(),
                        format!(
                            "matrix key `{}` cannot be used as a placeholder",
                            key.get_ref()
                        ),
                    )
                    .help =
                    Some("use letters, digits, `_` and `-`, starting with a letter or `_`".into());
            }
            if values.get_ref().is_empty() {
                check
                    .error(
                        values.span(),
                        format!("matrix key `{}` has no values", key.get_ref()),
                    )
                    .help = Some("an empty list would expand to no cases at all".into());
            }
            let mut texts = Vec::new();
            for value in values.get_ref() {
                match scalar_text(value, check.source) {
                    Some(text) => texts.push(text),
                    None => {
                        check.error(
                            value.span(),
                            format!(
                                "matrix values must be strings, numbers or booleans, found a {}",
                                value.get_ref().type_str()
                            ),
                        );
                    }
                }
            }
            matrix.insert(key.get_ref().clone(), texts);
        }
        // Counted before anything is expanded: 10 keys of 10 values are
        // 10^10 cases, which no machine holds.
        let product = matrix
            .values()
            .try_fold(1usize, |product, values| product.checked_mul(values.len()));
        if product.is_none_or(|product| product > *room) {
            let sizes: Vec<String> = matrix.values().map(|v| v.len().to_string()).collect();
            let count = product.map_or("more than 2^64".to_string(), |p| p.to_string());
            check
                .error(
                    raw_matrix.span(),
                    format!(
                        "the matrix expands to {count} cases ({}), more than the {MAX_CASES} a suite may hold{}",
                        sizes.join(" x "),
                        if *room < MAX_CASES { " with its other cases" } else { "" }
                    ),
                )
                .help = Some("split it into several suites, or fewer values per key".into());
            return Vec::new();
        }
        *room -= product.unwrap_or(0);
    } else {
        *room = room.saturating_sub(1);
    }

    let search = raw
        .search
        .as_ref()
        .and_then(|spec| search_spec(check, spec, raw.capacity_tolerance.as_ref(), &matrix));
    let raw_server = raw.server.as_ref().map(Spanned::get_ref);
    // With a server, `{port}` is its port: no matrix key or search may
    // take the name (without one, `port` is a key like any other).
    let port_key = matrix
        .contains_key(PORT)
        .then(|| raw.matrix.as_ref().map(Spanned::span))
        .flatten();
    let port_searched = raw
        .search
        .as_ref()
        .map(Spanned::get_ref)
        .filter(|spec| spec.param.get_ref() == PORT)
        .map(|spec| spec.param.span());
    let reserved_port = raw_server.and(port_key.or(port_searched));
    if let Some(span) = reserved_port {
        check
            .error(
                span,
                "`port` is reserved: `{port}` is the port oomgate picks for the case's server",
            )
            .help = Some("name the matrix key or searched parameter otherwise".into());
    }
    if let (None, Some(budget)) = (raw_server, &raw.client_budget) {
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
    let searched = search.as_ref().map(|s| s.param.as_str());
    // The searched placeholder lives in the command and env only: in the
    // name it would change the case's id from probe to probe.
    if let Some(param) = searched.filter(|p| *p != crate::capacity::CONCURRENCY) {
        let mut outside: Vec<&Spanned<String>> = vec![&raw.name];
        outside.extend(pick(own.cwd, defaults.cwd));
        outside.extend(raw.command.get_ref().first());
        outside.extend(raw_server.and_then(|s| s.command.get_ref().first()));
        for template in outside {
            if placeholders(template.get_ref()).contains(&param) {
                check
                    .error(
                        template.span(),
                        format!("`{{{param}}}` is searched: it may be used in the command's arguments and the env only"),
                    )
                    .help = Some("the case's name, folder and program stay the same across the search's probes".into());
            }
        }
        let server_args = raw_server.into_iter().flat_map(|s| {
            s.command
                .get_ref()
                .iter()
                .skip(1)
                .chain(s.env.iter().flat_map(|e| e.values()))
        });
        let used = raw
            .command
            .get_ref()
            .iter()
            .skip(1)
            .chain(server_args)
            .any(|arg| placeholders(arg.get_ref()).contains(&param))
            || merged_env(own, defaults)
                .values()
                .any(|value| placeholders(value.get_ref()).contains(&param));
        if !used {
            if let Some(spec) = &raw.search {
                check
                    .error(
                        spec.get_ref().param.span(),
                        format!("`search.param = \"{param}\"` but no `{{{param}}}` in the command or env (or the server's)"),
                    )
                    .help = Some(format!(
                    "write `{{{param}}}` where the value goes, e.g. \"--batch-size={{{param}}}\"; or search `concurrency`"
                ));
            }
        }
    }

    // Every placeholder must name a matrix key (or the searched one; a
    // searched `concurrency` is the number of instances, no placeholder).
    let searched_placeholder = searched.filter(|p| *p != crate::capacity::CONCURRENCY);
    let known = |name: &str| {
        matrix.contains_key(name)
            || searched_placeholder == Some(name)
            || (name == PORT && raw_server.is_some())
    };
    // The port changes from launch to launch: never in the case's name,
    // folder or program.
    let mut fixed: Vec<&Spanned<String>> = vec![&raw.name];
    fixed.extend(pick(own.cwd, defaults.cwd));
    fixed.extend(raw.command.get_ref().first());
    for template in fixed {
        if raw_server.is_some() && placeholders(template.get_ref()).contains(&PORT) {
            check.error(
                template.span(),
                "`{port}` changes from launch to launch: it may be used in the command's arguments and the env only",
            );
        }
    }
    if let (Some(crate::capacity::CONCURRENCY), Some(key)) = (searched, own.concurrency) {
        check.error(
            key.span(),
            "`concurrency` is searched: the search sets it for each probe",
        );
    }
    let mut templates: Vec<&Spanned<String>> = vec![&raw.name];
    templates.extend(raw.command.get_ref().iter());
    templates.extend(pick(own.cwd, defaults.cwd));
    let env_values: Vec<&Spanned<String>> = merged_env(own, defaults).into_values().collect();
    templates.extend(env_values.iter().copied());
    if let Some(server) = raw_server {
        templates.extend(server.command.get_ref().iter());
        templates.extend(server.env.iter().flat_map(|env| env.values()));
    }
    let ready_text = raw_server.and_then(server::ready_template);
    let ready_span = raw.server.as_ref().map(|s| s.get_ref().ready.span());
    for name in ready_text.map(placeholders).unwrap_or_default() {
        if !known(name) {
            check
                .error(
                    ready_span.clone().unwrap_or_default(),
                    format!("placeholder `{{{name}}}` in `server.ready` has no matrix key"),
                )
                .help = Some(
                "in a `log` pattern, write `{{` and `}}` for a regex's own braces around a name"
                    .into(),
            );
        }
    }
    for template in templates {
        for name in placeholders(template.get_ref()) {
            if name == PORT && !known(name) {
                check
                    .error(
                        template.span(),
                        "`{port}` is the port of the case's server, and this case has no `server`",
                    )
                    .help = Some(
                    "add `server = { command = [...], ready = \"http://127.0.0.1:{port}/health\" }`, or write `{{port}}` for literal braces".into(),
                );
                continue;
            }
            if !known(name) {
                let keys: Vec<&str> = matrix.keys().map(String::as_str).collect();
                check
                    .error(
                        template.span(),
                        format!("placeholder `{{{name}}}` has no matrix key"),
                    )
                    .help = Some(if keys.is_empty() {
                    format!(
                        "add `matrix = {{ {name} = [...] }}` to the case, or write `{{{{{name}}}}}` for literal braces"
                    )
                } else {
                    format!(
                        "matrix keys here: {}; write `{{{{{name}}}}}` for literal braces",
                        keys.join(", ")
                    )
                });
            }
        }
    }

    // Command: a non-empty argv whose program is not empty.
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

    // Environment: names that a process environment can hold, none reserved.
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

    let Limits {
        timeout,
        kill_grace,
        soak,
        concurrency,
        budget,
        tolerance,
        repeat,
        limits: probe_limits,
        leak,
        gpus,
        gpu_memory,
    } = limits(check, own, defaults, suite_tolerance);
    let server = raw
        .server
        .as_ref()
        .and_then(|spec| server::server(check, spec, timeout));
    let mut client_budget = Budget::default();
    if let Some(raw_budget) = raw.client_budget.as_ref().filter(|_| raw_server.is_some()) {
        client_budget = budget_keys(check, "client_budget", [Some(raw_budget)]);
    }
    if check.problems.len() > before {
        return Vec::new();
    }
    let (Some(timeout), Some(kill_grace)) = (timeout, kill_grace) else {
        return Vec::new();
    };

    let mut cases = Vec::new();
    for params in expand_matrix(&matrix) {
        let id = substitute(raw.name.get_ref(), &params);
        let command: Vec<String> = command
            .iter()
            .map(|arg| substitute(arg.get_ref(), &params))
            .collect();
        let env: IndexMap<String, String> = merged_env(own, defaults)
            .into_iter()
            .map(|(k, v)| (k.get_ref().clone(), substitute(v.get_ref(), &params)))
            .collect();
        // Matrix values can empty a program or bring a NUL byte in: check
        // what will really be launched.
        if command[0].trim().is_empty() {
            check.error(
                raw.command.get_ref()[0].span(),
                format!("in case `{id}`, the program is empty after substitution"),
            );
        }
        let nul = command
            .iter()
            .chain(env.values())
            .chain(std::iter::once(&id))
            .any(|text| text.contains('\0'));
        if nul {
            check.error(
                raw.name.span(),
                format!("case `{id}` has a NUL byte after substitution, which no process can take"),
            );
        }
        if command[0].trim().is_empty() || nul {
            continue;
        }
        let cwd = match pick(own.cwd, defaults.cwd) {
            Some(dir) => lexical_join(workdir, Path::new(&substitute(dir.get_ref(), &params))),
            None => workdir.to_path_buf(),
        };
        let program = resolve_program(&command[0], &cwd);
        let templates = Templates {
            command: raw
                .command
                .get_ref()
                .iter()
                .map(|a| a.get_ref().clone())
                .collect(),
            env: merged_env(own, defaults)
                .into_iter()
                .map(|(k, v)| (k.get_ref().clone(), v.get_ref().clone()))
                .collect(),
        };
        if let (Some(draft), Some(spec)) = (&server, &raw.server) {
            if let Err(message) = draft.check_row(&params) {
                check.error(spec.span(), format!("in case `{id}`, {message}"));
                continue;
            }
        }
        let server = server
            .as_ref()
            .map(|draft| draft.for_row(&params, |program| resolve_program(program, &cwd)));
        cases.push(Case {
            folder: folder_name(&id),
            id,
            params,
            command,
            program,
            cwd,
            env,
            timeout,
            kill_grace,
            concurrency,
            soak,
            budget,
            tolerance,
            repeat,
            limits: probe_limits.clone(),
            leak,
            gpus,
            gpu_memory,
            search: search.clone(),
            templates,
            server,
            client_budget,
        });
    }
    cases
}

/// The time and memory limits of a case (or of `[defaults]` alone).
struct Limits {
    timeout: Option<Duration>,
    kill_grace: Option<Duration>,
    soak: Option<Duration>,
    concurrency: u32,
    budget: Budget,
    tolerance: Tolerances,
    repeat: u32,
    limits: Vec<Limit>,
    leak: Option<Leak>,
    gpus: Option<u32>,
    gpu_memory: Option<Bytes>,
}

/// Most GPUs a case may ask for: more than any machine has.
const MAX_CASE_GPUS: u32 = 64;

const MAX_KILL_GRACE: Duration = Duration::from_secs(3600);

fn limits(
    check: &mut Checker,
    own: RawSettingsRef<'_>,
    defaults: RawSettingsRef<'_>,
    suite_tolerance: Tolerances,
) -> Limits {
    let timeout = match pick(own.timeout, defaults.timeout) {
        None => Some(DEFAULT_TIMEOUT),
        Some(text) => check
            .bounded_duration("timeout", text, MAX_CASE_TIME)
            .filter(|d| {
                let ok = !d.is_zero();
                if !ok {
                    check.error(text.span(), "`timeout` must be longer than zero");
                }
                ok
            }),
    };
    let kill_grace = match pick(own.kill_grace, defaults.kill_grace) {
        None => Some(DEFAULT_KILL_GRACE),
        Some(text) => check.bounded_duration("kill_grace", text, MAX_KILL_GRACE),
    };
    let soak = match pick(own.duration, defaults.duration) {
        None => None,
        Some(text) => {
            let soak = check.bounded_duration("duration", text, MAX_CASE_TIME);
            if let (Some(soak), Some(timeout)) = (soak, timeout) {
                if soak >= timeout {
                    check.error(
                        text.span(),
                        format!(
                            "`duration` ({}) must be shorter than `timeout` ({})",
                            text.get_ref(),
                            humantime::format_duration(timeout)
                        ),
                    )
                    .help = Some("the timeout covers the whole soak, including the last run started before `duration` ends".into());
                }
            }
            soak
        }
    };
    let concurrency = match pick(own.concurrency, defaults.concurrency) {
        None => 1,
        Some(n) => match u32::try_from(*n.get_ref()) {
            Ok(value) if (1..=1024).contains(&value) => value,
            _ => {
                check.error(
                    n.span(),
                    format!(
                        "`concurrency` must be between 1 and 1024, not {}",
                        n.get_ref()
                    ),
                );
                1
            }
        },
    };

    // Keys merge one by one: a case's budget.host does not drop a default budget.gpu.
    let budget = budget_keys(check, "budget", [defaults.budget, own.budget]);
    let tolerance = check.tolerance(suite_tolerance, defaults.tolerance);
    let tolerance = check.tolerance(tolerance, own.tolerance);
    let repeat = match pick(own.repeat, defaults.repeat) {
        None => 1,
        Some(n) => match u32::try_from(*n.get_ref()) {
            Ok(value) if (1..=100).contains(&value) => value,
            _ => {
                check.error(
                    n.span(),
                    format!("`repeat` must be between 1 and 100, not {}", n.get_ref()),
                );
                1
            }
        },
    };
    // Keys merge one by one: a case's limit replaces the default's for the
    // same key and keeps the others.
    let mut limits: Vec<Limit> = Vec::new();
    for raw in [defaults.limits, own.limits].into_iter().flatten() {
        for (key, value) in raw.get_ref() {
            if let Some(limit) = check.limit(key, value) {
                limits.retain(|l| l.key != limit.key);
                limits.push(limit);
            }
        }
    }
    let leak = pick(own.leak, defaults.leak).map(|raw| {
        let raw = raw.get_ref();
        let warmup = match &raw.warmup {
            None => 3,
            Some(n) => u32::try_from(*n.get_ref()).unwrap_or_else(|_| {
                check.error(
                    n.span(),
                    format!("`leak.warmup` must be 0 or more, not {}", n.get_ref()),
                );
                3
            }),
        };
        let max_growth = match &raw.max_growth {
            None => Bytes::from_mib(64),
            Some(value) => check
                .size("leak.max_growth", value)
                .unwrap_or(Bytes::from_mib(64)),
        };
        Leak { warmup, max_growth }
    });
    let gpus = pick(own.gpus, defaults.gpus).and_then(|n| match u32::try_from(*n.get_ref()) {
        Ok(value) if value <= MAX_CASE_GPUS => Some(value),
        _ => {
            check
                .error(
                    n.span(),
                    format!(
                        "`gpus` must be between 0 and {MAX_CASE_GPUS}, not {}",
                        n.get_ref()
                    ),
                )
                .help = Some(
                "whole GPUs the case needs from the pool (`--gpus`); 0 for a host-only case".into(),
            );
            None
        }
    });
    let gpu_memory =
        pick(own.gpu_memory, defaults.gpu_memory).and_then(|value| check.size("gpu_memory", value));
    if let (Some(0), Some(value)) = (gpus, pick(own.gpu_memory, defaults.gpu_memory)) {
        check.error(
            value.span(),
            "`gpu_memory` is set but `gpus = 0` gives the case no GPU",
        );
    }
    if gpus == Some(0) {
        for (key, set) in [
            ("budget.gpu", budget.gpu.is_some()),
            ("budget.gpu_fraction", budget.gpu_fraction.is_some()),
        ] {
            if set {
                let span = pick(own.gpus, defaults.gpus)
                    .map(|n| n.span())
                    .unwrap_or_default();
                check.error(
                    span,
                    format!("`gpus = 0` gives the case no GPU, yet it has a `{key}`"),
                );
            }
        }
    }
    Limits {
        timeout,
        kill_grace,
        soak,
        concurrency,
        budget,
        tolerance,
        repeat,
        limits,
        leak,
        gpus,
        gpu_memory,
    }
}

/// A budget's keys, later tables overriding earlier ones key by key.
fn budget_keys<const N: usize>(
    check: &mut Checker,
    key: &str,
    tables: [Option<&Spanned<super::raw::RawBudget>>; N],
) -> Budget {
    let mut budget = Budget::default();
    for raw_budget in tables.into_iter().flatten() {
        let raw_budget = raw_budget.get_ref();
        if let Some(host) = &raw_budget.host {
            budget.host = check.size(&format!("{key}.host"), host);
        }
        if let Some(gpu) = &raw_budget.gpu {
            budget.gpu = check.size(&format!("{key}.gpu"), gpu);
        }
        if let Some(fraction) = &raw_budget.gpu_fraction {
            budget.gpu_fraction = check.fraction(&format!("{key}.gpu_fraction"), fraction);
        }
    }
    budget
}

/// `[defaults].env` overlaid with the case's `env`, keeping first-seen order.
fn merged_env<'a>(
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

/// A matrix value as the text substituted into commands. Floats keep the
/// spelling the suite used (`1.0`, `2.5e-5`), not Rust's reformatting.
fn scalar_text(value: &Spanned<toml::Value>, source: &str) -> Option<String> {
    match value.get_ref() {
        toml::Value::String(s) => Some(s.clone()),
        toml::Value::Integer(n) => Some(n.to_string()),
        toml::Value::Float(f) => Some(
            source
                .get(value.span())
                .map(|text| text.trim().replace('_', ""))
                .unwrap_or_else(|| f.to_string()),
        ),
        toml::Value::Boolean(b) => Some(b.to_string()),
        _ => None,
    }
}

/// A program with a `/` is a path relative to the case's directory; a bare
/// name is looked up on PATH at launch, like a shell would.
fn resolve_program(program: &str, cwd: &Path) -> PathBuf {
    if program.contains('/') {
        lexical_join(cwd, Path::new(program))
    } else {
        PathBuf::from(program)
    }
}

/// Join and drop `.` components without touching the file system (the
/// folder may not exist yet; that is reported when the case launches).
fn lexical_join(base: &Path, relative: &Path) -> PathBuf {
    let joined = base.join(relative);
    joined
        .components()
        .filter(|c| !matches!(c, std::path::Component::CurDir))
        .collect()
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

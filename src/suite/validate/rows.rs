//! A checked case's matrix rows, each made one [`Case`]: its id, command,
//! env and cwd filled in, its program resolved, its server's row built.
//!
//! [`Settled`] is what every row of the case shares. Each row is checked
//! again after substitution, because a matrix value can empty the program
//! or bring in a NUL byte that the templates as written did not have; a bad
//! row is reported and skipped, and the other rows still expand, so one
//! check lists every bad row at once.

use std::path::Path;
use std::time::Duration;

use indexmap::IndexMap;

use super::limits::Limits;
use super::shared::{CaseInput, lexical_join, merged_env, pick, resolve_program};
use crate::capacity::SearchSpec;
use crate::suite::budget::Budget;
use crate::suite::case::Case;
use crate::suite::checker::Checker;
use crate::suite::server::ServerDraft;
use crate::suite::template::Templates;
use crate::suite::template::{expand_matrix, folder_name, substitute};

/// What every row of a case shares, once the case checked clean.
pub(super) struct Settled {
    pub(super) timeout: Duration,
    pub(super) kill_grace: Duration,
    /// The case's limits; their `timeout` and `kill_grace` are the two above.
    pub(super) limits: Limits,
    pub(super) search: Option<SearchSpec>,
    pub(super) server: Option<ServerDraft>,
    pub(super) client_budget: Budget,
    /// `metrics_from_output`, checked.
    pub(super) outputs: Vec<crate::suite::OutputMetric>,
}

/// One case per row of `matrix` (one for a case without a matrix).
pub(super) fn expand_rows(
    check: &mut Checker,
    case: &CaseInput,
    workdir: &Path,
    matrix: &IndexMap<String, Vec<String>>,
    settled: Settled,
) -> Vec<Case> {
    let CaseInput {
        raw, own, defaults, ..
    } = *case;
    let Settled {
        timeout,
        kill_grace,
        limits:
            Limits {
                soak,
                concurrency,
                budget,
                tolerance,
                repeat,
                limits: probe_limits,
                leak,
                gpus,
                gpu_memory,
                settle_timeout,
                sites_depth,
                creep,
                ..
            },
        search,
        server,
        client_budget,
        outputs,
    } = settled;
    let command = raw.command.get_ref();
    let mut cases = Vec::new();
    for params in expand_matrix(matrix) {
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
            creep,
            gpus,
            gpu_memory,
            settle_timeout,
            sites_depth,
            search: search.clone(),
            templates,
            server,
            client_budget,
            outputs: outputs.clone(),
            pytest: None,
            pytest_session: None,
        });
    }
    cases
}

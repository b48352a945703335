//! What a case's `{name}` placeholders may name and where they may stand:
//! a matrix key, the searched parameter, or (with a server) `{port}`; the
//! searched value and the port only in the command's arguments and the
//! env, the places that may change from one probe or launch to the next.
//!
//! Its checks take the one case as [`CaseInput`]. They read the templates
//! as written, before any row is expanded, so a misplaced placeholder is
//! reported once at its place instead of once per matrix row; what only
//! substitution can break is checked per row, in `rows`.

use indexmap::IndexMap;
use toml::Spanned;

use super::shared::{CaseInput, merged_env, pick};
use crate::suite::checker::Checker;
use crate::suite::server::{self, PORT};
use crate::suite::template::placeholders;

/// With a server, `{port}` is its port: no matrix key or search may
/// take the name (without one, `port` is a key like any other).
pub(super) fn check_port_not_taken(
    check: &mut Checker,
    case: &CaseInput,
    matrix: &IndexMap<String, Vec<String>>,
) {
    let CaseInput {
        raw,
        server: raw_server,
        ..
    } = *case;
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
}

/// The searched placeholder lives in the command and env only: in the
/// name it would change the case's id from probe to probe. And it must be
/// there, or every probe would run the same command.
pub(super) fn check_searched_placeholder(check: &mut Checker, case: &CaseInput, param: &str) {
    let CaseInput {
        raw,
        own,
        defaults,
        server: raw_server,
    } = *case;
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

/// The port changes from launch to launch: never in the case's name,
/// folder or program.
pub(super) fn check_port_placement(check: &mut Checker, case: &CaseInput) {
    let CaseInput {
        raw,
        own,
        defaults,
        server: raw_server,
    } = *case;
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
}

/// Every placeholder must name a matrix key (or the searched one; a
/// searched `concurrency` is the number of instances, no placeholder).
pub(super) fn check_placeholders_known(
    check: &mut Checker,
    case: &CaseInput,
    matrix: &IndexMap<String, Vec<String>>,
    searched: Option<&str>,
) {
    let CaseInput {
        raw,
        own,
        defaults,
        server: raw_server,
    } = *case;
    let searched_placeholder = searched.filter(|p| *p != crate::capacity::CONCURRENCY);
    let known = |name: &str| {
        matrix.contains_key(name)
            || searched_placeholder == Some(name)
            || (name == PORT && raw_server.is_some())
    };
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
}

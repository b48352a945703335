//! What a suite holds that oomgate must never write, and what it holds
//! that only looks like a secret.
//!
//! Secrets come from every layer a process of the suite is given
//! (`[defaults].env`, the case's `env` and matrix, its server's `env`, the
//! load client's) and from the values its commands give to secret flags.
//! The suite's own text — case ids, names, params, commands and env values
//! as written — is the user's, and is never masked by shape where oomgate
//! writes it (see `crate::redact::Source`).

use indexmap::IndexMap;

use super::case::Case;
use crate::redact::{self, SuiteSecrets};

/// A server's own env with the case's matrix values in (`{port}` as
/// written): what the server is launched with beside the case's.
pub fn server_env(case: &Case) -> IndexMap<String, String> {
    case.server
        .as_ref()
        .map(|server| server.templates.fill(&case.params).1)
        .unwrap_or_default()
}

/// Every secret and every string of a suite's cases, for the redactor.
pub fn suite_secrets(name: &str, cases: &[Case], patterns: &[String]) -> SuiteSecrets {
    let mut secrets = SuiteSecrets {
        patterns: patterns.to_vec(),
        text: vec![name.to_string()],
        ..SuiteSecrets::default()
    };
    for case in cases {
        let server_env = server_env(case);
        let server_command = case.server.as_ref().map(|s| s.command.as_slice());
        for (variable, value) in case.env.iter().chain(&server_env) {
            secrets.variables.push((variable.clone(), value.clone()));
            if !redact::is_secret_name(variable) {
                secrets.text.push(value.clone());
            }
        }
        for command in std::iter::once(case.command.as_slice()).chain(server_command) {
            secrets.arguments.extend(redact::secret_arguments(command));
            secrets.text.extend(command.iter().cloned());
        }
        secrets.text.push(case.id.clone());
        secrets.text.extend(case.params.values().cloned());
    }
    // Secret values are no text to keep (a flag's value is in its command).
    secrets
        .text
        .retain(|text| !secrets.arguments.iter().any(|a| a == text));
    secrets
}

//! Redaction: no secret from the environment or the command line reaches
//! anything oomgate writes (the terminal, results.json, junit.xml,
//! summary.md, report.html, the GitHub summary and annotations, the lock).
//!
//! Three rules, applied where text enters oomgate's model and once more to
//! every file as it is written:
//!
//! - **Secret names.** A variable whose name has a secret word as a whole
//!   segment (`HF_TOKEN`, `WANDB_API_KEY`, `AWS_SECRET_ACCESS_KEY`; not
//!   `TOKENIZERS_PARALLELISM` or `MAX_NEW_TOKENS`) is recorded by name and
//!   a short keyed hash of its value ([`secret_value`]), never by value. A
//!   command-line flag whose last segment is secret (`--api-key X`,
//!   `--token=X`, `auth_token=X`) has its value replaced by `***`.
//! - **Secret values.** Every value of a secret-named variable in oomgate's
//!   environment or the suite's `env` is masked wherever it appears in text
//!   oomgate copies from a workload, as CI systems mask registered secrets;
//!   values that are short, numeric or boolean are not (masking every `256`
//!   or `false` helps no one). Of a value that looks like a secret (long,
//!   random-looking, not a path), every 8 characters are masked too, and a
//!   piece is followed across a line break: no part of it survives a
//!   shortened repr or a wrapped line.
//! - **Secret shapes.** Well-known token formats (`hf_…`, `sk-…`, `ghp_…`,
//!   `github_pat_…`, `AKIA…`, `xox?-…`, JWTs, PEM private keys, URL
//!   passwords, `Authorization:` headers, `password=…`) are masked in any
//!   text wherever they start (`%3Dghp_…`, `model_hf_….py`; glued to a
//!   word, a token must look random), plus the suite's own `[suite]
//!   redact` patterns.
//!
//! The per-case `stdout.log`/`stderr.log` are the workload's own bytes and
//! are never rewritten. The active [`Redactor`] is process-wide, like a CI
//! system's registered secrets: it starts from oomgate's environment and
//! [`install`] adds the suite's. This module depends on nothing of
//! oomgate's, so every writer can use it.

mod mask;
mod rules;

use std::borrow::Cow;
use std::hash::Hasher;
use std::sync::{Arc, LazyLock, RwLock};

pub use mask::{Cut, PatternError, Redactor, SHAPE_CONTEXT, Source, compile_pattern};
pub use rules::{
    HASH_KEY_VARIABLE, MASK, MIN_MASKED_LEN, is_distinctive, is_maskable, is_secret_flag,
    is_secret_name,
};

/// Whether `OOMGATE_HASH_KEY` keys the recorded hashes.
fn hash_key_set() -> bool {
    std::env::var_os(HASH_KEY_VARIABLE).is_some_and(|v| !v.is_empty())
}

/// The key of the recorded hashes, from `OOMGATE_HASH_KEY` or built in.
fn hash_key() -> (u64, u64) {
    static KEY: LazyLock<(u64, u64)> = LazyLock::new(|| {
        let secret = std::env::var(HASH_KEY_VARIABLE).unwrap_or_default();
        let mut first = siphasher::sip::SipHasher24::new_with_keys(0x6f6f_6d67_6174_6501, 1);
        first.write(secret.as_bytes());
        let mut second = siphasher::sip::SipHasher24::new_with_keys(0x6f6f_6d67_6174_6502, 2);
        second.write(secret.as_bytes());
        (first.finish(), second.finish())
    });
    *KEY
}

/// A short keyed hash of a variable's value (6 hex digits, 24 bits): enough
/// to tell that a value changed, too short to confirm a guessed value
/// among the many others of a dictionary with the same hash.
pub fn fingerprint(name: &str, value: &str) -> String {
    let (k0, k1) = hash_key();
    let mut hasher = siphasher::sip::SipHasher24::new_with_keys(k0, k1);
    hasher.write(name.as_bytes());
    hasher.write_u8(0);
    hasher.write(value.as_bytes());
    format!("{:06x}", hasher.finish() & 0xff_ffff)
}

/// The recorded form of a secret's value: `<secret 3fa9c1>`. A value too
/// weak for its hash to be safe to publish — short, numeric, a plain word
/// — is `<secret>` alone unless `OOMGATE_HASH_KEY` keys the hash: trying
/// every 4-digit PIN against a 24-bit hash with a known key finds it.
pub fn secret_value(name: &str, value: &str) -> String {
    if is_distinctive(value) || hash_key_set() {
        format!("<secret {}>", fingerprint(name, value))
    } else {
        UNHASHED_SECRET.to_string()
    }
}

/// A secret whose value is recorded without a hash.
pub const UNHASHED_SECRET: &str = "<secret>";

/// The recorded form of a value kept only as a hash: `<hash 3fa9c1>`.
pub fn hashed_value(name: &str, value: &str) -> String {
    format!("<hash {}>", fingerprint(name, value))
}

/// Whether a recorded value is already a hash (`<secret …>`, `<hash …>`,
/// `<secret>`).
pub fn is_recorded_hash(value: &str) -> bool {
    if value == UNHASHED_SECRET {
        return true;
    }
    let hex = |rest: &str| rest.len() == 6 && rest.bytes().all(|b| b.is_ascii_hexdigit());
    value
        .strip_suffix('>')
        .and_then(|v| {
            v.strip_prefix("<secret ")
                .or_else(|| v.strip_prefix("<hash "))
        })
        .is_some_and(hex)
}

/// A variable as results.json records it: its value, or for a secret name
/// its keyed hash. Recorded hashes are kept as they are.
pub fn env_value(name: &str, value: &str) -> String {
    if is_secret_name(name) && !is_recorded_hash(value) {
        secret_value(name, value)
    } else {
        active().mask_suite(value).into_owned()
    }
}

/// A command as oomgate records it: the value after a secret flag
/// (`--token X`, `--token=X`, `token=X`) is `***` — also inside one
/// argument that a shell splits (`sh -c "serve --token X"`) — and each
/// argument is masked as the suite's command (see [`Source::Command`]):
/// secret values and credentials by syntax, not token look-alikes.
pub fn command(argv: &[String]) -> Vec<String> {
    let redactor = active();
    let secrets = secret_arguments(argv);
    let mut out = Vec::with_capacity(argv.len());
    let mut previous_secret_flag = false;
    for arg in argv {
        if std::mem::take(&mut previous_secret_flag) && !arg.starts_with('-') {
            out.push(MASK.to_string());
            continue;
        }
        match arg.split_once('=') {
            Some((key, value))
                if !value.is_empty()
                    && is_secret_flag(key)
                    && !key.contains(char::is_whitespace) =>
            {
                out.push(format!("{key}={MASK}"));
                continue;
            }
            Some(_) => {}
            None => previous_secret_flag = arg.starts_with('-') && is_secret_flag(arg),
        }
        // Words of a shell string: its secret flags' values, replaced where
        // they stand.
        let mut text = arg.clone();
        if arg.contains(char::is_whitespace) {
            for secret in secrets.iter().filter(|s| !s.is_empty()) {
                text = text.replace(secret.as_str(), MASK);
            }
        }
        out.push(redactor.mask_from(&text, Source::Command).into_owned());
    }
    out
}

/// The values a command gives to secret flags (`--token X`, `--token=X`,
/// `token=X`), also in an argument a shell splits into words (`bash -c
/// "serve --api-key X"`): secrets to mask wherever a workload prints them.
pub fn secret_arguments(argv: &[String]) -> Vec<String> {
    let mut found = flag_values(argv.iter().map(String::as_str));
    for arg in argv.iter().filter(|a| a.contains(char::is_whitespace)) {
        let words = shlex::split(arg)
            .unwrap_or_else(|| arg.split_whitespace().map(str::to_string).collect());
        found.extend(flag_values(words.iter().map(String::as_str)));
    }
    found
}

fn flag_values<'a>(words: impl Iterator<Item = &'a str>) -> Vec<String> {
    let mut found = Vec::new();
    let mut next_is_secret = false;
    for word in words {
        if std::mem::take(&mut next_is_secret) && !word.starts_with('-') {
            found.push(word.to_string());
            continue;
        }
        match word.split_once('=') {
            Some((key, value)) if is_secret_flag(key) && !key.contains(char::is_whitespace) => {
                found.push(value.to_string());
            }
            Some(_) => {}
            None => next_is_secret = word.starts_with('-') && is_secret_flag(word),
        }
    }
    found
}

/// oomgate's environment (variables that are not UTF-8 cannot reach any
/// text oomgate writes as such, and are left out).
fn process_variables() -> Vec<(String, String)> {
    std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
        .collect()
}

static ACTIVE: LazyLock<RwLock<Arc<Redactor>>> =
    LazyLock::new(|| RwLock::new(Arc::new(SuiteSecrets::default().redactor())));

/// The redactor in force: oomgate's environment, plus what [`install`] added.
pub fn active() -> Arc<Redactor> {
    match ACTIVE.read() {
        Ok(guard) => Arc::clone(&guard),
        Err(poisoned) => Arc::clone(&poisoned.into_inner()),
    }
}

/// What a suite adds to the secrets in force (see [`install`]).
#[derive(Debug, Clone, Default)]
pub struct SuiteSecrets {
    /// Every variable a process of the suite is given, from every layer
    /// (`[defaults]`, the case, its matrix, its server and client).
    pub variables: Vec<(String, String)>,
    /// The values its commands give to secret flags, masked as a
    /// secret-named variable's would be.
    pub arguments: Vec<String>,
    /// Its `[suite] redact` patterns.
    pub patterns: Vec<String>,
    /// Its own text as oomgate writes it: case ids, names, params,
    /// commands and env values as written (see [`Source::Suite`]).
    pub text: Vec<String>,
}

impl SuiteSecrets {
    /// The redactor for oomgate's environment plus these.
    pub fn redactor(&self) -> Redactor {
        let mut all = process_variables();
        all.extend(self.variables.iter().cloned());
        // Registered under a secret name, so they are masked like one.
        all.extend(
            self.arguments
                .iter()
                .map(|v| ("ARGUMENT_SECRET".to_string(), v.clone())),
        );
        Redactor::new(
            all.iter().map(|(k, v)| (k.as_str(), v.as_str())),
            &self.patterns,
        )
        .with_suite_text(self.text.iter().map(String::as_str))
    }
}

/// Put a redactor in force for oomgate's environment plus a suite's
/// secrets.
pub fn install(secrets: &SuiteSecrets) {
    let redactor = secrets.redactor();
    let mut guard = match ACTIVE.write() {
        Ok(guard) => guard,
        Err(poisoned) => poisoned.into_inner(),
    };
    *guard = Arc::new(redactor);
}

/// Mask text with the redactor in force (see [`Redactor::mask`]).
pub fn mask(text: &str) -> Cow<'_, str> {
    active().mask(text)
}

/// Mask a file's text as it is written (see [`Redactor::mask_written`]).
pub fn mask_written(text: &str) -> Cow<'_, str> {
    active().mask_written(text)
}

/// Mask the suite's own text with the redactor in force (see
/// [`Redactor::mask_suite`]).
pub fn mask_suite(text: &str) -> Cow<'_, str> {
    active().mask_suite(text)
}

#[cfg(test)]
mod tests;

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
//!   or `false` helps no one).
//! - **Secret shapes.** Well-known token formats (`hf_…`, `sk-…`, `ghp_…`,
//!   `github_pat_…`, `AKIA…`, `xox?-…`, JWTs, PEM private keys, URL
//!   passwords, `Authorization:` headers, `password=…`) are masked in any
//!   text, plus the suite's own `[suite] redact` patterns.
//!
//! The per-case `stdout.log`/`stderr.log` are the workload's own bytes and
//! are never rewritten. The active [`Redactor`] is process-wide, like a CI
//! system's registered secrets: it starts from oomgate's environment and
//! [`install`] adds the suite's. This module depends on nothing of
//! oomgate's, so every writer can use it.

use std::borrow::Cow;
use std::collections::BTreeSet;
use std::hash::Hasher;
use std::sync::{Arc, LazyLock, RwLock};

use regex::{Captures, Regex, RegexBuilder};

/// What a masked value becomes.
pub const MASK: &str = "***";

/// Values shorter than this (in characters) are never masked as text: a
/// short value is more likely a common word than a secret worth hiding.
pub const MIN_MASKED_LEN: usize = 6;

/// The variable that keys the hash recorded for a secret's value. Without
/// it, a built-in key is used: a change is still detected, but anyone can
/// test a guess against a committed hash (see docs/security.md).
pub const HASH_KEY_VARIABLE: &str = "OOMGATE_HASH_KEY";

/// The most a suite's `redact` pattern may compile to.
const PATTERN_SIZE_LIMIT: usize = 1 << 20;

/// Words that make a name secret when a whole segment is one of them.
const SECRET_WORDS: &[&str] = &[
    "TOKEN",
    "SECRET",
    "SECRETS",
    "PASSWORD",
    "PASSWORDS",
    "PASSWD",
    // `DB_PASS`, `SMTP_PASS` (a whole segment: not `BYPASS`).
    "PASS",
    "PASSPHRASE",
    "KEY",
    "APIKEY",
    // A personal access token: `GH_PAT`.
    "PAT",
    // A webhook URL posts as whoever holds it: `SLACK_WEBHOOK`.
    "WEBHOOK",
    "CREDENTIAL",
    "CREDENTIALS",
    "CREDS",
    "AUTH",
    "AUTHORIZATION",
    "COOKIE",
    "COOKIES",
    "SESSION",
    "PRIVATE",
    "DSN",
];

/// Endings that make a segment secret on their own (`PGPASSWORD`,
/// `HFTOKEN`, `CLIENTSECRET`, `OPENAIAPIKEY`).
const SECRET_ENDINGS: &[&str] = &["TOKEN", "SECRET", "PASSWORD", "PASSWD", "APIKEY"];

/// The segments of a name, upper-cased: split at anything not a letter or
/// digit and where a lower-case letter meets an upper-case one (`apiKey`).
fn segments(name: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    let mut previous_lower = false;
    for c in name.chars() {
        if !c.is_ascii_alphanumeric() {
            if !current.is_empty() {
                out.push(std::mem::take(&mut current));
            }
            previous_lower = false;
            continue;
        }
        if c.is_ascii_uppercase() && previous_lower && !current.is_empty() {
            out.push(std::mem::take(&mut current));
        }
        previous_lower = c.is_ascii_lowercase() || c.is_ascii_digit();
        current.push(c.to_ascii_uppercase());
    }
    if !current.is_empty() {
        out.push(current);
    }
    out
}

fn secret_segment(segment: &str, only_segment: bool) -> bool {
    SECRET_WORDS.contains(&segment)
        || SECRET_ENDINGS
            .iter()
            .any(|ending| segment.len() > ending.len() && segment.ends_with(ending))
        // `MYSQL_PWD` is a password; `PWD` alone is the working directory.
        || (segment == "PWD" && !only_segment)
}

/// Whether an environment variable's value is secret by its name: a whole
/// segment of the name is a secret word.
pub fn is_secret_name(name: &str) -> bool {
    let segments = segments(name);
    let only = segments.len() == 1;
    segments.iter().any(|s| secret_segment(s, only))
}

/// Words that make a flag secret as its last segment. Narrower than for
/// variables: `--key`, `--cache-key`, `--session`, `--private` are common
/// flags whose values are not secrets.
const FLAG_WORDS: &[&str] = &[
    "TOKEN",
    "SECRET",
    "PASSWORD",
    "PASSWD",
    "PASSPHRASE",
    "APIKEY",
    "CREDENTIAL",
    "CREDENTIALS",
    "COOKIE",
    "AUTH",
    "DSN",
];

/// Kinds of key that are secret as a flag's last two segments (`--api-key`,
/// `--secret-key`, `--private-key`).
const SECRET_KEY_KINDS: &[&str] = &[
    "API",
    "ACCESS",
    "SECRET",
    "PRIVATE",
    "AUTH",
    "SIGNING",
    "ENCRYPTION",
];

/// Whether a command-line flag or `key=value` key takes a secret: its last
/// segment is a secret word (`--token`, `--hf-token`, `db.password`), or
/// its last two name a secret kind of key (`--api-key`, `wandb.api_key`);
/// not `--num-key-value-heads`, `--max-new-tokens` or `--cache-key`.
pub fn is_secret_flag(flag: &str) -> bool {
    let segments = segments(flag);
    let Some(last) = segments.last() else {
        return false;
    };
    let before = segments.len().checked_sub(2).map(|i| segments[i].as_str());
    FLAG_WORDS.contains(&last.as_str())
        || SECRET_ENDINGS
            .iter()
            .any(|ending| last.len() > ending.len() && last.ends_with(ending))
        || (last == "KEY" && before.is_some_and(|kind| SECRET_KEY_KINDS.contains(&kind)))
        || (last == "PWD" && segments.len() > 1)
}

/// Whether a value is worth masking as text: not short, numeric or boolean.
pub fn is_maskable(value: &str) -> bool {
    let value = value.trim();
    value.chars().count() >= MIN_MASKED_LEN
        && value.parse::<f64>().is_err()
        && !matches!(
            value.to_ascii_lowercase().as_str(),
            "true" | "false" | "yes" | "no" | "on" | "off" | "none" | "null"
        )
}

/// Whether a secret value is worth masking wherever it appears as text:
/// worth masking ([`is_maskable`]) and not a plain lower-case word
/// (`ubuntu`, `production`), which a variable with a secret-looking name
/// (`DESKTOP_SESSION`) may hold and which text is full of.
pub fn is_distinctive(value: &str) -> bool {
    let value = value.trim();
    is_maskable(value) && !(value.len() < 16 && value.bytes().all(|b| b.is_ascii_lowercase()))
}

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
        active().mask(value).into_owned()
    }
}

/// A command as oomgate records it: the value after a secret flag
/// (`--token X`, `--token=X`, `token=X`) is `***` — also inside one
/// argument that a shell splits (`sh -c "serve --token X"`) — and each
/// argument is masked as text.
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
        out.push(redactor.mask(&text).into_owned());
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

/// Known token formats. Where a pattern has a group, the group is the
/// part kept before the secret (`https://user:`, `Authorization: Bearer `,
/// `password=`) and the rest is masked, unless it is not worth masking (a
/// number, a word shorter than [`MIN_MASKED_LEN`]). Character classes stop
/// at quotes, `<`, `&` and `\`, so masking a written JSON, XML or HTML file
/// keeps it well-formed.
const SHAPES: &[&str] = &[
    // Hugging Face, OpenAI/Anthropic-style, GitHub, GitLab, npm, Google.
    r"\bhf_[A-Za-z0-9]{20,}",
    r"\bsk-[A-Za-z0-9_-]{20,}",
    r"\bgh[pousr]_[A-Za-z0-9]{30,}",
    r"\bgithub_pat_[A-Za-z0-9_]{20,}",
    r"\bglpat-[A-Za-z0-9_-]{20,}",
    r"\bnpm_[A-Za-z0-9]{36}\b",
    r"\bAIza[0-9A-Za-z_-]{35}",
    // AWS access key ids, Slack tokens, JWTs.
    r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b",
    r"\bxox[abposr]-[A-Za-z0-9-]{10,}",
    // Slack and Discord webhook URLs: the path after the host is the key.
    r"\b(https://hooks\.slack\.com/(?:services|workflows|triggers)/)[A-Za-z0-9/_-]{10,}",
    r"\b(https://(?:ptb\.|canary\.)?discord(?:app)?\.com/api/webhooks/)[0-9]+/[A-Za-z0-9_-]{20,}",
    r"\beyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]*",
    // A PEM private key, with its body (and its end, when the text has it).
    r"-----BEGIN [A-Z ]*PRIVATE KEY-----(?:[A-Za-z0-9+/=\s]|\\[nr])*(?:-----END [A-Z ]*PRIVATE KEY-----)?",
    // Credentials in a URL, an Authorization header, `password=...`.
    r"\b([A-Za-z][A-Za-z0-9+.-]*://[^\s/:@'\x22<>&\\]+:)[^\s/@'\x22<>&\\]+@",
    r"(?i)\b(authorization\s*:\s*(?:bearer|basic|token)\s+)[A-Za-z0-9._~+/=-]+",
    r"(?i)\b((?:api[_-]?key|access[_-]?token|auth[_-]?token|secret[_-]?key|client[_-]?secret|password|passwd|token|secret)\s*[=:]\s*)[^\s'\x22<>&,;\\]{6,}",
];

static SHAPE_SET: LazyLock<Vec<Regex>> = LazyLock::new(|| {
    SHAPES
        .iter()
        .filter_map(|pattern| Regex::new(pattern).ok())
        .collect()
});

/// The rest of a character entity (`amp;`, `#x41;`), after its `&`.
static ENTITY: LazyLock<Option<Regex>> =
    LazyLock::new(|| Regex::new(r"^#?[A-Za-z0-9]{1,31};").ok());

/// oomgate's own records of a secret (`<secret 3fa9c1>`), never masked.
static RECORDED: LazyLock<Option<Regex>> =
    LazyLock::new(|| Regex::new(r"<(?:secret|hash)(?: [0-9a-f]{6})?>").ok());

/// Mask every known secret value in a text, except where masking would
/// change the text's structure rather than hide a secret: inside oomgate's
/// own `<secret …>` records, right after a backslash that escapes (`\n` in
/// JSON: what follows is not the secret's first letter), at the name of an
/// entity (`&amp;`), or ending on a backslash (half an escape).
fn mask_literals<'t>(literals: &Regex, text: &'t str) -> Cow<'t, str> {
    let recorded: Vec<std::ops::Range<usize>> = RECORDED
        .iter()
        .flat_map(|r| r.find_iter(text).map(|m| m.range()))
        .collect();
    literals.replace_all(text, |caps: &Captures<'_>| {
        let Some(m) = caps.get(0) else {
            return String::new();
        };
        let before = &text.as_bytes()[..m.start()];
        let backslashes = before.iter().rev().take_while(|b| **b == b'\\').count();
        let entity = before.last() == Some(&b'&')
            && ENTITY
                .as_ref()
                .is_some_and(|e| e.is_match(&text[m.start()..]));
        let structural = recorded
            .iter()
            .any(|r| r.start < m.end() && m.start() < r.end)
            || backslashes % 2 == 1
            || entity
            || m.as_str().ends_with('\\');
        if structural {
            m.as_str().to_string()
        } else {
            MASK.to_string()
        }
    })
}

/// Mask each match of a shape, keeping its group 1.
fn mask_shape<'t>(shape: &Regex, text: &'t str) -> Cow<'t, str> {
    if shape.captures_len() == 1 {
        return shape.replace_all(text, MASK);
    }
    shape.replace_all(text, |caps: &Captures<'_>| {
        let whole = caps.get(0).map_or("", |m| m.as_str());
        let kept = caps.get(1).map_or("", |m| m.as_str());
        let rest = &whole[kept.len()..];
        match rest.strip_suffix('@') {
            // A URL's password: masked whatever it is.
            Some(_) => format!("{kept}{MASK}@"),
            None if is_maskable(rest) => format!("{kept}{MASK}"),
            None => whole.to_string(),
        }
    })
}

/// Mask each match of a suite's pattern: its first group when it has one,
/// else the whole match.
fn mask_pattern<'t>(pattern: &Regex, text: &'t str) -> Cow<'t, str> {
    if pattern.captures_len() == 1 {
        return pattern.replace_all(text, MASK);
    }
    pattern.replace_all(text, |caps: &Captures<'_>| {
        let Some(whole) = caps.get(0) else {
            return String::new();
        };
        // An alternative without the group: the whole match is the secret.
        let Some(group) = caps.get(1) else {
            return MASK.to_string();
        };
        let (from, to) = (group.start() - whole.start(), group.end() - whole.start());
        let whole = whole.as_str();
        format!("{}{MASK}{}", &whole[..from], &whole[to..])
    })
}

/// The secrets and patterns that are masked.
#[derive(Debug, Default)]
pub struct Redactor {
    /// Every known secret value, longest first, as one alternation.
    literals: Option<Regex>,
    /// How many secret values `literals` holds.
    literal_count: usize,
    /// The suite's own `redact` patterns.
    patterns: Vec<Regex>,
}

/// A `[suite] redact` pattern that is not a valid regex.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct PatternError(String);

/// Compile one of a suite's `redact` patterns.
pub fn compile_pattern(pattern: &str) -> Result<Regex, PatternError> {
    if pattern.is_empty() {
        return Err(PatternError(
            "an empty pattern would match everywhere".into(),
        ));
    }
    let regex = RegexBuilder::new(pattern)
        .size_limit(PATTERN_SIZE_LIMIT)
        .build()
        .map_err(|e| PatternError(e.to_string()))?;
    if regex.is_match("") {
        return Err(PatternError(
            "the pattern matches the empty string, so it would match everywhere".into(),
        ));
    }
    Ok(regex)
}

impl Redactor {
    /// A redactor for the secret-named variables among `variables` and the
    /// given patterns (each already checked by [`compile_pattern`]).
    pub fn new<'a>(
        variables: impl IntoIterator<Item = (&'a str, &'a str)>,
        patterns: &[String],
    ) -> Self {
        let mut values = BTreeSet::new();
        for (name, value) in variables {
            if !is_secret_name(name) {
                continue;
            }
            // A multi-line secret (a key in a variable) is masked line by line.
            for part in std::iter::once(value).chain(value.lines()) {
                if is_distinctive(part) {
                    values.insert(part.trim().to_string());
                }
            }
        }
        let mut values: Vec<String> = values.into_iter().collect();
        values.sort_by_key(|v| std::cmp::Reverse(v.len()));
        let literals = (!values.is_empty())
            .then(|| {
                let alternation = values
                    .iter()
                    .map(|v| regex::escape(v))
                    .collect::<Vec<_>>()
                    .join("|");
                RegexBuilder::new(&alternation)
                    .size_limit(64 * PATTERN_SIZE_LIMIT)
                    .build()
                    .ok()
            })
            .flatten();
        Redactor {
            literal_count: if literals.is_some() { values.len() } else { 0 },
            literals,
            patterns: patterns
                .iter()
                .filter_map(|p| compile_pattern(p).ok())
                .collect(),
        }
    }

    /// A redactor for oomgate's own environment.
    pub fn from_process_env() -> Self {
        let variables = process_variables();
        Redactor::new(variables.iter().map(|(k, v)| (k.as_str(), v.as_str())), &[])
    }

    /// How many secret values are masked.
    pub fn secret_count(&self) -> usize {
        self.literal_count
    }

    /// Mask text oomgate copies from a workload or a suite: secret values,
    /// secret shapes and the suite's patterns. A pattern with a capture
    /// group masks only its first group.
    pub fn mask<'t>(&self, text: &'t str) -> Cow<'t, str> {
        // Raw text: every occurrence of a secret is one.
        let mut text = match &self.literals {
            Some(literals) => literals.replace_all(text, MASK),
            None => Cow::Borrowed(text),
        };
        text = mask_shapes(text);
        for pattern in &self.patterns {
            if let Cow::Owned(masked) = mask_pattern(pattern, &text) {
                text = Cow::Owned(masked);
            }
        }
        text
    }

    /// Mask a file as it is written: secret values and secret shapes,
    /// never across a quote or markup or into an escape, so the file stays
    /// well-formed. (The suite's patterns, which might cut through markup,
    /// were applied to the text when it entered oomgate.)
    pub fn mask_written<'t>(&self, text: &'t str) -> Cow<'t, str> {
        let mut text = Cow::Borrowed(text);
        if let Some(literals) = &self.literals {
            if let Cow::Owned(masked) = mask_literals(literals, &text) {
                text = Cow::Owned(masked);
            }
        }
        mask_shapes(text)
    }
}

/// Mask every known token shape in a text.
fn mask_shapes(mut text: Cow<'_, str>) -> Cow<'_, str> {
    for shape in SHAPE_SET.iter() {
        if let Cow::Owned(masked) = mask_shape(shape, &text) {
            text = Cow::Owned(masked);
        }
    }
    text
}

/// oomgate's environment (variables that are not UTF-8 cannot reach any
/// text oomgate writes as such, and are left out).
fn process_variables() -> Vec<(String, String)> {
    std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
        .collect()
}

static ACTIVE: LazyLock<RwLock<Arc<Redactor>>> =
    LazyLock::new(|| RwLock::new(Arc::new(Redactor::from_process_env())));

/// The redactor in force: oomgate's environment, plus what [`install`] added.
pub fn active() -> Arc<Redactor> {
    match ACTIVE.read() {
        Ok(guard) => Arc::clone(&guard),
        Err(poisoned) => Arc::clone(&poisoned.into_inner()),
    }
}

/// Put a redactor in force for oomgate's environment plus `variables` (a
/// suite's `env`), `arguments` (values its commands give to secret flags,
/// masked as a secret-named variable's would be) and `patterns` (its
/// `redact`).
pub fn install<'a>(
    variables: impl IntoIterator<Item = (&'a str, &'a str)>,
    arguments: impl IntoIterator<Item = String>,
    patterns: &[String],
) {
    let mut all = process_variables();
    all.extend(
        variables
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string())),
    );
    // Registered under a secret name, so they are masked like one.
    all.extend(
        arguments
            .into_iter()
            .map(|v| ("ARGUMENT_SECRET".to_string(), v)),
    );
    let redactor = Redactor::new(all.iter().map(|(k, v)| (k.as_str(), v.as_str())), patterns);
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

#[cfg(test)]
mod tests;

//! What is a secret: the words that make a variable's or a flag's name
//! secret, the values worth masking, and the mask itself. Plain rules,
//! below the masker (`mask`) and the records (`mod.rs`).

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
pub(super) const PATTERN_SIZE_LIMIT: usize = 1 << 20;

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

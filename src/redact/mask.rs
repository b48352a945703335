//! Masking text: each rule finds the byte spans of what it hides in the
//! text as given, and the *union* of every span is masked at once. Two
//! secrets that overlap (one's tail is the other's head), a token inside a
//! URL's password, a suite pattern across a known value: no fragment of
//! any of them is left, whichever rule found it first.
//!
//! Which rules apply depends on where the text comes from ([`Source`]):
//! a workload's text gets every rule; a file as oomgate writes it gets
//! the secret values and shapes, but never inside oomgate's own records
//! or an escape, nor inside the suite's own text; the suite's own text
//! (ids, names, params, commands as written) only loses what the suite
//! itself says is secret.
//!
//! A text cut from a longer one is masked with what lies beyond the cut
//! in view ([`Redactor::mask_range`]), or, where nothing beyond it can be
//! seen, loses every part of a secret at the cut edge and the partial word
//! there ([`Redactor::mask_cut`]).

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};
use std::ops::Range;
use std::sync::LazyLock;

use aho_corasick::{AhoCorasick, AhoCorasickKind, MatchKind};
use regex::{Captures, Regex, RegexBuilder, RegexSet};

use super::rules::{MASK, PATTERN_SIZE_LIMIT, is_distinctive, is_maskable, is_secret_name};

/// Known token formats. Where a pattern has a group, the group is the
/// part kept before the secret (`https://user:`, `Authorization: Bearer `,
/// `password=`) and the rest is masked, unless it is not worth masking (a
/// number, a word shorter than [`super::MIN_MASKED_LEN`]). Character
/// classes stop at quotes, `<`, `&` and `\`, so masking a written JSON,
/// XML or HTML file keeps it well-formed.
///
/// No shape needs a word boundary before it: a token is found wherever it
/// starts (`%3Dghp_…`, `\u0022hf_…`, `model_hf_….py`, `x_sk-…`). A token
/// shape (one without a group) that starts right after a letter, digit or
/// `_` that is not the end of an encoded separator must also look random
/// ([`looks_random`]), so the `sk-` of `flask-server-…` or `disk-cache-…`
/// is no token. The one trailing boundary left (`(?-u:\b)`, ASCII: a
/// text with `→` in it is still searched by the fast engines) ends a shape
/// of fixed length.
const SHAPES: &[&str] = &[
    // Hugging Face, OpenAI/Anthropic-style, GitHub, GitLab, npm, Google.
    r"hf_[A-Za-z0-9]{20,}",
    r"sk-[A-Za-z0-9_-]{20,}",
    r"gh[pousr]_[A-Za-z0-9]{30,}",
    r"github_pat_[A-Za-z0-9_]{20,}",
    r"glpat-[A-Za-z0-9_-]{20,}",
    r"npm_[A-Za-z0-9]{36}(?-u:\b)",
    r"AIza[0-9A-Za-z_-]{35}",
    // AWS access key ids, Slack tokens, JWTs.
    r"(?:AKIA|ASIA)[0-9A-Z]{16}(?-u:\b)",
    r"xox[abposr]-[A-Za-z0-9-]{10,}",
    // Slack and Discord webhook URLs: the path after the host is the key.
    r"(https://hooks\.slack\.com/(?:services|workflows|triggers)/)[A-Za-z0-9/_-]{10,}",
    r"(https://(?:ptb\.|canary\.)?discord(?:app)?\.com/api/webhooks/)[0-9]+/[A-Za-z0-9_-]{20,}",
    r"eyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]*",
    // A PEM private key, with its body (and its end, when the text has it).
    r"-----BEGIN [A-Z ]*PRIVATE KEY-----(?:[A-Za-z0-9+/=\s]|\\[nr])*(?:-----END [A-Z ]*PRIVATE KEY-----)?",
    // Credentials in a URL, an Authorization header, `password=...` (also
    // as the end of a longer name: `DB_PASSWORD=`, `x-api-key:`).
    r"([A-Za-z][A-Za-z0-9+.-]*://[^\s/:@'\x22<>&\\]+:)[^\s/@'\x22<>&\\]+@",
    r"(?i)(authorization\s*:\s*(?:bearer|basic|token)\s+)[A-Za-z0-9._~+/=-]+",
    r"(?i)((?:api[_-]?key|access[_-]?token|auth[_-]?token|secret[_-]?key|client[_-]?secret|password|passwd|token|secret)\s*[=:]\s*)[^\s'\x22<>&,;\\]{6,}",
];

static SHAPE_SET: LazyLock<Vec<Regex>> = LazyLock::new(|| {
    SHAPES
        .iter()
        .filter_map(|pattern| Regex::new(pattern).ok())
        .collect()
});

/// Which shapes occur in a text, found in one pass before each that does
/// is searched for its matches (most texts hold none). `None` if it could
/// not be built: then every shape is searched.
static SHAPE_ANY: LazyLock<Option<RegexSet>> = LazyLock::new(|| {
    RegexSet::new(SHAPES)
        .ok()
        .filter(|set| set.len() == SHAPE_SET.len())
});

/// Whether any shape occurs in `text`.
fn any_shape(text: &str) -> bool {
    match SHAPE_ANY.as_ref() {
        Some(set) => set.is_match(text),
        None => SHAPE_SET.iter().any(|shape| shape.is_match(text)),
    }
}

/// The rest of a character entity (`amp;`, `#x41;`), after its `&`.
static ENTITY: LazyLock<Option<Regex>> = LazyLock::new(|| Regex::new(r"^#?[A-Za-z0-9]{1,6};").ok());

/// oomgate's own records of a secret (`<secret 3fa9c1>`), never masked.
static RECORDED: LazyLock<Option<Regex>> =
    LazyLock::new(|| Regex::new(r"<(?:secret|hash)(?: [0-9a-f]{6})?>").ok());

/// How much text beyond a cut is read to mask what crosses it, at least:
/// the longest shape worth finding whole (a PEM key is about 3 KiB).
pub const SHAPE_CONTEXT: usize = 8 * 1024;

/// The shortest part of a secret at a cut edge that is masked: shorter
/// ones are too common as ordinary text to tell from a secret's.
const EDGE_FRAGMENT: usize = 3;

/// Every run of this many characters of a secret value that looks random
/// ([`masks_fragments`]) is masked wherever it appears: what a shortened
/// repr (`'hf_Qw3Er5Ty7...5Gh7Jk9Lz1Xc3'`) or a wrapped line leaves of it.
pub const FRAGMENT: usize = 8;

/// The shortest secret value whose fragments are masked: a shorter one
/// shares 8 characters with ordinary text too easily.
pub const FRAGMENT_MIN_LEN: usize = 16;

/// How many places in the secrets one fragment is followed across a line
/// break from (a fragment of random text occurs once; this bounds the work
/// for a secret that repeats itself).
const FRAGMENT_PLACES: usize = 4;

/// Where a text comes from, which decides the rules that apply to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// Text copied from a workload (its output, an exception, a metric, an
    /// environment probe's answer): every secret value, shape and suite
    /// pattern.
    Workload,
    /// A file or terminal line as oomgate writes it, the last pass: secret
    /// values and shapes, never inside oomgate's own `<secret …>` records,
    /// an escape (`\n` before a secret's second letter) or an entity, so
    /// the file stays well-formed; no shape inside the suite's own text.
    Written,
    /// The suite's own text (case ids, names, params, commands and env
    /// values as written): only what the suite itself says is secret —
    /// the values of secret-named variables and secret flags, and its
    /// `redact` patterns. A case id that looks like a token (`sk-learn-…`)
    /// is the user's name for a case, not a secret.
    Suite,
    /// A command as written in the suite: as [`Source::Suite`], and the
    /// shapes that are secrets by their syntax, not their look — a URL's
    /// password, an `Authorization:` header, `password=…`, a webhook's
    /// key — as a secret flag's value is.
    Command,
}

/// Which edges of a text were cut from a longer one, with nothing beyond
/// them in view.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Cut {
    pub start: bool,
    pub end: bool,
}

impl Cut {
    pub const START: Cut = Cut {
        start: true,
        end: false,
    };
    pub const END: Cut = Cut {
        start: false,
        end: true,
    };
}

/// The secrets and patterns that are masked.
#[derive(Debug, Default)]
pub struct Redactor {
    /// Every known secret value, and every [`FRAGMENT`] characters of
    /// those that look random, matched overlapping.
    literals: Option<AhoCorasick>,
    /// For each pattern of `literals` that is a fragment: where it is in
    /// the values (the value's index, the fragment's byte offset).
    places: Vec<Vec<(usize, usize)>>,
    /// The same values, for the parts of one at a cut edge.
    values: Vec<String>,
    /// The suite's own `redact` patterns.
    patterns: Vec<Regex>,
    /// The suite's own strings that a shape would match: not masked by
    /// shape in what oomgate writes.
    suite_text: Option<AhoCorasick>,
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

/// An automaton finding every occurrence of `values`, overlapping ones too:
/// a DFA (a table lookup per byte) while it stays small, since the
/// fragments of random secrets start with most bytes, leaving no rare byte
/// to skip ahead to.
fn automaton(values: &[String]) -> Option<AhoCorasick> {
    if values.is_empty() {
        return None;
    }
    let states: usize = values.iter().map(String::len).sum();
    let kind = (states <= DFA_STATES).then_some(AhoCorasickKind::DFA);
    AhoCorasick::builder()
        .match_kind(MatchKind::Standard)
        .kind(kind)
        .build(values)
        .ok()
}

/// The most states (bytes of patterns) an automaton is built as a DFA for:
/// at most 256 byte classes of 4 bytes each, 16 MiB.
const DFA_STATES: usize = 16 * 1024;

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
        let values: Vec<String> = values.into_iter().collect();
        // Each value, and each fragment of those that look random, once.
        let mut literals: BTreeMap<&str, Vec<(usize, usize)>> =
            values.iter().map(|v| (v.as_str(), Vec::new())).collect();
        for (index, value) in values.iter().enumerate() {
            if !masks_fragments(value) {
                continue;
            }
            let starts: Vec<usize> = value
                .char_indices()
                .map(|(i, _)| i)
                .chain([value.len()])
                .collect();
            for window in starts.windows(FRAGMENT + 1) {
                let fragment = &value[window[0]..window[FRAGMENT]];
                // Eight digits are a figure's as often as a secret's (a
                // ratio's `0.0345679012345679` holds `01234567`): masked
                // inside a number, they would make results.json no JSON.
                // The value itself is still masked whole.
                if fragment.bytes().all(|b| b.is_ascii_digit()) {
                    continue;
                }
                let places = literals.entry(fragment).or_default();
                if places.len() < FRAGMENT_PLACES {
                    places.push((index, window[0]));
                }
            }
        }
        let strings: Vec<String> = literals.keys().map(|k| k.to_string()).collect();
        let places = literals.into_values().collect();
        Redactor {
            literals: automaton(&strings),
            places,
            values,
            patterns: patterns
                .iter()
                .filter_map(|p| compile_pattern(p).ok())
                .collect(),
            suite_text: None,
        }
    }

    /// The same redactor, told the suite's own strings (see
    /// [`Source::Suite`]): those a shape would match are left as they are
    /// where oomgate writes them.
    pub fn with_suite_text<'a>(mut self, texts: impl IntoIterator<Item = &'a str>) -> Self {
        let kept: BTreeSet<String> = texts
            .into_iter()
            .filter(|text| any_shape(text))
            .map(str::to_string)
            .collect();
        self.suite_text = automaton(&kept.into_iter().collect::<Vec<_>>());
        self
    }

    /// How many secret values are masked.
    pub fn secret_count(&self) -> usize {
        if self.literals.is_some() {
            self.values.len()
        } else {
            0
        }
    }

    /// How much text beyond a cut must be in view for a secret that
    /// crosses the cut to be found whole: the longest secret value, and
    /// at least [`SHAPE_CONTEXT`].
    pub fn context(&self) -> usize {
        self.values
            .iter()
            .map(String::len)
            .max()
            .unwrap_or(0)
            .max(SHAPE_CONTEXT)
    }

    /// Mask text oomgate copies from a workload: secret values, secret
    /// shapes and the suite's patterns. A pattern with a capture group
    /// masks only its first group.
    pub fn mask<'t>(&self, text: &'t str) -> Cow<'t, str> {
        self.mask_from(text, Source::Workload)
    }

    /// Mask a file as it is written (see [`Source::Written`]). The suite's
    /// patterns, which might cut through markup, were applied to the text
    /// when it entered oomgate.
    pub fn mask_written<'t>(&self, text: &'t str) -> Cow<'t, str> {
        self.mask_from(text, Source::Written)
    }

    /// Mask the suite's own text (see [`Source::Suite`]).
    pub fn mask_suite<'t>(&self, text: &'t str) -> Cow<'t, str> {
        self.mask_from(text, Source::Suite)
    }

    /// Mask a text by the rules of its source.
    pub fn mask_from<'t>(&self, text: &'t str, source: Source) -> Cow<'t, str> {
        let spans = self.spans(text, source);
        apply(text, &spans, 0..text.len())
    }

    /// The last `limit` bytes of a workload's output as text (invalid UTF-8
    /// replaced), masked. `bytes` is the end of the whole output, `earlier`
    /// bytes of it before them, and it holds up to [`Redactor::context`]
    /// more than is kept: the masking sees them, so a secret that crosses
    /// the cut is masked up to it and leaves no part of itself. When
    /// anything is left out, the partial first line (or, on one long line,
    /// the partial first word) is dropped too and a note says how much came
    /// before, and where it is (`whole`).
    pub fn masked_tail(&self, bytes: &[u8], earlier: u64, limit: u64, whole: &str) -> String {
        // Where the kept part would start, then the cut: after the first
        // newline from there, else after the first blank, else right there.
        let from = bytes
            .len()
            .saturating_sub(usize::try_from(limit).unwrap_or(usize::MAX));
        if earlier == 0 && from == 0 {
            return self.mask(&String::from_utf8_lossy(bytes)).into_owned();
        }
        let after = |stop: &dyn Fn(u8) -> bool| {
            bytes[from..]
                .iter()
                .position(|b| stop(*b))
                .map(|i| from + i + 1)
        };
        let cut = after(&|b| b == b'\n')
            .or_else(|| after(&|b| b == b' ' || b == b'\t' || b == b'\r'))
            .unwrap_or(from);
        // Each side decoded on its own, so the kept part starts where its
        // bytes do whatever the cut split.
        let before = String::from_utf8_lossy(&bytes[..cut]);
        let text = format!("{before}{}", String::from_utf8_lossy(&bytes[cut..]));
        let kept = self.mask_range(&text, before.len()..text.len());
        format!(
            "[oomgate: {} earlier bytes are in {whole}]\n{kept}",
            earlier + cut as u64
        )
    }

    /// Mask a workload's text and keep only `keep` of it (moved out to
    /// character boundaries): every secret is looked for with the whole
    /// text in view, so one that crosses an edge of `keep` is masked up
    /// to the edge, and no part of it is left.
    pub fn mask_range(&self, text: &str, keep: Range<usize>) -> String {
        let start = floor_boundary(text, keep.start.min(text.len()));
        let end = ceil_boundary(text, keep.end.clamp(start, text.len()));
        let spans = self.spans(text, Source::Workload);
        apply(text, &spans, start..end).into_owned()
    }

    /// Mask a workload's text that was cut from a longer one where nothing
    /// beyond the cut is in view: besides every whole secret, the part of
    /// one at a cut edge (a secret's head where the text ends, its tail
    /// where it starts) and the partial word at each cut edge.
    pub fn mask_cut(&self, text: &str, cut: Cut) -> String {
        let mut spans = self.spans(text, Source::Workload);
        if cut.end {
            let word = text
                .char_indices()
                .rev()
                .take_while(|(_, c)| !c.is_whitespace())
                .last()
                .map_or(text.len(), |(i, _)| i);
            spans.push(word..text.len());
            for value in &self.values {
                if let Some(k) = (EDGE_FRAGMENT..value.len())
                    .rev()
                    .find(|&k| text.as_bytes().ends_with(&value.as_bytes()[..k]))
                {
                    spans.push(text.len() - k..text.len());
                }
            }
        }
        if cut.start {
            let word = text
                .char_indices()
                .find(|(_, c)| c.is_whitespace())
                .map_or(text.len(), |(i, _)| i);
            spans.push(0..word);
            for value in &self.values {
                if let Some(k) = (EDGE_FRAGMENT..value.len()).rev().find(|&k| {
                    text.as_bytes()
                        .starts_with(&value.as_bytes()[value.len() - k..])
                }) {
                    spans.push(0..k);
                }
            }
        }
        apply(text, &merge(spans), 0..text.len()).into_owned()
    }

    /// The merged spans of `text` that the rules of `source` hide.
    fn spans(&self, text: &str, source: Source) -> Vec<Range<usize>> {
        let mut spans = Vec::new();
        if let Some(literals) = &self.literals {
            let recorded: Vec<Range<usize>> = match source {
                Source::Written => RECORDED
                    .iter()
                    .flat_map(|r| r.find_iter(text).map(|m| m.range()))
                    .collect(),
                _ => Vec::new(),
            };
            let mut found = Vec::new();
            for m in literals.find_overlapping_iter(text) {
                found.push(m.range());
                let places = self.places.get(m.pattern().as_usize());
                if let Some(places) = places.filter(|p| !p.is_empty()) {
                    self.across_line_breaks(text, m.range(), places, &mut found);
                }
            }
            for span in found {
                if source == Source::Written {
                    spans.extend(writable(text, span, &recorded));
                } else {
                    spans.push(span);
                }
            }
        }
        if source != Source::Suite {
            // In a command, only the shapes with a kept group (a context).
            let present = SHAPE_ANY.as_ref().map(|set| set.matches(text));
            let shapes = SHAPE_SET
                .iter()
                .enumerate()
                .filter(|(index, _)| present.as_ref().is_none_or(|p| p.matched(*index)))
                .map(|(_, shape)| shape)
                .filter(|shape| source != Source::Command || shape.captures_len() > 1);
            let exempt: Vec<Range<usize>> = match (&self.suite_text, source) {
                (Some(suite), Source::Written) => suite
                    .find_overlapping_iter(text)
                    .map(|m| m.range())
                    .collect(),
                _ => Vec::new(),
            };
            let exempt = |whole: &Range<usize>| {
                exempt
                    .iter()
                    .any(|e| e.start <= whole.start && whole.end <= e.end)
            };
            for shape in shapes {
                // A token shape needs no groups: the faster search.
                if shape.captures_len() == 1 {
                    each_at(
                        text,
                        |at| shape.find_at(text, at).map(|m| m.range()),
                        |whole| {
                            if token_at(text, whole) && !exempt(whole) {
                                spans.push(token_span(text, whole));
                            }
                        },
                    );
                    continue;
                }
                each_match(shape, text, |caps| {
                    if let Some(span) = shape_span(text, caps) {
                        let whole = caps.get(0).map_or(span.clone(), |m| m.range());
                        if !exempt(&whole) {
                            spans.push(span);
                        }
                    }
                });
            }
        }
        if source != Source::Written {
            for pattern in &self.patterns {
                each_match(pattern, text, |caps| {
                    // An alternative without the group: the whole match is
                    // the secret.
                    if let Some(span) = caps.get(1).or_else(|| caps.get(0)).map(|m| m.range()) {
                        spans.push(span);
                    }
                });
            }
        }
        merge(spans)
    }

    /// The rest of a secret whose fragment `gram` ends a line (or starts
    /// one), where the next line goes on with it (or the line before ends
    /// with its head): a secret wrapped at a narrow width leaves pieces too
    /// short to be fragments on their own (`Xc3`), each added to `out`.
    fn across_line_breaks(
        &self,
        text: &str,
        gram: Range<usize>,
        places: &[(usize, usize)],
        out: &mut Vec<Range<usize>>,
    ) {
        let bytes = text.as_bytes();
        if line_break_at(bytes, gram.end).is_some() {
            for &(index, offset) in places {
                let Some(value) = self.values.get(index) else {
                    continue;
                };
                let mut rest = &value.as_bytes()[offset + gram.len()..];
                let mut at = gram.end;
                while let Some(skip) = line_break_at(bytes, at) {
                    at += skip;
                    let k = floor_boundary(text, at + common_prefix(&bytes[at..], rest)) - at;
                    let next = line_break_at(bytes, at + k);
                    if k == 0 || (k < rest.len() && k < EDGE_FRAGMENT && next.is_none()) {
                        break;
                    }
                    out.push(at..at + k);
                    rest = &rest[k..];
                    at += k;
                    if rest.is_empty() {
                        break;
                    }
                }
            }
        }
        if line_break_before(bytes, gram.start).is_some() {
            for &(index, offset) in places {
                let Some(value) = self.values.get(index) else {
                    continue;
                };
                let mut head = &value.as_bytes()[..offset];
                let mut at = gram.start;
                while let Some(skip) = line_break_before(bytes, at) {
                    at -= skip;
                    let k = at - ceil_boundary(text, at - common_suffix(&bytes[..at], head));
                    let previous = line_break_before(bytes, at - k);
                    if k == 0 || (k < head.len() && k < EDGE_FRAGMENT && previous.is_none()) {
                        break;
                    }
                    out.push(at - k..at);
                    head = &head[..head.len() - k];
                    at -= k;
                    if head.is_empty() {
                        break;
                    }
                }
            }
        }
    }
}

/// The length of the line break (`\n`, `\r\n`, or one written as an
/// escape: `\\n`, `\\r\\n`) that starts at `at`, if one does.
fn line_break_at(bytes: &[u8], at: usize) -> Option<usize> {
    let rest = bytes.get(at..)?;
    [&b"\r\n"[..], b"\n", b"\\r\\n", b"\\n"]
        .iter()
        .find(|b| rest.starts_with(b))
        .map(|b| b.len())
}

/// The length of the line break that ends at `at`, if one does.
fn line_break_before(bytes: &[u8], at: usize) -> Option<usize> {
    let head = bytes.get(..at)?;
    [&b"\r\n"[..], b"\n", b"\\r\\n", b"\\n"]
        .iter()
        .find(|b| head.ends_with(b))
        .map(|b| b.len())
}

fn common_prefix(a: &[u8], b: &[u8]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

fn common_suffix(a: &[u8], b: &[u8]) -> usize {
    a.iter()
        .rev()
        .zip(b.iter().rev())
        .take_while(|(x, y)| x == y)
        .count()
}

/// Whether a string looks random rather than made of words: at most one
/// character in `symbols` is neither a letter nor a digit, and it mixes an
/// upper-case letter with lower-case letters or digits, or has digits for
/// at least a fifth of its letters and digits (lower-case hex). `server-
/// load-test-batch-64`, `cache-warm-start` and `/home/ci/models` do not;
/// `hf_Qw3Er5Ty7…`, `AKIAIOSFODNN7EXAMPLE` and `9f86d081884c7d65…` do.
pub fn looks_random(text: &str, symbols: usize) -> bool {
    let (mut upper, mut lower, mut digits, mut other) = (0usize, 0usize, 0usize, 0usize);
    for c in text.chars() {
        match c {
            'A'..='Z' => upper += 1,
            'a'..='z' => lower += 1,
            '0'..='9' => digits += 1,
            _ => other += 1,
        }
    }
    let total = upper + lower + digits + other;
    other * symbols <= total
        && ((upper > 0 && lower + digits > 0) || (lower > 0 && digits * 5 >= lower + digits))
}

/// Whether a secret value's fragments are masked wherever they appear: it
/// looks like a secret, not a word, a sentence or a path — at least
/// [`FRAGMENT_MIN_LEN`] characters, no whitespace, not a path or URL (one
/// that starts with `/`, `~` or `.` and has a `/` after that, or holds
/// `://`), at most a quarter of it symbols, and it [`looks_random`]. A
/// value that does not is still masked whole.
pub fn masks_fragments(value: &str) -> bool {
    let path =
        value.contains("://") || (value.starts_with(['/', '~', '.']) && value[1..].contains('/'));
    value.chars().count() >= FRAGMENT_MIN_LEN
        && !value.contains(char::is_whitespace)
        && !path
        && looks_random(value, 4)
}

/// Whether a token shape's match is a token where it starts: after the
/// start of the text, a character that is not an ASCII letter, digit or
/// `_`, or an encoded separator (`%3D`, `\u0022`, `\x3d`, `\n`), any token
/// of the shape is; glued to a word (`x_sk-…`, `9ghp_…`, `model_hf_…`) it
/// must look random, with at most one symbol in eight (`flask-server-
/// load-test-batch-64` has the shape of an `sk-` token, but not its look).
fn token_at(text: &str, whole: &Range<usize>) -> bool {
    let token = &text[whole.clone()];
    let before = &text.as_bytes()[..whole.start];
    let glued = before
        .last()
        .is_some_and(|b| b.is_ascii_alphanumeric() || *b == b'_')
        && token.starts_with(|c: char| c.is_ascii_alphanumeric());
    !glued || encoded_separator_before(before) || looks_random(token, 8)
}

/// Whether `before` ends with an encoded character: `%3D`, `\u0022`,
/// `\x3d`, or an escaped `\n`, `\r`, `\t`.
fn encoded_separator_before(before: &[u8]) -> bool {
    let hex = |b: &[u8]| b.iter().all(u8::is_ascii_hexdigit);
    let n = before.len();
    (n >= 3 && before[n - 3] == b'%' && hex(&before[n - 2..]))
        || (n >= 6 && &before[n - 6..n - 4] == b"\\u" && hex(&before[n - 4..]))
        || (n >= 4 && &before[n - 4..n - 2] == b"\\x" && hex(&before[n - 2..]))
        || (n >= 2 && before[n - 2] == b'\\' && matches!(before[n - 1], b'n' | b'r' | b't'))
}

/// The parts of a literal match in a written file that can be masked
/// without changing the file's structure: not oomgate's own `<secret …>`
/// records, not an escape the match starts inside (`\n` before a secret's
/// second letter: the `n` is the escape's, `\u0041` all of it), not the
/// name of an entity it starts at (`&amp;`), not half an escape it ends
/// on. What is kept of the secret is at most the escape or entity (seven
/// characters), so no eight characters of it are ever left.
fn writable(text: &str, span: Range<usize>, recorded: &[Range<usize>]) -> Vec<Range<usize>> {
    let bytes = text.as_bytes();
    let mut start = span.start;
    let mut end = span.end;
    let backslashes = bytes[..start]
        .iter()
        .rev()
        .take_while(|b| **b == b'\\')
        .count();
    if backslashes % 2 == 1 {
        let unicode = bytes.get(start) == Some(&b'u');
        start = ceil_boundary(text, start + if unicode { 5 } else { 1 });
    } else if bytes[..start].last() == Some(&b'&') {
        if let Some(entity) = ENTITY.as_ref().and_then(|e| e.find(&text[start..])) {
            start += entity.end();
        }
    }
    let trailing = bytes[start.min(end)..end]
        .iter()
        .rev()
        .take_while(|b| **b == b'\\')
        .count();
    if trailing % 2 == 1 {
        end -= 1;
    }
    // What is left, less any record it crosses.
    let mut parts: Vec<Range<usize>> = std::iter::once(start..end).collect();
    for record in recorded {
        parts = parts
            .into_iter()
            .flat_map(|part| {
                if record.end <= part.start || part.end <= record.start {
                    vec![part]
                } else {
                    vec![part.start..record.start, record.end..part.end]
                }
            })
            .filter(|part| part.start < part.end)
            .collect();
    }
    parts
}

/// The part of a token shape's match that is masked: all of it, and, for
/// a token glued to more token characters (`hf_…hf_…`, two tokens printed
/// without a space), the rest of the run, so no tail of the second one is
/// left.
fn token_span(text: &str, whole: &Range<usize>) -> Range<usize> {
    let run = text[whole.end..]
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '-'))
        .map_or(text.len(), |i| whole.end + i);
    whole.start..run
}

/// The part of a shape's match that is masked: all of it, or what follows
/// its group 1 when that is worth masking (a URL's password always).
fn shape_span(text: &str, caps: &Captures<'_>) -> Option<Range<usize>> {
    let whole = caps.get(0)?;
    let Some(kept) = caps.get(1) else {
        return Some(token_span(text, &whole.range()));
    };
    let rest = &text[kept.end()..whole.end()];
    if rest.ends_with('@') {
        Some(kept.end()..whole.end() - 1)
    } else if is_maskable(rest) {
        Some(kept.end()..whole.end())
    } else {
        None
    }
}

/// Call `found` with every match of `regex` in `text`, overlapping ones
/// too (each search starts one character after the last match's start),
/// within a budget of about eight times the text's length: past it, the
/// search goes on from the last match's end, so a pattern that matches
/// long runs (`[a-z]{20,}` on a page of letters) stays linear.
fn each_match<'t>(regex: &Regex, text: &'t str, mut found: impl FnMut(&Captures<'t>)) {
    each_at(
        text,
        |at| {
            let caps = regex.captures_at(text, at)?;
            let whole = caps.get(0)?.range();
            Some((caps, whole))
        },
        |(caps, _)| found(caps),
    );
}

/// [`each_match`] for any search: `search(at)` finds the next match from
/// `at`, with its span.
fn each_at<T: Spanned>(
    text: &str,
    mut search: impl FnMut(usize) -> Option<T>,
    mut found: impl FnMut(&T),
) {
    let mut at = 0;
    let mut budget = 8 * text.len() + 4096;
    while at <= text.len() {
        let Some(next) = search(at) else {
            break;
        };
        let whole = next.span();
        if !whole.is_empty() {
            found(&next);
        }
        budget = budget.saturating_sub((whole.end - at).max(1));
        let step = ceil_boundary(text, whole.start + 1);
        at = if budget > 0 {
            step
        } else {
            whole.end.max(step)
        };
    }
}

/// A match's whole span.
trait Spanned {
    fn span(&self) -> Range<usize>;
}

impl Spanned for Range<usize> {
    fn span(&self) -> Range<usize> {
        self.clone()
    }
}

impl<T> Spanned for (T, Range<usize>) {
    fn span(&self) -> Range<usize> {
        self.1.clone()
    }
}

/// Sorted, with overlapping or touching spans joined; empty ones dropped.
fn merge(mut spans: Vec<Range<usize>>) -> Vec<Range<usize>> {
    spans.retain(|s| s.start < s.end);
    spans.sort_by_key(|s| s.start);
    let mut merged: Vec<Range<usize>> = Vec::with_capacity(spans.len());
    for span in spans {
        match merged.last_mut() {
            Some(last) if span.start <= last.end => last.end = last.end.max(span.end),
            _ => merged.push(span),
        }
    }
    merged
}

/// `text[keep]` with each span (clipped to `keep`) replaced by [`MASK`].
fn apply<'t>(text: &'t str, spans: &[Range<usize>], keep: Range<usize>) -> Cow<'t, str> {
    let inside: Vec<Range<usize>> = spans
        .iter()
        .map(|s| s.start.max(keep.start)..s.end.min(keep.end))
        .filter(|s| s.start < s.end)
        .collect();
    if inside.is_empty() {
        return Cow::Borrowed(&text[keep]);
    }
    let mut out = String::with_capacity(keep.len());
    let mut at = keep.start;
    for span in inside {
        out.push_str(&text[at..span.start]);
        out.push_str(MASK);
        at = span.end;
    }
    out.push_str(&text[at..keep.end]);
    Cow::Owned(out)
}

fn floor_boundary(text: &str, mut index: usize) -> usize {
    while index > 0 && !text.is_char_boundary(index) {
        index -= 1;
    }
    index
}

fn ceil_boundary(text: &str, mut index: usize) -> usize {
    while index < text.len() && !text.is_char_boundary(index) {
        index += 1;
    }
    index.min(text.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every shape compiles (one that did not would be dropped from the
    /// masking without a word), and so does the one-pass set over them.
    #[test]
    fn every_shape_compiles_and_the_set_holds_them_all() {
        assert_eq!(SHAPE_SET.len(), SHAPES.len());
        assert!(SHAPE_ANY.is_some());
    }

    /// A token is found beside non-ASCII text as beside any other
    /// separator, whatever it looks like; one glued to a word only if it
    /// looks random.
    #[test]
    fn shapes_are_found_beside_non_ascii_text() {
        let token = "hf_abcdefghijklmnopqrstuvwxyz0123";
        let r = Redactor::default();
        for text in [
            format!("token {token} → used"),
            format!("×{token}"),
            format!("é{token}"),
            format!("({token})"),
        ] {
            assert!(any_shape(&text), "{text}");
            assert!(!r.mask(&text).contains("hf_"), "{text}");
        }
        let glued = format!("xhf_{}", &token[3..]);
        assert_eq!(r.mask(&glued), glued);
        assert!(!any_shape("nothing here → at all ×4"));
    }

    #[test]
    fn random_looks_and_fragment_rules() {
        for random in [
            "hf_Qw3Er5Ty7Ui9Op1As3Df5Gh7Jk9Lz1Xc3",
            "AKIAIOSFODNN7EXAMPLE",
            "9f86d081884c7d659a2feaa0c55ad015",
            "sk-proj-Ab3_cD4eF5gH6iJ7kL8mN9oP0",
        ] {
            assert!(looks_random(random, 8), "{random}");
            assert!(masks_fragments(random), "{random}");
        }
        for word in [
            "sk-server-load-test-batch-64",
            "production-cluster-east-1",
            "my-super-secret-password-2024",
            "unix:path=/run/user/1000/bus",
        ] {
            assert!(!looks_random(word, 8), "{word}");
            assert!(!masks_fragments(word), "{word}");
        }
        // Words in title case: too many symbols for a token's look; as a
        // secret's value, its pieces are masked (a password's symbols are
        // up to a quarter of it).
        assert!(!looks_random("sk-Cache-Warm-Up-Of-The-Model", 8));
        assert!(looks_random("x7#Kp!2mQ$9vL&3zR", 4));
        // Short, spaced, or a path: masked whole only.
        for value in [
            "Zq9XmB27LpQw4",
            "Correct Horse Battery Staple 42",
            "/home/CI/Cache2024/huggingface/token",
            "~/Secrets/Tokens2024/hf",
            "https://User:Pa55word@example.com/x",
        ] {
            assert!(!masks_fragments(value), "{value}");
        }
    }

    #[test]
    fn encoded_separators_end_a_word() {
        for before in ["%3D", "%22", "\\u0022", "\\x3d", "\\n", "a\\t"] {
            assert!(encoded_separator_before(before.as_bytes()), "{before}");
        }
        for before in ["x", "abc", "%3", "u0022", "9", "x_"] {
            assert!(!encoded_separator_before(before.as_bytes()), "{before}");
        }
    }
}

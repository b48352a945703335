//! The one rule for text oomgate did not write itself, on every output.
//!
//! Frame names and allocator values (from a snapshot or a lock), file
//! names, pytest node ids, environment commands' output and a workload's
//! own lines reach the terminal, summary.md and the job summary, junit.xml,
//! report.html, the GitHub annotations and `oomgate sites`. Raw, a newline
//! in such text starts a line of its own (`::error …` is a workflow
//! command to a CI runner that reads the step's output), ESC, OSC and BEL
//! drive a terminal, a bidi override shows text in another order than it
//! is, and a noncharacter breaks XML. Every [unsafe](is_unsafe) character
//! is written as a visible escape instead: `\n`, `\r`, `\t`, or
//! `\u{1b}`, `\u{202e}` — the text around it kept, so a reader sees what
//! was there.
//!
//! [`line()`] is for names and values that are one line: every unsafe
//! character escaped, newline and tab too. [`block`] is for a workload's
//! output and other text of several lines: newline and tab kept, a CR
//! before a newline dropped (a CRLF line end), the colour and cursor
//! sequences a program writes for its terminal (`ESC [ … m`) dropped whole,
//! every other unsafe character escaped. Both are idempotent: what they
//! return holds no unsafe character but, for [`block`], newline and tab.

use std::borrow::Cow;
use std::fmt::Write as _;

/// Whether `c` is kept out of every output as it is: the control
/// characters (C0 — NUL, BEL, ESC, CR, newline, tab —, DEL, C1), the
/// characters that change the direction text is shown in (U+061C, U+200E,
/// U+200F, U+202A–U+202E, U+2066–U+2069), the line and paragraph
/// separators U+2028 and U+2029, and the noncharacters (U+FDD0–U+FDEF and
/// the last two of every plane, U+FFFE, U+FFFF, U+1FFFE, …).
pub fn is_unsafe(c: char) -> bool {
    let n = c as u32;
    c.is_control()
        || matches!(n, 0x061C | 0x200E | 0x200F | 0x202A..=0x202E | 0x2066..=0x2069)
        || matches!(n, 0x2028 | 0x2029)
        || (0xFDD0..=0xFDEF).contains(&n)
        || n & 0xFFFE == 0xFFFE
}

/// [Unsafe](is_unsafe), and not the newline a text of several lines is
/// made of.
pub fn is_unsafe_but_newline(c: char) -> bool {
    is_unsafe(c) && c != '\n'
}

/// The visible escape of an unsafe character.
fn escape_into(out: &mut String, c: char) {
    match c {
        '\n' => out.push_str("\\n"),
        '\r' => out.push_str("\\r"),
        '\t' => out.push_str("\\t"),
        c => {
            let _ = write!(out, "\\u{{{:x}}}", c as u32);
        }
    }
}

/// `text` as one line: every [unsafe](is_unsafe) character, newline and
/// tab included, written as a visible escape. Borrowed when it has none,
/// as almost every text has.
pub fn line(text: &str) -> Cow<'_, str> {
    if !text.contains(is_unsafe) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        if is_unsafe(c) {
            escape_into(&mut out, c);
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// `text` as lines: newline and tab kept, a CR just before a newline
/// dropped, a terminal's control sequence (`ESC [` parameters, a final
/// letter: colours, cursor moves) dropped whole, every other
/// [unsafe](is_unsafe) character — a lone CR, ESC of anything else (OSC),
/// BEL, NUL, C1, bidi, noncharacters — written as a visible escape.
pub fn block(text: &str) -> Cow<'_, str> {
    lines(text, Sequences::Drop)
}

/// A line oomgate composed for its terminal, its outside text already
/// [cleaned](fn@line) where it was put in: newline and tab kept, the colour
/// sequences (`ESC [` digits and `;`, `m`) it paints with kept, every other
/// unsafe character escaped, so that nothing missed can act on the
/// terminal or start a line of its own but a newline.
pub fn terminal(text: &str) -> Cow<'_, str> {
    lines(text, Sequences::KeepColours)
}

/// What [`lines`] does with a terminal's control sequence.
#[derive(Clone, Copy, PartialEq)]
enum Sequences {
    /// Drop every `ESC [` sequence whole, and a CR before a newline: a
    /// workload's output.
    Drop,
    /// Keep colour sequences, escape the rest: oomgate's own lines.
    KeepColours,
}

/// `text` with newline and tab kept, control sequences as `sequences`
/// says, every other unsafe character escaped.
fn lines(text: &str, sequences: Sequences) -> Cow<'_, str> {
    if !text.contains(|c| is_unsafe(c) && c != '\n' && c != '\t') {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    let mut chars = text.char_indices().peekable();
    while let Some((at, c)) = chars.next() {
        let kept = match (c, sequences) {
            ('\n' | '\t', _) => {
                out.push(c);
                continue;
            }
            ('\r', Sequences::Drop) if chars.peek().is_some_and(|&(_, next)| next == '\n') => {
                continue;
            }
            ('\u{1b}', Sequences::Drop) => csi_len(&text[at..]).map(|len| (len, false)),
            ('\u{1b}', Sequences::KeepColours) if is_colour(&text[at..]) => {
                Some((csi_len(&text[at..]).unwrap_or(1), true))
            }
            _ => None,
        };
        match kept {
            Some((len, keep)) => {
                if keep {
                    out.push_str(&text[at..at + len]);
                }
                while chars.peek().is_some_and(|&(next, _)| next < at + len) {
                    chars.next();
                }
            }
            None if is_unsafe(c) => escape_into(&mut out, c),
            None => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// Whether `text` starts with a colour sequence: `ESC [`, digits and `;`,
/// `m`.
fn is_colour(text: &str) -> bool {
    csi_len(text).is_some_and(|len| {
        let body = &text.as_bytes()[2..len];
        body.last() == Some(&b'm')
            && body[..body.len() - 1]
                .iter()
                .all(|b| b.is_ascii_digit() || *b == b';')
    })
}

/// The length in bytes of the control sequence `text` starts with: ESC,
/// `[`, parameter bytes (0x30–0x3F), intermediate bytes (0x20–0x2F), a
/// final byte (0x40–0x7E); `None` when it is not one, whole.
fn csi_len(text: &str) -> Option<usize> {
    let bytes = text.as_bytes();
    if bytes.get(1) != Some(&b'[') {
        return None;
    }
    let mut at = 2;
    while bytes.get(at).is_some_and(|b| (0x30..=0x3F).contains(b)) {
        at += 1;
    }
    while bytes.get(at).is_some_and(|b| (0x20..=0x2F).contains(b)) {
        at += 1;
    }
    bytes
        .get(at)
        .is_some_and(|b| (0x40..=0x7E).contains(b))
        .then_some(at + 1)
}

/// JSON text with every [unsafe](is_unsafe) character inside its strings
/// written as a JSON escape (`\u202e`, a surrogate pair above U+FFFF): the
/// same value, readable by any JSON reader, and nothing in it that drives
/// a terminal or reorders what is shown. serde_json already escapes C0;
/// this covers DEL, C1, bidi and noncharacters. Outside strings JSON
/// holds only ASCII, so only string contents change.
pub fn json(text: &str) -> Cow<'_, str> {
    if !text.contains(is_unsafe_in_json) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        if is_unsafe_in_json(c) {
            let mut units = [0u16; 2];
            for unit in c.encode_utf16(&mut units) {
                let _ = write!(out, "\\u{unit:04x}");
            }
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// Unsafe, and not the newline and spaces a pretty-printed JSON's layout
/// is made of (inside its strings serde_json has escaped every C0).
fn is_unsafe_in_json(c: char) -> bool {
    is_unsafe_but_newline(c)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_kind_of_unsafe_character_is_a_visible_escape() {
        assert_eq!(
            line("a\n::error title=pwned::x\u{1b}]0;t\u{7}b"),
            "a\\n::error title=pwned::x\\u{1b}]0;t\\u{7}b"
        );
        assert_eq!(
            line("\u{202e}gpj.exe\u{fffe}\u{9b}\u{7f}\t\r"),
            "\\u{202e}gpj.exe\\u{fffe}\\u{9b}\\u{7f}\\t\\r"
        );
        assert_eq!(
            line("\u{1fffe}\u{fdd0}\u{2066}\u{2028}"),
            "\\u{1fffe}\\u{fdd0}\\u{2066}\\u{2028}"
        );
        assert!(matches!(
            line("model.py:88 attention ← x → é 漢"),
            Cow::Borrowed(_)
        ));
    }

    #[test]
    fn block_keeps_lines_and_drops_colours_whole() {
        assert_eq!(
            block("\u{1b}[1;31mred\u{1b}[0m done\r\nnext\t1\r50%\u{7}\u{1b}]8;;https://x\u{1b}\\"),
            "red done\nnext\t1\\r50%\\u{7}\\u{1b}]8;;https://x\\u{1b}\\"
        );
        assert_eq!(block("cut \u{1b}[12"), "cut \\u{1b}[12");
        assert_eq!(block("\n::error::x\n"), "\n::error::x\n");
    }

    #[test]
    fn the_terminal_keeps_its_own_colours_only() {
        assert_eq!(
            terminal("\u{1b}[1;32m  passed\u{1b}[0m x\n\u{1b}[2K\u{1b}]0;t\u{7}\u{202e}"),
            "\u{1b}[1;32m  passed\u{1b}[0m x\n\\u{1b}[2K\\u{1b}]0;t\\u{7}\\u{202e}"
        );
    }

    #[test]
    fn json_keeps_the_value_and_escapes_inside_strings() {
        let value = serde_json::json!({ "site": "a\u{202e}b\u{1fffe}\u{85}\n" });
        let text = serde_json::to_string_pretty(&value).expect("json");
        let clean = json(&text);
        assert!(!clean.contains(is_unsafe_in_json), "{clean}");
        let back: serde_json::Value = serde_json::from_str(&clean).expect("json back");
        assert_eq!(back, value);
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(512))]

        /// Whatever the text: nothing unsafe is left (but newline and tab
        /// in a block), cleaning again changes nothing, and a text with
        /// nothing unsafe is given back as it is.
        #[test]
        fn clean_text_is_clean_and_stays_so(text in "(?s).{0,64}|[a\n\r\t\u{0}-\u{1f}\u{7f}-\u{9f}\u{202a}-\u{202e}\u{2066}-\u{2069}\u{fffe}\u{ffff}\\[m0-9;]{0,64}") {
            let one = line(&text);
            proptest::prop_assert!(!one.contains(is_unsafe), "{:?}", one);
            proptest::prop_assert_eq!(line(&one), one.clone());
            let many = block(&text);
            proptest::prop_assert!(!many.contains(|c| is_unsafe(c) && c != '\n' && c != '\t'), "{:?}", many);
            proptest::prop_assert_eq!(block(&many), many.clone());
            if !text.contains(is_unsafe) {
                proptest::prop_assert_eq!(&*one, text.as_str());
                proptest::prop_assert_eq!(&*many, text.as_str());
            }
        }
    }
}

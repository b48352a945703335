//! `{param}` placeholders, matrix expansion and safe case folder names.
//!
//! A placeholder is `{name}` where `name` looks like an identifier; `{{` and
//! `}}` write literal braces. Braces around anything else (`{}`, `{"a": 1}`)
//! are left alone, so Python one-liners and JSON arguments survive without
//! escaping. Templates are checked once against the matrix keys, so
//! expansion itself cannot fail.

use indexmap::IndexMap;

/// One piece of a parsed template.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Piece<'a> {
    Text(&'a str),
    Brace(char),
    Param(&'a str),
}

fn pieces(template: &str) -> Vec<Piece<'_>> {
    let bytes = template.as_bytes();
    let mut out = Vec::new();
    let mut text_start = 0;
    let mut i = 0;
    while i < bytes.len() {
        let escaped = match (bytes[i], bytes.get(i + 1)) {
            (b'{', Some(b'{')) => Some('{'),
            (b'}', Some(b'}')) => Some('}'),
            _ => None,
        };
        if let Some(brace) = escaped {
            out.push(Piece::Text(&template[text_start..i]));
            out.push(Piece::Brace(brace));
            i += 2;
            text_start = i;
            continue;
        }
        if bytes[i] == b'{' {
            if let Some(len) = template[i + 1..].find('}') {
                let name = &template[i + 1..i + 1 + len];
                if is_identifier(name) {
                    out.push(Piece::Text(&template[text_start..i]));
                    out.push(Piece::Param(name));
                    i += len + 2;
                    text_start = i;
                    continue;
                }
            }
        }
        i += 1;
    }
    out.push(Piece::Text(&template[text_start..]));
    out.retain(|p| *p != Piece::Text(""));
    out
}

pub(super) fn is_identifier(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// The placeholders a template uses, in order of appearance.
pub fn placeholders(template: &str) -> Vec<&str> {
    pieces(template)
        .into_iter()
        .filter_map(|p| match p {
            Piece::Param(name) => Some(name),
            _ => None,
        })
        .collect()
}

/// A template's size before substitution: the bytes it puts in whatever
/// the params (its text, `{{` as one brace), and the placeholders it
/// fills, in order, a name as often as it is used. What [`substitute`]
/// gives is the first plus each placeholder's value (a placeholder
/// without a param stays as written, `{name}`), so an expansion's size is
/// known before anything is expanded.
pub fn sized(template: &str) -> (usize, Vec<&str>) {
    let mut fixed = 0;
    let mut names = Vec::new();
    for piece in pieces(template) {
        match piece {
            Piece::Text(text) => fixed += text.len(),
            Piece::Brace(_) => fixed += 1,
            Piece::Param(name) => names.push(name),
        }
    }
    (fixed, names)
}

/// Substitute params into a template whose placeholders were checked.
/// A placeholder without a param is left as written (it cannot happen after
/// `placeholders` was checked, and inventing a value would be worse).
pub fn substitute(template: &str, params: &IndexMap<String, String>) -> String {
    let mut out = String::with_capacity(template.len());
    for piece in pieces(template) {
        match piece {
            Piece::Text(text) => out.push_str(text),
            Piece::Brace(brace) => out.push(brace),
            Piece::Param(name) => match params.get(name) {
                Some(value) => out.push_str(value),
                None => {
                    out.push('{');
                    out.push_str(name);
                    out.push('}');
                }
            },
        }
    }
    out
}

/// The cartesian product of the matrix, first key varying slowest, in the
/// order the file lists keys and values. An empty matrix gives one empty row.
pub fn expand_matrix(matrix: &IndexMap<String, Vec<String>>) -> Vec<IndexMap<String, String>> {
    let mut rows = vec![IndexMap::new()];
    for (key, values) in matrix {
        let mut next = Vec::with_capacity(rows.len() * values.len());
        for row in &rows {
            for value in values {
                let mut extended = row.clone();
                extended.insert(key.clone(), value.clone());
                next.push(extended);
            }
        }
        rows = next;
    }
    rows
}

/// Longest folder name we create; file systems allow 255 bytes, and the
/// suffix below needs room.
const MAX_FOLDER_LEN: usize = 100;

/// A folder name for a case id that can never leave the `cases/` directory:
/// only `[A-Za-z0-9._-]`, no leading dot (so never `.` or `..`), never empty,
/// bounded length. Long ids are cut and get a hash of the full id so that
/// two long ids sharing a prefix stay apart.
pub fn folder_name(case_id: &str) -> String {
    let mut name: String = case_id
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '_'
            }
        })
        .collect();
    if name.starts_with('.') {
        name.replace_range(0..1, "_");
    }
    if name.is_empty() {
        name.push('_');
    }
    if name.len() > MAX_FOLDER_LEN {
        name.truncate(MAX_FOLDER_LEN - 17);
        name.push_str(&format!("-{:016x}", fnv1a(case_id.as_bytes())));
    }
    name
}

/// FNV-1a: stable across releases and platforms, unlike `DefaultHasher`.
pub fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
        (hash ^ u64::from(*byte)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// Quote an argv for display so it can be pasted into a POSIX shell.
pub fn shell_join(argv: &[String]) -> String {
    argv.iter()
        .map(|arg| shell_quote(arg))
        .collect::<Vec<_>>()
        .join(" ")
}

fn shell_quote(arg: &str) -> String {
    let safe = !arg.is_empty()
        && arg
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=:,+@%".contains(c));
    if safe {
        arg.to_string()
    } else {
        format!("'{}'", arg.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(pairs: &[(&str, &str)]) -> IndexMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn placeholders_and_escapes() {
        let table: &[(&str, &[&str], &str)] = &[
            ("alloc-{mib}mib", &["mib"], "alloc-64mib"),
            ("{mib}-{mib}", &["mib", "mib"], "64-64"),
            ("literal {{mib}}", &[], "literal {mib}"),
            ("print({})", &[], "print({})"),
            (r#"{"a": 1}"#, &[], r#"{"a": 1}"#),
            ("{ mib }", &[], "{ mib }"),
            ("{9x}", &[], "{9x}"),
            ("unclosed {mib", &[], "unclosed {mib"),
            ("{batch_size}", &["batch_size"], "{batch_size}"),
            ("", &[], ""),
            ("}}{{", &[], "}{"),
        ];
        let values = params(&[("mib", "64")]);
        for (template, expected_names, expected_text) in table {
            assert_eq!(placeholders(template), *expected_names, "{template}");
            assert_eq!(substitute(template, &values), *expected_text, "{template}");
        }
    }

    #[test]
    fn matrix_is_a_cartesian_product_in_file_order() {
        let mut matrix = IndexMap::new();
        matrix.insert("batch".to_string(), vec!["8".to_string(), "16".to_string()]);
        matrix.insert(
            "seq".to_string(),
            vec!["512".to_string(), "1024".to_string(), "2048".to_string()],
        );
        let rows = expand_matrix(&matrix);
        assert_eq!(rows.len(), 6);
        assert_eq!(rows[0], params(&[("batch", "8"), ("seq", "512")]));
        assert_eq!(rows[1], params(&[("batch", "8"), ("seq", "1024")]));
        assert_eq!(rows[5], params(&[("batch", "16"), ("seq", "2048")]));
        let empty: IndexMap<String, Vec<String>> = IndexMap::new();
        assert_eq!(
            expand_matrix(&empty),
            vec![IndexMap::<String, String>::new()]
        );
    }

    #[test]
    fn folder_names_cannot_escape() {
        let table = [
            ("alloc-64mib", "alloc-64mib"),
            ("../../etc", "_._.._etc"),
            ("a/b", "a_b"),
            (".", "_"),
            ("..", "_."),
            ("", "_"),
            ("train bs=8", "train_bs_8"),
            ("naïve", "na_ve"),
            ("/abs", "_abs"),
        ];
        for (id, expected) in table {
            assert_eq!(folder_name(id), expected, "{id}");
        }
        for id in ["..", ".", "../x", "a/../../b"] {
            let name = folder_name(id);
            assert!(
                !name.contains('/') && name != "." && name != "..",
                "{id} -> {name}"
            );
        }
    }

    #[test]
    fn long_ids_stay_distinct_and_bounded() {
        let a = format!("{}-a", "x".repeat(300));
        let b = format!("{}-b", "x".repeat(300));
        assert!(folder_name(&a).len() <= MAX_FOLDER_LEN);
        assert_ne!(folder_name(&a), folder_name(&b));
        assert_eq!(folder_name(&a), folder_name(&a));
    }

    #[test]
    fn shell_join_quotes_what_needs_it() {
        let argv: Vec<String> = ["python3", "-c", "print('hi')", "--mib", "64", ""]
            .map(String::from)
            .to_vec();
        assert_eq!(
            shell_join(&argv),
            r#"python3 -c 'print('\''hi'\'')' --mib 64 ''"#
        );
    }
}

/// A command and env as written, placeholders and all.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Templates {
    pub command: Vec<String>,
    pub env: IndexMap<String, String>,
}

impl Templates {
    /// The command and env with `params` filled in; a placeholder not in
    /// `params` (`{port}` before a server has one) stays as written.
    pub fn fill(
        &self,
        params: &IndexMap<String, String>,
    ) -> (Vec<String>, IndexMap<String, String>) {
        let command = self
            .command
            .iter()
            .map(|arg| substitute(arg, params))
            .collect();
        let env = self
            .env
            .iter()
            .map(|(k, v)| (k.clone(), substitute(v, params)))
            .collect();
        (command, env)
    }
}

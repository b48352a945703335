//! The bounded tail of a log file, for reports.
//!
//! Workload output goes to disk as it is written (see `launch`); reports
//! want only its end, where the error usually is. Reading the last
//! [`TAIL_BYTES`] back keeps oomgate's memory flat whatever was printed.

use std::io::{self, Read, Seek, SeekFrom};
use std::path::Path;

use crate::redact::Redactor;

/// How much of the end of each log reports keep.
pub const TAIL_BYTES: u64 = 64 * 1024;

/// The last `limit` bytes of a file as text (invalid UTF-8 replaced),
/// masked by `redactor`. When the file is longer, the partial first line
/// is dropped (or, on one long line, the partial first word) and a note
/// says how much came before. The masking sees [`Redactor::context`]
/// more bytes before the cut than are kept, so a secret that crosses the
/// cut is masked up to it and leaves no part of itself. A missing file is
/// an empty tail.
pub fn read_tail(path: &Path, limit: u64, redactor: &Redactor) -> io::Result<String> {
    let mut file = match crate::files::case::open_read(path) {
        Ok(file) => file,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(String::new()),
        Err(e) => return Err(e),
    };
    let length = file.metadata()?.len();
    if length == 0 {
        return Ok(String::new());
    }
    let context = redactor.context() as u64;
    let start = length.saturating_sub(limit + context);
    file.seek(SeekFrom::Start(start))?;
    let mut bytes = Vec::new();
    file.take(limit + context).read_to_end(&mut bytes)?;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy())
        .unwrap_or_default();
    Ok(redactor.masked_tail(&bytes, start, limit, &name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_file_is_returned_whole_and_missing_is_empty() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("out.log");
        std::fs::write(&path, "one\ntwo\n").expect("write");
        assert_eq!(
            read_tail(&path, 100, &Redactor::default()).expect("read"),
            "one\ntwo\n"
        );
        assert_eq!(
            read_tail(&dir.path().join("none.log"), 100, &Redactor::default()).expect("read"),
            ""
        );
    }

    #[test]
    fn long_file_keeps_whole_last_lines() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("out.log");
        let text: String = (0..1000).map(|i| format!("line {i}\n")).collect();
        std::fs::write(&path, &text).expect("write");
        let tail = read_tail(&path, 100, &Redactor::default()).expect("read");
        assert!(tail.starts_with("[oomgate: "), "{tail}");
        assert!(tail.ends_with("line 999\n"), "{tail}");
        let body = tail.split_once('\n').map(|(_, b)| b).unwrap_or_default();
        assert!(body.starts_with("line "), "partial first line kept: {body}");
        assert!(body.len() <= 100);
    }

    #[test]
    fn invalid_utf8_is_replaced_not_fatal() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("out.log");
        std::fs::write(&path, b"ok \xff\xfe\n").expect("write");
        assert_eq!(
            read_tail(&path, 100, &Redactor::default()).expect("read"),
            "ok \u{fffd}\u{fffd}\n"
        );
    }

    /// A secret that crosses the cut leaves no part of itself, on one long
    /// line as on many.
    #[test]
    fn a_secret_across_the_cut_leaves_no_part() {
        let secret = "Zq9XmB27LpQw4-secret-value-0123";
        let redactor = Redactor::new([("A_TOKEN", secret)], &[]);
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("out.log");
        for filler in ["x", "word "] {
            for at in [90, 95, 100, 105, 110] {
                let mut text = filler.repeat(400);
                text.truncate(400 - at);
                text.push_str(secret);
                text.push_str(&"y".repeat(at.saturating_sub(secret.len())));
                std::fs::write(&path, &text).expect("write");
                let tail = read_tail(&path, 100, &redactor).expect("read");
                for window in secret.as_bytes().windows(8) {
                    let part = std::str::from_utf8(window).unwrap_or_default();
                    assert!(!tail.contains(part), "{part:?} of the secret in {tail:?}");
                }
                assert!(tail.starts_with("[oomgate: "), "{tail}");
            }
        }
    }
}

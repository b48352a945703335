//! The bounded tail of a log file, for reports.
//!
//! Workload output goes to disk as it is written (see `launch`); reports
//! want only its end, where the error usually is. Reading the last
//! [`TAIL_BYTES`] back keeps oomgate's memory flat whatever was printed.

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::path::Path;

/// How much of the end of each log reports keep.
pub const TAIL_BYTES: u64 = 64 * 1024;

/// The last `limit` bytes of a file as text (invalid UTF-8 replaced). When
/// the file is longer, the partial first line is dropped and a note says how
/// much came before. A missing file is an empty tail.
pub fn read_tail(path: &Path, limit: u64) -> io::Result<String> {
    let mut file = match File::open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(String::new()),
        Err(e) => return Err(e),
    };
    let length = file.metadata()?.len();
    let start = length.saturating_sub(limit);
    file.seek(SeekFrom::Start(start))?;
    let mut bytes = Vec::with_capacity(usize::try_from(limit.min(length)).unwrap_or(0));
    file.take(limit).read_to_end(&mut bytes)?;
    if start == 0 {
        return Ok(String::from_utf8_lossy(&bytes).into_owned());
    }
    let cut = bytes.iter().position(|b| *b == b'\n').map_or(0, |i| i + 1);
    let skipped = start + cut as u64;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy())
        .unwrap_or_default();
    Ok(format!(
        "[oomgate: {skipped} earlier bytes are in {name}]\n{}",
        String::from_utf8_lossy(&bytes[cut..])
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_file_is_returned_whole_and_missing_is_empty() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("out.log");
        std::fs::write(&path, "one\ntwo\n").expect("write");
        assert_eq!(read_tail(&path, 100).expect("read"), "one\ntwo\n");
        assert_eq!(
            read_tail(&dir.path().join("none.log"), 100).expect("read"),
            ""
        );
    }

    #[test]
    fn long_file_keeps_whole_last_lines() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("out.log");
        let text: String = (0..1000).map(|i| format!("line {i}\n")).collect();
        std::fs::write(&path, &text).expect("write");
        let tail = read_tail(&path, 100).expect("read");
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
            read_tail(&path, 100).expect("read"),
            "ok \u{fffd}\u{fffd}\n"
        );
    }
}

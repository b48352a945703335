//! The supervisor's report lines, as the supervisor writes them and
//! oomgate reads them: one line each, on a pipe, so that oomgate learns of
//! an exit the moment it happens and holds every high-water mark even if
//! the supervisor is killed later.

use std::io::Write;
use std::os::fd::RawFd;

/// A line of the supervisor's report, as oomgate reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Report {
    /// The supervisor, made by the fork server, has this pid and leads its
    /// process group (its first line; an executed one's pid is known).
    Supervisor(i32),
    /// The fork server could not make a supervisor (errno): nothing was
    /// started.
    Refused(i32),
    /// The workload could not join the case cgroup (errno); it runs anyway.
    CgroupFailed(i32),
    /// The workload's process was forked with this pid and is about to
    /// execute the command (written by the child itself, so it is in the
    /// pipe even when the workload kills its supervisor at once).
    Forked(i32),
    /// The workload started with this pid.
    Started(i32),
    /// The workload could not be started.
    SpawnFailed(String),
    /// A process the supervisor reaped (re-parented to it) had this
    /// `ru_maxrss` (KiB), the largest so far.
    Rss(u64),
    /// The workload ended: how, and the largest `ru_maxrss` (KiB) of it and
    /// every process the supervisor reaped; `stays`: processes the
    /// workload left run, and the supervisor stays with them (else it
    /// exits at once).
    Exited {
        exit: crate::process::Exit,
        maxrss_kib: u64,
        stays: bool,
    },
}

impl Report {
    pub fn parse(line: &str) -> Option<Report> {
        let mut words = line.split(' ');
        match words.next()? {
            "supervisor" => Some(Report::Supervisor(words.next()?.parse().ok()?)),
            "refused" => Some(Report::Refused(words.next()?.parse().ok()?)),
            "cgroup" => Some(Report::CgroupFailed(words.next()?.parse().ok()?)),
            "forked" => Some(Report::Forked(words.next()?.parse().ok()?)),
            "pid" => Some(Report::Started(words.next()?.parse().ok()?)),
            "rss" => Some(Report::Rss(words.next()?.parse().ok()?)),
            "spawn-error" => Some(Report::SpawnFailed(
                line.trim_start_matches("spawn-error").trim().to_string(),
            )),
            "exit" => {
                let kind = words.next()?;
                let value: i32 = words.next()?.parse().ok()?;
                let maxrss_kib = words.next()?.parse().ok()?;
                let stays = match words.next() {
                    None => false,
                    Some("stays") => true,
                    Some(_) => return None,
                };
                let exit = match kind {
                    "code" => crate::process::Exit::Code(value),
                    "signal" => crate::process::Exit::Signal(value),
                    _ => return None,
                };
                Some(Report::Exited {
                    exit,
                    maxrss_kib,
                    stays,
                })
            }
            _ => None,
        }
    }
}

/// Write one report line with one `write`. A line written in pieces
/// (`writeln!` on a `File` writes each piece) wakes oomgate's reader once
/// per piece; a line of at most `PIPE_BUF` bytes written at once also
/// never interleaves with the workload's own `forked` line. Formatted on
/// the stack, so that waiting allocates nothing (a line too long for the
/// buffer, an error naming a long path, is formatted on the heap).
pub(super) fn say(report: &mut std::fs::File, line: std::fmt::Arguments) {
    let mut buffer = [0u8; 512];
    let mut cursor = std::io::Cursor::new(&mut buffer[..]);
    let fits = cursor
        .write_fmt(line)
        .and_then(|()| cursor.write_all(b"\n"))
        .is_ok();
    let end = usize::try_from(cursor.position()).unwrap_or(0);
    // A closed pipe (oomgate gone) is handled where oomgate's death is.
    let _ = match fits {
        true => report.write_all(&buffer[..end]),
        false => report.write_all(format!("{line}\n").as_bytes()),
    };
}

/// Write `<word> <n>\n` (`n` in ten digits) to `fd` with one `write`,
/// from stack memory: safe between fork and exec.
pub(super) fn write_number_line<const W: usize>(fd: RawFd, word: [u8; W], mut n: u32) {
    let mut line = [b'0'; 64];
    line[..W].copy_from_slice(&word);
    for slot in line[W..W + 10].iter_mut().rev() {
        *slot = b'0' + (n % 10) as u8;
        n /= 10;
    }
    line[W + 10] = b'\n';
    // SAFETY: write from a stack buffer to a descriptor the caller holds.
    unsafe { libc::write(fd, line.as_ptr().cast(), W + 11) };
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::process::Exit;

    #[test]
    fn report_lines() {
        assert_eq!(Report::parse("pid 42"), Some(Report::Started(42)));
        assert_eq!(Report::parse("forked 42"), Some(Report::Forked(42)));
        assert_eq!(
            Report::parse("supervisor 0000000042"),
            Some(Report::Supervisor(42))
        );
        assert_eq!(
            Report::parse("refused 0000000001"),
            Some(Report::Refused(1))
        );
        assert_eq!(Report::parse("rss 2048"), Some(Report::Rss(2048)));
        assert_eq!(
            Report::parse("cgroup 0000000013"),
            Some(Report::CgroupFailed(13))
        );
        assert_eq!(
            Report::parse("exit code 3 2048"),
            Some(Report::Exited {
                exit: Exit::Code(3),
                maxrss_kib: 2048,
                stays: false,
            })
        );
        assert_eq!(
            Report::parse("exit signal 9 100"),
            Some(Report::Exited {
                exit: Exit::Signal(9),
                maxrss_kib: 100,
                stays: false,
            })
        );
        assert_eq!(
            Report::parse("exit code 0 512 stays"),
            Some(Report::Exited {
                exit: Exit::Code(0),
                maxrss_kib: 512,
                stays: true,
            })
        );
        assert_eq!(
            Report::parse("spawn-error Permission denied (os error 13)"),
            Some(Report::SpawnFailed(
                "Permission denied (os error 13)".to_string()
            ))
        );
        for bad in [
            "",
            "pid",
            "pid x",
            "supervisor",
            "refused x",
            "exit code",
            "exit maybe 1 2",
            "exit code 0 1 goes",
            "hello",
        ] {
            assert_eq!(Report::parse(bad), None, "{bad:?}");
        }
    }

    /// Each line reaches the reader whole, in one read: short ones from
    /// the stack, a long one (an error naming a long path) too.
    #[test]
    fn a_line_is_written_whole() {
        use std::io::Read;
        let (mut reader, writer) = std::io::pipe().expect("pipe");
        let mut writer = std::fs::File::from(std::os::fd::OwnedFd::from(writer));
        say(&mut writer, format_args!("exit {} {} {}", "code", 0, 1836));
        let mut buffer = [0u8; 8192];
        let n = reader.read(&mut buffer).expect("read");
        assert_eq!(&buffer[..n], b"exit code 0 1836\n");
        let long = "d/".repeat(1000);
        say(
            &mut writer,
            format_args!("spawn-error cannot enter {long}: gone"),
        );
        let n = reader.read(&mut buffer).expect("read");
        let expected = format!("spawn-error cannot enter {long}: gone\n");
        assert_eq!(&buffer[..n], expected.as_bytes());
        assert_eq!(
            Report::parse(std::str::from_utf8(&buffer[..n - 1]).expect("utf-8")),
            Some(Report::SpawnFailed(format!("cannot enter {long}: gone")))
        );
        write_number_line(writer_fd(&writer), *b"forked ", 42);
        let n = reader.read(&mut buffer).expect("read");
        assert_eq!(&buffer[..n], b"forked 0000000042\n");
    }

    fn writer_fd(file: &std::fs::File) -> RawFd {
        use std::os::fd::AsRawFd;
        file.as_raw_fd()
    }
}

//! The supervisor's report lines, as the supervisor writes them and
//! oomgate reads them: one line each, on a pipe, so that oomgate learns of
//! an exit the moment it happens and holds every high-water mark even if
//! the supervisor is killed later.

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
}

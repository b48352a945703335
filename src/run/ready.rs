//! Whether a case's server is ready for its load: an HTTP GET answered
//! 2xx or 3xx, a TCP connection accepted, or a line of its output matching
//! a regex — asked again every [`POLL`] on a thread of its own, so that a
//! check waiting on a slow server never holds up the case's sampling, nor
//! noticing that the server died.
//!
//! The HTTP check is a plain `GET` of HTTP/1.1 with `Connection: close`,
//! reading the status line only: what Kubernetes' `httpGet` probe does,
//! and all a health endpoint needs. It is written here rather than taken
//! from an HTTP client crate, which would bring TLS and a dozen
//! dependencies for one request line to a port on the same machine.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::suite::{HttpTarget, Ready, ReadyError, http_target, tcp_target};

/// Why a server is not ready yet, as its case's message says when it
/// never is.
#[derive(Debug, thiserror::Error)]
enum NotReady {
    #[error(transparent)]
    Unusable(ReadyError),
    #[error("cannot resolve {host}: {source}")]
    Resolve {
        host: String,
        source: std::io::Error,
    },
    #[error("{0} has no address")]
    NoAddress(String),
    #[error("{at}: {source}")]
    Io { at: String, source: std::io::Error },
    #[error("{path} answered {code}")]
    Status { path: String, code: u16 },
    #[error("the connection closed without an answer")]
    NoAnswer,
    #[error("the answer is not HTTP")]
    NotHttp,
    #[error("no line matching /{0}/ yet")]
    NoLine(String),
}

/// How often readiness is asked.
pub(super) const POLL: Duration = Duration::from_millis(50);
/// How long one check may wait for a connection or an answer.
const CHECK_TIMEOUT: Duration = Duration::from_secs(1);
/// The most of a status line read.
const STATUS_LINE: usize = 256;
/// The most of the rest of an answer read and dropped.
const DRAIN: usize = 64 * 1024;

/// A readiness check running on its own thread until it succeeds or is
/// dropped.
pub(super) struct Readiness {
    ready: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
    /// Why the last check failed, for the message of a server never ready.
    last: Arc<Mutex<Option<String>>>,
}

impl Readiness {
    /// Start asking `ready` (its placeholders filled). `logs`: the
    /// server's stdout and stderr, with the lengths they had when it
    /// started (a log readiness looks at its new lines only).
    pub(super) fn start(ready: Ready, logs: Vec<(PathBuf, u64)>) -> Self {
        let flag = Arc::new(AtomicBool::new(false));
        let stop = Arc::new(AtomicBool::new(false));
        let last = Arc::new(Mutex::new(None));
        let mut check = Check::new(ready, logs);
        let thread = {
            let (flag, stop, last) = (flag.clone(), stop.clone(), last.clone());
            std::thread::Builder::new()
                .name("oomgate-ready".into())
                .spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        match check.once() {
                            Ok(()) => {
                                flag.store(true, Ordering::Release);
                                return;
                            }
                            Err(why) => {
                                if let Ok(mut last) = last.lock() {
                                    *last = Some(why.to_string());
                                }
                            }
                        }
                        std::thread::sleep(POLL);
                    }
                })
        };
        // The thread is not joined (see `Drop`).
        if let Err(e) = thread {
            if let Ok(mut last) = last.lock() {
                *last = Some(format!("cannot start the readiness check: {e}"));
            }
        }
        Readiness {
            ready: flag,
            stop,
            last,
        }
    }

    pub(super) fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Acquire)
    }

    /// Why the last check failed, if one did.
    pub(super) fn last_failure(&self) -> Option<String> {
        self.last.lock().ok().and_then(|last| last.clone())
    }
}

impl Drop for Readiness {
    /// The thread is told to stop, not waited for: a check in progress
    /// ends within CHECK_TIMEOUT (twice: connect, then answer), and the
    /// case must not wait on a server that hangs.
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// One kind of check, with what it keeps between attempts.
enum Check {
    Http(Result<HttpTarget, ReadyError>),
    Tcp(Result<(String, u16), ReadyError>),
    Log {
        pattern: Result<regex::Regex, ReadyError>,
        logs: Vec<LogTail>,
    },
}

/// The part of a log not yet looked at.
struct LogTail {
    path: PathBuf,
    offset: u64,
    /// The last line, while it has no newline yet.
    partial: Vec<u8>,
}

/// How much of a log one check reads at most (the rest waits for the next).
const LOG_READ: u64 = 1024 * 1024;

impl Check {
    fn new(ready: Ready, logs: Vec<(PathBuf, u64)>) -> Self {
        match ready {
            Ready::Http(url) => Check::Http(http_target(&url).map_err(ReadyError::from)),
            Ready::Tcp(address) => Check::Tcp(tcp_target(&address).map_err(ReadyError::from)),
            Ready::Log(pattern) => Check::Log {
                pattern: regex::Regex::new(&pattern).map_err(ReadyError::from),
                logs: logs
                    .into_iter()
                    .map(|(path, offset)| LogTail {
                        path,
                        offset,
                        partial: Vec::new(),
                    })
                    .collect(),
            },
        }
    }

    /// Ask once: `Err` says why the server is not ready yet.
    fn once(&mut self) -> Result<(), NotReady> {
        let unusable = |e: &ReadyError| NotReady::Unusable(e.clone());
        match self {
            Check::Http(target) => http_ok(target.as_ref().map_err(unusable)?),
            Check::Tcp(target) => {
                let (host, port) = target.as_ref().map_err(unusable)?;
                connect(host, *port).map(drop)
            }
            Check::Log { pattern, logs } => {
                let pattern = pattern.as_ref().map_err(unusable)?;
                for log in logs.iter_mut() {
                    if log.matches(pattern) {
                        return Ok(());
                    }
                }
                Err(NotReady::NoLine(pattern.to_string()))
            }
        }
    }
}

impl LogTail {
    /// Whether a line written since the last look matches.
    fn matches(&mut self, pattern: &regex::Regex) -> bool {
        let Ok(file) = crate::files::case::open_read(&self.path) else {
            return false;
        };
        let mut chunk = Vec::new();
        let read = {
            use std::io::Seek;
            let mut file = file;
            file.seek(std::io::SeekFrom::Start(self.offset))
                .and_then(|_| file.take(LOG_READ).read_to_end(&mut chunk))
        };
        let Ok(read) = read else { return false };
        self.offset += read as u64;
        self.partial.extend_from_slice(&chunk);
        let mut found = false;
        while let Some(end) = self.partial.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = self.partial.drain(..=end).collect();
            found |= pattern.is_match(&String::from_utf8_lossy(&line[..end]));
        }
        // A line still being written counts too; a huge one is cut.
        found |= pattern.is_match(&String::from_utf8_lossy(&self.partial));
        if self.partial.len() > LOG_READ as usize {
            self.partial.clear();
        }
        found
    }
}

/// A TCP connection to `host:port`, to its first address that answers.
fn connect(host: &str, port: u16) -> Result<TcpStream, NotReady> {
    let addresses: Vec<SocketAddr> = (host, port)
        .to_socket_addrs()
        .map_err(|source| NotReady::Resolve {
            host: host.to_string(),
            source,
        })?
        .collect();
    let mut why = NotReady::NoAddress(host.to_string());
    for address in addresses {
        match TcpStream::connect_timeout(&address, CHECK_TIMEOUT) {
            Ok(stream) => return Ok(stream),
            Err(source) => {
                why = NotReady::Io {
                    at: address.to_string(),
                    source,
                }
            }
        }
    }
    Err(why)
}

/// `GET` the target: ready on a 2xx or 3xx status.
fn http_ok(target: &HttpTarget) -> Result<(), NotReady> {
    let mut stream = connect(&target.host, target.port)?;
    let io = |source: std::io::Error| NotReady::Io {
        at: format!("{}:{}", target.host, target.port),
        source,
    };
    stream.set_read_timeout(Some(CHECK_TIMEOUT)).map_err(io)?;
    stream.set_write_timeout(Some(CHECK_TIMEOUT)).map_err(io)?;
    let host = if target.host.contains(':') {
        format!("[{}]", target.host)
    } else {
        target.host.clone()
    };
    let request = format!(
        "GET {} HTTP/1.1\r\nHost: {host}:{}\r\nUser-Agent: oomgate\r\nAccept: */*\r\nConnection: close\r\n\r\n",
        target.path, target.port
    );
    stream.write_all(request.as_bytes()).map_err(io)?;
    let mut line = Vec::with_capacity(STATUS_LINE);
    let mut byte = [0u8; 64];
    while !line.contains(&b'\n') && line.len() < STATUS_LINE {
        match stream.read(&mut byte) {
            Ok(0) => break,
            Ok(n) => line.extend_from_slice(&byte[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(io(e)),
        }
    }
    // The rest of the answer is read (up to a bound) before closing: a
    // server whose answer is cut off logs a reset connection.
    let mut rest = [0u8; 4096];
    let mut drained = 0;
    while drained < DRAIN {
        match stream.read(&mut rest) {
            Ok(0) | Err(_) => break,
            Ok(n) => drained += n,
        }
    }
    let text = String::from_utf8_lossy(&line);
    let status = text
        .lines()
        .next()
        .and_then(|first| first.strip_prefix("HTTP/"))
        .and_then(|rest| rest.split_whitespace().nth(1))
        .and_then(|code| code.parse::<u16>().ok());
    match status {
        Some(code) if (200..400).contains(&code) => Ok(()),
        Some(code) => Err(NotReady::Status {
            path: target.path.clone(),
            code,
        }),
        None if line.is_empty() => Err(NotReady::NoAnswer),
        None => Err(NotReady::NotHttp),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    /// A server answering every request with `status`, once per accept.
    fn answering(status: &'static str) -> (u16, std::thread::JoinHandle<()>) {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("address").port();
        let thread = std::thread::spawn(move || {
            if let Ok((mut stream, _)) = listener.accept() {
                let mut request = [0u8; 1024];
                let _ = stream.read(&mut request);
                let _ = stream.write_all(status.as_bytes());
            }
        });
        (port, thread)
    }

    #[test]
    fn http_readiness_wants_a_2xx_or_3xx_status() {
        for (answer, ready) in [
            ("HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n", true),
            ("HTTP/1.0 302 Found\r\n\r\n", true),
            ("HTTP/1.1 503 Service Unavailable\r\n\r\n", false),
            ("garbage\n", false),
            ("", false),
        ] {
            let (port, server) = answering(answer);
            let target = http_target(&format!("http://127.0.0.1:{port}/health")).expect("a target");
            assert_eq!(http_ok(&target).is_ok(), ready, "{answer:?}");
            server.join().expect("server");
        }
    }

    #[test]
    fn nothing_listening_is_not_ready_and_says_why() {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let target = http_target(&format!("http://127.0.0.1:{port}/")).expect("target");
        let why = http_ok(&target).unwrap_err().to_string();
        assert!(why.contains("refused"), "{why}");
    }

    #[test]
    fn a_log_line_written_after_the_start_makes_it_ready() {
        let dir = tempfile::tempdir().expect("tempdir");
        let log = dir.path().join("server.stderr.log");
        std::fs::write(&log, "Uvicorn running from an earlier run\n").expect("log");
        let start = std::fs::metadata(&log).expect("log").len();
        let readiness = Readiness::start(
            Ready::Log("Uvicorn running".into()),
            vec![(log.clone(), start)],
        );
        std::thread::sleep(POLL * 4);
        assert!(
            !readiness.is_ready(),
            "an earlier run's line does not count"
        );
        let mut file = std::fs::OpenOptions::new()
            .append(true)
            .open(&log)
            .expect("log");
        file.write_all(b"INFO: loading\nINFO: Uvicorn running on")
            .expect("write");
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while !readiness.is_ready() && std::time::Instant::now() < deadline {
            std::thread::sleep(POLL);
        }
        assert!(readiness.is_ready(), "{:?}", readiness.last_failure());
    }
}

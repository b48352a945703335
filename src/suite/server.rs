//! A case's server (`server = { ... }`): the process its command loads,
//! started before it and stopped after it. The types the runner launches
//! from, the readiness targets, and the checks of the suite's keys.
//!
//! `{port}` is the server's port, picked free by oomgate at each launch: a
//! reserved placeholder of the server's and the case's command, env and
//! readiness target. It is filled in at launch, in one pass with the
//! matrix values (see [`super::template::Templates`]), so the case's definition as
//! results record it keeps `{port}` and does not change from run to run.

use std::path::PathBuf;
use std::time::Duration;

use indexmap::IndexMap;
use toml::Spanned;

use super::checker::Checker;
use super::raw::RawServer;
use super::template::Templates;
use super::template::{placeholders, substitute};

/// The reserved placeholder of the server's port.
pub const PORT: &str = "port";

/// A case's server, as the suite describes it.
#[derive(Debug, Clone, PartialEq)]
pub struct Server {
    /// The server's command and own env as written.
    pub templates: Templates,
    /// The command as shown: the matrix values in, `{port}` as written.
    pub command: Vec<String>,
    /// What is executed (see `Case::program`).
    pub program: PathBuf,
    /// When the server is ready for its load, as written.
    pub ready: Ready,
    /// How long the server may take to become ready.
    pub ready_timeout: Duration,
    /// What stops it once the load is done.
    pub stop_signal: StopSignal,
    /// How long it may take to exit after `stop_signal` before SIGKILL.
    pub kill_grace: Duration,
}

/// How oomgate knows a server is ready.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ready {
    /// An HTTP GET answered with a 2xx or 3xx status.
    Http(String),
    /// A TCP connection accepted, at `host:port`.
    Tcp(String),
    /// A line of the server's output (stdout or stderr) matching a regex.
    Log(String),
}

impl Ready {
    /// The target with `params` filled in (the port among them).
    pub fn fill(&self, params: &IndexMap<String, String>) -> Ready {
        match self {
            Ready::Http(url) => Ready::Http(substitute(url, params)),
            Ready::Tcp(address) => Ready::Tcp(substitute(address, params)),
            Ready::Log(pattern) => Ready::Log(substitute(pattern, params)),
        }
    }

    /// For messages: `http://127.0.0.1:41234/health`, `a line matching /Uvicorn running/`.
    pub fn describe(&self) -> String {
        match self {
            Ready::Http(url) => url.clone(),
            Ready::Tcp(address) => format!("tcp://{address}"),
            Ready::Log(pattern) => format!("a line of its output matching /{pattern}/"),
        }
    }
}

/// A signal a server may be stopped with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StopSignal {
    pub number: i32,
    pub name: &'static str,
}

impl Default for StopSignal {
    fn default() -> Self {
        StopSignal {
            number: libc::SIGTERM,
            name: "SIGTERM",
        }
    }
}

/// The signals a server may be stopped with. Not SIGKILL: it would kill
/// the supervisor before the server's tree is stopped through it (SIGKILL
/// is what follows `kill_grace`; `kill_grace = "0s"` sends it at once).
const STOP_SIGNALS: [(&str, i32); 6] = [
    ("SIGTERM", libc::SIGTERM),
    ("SIGINT", libc::SIGINT),
    ("SIGQUIT", libc::SIGQUIT),
    ("SIGHUP", libc::SIGHUP),
    ("SIGUSR1", libc::SIGUSR1),
    ("SIGUSR2", libc::SIGUSR2),
];

/// Where an HTTP readiness check connects, and what it asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpTarget {
    pub host: String,
    pub port: u16,
    /// The path and query, `/` at least.
    pub path: String,
}

/// Why a readiness target is none.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TargetError {
    #[error("https is not supported for readiness: use the server's plain http port, or tcp://")]
    Https,
    #[error(
        "a readiness URL starts with http:// (or use tcp://host:port, or {{ log = \"regex\" }})"
    )]
    NotHttp,
    #[error("a tcp:// target is host:port, with no path")]
    TcpWithPath,
    #[error("a tcp:// target needs a port: tcp://127.0.0.1:{{port}}")]
    TcpWithoutPort,
    #[error("no user or password in a readiness target")]
    Credentials,
    #[error("an IPv6 host is written [::1]")]
    Ipv6,
    #[error("the readiness target has no host")]
    NoHost,
    #[error("`{0}` is not a port")]
    Port(String),
}

/// What a launch of a server's matrix row would refuse.
#[derive(Debug, Clone, thiserror::Error)]
pub enum RowError {
    #[error("the server's program is empty after substitution")]
    EmptyProgram,
    #[error("the server's command or env has a NUL byte after substitution")]
    Nul,
    #[error("`server.ready`: {0}")]
    Ready(#[from] ReadyError),
}

/// Why a server's `ready` cannot be asked.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ReadyError {
    #[error(transparent)]
    Target(#[from] TargetError),
    #[error("not a usable regex: {0}")]
    Pattern(#[from] regex::Error),
}

/// `http://host[:port][/path]`; `https` is refused (a readiness check on
/// the runner's own machine needs no TLS, and oomgate carries none).
pub fn http_target(url: &str) -> Result<HttpTarget, TargetError> {
    let rest = url.strip_prefix("http://").ok_or_else(|| {
        if url.starts_with("https://") {
            TargetError::Https
        } else {
            TargetError::NotHttp
        }
    })?;
    let (authority, path) = match rest.find('/') {
        Some(slash) => (&rest[..slash], &rest[slash..]),
        None => (rest, "/"),
    };
    let (host, port) = host_port(authority, 80)?;
    Ok(HttpTarget {
        host,
        port,
        path: path.to_string(),
    })
}

/// `host:port`, for a TCP readiness check.
pub fn tcp_target(address: &str) -> Result<(String, u16), TargetError> {
    let address = address.strip_suffix('/').unwrap_or(address);
    if address.contains('/') {
        return Err(TargetError::TcpWithPath);
    }
    if !address.contains(':') {
        return Err(TargetError::TcpWithoutPort);
    }
    host_port(address, 0)
}

/// `host[:port]` (`[::1]:8000` for IPv6), `default` when no port is given.
fn host_port(authority: &str, default: u16) -> Result<(String, u16), TargetError> {
    if authority.contains('@') {
        return Err(TargetError::Credentials);
    }
    let (host, port) = if let Some(inner) = authority.strip_prefix('[') {
        let (host, after) = inner.split_once(']').ok_or(TargetError::Ipv6)?;
        (host, after.strip_prefix(':'))
    } else {
        match authority.rsplit_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (authority, None),
        }
    };
    if host.is_empty() {
        return Err(TargetError::NoHost);
    }
    let port = match port {
        None => default,
        Some(text) => text
            .parse::<u16>()
            .ok()
            .filter(|p| *p > 0)
            .ok_or_else(|| TargetError::Port(text.to_string()))?,
    };
    Ok((host.to_string(), port))
}

/// Most time a server may be given to become ready, and to stop.
const MAX_READY_TIMEOUT: Duration = Duration::from_secs(24 * 3600);
const MAX_SERVER_GRACE: Duration = Duration::from_secs(3600);
const DEFAULT_READY_TIMEOUT: Duration = Duration::from_secs(5 * 60);
const DEFAULT_SERVER_GRACE: Duration = Duration::from_secs(30);

/// `server = { ... }` checked, but for its placeholders (checked with the
/// case's) and its program (resolved per matrix row).
pub(super) struct ServerDraft {
    pub(super) templates: Templates,
    pub(super) ready: Ready,
    pub(super) ready_timeout: Duration,
    pub(super) stop_signal: StopSignal,
    pub(super) kill_grace: Duration,
}

impl ServerDraft {
    /// Whether `ready` is a target with this matrix row's values in (a
    /// port and a searched value stand in for what a launch puts).
    pub(super) fn check_ready(&self, params: &IndexMap<String, String>) -> Result<(), ReadyError> {
        let (Ready::Http(text) | Ready::Tcp(text) | Ready::Log(text)) = &self.ready;
        let mut values = params.clone();
        for name in placeholders(text) {
            values
                .entry(name.to_string())
                .or_insert_with(|| "1".to_string());
        }
        match self.ready.fill(&values) {
            Ready::Http(url) => Ok(http_target(&url).map(drop)?),
            Ready::Tcp(address) => Ok(tcp_target(&address).map(drop)?),
            Ready::Log(pattern) => Ok(regex::Regex::new(&pattern).map(drop)?),
        }
    }

    /// What a launch of this matrix row would refuse: an empty program, a
    /// NUL byte in an argument or a variable, a readiness target that is
    /// none.
    pub(super) fn check_row(&self, params: &IndexMap<String, String>) -> Result<(), RowError> {
        let (command, env) = self.templates.fill(params);
        if command
            .first()
            .is_none_or(|program| program.trim().is_empty())
        {
            return Err(RowError::EmptyProgram);
        }
        if command
            .iter()
            .chain(env.values())
            .any(|text| text.contains('\0'))
        {
            return Err(RowError::Nul);
        }
        Ok(self.check_ready(params)?)
    }

    /// The server of one matrix row, its program found from `cwd`.
    pub(super) fn for_row(
        &self,
        params: &IndexMap<String, String>,
        resolve: impl Fn(&str) -> PathBuf,
    ) -> Server {
        let command = self.templates.fill(params).0;
        Server {
            program: resolve(&command[0]),
            templates: self.templates.clone(),
            command,
            ready: self.ready.clone(),
            ready_timeout: self.ready_timeout,
            stop_signal: self.stop_signal,
            kill_grace: self.kill_grace,
        }
    }
}

/// Check `server = { ... }`. `timeout`: the case's, which covers the
/// server's start too.
pub(super) fn server(
    check: &mut Checker,
    raw: &Spanned<RawServer>,
    timeout: Option<Duration>,
) -> Option<ServerDraft> {
    let before = check.problems.len();
    let spec = raw.get_ref();
    let command = spec.command.get_ref();
    match command.first() {
        None => {
            check.error(spec.command.span(), "`server.command` is empty").help = Some(
                "write the server's argv, e.g. command = [\"vllm\", \"serve\", \"model\", \"--port\", \"{port}\"]".into(),
            );
        }
        Some(program) if program.get_ref().trim().is_empty() => {
            check.error(program.span(), "the server's program is empty");
        }
        Some(program) if placeholders(program.get_ref()).contains(&PORT) => {
            check.error(
                program.span(),
                "`{port}` in the server's program: it goes in its arguments or env",
            );
        }
        Some(_) => {}
    }
    for arg in command {
        if arg.get_ref().contains('\0') {
            check.error(
                arg.span(),
                "contains a NUL byte, which no process argument can hold",
            );
        }
    }
    let ready = ready(check, &spec.ready);
    let ready_timeout = match &spec.ready_timeout {
        // Never past the case's timeout, which would end the case first
        // without saying the server was not ready.
        None => Some(timeout.map_or(DEFAULT_READY_TIMEOUT, |t| t.min(DEFAULT_READY_TIMEOUT))),
        Some(text) => check
            .bounded_duration("server.ready_timeout", text, MAX_READY_TIMEOUT)
            .filter(|d| {
                if d.is_zero() {
                    check.error(
                        text.span(),
                        "`server.ready_timeout` must be longer than zero",
                    );
                }
                !d.is_zero()
            }),
    };
    if let (Some(ready_timeout), Some(timeout), Some(text)) =
        (ready_timeout, timeout, &spec.ready_timeout)
    {
        if ready_timeout >= timeout {
            check
                .error(
                    text.span(),
                    format!(
                        "`server.ready_timeout` ({}) must be shorter than the case's `timeout` ({})",
                        text.get_ref(),
                        humantime::format_duration(timeout)
                    ),
                )
                .help = Some("the case's timeout covers the server's start and the load".into());
        }
    }
    let kill_grace = match &spec.kill_grace {
        None => Some(DEFAULT_SERVER_GRACE),
        Some(text) => check.bounded_duration("server.kill_grace", text, MAX_SERVER_GRACE),
    };
    let stop_signal = match &spec.stop_signal {
        None => Some(StopSignal::default()),
        Some(text) => {
            let written = text.get_ref().trim().to_ascii_uppercase();
            let name = if written.starts_with("SIG") {
                written
            } else {
                format!("SIG{written}")
            };
            let found = STOP_SIGNALS
                .iter()
                .find(|(known, _)| *known == name)
                .map(|&(name, number)| StopSignal { number, name });
            if found.is_none() {
                let known: Vec<&str> = STOP_SIGNALS.iter().map(|(name, _)| *name).collect();
                check
                    .error(
                        text.span(),
                        format!(
                            "`{}` is not a signal a server can be stopped with",
                            text.get_ref()
                        ),
                    )
                    .help = Some(if name == "SIGKILL" {
                    "SIGKILL follows `kill_grace` anyway: `kill_grace = \"0s\"` sends it at once"
                        .to_string()
                } else {
                    format!("one of {}", known.join(", "))
                });
            }
            found
        }
    };
    let mut env = IndexMap::new();
    for (key, value) in spec.env.iter().flatten() {
        let name = key.get_ref();
        if name.is_empty() || name.contains('=') || name.contains('\0') {
            check.error(
                key.span(),
                format!("`{name}` is not a valid environment variable name"),
            );
        } else if super::model::RESERVED_ENV.contains(&name.as_str()) {
            check.error(
                key.span(),
                format!("`{name}` is set by oomgate for the server"),
            );
        }
        if value.get_ref().contains('\0') {
            check.error(
                value.span(),
                "contains a NUL byte, which no environment value can hold",
            );
        }
        env.insert(name.clone(), value.get_ref().clone());
    }
    if check.problems.len() > before {
        return None;
    }
    Some(ServerDraft {
        templates: Templates {
            command: command.iter().map(|a| a.get_ref().clone()).collect(),
            env,
        },
        ready: ready?,
        ready_timeout: ready_timeout?,
        stop_signal: stop_signal?,
        kill_grace: kill_grace?,
    })
}

/// `ready`: a URL, `tcp://host:port`, or `{ log = "regex" }`. A URL's
/// shape is checked with its placeholders standing for a port.
fn ready(check: &mut Checker, value: &Spanned<toml::Value>) -> Option<Ready> {
    let help = "write \"http://127.0.0.1:{port}/health\", \"tcp://127.0.0.1:{port}\" or { log = \"regex\" }";
    let sample = |text: &str| {
        let params: IndexMap<String, String> = placeholders(text)
            .into_iter()
            .map(|name| (name.to_string(), "1".to_string()))
            .collect();
        substitute(text, &params)
    };
    let parsed = match value.get_ref() {
        toml::Value::String(text) => match text.strip_prefix("tcp://") {
            Some(address) => tcp_target(&sample(address))
                .map(|_| Ready::Tcp(address.to_string()))
                .map_err(|e| e.to_string()),
            None => http_target(&sample(text))
                .map(|_| Ready::Http(text.clone()))
                .map_err(|e| e.to_string()),
        },
        toml::Value::Table(table) => match (table.get("log"), table.len()) {
            (Some(toml::Value::String(pattern)), 1) => regex::Regex::new(&sample(pattern))
                .map(|_| Ready::Log(pattern.clone()))
                .map_err(|e| format!("`server.ready.log` is not a usable regex: {e}")),
            _ => Err("`server.ready` as a table takes one key, `log`".to_string()),
        },
        other => Err(format!("`server.ready` cannot be a {}", other.type_str())),
    };
    match parsed {
        Ok(ready) => Some(ready),
        Err(message) => {
            check
                .error(value.span(), format!("`server.ready`: {message}"))
                .help = Some(help.into());
            None
        }
    }
}

/// The text of `ready` that takes placeholders, for the case's check of
/// them.
pub(super) fn ready_template(raw: &RawServer) -> Option<&str> {
    match raw.ready.get_ref() {
        toml::Value::String(text) => Some(text.as_str()),
        toml::Value::Table(table) => table.get("log").and_then(toml::Value::as_str),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readiness_targets_are_parsed() {
        assert_eq!(
            http_target("http://127.0.0.1:8000/health?x=1"),
            Ok(HttpTarget {
                host: "127.0.0.1".into(),
                port: 8000,
                path: "/health?x=1".into()
            })
        );
        assert_eq!(
            http_target("http://localhost").map(|t| (t.port, t.path)),
            Ok((80, "/".into()))
        );
        assert_eq!(
            http_target("http://[::1]:9/").map(|t| t.host),
            Ok("::1".into())
        );
        assert!(
            http_target("https://x/")
                .unwrap_err()
                .to_string()
                .contains("https is not supported")
        );
        assert!(http_target("http://x:0/").is_err());
        assert!(http_target("http://x:99999/").is_err());
        assert!(http_target("http://u:p@x/").is_err());
        assert_eq!(tcp_target("127.0.0.1:5"), Ok(("127.0.0.1".into(), 5)));
        assert_eq!(tcp_target("127.0.0.1"), Err(TargetError::TcpWithoutPort));
        assert_eq!(
            http_target("http://x:port/"),
            Err(TargetError::Port("port".into()))
        );
        assert!(tcp_target("127.0.0.1").is_err());
        assert!(tcp_target("127.0.0.1:5/x").is_err());
    }
}

//! A case's server (`server = { ... }`): started first, on a free port,
//! in a memory cgroup of its own; watched until it is ready (failing the
//! case at once if it exits, or when `ready_timeout` passes); stopped with
//! its `stop_signal` once its load client — the case's command — is done.
//!
//! The server is measured by the case's own meters, so the case's figures,
//! budget, lock and baseline are the server's; the client's instances get
//! a second cgroup and GPU meter (see `case`). Both are read from one
//! /proc scan per tick, split by their supervisors.

use std::collections::HashSet;
use std::path::Path;
use std::sync::Mutex;
use std::time::Duration;

use super::instance::Instance;
use super::launch::LaunchError;
use super::ready::Readiness;
use super::supervise::forkserver::Forkserver;
use crate::judge::StopReason;
use crate::measure::HostMeter;
use crate::measure::gpu::CaseGpu;
use crate::suite::{Case, Ready, Server};
use crate::vocabulary::Exit;

/// A case's server while the case runs.
pub(super) struct ServerSide<'c, 'g> {
    pub(super) spec: &'c Server,
    /// The server as launched: its command, env and program, the port in.
    launch: Case,
    pub(super) instance: Instance,
    /// The case's own meters: they measure the server.
    pub(super) host: HostMeter,
    pub(super) gpu: Option<CaseGpu<'g>>,
    pub(super) port: u16,
    /// The readiness target, the port in.
    pub(super) ready: Ready,
    readiness: Option<Readiness>,
    /// When it was ready, since the case started.
    pub(super) ready_at: Option<Duration>,
    /// It exited before oomgate stopped it.
    pub(super) exited_on_its_own: bool,
    /// The signal oomgate stopped it with.
    pub(super) stopped_with: Option<&'static str>,
}

/// What a look at the server found.
pub(super) enum Seen {
    Starting,
    /// Ready now, for the first time.
    BecameReady,
    Ready,
    /// It ended, or was not ready in time: the case stops.
    Stop(StopReason),
}

impl<'c, 'g> ServerSide<'c, 'g> {
    /// A server on a free `port`, measured by `host` and `gpu`; not
    /// started yet. `None` when the case has no server.
    pub(super) fn new(
        case: &'c Case,
        case_dir: &Path,
        port: u16,
        host: HostMeter,
        gpu: Option<CaseGpu<'g>>,
    ) -> Option<Self> {
        let spec = case.server.as_ref()?;
        Some(ServerSide {
            spec,
            launch: case.server_at(port)?,
            instance: Instance::server(case_dir, port),
            host,
            gpu,
            port,
            ready: spec.ready.fill(&case.params_at(port)),
            readiness: None,
            ready_at: None,
            exited_on_its_own: false,
            stopped_with: None,
        })
    }

    /// Launch the server in its cgroup and start asking whether it is
    /// ready. The message of a launch that failed names the server.
    pub(super) fn start(
        &mut self,
        case_dir: &Path,
        gpus: Option<&str>,
        forkserver: Option<&Forkserver>,
    ) -> Result<(), LaunchError> {
        let logs: Vec<_> = [&self.instance.logs.stdout, &self.instance.logs.stderr]
            .into_iter()
            .map(|path| {
                let length = std::fs::metadata(path).map_or(0, |m| m.len());
                (path.clone(), length)
            })
            .collect();
        let procs = self.host.cgroup().map(|c| c.procs_path().clone());
        self.instance
            .start(&self.launch, case_dir, procs.as_ref(), gpus, forkserver)
            .map_err(|LaunchError(message)| LaunchError(format!("the server: {message}")))?;
        self.readiness = Some(Readiness::start(self.ready.clone(), logs));
        Ok(())
    }

    /// Look at the server `at` (since the case started): has it exited,
    /// is it ready, has its time to get ready passed?
    pub(super) fn look(&mut self, at: Duration) -> Seen {
        let exit = self.instance.poll();
        let ready = self.readiness.as_ref().is_some_and(Readiness::is_ready);
        match state(
            exit,
            self.ready_at.is_some(),
            ready,
            at,
            self.spec.ready_timeout,
        ) {
            State::Exited(exit) => {
                self.exited_on_its_own = true;
                self.readiness = None;
                Seen::Stop(StopReason::ServerExited {
                    exit,
                    at,
                    ready: self.ready_at.is_some(),
                })
            }
            State::Ready => Seen::Ready,
            State::BecameReady => {
                self.ready_at = Some(at);
                self.readiness = None;
                Seen::BecameReady
            }
            State::NotReady => {
                let last = self.readiness.as_ref().and_then(Readiness::last_failure);
                self.readiness = None;
                Seen::Stop(StopReason::ServerNotReady {
                    after: self.spec.ready_timeout,
                    target: self.ready.describe(),
                    last,
                })
            }
            State::Starting => Seen::Starting,
        }
    }
}

/// Where a server stands at one look.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Exited(Exit),
    Ready,
    BecameReady,
    NotReady,
    Starting,
}

/// A server's state `at` (since the case started): its exit first (one
/// that ended is why its clients fail, ready or not), then whether it was
/// ready, is ready now, or has run out of `ready_timeout`.
fn state(
    exit: Option<Exit>,
    was_ready: bool,
    ready_now: bool,
    at: Duration,
    ready_timeout: Duration,
) -> State {
    match exit {
        Some(exit) => State::Exited(exit),
        None if was_ready => State::Ready,
        None if ready_now => State::BecameReady,
        None if at >= ready_timeout => State::NotReady,
        None => State::Starting,
    }
}

/// A TCP port free on this machine now, never one given to another case
/// of this run (`given`): the kernel picks it (binding port 0), and the
/// listener is closed for the server to bind it. Another program may take
/// it in between; the server then fails to start, and says so.
pub(super) fn free_port(given: &Mutex<HashSet<u16>>) -> std::io::Result<u16> {
    for _ in 0..64 {
        let port = std::net::TcpListener::bind(("127.0.0.1", 0))?
            .local_addr()?
            .port();
        if let Ok(mut given) = given.lock() {
            if given.insert(port) {
                return Ok(port);
            }
        }
    }
    Err(std::io::Error::other(
        "every free port the kernel offered was already given to another case",
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_exit_outranks_readiness_and_readiness_outranks_the_timeout() {
        let second = Duration::from_secs(1);
        let timeout = 30 * second;
        let exited = Some(Exit::Code(1));
        // (exit, was ready, ready now, at, state)
        let table = [
            (exited, true, true, second, State::Exited(Exit::Code(1))),
            (
                exited,
                false,
                false,
                60 * second,
                State::Exited(Exit::Code(1)),
            ),
            (None, true, false, 60 * second, State::Ready),
            (None, false, true, 30 * second, State::BecameReady),
            (None, false, false, 30 * second, State::NotReady),
            (None, false, false, 29 * second, State::Starting),
        ];
        for (exit, was, now, at, expected) in table {
            assert_eq!(
                state(exit, was, now, at, timeout),
                expected,
                "{exit:?} {was} {now} {at:?}"
            );
        }
    }
}

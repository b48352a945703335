//! One case after matrix expansion ([`Case`]): everything needed to launch
//! it, and the as-written command and env it is filled in from again for
//! each probe of a search or each side of a server.

use std::path::PathBuf;
use std::time::Duration;

use indexmap::IndexMap;

use super::budget::Budget;
use super::model::{Leak, Limit, Tolerances};
use super::pytest::PytestTest;
use super::server::{PORT, Server};
use super::template::Templates;
use crate::units::Bytes;

/// One case after matrix expansion: everything needed to launch it.
#[derive(Debug, Clone, PartialEq)]
pub struct Case {
    /// The expanded name; unique in the suite.
    pub id: String,
    /// `id` made safe as a folder name under `cases/`.
    pub folder: String,
    /// The matrix row this case was expanded from, in file order.
    pub params: IndexMap<String, String>,
    /// The argv as written, placeholders substituted.
    pub command: Vec<String>,
    /// What is executed: `command[0]`, made absolute against `cwd` when it
    /// contains a `/`, otherwise looked up on `PATH` at launch.
    pub program: PathBuf,
    /// Absolute working directory.
    pub cwd: PathBuf,
    /// `[defaults].env` then the case's `env`, on top of oomgate's own
    /// environment at launch.
    pub env: IndexMap<String, String>,
    pub timeout: Duration,
    /// How long a stopped case may take to exit after SIGTERM before SIGKILL.
    pub kill_grace: Duration,
    /// Instances launched at once.
    pub concurrency: u32,
    /// Soak: relaunch each instance that exits 0 until this much time passed.
    pub soak: Option<Duration>,
    pub budget: Budget,
    /// How far figures may move from the baseline.
    pub tolerance: Tolerances,
    /// Runs of the whole case; the compared figure is their maximum.
    pub repeat: u32,
    /// Thresholds on figures the workload reports through the probe.
    pub limits: Vec<Limit>,
    /// Fail when a per-iteration figure keeps growing after warm-up.
    pub leak: Option<Leak>,
    /// How far its figures may grow over their ratchet in the run history.
    pub creep: Option<crate::suite::model::Creep>,
    /// Whole GPUs the case needs from a pool (`run --gpus`); `None`: one
    /// under a pool. 0: host-only (it sees no GPU under a pool).
    pub gpus: Option<u32>,
    /// The case's GPU peak as declared, for packing when no baseline has
    /// one (`run --pack`).
    pub gpu_memory: Option<Bytes>,
    /// How long to wait, before the case starts, for its GPUs to come back
    /// to their idle level (see `run::settle`); zero: no wait.
    pub settle_timeout: Duration,
    /// How many of the user's frames name an allocation site in the
    /// torch memory snapshots the case leaves (`sites = { depth = N }`).
    pub sites_depth: u32,
    /// Capacity search: the case runs once per probed value of a
    /// parameter (see `crate::capacity`).
    pub search: Option<crate::capacity::SearchSpec>,
    /// The command and env as written, before any value is put in: what a
    /// probe and a server case's launch fill in, in one pass (filling in
    /// `command` again would read a value's own braces as placeholders).
    pub templates: Templates,
    /// The server the case's command loads (see `docs/serving.md`); the
    /// case's own figures are then the server's.
    pub server: Option<Server>,
    /// With a server: limits on the load client's figures.
    pub client_budget: Budget,
    /// Numbers the workload prints, read from its logs after it ran
    /// (`metrics_from_output`).
    pub outputs: Vec<super::OutputMetric>,
    /// A test of a `[[pytest]]`: how pytest names it.
    pub pytest: Option<PytestTest>,
    /// A test that runs in its table's shared pytest session, not in a
    /// process of its own (`command`, kept for when it cannot).
    pub pytest_session: Option<PytestSession>,
}

/// Where a test runs in its table's shared pytest session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PytestSession {
    /// Its table's place among the suite's `[[pytest]]`s: the tests of one
    /// table share a session.
    pub table: usize,
    /// What starts the session: pytest over the table's paths.
    pub command: Vec<String>,
    /// The test's node id, as the session's collection names it.
    pub nodeid: String,
}

impl Case {
    /// The case as one probe of its search runs it: the searched value
    /// in its command and env (or its concurrency), and in its params.
    pub fn probe(&self, value: u64) -> Case {
        let mut probe = self.clone();
        let Some(search) = &self.search else {
            return probe;
        };
        let param = search.param.as_str();
        probe.params.insert(param.to_string(), value.to_string());
        if param == crate::capacity::CONCURRENCY {
            probe.concurrency = u32::try_from(value).unwrap_or(u32::MAX);
        } else {
            (probe.command, probe.env) = self.templates.fill(&probe.params);
        }
        if let Some(server) = probe.server.as_mut() {
            server.command = server.templates.fill(&probe.params).0;
        }
        probe.search = None;
        probe
    }

    /// The params with the server's port among them, for a launch.
    pub fn params_at(&self, port: u16) -> IndexMap<String, String> {
        let mut params = self.params.clone();
        params.insert(PORT.to_string(), port.to_string());
        params
    }

    /// The load client as launched beside its server on `port`: `{port}`
    /// filled in its command and env.
    pub fn client_at(&self, port: u16) -> Case {
        let mut client = self.clone();
        (client.command, client.env) = self.templates.fill(&self.params_at(port));
        client
    }

    /// The server as launched on `port`, in the shape of a case: its
    /// command, program and env (the case's, then the server's own), the
    /// case's working directory and instances. `None` without a server.
    pub fn server_at(&self, port: u16) -> Option<Case> {
        let server = self.server.as_ref()?;
        let params = self.params_at(port);
        let mut launched = self.clone();
        let (_, env) = self.templates.fill(&params);
        let (command, own_env) = server.templates.fill(&params);
        launched.command = command;
        launched.program = server.program.clone();
        launched.env = env;
        launched.env.extend(own_env);
        launched.kill_grace = server.kill_grace;
        launched.soak = None;
        Some(launched)
    }
}

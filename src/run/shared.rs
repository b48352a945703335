//! What the cases of a run share, read from every case's thread
//! ([`Shared`]), and the words between those threads and the main one:
//! [`Note`] (a case's thread to the main thread), [`Job`] (the main thread
//! to a worker), [`GpuAccess`], [`Live`]. The vocabulary every file of
//! `run/` imports, below all of them.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use super::fault::WriteFault;
use super::interrupt::Interrupt;
use super::schedule::Placement;
use super::supervise;
use crate::environment::Environment;
use crate::measure::cgroup::{CaseCgroup, MemoryHierarchy};
use crate::measure::gpu::Crowding;
use crate::measure::nvml::Gpu;
use crate::record::RunRecord;
use crate::results::{CaseResult, Measurement};
use crate::suite::{Case, Suite};
use crate::units::Bytes;

/// What every case of the run reads, from its own thread.
pub(super) struct Shared<'a> {
    pub(super) suite: &'a Suite,
    pub(super) out_dir: &'a Path,
    pub(super) interrupt: Interrupt,
    pub(super) memory: Option<MemoryHierarchy>,
    pub(super) gpu: Option<Gpu>,
    pub(super) measurement: Measurement,
    pub(super) environment: Environment,
    /// Case cgroups made so far (each gets a new name).
    pub(super) cgroup_serial: AtomicU64,
    /// A file could not be written: no repeat or case is started after it.
    /// Set by a case's thread or by the main thread (`Conductor`).
    pub(super) faulted: Arc<AtomicBool>,
    /// More than one case may run at once: each case's processes are its
    /// own supervisors' descendants, not all of oomgate's.
    pub(super) parallel: bool,
    /// The open files each case's /proc scanner may keep.
    pub(super) open_files_each: u64,
    /// Ports given to the cases' servers so far: never one twice.
    pub(super) ports: std::sync::Mutex<std::collections::HashSet<u16>>,
    /// Each GPU's use when the run started (by position in the device
    /// table): the level a case waits for its GPUs to settle back to.
    pub(super) gpu_idle: Vec<Option<u64>>,
    /// Whether the tests of a `[[pytest]]` table may share a pytest
    /// session: not when cases are placed on a pool of GPUs (a session
    /// has one environment), when each runs in a process of its own.
    pub(super) pytest_sessions: bool,
    /// The sessions the collection started, until a worker takes each.
    pub(super) parked: crate::pytest::session::Parked,
    /// Makes the instances' supervisors (see `supervise::forkserver`);
    /// `None` where it could not start: each supervisor is executed.
    pub(super) forkserver: Option<supervise::forkserver::Forkserver>,
}

/// What a case's thread tells the main thread.
pub(super) enum Note {
    Warning(crate::record::Warning),
    /// One sampling tick.
    Progress {
        elapsed: Duration,
        host_now: Option<Bytes>,
        host_peak: Option<Bytes>,
    },
    /// A file could not be written; the case goes on.
    Fault(WriteFault),
    /// The case is over: each of its runs (one per repeat; with a search,
    /// those of the probe it is judged by) and what its search found;
    /// `completed` is `false` when its thread panicked instead (no run,
    /// nothing stopped).
    Done {
        runs: Vec<RunRecord>,
        capacity: Option<crate::capacity::Capacity>,
        completed: bool,
    },
}

/// The GPUs a case may use, as the schedule gave them.
#[derive(Debug, Clone, Default)]
pub(super) struct GpuAccess {
    /// `CUDA_VISIBLE_DEVICES` for the case: the UUIDs of its pool GPUs
    /// (empty: none); `None`: no pool, the case sees what oomgate sees.
    pub(super) visible: Option<String>,
    /// Whether another case shared its GPUs, when others may: a device
    /// delta then never stands for the case.
    pub(super) crowding: Option<Crowding>,
}

/// A case on its way: started, not yet judged.
pub(super) struct Live {
    pub(super) placement: Placement,
    pub(super) dir: PathBuf,
    /// Its number in the order cases started (the events' `index`).
    pub(super) index: usize,
    /// Other cases that ran on its GPUs while it ran, by pool GPU.
    pub(super) shared_with: BTreeMap<usize, BTreeSet<usize>>,
    /// Its packed attempt's result, when this run is the retry alone.
    pub(super) first_attempt: Option<CaseResult>,
    /// Raised when another case starts on its GPUs.
    pub(super) crowded: Option<Arc<AtomicBool>>,
    /// The worker thread running it.
    pub(super) worker: usize,
}

/// A case for a worker thread to run.
pub(super) struct Job<'c> {
    pub(super) number: usize,
    pub(super) case: &'c Case,
    pub(super) dir: PathBuf,
    pub(super) access: GpuAccess,
    /// The lock's capacity of a searched case: the search starts there.
    pub(super) locked_capacity: Option<u64>,
}

/// A worker thread's queue, with the job taken from it ahead of its turn
/// (to look at it, not to run it out of order: it is the next run).
pub(super) struct Upcoming<'q, 'c> {
    queue: &'q std::sync::mpsc::Receiver<Job<'c>>,
    held: Option<Job<'c>>,
}

impl<'q, 'c> Upcoming<'q, 'c> {
    pub(super) fn new(queue: &'q std::sync::mpsc::Receiver<Job<'c>>) -> Self {
        Upcoming { queue, held: None }
    }

    /// The job queued next, if one has been sent; never waits.
    pub(super) fn peek(&mut self) -> Option<&Job<'c>> {
        if self.held.is_none() {
            self.held = self.queue.try_recv().ok();
        }
        self.held.as_ref()
    }

    /// The next job, waiting for one; `None` once the queue is closed.
    pub(super) fn next(&mut self) -> Option<Job<'c>> {
        self.held.take().or_else(|| self.queue.recv().ok())
    }
}

impl Shared<'_> {
    /// A fresh memory cgroup, named with the run's next serial; `None`
    /// where the run uses none (`--host-method procfs`, none usable).
    pub(super) fn new_cgroup(&self) -> Option<std::io::Result<CaseCgroup>> {
        let hierarchy = self.memory.as_ref()?;
        let serial = self.cgroup_serial.fetch_add(1, Ordering::Relaxed) + 1;
        Some(hierarchy.create_case(serial))
    }

    /// Whether `case` runs in its table's shared pytest session.
    pub(super) fn in_session(&self, case: &Case) -> bool {
        self.pytest_sessions && case.pytest_session.is_some()
    }

    /// Whether a file could not be written: nothing more is started.
    pub(super) fn faulted(&self) -> bool {
        self.faulted.load(Ordering::Relaxed)
    }

    /// The run's fork server, when there is one: oomgate's child, no
    /// process of any case.
    pub(super) fn forkserver_pid(&self) -> Option<i32> {
        self.forkserver
            .as_ref()
            .map(supervise::forkserver::Forkserver::pid)
    }
}

pub(super) fn now_rfc3339() -> String {
    chrono::Local::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, false)
}

//! The seam between the main thread's loop and what runs a case.
//!
//! A [`Launcher`] makes each worker thread's [`Worker`], which runs the
//! cases it is handed and returns their runs' measurement records
//! (`crate::record`). The real one, [`Processes`], launches the case's
//! processes and meters them (`CaseRunner`); the tests' (`Scripted`, in
//! `dispatch`'s tests) returns what a table says, so the dispatcher's
//! decisions — the order cases start in, a retry alone, a fault, Ctrl-C, a
//! worker that panics — are tested without a process (as hyperfine tests
//! its benchmark loop against a mock executor).

use std::sync::mpsc::Sender;

use super::case::{Carried, CaseRunner};
use super::shared::{Job, Note, Shared, Upcoming};
use crate::capacity::Capacity;
use crate::record::RunRecord;

/// Makes the worker of each worker thread. Shared by every thread.
pub(super) trait Launcher: Sync {
    /// A new worker, for a thread that starts, or that goes on after its
    /// last case panicked (nothing of that case's state is kept).
    fn worker<'s>(
        &'s self,
        shared: &'s Shared<'_>,
        notes: Sender<(usize, Note)>,
    ) -> Box<dyn Worker + 's>;
}

/// Runs the cases of one worker thread, one at a time; what it keeps from
/// one case to the next is its own.
pub(super) trait Worker {
    /// Run one case: its runs (one per repeat; with a search, those of the
    /// probe it is judged by) and what its search found. What it sees on
    /// the way (warnings, ticks, faults) goes to the main thread as notes.
    /// `upcoming`: the case queued behind it on this thread, if the main
    /// thread has sent one (a shared session's next test: see
    /// `Dispatch::follow`), which it may start as this one ends.
    fn run(
        &mut self,
        job: &Job<'_>,
        upcoming: &mut Upcoming<'_, '_>,
    ) -> (Vec<RunRecord>, Option<Capacity>);
}

/// The real launcher: each case's processes launched, sampled and stopped.
pub(super) struct Processes;

impl Launcher for Processes {
    fn worker<'s>(
        &'s self,
        shared: &'s Shared<'_>,
        notes: Sender<(usize, Note)>,
    ) -> Box<dyn Worker + 's> {
        static WORKERS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        Box::new(ProcessWorker {
            shared,
            notes,
            carried: None,
            sessions: super::session::Sessions::default(),
            serial: WORKERS.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
        })
    }
}

/// A worker thread's process runner: its /proc scanner and spare cgroup
/// go from case to case, and so does its shared pytest session.
struct ProcessWorker<'s, 'a> {
    shared: &'s Shared<'a>,
    notes: Sender<(usize, Note)>,
    carried: Option<Carried>,
    sessions: super::session::Sessions<'s>,
    /// This worker among the run's, for its sessions' folders.
    serial: usize,
}

impl Worker for ProcessWorker<'_, '_> {
    fn run(
        &mut self,
        job: &Job<'_>,
        upcoming: &mut Upcoming<'_, '_>,
    ) -> (Vec<RunRecord>, Option<Capacity>) {
        if let Some(spec) = job
            .case
            .pytest_session
            .as_ref()
            .filter(|_| self.shared.pytest_sessions)
        {
            let record = self
                .sessions
                .run(self.shared, job, spec, self.serial, upcoming);
            return (vec![record], None);
        }
        let mut runner = CaseRunner::new(
            self.shared,
            job.number,
            job.access.clone(),
            self.notes.clone(),
            self.carried.take(),
        );
        let ran = match &job.case.search {
            Some(search) => {
                let (runs, capacity) = super::repeat::run_search(
                    &mut runner,
                    job.case,
                    &job.dir,
                    search,
                    job.locked_capacity,
                );
                (runs, Some(capacity))
            }
            None => (
                super::repeat::run_repeats(&mut runner, job.case, &job.dir, None),
                None,
            ),
        };
        self.carried = Some(runner.into_carried());
        ran
    }
}

/// A worker thread: run each case it is given until the run closes its
/// queue. A panic must not leave the main thread waiting for a case
/// forever: that case ends as run no times, an error that says so, and
/// the thread goes on with a new worker.
pub(super) fn work(
    launcher: &dyn Launcher,
    shared: &Shared<'_>,
    queue: &std::sync::mpsc::Receiver<Job<'_>>,
    notes: &Sender<(usize, Note)>,
) {
    let mut worker = launcher.worker(shared, notes.clone());
    let mut upcoming = Upcoming::new(queue);
    while let Some(job) = upcoming.next() {
        let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            worker.run(&job, &mut upcoming)
        }));
        let note = match ran {
            Ok((runs, capacity)) => Note::Done {
                runs,
                capacity,
                completed: true,
            },
            Err(_) => {
                worker = launcher.worker(shared, notes.clone());
                Note::Done {
                    runs: Vec::new(),
                    capacity: None,
                    completed: false,
                }
            }
        };
        // The main thread listens until every case is done.
        notes.send((job.number, note)).ok();
    }
}

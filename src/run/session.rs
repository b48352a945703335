//! The tests of a `[[pytest]]` table in one shared pytest session.
//!
//! A worker thread keeps one session (`crate::pytest::session`) alive for
//! the tests it is handed: the one the collection started and parked, or
//! one it starts. It names one test at a time and waits for the plugin's
//! answer, pytest's outcome and the output pytest captured; meanwhile, and
//! around it, it reads the test's memory from `/proc`
//! (`measure::host::session`): the kernel's high-water mark, reset at the
//! test's start, and the children's private memory at ticks.
//!
//! A test that hangs past its `timeout`, a session that dies under a test
//! (a segfault, `os._exit`, the OOM killer) or Ctrl-C ends the session:
//! that test is judged by what happened to it, and the next test starts a
//! fresh session. A session that cannot start (pytest errors out while
//! collecting) fails each test of its table with pytest's words, without
//! trying again.
//!
//! Each test makes one [`RunRecord`], judged by the one judge as any run:
//! its exit is the one pytest gives a session of that test alone (0 when
//! it passed, was skipped or xfailed; 1 when it failed or errored), its
//! host figures what it added over the session's memory at its start.

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use super::shared::{Job, Shared, Upcoming, now_rfc3339};
use crate::diagnose;
use crate::files::case::InstanceLogs;
use crate::measure::cgroup::CaseCgroup;
use crate::measure::gpu::{AllocatorPeaks, CaseGpu, GpuFigures};
use crate::measure::host::HostNote;
use crate::measure::host::session::TestWindow;
use crate::measure::procfs::Scanner;
use crate::probe::{ProbeSummary, PytestReport, TestOutcome};
use crate::pytest::session::{Answer, Heard, Session};
use crate::record::{InstanceRecord, NotRun, RunRecord, StopReason};
use crate::redact;
use crate::suite::{Case, PytestSession};
use crate::vocabulary::Exit;

/// How often a running test's memory is read.
const TICK: Duration = Duration::from_millis(5);

/// How long a session that was told it is over may take to tear down and
/// exit before it is killed.
const CLOSE_GRACE: Duration = Duration::from_secs(10);

/// The most of a session's output kept in the out dir.
const KEPT_OUTPUT: u64 = 4 << 20;

/// A worker thread's sessions: the one alive, and the tables whose
/// session could not start.
#[derive(Default)]
pub(super) struct Sessions<'g> {
    live: Option<Live>,
    /// The test asked for as the one before it ended (the job queued
    /// next on this thread: [`Sessions::ask_next`]), its windows open.
    ahead: Option<Asked<'g>>,
    broken: HashMap<usize, String>,
    /// Sessions this worker had, for their logs' names.
    had: u64,
    /// The allocator variables of each table's tests (one env per table:
    /// a marker sets none), read once rather than per test.
    allocator_env: HashMap<usize, std::collections::BTreeMap<String, String>>,
    /// Reads the session's process tree for its GPU figures (made at the
    /// first test a GPU is measured for).
    scanner: Option<Scanner>,
}

/// A test's GPU figures in its session: NVML's figures of the session's
/// process tree, sampled every `sample_interval` while the test runs and
/// at its ends; judged per test by torch's allocator peak where the plugin
/// reports one (`GpuFigures::per_test`).
struct GpuWindow<'g> {
    meter: CaseGpu<'g>,
    /// The worker's, lent for the window and handed back at its close.
    scanner: Scanner,
    every: Duration,
    next: Instant,
    started: Instant,
}

impl<'g> GpuWindow<'g> {
    fn open(
        gpu: &'g crate::measure::nvml::Gpu,
        case: &Case,
        pid: i32,
        mut scanner: Scanner,
        interval_ms: u64,
    ) -> Self {
        let selection = super::gpu::selection(gpu, case, None);
        let meter = CaseGpu::begin(
            gpu,
            selection.positions,
            interval_ms,
            selection.unmapped,
            None,
        );
        // The session and what it started: a test's child that uses a GPU
        // is the test's too.
        scanner.limit_to(Some(&[pid]));
        let mut window = GpuWindow {
            meter,
            scanner,
            every: Duration::from_millis(interval_ms.max(1)),
            next: Instant::now(),
            started: Instant::now(),
        };
        window.sample();
        window
    }

    fn tick(&mut self) {
        if Instant::now() >= self.next {
            self.sample();
        }
    }

    fn sample(&mut self) {
        self.next = Instant::now() + self.every;
        let mut sample = crate::measure::Sample {
            at: self.started.elapsed(),
            ..Default::default()
        };
        if let Ok(tree) = self.scanner.descendants_of(crate::process::self_pid()) {
            self.meter.sample(tree, &mut sample);
        }
    }

    /// The test's figures, and the scanner back.
    fn close(mut self, allocator: Option<&AllocatorPeaks>) -> (GpuFigures, Scanner) {
        self.sample();
        (self.meter.finish().per_test(allocator), self.scanner)
    }
}

/// The worker's session, where its output is kept once it ends, and its
/// memory cgroup or why it has none (said of each of its tests).
struct Live {
    session: Session,
    log: std::path::PathBuf,
    cgroup: Option<CaseCgroup>,
    no_cgroup: Option<HostNote>,
}

impl Live {
    /// The session moved into a memory cgroup of its own: every process
    /// its tests start is charged to it, and the kernel counts its OOM
    /// kills. None where the run uses no memory cgroups.
    fn new(shared: &Shared<'_>, session: Session, log: std::path::PathBuf) -> Live {
        let (cgroup, no_cgroup) = match shared.new_cgroup() {
            None => (None, None),
            Some(Err(e)) => (
                None,
                Some(HostNote::NoCgroup {
                    client: false,
                    error: e.to_string(),
                }),
            ),
            Some(Ok(mut cgroup)) => match cgroup.join(session.pid()) {
                Ok(()) => (Some(cgroup), None),
                Err(e) => {
                    cgroup.remove().ok();
                    let note = HostNote::NotJoined {
                        instance: "the shared pytest session".to_string(),
                        error: e.to_string(),
                    };
                    (None, Some(note))
                }
            },
        };
        Live {
            session,
            log,
            cgroup,
            no_cgroup,
        }
    }

    /// The session has ended: its cgroup is removed once empty (one a
    /// process left behind is removed by a later run, as a case's is).
    fn remove_cgroup(&mut self) {
        if let Some(cgroup) = self.cgroup.take() {
            cgroup.remove().ok();
        }
    }
}

/// A test the session was asked for as the test before it answered:
/// its windows opened then, between the two, as they would be when it
/// is run (see [`Sessions::ask_next`]).
struct Asked<'g> {
    nodeid: String,
    table: usize,
    start: Instant,
    started_at: String,
    /// The session's output when it was asked for.
    offset: u64,
    window: TestWindow,
    gpu: Option<GpuWindow<'g>>,
    /// Whether the session was told (it may have gone).
    sent: bool,
}

/// How a test's wait ended.
enum Ended {
    Answered(Answer),
    /// The session died (or closed its answers) under the test.
    Died,
    TimedOut,
    Interrupted,
}

impl<'g> Sessions<'g> {
    /// Run one test of `spec`'s table in the worker's session.
    /// `upcoming`: the job queued behind it, asked for as it ends when it
    /// is the next test of the same session.
    pub(super) fn run(
        &mut self,
        shared: &'g Shared<'_>,
        job: &Job<'_>,
        spec: &PytestSession,
        worker: usize,
        upcoming: &mut Upcoming<'_, '_>,
    ) -> RunRecord {
        let mut record = self.run_test(shared, job, spec, worker, upcoming);
        record.allocator_env = self
            .allocator_env
            .entry(spec.table)
            .or_insert_with(|| super::measured::allocator_env(job.case))
            .clone();
        record
    }

    fn run_test(
        &mut self,
        shared: &'g Shared<'_>,
        job: &Job<'_>,
        spec: &PytestSession,
        worker: usize,
        upcoming: &mut Upcoming<'_, '_>,
    ) -> RunRecord {
        match self.ahead.take() {
            Some(ahead) if ahead.nodeid == spec.nodeid && ahead.table == spec.table => {
                return self.finish_test(shared, job, spec, ahead, upcoming);
            }
            // Asked for a test that is not this one (never: the test asked
            // for is the job queued next): its answer is no test's here, so
            // the session goes, and this test starts a new one.
            Some(ahead) => {
                self.drop_asked(ahead);
                self.end_within(Duration::ZERO);
            }
            None => {}
        }
        let case = job.case;
        let started_at = now_rfc3339();
        // Ctrl-C before the test began (it was queued behind the one the
        // interrupt ended): no session is started for it.
        if shared.interrupt.requested() {
            let mut record = not_started(shared, job, started_at, String::new());
            record.stop = Some(StopReason::Interrupted);
            return record;
        }
        // Another table's session, or one that died after its last test
        // answered (a thread that test left): a new one, the test not
        // blamed.
        if self
            .live
            .as_mut()
            .is_some_and(|live| live.session.table() != spec.table || !live.session.alive())
        {
            self.close();
        }
        if self.live.is_none() {
            if let Some(why) = self.broken.get(&spec.table) {
                return not_started(shared, job, started_at, why.clone());
            }
            match begin(shared, case, spec) {
                Ok(session) => {
                    self.had += 1;
                    let log = shared.out_dir.join("cases").join(format!(
                        ".pytest-session-{}-{worker}-{}.log",
                        spec.table, self.had
                    ));
                    self.live = Some(Live::new(shared, session, log));
                }
                // Ctrl-C while the session started: the test is interrupted,
                // the table not broken.
                Err(_) if shared.interrupt.requested() => {
                    let mut record = not_started(shared, job, started_at, String::new());
                    record.stop = Some(StopReason::Interrupted);
                    return record;
                }
                Err(why) => {
                    self.broken.insert(spec.table, why.clone());
                    return not_started(shared, job, started_at, why);
                }
            }
        }
        match self.ask(shared, job.case, spec) {
            Some(asked) => self.finish_test(shared, job, spec, asked, upcoming),
            None => not_started(shared, job, started_at, "no session".into()),
        }
    }

    /// Open a test's windows in the live session and ask for it: its time
    /// and timeout start now, the session ready (a new session's start-up
    /// and collection are not the test's). `sent` is false when the
    /// session could not be told (it is gone); `None` without a session.
    fn ask(
        &mut self,
        shared: &'g Shared<'_>,
        case: &Case,
        spec: &PytestSession,
    ) -> Option<Asked<'g>> {
        let live = self.live.as_mut()?;
        let start = Instant::now();
        let started_at = now_rfc3339();
        let session = &mut live.session;
        let offset = session.output_len();
        let window = TestWindow::open(session.pid(), live.cgroup.as_mut());
        let gpu = shared.gpu.as_ref().map(|gpu| {
            let scanner = self.scanner.take().unwrap_or_default();
            let interval = shared.measurement.sample_interval_ms;
            GpuWindow::open(gpu, case, session.pid(), scanner, interval)
        });
        let sent = session.ask(&spec.nodeid).is_ok();
        Some(Asked {
            nodeid: spec.nodeid.clone(),
            table: spec.table,
            start,
            started_at,
            offset,
            window,
            gpu,
            sent,
        })
    }

    /// The test `asked` for, to its end: its answer waited for, its
    /// windows closed, the next test asked for at once where it is queued
    /// (`ask_next`), then its record.
    fn finish_test(
        &mut self,
        shared: &'g Shared<'_>,
        job: &Job<'_>,
        spec: &PytestSession,
        asked: Asked<'g>,
        upcoming: &mut Upcoming<'_, '_>,
    ) -> RunRecord {
        let case = job.case;
        let Asked {
            start,
            started_at,
            offset,
            mut window,
            mut gpu,
            sent,
            ..
        } = asked;
        let Some(live) = self.live.as_mut() else {
            return not_started(shared, job, started_at, "no session".into());
        };
        let ended = match sent {
            false => Ended::Died,
            true => wait(
                shared,
                &mut live.session,
                &spec.nodeid,
                start + case.timeout,
                (&mut window, live.cgroup.as_mut(), gpu.as_mut()),
            ),
        };
        let mut host = window.close(live.cgroup.as_mut());
        host.notes.extend(live.no_cgroup.clone());
        let allocator = match &ended {
            Ended::Answered(Answer::Ran { allocator, .. }) => allocator.as_deref(),
            _ => None,
        };
        let gpu = gpu.map(|gpu| {
            let (figures, scanner) = gpu.close(allocator);
            self.scanner = Some(scanner);
            figures
        });
        let wall_time = start.elapsed();
        // Its windows are closed: the next test's open now, before this
        // one's record is made and handed on, so the session waits for
        // nothing of it.
        if matches!(ended, Ended::Answered(Answer::Ran { .. })) {
            self.ask_next(shared, upcoming);
        }
        let mut record = base_record(shared, job, started_at, wall_time, host);
        record.gpu = gpu;
        match ended {
            Ended::Answered(Answer::Ran {
                outcome,
                when,
                message,
                stdout,
                stderr,
                ..
            }) => answered(&mut record, job, (outcome, when, message), stdout, stderr),
            Ended::Answered(Answer::Missing) => {
                record.stop = Some(StopReason::NotRun(NotRun::NotCollected {
                    nodeid: spec.nodeid.clone(),
                }));
            }
            Ended::Answered(Answer::Other(line)) => {
                self.lost(job, &mut record, offset, None);
                record.stop = Some(StopReason::NotRun(NotRun::Garbled {
                    nodeid: spec.nodeid.clone(),
                    line,
                }));
            }
            Ended::Died => self.lost(job, &mut record, offset, None),
            Ended::TimedOut => self.lost(
                job,
                &mut record,
                offset,
                Some(StopReason::TimedOut {
                    after: case.timeout,
                }),
            ),
            Ended::Interrupted => {
                self.lost(job, &mut record, offset, Some(StopReason::Interrupted));
            }
        }
        record
    }

    /// The test just ended answered: ask at once for the job queued next
    /// on this thread, when it is a test of the same live session, so the
    /// session runs it while this thread and the main thread finish the
    /// one before (a short test takes about as long as that). Not after
    /// Ctrl-C, and not in a session that has gone.
    fn ask_next(&mut self, shared: &'g Shared<'_>, upcoming: &mut Upcoming<'_, '_>) {
        if shared.interrupt.requested() {
            return;
        }
        let Some(next) = upcoming.peek() else {
            return;
        };
        let Some(spec) = next
            .case
            .pytest_session
            .as_ref()
            .filter(|_| shared.pytest_sessions)
        else {
            return;
        };
        let same = self
            .live
            .as_mut()
            .is_some_and(|live| live.session.table() == spec.table && live.session.alive());
        if !same {
            return;
        }
        match self.ask(shared, next.case, spec) {
            Some(asked) if asked.sent => self.ahead = Some(asked),
            // The session is gone: the test runs as any, in a new one.
            Some(asked) => self.drop_asked(asked),
            None => {}
        }
    }

    /// A test asked for that will not be waited for here: its scanner
    /// back.
    fn drop_asked(&mut self, asked: Asked<'g>) {
        if let Some(gpu) = asked.gpu {
            self.scanner = Some(gpu.close(None).1);
        }
    }

    /// The session ended under a test (or is ended, for `stop`): killed;
    /// its exit, and what it printed since the test started, are the
    /// test's.
    fn lost(
        &mut self,
        job: &Job<'_>,
        record: &mut RunRecord,
        offset: u64,
        stop: Option<StopReason>,
    ) {
        let Some(mut live) = self.live.take() else {
            return;
        };
        let grace = match stop {
            Some(_) => Duration::ZERO,
            None => Duration::from_secs(1),
        };
        record.instances[0].exit = live.session.end(grace);
        live.remove_cgroup();
        // Its last KEPT_OUTPUT since the test started: where the error is.
        let from = offset.max(live.session.output_len().saturating_sub(KEPT_OUTPUT));
        let said = live.session.output_bytes(from, KEPT_OUTPUT);
        keep_logs(record, job, b"", &said);
        record.focus.stderr_tail = live.session.output_since(offset, "stderr.log");
        record.focus.scan = stop
            .is_none()
            .then(|| super::measured::masked_scan(diagnose::scan(said.as_slice())));
        record.stop = stop;
        keep_output(&live);
    }

    /// Tell the live session it is over, and wait for it.
    fn close(&mut self) {
        self.end_within(CLOSE_GRACE);
    }

    /// End the live session, killing it after `grace`; its output kept.
    fn end_within(&mut self, grace: Duration) {
        if let Some(mut live) = self.live.take() {
            live.session.end(grace);
            live.remove_cgroup();
            keep_output(&live);
        }
    }
}

impl Drop for Sessions<'_> {
    fn drop(&mut self) {
        self.close();
    }
}

/// The session of `spec`'s table: the one its collection started, parked
/// for the run, else a new one. Why not, as a test's message.
fn begin(shared: &Shared<'_>, case: &Case, spec: &PytestSession) -> Result<Session, String> {
    if let Some(session) = shared.parked.take(spec.table) {
        return Ok(session);
    }
    let shown = crate::suite::shell_join(&spec.command);
    super::launch::check_pytest_plugin().map_err(|e| e.0)?;
    if !case.cwd.is_dir() {
        return Err(format!(
            "cannot start the shared pytest session `{shown}`: working directory {} does not exist",
            case.cwd.display()
        ));
    }
    let launched = crate::pytest::launched(case);
    Session::start(
        &launched,
        spec,
        None,
        crate::pytest::COLLECT_TIMEOUT,
        &|| shared.interrupt.requested(),
    )
    .map_err(|not| {
        format!(
            "the shared pytest session `{shown}` {} before it ran a test:\n{}",
            not.how,
            not.output.trim_end()
        )
    })
}

/// Wait for the test's answer until `deadline`, reading its memory every
/// tick.
fn wait(
    shared: &Shared<'_>,
    session: &mut Session,
    nodeid: &str,
    deadline: Instant,
    (window, mut cgroup, mut gpu): (
        &mut TestWindow,
        Option<&mut CaseCgroup>,
        Option<&mut GpuWindow<'_>>,
    ),
) -> Ended {
    loop {
        if shared.interrupt.requested() {
            return Ended::Interrupted;
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ended::TimedOut;
        }
        match session.answer(nodeid, left.min(TICK)) {
            // A child the test forked may hold the answers open: the
            // session's own death is looked for too.
            Heard::Quiet if !session.alive() => return Ended::Died,
            Heard::Quiet => {
                window.tick(cgroup.as_deref_mut());
                if let Some(gpu) = gpu.as_mut() {
                    gpu.tick();
                }
            }
            Heard::Answer(answer) => return Ended::Answered(answer),
            Heard::Ended => return Ended::Died,
        }
    }
}

/// A session's whole output (its last [`KEPT_OUTPUT`]), kept in the out
/// dir beside the cases, once it ended.
fn keep_output(live: &Live) {
    let len = live.session.output_len();
    let said = live
        .session
        .output_bytes(len.saturating_sub(KEPT_OUTPUT), KEPT_OUTPUT);
    crate::files::case::replace(&live.log, &said).ok();
}

/// The record of a test of a session before its end is known: its host
/// figures, one instance, no exit yet.
fn base_record(
    shared: &Shared<'_>,
    job: &Job<'_>,
    started_at: String,
    wall_time: Duration,
    host: crate::measure::HostFigures,
) -> RunRecord {
    let dir = job
        .dir
        .strip_prefix(shared.out_dir)
        .unwrap_or(&job.dir)
        .to_path_buf();
    let logs = InstanceLogs::for_instance(&dir, 0);
    let instance = InstanceRecord {
        index: 0,
        runs: 1,
        exit: None,
        stdout_log: logs.stdout,
        stderr_log: logs.stderr,
        supervisor_lost: false,
    };
    // A test of a session has no timeline: its window is read at its ends
    // (and at ticks, for its children), not drawn.
    RunRecord::bare(started_at, wall_time, dir, vec![instance], host)
}

/// The test's output, in its folder, made now: a test that printed
/// nothing (most) gets no folder, its record no logs.
fn keep_logs(record: &mut RunRecord, job: &Job<'_>, stdout: &[u8], stderr: &[u8]) {
    let instance = &mut record.instances[0];
    instance.stdout_log = PathBuf::new();
    instance.stderr_log = PathBuf::new();
    if stdout.is_empty() && stderr.is_empty() {
        record.dir = PathBuf::new();
        return;
    }
    // The folder is the dispatcher's to have cleared; a folder a test
    // made in its place, or a link, is not written through.
    if std::fs::create_dir(&job.dir).is_err() && !job.dir.is_dir() {
        return;
    }
    let logs = InstanceLogs::for_instance(&job.dir, 0);
    let relative = InstanceLogs::for_instance(&record.dir, 0);
    for (text, path, named, log) in [
        (
            stdout,
            logs.stdout,
            relative.stdout,
            &mut instance.stdout_log,
        ),
        (
            stderr,
            logs.stderr,
            relative.stderr,
            &mut instance.stderr_log,
        ),
    ] {
        let written = crate::files::case::create(&path).and_then(|mut file| {
            use std::io::Write;
            file.write_all(text)
        });
        if written.is_ok() {
            *log = named;
        }
    }
}

/// A test the session ran and answered for: pytest's outcome, its
/// captured output written to its folder's logs.
fn answered(
    record: &mut RunRecord,
    job: &Job<'_>,
    (outcome, when, message): (TestOutcome, Option<String>, String),
    stdout: String,
    stderr: String,
) {
    keep_logs(record, job, stdout.as_bytes(), stderr.as_bytes());
    let report = PytestReport {
        nodeid: job
            .case
            .pytest_session
            .as_ref()
            .map_or_else(|| job.case.id.clone(), |s| s.nodeid.clone()),
        outcome,
        when,
        message: (!message.is_empty()).then(|| redact::active().mask(&message).into_owned()),
    };
    let failed = report.failed();
    record.instances[0].exit = Some(Exit::Code(i32::from(failed)));
    record.probe = Some(ProbeSummary {
        pytest: Some(report),
        ..ProbeSummary::default()
    });
    // The plugin sends the end of each output with some before it in view
    // of the masking: a secret the cut crosses leaves no part.
    let redactor = redact::active();
    let tail = |text: &str, log: &str| {
        redactor.masked_tail(text.as_bytes(), 0, super::logs::TAIL_BYTES, log)
    };
    record.focus.stdout_tail = tail(&stdout, "stdout.log");
    record.focus.stderr_tail = tail(&stderr, "stderr.log");
    record.focus.scan =
        failed.then(|| super::measured::masked_scan(diagnose::scan(stderr.as_bytes())));
}

/// A test that did not run: its table's session could not start, or the
/// session did not know it.
fn not_started(shared: &Shared<'_>, job: &Job<'_>, started_at: String, why: String) -> RunRecord {
    let host =
        crate::measure::HostFigures::unmeasured(crate::measure::host::HostMethod::PytestSession);
    let mut record = base_record(shared, job, started_at, Duration::ZERO, host);
    record.instances[0].runs = 0;
    record.stop = Some(StopReason::LaunchFailed { message: why });
    record
}

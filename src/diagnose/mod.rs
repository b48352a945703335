//! Diagnosing a failed case: what kind of failure it was, the figures its
//! error message holds, and a first hypothesis chosen by symptom.
//!
//! The whole stderr log of the failing instance is scanned line by line
//! after the case (logs are on disk, so an OOM early in a huge log is not
//! missed and memory stays bounded: lines are capped, and only the first
//! matching exception is kept). Classification prefers the most specific
//! evidence: an OOM message over a CUDA setup error over a CUDA fault, then
//! what the process's end says (timeout, SIGKILL, exit code). Hints name
//! the evidence they rest on and never claim more than the figures show.

pub mod hints;
pub mod oom;

use std::io::{BufRead, BufReader, Read};
use std::path::Path;

use serde::{Deserialize, Serialize};

pub use oom::OomFigures;

use crate::vocabulary::{CaseStatus, Exit};

/// What kind of failure a case had.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FailureKind {
    GpuOom,
    /// The kernel's OOM killer killed a process of the case: certain, from
    /// the case's memory cgroup.
    HostOom,
    /// The workload asked for host memory and was refused, and said so
    /// (`MemoryError`, `DefaultCPUAllocator: can't allocate memory`,
    /// `std::bad_alloc`).
    HostAllocFailed,
    HostOomSuspected,
    /// The instance's supervisor (the workload's parent) was killed from
    /// outside oomgate before it reported the workload's exit, and the
    /// workload died with it: its SIGKILL is no OOM.
    SupervisorKilled,
    CudaSetup,
    CudaFault,
    Timeout,
    /// A pytest test failed (an assertion, an exception in the test), as
    /// oomgate's plugin reported it: no crash.
    TestFailed,
    /// A pytest test's setup or teardown failed (a fixture raised): pytest's
    /// `error`, as the plugin reported it.
    TestError,
    ExitNonzero,
}

impl FailureKind {
    pub fn as_str(self) -> &'static str {
        match self {
            FailureKind::GpuOom => "gpu-oom",
            FailureKind::HostOom => "host-oom",
            FailureKind::HostAllocFailed => "host-alloc-failed",
            FailureKind::HostOomSuspected => "host-oom-suspected",
            FailureKind::SupervisorKilled => "supervisor-killed",
            FailureKind::CudaSetup => "cuda-setup",
            FailureKind::CudaFault => "cuda-fault",
            FailureKind::Timeout => "timeout",
            FailureKind::TestFailed => "test-failed",
            FailureKind::TestError => "test-error",
            FailureKind::ExitNonzero => "exit-nonzero",
        }
    }
}

/// The diagnosis of one failed case.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Diagnosis {
    pub kind: FailureKind,
    /// The figures of a GPU OOM message, or of a failed host allocation
    /// (`backend` is then `host`).
    pub oom: Option<OomFigures>,
    /// The final exception as printed (all its lines, rank prefixes kept).
    pub exception: Option<String>,
    /// The rank that raised it, from a `[rankN]:` prefix.
    pub rank: Option<u32>,
    /// Ranks that printed an OOM, when several did.
    pub oom_ranks: Vec<u32>,
    /// First hypotheses, each with the evidence it rests on.
    pub hints: Vec<String>,
}

/// What a line of error output is evidence of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Evidence {
    Oom,
    HostAlloc,
    Setup,
    Fault,
}

impl Evidence {
    /// How strongly it explains a failure: the first line of the strongest
    /// kind wins (a GPU OOM over a failed host allocation over a CUDA setup
    /// error over a CUDA fault).
    fn strength(self) -> u8 {
        match self {
            Evidence::Oom => 4,
            Evidence::HostAlloc => 3,
            Evidence::Setup => 2,
            Evidence::Fault => 1,
        }
    }
}

/// The lines that say CUDA, or the framework's use of it, cannot work
/// here. The caching allocator's NVML assertion is one: on a MIG slice,
/// where NVML's device queries fail, expandable segments stop the
/// allocator before any memory is asked for.
const SETUP_MARKERS: [&str; 8] = [
    "no kernel image is available for execution on the device",
    "CUDA driver version is insufficient for CUDA runtime version",
    "The NVIDIA driver on your system is too old",
    "No CUDA GPUs are available",
    "Torch not compiled with CUDA enabled",
    "is/are busy or unavailable",
    "torch.cuda.is_available() is False",
    "NVML_SUCCESS == r INTERNAL ASSERT FAILED",
];

const FAULT_MARKERS: [&str; 5] = [
    "an illegal memory access was encountered",
    "CUDA error:",
    "NCCL error",
    "ncclUnhandledCudaError",
    "CUDA_ERROR_",
];

/// Longest line kept from a log; longer lines are cut (a progress bar that
/// never prints a newline must not grow memory).
const MAX_LINE: usize = 64 * 1024;
/// Most lines of an exception kept (JAX prints allocation statistics).
const MAX_EXCEPTION_LINES: usize = 40;

/// `[rank3]: text` → (Some(3), "text").
pub fn split_rank(line: &str) -> (Option<u32>, &str) {
    if let Some(rest) = line.strip_prefix("[rank") {
        if let Some(end) = rest.find("]:") {
            if let Ok(rank) = rest[..end].parse() {
                return (Some(rank), rest[end + 2..].trim_start());
            }
        }
    }
    (None, line)
}

/// What a line is evidence of, with the OOM figures when it is an OOM.
/// A warning (`UserWarning: CUDA error: …, falling back to CPU`) is not
/// evidence: the workload went on.
fn evidence(line: &str) -> Option<(Evidence, Option<OomFigures>)> {
    if let Some(figures) = oom::parse(line) {
        return (!is_warning(line, "out of memory")).then_some((Evidence::Oom, Some(figures)));
    }
    if let Some(figures) = oom::parse_host(line) {
        return (!is_warning(line, "alloc") && !is_warning(line, "MemoryError"))
            .then_some((Evidence::HostAlloc, Some(figures)));
    }
    if let Some(marker) = SETUP_MARKERS.iter().find(|m| line.contains(*m)) {
        return (!is_warning(line, marker)).then_some((Evidence::Setup, None));
    }
    // An NCCL or CUDA error that states an allocation failure is an OOM
    // (caught above); other CUDA errors are faults.
    if let Some(marker) = FAULT_MARKERS.iter().find(|m| line.contains(*m)) {
        return (!is_warning(line, marker)).then_some((Evidence::Fault, None));
    }
    None
}

/// Whether a `…Warning:` comes before the marker on the line.
fn is_warning(line: &str, marker: &str) -> bool {
    let lower = line.to_ascii_lowercase();
    let marker_at = lower
        .find(&marker.to_ascii_lowercase())
        .unwrap_or(lower.len());
    lower[..marker_at].contains("warning:") || lower[..marker_at].contains("warn ")
}

/// Skip the rest of an over-long line without keeping it.
fn skip_line(reader: &mut impl BufRead) {
    loop {
        let Ok(buffer) = reader.fill_buf() else {
            return;
        };
        if buffer.is_empty() {
            return;
        }
        match buffer.iter().position(|b| *b == b'\n') {
            Some(at) => {
                reader.consume(at + 1);
                return;
            }
            None => {
                let length = buffer.len();
                reader.consume(length);
            }
        }
    }
}

/// What scanning a log found: the strongest evidence and its exception.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Scan {
    evidence: Option<Evidence>,
    pub oom: Option<OomFigures>,
    pub exception: Option<String>,
    pub rank: Option<u32>,
    pub oom_ranks: Vec<u32>,
}

/// Scan error output, line by line, in one pass.
pub fn scan(reader: impl Read) -> Scan {
    let mut scan = Scan::default();
    let mut reader = BufReader::new(reader);
    let mut raw = Vec::new();
    // Lines after the chosen exception's first line that belong to it.
    let mut collecting = false;
    let mut collected = 0;
    loop {
        raw.clear();
        let Ok(read) = reader
            .by_ref()
            .take(MAX_LINE as u64)
            .read_until(b'\n', &mut raw)
        else {
            break;
        };
        if read == 0 {
            break;
        }
        let cut = raw.len() >= MAX_LINE && raw.last() != Some(&b'\n');
        if cut {
            skip_line(&mut reader);
        }
        let mut text = String::from_utf8_lossy(&raw);
        // What was skipped is out of view: no part of a secret is left at
        // the cut.
        if cut {
            text = crate::redact::active()
                .mask_cut(&text, crate::redact::Cut::END)
                .into();
        }
        let line = text.trim_end_matches(['\n', '\r']);
        let (rank, body) = split_rank(line);
        let found = evidence(body);
        if let Some((Evidence::Oom, _)) = &found {
            if let Some(rank) = rank {
                if !scan.oom_ranks.contains(&rank) {
                    scan.oom_ranks.push(rank);
                }
            }
        }
        // The first line of the strongest kind wins (OOM > setup > fault).
        let stronger = found.as_ref().is_some_and(|(kind, _)| {
            scan.evidence
                .is_none_or(|held| kind.strength() > held.strength())
        });
        if let (true, Some((kind, figures))) = (stronger, found) {
            scan.evidence = Some(kind);
            scan.oom = figures;
            scan.exception = Some(line.to_string());
            scan.rank = rank;
            collecting = true;
            collected = 0;
            continue;
        }
        if collecting {
            let same_rank = rank == scan.rank;
            if same_rank
                && (body.trim().is_empty()
                    || collected >= MAX_EXCEPTION_LINES
                    || body.starts_with("Traceback")
                    || looks_like_log(body))
            {
                collecting = false;
            } else if same_rank {
                if let Some(exception) = scan.exception.as_mut() {
                    exception.push('\n');
                    exception.push_str(line);
                }
                collected += 1;
            }
        }
    }
    scan
}

/// A line of ordinary logging (timestamps, levels, progress), which ends
/// an exception's block rather than continuing it.
fn looks_like_log(body: &str) -> bool {
    let first = body.split_whitespace().next().unwrap_or_default();
    first.starts_with(|c: char| c.is_ascii_digit())
        || [
            "INFO", "WARNING", "WARN", "DEBUG", "ERROR", "wandb:", "W1", "I1", "E1",
        ]
        .iter()
        .any(|p| first.starts_with(p))
}

/// The most of a failed run's stderr the diagnosis reads: its last 32 MiB
/// (well under a second to scan).
pub const SCAN_LIMIT: u64 = 32 * 1024 * 1024;

/// Classify a case that did not pass. `None` for a case that passed, or
/// that failed a check (budget, regression): those carry their own message.
pub fn diagnose(
    status: CaseStatus,
    exit: Option<Exit>,
    stopped_by_oomgate: bool,
    check_failed: bool,
    scan: &Scan,
    host_oom_kills: Option<u64>,
) -> Option<Diagnosis> {
    // A budget or baseline failure is its own explanation when oomgate
    // stopped the case or the workload itself succeeded: a recovered OOM in
    // its log is not the cause.
    let exited_well = exit.is_some_and(Exit::success);
    if matches!(
        status,
        CaseStatus::Passed | CaseStatus::Skipped | CaseStatus::Interrupted
    ) || (check_failed && (stopped_by_oomgate || exited_well))
    {
        return None;
    }
    let kind = match scan.evidence {
        Some(Evidence::Oom) => FailureKind::GpuOom,
        // The kernel's count outranks anything a workload printed after
        // one of its processes was killed.
        _ if host_oom_kills.is_some_and(|kills| kills > 0) => FailureKind::HostOom,
        Some(Evidence::HostAlloc) => FailureKind::HostAllocFailed,
        Some(Evidence::Setup) => FailureKind::CudaSetup,
        Some(Evidence::Fault) => FailureKind::CudaFault,
        None if status == CaseStatus::TimedOut => FailureKind::Timeout,
        None if !stopped_by_oomgate
            && matches!(exit, Some(Exit::Signal(9)) | Some(Exit::Code(137))) =>
        {
            FailureKind::HostOomSuspected
        }
        None if status == CaseStatus::Error || check_failed => return None,
        None => FailureKind::ExitNonzero,
    };
    Some(Diagnosis {
        kind,
        oom: scan.oom.clone(),
        exception: scan.exception.clone(),
        rank: scan.rank,
        oom_ranks: scan.oom_ranks.clone(),
        hints: Vec::new(),
    })
}

/// Scan one run's error output: only this run's (repeats and soak runs
/// append to the same log, from `from_offset` on), and of it only the last
/// `SCAN_LIMIT` bytes: the failure is at the end, and gigabytes of output
/// must not hold oomgate for minutes. A log that cannot be read has no
/// evidence.
pub fn scan_log(stderr_log: &Path, from_offset: u64) -> Scan {
    crate::files::case::open_read(stderr_log)
        .and_then(|mut file| {
            use std::io::Seek;
            let length = file.metadata()?.len();
            let start = from_offset.max(length.saturating_sub(SCAN_LIMIT));
            file.seek(std::io::SeekFrom::Start(start))?;
            Ok(scan(std::io::Read::take(file, SCAN_LIMIT)))
        })
        .unwrap_or_default()
}

/// The diagnosis of a failure whose supervisor was killed from outside
/// oomgate (neither by oomgate stopping the case nor after reporting the
/// workload's exit): the workload died with it, by its parent-death
/// signal, so the exit oomgate saw is the supervisor's, and a SIGKILL
/// says nothing of memory. What the log or the cgroup showed (an OOM
/// message, a counted OOM kill, a CUDA error) still explains it first.
pub fn with_supervisor_killed(diagnosis: Diagnosis) -> Diagnosis {
    match diagnosis.kind {
        FailureKind::HostOomSuspected | FailureKind::ExitNonzero => Diagnosis {
            kind: FailureKind::SupervisorKilled,
            ..diagnosis
        },
        _ => diagnosis,
    }
}

/// The diagnosis of a pytest case that ended with pytest's "tests failed"
/// (exit 1) and nothing worse in its output: its test failed (`errored`:
/// in its setup or teardown), in pytest's words (`message`), which the
/// plugin reported from inside the test's process. An OOM, a kill or a
/// CUDA error it printed still explains it.
pub fn with_test_failed(diagnosis: Diagnosis, message: Option<&str>, errored: bool) -> Diagnosis {
    match diagnosis.kind {
        FailureKind::ExitNonzero => Diagnosis {
            kind: match errored {
                true => FailureKind::TestError,
                false => FailureKind::TestFailed,
            },
            exception: diagnosis.exception.or_else(|| message.map(str::to_string)),
            ..diagnosis
        },
        _ => diagnosis,
    }
}

/// Who refused a host allocation, in words.
fn host_allocator(framework: &str) -> &'static str {
    match framework {
        "pytorch" => "PyTorch's DefaultCPUAllocator",
        "numpy" => "NumPy",
        "python" => "Python MemoryError",
        "c++" => "std::bad_alloc",
        "rust" => "Rust's allocator",
        "os" => "ENOMEM from the kernel",
        _ => "the allocator",
    }
}

#[cfg(test)]
mod tests;

/// The line a reader sees first for a diagnosed failure: the kind and the
/// figures, e.g. `gpu-oom: tried to allocate 2.00 GiB on GPU 0 (NVIDIA
/// H200, 139.8 GiB total, 1.19 GiB free); torch 2.5.1; batch=64 seq=4096`.
/// `None` when the kind adds nothing to the exit's own message.
pub fn headline(
    diagnosis: &Diagnosis,
    step: Option<&crate::probe::StepSeen>,
    device_names: &[String],
    torch: Option<&str>,
    params: &indexmap::IndexMap<String, String>,
) -> Option<String> {
    use crate::units::Bytes;
    let mut parts = Vec::new();
    // The step the workload's probe reported last: where it broke.
    let on_rank = step
        .and_then(|s| s.rank)
        .map_or(String::new(), |rank| format!(" on rank {rank}"));
    let at_step = || match step.map(|s| (s.step, s.phase.as_ref())) {
        Some((Some(n), Some(phase))) => format!(" at step {n} ({phase}){on_rank}"),
        Some((Some(n), None)) => format!(" at step {n}{on_rank}"),
        Some((None, Some(phase))) => format!(" in {phase}{on_rank}"),
        _ => String::new(),
    };
    match diagnosis.kind {
        FailureKind::GpuOom => {
            let mut head = format!("gpu-oom{}", at_step());
            if let Some(rank) = diagnosis.rank {
                head.push_str(&format!(" on rank {rank}"));
                if diagnosis.oom_ranks.len() > 1 {
                    let ranks: Vec<String> =
                        diagnosis.oom_ranks.iter().map(u32::to_string).collect();
                    head.push_str(&format!(" (ranks {} ran out)", ranks.join(", ")));
                }
            }
            let oom = diagnosis.oom.clone().unwrap_or_default();
            let mut what = match oom.requested_bytes {
                Some(bytes) => format!("tried to allocate {}", Bytes(bytes)),
                None => format!("{} allocation failed", oom.framework),
            };
            if let Some(shape) = &oom.tensor_shape {
                what.push_str(&format!(" (tensor of shape {shape})"));
            }
            if let Some(index) = oom.device_index {
                let mut device = Vec::new();
                if let Some(name) = device_names.get(index as usize) {
                    device.push(name.clone());
                }
                if let Some(total) = oom.total_bytes {
                    device.push(format!("{} total", Bytes(total)));
                }
                if let Some(free) = oom.free_bytes {
                    device.push(format!("{} free", Bytes(free)));
                }
                what.push_str(&format!(" on GPU {index}"));
                if !device.is_empty() {
                    what.push_str(&format!(" ({})", device.join(", ")));
                }
            }
            parts.push(format!("{head}: {what}"));
        }
        FailureKind::HostOom => parts.push(format!(
            "host-oom{}: the kernel's OOM killer killed a process of the case",
            at_step()
        )),
        FailureKind::HostAllocFailed => {
            let oom = diagnosis.oom.clone().unwrap_or_default();
            let what = match oom.requested_bytes {
                Some(bytes) => format!("tried to allocate {} of host memory", Bytes(bytes)),
                None => "a host memory allocation failed".to_string(),
            };
            parts.push(format!(
                "host-alloc-failed{}: {what} ({})",
                at_step(),
                host_allocator(&oom.framework)
            ));
        }
        FailureKind::HostOomSuspected => parts.push(format!(
            "host-oom-suspected{}: killed by SIGKILL with no error message",
            at_step()
        )),
        FailureKind::SupervisorKilled => parts.push(format!(
            "supervisor-killed{}: oomgate's supervisor of the workload (its parent process) was killed from outside oomgate, and the workload with it",
            at_step()
        )),
        FailureKind::CudaSetup | FailureKind::CudaFault => {
            let first = diagnosis
                .exception
                .as_deref()
                .unwrap_or_default()
                .lines()
                .next()
                .unwrap_or_default();
            let (_, first) = split_rank(first);
            let first: String = first.chars().take(200).collect();
            parts.push(format!("{}: {first}", diagnosis.kind.as_str()));
        }
        FailureKind::TestFailed | FailureKind::TestError => {
            let message = diagnosis.exception.as_deref().unwrap_or_default();
            let first: String = message.lines().next().unwrap_or_default().chars().take(200).collect();
            let kind = diagnosis.kind.as_str();
            parts.push(match (first.is_empty(), diagnosis.kind) {
                (true, FailureKind::TestError) => format!("{kind}: the test's setup or teardown failed"),
                (true, _) => format!("{kind}: the test failed"),
                (false, _) => format!("{kind}: {first}"),
            });
        }
        FailureKind::Timeout | FailureKind::ExitNonzero => return None,
    }
    // The framework's version, only where the failure is the framework's:
    // a kernel kill of a script that never imports torch is not torch's.
    let torch = torch.filter(|_| {
        diagnosis
            .oom
            .as_ref()
            .is_some_and(|o| o.framework.starts_with("pytorch"))
            || diagnosis
                .exception
                .as_deref()
                .is_some_and(|e| e.contains("torch"))
    });
    if let Some(torch) = torch {
        parts.push(format!("torch {torch}"));
    }
    if !params.is_empty() {
        parts.push(
            params
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(" "),
        );
    }
    Some(parts.join("; "))
}

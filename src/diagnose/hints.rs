//! First hypotheses for a failed case, chosen by symptom. Each hint names
//! the evidence it rests on; none claims more than the figures show, and
//! none suggests `torch.cuda.empty_cache()` as a fix (it frees only cached,
//! unreferenced blocks, never tensors the program still holds).

use super::{Diagnosis, FailureKind};
use crate::units::Bytes;

const GIB: u64 = 1024 * 1024 * 1024;

/// Hints from one case's own evidence.
pub fn case_hints(diagnosis: &Diagnosis, host_peak: Option<u64>) -> Vec<String> {
    let mut hints = Vec::new();
    match diagnosis.kind {
        FailureKind::GpuOom => {
            if let Some(oom) = &diagnosis.oom {
                // This process's own memory: as the message states it, else
                // what PyTorch allocated plus what it reserved on top.
                let own = oom.process_bytes.or_else(|| {
                    let reserved = oom.reserved_bytes.or_else(|| {
                        oom.reserved_unallocated_bytes.zip(oom.allocated_bytes).map(|(r, a)| r + a)
                    });
                    reserved.or(oom.allocated_bytes)
                });
                if let (Some(total), Some(free), Some(own)) = (oom.total_bytes, oom.free_bytes, own) {
                    if own < total / 2 && free < total / 10 {
                        // Without "this process has …", one of the listed
                        // processes may be this one (containers list it as a
                        // plain `Process N`): name them only when it is known.
                        let listed = if oom.process_bytes.is_some() { oom.other_processes.as_slice() } else { &[] };
                        let others: Vec<String> =
                            listed.iter().map(|(pid, bytes)| format!("process {pid} {}", Bytes(*bytes))).collect();
                        let who = if others.is_empty() {
                            "other processes or memory outside PyTorch".to_string()
                        } else {
                            format!("other processes ({})", others.join(", "))
                        };
                        hints.push(format!(
                            "The device was nearly full ({} free of {}) while this process held {}: {who} held the rest. Check what else runs on the GPU (oomgate gpus, foreign processes) before shrinking the workload.",
                            Bytes(free),
                            Bytes(total),
                            Bytes(own)
                        ));
                    }
                }
                if oom.framework == "jax" {
                    hints.push(
                        "JAX (XLA) preallocates 75% of each GPU it sees when it starts (XLA_PYTHON_CLIENT_PREALLOCATE, XLA_PYTHON_CLIENT_MEM_FRACTION): another process on the GPU, or a fraction set too low, leaves the pool short. XLA_PYTHON_CLIENT_PREALLOCATE=false allocates on demand, so NVML's figure shows the use rather than the pool; XLA_PYTHON_CLIENT_ALLOCATOR=platform frees at once (slow: to find the true peak). The environment records these variables for every case."
                            .to_string(),
                    );
                }
                if let (Some(unallocated), Some(allocated)) = (oom.reserved_unallocated_bytes, oom.allocated_bytes) {
                    if unallocated >= GIB && unallocated * 4 >= allocated {
                        hints.push(format!(
                            "{} is reserved by PyTorch but unallocated, against {} allocated: inspect torch.cuda.memory_summary() / memory_stats() before tuning the allocator — a gap alone does not prove fragmentation. As a next step only: PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True, or max_split_size_mb (ignored by cudaMallocAsync).",
                            Bytes(unallocated),
                            Bytes(allocated)
                        ));
                    }
                }
            }
        }
        FailureKind::HostOom => hints.push(format!(
            "The kernel's OOM killer killed a process of this case (counted in its memory cgroup), with a host peak of {}: the host or the container's memory limit is too small for it — compare the peak with the limit (the charged peak in the details includes page cache), or lower the workload's host memory (data-loader workers, pinned memory, prefetch).",
            crate::units::bytes_or_unknown(host_peak)
        )),
        FailureKind::HostAllocFailed => {
            let requested = diagnosis.oom.as_ref().and_then(|o| o.requested_bytes);
            let machine = host_memory_total();
            let hint = match (requested, machine) {
                (Some(asked), Some(total)) if asked > total => format!(
                    "The workload asked for {} at once, more than this machine's {} of memory: a size or shape computed wrong (a batch or sequence length multiplied in twice, a wrong dtype) is likelier than a small machine.",
                    Bytes(asked),
                    Bytes(total)
                ),
                _ => format!(
                    "The workload asked for host memory and was refused (host peak {}): a container memory limit, `ulimit -v`, or the kernel's overcommit rules (vm.overcommit_memory) refused it — compare the request with the limit, or lower the workload's host memory (data-loader workers, pinned memory, prefetch).",
                    crate::units::bytes_or_unknown(host_peak)
                ),
            };
            hints.push(hint);
        }
        FailureKind::HostOomSuspected => hints.push(format!(
            "Killed by SIGKILL with no error message, not by oomgate, with a host peak of {}: check the kernel log (dmesg) for the OOM killer, or the container's memory limit.",
            crate::units::bytes_or_unknown(host_peak)
        )),
        FailureKind::SupervisorKilled => hints.push(
            "The workload's parent process, oomgate's supervisor, was killed by a signal oomgate did not send: by the workload itself (`kill $PPID`, `pkill` of a pattern that matches `oomgate`) or by another process on the machine. A workload must not signal its parent; the supervisor ignores the signals a process sends its own group, never SIGKILL."
                .to_string(),
        ),
        FailureKind::CudaSetup => {
            let text = diagnosis.exception.as_deref().unwrap_or_default();
            let hint = if text.contains("NVML_SUCCESS == r") {
                "PyTorch's caching allocator could not read the GPU through NVML (its `NVML_SUCCESS == r` assertion), as happens on a MIG slice with expandable segments on: set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:False for this case (as vLLM did for its MIG runners), or run it on a whole GPU. No memory was short."
            } else if text.contains("no kernel image") {
                "The framework has no kernels for this GPU's architecture: compare its build (torch.version.cuda, TORCH_CUDA_ARCH_LIST) with the GPU's compute capability."
            } else if text.contains("too old") || text.contains("insufficient") {
                "The NVIDIA driver is older than the CUDA runtime the framework was built with: upgrade the driver or use a build for an older CUDA."
            } else if text.contains("busy or unavailable") {
                "The GPU is busy or unavailable: check its compute mode (exclusive-process) and what else runs on it."
            } else {
                "CUDA is not usable from the workload: check CUDA_VISIBLE_DEVICES, the driver, and that the framework build has CUDA."
            };
            hints.push(hint.to_string());
        }
        FailureKind::CudaFault => hints.push(
            "A CUDA fault is a bug, not a lack of memory: rerun with CUDA_LAUNCH_BLOCKING=1 to find the failing kernel."
                .to_string(),
        ),
        FailureKind::Timeout
        | FailureKind::TestFailed
        | FailureKind::TestError
        | FailureKind::ExitNonzero => {}
    }
    hints
}

/// The machine's memory (`MemTotal`), when /proc says.
fn host_memory_total() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

/// A case of a matrix, as the cross-case hint needs it.
pub struct MatrixCase<'a> {
    pub params: &'a indexmap::IndexMap<String, String>,
    /// The expanded command: cases of different `[[case]]` entries that
    /// happen to share param names are not compared.
    pub command: &'a [String],
    pub gpu_oom: bool,
    pub passed: bool,
}

/// "Only the largest values fail": for each matrix key, among cases that
/// differ only in that key, the ones that ran out of GPU memory are exactly
/// those with the largest values. Returns (case index, hint) pairs.
pub fn largest_values_fail(cases: &[MatrixCase<'_>]) -> Vec<(usize, String)> {
    let mut hints = Vec::new();
    let Some(first) = cases.first() else {
        return hints;
    };
    for key in first.params.keys() {
        // Group by every other param.
        type Group<'c> = (Vec<(&'c String, &'c String)>, Vec<String>, Vec<usize>);
        let mut groups: Vec<Group<'_>> = Vec::new();
        for (i, case) in cases.iter().enumerate() {
            let Some(value) = case.params.get(key).filter(|v| !v.is_empty()) else {
                continue;
            };
            let rest: Vec<(&String, &String)> =
                case.params.iter().filter(|(k, _)| *k != key).collect();
            // The command with this value's own arguments blanked out
            // (`--mib 100`, `--mib=100`), other arguments kept whole.
            let shape: Vec<String> = case
                .command
                .iter()
                .map(|arg| {
                    if arg == value || arg.ends_with(&format!("={value}")) {
                        "{}".to_string()
                    } else {
                        arg.clone()
                    }
                })
                .collect();
            match groups
                .iter_mut()
                .find(|(r, s, _)| *r == rest && *s == shape)
            {
                Some((_, _, members)) => members.push(i),
                None => groups.push((rest, shape, vec![i])),
            }
        }
        for (_, _, members) in groups {
            // Only a clean split says something: every case either passed or
            // ran out of GPU memory (a timeout or a budget failure among them
            // would make "smaller ones passed" untrue).
            if members
                .iter()
                .any(|&i| !cases[i].passed && !cases[i].gpu_oom)
            {
                continue;
            }
            let mut valued: Vec<(f64, usize)> = members
                .iter()
                .filter_map(|&i| {
                    cases[i]
                        .params
                        .get(key)
                        .and_then(|v| v.parse::<f64>().ok())
                        .map(|v| (v, i))
                })
                .collect();
            if valued.len() < 2 {
                continue;
            }
            valued.sort_by(|a, b| a.0.total_cmp(&b.0));
            let failing = valued.iter().filter(|(_, i)| cases[*i].gpu_oom).count();
            let top_fail = valued
                .iter()
                .rev()
                .take(failing)
                .all(|(_, i)| cases[*i].gpu_oom);
            if failing == 0 || failing == valued.len() || !top_fail {
                continue;
            }
            let written = |i: usize| cases[i].params.get(key).cloned().unwrap_or_default();
            let passed_max = written(valued[valued.len() - failing - 1].1);
            let failed: Vec<String> = valued
                .iter()
                .rev()
                .take(failing)
                .map(|(_, i)| written(*i))
                .collect();
            for (_, i) in valued.iter().rev().take(failing) {
                hints.push((
                    *i,
                    format!(
                        "Only the largest {key} values ran out of GPU memory ({}) while {key} = {passed_max} passed: record the dimensions at the failure, and consider an explicit size limit or a separate path for the largest inputs.",
                        failed.join(", ")
                    ),
                ));
            }
        }
    }
    hints
}

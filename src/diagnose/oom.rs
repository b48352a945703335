//! Parsing the figures out of an out-of-memory message.
//!
//! One function per message family (see `shared` OOM texts in the docs):
//! PyTorch's current caching-allocator message (and its XPU/MLU and
//! device-generic variants, and 2.1's `capacty` spelling), PyTorch 2.0's
//! legacy message, JAX/XLA, TensorFlow. Each reads what is there and leaves
//! the rest `None`: a message from an unknown build still classifies, with
//! fewer figures. Parsing is a left-to-right scan with `find`, so any input
//! takes linear time and no input can panic.

use serde::{Deserialize, Serialize};

use crate::units::Bytes;

/// Everything an OOM message says, in bytes.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OomFigures {
    /// `pytorch`, `pytorch-legacy`, `jax`, `tensorflow`, `cuda-runtime`.
    pub framework: String,
    /// `CUDA`, `XPU`, `MLU`, or empty for the device-generic message.
    pub backend: Option<String>,
    pub requested_bytes: Option<u64>,
    pub device_index: Option<u32>,
    pub total_bytes: Option<u64>,
    pub free_bytes: Option<u64>,
    /// "this process has X memory in use" (including non-PyTorch memory).
    pub process_bytes: Option<u64>,
    pub allocated_bytes: Option<u64>,
    pub reserved_unallocated_bytes: Option<u64>,
    /// PyTorch 2.0's "reserved in total by PyTorch".
    pub reserved_bytes: Option<u64>,
    pub private_pool_bytes: Option<u64>,
    /// Other processes on the device the message lists: (pid, bytes).
    pub other_processes: Vec<(u32, u64)>,
    /// TensorFlow: the shape of the tensor that could not be allocated.
    pub tensor_shape: Option<String>,
}

/// The figures of a GPU OOM line (already stripped of any rank prefix), or
/// `None` when the line is not one of the known OOM messages.
pub fn parse(line: &str) -> Option<OomFigures> {
    parse_pytorch(line)
        .or_else(|| parse_jax(line))
        .or_else(|| parse_tensorflow(line))
        .or_else(|| parse_runtime(line))
}

/// The figures of a failed host (CPU) allocation a workload reported, or
/// `None`: PyTorch's `DefaultCPUAllocator`, NumPy's `Unable to allocate`,
/// Python's `MemoryError`, C++'s `std::bad_alloc`, Rust's `memory
/// allocation of N bytes failed`, ENOMEM from a system call (`[Errno 12]
/// Cannot allocate memory`). `backend` is `host`; `framework` names
/// which. The process asked and was refused (a container or `ulimit -v`
/// limit, overcommit rules, or an absurd size): the kernel killed nothing.
pub fn parse_host(line: &str) -> Option<OomFigures> {
    let figures = |framework: &str, requested_bytes: Option<u64>| OomFigures {
        framework: framework.to_string(),
        backend: Some("host".to_string()),
        requested_bytes,
        ..OomFigures::default()
    };
    if line.contains("DefaultCPUAllocator") {
        let requested = line
            .find("you tried to allocate ")
            .and_then(|at| leading_integer(&line[at + "you tried to allocate ".len()..]));
        return Some(figures("pytorch", requested));
    }
    if line.contains("_ArrayMemoryError")
        || line.contains("Unable to allocate ") && line.contains(" for an array")
    {
        return Some(figures("numpy", size_after(line, "Unable to allocate ")));
    }
    let trimmed = line.trim_start();
    if trimmed == "MemoryError" || trimmed.starts_with("MemoryError:") {
        return Some(figures("python", None));
    }
    if line.contains("std::bad_alloc") {
        return Some(figures("c++", None));
    }
    if let Some(rest) = trimmed.strip_prefix("memory allocation of ") {
        if rest.contains(" bytes failed") {
            return Some(figures("rust", leading_integer(rest)));
        }
    }
    // ENOMEM from a system call (fork, mmap), as Python and libc print it.
    if line.contains("[Errno 12] Cannot allocate memory")
        || line.contains(": Cannot allocate memory (os error 12)")
    {
        return Some(figures("os", None));
    }
    None
}

/// The integer at the start of `text` (`1099511627776 bytes`).
fn leading_integer(text: &str) -> Option<u64> {
    let end = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    text[..end].parse().ok()
}

/// Units as frameworks print them, longest first so `MiB` wins over `B`.
const UNITS: [&str; 11] = [
    "KiB", "MiB", "GiB", "TiB", "PiB", "KB", "MB", "GB", "TB", "PB", "B",
];

/// A size as PyTorch prints it (`20.00 MiB`, `3.00 B`) at the start of
/// `text`. The unit is matched, not read to the end of the word: MLU builds
/// print `1.00 MiBis free`.
fn size_at(text: &str) -> Option<u64> {
    let text = text.trim_start();
    let number_end = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    if number_end == 0 {
        return None;
    }
    let rest = text[number_end..].trim_start();
    let unit = UNITS.iter().find(|u| rest.starts_with(**u))?;
    format!("{} {unit}", &text[..number_end])
        .parse::<Bytes>()
        .ok()
        .map(Bytes::get)
}

/// The size right after `marker` in `line`.
fn size_after(line: &str, marker: &str) -> Option<u64> {
    let at = line.find(marker)?;
    size_at(&line[at + marker.len()..])
}

/// The size right before `marker` (`… and 130.35 MiB already allocated`):
/// the last two words before it.
fn size_before(line: &str, marker: &str) -> Option<u64> {
    let at = line.find(marker)?;
    let mut words = line[..at].split_whitespace().rev();
    let unit = words.next()?;
    let number = words.next()?.trim_start_matches(['(', ';', ',']);
    size_at(&format!("{number} {unit}"))
}

fn number_after(line: &str, marker: &str) -> Option<u32> {
    let at = line.find(marker)?;
    let rest = line[at + marker.len()..].trim_start();
    let end = rest
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(rest.len());
    rest[..end].parse().ok()
}

fn parse_pytorch(line: &str) -> Option<OomFigures> {
    // `CUDA out of memory. Tried to allocate`, `XPU out of memory. …`,
    // `MLU …`, or the device-generic `Out of memory. Tried to allocate`.
    let at = line
        .find("out of memory. Tried to allocate")
        .or_else(|| line.find("Out of memory. Tried to allocate"))?;
    let backend = line[..at]
        .trim_end()
        .rsplit(|c: char| !c.is_ascii_alphanumeric())
        .next()
        .filter(|b| matches!(*b, "CUDA" | "XPU" | "MLU"));
    let mut figures = OomFigures {
        framework: "pytorch".to_string(),
        backend: backend.map(str::to_string),
        requested_bytes: size_after(line, "Tried to allocate"),
        ..OomFigures::default()
    };
    if line.contains("total capacity;") || line.contains("already allocated") {
        // PyTorch 2.0: (GPU 0; 7.93 GiB total capacity; 130.35 MiB already allocated; ...)
        figures.framework = "pytorch-legacy".to_string();
        figures.device_index = number_after(line, "(GPU");
        figures.total_bytes = size_before(line, "total capacity");
        figures.allocated_bytes = size_before(line, "already allocated");
        figures.free_bytes = size_before(line, "free;").or_else(|| size_before(line, "free)"));
        figures.reserved_bytes = size_before(line, "reserved in total by PyTorch");
        return Some(figures);
    }
    // Current: "GPU 0 has a total capacity of 79.25 GiB of which 3.19 MiB is free."
    // (2.1 spelled it "capacty"; the index can be missing: "GPU  has".)
    // The device named after the request, not any "GPU n" a log prefix has.
    figures.device_index = number_after(&line[at..], "GPU ");
    figures.total_bytes = size_after(line, "has a total capacity of")
        .or_else(|| size_after(line, "has a total capacty of"));
    figures.free_bytes = size_after(line, " of which");
    figures.process_bytes = size_after(line, "this process has");
    figures.allocated_bytes = size_after(line, "Of the allocated memory");
    figures.reserved_unallocated_bytes =
        size_before(line, "is reserved by PyTorch but unallocated");
    figures.private_pool_bytes = size_after(line, "allocated by PyTorch, with");
    // "Process 4242 has 61.00 GiB memory in use." — `has` right after the
    // pid, so each entry is read in place (linear in the line).
    let mut rest = line;
    while let Some(found) = rest.find("Process ") {
        rest = &rest[found + "Process ".len()..];
        let digits = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        let Ok(pid) = rest[..digits].parse::<u32>() else {
            continue;
        };
        if let Some(after) = rest[digits..].strip_prefix(" has ") {
            if let Some(bytes) = size_at(after) {
                figures.other_processes.push((pid, bytes));
            }
        }
    }
    Some(figures)
}

fn parse_jax(line: &str) -> Option<OomFigures> {
    let at = line.find("Out of memory while trying to allocate")?;
    if !line.contains("RESOURCE_EXHAUSTED") && !line.contains("Resource exhausted") {
        return None;
    }
    let rest = &line[at + "Out of memory while trying to allocate".len()..];
    let requested = rest
        .split_whitespace()
        .next()
        .and_then(|n| n.parse::<u64>().ok());
    Some(OomFigures {
        framework: "jax".to_string(),
        requested_bytes: requested,
        ..OomFigures::default()
    })
}

fn parse_tensorflow(line: &str) -> Option<OomFigures> {
    let at = line.find("OOM when allocating tensor")?;
    let rest = &line[at..];
    let shape = rest.find("shape[").and_then(|s| {
        let tail = &rest[s + "shape".len()..];
        tail.find(']').map(|e| tail[..=e].to_string())
    });
    Some(OomFigures {
        framework: "tensorflow".to_string(),
        device_index: number_after(rest, "device:GPU:"),
        tensor_shape: shape,
        ..OomFigures::default()
    })
}

/// Allocation failures of the CUDA runtime and libraries: OOM, without
/// allocator detail.
fn parse_runtime(line: &str) -> Option<OomFigures> {
    const MARKERS: [&str; 8] = [
        "CUBLAS_STATUS_ALLOC_FAILED",
        "CUDNN_STATUS_ALLOC_FAILED",
        "cudaErrorMemoryAllocation",
        "CUDA error: out of memory",
        "CUDA_ERROR_OUT_OF_MEMORY",
        // NCCL stating an allocation failure.
        "Cuda failure 'out of memory'",
        "Failed to CUDA calloc",
        "CUDA driver error: out of memory",
    ];
    MARKERS
        .iter()
        .any(|m| line.contains(m))
        .then(|| OomFigures {
            framework: "cuda-runtime".to_string(),
            ..OomFigures::default()
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1024 * 1024;
    const GIB: u64 = 1024 * MIB;

    fn gib(x: f64) -> u64 {
        (x * GIB as f64) as u64
    }

    #[test]
    fn sizes_as_pytorch_prints_them() {
        assert_eq!(size_at("20.00 MiB. GPU"), Some(20 * MIB));
        assert_eq!(size_at("3.00 B"), Some(3));
        assert_eq!(size_at("512.00 KiB"), Some(512 * 1024));
        assert_eq!(size_at("15.51 GiB"), Some(gib(15.51)));
        assert_eq!(size_at("GiB"), None);
        assert_eq!(size_at("12"), None);
    }
}

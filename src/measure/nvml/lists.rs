//! A device's processes, from every list the driver keeps: compute,
//! graphics (EGL/Vulkan renderers) and MPS compute (the clients of an MPS
//! server), merged by pid — a process in two lists is one process, with
//! the larger of its figures.
//!
//! Drivers hand the lists out three ways, decided once at open
//! ([`Listing::detect`], by the symbols the library exports, as nvitop
//! does):
//! - `nvmlDeviceGetRunningProcessDetailList` (R550 and later): versioned,
//!   one call per list;
//! - the `_v3` calls with 24-byte entries (`nvmlProcessInfo_t`);
//! - the same `_v3` calls on early R535 drivers (535.43 up to 535.98),
//!   which write 32-byte entries with no version bump. Such a library
//!   exports `nvmlDeviceGetConfComputeMemSizeInfo` and not the detail
//!   list; later ones export both, and are read by the detail list.
//!
//! Whatever the layout, the buffer handed to a `_v3` call has room for
//! 32 bytes an entry, so a driver writing wider entries than detected
//! still writes inside it. Every read reuses one buffer: allocation-free
//! once it has grown to the number of processes.

use std::ffi::c_uint;

use nvml_wrapper::error::NvmlError;
use nvml_wrapper_sys::bindings::{
    NvmlLib, nvmlDevice_t, nvmlProcessDetail_v1_t, nvmlProcessDetailList_v1_t, nvmlProcessInfo_t,
};
use serde::{Deserialize, Serialize};

use super::{
    GpuProcess, NOT_AVAILABLE, NVML_ERROR_INSUFFICIENT_SIZE, NVML_ERROR_NOT_SUPPORTED,
    NVML_SUCCESS, code_error,
};
/// The widest entry any driver writes (`nvmlProcessDetail_v1_t`, R535's
/// `nvmlProcessInfo_v3_t`).
const WIDEST_ENTRY: usize = 32;
/// `NVML_STRUCT_VERSION(ProcessDetailList, 1)` from nvml.h.
const DETAIL_LIST_V1: c_uint =
    (std::mem::size_of::<nvmlProcessDetailList_v1_t>() as c_uint) | (1 << 24);

/// `nvmlProcessMode_t`, with the `_v3` call of each list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Compute = 0,
    Graphics = 1,
    Mps = 2,
}

const MODES: [Mode; 3] = [Mode::Compute, Mode::Graphics, Mode::Mps];

/// How this driver hands out process lists (recorded in results.json).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Listing {
    /// `nvmlDeviceGetRunningProcessDetailList`.
    DetailList,
    /// The `_v3` calls, 24-byte entries.
    V3,
    /// The `_v3` calls of an early R535 driver, 32-byte entries.
    V3Wide,
    /// Read back from a newer oomgate's results; never detected.
    #[serde(other)]
    Unknown,
}

impl Listing {
    /// From the symbols the library exports.
    pub fn detect(lib: &NvmlLib) -> Listing {
        if lib.nvmlDeviceGetRunningProcessDetailList.is_ok() {
            Listing::DetailList
        } else if lib.nvmlDeviceGetConfComputeMemSizeInfo.is_ok() {
            Listing::V3Wide
        } else {
            Listing::V3
        }
    }

    /// The bytes of one `_v3` entry.
    fn entry_bytes(self) -> usize {
        match self {
            Listing::V3Wide | Listing::Unknown => WIDEST_ENTRY,
            Listing::DetailList | Listing::V3 => std::mem::size_of::<nvmlProcessInfo_t>(),
        }
    }
}

/// Read every list of a device into `out` (cleared first), merged by pid.
/// The compute list must be readable; a graphics or MPS list the driver
/// lacks, or refuses on this GPU for any reason but the device's loss
/// (a compute-only GPU, MPS not running, no permission), is left out.
pub fn read(
    lib: &NvmlLib,
    listing: Listing,
    device: nvmlDevice_t,
    buffer: &mut Vec<u64>,
    out: &mut Vec<GpuProcess>,
) -> Result<(), NvmlError> {
    out.clear();
    for mode in MODES {
        let read = match listing {
            Listing::DetailList => detail_list(lib, device, mode, buffer, out),
            Listing::V3 | Listing::V3Wide | Listing::Unknown => {
                v3_list(lib, listing, device, mode, buffer, out)
            }
        };
        match read {
            Ok(()) => {}
            // Only the device's loss is the device's; any other refusal of
            // a supplementary list is that list's.
            Err(e) if mode != Mode::Compute && !matches!(e, NvmlError::GpuLost) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Add a process to the merged list: one entry a pid, its known figure
/// the larger of the lists' (NVML reports a process's whole use in each
/// list it is in; unavailable only when no list knows it).
fn merge(out: &mut Vec<GpuProcess>, pid: u32, used: u64) {
    let used = (used != NOT_AVAILABLE).then_some(used);
    match out.iter_mut().find(|p| p.pid == pid) {
        Some(known) => {
            known.used_bytes = match (known.used_bytes, used) {
                (Some(a), Some(b)) => Some(a.max(b)),
                (a, b) => a.or(b),
            }
        }
        None => out.push(GpuProcess {
            pid,
            used_bytes: used,
        }),
    }
}

/// Entries the buffer has room for at the widest layout; grows it to
/// `entries` first if asked.
fn room(buffer: &mut Vec<u64>, entries: Option<usize>) -> usize {
    if let Some(entries) = entries {
        let words = entries.saturating_add(16) * WIDEST_ENTRY / 8;
        if buffer.len() < words {
            buffer.resize(words, 0);
        }
    }
    buffer.len() * 8 / WIDEST_ENTRY
}

fn v3_list(
    lib: &NvmlLib,
    listing: Listing,
    device: nvmlDevice_t,
    mode: Mode,
    buffer: &mut Vec<u64>,
    out: &mut Vec<GpuProcess>,
) -> Result<(), NvmlError> {
    let symbol = match mode {
        Mode::Compute => lib.nvmlDeviceGetComputeRunningProcesses_v3.as_ref(),
        Mode::Graphics => lib.nvmlDeviceGetGraphicsRunningProcesses_v3.as_ref(),
        Mode::Mps => lib.nvmlDeviceGetMPSComputeRunningProcesses_v3.as_ref(),
    }
    .map_err(|e| NvmlError::FailedToLoadSymbol(e.to_string()))?;
    let stride = listing.entry_bytes();
    let mut capacity = room(buffer, Some(0));
    // A process may start between the two calls: retry a few times with
    // the count NVML asked for, plus headroom.
    for _ in 0..4 {
        let mut count = capacity as c_uint;
        // SAFETY: the buffer holds `capacity` entries of the widest layout
        // any driver writes, so at most `count` entries of this driver's
        // layout fit; NVML writes at most `count` and sets it to the
        // number written (or needed, with INSUFFICIENT_SIZE).
        let status = unsafe { symbol(device, &mut count, buffer.as_mut_ptr().cast()) };
        match status {
            NVML_SUCCESS => {
                let written = (count as usize).min(capacity);
                // SAFETY: u64 words viewed as their bytes.
                let bytes: &[u8] = unsafe {
                    std::slice::from_raw_parts(buffer.as_ptr().cast::<u8>(), buffer.len() * 8)
                };
                for entry in bytes.chunks_exact(stride).take(written) {
                    // Both layouts start with `unsigned int pid` and, after
                    // padding, `unsigned long long usedGpuMemory` at 8.
                    let pid = u32::from_ne_bytes([entry[0], entry[1], entry[2], entry[3]]);
                    let mut used = [0u8; 8];
                    used.copy_from_slice(&entry[8..16]);
                    merge(out, pid, u64::from_ne_bytes(used));
                }
                return Ok(());
            }
            NVML_ERROR_INSUFFICIENT_SIZE => capacity = room(buffer, Some(count as usize)),
            NVML_ERROR_NOT_SUPPORTED => return Err(NvmlError::NotSupported),
            other => return Err(code_error(other)),
        }
    }
    Err(NvmlError::InsufficientSize(None))
}

fn detail_list(
    lib: &NvmlLib,
    device: nvmlDevice_t,
    mode: Mode,
    buffer: &mut Vec<u64>,
    out: &mut Vec<GpuProcess>,
) -> Result<(), NvmlError> {
    let symbol = lib
        .nvmlDeviceGetRunningProcessDetailList
        .as_ref()
        .map_err(|e| NvmlError::FailedToLoadSymbol(e.to_string()))?;
    const _: () = assert!(std::mem::size_of::<nvmlProcessDetail_v1_t>() == WIDEST_ENTRY);
    let mut capacity = room(buffer, Some(0));
    for _ in 0..4 {
        let mut list = nvmlProcessDetailList_v1_t {
            version: DETAIL_LIST_V1,
            mode: mode as c_uint,
            numProcArrayEntries: capacity as c_uint,
            procArray: buffer.as_mut_ptr().cast(),
        };
        // SAFETY: the array holds `capacity` entries of
        // nvmlProcessDetail_v1_t (32 bytes, 8-aligned: u64 words); NVML
        // writes at most `numProcArrayEntries` and sets it to the number
        // written (or needed, with INSUFFICIENT_SIZE).
        let status = unsafe { symbol(device, &mut list) };
        match status {
            NVML_SUCCESS => {
                let written = (list.numProcArrayEntries as usize).min(capacity);
                // SAFETY: NVML initialised the first `written` entries of
                // the array, which lies within the buffer.
                let entries: &[nvmlProcessDetail_v1_t] =
                    unsafe { std::slice::from_raw_parts(buffer.as_ptr().cast(), written) };
                for entry in entries {
                    merge(out, entry.pid, entry.usedGpuMemory);
                }
                return Ok(());
            }
            NVML_ERROR_INSUFFICIENT_SIZE => {
                capacity = room(buffer, Some(list.numProcArrayEntries as usize));
            }
            NVML_ERROR_NOT_SUPPORTED => return Err(NvmlError::NotSupported),
            other => return Err(code_error(other)),
        }
    }
    Err(NvmlError::InsufficientSize(None))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pid_in_two_lists_is_one_process_with_its_larger_known_figure() {
        let mut out = Vec::new();
        merge(&mut out, 7, 100);
        merge(&mut out, 8, NOT_AVAILABLE);
        merge(&mut out, 7, 300);
        merge(&mut out, 8, 50);
        merge(&mut out, 9, NOT_AVAILABLE);
        merge(&mut out, 7, NOT_AVAILABLE);
        assert_eq!(
            out,
            vec![
                GpuProcess {
                    pid: 7,
                    used_bytes: Some(300)
                },
                GpuProcess {
                    pid: 8,
                    used_bytes: Some(50)
                },
                GpuProcess {
                    pid: 9,
                    used_bytes: None
                },
            ]
        );
    }

    #[test]
    fn the_buffer_has_room_for_the_widest_entries_asked_for_and_headroom() {
        let mut buffer = Vec::new();
        assert_eq!(room(&mut buffer, Some(0)), 16);
        assert_eq!(room(&mut buffer, Some(49)), 65);
        assert_eq!(buffer.len() * 8, 65 * 32);
        // Never shrinks.
        assert_eq!(room(&mut buffer, Some(1)), 65);
        assert_eq!(DETAIL_LIST_V1, 24 | (1 << 24));
    }
}

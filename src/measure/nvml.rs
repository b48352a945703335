//! The GPU through NVML: one handle for the whole run, the device table
//! read once, and the few per-sample calls, allocation-free.
//!
//! [`Gpu::open`] loads `libnvidia-ml.so.1` from the normal library path
//! (through `nvml-wrapper`), checks that every function oomgate calls is
//! exported, and reads the device table: index, UUID, name, total memory,
//! accounting and persistence mode. Every failure becomes one line that
//! says why ([`GpuUnavailable`]): the library is not found, the driver is
//! not loaded, a function is missing. Nothing here panics on a strange
//! driver.
//!
//! Process lists are read raw, from every list the driver keeps, in the
//! layout this driver writes (`lists`), into a buffer reused across
//! samples (the wrapper's methods allocate a vector per call and know one
//! layout). Memory is read through `nvmlDeviceGetMemoryInfo_v2`, which
//! says what the driver reserves for itself, or through version 1 on a
//! driver older than R510 that lacks it.

mod lists;

use std::ffi::c_uint;
use std::sync::Mutex;

use nvml_wrapper::error::NvmlError;
use nvml_wrapper::{Device, Nvml};
use nvml_wrapper_sys::bindings::{nvmlDevice_t, nvmlMemory_t, nvmlMemory_v2_t};
use serde::Serialize;

pub use lists::Listing;

/// NVML's "not available" marker for per-process memory.
const NOT_AVAILABLE: u64 = u64::MAX;
const NVML_SUCCESS: c_uint = 0;
const NVML_ERROR_INSUFFICIENT_SIZE: c_uint = 7;
const NVML_ERROR_NOT_SUPPORTED: c_uint = 3;
const NVML_ERROR_FUNCTION_NOT_FOUND: c_uint = 13;

/// Functions oomgate calls beyond init and shutdown. A library that lacks
/// one is refused at open time, with its name, rather than failing later.
const REQUIRED: &[&str] = &[
    "nvmlDeviceGetCount_v2",
    "nvmlDeviceGetHandleByIndex_v2",
    "nvmlDeviceGetName",
    "nvmlDeviceGetUUID",
    "nvmlDeviceGetMemoryInfo",
    "nvmlDeviceGetComputeRunningProcesses_v3",
    "nvmlSystemGetDriverVersion",
];

/// Why GPU memory cannot be measured, in one line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct GpuUnavailable(pub String);

/// One GPU as NVML describes it: what the results record of a device.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct GpuInfo {
    /// NVML's index (PCI bus order, as nvidia-smi numbers devices).
    pub index: u32,
    pub uuid: String,
    pub name: String,
    pub total_bytes: u64,
    /// Memory the driver keeps for itself (`memory_info_v2`), which no
    /// process can have: headroom is judged against `total_bytes` less
    /// this. `None`: a driver without version 2 of the call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reserved_bytes: Option<u64>,
    /// NVML accounting mode (`nvidia-smi -am 1`); `None` when unsupported.
    pub accounting: Option<bool>,
    pub persistence: Option<bool>,
    /// A GPU's MIG mode: `Some(true)` when it is split into instances,
    /// which are measured in its place; `None` where MIG is unsupported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mig: Option<bool>,
    /// A MIG instance (`uuid` is `MIG-…`): its GPU's UUID; the instance
    /// shares that GPU's `index`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mig_parent: Option<String>,
}

impl GpuInfo {
    /// What processes can have of the device: its total less what the
    /// driver reserves.
    pub fn usable_bytes(&self) -> u64 {
        self.total_bytes
            .saturating_sub(self.reserved_bytes.unwrap_or(0))
    }

    /// The GPU by name only, as a record that points at it says it.
    pub fn reference(&self) -> GpuRef {
        GpuRef {
            index: self.index,
            uuid: self.uuid.clone(),
        }
    }
}

/// A GPU named, not described: its NVML index and UUID, as a pool's GPUs
/// and a GPU a case shared are recorded (the description is the run's
/// `gpu.devices`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct GpuRef {
    pub index: u32,
    pub uuid: String,
}

/// A GPU oomgate measures: its description and its NVML handle. Reads
/// as its [`GpuInfo`] (`device.index`, `device.uuid`, ...).
#[derive(Debug, Clone)]
pub struct GpuDevice {
    pub info: GpuInfo,
    handle: DeviceHandle,
}

impl std::ops::Deref for GpuDevice {
    type Target = GpuInfo;

    fn deref(&self) -> &GpuInfo {
        &self.info
    }
}

/// A raw device handle. NVML handles stay valid until `nvmlShutdown`,
/// which only happens when [`Gpu`] (which owns them) is dropped.
#[derive(Debug, Clone, Copy)]
struct DeviceHandle(nvmlDevice_t);

// SAFETY: a device handle is an opaque token NVML hands out once and never
// frees before shutdown; NVML is thread-safe ("it is safe to make
// simultaneous NVML calls from multiple threads", NVML API reference), so a
// handle may be used from any thread. oomgate reads it only; the cases of a
// GPU pool, each on its own thread, sample their devices through it.
unsafe impl Send for DeviceHandle {}
// SAFETY: as above; the handle is never written through.
unsafe impl Sync for DeviceHandle {}

/// The driver's accounting record of one process on one device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AccountingRecord {
    /// Microseconds since the epoch.
    pub start_us: u64,
    pub end_us: u64,
    /// The process's exact peak memory on the device.
    pub max_bytes: u64,
}

/// One process NVML lists on a device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct GpuProcess {
    pub pid: u32,
    /// `None`: NVML reports the figure as unavailable (WDDM, some MIG
    /// setups). Never read as zero.
    pub used_bytes: Option<u64>,
}

/// The loaded NVML library and its devices.
pub struct Gpu {
    nvml: Nvml,
    pub driver_version: String,
    /// `12.4`, from `nvmlSystemGetCudaDriverVersion_v2`.
    pub cuda_driver_version: Option<String>,
    /// Devices NVML lists but that could not be opened, and why; they are
    /// not measured.
    pub unusable: Vec<String>,
    /// The usable devices, in NVML index order (a position in this list is
    /// not an NVML index when a device is unusable).
    pub devices: Vec<GpuDevice>,
    /// How this driver hands out process lists.
    pub listing: Listing,
    /// Why NVML's pids are not this process's pids, when they are not:
    /// oomgate runs in a pid namespace of its own (a container), and NVML
    /// reports the host's. Then no pid it lists can be matched to a
    /// process of a case, nor looked up in the driver's accounting.
    pub foreign_pids: Option<String>,
    /// The process-list buffer (u64 words: 8-aligned for every entry
    /// layout), reused across samples; the cases of a GPU pool sample
    /// from their own threads, one at a time through it.
    buffer: Mutex<Vec<u64>>,
}

/// A device's memory now, as [`Gpu::memory`] reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryNow {
    pub total: u64,
    /// `None`: version 1 of the call, whose `used` holds the reserve.
    pub reserved: Option<u64>,
    pub used: u64,
    pub free: u64,
}

impl std::fmt::Debug for Gpu {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gpu")
            .field("driver_version", &self.driver_version)
            .field("devices", &self.devices)
            .finish_non_exhaustive()
    }
}

impl Gpu {
    /// Load NVML and read the device table.
    pub fn open() -> Result<Gpu, GpuUnavailable> {
        let nvml = Nvml::init().map_err(|e| GpuUnavailable(describe_init_error(&e)))?;
        let missing: Vec<&str> = REQUIRED
            .iter()
            .copied()
            .filter(|name| !has_symbol(&nvml, name))
            .collect();
        if !missing.is_empty() {
            return Err(GpuUnavailable(format!(
                "the NVML library lacks {} (an NVIDIA driver older than oomgate supports?)",
                missing.join(", ")
            )));
        }
        let fail = |what: &str, e: NvmlError| GpuUnavailable(format!("NVML could not {what}: {e}"));
        let driver_version = nvml
            .sys_driver_version()
            .map_err(|e| fail("read the driver version", e))?;
        let cuda_driver_version = nvml
            .sys_cuda_driver_version()
            .ok()
            .map(|v| format!("{}.{}", v / 1000, (v % 1000) / 10));
        let count = nvml.device_count().map_err(|e| fail("count devices", e))?;
        let mut devices = Vec::with_capacity(count as usize);
        let mut unusable = Vec::new();
        // One unusable GPU (fallen off the bus, hidden by a cgroup) must not
        // stop the others from being measured: it is skipped and named.
        for index in 0..count {
            let opened = nvml.device_by_index(index).and_then(|device| {
                // SAFETY: the handle comes from NVML and stays valid
                // until shutdown, which only Gpu's drop triggers.
                let handle = DeviceHandle(unsafe { device.handle() });
                let mig = device.mig_mode().ok().map(|mode| mode.current == 1);
                // A GPU in MIG mode is never measured through its own
                // handle, which may refuse a caller without privileges
                // (NVML: aggregate figures need them): its instances still
                // are, so the refusal only leaves its total unknown (0).
                let memory = match (read_memory(&nvml, handle.0), mig) {
                    (Ok(memory), _) => Some(memory),
                    (Err(_), Some(true)) => None,
                    (Err(e), _) => return Err(e),
                };
                Ok(GpuDevice {
                    info: GpuInfo {
                        index,
                        uuid: device.uuid()?,
                        name: device.name().unwrap_or_else(|_| "unknown GPU".to_string()),
                        total_bytes: memory.map_or(0, |m| m.total),
                        reserved_bytes: memory.and_then(|m| m.reserved),
                        accounting: device.is_accounting_enabled().ok(),
                        persistence: device.is_in_persistent_mode().ok(),
                        mig,
                        mig_parent: None,
                    },
                    handle,
                })
            });
            match opened {
                Ok(device) => {
                    // A GPU in MIG mode is measured through its instances:
                    // its own handle answers for every slice.
                    let instances = match device.mig {
                        Some(true) => mig_instances(&nvml, &device),
                        _ => Ok(Vec::new()),
                    };
                    devices.push(device);
                    match instances {
                        Ok(instances) => devices.extend(instances),
                        Err(e) => unusable.push(format!("the MIG instances of GPU {index}: {e}")),
                    }
                }
                Err(e) => unusable.push(format!("GPU {index}: {e}")),
            }
        }
        // A machine whose NVML lists no GPU has no GPU memory to measure:
        // reading every figure as 0 would pass any budget.
        if devices.is_empty() {
            return Err(GpuUnavailable(match unusable.is_empty() {
                true => "NVML lists no GPU (in a container, was it given one? NVIDIA_VISIBLE_DEVICES=none or void gives it none)".to_string(),
                false => format!("no GPU could be opened ({})", unusable.join("; ")),
            }));
        }
        Ok(Gpu {
            listing: Listing::detect(nvml.lib()),
            foreign_pids: own_pid_namespace(),
            nvml,
            driver_version,
            cuda_driver_version,
            devices,
            unusable,
            buffer: Mutex::new(Vec::with_capacity(64 * 4)),
        })
    }

    fn device(&self, position: usize) -> Device<'_> {
        // SAFETY: the handle was obtained from this NVML instance, which is
        // still initialised (self is alive).
        unsafe { Device::new(self.devices[position].handle.0, &self.nvml) }
    }

    /// Memory in use on a device (all processes, and the driver's own).
    pub fn used_bytes(&self, position: usize) -> Result<u64, NvmlError> {
        self.memory(position).map(|m| m.used)
    }

    /// A device's memory now.
    pub fn memory(&self, position: usize) -> Result<MemoryNow, NvmlError> {
        read_memory(&self.nvml, self.devices[position].handle.0)
    }

    /// The processes on a device, from every list the driver keeps
    /// (compute, graphics, MPS), one entry a pid, into `out` (cleared
    /// first). Allocation-free once the buffer has grown to the number of
    /// processes on the device.
    pub fn processes(&self, position: usize, out: &mut Vec<GpuProcess>) -> Result<(), NvmlError> {
        // A panic elsewhere while holding the lock leaves a buffer that is
        // only ever written before it is read: still fine to use.
        let mut buffer = self
            .buffer
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        lists::read(
            self.nvml.lib(),
            self.listing,
            self.devices[position].handle.0,
            &mut buffer,
            out,
        )
    }

    /// Every pid the driver holds an accounting record of on a device
    /// (none when accounting is off): processes still running and those
    /// that ended, as long as the driver's buffer keeps them.
    pub fn accounting_pids(&self, position: usize) -> Vec<u32> {
        if self.devices[position].accounting != Some(true) {
            return Vec::new();
        }
        let mut pids = self.device(position).accounting_pids().unwrap_or_default();
        pids.retain(|&pid| pid != 0);
        pids
    }

    /// The driver's record of a process on a device (exact peak, lifetime),
    /// when accounting mode is on and the driver still holds it.
    pub fn accounting_record(&self, position: usize, pid: u32) -> Option<AccountingRecord> {
        if self.devices[position].accounting != Some(true) {
            return None;
        }
        let stats = self.device(position).accounting_stats_for(pid).ok()?;
        let now_us = epoch_us();
        // `time` is the run time in ms; a running process runs until now.
        let end_us = if stats.is_running {
            now_us
        } else {
            stats
                .start_time
                .saturating_add(stats.time.saturating_mul(1000))
        };
        Some(AccountingRecord {
            start_us: stats.start_time,
            end_us,
            max_bytes: stats.max_memory_usage?,
        })
    }
}

/// The MIG instances of a GPU in MIG mode, each with its own handle,
/// `MIG-…` UUID and memory (the slice's), sharing the GPU's index.
fn mig_instances(nvml: &Nvml, gpu: &GpuDevice) -> Result<Vec<GpuDevice>, NvmlError> {
    // SAFETY: the handle was obtained from this NVML instance, which is
    // initialised for as long as `nvml` lives.
    let device = unsafe { Device::new(gpu.handle.0, nvml) };
    let most = match nvml.lib().nvmlDeviceGetMaxMigDeviceCount.as_ref() {
        Ok(symbol) => {
            let mut count: c_uint = 0;
            // SAFETY: a live handle and a count to fill.
            match unsafe { symbol(gpu.handle.0, &mut count) } {
                NVML_SUCCESS => count,
                other => return Err(code_error(other)),
            }
        }
        Err(e) => return Err(NvmlError::FailedToLoadSymbol(e.to_string())),
    };
    let mut instances = Vec::new();
    for slot in 0..most {
        let mig = match device.mig_device_by_index(slot) {
            Ok(mig) => mig,
            // Slots are sparse: an instance may be destroyed.
            Err(NvmlError::NotFound) => continue,
            Err(e) => return Err(e),
        };
        // SAFETY: as above, a handle NVML keeps until shutdown.
        let handle = DeviceHandle(unsafe { mig.handle() });
        let memory = read_memory(nvml, handle.0)?;
        instances.push(GpuDevice {
            info: GpuInfo {
                index: gpu.index,
                uuid: mig.uuid()?,
                name: mig
                    .name()
                    .unwrap_or_else(|_| format!("{} MIG instance", gpu.name)),
                total_bytes: memory.total,
                reserved_bytes: memory.reserved,
                // The driver keeps no accounting per instance.
                accounting: None,
                persistence: gpu.persistence,
                mig: None,
                mig_parent: Some(gpu.uuid.clone()),
            },
            handle,
        });
    }
    Ok(instances)
}

/// The inode of the kernel's initial pid namespace (`PROC_PID_INIT_INO`),
/// the host's: `/proc/self/ns/pid` reads `pid:[4026531836]` there.
const INITIAL_PID_NAMESPACE: &str = "pid:[4026531836]";

/// Why this process's pids are not the host's, when it runs in a pid
/// namespace of its own (a container); `None` in the host's. A namespace
/// that cannot be read (no /proc) is taken as the host's, as before.
pub fn own_pid_namespace() -> Option<String> {
    let namespace = std::fs::read_link("/proc/self/ns/pid").ok()?;
    let namespace = namespace.to_string_lossy();
    (namespace != INITIAL_PID_NAMESPACE).then(|| namespace.into_owned())
}

/// Microseconds since the epoch now, the clock the driver's accounting
/// records use.
pub fn epoch_us() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}

/// A device's memory: version 2 of the call where the driver has it (its
/// `used` leaves out the driver's reserve, named apart), else version 1.
fn read_memory(nvml: &Nvml, device: nvmlDevice_t) -> Result<MemoryNow, NvmlError> {
    let lib = nvml.lib();
    if let Ok(v2) = lib.nvmlDeviceGetMemoryInfo_v2.as_ref() {
        // SAFETY: all-zero is a valid nvmlMemory_v2_t (plain integers).
        let mut memory: nvmlMemory_v2_t = unsafe { std::mem::zeroed() };
        // NVML_STRUCT_VERSION(Memory, 2), as nvml.h defines it.
        memory.version = (std::mem::size_of::<nvmlMemory_v2_t>() as c_uint) | (2 << 24);
        // SAFETY: a live handle and a struct of the version it declares.
        match unsafe { v2(device, &mut memory) } {
            NVML_SUCCESS => {
                return Ok(MemoryNow {
                    total: memory.total,
                    reserved: Some(memory.reserved),
                    used: memory.used,
                    free: memory.free,
                });
            }
            // A library newer than its kernel driver may export the call
            // and refuse it: version 1 still answers.
            NVML_ERROR_FUNCTION_NOT_FOUND | NVML_ERROR_NOT_SUPPORTED => {}
            other => return Err(code_error(other)),
        }
    }
    let v1 = lib
        .nvmlDeviceGetMemoryInfo
        .as_ref()
        .map_err(|e| NvmlError::FailedToLoadSymbol(e.to_string()))?;
    // SAFETY: all-zero is a valid nvmlMemory_t.
    let mut memory: nvmlMemory_t = unsafe { std::mem::zeroed() };
    // SAFETY: a live handle and an nvmlMemory_t to fill.
    match unsafe { v1(device, &mut memory) } {
        NVML_SUCCESS => Ok(MemoryNow {
            total: memory.total,
            reserved: None,
            used: memory.used,
            free: memory.free,
        }),
        other => Err(code_error(other)),
    }
}

fn has_symbol(nvml: &Nvml, name: &str) -> bool {
    let lib = nvml.lib();
    match name {
        "nvmlDeviceGetCount_v2" => lib.nvmlDeviceGetCount_v2.is_ok(),
        "nvmlDeviceGetHandleByIndex_v2" => lib.nvmlDeviceGetHandleByIndex_v2.is_ok(),
        "nvmlDeviceGetName" => lib.nvmlDeviceGetName.is_ok(),
        "nvmlDeviceGetUUID" => lib.nvmlDeviceGetUUID.is_ok(),
        "nvmlDeviceGetMemoryInfo" => lib.nvmlDeviceGetMemoryInfo.is_ok(),
        "nvmlDeviceGetComputeRunningProcesses_v3" => {
            lib.nvmlDeviceGetComputeRunningProcesses_v3.is_ok()
        }
        "nvmlSystemGetDriverVersion" => lib.nvmlSystemGetDriverVersion.is_ok(),
        _ => false,
    }
}

/// An NVML status code as the wrapper's error type.
fn code_error(status: c_uint) -> NvmlError {
    match nvml_wrapper::error::nvml_try(status) {
        Err(e) => e,
        Ok(()) => NvmlError::Unknown,
    }
}

/// One line saying why NVML did not load, and what to check.
pub fn describe_init_error(error: &NvmlError) -> String {
    match error {
        NvmlError::LibloadingError(e) => format!(
            "the NVML library (libnvidia-ml.so.1) was not found: is the NVIDIA driver installed, and the library on the loader path? ({e})"
        ),
        NvmlError::DriverNotLoaded => {
            "the NVIDIA driver is not loaded (nvidia-smi would fail too)".to_string()
        }
        NvmlError::NoPermission => {
            "no permission to use NVML (check the /dev/nvidia* device permissions)".to_string()
        }
        NvmlError::FailedToLoadSymbol(e) => format!("the NVML library is incomplete: {e}"),
        NvmlError::LibRmVersionMismatch => "the NVML library and the loaded NVIDIA kernel driver are different versions (the driver was upgraded and the old one is still loaded): reload the driver or reboot".to_string(),
        other => format!("NVML failed to initialise: {other}"),
    }
}

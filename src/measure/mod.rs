//! Measuring a running case: which processes belong to it, and how much
//! memory they hold.
//!
//! Each tick the runner takes one [`ProcessTree`] snapshot (the case's
//! processes, from /proc) and hands it to the case's meters: the
//! [`host::HostMeter`] (the case's memory cgroup, PSS, VmHWM, reaped
//! rusage) and the GPU meter (`gpu::CaseGpu`, which matches the pids
//! against the processes NVML reports). The tree is scanned once and shared
//! because both need the same pids. Meters return plain figures; they never
//! judge or format them.

pub mod cgroup;
pub mod cuda;
pub mod gpu;
pub mod host;
pub mod inventory;
pub mod nvml;
pub mod procfs;
pub mod ranks;
pub mod timeline;
pub mod visible;

use std::time::Duration;

pub use host::{HostFigures, HostMeter, HostMethod};
pub use procfs::ProcessTree;
pub use timeline::{Timeline, TimelinePoint};

use crate::units::Bytes;

/// One reading of every figure, at one moment of a case.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Sample {
    /// Time since the case started.
    pub at: Duration,
    /// The case's unreclaimable host memory now: the larger of its cgroup's
    /// anonymous + shmem charge and its tree's PSS sum (the last one read;
    /// PSS reads are paced).
    pub host_bytes: Option<Bytes>,
    /// Everything the case's cgroup is charged now, page cache included;
    /// `None` without a cgroup.
    pub host_charged_bytes: Option<Bytes>,
    /// GPU memory of the case's processes. `None` means not measured (no
    /// GPU sampler) or unknown, never zero.
    pub gpu_bytes: Option<Bytes>,
    /// Memory in use on the case's GPUs, everyone's (device `used`, summed).
    pub gpu_device_bytes: Option<Bytes>,
    /// The workload's processes in the tree at this moment.
    pub processes: u32,
    /// Beside a server (whose figures the ones above are then): its load
    /// client's unreclaimable host memory and GPU memory now.
    pub client_host_bytes: Option<Bytes>,
    pub client_gpu_bytes: Option<Bytes>,
}

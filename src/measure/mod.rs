//! Measuring a running case: which processes belong to it, and how much
//! memory they hold.
//!
//! Each tick the runner takes one [`ProcessTree`] snapshot (the case's
//! processes, from /proc) and hands it to the case's meters: the
//! [`host::HostMeter`] (the case's memory cgroup, PSS, VmHWM, reaped
//! rusage) and the GPU meter (`gpu::CaseGpu`, which matches the pids
//! against the processes NVML reports). The tree is scanned once and shared
//! because both need the same pids. Meters return plain figures; they never
//! judge or format them; what may stop a case at a tick is read out as a
//! plain [`live::Live`], which the judge decides on.

pub mod cgroup;
pub mod cuda;
pub mod gpu;
pub mod host;
pub mod inventory;
pub mod live;
pub mod nvml;
pub mod output;
pub mod outside;
pub mod procfs;
pub mod ranks;
pub mod timeline;
pub mod visible;

pub use host::{HostFigures, HostMeter, HostMethod};
pub use procfs::ProcessTree;
pub use timeline::{Sample, Timeline, TimelinePoint};

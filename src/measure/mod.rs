//! Measuring a running case: which processes belong to it, and how much
//! memory they hold.
//!
//! Each tick the runner takes one [`ProcessTree`] snapshot (the case's
//! processes, from /proc) and hands it to every [`Sampler`], which fills its
//! own fields of a [`Sample`]. The tree is scanned once and shared because
//! every sampler needs the same pids: host memory sums their RSS, and the GPU
//! sampler matches them against the processes NVML reports. Samplers return
//! plain figures; they never judge or format them.

pub mod gpu;
pub mod host;
pub mod nvml;
pub mod procfs;
pub mod timeline;
pub mod visible;

use std::time::Duration;

pub use host::HostSampler;
pub use procfs::ProcessTree;
pub use timeline::{Timeline, TimelinePoint};

use crate::units::Bytes;

/// One reading of every figure, at one moment of a case.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Sample {
    /// Time since the case started.
    pub at: Duration,
    /// RSS summed over the case's process tree.
    pub host_bytes: Option<Bytes>,
    /// GPU memory of the case's processes. `None` means not measured (no
    /// GPU sampler) or unknown, never zero.
    pub gpu_bytes: Option<Bytes>,
    /// Memory in use on the case's GPUs, everyone's (device `used`, summed).
    pub gpu_device_bytes: Option<Bytes>,
    /// Processes in the tree at this moment.
    pub processes: u32,
}

/// A source of memory figures, sampled once per tick.
pub trait Sampler {
    /// How the figures are obtained, as reports name it (`procfs-rss`).
    fn method(&self) -> &'static str;

    /// Fill this sampler's fields of `sample` for the given tree.
    fn sample(&mut self, tree: &ProcessTree, sample: &mut Sample) -> Result<(), SampleError>;
}

/// A sampler could not read its figures this tick. The runner records the
/// error and keeps the case running: losing a sample must not lose the case.
#[derive(Debug, thiserror::Error)]
#[error("{method}: {message}")]
pub struct SampleError {
    pub method: &'static str,
    pub message: String,
}

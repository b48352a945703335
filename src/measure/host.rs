//! Host memory of a case: the RSS of every process in its tree, summed.
//!
//! Summing RSS counts pages shared between processes (a forked child's
//! copy-on-write pages, shared libraries) once per process, so the figure is
//! an upper bound of what the tree costs the host. That is the safe side for
//! a budget, and it is what an OOM killer's per-process accounting sees.

use super::{ProcessTree, Sample, SampleError, Sampler};
use crate::units::Bytes;

#[derive(Debug, Default)]
pub struct HostSampler;

impl Sampler for HostSampler {
    fn method(&self) -> &'static str {
        "procfs-rss"
    }

    fn sample(&mut self, tree: &ProcessTree, sample: &mut Sample) -> Result<(), SampleError> {
        sample.host_bytes = Some(Bytes(tree.total_rss_bytes()));
        sample.processes = u32::try_from(tree.len()).unwrap_or(u32::MAX);
        Ok(())
    }
}

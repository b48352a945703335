//! What a case's meters read at one tick that may stop it, as plain data:
//! the live stop (`judge::budget_breached`) judges a [`Live`], never a
//! meter, so every stop on a breach is table-tested without a process or
//! a GPU.

use super::gpu::CaseGpu;
use crate::units::Bytes;

/// One tick's figures, as the live budgets read them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Live {
    /// The gated host peak so far (see `measure::host`).
    pub host_peak: Option<Bytes>,
    /// This tick's GPU memory over the case's devices, tainted device
    /// deltas left out; `None`: unknown this tick, or no GPU measured.
    pub gpu_total: Option<u64>,
    /// The largest rank's GPU memory this tick; `None`: no ranks.
    pub largest_rank: Option<u64>,
    /// Each device's usable memory (its total less what the driver
    /// reserves) and this tick's figure on it, tainted deltas left out.
    pub devices: Vec<LiveDevice>,
}

/// One device's figure this tick, against what it can hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LiveDevice {
    pub usable_bytes: u64,
    pub live_bytes: u64,
}

impl Live {
    /// What the host peak so far and the case's GPU meter read now.
    pub fn of(host_peak: Option<Bytes>, gpu: Option<&CaseGpu<'_>>) -> Live {
        Live {
            host_peak,
            gpu_total: gpu.and_then(CaseGpu::gated_total),
            largest_rank: gpu
                .and_then(CaseGpu::largest_rank_now)
                .map(|(_, bytes)| bytes),
            devices: gpu.map_or_else(Vec::new, |gpu| {
                gpu.gated_by_device()
                    .map(|(device, live_bytes)| LiveDevice {
                        usable_bytes: device.usable_bytes(),
                        live_bytes,
                    })
                    .collect()
            }),
        }
    }
}

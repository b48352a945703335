//! A soak's bookkeeping for the sampling loop (`watch`): when it ends,
//! and each of its runs' peaks, the series the leak check fits.

use std::time::{Duration, Instant};

/// When a soak of `soak` that starts `from` ends. Durations are bounded
/// by validation; should the sum overflow all the same, the soak ends at
/// `fallback` (the deadline, which ends relaunching anyway).
pub(super) fn soak_end(
    soak: Option<Duration>,
    from: Instant,
    fallback: Instant,
) -> Option<Instant> {
    soak.map(|soak| from.checked_add(soak).unwrap_or(fallback))
}

/// Each soak run's peak (instance 0's runs), for leak detection, kept for
/// GPU memory (without tainted device deltas: a neighbour's growth is no
/// leak of the case's) and host memory apart; the GPU series is the one
/// used when the case holds any GPU memory of its own.
#[derive(Default)]
pub(super) struct SoakPeaks {
    gpu_run: u64,
    host_run: u64,
    gpu: Vec<u64>,
    host: Vec<u64>,
}

impl SoakPeaks {
    pub(super) fn sample(&mut self, gpu: Option<u64>, host: Option<u64>) {
        self.gpu_run = self.gpu_run.max(gpu.unwrap_or(0));
        self.host_run = self.host_run.max(host.unwrap_or(0));
    }

    /// The run in progress ended.
    pub(super) fn next_run(&mut self) {
        self.gpu.push(std::mem::take(&mut self.gpu_run));
        self.host.push(std::mem::take(&mut self.host_run));
    }

    pub(super) fn series(self) -> Vec<u64> {
        if self.gpu.iter().any(|peak| *peak > 0) {
            self.gpu
        } else {
            self.host
        }
    }
}

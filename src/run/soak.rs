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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_soak_ends_its_length_after_it_starts_or_at_the_deadline_on_overflow() {
        let start = Instant::now();
        let deadline = start + Duration::from_secs(60);
        let ten = Duration::from_secs(10);
        assert_eq!(soak_end(None, start, deadline), None);
        assert_eq!(soak_end(Some(ten), start, deadline), Some(start + ten));
        assert_eq!(
            soak_end(Some(Duration::MAX), start, deadline),
            Some(deadline)
        );
    }

    #[test]
    fn the_gpu_series_is_judged_when_the_case_holds_gpu_memory_else_the_hosts() {
        // (each run's samples as (gpu, host), the series judged)
        type Runs = &'static [&'static [(Option<u64>, Option<u64>)]];
        let table: [(Runs, &[u64]); 3] = [
            (
                &[
                    &[(Some(1), Some(10)), (Some(3), Some(12))],
                    &[(Some(2), Some(11))],
                ],
                &[3, 2],
            ),
            (
                &[
                    &[(None, Some(10)), (Some(0), Some(30))],
                    &[(None, Some(20))],
                ],
                &[30, 20],
            ),
            // A run no tick saw keeps its place, as 0.
            (&[&[(None, Some(10))], &[]], &[10, 0]),
        ];
        for (runs, series) in table {
            let mut peaks = SoakPeaks::default();
            for run in runs {
                for (gpu, host) in *run {
                    peaks.sample(*gpu, *host);
                }
                peaks.next_run();
            }
            assert_eq!(peaks.series(), series, "{runs:?}");
        }
    }
}

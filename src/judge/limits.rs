//! A case's own limits, as checks: host and GPU budgets, per-device
//! headroom, OOM kills, the `limits` on what its probe reported, and
//! leaks; and, while it runs, whether a figure so far is over a budget.
//!
//! A GPU figure that is a device's rise taken while another process was
//! on the device (tainted) is not judged: it is reported with a note
//! rather than failing as unverified, since failing it would still let a
//! neighbour fail the case. An unknown figure fails its limit: a limit
//! that cannot be verified must not pass.

use crate::leak::LeakSource;
use crate::measure::HostFigures;
use crate::measure::gpu::{ForeignPid, GpuFigures, GpuMethod};
use crate::measure::host::{HostFloor, HostMethod};
use crate::measure::live::Live;
use crate::probe::ProbeSummary;
use crate::results::{Check, CheckKind, CheckOutcome, Device, Facts, Measured, TaintedDevice};
use crate::suite::{Budget, BudgetKind, Case, Leak};
use crate::units::Bytes;
use crate::vocabulary::OrWritten;

use super::verdict::breaches;

/// The most a case may use of a device with `total` bytes under a
/// `gpu_fraction` headroom rule (rounded down to a byte).
pub fn headroom_limit(total: u64, fraction: f64) -> Bytes {
    Bytes((total as f64 * fraction).floor() as u64)
}

/// Whether a figure measured so far is over its budget: the gated host peak
/// so far (see `measure::host`), and this tick's GPU figures (a tick over
/// budget stops the case, so earlier ones were within) without tainted
/// device deltas, in total, per rank, and as each device's share of its
/// memory. What the case leaves behind is only known after it.
pub fn budget_breached(budget: &Budget, live: &Live) -> bool {
    let over = |limit: Option<Bytes>, peak: Option<u64>| match (limit, peak) {
        (Some(limit), Some(peak)) => breaches(Bytes(peak), limit),
        _ => false,
    };
    BudgetKind::ALL.into_iter().any(|kind| match kind {
        BudgetKind::Host => over(budget.host, live.host_peak.map(Bytes::get)),
        BudgetKind::Gpu => over(budget.gpu, live.gpu_total),
        BudgetKind::GpuRank => over(budget.gpu_rank, live.largest_rank),
        BudgetKind::GpuFraction => budget.gpu_fraction.is_some_and(|fraction| {
            live.devices.iter().any(|device| {
                breaches(
                    Bytes(device.live_bytes),
                    headroom_limit(device.usable_bytes, fraction),
                )
            })
        }),
        // Known only from the probe's reports, judged once the case is over.
        BudgetKind::GpuLeft | BudgetKind::GpuOutsideAllocator => false,
    })
}

/// What of a GPU figure a limit judges. A device-delta figure taken while a
/// process not of the case was on the device (tainted) may hold that
/// process's memory: it is reported, never judged on its own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Gated {
    /// Nothing is tainted: the whole figure is judged.
    Whole,
    /// Some devices are tainted (`left_out`: which, and by what
    /// processes): the figure of the others, `rest` (`None`: unknown), is
    /// judged.
    Rest {
        rest: Option<Bytes>,
        left_out: Vec<TaintedDevice>,
    },
    /// Every device that counts is tainted: nothing is judged.
    Nothing { left_out: Vec<TaintedDevice> },
}

/// A budget against a figure (`None`: unknown, which fails).
fn budget(kind: CheckKind, peak: Option<Bytes>, limit: Bytes, facts: Facts) -> Check {
    let (passed, outcome) = match peak {
        Some(peak) if breaches(peak, limit) => (false, CheckOutcome::Breached),
        Some(_) => (true, CheckOutcome::Within),
        None => (false, CheckOutcome::Unknown),
    };
    Check::new(kind, passed, outcome)
        .figure(peak.map(Bytes::get))
        .limit(Some(limit.get()))
        .facts(facts)
}

/// Facts of a budget on a figure measured as `measured`.
fn measured(measured: Measured) -> Facts {
    Facts::Budget {
        method: OrWritten::Data(measured),
        left_out: None,
        whole_bytes: None,
    }
}

/// The host budget verdict, on the gated host peak; `floor` set it
/// (`None`: not told), measured by `method`.
pub fn host_budget_check(
    peak: Option<Bytes>,
    floor: Option<HostFloor>,
    method: HostMethod,
    limit: Bytes,
) -> Check {
    let facts = measured(Measured::Host { floor, method });
    budget(CheckKind::HostBudget, peak, limit, facts)
}

/// The GPU budget verdict, on the case's peak over all its devices (less
/// what `gated` leaves out); `method` produced the figure (`None`: GPU
/// memory was not measured).
pub fn gpu_budget_check(
    peak: Option<Bytes>,
    method: Option<GpuMethod>,
    gated: &Gated,
    limit: Bytes,
) -> Check {
    let facts = |left_out: Option<&Vec<TaintedDevice>>| Facts::Budget {
        method: OrWritten::Data(Measured::Gpu { method }),
        left_out: left_out.cloned().map(OrWritten::Data),
        whole_bytes: left_out.and(peak.map(Bytes::get)),
    };
    match gated {
        Gated::Whole => budget(CheckKind::GpuBudget, peak, limit, facts(None)),
        Gated::Rest { rest, left_out } => {
            budget(CheckKind::GpuBudget, *rest, limit, facts(Some(left_out)))
        }
        Gated::Nothing { left_out } => {
            Check::new(CheckKind::GpuBudget, true, CheckOutcome::NotGated)
                .figure(peak.map(Bytes::get))
                .limit(Some(limit.get()))
                .facts(facts(Some(left_out)))
        }
    }
}

/// A device's memory as headroom is judged against it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceMemory {
    pub total: Bytes,
    /// What the driver keeps for itself (`None`: not reported).
    pub reserved: Option<Bytes>,
}

impl DeviceMemory {
    pub fn of(device: &crate::measure::nvml::GpuInfo) -> Self {
        DeviceMemory {
            total: Bytes(device.total_bytes),
            reserved: device.reserved_bytes.map(Bytes),
        }
    }
}

/// The headroom verdict for one device: the case's peak on it against a
/// share of what processes can have of it, its total less what the
/// driver reserves. `tainted_by` not empty: the figure is a device delta
/// taken beside those processes, not of the case, and is not judged.
pub fn headroom_check(
    device: Device,
    peak: Option<Bytes>,
    method: GpuMethod,
    tainted_by: &[ForeignPid],
    memory: DeviceMemory,
    fraction: f64,
) -> Check {
    let usable = memory
        .total
        .get()
        .saturating_sub(memory.reserved.map_or(0, Bytes::get));
    let limit = headroom_limit(usable, fraction);
    let tainted = !tainted_by.is_empty();
    let (passed, outcome) = match peak {
        Some(_) if tainted => (true, CheckOutcome::NotGated),
        Some(peak) if breaches(peak, limit) => (false, CheckOutcome::Breached),
        Some(_) => (true, CheckOutcome::Within),
        None => (false, CheckOutcome::Unknown),
    };
    let index = device.index;
    Check::new(CheckKind::GpuHeadroom { device: index }, passed, outcome)
        .figure(peak.map(Bytes::get))
        .limit(Some(limit.get()))
        .facts(Facts::Headroom {
            device: OrWritten::Data(device),
            method,
            taint: tainted.then(|| OrWritten::Data(tainted_by.to_vec())),
            total_bytes: memory.total.get(),
            reserved_bytes: memory.reserved.map(Bytes::get),
            fraction,
        })
}

/// The order a finished case's budget checks are listed in: the whole
/// case's figures, then each device's headroom.
const CHECKED_IN_ORDER: [BudgetKind; BudgetKind::COUNT] = BudgetKind::every_once([
    BudgetKind::Host,
    BudgetKind::Gpu,
    BudgetKind::GpuRank,
    BudgetKind::GpuLeft,
    BudgetKind::GpuOutsideAllocator,
    BudgetKind::GpuFraction,
]);

/// Every budget verdict of a finished case.
pub fn budget_checks(budget: &Budget, host: &HostFigures, gpu: Option<&GpuFigures>) -> Vec<Check> {
    let mut checks = Vec::new();
    for kind in CHECKED_IN_ORDER {
        match kind {
            BudgetKind::Host => checks.extend(budget.host.map(|limit| {
                let peak = host.peak_bytes.map(Bytes);
                host_budget_check(peak, host.peak_source, host.method, limit)
            })),
            BudgetKind::Gpu => checks.extend(budget.gpu.map(|limit| match gpu {
                Some(gpu) => gpu_budget_check(
                    gpu.peak_bytes.map(Bytes),
                    Some(gpu.method),
                    &gated(gpu),
                    limit,
                ),
                None => gpu_budget_check(None, None, &Gated::Whole, limit),
            })),
            BudgetKind::GpuRank => {
                checks.extend(budget.gpu_rank.map(|limit| rank_check(gpu, limit)))
            }
            BudgetKind::GpuLeft => checks.extend(budget.gpu_left.map(|limit| {
                let left = gpu.and_then(|g| g.left_bytes).map(Bytes);
                let facts = measured(Measured::AfterCase);
                self::budget(CheckKind::Budget(kind), left, limit, facts)
            })),
            BudgetKind::GpuOutsideAllocator => {
                checks.extend(budget.gpu_outside_allocator.map(|limit| {
                    let outside = gpu.and_then(|g| g.outside.as_ref());
                    let peak = outside.map(|o| Bytes(o.case.peak_bytes));
                    let facts = measured(Measured::OutsideAllocator {
                        moments: outside.map_or(0, |o| o.moments),
                    });
                    self::budget(CheckKind::Budget(kind), peak, limit, facts)
                }))
            }
            BudgetKind::GpuFraction => {
                let devices = gpu.map(|g| g.devices.as_slice()).unwrap_or_default();
                if let Some(fraction) = budget.gpu_fraction {
                    checks.extend(devices.iter().map(|device| {
                        let name = Device {
                            index: device.index,
                            name: device.name.clone(),
                        };
                        headroom_check(
                            name,
                            device.peak_bytes.map(Bytes),
                            device.method,
                            &device.tainted_by,
                            DeviceMemory::of(device),
                            fraction,
                        )
                    }));
                }
            }
        }
    }
    checks
}

/// The rank budget's verdict: on the rank with the largest GPU peak;
/// unknown without ranks or without a GPU figure.
fn rank_check(gpu: Option<&GpuFigures>, limit: Bytes) -> Check {
    let ranks = gpu
        .map(|g| g.ranks.peaks().collect::<Vec<_>>())
        .unwrap_or_default();
    let largest = ranks
        .iter()
        .max_by_key(|(rank, bytes, _)| (*bytes, std::cmp::Reverse(*rank)));
    let facts = measured(Measured::Rank {
        rank: largest.map(|(rank, _, _)| *rank),
        devices: largest
            .map(|(_, _, devices)| devices.clone())
            .unwrap_or_default(),
    });
    let peak = largest
        .map(|(_, bytes, _)| Bytes(*bytes))
        .filter(|_| gpu.is_some_and(|g| g.peak_bytes.is_some()));
    budget(CheckKind::GpuRank, peak, limit, facts)
}

/// What of the case's GPU figure its budget judges: all of it, unless some
/// devices' figures are tainted device deltas, which are left out.
fn gated(gpu: &GpuFigures) -> Gated {
    let left_out: Vec<TaintedDevice> = gpu
        .devices
        .iter()
        .filter(|d| !d.tainted_by.is_empty())
        .map(|d| TaintedDevice {
            index: d.index,
            by: d.tainted_by.clone(),
        })
        .collect();
    if left_out.is_empty() {
        return Gated::Whole;
    }
    match gpu.untainted_peak_bytes() {
        // Only devices the case left alone remain.
        Some(0) => Gated::Nothing { left_out },
        rest => Gated::Rest {
            rest: rest.map(Bytes),
            left_out,
        },
    }
}

/// The case's `limits` on what its probe reported. A figure the workload
/// never reported fails its limit: it cannot be verified.
pub fn limit_checks(case: &Case, probe: Option<&ProbeSummary>) -> Vec<Check> {
    case.limits
        .iter()
        .map(|limit| {
            let value = probe.and_then(|p| p.figure(&limit.key));
            let (passed, outcome) = match value {
                Some(value) if limit.op.holds(value, limit.value) => (true, CheckOutcome::Within),
                Some(_) => (false, CheckOutcome::Breached),
                None => (false, CheckOutcome::Unknown),
            };
            Check::new(CheckKind::Limit(limit.key.to_string()), passed, outcome).facts(
                Facts::Limit {
                    text: limit.text.clone(),
                    value,
                    bytes: limit.key.is_size(),
                },
            )
        })
        .collect()
}

/// A server case's load client's checks (its `client_budget`, its OOM
/// kills), named as the client's: `client.budget.host`.
pub fn client_checks(checks: impl IntoIterator<Item = Check>) -> Vec<Check> {
    checks
        .into_iter()
        .map(|check| Check {
            kind: CheckKind::Client(Box::new(check.kind)),
            ..check
        })
        .collect()
}

/// The leak verdict: growth of a per-iteration figure after warm-up. The
/// probe's steps are the iterations when the workload reports them (the
/// longest series of one instance and phase), else the soak's runs (each
/// run's peak). Too few iterations to tell passes, and says so.
pub fn leak_check(
    leak: Leak,
    probe: Option<&ProbeSummary>,
    soak_peaks: &[u64],
) -> (Check, Option<crate::leak::LeakFigures>) {
    let warmup = leak.warmup as usize;
    let probe_series = probe
        .and_then(ProbeSummary::longest_series)
        .filter(|(_, series)| series.len() >= warmup + 3);
    let figures = match probe_series {
        Some(((_, phase), series)) => {
            let phase = (!phase.is_empty()).then(|| phase.clone());
            crate::leak::growth(series, warmup, LeakSource::ProbeSteps { phase })
        }
        None => crate::leak::growth(soak_peaks, warmup, LeakSource::SoakRuns),
    };
    let (passed, outcome) = match &figures {
        Some(figures) if figures.growth_bytes > leak.max_growth.get() as f64 => {
            (false, CheckOutcome::Breached)
        }
        Some(_) => (true, CheckOutcome::Within),
        None => (true, CheckOutcome::Unknown),
    };
    let check = Check::new(CheckKind::Leak, passed, outcome)
        .limit(Some(leak.max_growth.get()))
        .facts(Facts::Leak {
            what: None,
            figures: figures.clone(),
            warmup: leak.warmup,
        });
    (check, figures)
}

/// A process of the case killed by the kernel's OOM killer fails it, even
/// when the workload recovered (a data-loader worker respawned): the case
/// ran out of host memory. Only known with a cgroup.
pub fn oom_kill_check(host: &HostFigures) -> Option<Check> {
    let kills = host.oom_kills.filter(|kills| *kills > 0)?;
    Some(
        Check::new(CheckKind::HostOomKill, false, CheckOutcome::Breached).facts(Facts::OomKill {
            kills,
            method: host.method,
        }),
    )
}

/// Every check of one run of a case against its own limits: budgets, OOM
/// kills, a server case's client's, probe limits, and leaks (with the
/// fitted trend the leak check judged).
pub fn run_checks(
    case: &Case,
    host: &HostFigures,
    gpu: Option<&GpuFigures>,
    client: Option<(&HostFigures, Option<&GpuFigures>)>,
    probe: Option<&ProbeSummary>,
    soak_peaks: &[u64],
) -> (Vec<Check>, Option<crate::leak::LeakFigures>) {
    let mut checks = budget_checks(&case.budget, host, gpu);
    checks.extend(oom_kill_check(host));
    if let Some((client_host, client_gpu)) = client {
        checks.extend(client_checks(
            budget_checks(&case.client_budget, client_host, client_gpu)
                .into_iter()
                .chain(oom_kill_check(client_host)),
        ));
    }
    checks.extend(limit_checks(case, probe));
    let mut leak_figures = None;
    if let Some(leak) = case.leak {
        let (check, figures) = leak_check(leak, probe, soak_peaks);
        checks.push(check);
        leak_figures = figures;
    }
    (checks, leak_figures)
}

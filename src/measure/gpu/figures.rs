//! What a case's GPU measurement produces: the figures of each device and
//! of the case, the method behind each ([`GpuMethod`]), the processes that
//! taint a device delta, and the pure choice of a device's figure once the
//! case is over ([`device_figure`]). Measuring is `CaseGpu`'s, in the
//! parent module; this file holds no NVML handle, so all of it is table
//! tested. `GpuMethod` is serialized by hand, as the text results.json and
//! the lock have always held, so neither format changed when it became a
//! type.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::measure::nvml::{AccountingRecord, GpuInfo};

/// How a GPU figure was obtained. Serialized (results.json, the lock) and
/// shown by the names reports have always used: `sampled@50ms`,
/// `driver-accounting`, `device-delta`, `mixed`, `unavailable`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GpuMethod {
    /// The peak over ticks of the tree's summed per-process memory, read
    /// every `interval_ms`.
    Sampled { interval_ms: u64 },
    /// The driver's per-process maxima (accounting mode).
    DriverAccounting,
    /// The device's rise during the case: no process of the case was seen.
    DeviceDelta,
    /// The peak torch's caching allocator reserved during a test of a
    /// shared pytest session (`torch.cuda.max_memory_reserved`, reset at
    /// the test's start), as the session's plugin reported it: NVML's
    /// figure of a session is the session's since it started. The CUDA
    /// context and memory outside torch's allocator are not in it.
    Allocator,
    /// The total's method when its devices used different ones.
    Mixed,
    /// Unknown: NVML could not tell (or the device is not mapped).
    Unavailable,
}

impl fmt::Display for GpuMethod {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GpuMethod::Sampled { interval_ms } => write!(f, "sampled@{interval_ms}ms"),
            GpuMethod::DriverAccounting => f.write_str("driver-accounting"),
            GpuMethod::DeviceDelta => f.write_str("device-delta"),
            GpuMethod::Allocator => f.write_str("torch-allocator"),
            GpuMethod::Mixed => f.write_str("mixed"),
            GpuMethod::Unavailable => f.write_str("unavailable"),
        }
    }
}

impl Serialize for GpuMethod {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

/// A name that is no GPU method oomgate writes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{0}` is not a GPU method oomgate writes")]
pub struct UnknownGpuMethod(String);

impl std::str::FromStr for GpuMethod {
    type Err = UnknownGpuMethod;

    /// A method's name as results.json writes it (`sampled@50ms`).
    fn from_str(name: &str) -> Result<Self, UnknownGpuMethod> {
        Ok(match name {
            "driver-accounting" => GpuMethod::DriverAccounting,
            "device-delta" => GpuMethod::DeviceDelta,
            "torch-allocator" => GpuMethod::Allocator,
            "mixed" => GpuMethod::Mixed,
            "unavailable" => GpuMethod::Unavailable,
            _ => GpuMethod::Sampled {
                interval_ms: name
                    .strip_prefix("sampled@")
                    .and_then(|rest| rest.strip_suffix("ms"))
                    .and_then(|ms| ms.parse().ok())
                    .ok_or_else(|| UnknownGpuMethod(name.to_string()))?,
            },
        })
    }
}

impl<'de> Deserialize<'de> for GpuMethod {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let name = String::deserialize(deserializer)?;
        name.parse().map_err(serde::de::Error::custom)
    }
}

/// A process on one of the case's GPUs that oomgate did not start.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ForeignProcess {
    pub pid: u32,
    /// From /proc, when the pid is visible in this namespace.
    pub name: Option<String>,
    pub device_index: u32,
    pub device_uuid: String,
    pub used_bytes: Option<u64>,
}

/// A process not of the case seen on one of its GPUs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ForeignPid {
    pub pid: u32,
    /// From /proc, when the pid is visible in this namespace.
    pub name: Option<String>,
}

impl fmt::Display for ForeignPid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.name {
            Some(name) => write!(f, "pid {} ({name})", self.pid),
            None => write!(f, "pid {}", self.pid),
        }
    }
}

/// The figures of one device for one case. Reads as its [`GpuInfo`]
/// (`device.index`, `device.uuid`, ...): one description of a GPU, which
/// results.json writes inline.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeviceFigures {
    #[serde(flatten)]
    pub gpu: GpuInfo,
    /// Device use just before the case started.
    pub before_bytes: Option<u64>,
    /// Peak of the device's use while the case ran (everyone's).
    pub device_peak_bytes: Option<u64>,
    /// The case's peak on this device, by `method`; `None` when unknown.
    pub peak_bytes: Option<u64>,
    pub method: GpuMethod,
    pub sampled_peak_bytes: Option<u64>,
    pub accounting_peak_bytes: Option<u64>,
    /// With a `device-delta` figure: the processes not of the case seen on
    /// the device, before the case started or while it ran. Their memory
    /// may be in the figure, so it is reported but no budget or headroom
    /// limit is checked against it. Empty for every other method.
    pub tainted_by: Vec<ForeignPid>,
    /// Why the figure is unknown when oomgate refused the device delta it
    /// had, or what a reported one may hold besides: as data, worded into
    /// `note` by `report::words::device_note` (a figure read back from
    /// results.json has only the words).
    #[serde(skip)]
    pub device_note: Option<DeviceNote>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// The device was lost, or refused NVML, while the case ran: its
    /// figure is incomplete, so it is unknown (`peak_bytes` null).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lost: Option<DeviceLoss>,
}

/// What a device's figure says of the case, where it is not plainly the
/// case's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeviceNote {
    /// Refused: another case of the run ran on the GPU meanwhile (`--pack`,
    /// or `--jobs N` without a `--gpus` pool: `jobs`).
    Crowded { jobs: Option<usize> },
    /// Refused: a server's load client is measured on its server's
    /// devices, so a rise is both parts' together.
    ServersClient,
    /// Reported: a server's rise includes its load client's memory, if
    /// the client holds any.
    WithClient,
    /// Reported: oomgate runs in a pid namespace of its own (`namespace`,
    /// a container), so NVML's pids cannot be matched to the case's and
    /// the figure is the device's rise, anyone else's included.
    Container { namespace: String },
    /// A test of a shared pytest session: its figure is torch's allocator
    /// peak during the test; NVML's (`sampled_peak_bytes`) is the
    /// session's since it started (the allocator's cache from earlier
    /// tests, the CUDA context of whichever test first used CUDA).
    SessionAllocator,
    /// A test of a shared session whose process held GPU memory, but for
    /// which torch's allocator reported nothing (torch not imported, or
    /// CUDA not initialised, or memory outside torch): unknown.
    SessionUnreported,
}

impl DeviceNote {
    /// The device delta was refused, so the figure is unknown.
    pub fn refused(&self) -> bool {
        matches!(self, DeviceNote::Crowded { .. } | DeviceNote::ServersClient)
    }
}

/// When, and why, a device stopped answering NVML during a case.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeviceLoss {
    /// Seconds into the case.
    pub at_s: f64,
    /// NVML's error: `GPU is lost`, `no permission`, `timeout`.
    pub reason: String,
}

impl std::ops::Deref for DeviceFigures {
    type Target = GpuInfo;

    fn deref(&self) -> &GpuInfo {
        &self.gpu
    }
}

/// The GPU figures of one case.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GpuFigures {
    /// All devices together; `None` when any device's figure is unknown.
    pub peak_bytes: Option<u64>,
    /// `sampled@50ms`, `driver-accounting`, `device-delta`, or `mixed` when
    /// devices used different methods (each device says its own).
    pub method: GpuMethod,
    pub devices: Vec<DeviceFigures>,
    /// After the case, once its processes were gone: what its devices had
    /// not given back, above their idle level (`None`: not looked at, or
    /// not readable).
    pub left_bytes: Option<u64>,
    /// Each rank's GPU memory, summed over its devices per tick.
    #[serde(skip)]
    pub ranks: crate::measure::ranks::PerRank,
    /// GPU memory outside the allocator: NVML's per-process figures less
    /// the probe's `reserved` at the same moments (`measure::outside`).
    #[serde(skip)]
    pub outside: Option<crate::measure::outside::OutsideFigures>,
}

/// What a shared pytest session's plugin reported of torch's caching
/// allocator for one test, per device in CUDA's order: its peaks since the
/// test started (`max_memory_reserved`, `max_memory_allocated`, reset at
/// the start) and what it held at the start. Read from the plugin's answer
/// as it writes it (`"gpu": {"reserved": [...], ...}`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct AllocatorPeaks {
    pub reserved: Vec<u64>,
    #[serde(default)]
    pub allocated: Vec<u64>,
    #[serde(default)]
    pub reserved_start: Vec<u64>,
    #[serde(default)]
    pub allocated_start: Vec<u64>,
    /// What it had allocated when the test ended.
    #[serde(default)]
    pub allocated_end: Vec<u64>,
}

impl AllocatorPeaks {
    /// What the test still had allocated when it ended beyond what was
    /// allocated at its start, over every device: a tensor it kept (a
    /// cache, a global, a leak). `None` where the end was not reported.
    pub fn kept(&self) -> Option<u64> {
        (!self.allocated_end.is_empty()).then(|| {
            self.allocated_end
                .iter()
                .enumerate()
                .map(|(i, end)| {
                    end.saturating_sub(self.allocated_start.get(i).copied().unwrap_or(0))
                })
                .fold(0u64, u64::saturating_add)
        })
    }

    /// What the test added on the device at `index` at its peak: the
    /// larger of the allocator's growth (memory it took from the driver
    /// during the test) and of the test's allocations at their peak, less
    /// what earlier tests still held (memory the test needed at once, even
    /// where the cache an earlier test left served it). `None`: the device
    /// was not reported.
    pub fn added(&self, index: usize) -> Option<u64> {
        let at = |list: &[u64]| list.get(index).copied().unwrap_or(0);
        let reserved = self.reserved.get(index)?;
        let allocated = at(&self.allocated);
        Some(
            reserved
                .saturating_sub(at(&self.reserved_start))
                .max(allocated.saturating_sub(at(&self.allocated_start))),
        )
    }
}

impl GpuFigures {
    /// A test of a shared session: NVML's figures of the session's
    /// process tree during the test (which hold whatever the session kept
    /// from earlier tests) stay each device's `sampled_peak_bytes`, and
    /// the figure judged is what the test added to the allocator at its
    /// peak ([`AllocatorPeaks::added`]) where the plugin reported one. A
    /// device the session does not hold memory on stays at 0; one it
    /// holds memory on without a report is unknown.
    pub fn per_test(mut self, allocator: Option<&AllocatorPeaks>) -> GpuFigures {
        for (cuda_index, device) in self.devices.iter_mut().enumerate() {
            if device.lost.is_some() || device.method == GpuMethod::Unavailable {
                continue;
            }
            let reported = allocator.and_then(|a| a.added(cuda_index));
            // A device's rise during the test (in a container) is the
            // test's, unless the allocator said more exactly.
            if device.method == GpuMethod::DeviceDelta && reported.is_none() {
                continue;
            }
            // What NVML saw the session hold there (its own figure, by
            // the device's method).
            match (reported, device.peak_bytes) {
                (Some(bytes), _) => {
                    device.peak_bytes = Some(bytes);
                    device.method = GpuMethod::Allocator;
                    device.device_note = Some(DeviceNote::SessionAllocator);
                }
                (None, Some(0)) => {}
                (None, _) => {
                    device.peak_bytes = None;
                    device.method = GpuMethod::Unavailable;
                    device.device_note = Some(DeviceNote::SessionUnreported);
                }
            }
        }
        let lost = self.devices.iter().any(|d| d.lost.is_some());
        self.peak_bytes = match lost {
            true => None,
            false => self
                .devices
                .iter()
                .try_fold(0u64, |sum, d| d.peak_bytes.map(|p| sum.saturating_add(p))),
        };
        // Devices the test never touched do not decide the method.
        let mut methods = self
            .devices
            .iter()
            .filter(|d| d.peak_bytes != Some(0) || d.method == GpuMethod::Allocator)
            .map(|d| d.method);
        self.method = match (methods.next(), lost) {
            (_, true) => GpuMethod::Unavailable,
            (None, false) => self.method,
            (Some(first), false) if methods.all(|m| m == first) => first,
            (Some(_), false) => GpuMethod::Mixed,
        };
        // The ranks' sums are NVML's, the session's: no test's.
        self.ranks = crate::measure::ranks::PerRank::default();
        // What a test of a session leaves is what it kept allocated; the
        // device is not given back while the session lives.
        self.left_bytes = allocator.and_then(AllocatorPeaks::kept);
        self
    }

    /// Hold the figure to a floor the workload's own allocator reported
    /// (the probe's `peak_reserved`): memory a process of the case
    /// certainly held on a GPU at some moment. A floor above the measured
    /// peak means the samples missed a spike; the figure is raised to it
    /// and the floor returned, to be said. An unknown figure stays unknown.
    pub fn hold_to_allocator_floor(&mut self, floor: Option<u64>) -> Option<u64> {
        let floor = floor?;
        match self.peak_bytes {
            Some(peak) if floor > peak => {
                self.peak_bytes = Some(floor);
                Some(floor)
            }
            _ => None,
        }
    }

    /// The first device lost (or refusing NVML) during the case, if any.
    pub fn lost(&self) -> Option<(&DeviceFigures, &DeviceLoss)> {
        self.devices
            .iter()
            .find_map(|d| d.lost.as_ref().map(|loss| (d, loss)))
    }

    /// The devices' figures without the tainted ones, summed: what a GPU
    /// budget may judge. `None` when one of those figures is unknown.
    pub fn untainted_peak_bytes(&self) -> Option<u64> {
        self.devices
            .iter()
            .filter(|d| d.tainted_by.is_empty())
            .try_fold(0u64, |sum, d| d.peak_bytes.map(|p| sum.saturating_add(p)))
    }
}

/// What is known of one device once the case is over.
#[derive(Debug, Clone, Copy)]
pub(super) struct DeviceEnd {
    /// The process list was read and the device is mapped.
    pub(super) readable: bool,
    /// A per-process figure of the case exists on some device (sampled or
    /// the driver's): NVML's pids are the case's.
    pub(super) pids_match: bool,
    /// A process of the case's tree was seen on this device.
    pub(super) tree_seen: bool,
    /// The sampled peak of the tree on this device; `None` if unknown.
    pub(super) sampled: Option<u64>,
    pub(super) accounting: Option<u64>,
    /// The device's peak use minus its use before the case.
    pub(super) delta: Option<u64>,
    /// Another case of the run used the device meanwhile: its delta is
    /// never the case's figure.
    pub(super) shared: bool,
}

/// A device's figure and method: per-process whenever per-process figures
/// exist, the device delta only when none does.
pub(super) fn device_figure(
    end: DeviceEnd,
    sampled_method: &GpuMethod,
) -> (Option<u64>, GpuMethod) {
    let unavailable = (None, GpuMethod::Unavailable);
    if !end.readable {
        return unavailable;
    }
    match (end.tree_seen, end.sampled, end.accounting) {
        (true, Some(s), Some(a)) if a > s => (Some(a), GpuMethod::DriverAccounting),
        (true, Some(s), _) => (Some(s), *sampled_method),
        (true, None, Some(a)) => (Some(a), GpuMethod::DriverAccounting),
        (true, None, None) => unavailable,
        (false, _, Some(a)) => (Some(a), GpuMethod::DriverAccounting),
        // The case ran on other devices; this one it left alone.
        (false, _, None) if end.pids_match => (Some(0), *sampled_method),
        (false, _, None) => match end.delta {
            Some(0) => (Some(0), *sampled_method),
            // Another case of the run was on the device meanwhile.
            Some(_) if end.shared => unavailable,
            Some(d) => (Some(d), GpuMethod::DeviceDelta),
            None => unavailable,
        },
    }
}

/// The largest sum of per-process maxima over processes whose lifetimes
/// overlap: an upper bound of the true peak that, unlike a plain sum, does
/// not add up processes that ran one after another.
pub fn concurrent_peak(records: &[AccountingRecord]) -> u64 {
    let mut events: Vec<(u64, bool, u64)> = Vec::with_capacity(records.len() * 2);
    for record in records {
        events.push((record.start_us, true, record.max_bytes));
        events.push((record.end_us.max(record.start_us), false, record.max_bytes));
    }
    // At equal times, ends come first: a process that ended as another
    // began did not overlap it.
    events.sort_by_key(|&(time, is_start, _)| (time, is_start));
    let (mut now, mut peak) = (0u64, 0u64);
    for (_, is_start, bytes) in events {
        if is_start {
            now = now.saturating_add(bytes);
            peak = peak.max(now);
        } else {
            now = now.saturating_sub(bytes);
        }
    }
    peak
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(start_us: u64, end_us: u64, max_bytes: u64) -> AccountingRecord {
        AccountingRecord {
            start_us,
            end_us,
            max_bytes,
        }
    }

    #[test]
    fn methods_keep_the_names_results_and_locks_use() {
        let table = [
            (GpuMethod::Sampled { interval_ms: 50 }, "sampled@50ms"),
            (GpuMethod::Sampled { interval_ms: 1000 }, "sampled@1000ms"),
            (GpuMethod::DriverAccounting, "driver-accounting"),
            (GpuMethod::DeviceDelta, "device-delta"),
            (GpuMethod::Allocator, "torch-allocator"),
            (GpuMethod::Mixed, "mixed"),
            (GpuMethod::Unavailable, "unavailable"),
        ];
        for (method, name) in table {
            assert_eq!(method.to_string(), name);
            assert_eq!(
                serde_json::to_value(method).ok(),
                Some(serde_json::json!(name))
            );
            assert_eq!(name.parse::<GpuMethod>(), Ok(method));
        }
        for not_a_method in ["sampled@ms", "sampled@5s", "nvml", ""] {
            assert!(not_a_method.parse::<GpuMethod>().is_err(), "{not_a_method}");
        }
    }

    const SAMPLED: GpuMethod = GpuMethod::Sampled { interval_ms: 50 };

    fn end(tree_seen: bool, sampled: Option<u64>, accounting: Option<u64>) -> DeviceEnd {
        DeviceEnd {
            readable: true,
            pids_match: tree_seen || accounting.is_some(),
            tree_seen,
            sampled,
            accounting,
            delta: Some(5000),
            shared: false,
        }
    }

    #[test]
    fn per_process_figures_win_whenever_they_exist() {
        let other_device_seen = DeviceEnd {
            pids_match: true,
            ..end(false, None, None)
        };
        let none_seen = end(false, None, None);
        let table: &[(DeviceEnd, Option<u64>, GpuMethod)] = &[
            (end(true, Some(100), None), Some(100), SAMPLED),
            (end(true, Some(100), Some(100)), Some(100), SAMPLED),
            (
                end(true, Some(100), Some(101)),
                Some(101),
                GpuMethod::DriverAccounting,
            ),
            (
                end(true, None, Some(7)),
                Some(7),
                GpuMethod::DriverAccounting,
            ),
            (end(true, None, None), None, GpuMethod::Unavailable),
            // Sampling never caught the case's process; the driver did: its
            // figure, not the device's rise.
            (
                end(false, None, Some(7)),
                Some(7),
                GpuMethod::DriverAccounting,
            ),
            // The case ran elsewhere: this device's rise is someone else's.
            (other_device_seen, Some(0), SAMPLED),
            (none_seen, Some(5000), GpuMethod::DeviceDelta),
            // Other cases may use the device meanwhile: its rise is no
            // figure of this case's, and per-process figures still are.
            (
                DeviceEnd {
                    shared: true,
                    ..none_seen
                },
                None,
                GpuMethod::Unavailable,
            ),
            (
                DeviceEnd {
                    shared: true,
                    delta: Some(0),
                    ..none_seen
                },
                Some(0),
                SAMPLED,
            ),
            (
                DeviceEnd {
                    shared: true,
                    ..end(true, Some(100), None)
                },
                Some(100),
                SAMPLED,
            ),
            (
                DeviceEnd {
                    delta: Some(0),
                    ..none_seen
                },
                Some(0),
                SAMPLED,
            ),
            (
                DeviceEnd {
                    delta: None,
                    ..none_seen
                },
                None,
                GpuMethod::Unavailable,
            ),
            (
                DeviceEnd {
                    readable: false,
                    ..end(true, Some(100), Some(200))
                },
                None,
                GpuMethod::Unavailable,
            ),
        ];
        for (end, bytes, method) in table {
            assert_eq!(device_figure(*end, &SAMPLED), (*bytes, *method), "{end:?}");
        }
    }

    fn device(index: u32, peak: Option<u64>, tainted_by: &[u32]) -> DeviceFigures {
        DeviceFigures {
            gpu: GpuInfo {
                index,
                uuid: format!("GPU-{index}"),
                name: "Fake".into(),
                total_bytes: 1000,
                reserved_bytes: None,
                accounting: None,
                persistence: None,
                mig: None,
                mig_parent: None,
            },
            before_bytes: Some(0),
            device_peak_bytes: peak,
            peak_bytes: peak,
            method: GpuMethod::DeviceDelta,
            sampled_peak_bytes: None,
            accounting_peak_bytes: None,
            tainted_by: tainted_by
                .iter()
                .map(|&pid| ForeignPid {
                    pid,
                    name: (pid == 4242).then(|| "sleep".to_string()),
                })
                .collect(),
            device_note: None,
            note: None,
            lost: None,
        }
    }

    #[test]
    fn tainted_figures_are_named_and_left_out_of_the_untainted_sum() {
        let tainted = device(0, Some(500), &[4242, 7]);
        let named: Vec<String> = tainted.tainted_by.iter().map(ToString::to_string).collect();
        assert_eq!(named, ["pid 4242 (sleep)", "pid 7"]);
        let figures = |devices: Vec<DeviceFigures>| GpuFigures {
            peak_bytes: None,
            method: GpuMethod::DeviceDelta,
            devices,
            left_bytes: None,
            ranks: Default::default(),
            outside: None,
        };
        let table: &[(Vec<DeviceFigures>, Option<u64>)] = &[
            (vec![], Some(0)),
            (vec![device(0, Some(500), &[4242])], Some(0)),
            (
                vec![device(0, Some(500), &[4242]), device(1, Some(300), &[])],
                Some(300),
            ),
            (
                vec![device(0, Some(500), &[4242]), device(1, None, &[])],
                None,
            ),
            (
                vec![device(0, Some(500), &[]), device(1, Some(300), &[])],
                Some(800),
            ),
        ];
        for (devices, untainted) in table {
            assert_eq!(
                figures(devices.clone()).untainted_peak_bytes(),
                *untainted,
                "{devices:?}"
            );
        }
    }

    /// A test's share of the allocator: its growth, or its allocations at
    /// their peak where the cache an earlier test left served them.
    #[test]
    fn a_test_adds_its_allocators_growth_or_its_own_allocations() {
        let peaks = |reserved: u64, allocated: u64, start: (u64, u64)| AllocatorPeaks {
            reserved: vec![reserved],
            allocated: vec![allocated],
            reserved_start: vec![start.0],
            allocated_start: vec![start.1],
            allocated_end: Vec::new(),
        };
        let table = [
            // First use: everything is the test's.
            (peaks(200, 200, (0, 0)), Some(200)),
            // Served from a 200 cache: its 150 of allocations.
            (peaks(200, 150, (200, 0)), Some(150)),
            // An earlier test's tensor (50) still held: not this test's.
            (peaks(200, 150, (200, 50)), Some(100)),
            // The cache grew by 500, more than its 400 of allocations.
            (peaks(700, 400, (200, 0)), Some(500)),
            (peaks(200, 0, (200, 0)), Some(0)),
        ];
        for (peaks, added) in table {
            assert_eq!(peaks.added(0), added, "{peaks:?}");
        }
        assert_eq!(peaks(1, 1, (0, 0)).added(1), None);
    }

    /// NVML's figure of a session becomes the sampled one; the figure
    /// judged is the allocator's, or 0 where the session holds nothing
    /// there, or unknown where it holds memory torch did not report.
    #[test]
    fn a_session_tests_figure_is_the_allocators_where_reported() {
        let sampled = |index, bytes: u64| DeviceFigures {
            method: SAMPLED,
            sampled_peak_bytes: Some(bytes),
            ..device(index, Some(bytes), &[])
        };
        let figures = |devices: Vec<DeviceFigures>| GpuFigures {
            peak_bytes: None,
            method: SAMPLED,
            devices,
            left_bytes: None,
            ranks: Default::default(),
            outside: None,
        };
        let reported = AllocatorPeaks {
            reserved: vec![300, 0],
            allocated: vec![250, 0],
            reserved_start: vec![100, 0],
            allocated_start: vec![0, 0],
            allocated_end: vec![64, 0],
        };
        let both = figures(vec![sampled(0, 900), sampled(1, 0)]).per_test(Some(&reported));
        assert_eq!(both.peak_bytes, Some(250));
        assert_eq!(both.left_bytes, Some(64), "what the test kept allocated");
        assert_eq!(both.method, GpuMethod::Allocator);
        assert_eq!(both.devices[0].sampled_peak_bytes, Some(900));
        assert_eq!(
            both.devices[0].device_note,
            Some(DeviceNote::SessionAllocator)
        );
        // torch not reported: a device the session does not use is 0, one
        // it holds memory on is unknown.
        let unreported = figures(vec![sampled(0, 900), sampled(1, 0)]).per_test(None);
        assert_eq!(unreported.peak_bytes, None);
        assert_eq!(unreported.left_bytes, None);
        assert_eq!(unreported.method, GpuMethod::Unavailable);
        assert_eq!(
            unreported.devices[0].device_note,
            Some(DeviceNote::SessionUnreported)
        );
        assert_eq!(unreported.devices[1].peak_bytes, Some(0));
        let untouched = figures(vec![sampled(0, 0)]).per_test(None);
        assert_eq!((untouched.peak_bytes, untouched.method), (Some(0), SAMPLED));
        // In a container, a device's rise during the test stands unless
        // the allocator said more exactly.
        let delta = figures(vec![device(0, Some(400), &[])]).per_test(None);
        assert_eq!(
            (delta.peak_bytes, delta.method),
            (Some(400), GpuMethod::DeviceDelta)
        );
    }

    #[test]
    fn accounting_sums_only_processes_that_overlapped() {
        // One after another: the peak is the larger, not the sum.
        assert_eq!(
            concurrent_peak(&[record(0, 10, 100), record(10, 20, 300), record(20, 30, 200)]),
            300
        );
        // Together: the sum.
        assert_eq!(
            concurrent_peak(&[record(0, 10, 100), record(5, 20, 300)]),
            400
        );
        // A parent with two overlapping children, then a third alone.
        let records = [
            record(0, 100, 50),
            record(10, 30, 100),
            record(20, 40, 100),
            record(50, 60, 500),
        ];
        assert_eq!(concurrent_peak(&records), 550);
        assert_eq!(concurrent_peak(&[]), 0);
    }
}

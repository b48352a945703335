//! What a case's host measurement reports: the method, each floor, and
//! the gated figures (see the module above for what each floor is).

use serde::Serialize;

use crate::measure::cgroup::{CgroupVersion, ChargedPeakSource};

/// How a case's host figure was obtained: which floors it is the largest of.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum HostMethod {
    /// Case cgroup (v1) + PSS + VmHWM + reaped rusage.
    CgroupV1,
    /// Case cgroup (v2) + PSS + VmHWM + reaped rusage.
    CgroupV2,
    /// No cgroup: PSS + VmHWM + reaped rusage.
    ProcfsPss,
    /// A test of a shared pytest session: what it added over the
    /// session's memory at its start (`measure::host::session`).
    PytestSession,
    /// The RSS summed over the tree (oomgate before per-case cgroups);
    /// only ever read back from old locks and results.
    ProcfsRss,
    /// A method this oomgate does not know (a newer one's lock): never
    /// comparable.
    #[serde(other)]
    Unknown,
}

impl Default for HostMethod {
    /// What a file that names no method measured: the RSS sum of the
    /// oomgate that wrote it.
    fn default() -> Self {
        HostMethod::ProcfsRss
    }
}

impl HostMethod {
    pub fn as_str(self) -> &'static str {
        match self {
            HostMethod::CgroupV1 => "cgroup-v1",
            HostMethod::CgroupV2 => "cgroup-v2",
            HostMethod::ProcfsPss => "procfs-pss",
            HostMethod::PytestSession => "pytest-session",
            HostMethod::ProcfsRss => "procfs-rss",
            HostMethod::Unknown => "unknown",
        }
    }

    /// Whether figures of the two methods measure the same thing. Both
    /// cgroup versions take the same floors; without a cgroup, memory no
    /// process maps is not seen; the RSS sum counts shared pages per
    /// process; a test of a shared session is measured by what it added,
    /// not by all its process held.
    pub fn comparable_with(self, other: HostMethod) -> bool {
        use HostMethod::{CgroupV1, CgroupV2, Unknown};
        match (self, other) {
            (Unknown, _) | (_, Unknown) => false,
            (CgroupV1 | CgroupV2, CgroupV1 | CgroupV2) => true,
            (a, b) => a == b,
        }
    }

    /// Whether a case cgroup held the whole case: then its working memory
    /// was read densely and is a gated figure.
    pub fn is_cgroup(self) -> bool {
        matches!(self, HostMethod::CgroupV1 | HostMethod::CgroupV2)
    }

    pub fn of_cgroup(version: CgroupVersion) -> Self {
        match version {
            CgroupVersion::V1 => HostMethod::CgroupV1,
            CgroupVersion::V2 => HostMethod::CgroupV2,
        }
    }
}

impl std::fmt::Display for HostMethod {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One of the floors the gated host peak is the largest of.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum HostFloor {
    CgroupAnonShmem,
    PssSum,
    Vmhwm,
    RusageMaxrss,
    PssAnonShmem,
    /// A test of a shared pytest session: the session's growth plus its
    /// children's private memory, read at ticks.
    SessionTree,
}

impl HostFloor {
    /// In the order a tie is broken: the first wins.
    pub const ALL: [HostFloor; 6] = [
        HostFloor::CgroupAnonShmem,
        HostFloor::PssSum,
        HostFloor::Vmhwm,
        HostFloor::RusageMaxrss,
        HostFloor::PssAnonShmem,
        HostFloor::SessionTree,
    ];

    /// Whether the floor counts file pages, whose residence depends on
    /// what the page cache held (a warm runner maps more of a library than
    /// a cold one): the same workload reads differently on two runners.
    pub fn counts_file_pages(self) -> bool {
        matches!(
            self,
            HostFloor::PssSum | HostFloor::Vmhwm | HostFloor::RusageMaxrss | HostFloor::SessionTree
        )
    }

    pub fn as_str(self) -> &'static str {
        match self {
            HostFloor::CgroupAnonShmem => "cgroup-anon-shmem",
            HostFloor::PssSum => "pss-sum",
            HostFloor::Vmhwm => "vmhwm",
            HostFloor::RusageMaxrss => "rusage-maxrss",
            HostFloor::PssAnonShmem => "pss-anon-shmem",
            HostFloor::SessionTree => "session-tree",
        }
    }

    /// What the floor is, for a reader.
    pub fn describe(self) -> &'static str {
        match self {
            HostFloor::CgroupAnonShmem => "the case cgroup's anonymous + shmem memory",
            HostFloor::PssSum => "the tree's PSS summed",
            HostFloor::Vmhwm => "a live process's VmHWM",
            HostFloor::RusageMaxrss => "an exited process's ru_maxrss",
            HostFloor::PssAnonShmem => "the tree's anonymous + shmem PSS summed",
            HostFloor::SessionTree => "the session's growth with its children's private memory",
        }
    }

    pub(super) fn index(self) -> usize {
        self as usize
    }
}

impl std::fmt::Display for HostFloor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Each floor's peak over the case; `None`: never observed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct HostFloors {
    pub cgroup_anon_shmem_bytes: Option<u64>,
    pub pss_sum_bytes: Option<u64>,
    pub vmhwm_bytes: Option<u64>,
    pub rusage_maxrss_bytes: Option<u64>,
    pub pss_anon_shmem_bytes: Option<u64>,
    /// Only of a test of a shared pytest session.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_tree_bytes: Option<u64>,
}

impl HostFloors {
    /// The observed floors by name, as the lock records them.
    pub fn named(&self) -> std::collections::BTreeMap<String, u64> {
        HostFloor::ALL
            .into_iter()
            .filter_map(|floor| Some((floor.as_str().to_string(), self.get(floor)?)))
            .collect()
    }

    /// Floors read back by name; names of no floor are left out.
    pub fn from_named(named: &std::collections::BTreeMap<String, u64>) -> Self {
        let mut floors = HostFloors::default();
        for floor in HostFloor::ALL {
            let value = named.get(floor.as_str()).copied();
            match floor {
                HostFloor::CgroupAnonShmem => floors.cgroup_anon_shmem_bytes = value,
                HostFloor::PssSum => floors.pss_sum_bytes = value,
                HostFloor::Vmhwm => floors.vmhwm_bytes = value,
                HostFloor::RusageMaxrss => floors.rusage_maxrss_bytes = value,
                HostFloor::PssAnonShmem => floors.pss_anon_shmem_bytes = value,
                HostFloor::SessionTree => floors.session_tree_bytes = value,
            }
        }
        floors
    }

    /// The largest floor observed and its figure: the gated peak (the
    /// first floor in [`HostFloor::ALL`] order wins a tie).
    pub fn largest(&self) -> Option<(HostFloor, u64)> {
        HostFloor::ALL
            .into_iter()
            .filter_map(|floor| Some((floor, self.get(floor)?)))
            .fold(None, |best, (floor, bytes)| match best {
                Some((_, b)) if b >= bytes => best,
                _ => Some((floor, bytes)),
            })
    }

    pub fn get(&self, floor: HostFloor) -> Option<u64> {
        match floor {
            HostFloor::CgroupAnonShmem => self.cgroup_anon_shmem_bytes,
            HostFloor::PssSum => self.pss_sum_bytes,
            HostFloor::Vmhwm => self.vmhwm_bytes,
            HostFloor::RusageMaxrss => self.rusage_maxrss_bytes,
            HostFloor::PssAnonShmem => self.pss_anon_shmem_bytes,
            HostFloor::SessionTree => self.session_tree_bytes,
        }
    }
}

/// What a run's host figures cannot promise, or why they were not taken
/// the way the run takes them, as data; `report::words::host_notes`
/// words it (results.json's `host_note`).
#[derive(Debug, Clone, PartialEq)]
pub enum HostNote {
    /// The memory cgroup of the case (`client`: of its load client) could
    /// not be made: measured from /proc.
    NoCgroup { client: bool, error: String },
    /// An instance could not join the case's cgroup: measured from /proc.
    NotJoined { instance: String, error: String },
    /// A tree of more than `tree` processes was swept for PSS and VmHWM
    /// only every `gap`, to keep the sweeps within `cpu_share` of a core.
    SweptEvery {
        tree: usize,
        gap: std::time::Duration,
        cpu_share: f64,
    },
    /// The case cgroup could not be removed (a process stuck in the
    /// kernel).
    CgroupNotRemoved { error: String },
    /// A test of a shared session: the session's VmHWM could not be reset,
    /// so it is no figure of the test.
    HwmNotReset { pid: i32, error: String },
    /// A server case's load client never started: its server did not
    /// start (`server_started` false) or was not ready.
    ClientNotStarted { server_started: bool },
}

/// The host figures of one run of a case.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HostFigures {
    pub method: HostMethod,
    /// The gated peak: the largest floor. `None` when no floor was observed.
    pub peak_bytes: Option<u64>,
    pub peak_at_ms: Option<u64>,
    /// The floor that set the peak.
    pub peak_source: Option<HostFloor>,
    pub floors: HostFloors,
    /// The working memory's peak: the case cgroup's anonymous + shmem
    /// charge, where the cgroup held the whole case and so read it every
    /// [`super::WORKING_READ_INTERVAL`]; `None` otherwise (without a cgroup
    /// it is only sampled by the paced sweeps, and not gated). Not the PSS
    /// sweep's `pss-anon-shmem`: that is a sum over processes read one
    /// after another, which counts a shared page twice while another
    /// process attaches to it (a tensor shared by three processes read
    /// 1384 MiB against the cgroup's exact 1360 MiB).
    pub working_peak_bytes: Option<u64>,
    /// The cgroup's largest charge, page cache included (not gated).
    pub charged_peak_bytes: Option<u64>,
    pub charged_peak_source: Option<ChargedPeakSource>,
    /// Processes of the case killed by the kernel's OOM killer (cgroup
    /// methods only; `None` without a cgroup).
    pub oom_kills: Option<u64>,
    /// PSS/VmHWM sweeps made (they are paced).
    pub pss_sweeps: u64,
    /// Why this case was not measured the way the run was, and what its
    /// figures cannot promise.
    #[serde(skip)]
    pub notes: Vec<HostNote>,
    /// Each rank's host peak: its own processes' floors (their PSS summed,
    /// their largest VmHWM), not the case's cgroup.
    #[serde(skip)]
    pub ranks: std::collections::BTreeMap<u32, u64>,
    /// A test of a shared session: the session's resident set at its
    /// start, and what it held at its end beyond that. `None` otherwise.
    pub start_bytes: Option<u64>,
    pub left_bytes: Option<u64>,
}

impl HostFigures {
    /// Nothing observed, to be measured by `method`.
    pub fn unmeasured(method: HostMethod) -> Self {
        HostFigures {
            method,
            peak_bytes: None,
            peak_at_ms: None,
            peak_source: None,
            floors: HostFloors::default(),
            working_peak_bytes: None,
            charged_peak_bytes: None,
            charged_peak_source: None,
            oom_kills: None,
            pss_sweeps: 0,
            notes: Vec::new(),
            ranks: Default::default(),
            start_bytes: None,
            left_bytes: None,
        }
    }
}

//! Ranks: the processes of a distributed case, each measured.
//!
//! A process whose environment has `RANK` (torchrun, accelerate), else
//! `OMPI_COMM_WORLD_RANK` (mpirun), `PMI_RANK`, `SLURM_PROCID` (srun) or
//! `LOCAL_RANK`, is that rank's, and so are the processes it starts
//! (they inherit the variable): a rank is a process subtree. The launcher
//! itself has none. [`RankOf`] reads `/proc/PID/environ` once per process
//! (the environment a process was started with) and forgets processes that
//! left the tree; [`PerRank`] sums a figure per rank at each tick and keeps
//! each rank's peak, and where it was.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde::{Deserialize, Serialize};

use super::procfs::ProcessTree;

/// The variables that name a process's rank, in the order they are trusted.
pub const RANK_VARIABLES: [&str; 5] = [
    "RANK",
    "OMPI_COMM_WORLD_RANK",
    "PMI_RANK",
    "SLURM_PROCID",
    "LOCAL_RANK",
];

/// A process's rank, read once.
#[derive(Debug, Default)]
pub struct RankOf {
    known: HashMap<i32, Option<u32>>,
}

impl RankOf {
    /// The rank of a process of the tree; `None`: it has none (or is gone).
    pub fn rank(&mut self, pid: i32) -> Option<u32> {
        *self.known.entry(pid).or_insert_with(|| {
            std::fs::read(format!("/proc/{pid}/environ"))
                .ok()
                .and_then(|environ| rank_in(&environ))
        })
    }

    /// Forget the processes no longer in the tree (their pid may come back
    /// as another process's).
    pub fn keep_only(&mut self, tree: &ProcessTree) {
        if self.known.len() > tree.len() {
            let members: std::collections::HashSet<i32> = tree.pids().collect();
            self.known.retain(|pid, _| members.contains(pid));
        }
    }
}

/// The rank a process environment (`NAME=value\0...`) names.
pub fn rank_in(environ: &[u8]) -> Option<u32> {
    let mut found: [Option<u32>; RANK_VARIABLES.len()] = [None; RANK_VARIABLES.len()];
    for entry in environ.split(|b| *b == 0) {
        let Some(at) = entry.iter().position(|b| *b == b'=') else {
            continue;
        };
        let (name, value) = (&entry[..at], &entry[at + 1..]);
        if let Some(slot) = RANK_VARIABLES.iter().position(|v| v.as_bytes() == name) {
            found[slot] = std::str::from_utf8(value)
                .ok()
                .and_then(|v| v.trim().parse().ok());
        }
    }
    found.into_iter().flatten().next()
}

/// A figure summed per rank at each tick, and each rank's peak.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PerRank {
    now: BTreeMap<u32, u64>,
    /// Where this tick's bytes were (GPU indexes).
    places_now: BTreeMap<u32, BTreeSet<u32>>,
    peaks: BTreeMap<u32, u64>,
    /// Where each rank's bytes were at its peak.
    places: BTreeMap<u32, BTreeSet<u32>>,
}

impl PerRank {
    /// A new tick.
    pub fn begin(&mut self) {
        self.now.clear();
        self.places_now.clear();
    }

    /// `bytes` of `rank` this tick, on `place` (a GPU's index) if any.
    pub fn add(&mut self, rank: u32, bytes: u64, place: Option<u32>) {
        let now = self.now.entry(rank).or_default();
        *now = now.saturating_add(bytes);
        if let Some(place) = place.filter(|_| bytes > 0) {
            self.places_now.entry(rank).or_default().insert(place);
        }
    }

    /// The tick is complete: raise each rank's peak.
    pub fn end(&mut self) {
        for (&rank, &bytes) in &self.now {
            let peak = self.peaks.entry(rank).or_default();
            if bytes > *peak || !self.places.contains_key(&rank) {
                *peak = (*peak).max(bytes);
                self.places.insert(
                    rank,
                    self.places_now.get(&rank).cloned().unwrap_or_default(),
                );
            }
        }
    }

    /// Each rank's figure this tick.
    pub fn now(&self) -> impl Iterator<Item = (u32, u64)> + '_ {
        self.now.iter().map(|(&rank, &bytes)| (rank, bytes))
    }

    /// The largest rank's figure this tick.
    pub fn largest_now(&self) -> Option<(u32, u64)> {
        self.now
            .iter()
            .map(|(&rank, &bytes)| (rank, bytes))
            .max_by_key(|&(rank, bytes)| (bytes, std::cmp::Reverse(rank)))
    }

    /// Each rank's peak, and where it was.
    pub fn peaks(&self) -> impl Iterator<Item = (u32, u64, Vec<u32>)> + '_ {
        self.peaks.iter().map(|(&rank, &bytes)| {
            let places = self
                .places
                .get(&rank)
                .map(|p| p.iter().copied().collect())
                .unwrap_or_default();
            (rank, bytes, places)
        })
    }
}

/// One rank's figures, as results.json reports them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct RankFigures {
    pub rank: u32,
    /// Its own subtree's host floors: the largest of its processes' PSS
    /// summed and their largest `VmHWM` (not the case's cgroup).
    pub host_peak_bytes: Option<u64>,
    /// The peak of its processes' GPU memory summed over every device.
    pub gpu_peak_bytes: Option<u64>,
    /// The GPUs (NVML indexes) its memory was on at that peak.
    pub devices: Vec<u32>,
    /// Its own torch memory snapshot's largest allocation sites
    /// (`memory_snapshot.rank-N.pickle`), when it left one.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub allocation_sites: Vec<crate::snapshot::Site>,
    /// Its GPU memory outside the allocator (`measure::outside`): the
    /// largest, and at the moment its NVML figure was largest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outside_allocator_peak_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outside_allocator_bytes: Option<u64>,
}

/// Each rank's own allocation sites into its figures (a rank that left a
/// snapshot but was never measured gets an entry of its own).
pub fn attach_sites(
    ranks: &mut Vec<RankFigures>,
    by_rank: &BTreeMap<u32, Vec<crate::snapshot::Site>>,
) {
    for (&rank, sites) in by_rank {
        match ranks.iter_mut().find(|r| r.rank == rank) {
            Some(figures) => figures.allocation_sites = sites.clone(),
            None => ranks.push(RankFigures {
                rank,
                allocation_sites: sites.clone(),
                ..RankFigures::default()
            }),
        }
    }
    ranks.sort_by_key(|r| r.rank);
}

/// Each rank's memory outside the allocator into its figures.
pub fn attach_outside(
    ranks: &mut Vec<RankFigures>,
    by_rank: &BTreeMap<u32, crate::measure::outside::Outside>,
) {
    for (&rank, outside) in by_rank {
        let at = match ranks.iter().position(|r| r.rank == rank) {
            Some(at) => at,
            None => {
                ranks.push(RankFigures {
                    rank,
                    ..RankFigures::default()
                });
                ranks.len() - 1
            }
        };
        ranks[at].outside_allocator_peak_bytes = Some(outside.peak_bytes);
        ranks[at].outside_allocator_bytes = Some(outside.bytes);
    }
    ranks.sort_by_key(|r| r.rank);
}

/// The host and GPU figures of each rank, merged by rank.
pub fn merge(host: &BTreeMap<u32, u64>, gpu: Option<&PerRank>) -> Vec<RankFigures> {
    let mut ranks: BTreeMap<u32, RankFigures> = BTreeMap::new();
    for (&rank, &bytes) in host {
        let entry = ranks.entry(rank).or_insert_with(|| RankFigures {
            rank,
            ..RankFigures::default()
        });
        entry.host_peak_bytes = Some(bytes);
    }
    for (rank, bytes, devices) in gpu.into_iter().flat_map(PerRank::peaks) {
        let entry = ranks.entry(rank).or_insert_with(|| RankFigures {
            rank,
            ..RankFigures::default()
        });
        entry.gpu_peak_bytes = Some(bytes);
        entry.devices = devices;
    }
    ranks.into_values().collect()
}

/// How one rank's GPU peak moved against its baseline.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RankChange {
    pub rank: u32,
    pub before: u64,
    pub after: u64,
    /// The sites of that rank that grew most against the same rank's
    /// locked ones, when both left a snapshot.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sites: Vec<crate::snapshot::SiteChange>,
}

/// How many of a rank's grown sites a regression names.
const GROWN_RANK_SITES: usize = 3;

/// The rank whose GPU peak grew most from `before` to `after` (rank
/// compared with the same rank); `None` when none grew.
pub fn grew_most(before: &[RankFigures], after: &[RankFigures]) -> Option<RankChange> {
    after
        .iter()
        .filter_map(|now| {
            let locked = before.iter().find(|b| b.rank == now.rank)?;
            let (was, is) = (locked.gpu_peak_bytes?, now.gpu_peak_bytes?);
            (is > was).then(|| RankChange {
                rank: now.rank,
                before: was,
                after: is,
                sites: crate::snapshot::grown_sites(
                    &locked.allocation_sites,
                    &now.allocation_sites,
                    crate::snapshot::RANK_SITES,
                    GROWN_RANK_SITES,
                ),
            })
        })
        .max_by_key(|c| (c.after - c.before, std::cmp::Reverse(c.rank)))
}

/// The rank with the largest GPU peak (else host peak), for a report's
/// one line.
pub fn largest(ranks: &[RankFigures]) -> Option<&RankFigures> {
    ranks.iter().max_by_key(|r| {
        (
            r.gpu_peak_bytes,
            r.host_peak_bytes,
            std::cmp::Reverse(r.rank),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rank_is_read_from_the_first_variable_that_names_one() {
        assert_eq!(rank_in(b"PATH=/bin\0RANK=3\0LOCAL_RANK=1\0"), Some(3));
        assert_eq!(rank_in(b"LOCAL_RANK=1\0SLURM_PROCID=7\0"), Some(7));
        assert_eq!(rank_in(b"OMPI_COMM_WORLD_RANK=2\0"), Some(2));
        assert_eq!(
            rank_in(b"RANK=x\0LOCAL_RANK=4\0"),
            Some(4),
            "garbage is no rank"
        );
        assert_eq!(rank_in(b"PATH=/bin\0MYRANK=3\0"), None);
        assert_eq!(rank_in(b""), None);
    }

    #[test]
    fn each_ranks_peak_is_its_own_ticks_sum() {
        let mut ranks = PerRank::default();
        ranks.begin();
        ranks.add(0, 100, Some(0));
        ranks.add(1, 300, Some(1));
        ranks.add(1, 50, Some(2));
        ranks.end();
        assert_eq!(ranks.largest_now(), Some((1, 350)));
        ranks.begin();
        ranks.add(0, 400, Some(0));
        ranks.end();
        let peaks: Vec<_> = ranks.peaks().collect();
        assert_eq!(peaks, [(0, 400, vec![0]), (1, 350, vec![1, 2])]);
    }
}

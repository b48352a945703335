//! What a torch memory snapshot is summarised into: the allocation sites
//! live at the case's GPU peak ([`AllocationSites`], each a [`Site`]), and
//! how they changed against the baseline's ([`SiteGrowth`]). Plain data,
//! below the reader (`mod.rs`) and the summariser (`summary`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The most sites results.json keeps per case (the largest).
pub const MAX_SITES: usize = 200;
/// The most sites the lock keeps per case.
pub const LOCKED_SITES: usize = 50;
/// The most sites report.html draws per case.
pub const CHARTED_SITES: usize = 10;
/// How many sites each rank keeps (results.json's and the lock's
/// `ranks[].allocation_sites`).
pub const RANK_SITES: usize = 10;

/// What the snapshots a case left say about its allocations.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct AllocationSites {
    /// The snapshot files read, relative to the case's folder.
    pub files: Vec<String>,
    /// Whether the sites are those live at each device's peak (its trace
    /// replayed) or at the dump (no trace recorded, or a file too large).
    pub from: SitesFrom,
    /// The trace had lost its start: the peak is estimated.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub estimated: bool,
    /// Devices the snapshots cover.
    pub devices: usize,
    /// Allocated bytes at the peak (or the dump), every device and rank.
    pub allocated_bytes: u64,
    /// Reserved by the caching allocator at the dump (its segments).
    pub reserved_bytes: u64,
    /// Reserved less allocated, at the dump.
    pub fragmentation_bytes: u64,
    /// Reserved by CUDA graph pools (or other private pools).
    #[serde(skip_serializing_if = "is_zero")]
    pub graph_pool_bytes: u64,
    /// The allocator's settings, as the snapshot records them.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub allocator_settings: BTreeMap<String, String>,
    /// Largest first.
    pub sites: Vec<Site>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
    /// Each rank's own sites (a `memory_snapshot.rank-N.pickle`), its
    /// largest [`RANK_SITES`]; they go to the case's `ranks[]`.
    #[serde(skip)]
    pub by_rank: BTreeMap<u32, Vec<Site>>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// Where the sites were taken.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SitesFrom {
    /// Live at each device's peak, its trace replayed.
    #[default]
    Peak,
    /// Live when the snapshot was dumped.
    Dump,
}

/// An allocation site: the user's frame(s) that allocated, and what its
/// allocations held.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Site {
    /// `model.py:88 attention` (with `sites = { depth = N }`, N frames
    /// joined by ` ← `, innermost first).
    pub site: String,
    pub bytes: u64,
    /// Blocks live from it.
    pub count: u64,
}

impl AllocationSites {
    /// Another rank's (or file's) summary added: sites and totals summed.
    pub(super) fn add(&mut self, other: AllocationSites, already: bool) {
        if !already {
            let files = std::mem::take(&mut self.files);
            let notes = std::mem::take(&mut self.notes);
            *self = other;
            self.files = files;
            self.notes.splice(0..0, notes);
            return;
        }
        self.estimated |= other.estimated;
        if other.from == SitesFrom::Dump {
            self.from = SitesFrom::Dump;
        }
        self.devices += other.devices;
        self.allocated_bytes = self.allocated_bytes.saturating_add(other.allocated_bytes);
        self.reserved_bytes = self.reserved_bytes.saturating_add(other.reserved_bytes);
        self.fragmentation_bytes = self
            .fragmentation_bytes
            .saturating_add(other.fragmentation_bytes);
        self.graph_pool_bytes = self.graph_pool_bytes.saturating_add(other.graph_pool_bytes);
        for (key, value) in other.allocator_settings {
            self.allocator_settings.entry(key).or_insert(value);
        }
        self.sites.extend(other.sites);
        self.notes.extend(other.notes);
    }
}

/// How a case's sites changed against its baseline's.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct SiteGrowth {
    /// Sites that grew, most first (new ones with `before` 0).
    pub grown: Vec<SiteChange>,
    /// Allocator settings that changed: key, before, after.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub settings: Vec<(String, String, String)>,
}

/// One site's change.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SiteChange {
    pub site: String,
    pub before: u64,
    pub after: u64,
    /// Not among the baseline's sites.
    #[serde(skip_serializing_if = "std::ops::Not::not", default)]
    pub new: bool,
}

/// The sites that grew most from `before` to `after` (at most `limit`),
/// and the allocator settings that changed. A site missing from `before`
/// is new, unless the baseline kept only its largest sites and this one
/// is smaller than the least of them (then it may have been there).
pub fn grown(before: &AllocationSites, after: &AllocationSites, limit: usize) -> SiteGrowth {
    let grown = grown_sites(&before.sites, &after.sites, LOCKED_SITES, limit);
    let mut settings = Vec::new();
    for (key, value) in &after.allocator_settings {
        if let Some(old) = before.allocator_settings.get(key) {
            if old != value {
                settings.push((key.clone(), old.clone(), value.clone()));
            }
        }
    }
    SiteGrowth { grown, settings }
}

/// The sites of `after` that grew most against `before` (largest first,
/// at most `limit`), which kept its largest `kept`: a site missing from a
/// full `before` and smaller than the least of it may have been there,
/// and is not called new.
pub fn grown_sites(before: &[Site], after: &[Site], kept: usize, limit: usize) -> Vec<SiteChange> {
    let floor = if before.len() >= kept {
        before.last().map_or(0, |s| s.bytes)
    } else {
        0
    };
    let mut grown: Vec<SiteChange> = after
        .iter()
        .filter_map(|site| {
            let old = before.iter().find(|s| s.site == site.site);
            match old {
                Some(old) if site.bytes > old.bytes => Some(SiteChange {
                    site: site.site.clone(),
                    before: old.bytes,
                    after: site.bytes,
                    new: false,
                }),
                Some(_) => None,
                None if site.bytes > floor => Some(SiteChange {
                    site: site.site.clone(),
                    before: 0,
                    after: site.bytes,
                    new: true,
                }),
                None => None,
            }
        })
        .collect();
    grown.sort_by_key(|c| std::cmp::Reverse(c.after - c.before));
    grown.truncate(limit);
    grown
}

impl SiteGrowth {
    pub fn is_empty(&self) -> bool {
        self.grown.is_empty() && self.settings.is_empty()
    }

    /// One line: `model.py:88 attention +500.0 MiB (400.0 MiB → 900.0 MiB); new: ...`.
    pub fn describe(&self) -> String {
        let mut parts: Vec<String> = self
            .grown
            .iter()
            .map(|c| {
                if c.new {
                    format!("{} new, {}", c.site, crate::units::Bytes(c.after))
                } else {
                    format!(
                        "{} +{} ({} → {})",
                        c.site,
                        crate::units::Bytes(c.after - c.before),
                        crate::units::Bytes(c.before),
                        crate::units::Bytes(c.after)
                    )
                }
            })
            .collect();
        parts.extend(
            self.settings
                .iter()
                .map(|(key, old, new)| format!("allocator {key} {old} → {new}")),
        );
        parts.join("; ")
    }
}

//! Splitting a suite's cases across CI shards: `--partition count:M/N` or
//! `hash:M/N`, with nextest's syntax and meaning.
//!
//! - `count:M/N` deals the cases round-robin in the suite's expanded order
//!   (after filters): case *i* (from 0) goes to shard *i mod N + 1*. Shards
//!   are balanced to one case, but adding a case moves the ones after it.
//! - `hash:M/N` puts a case in shard *h(id) mod N + 1*, with *h* the 64-bit
//!   FNV-1a of the case id: a case stays in its shard when others are added
//!   or removed, at the price of less even shards.
//!
//! The split depends on nothing but the cases and the partition: never on
//! past results or the machine, so every shard computes the same split.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use super::case::Case;

/// How cases are dealt to shards.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PartitionKind {
    Count,
    Hash,
}

/// One shard of a split: `index` of `total`, both from 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Partition {
    pub kind: PartitionKind,
    pub index: u32,
    pub total: u32,
}

impl Partition {
    /// Whether the case at `position` (from 0, in the suite's expanded
    /// order after filters) with this id belongs to this shard.
    pub fn holds(&self, position: usize, id: &str) -> bool {
        let total = u64::from(self.total);
        let shard = match self.kind {
            PartitionKind::Count => position as u64 % total,
            PartitionKind::Hash => super::template::fnv1a(id.as_bytes()) % total,
        };
        shard + 1 == u64::from(self.index)
    }

    /// This shard's cases, in their order.
    pub fn select<'s>(&self, cases: &[&'s Case]) -> Vec<&'s Case> {
        cases
            .iter()
            .enumerate()
            .filter(|(position, case)| self.holds(*position, &case.id))
            .map(|(_, case)| *case)
            .collect()
    }
}

impl fmt::Display for PartitionKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            PartitionKind::Count => "count",
            PartitionKind::Hash => "hash",
        })
    }
}

impl fmt::Display for Partition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}/{}", self.kind, self.index, self.total)
    }
}

impl FromStr for Partition {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let usage = || {
            format!(
                "`{text}` is not a partition: write count:M/N or hash:M/N, with 1 <= M <= N (e.g. count:2/4)"
            )
        };
        let (kind, shard) = text.split_once(':').ok_or_else(usage)?;
        let kind = match kind {
            "count" => PartitionKind::Count,
            "hash" => PartitionKind::Hash,
            _ => return Err(usage()),
        };
        let (index, total) = shard.split_once('/').ok_or_else(usage)?;
        let number = |part: &str| part.trim().parse::<u32>().map_err(|_| usage());
        let (index, total) = (number(index)?, number(total)?);
        if total == 0 || index == 0 || index > total {
            return Err(usage());
        }
        Ok(Partition { kind, index, total })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partitions_parse_as_nextest_writes_them() {
        assert_eq!(
            "count:2/4".parse(),
            Ok(Partition {
                kind: PartitionKind::Count,
                index: 2,
                total: 4
            })
        );
        assert_eq!(
            "hash:1/1".parse::<Partition>().map(|p| p.to_string()),
            Ok("hash:1/1".to_string())
        );
        for bad in [
            "count:0/4",
            "count:5/4",
            "count:1/0",
            "count:1",
            "slice:1/2",
            "count:a/2",
            "1/2",
            "",
        ] {
            assert!(bad.parse::<Partition>().is_err(), "{bad}");
        }
    }

    /// Every case is in exactly one shard, for both kinds and any count.
    #[test]
    fn shards_cover_every_case_once() {
        let ids: Vec<String> = (0..101).map(|i| format!("case-{i}")).collect();
        for kind in [PartitionKind::Count, PartitionKind::Hash] {
            for total in 1..=7 {
                for (position, id) in ids.iter().enumerate() {
                    let shards = (1..=total)
                        .filter(|&index| Partition { kind, index, total }.holds(position, id))
                        .count();
                    assert_eq!(shards, 1, "{id} in {kind:?} /{total}");
                }
            }
        }
    }

    #[test]
    fn count_deals_round_robin_and_hash_ignores_position() {
        let count = |index| Partition {
            kind: PartitionKind::Count,
            index,
            total: 3,
        };
        let dealt: Vec<u32> = (0..7)
            .map(|position| {
                (1..=3)
                    .find(|&i| count(i).holds(position, "x"))
                    .unwrap_or(0)
            })
            .collect();
        assert_eq!(dealt, [1, 2, 3, 1, 2, 3, 1]);
        let hash = Partition {
            kind: PartitionKind::Hash,
            index: 1,
            total: 3,
        };
        assert_eq!(hash.holds(0, "train-bs64"), hash.holds(99, "train-bs64"));
    }
}

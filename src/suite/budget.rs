//! Budgets: hard limits on a case's memory figures, each kind declared
//! once, here.
//!
//! [`BudgetKind`] is the one list of budgets. Its key (`gpu_rank`), the
//! value it takes (a size or a share), where it may be set, whether a
//! merge may judge it again from recorded figures, and the word a case
//! failing it gets are its methods, each an exhaustive `match`; the suite
//! reads budgets by kind, the judge (`judge::limits`) reads each kind's
//! figure and judges it, and `report::words` words it, each matching every
//! kind with no catch-all arm. So adding a budget is a variant here and
//! an arm in each of those two files, and forgetting one does not
//! compile (docs/architecture.md, "Adding a limit").
//!
//! [`Budget`] keeps one named field per kind rather than a map: the code
//! that reads one budget (`budget.gpu_left` for the settle wait) says
//! which, and [`Budget::get`] / [`Budget::set`] serve the code that walks
//! them all.

use crate::units::Bytes;
use crate::vocabulary::FailureType;

/// Declares [`BudgetKind`] with its keys: the list of budgets, spelled
/// once, in the order the keys are listed to users (serde's valid keys,
/// the pytest marker's keywords).
macro_rules! budget_kinds {
    ($($(#[$doc:meta])* $kind:ident = $key:literal,)+) => {
        /// One kind of budget: a key of `budget = { ... }`.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum BudgetKind {
            $($(#[$doc])* $kind,)+
        }

        impl BudgetKind {
            /// How many kinds there are.
            pub const COUNT: usize = [$($key),+].len();
            /// Every kind, in the order the keys are listed.
            pub const ALL: [BudgetKind; Self::COUNT] = [$(BudgetKind::$kind),+];
            /// Every key, in that order.
            pub const KEYS: [&'static str; Self::COUNT] = [$($key),+];

            /// Its key in `budget = { ... }`: `gpu_rank`.
            pub const fn key(self) -> &'static str {
                match self {
                    $(BudgetKind::$kind => $key,)+
                }
            }

            /// `budget.gpu_rank`: how the suite's errors and a case's
            /// definition name it.
            pub const fn name(self) -> &'static str {
                match self {
                    $(BudgetKind::$kind => concat!("budget.", $key),)+
                }
            }
        }
    };
}

budget_kinds! {
    /// On the case's gated host peak: the largest of the kernel's floors
    /// (docs/host-measurement.md).
    Host = "host",
    /// On the case's GPU peak, all its devices together.
    Gpu = "gpu",
    /// Headroom: on each device, a share of its memory (checked per
    /// device: `budget.gpu_fraction.gpu<N>`).
    GpuFraction = "gpu_fraction",
    /// After the case: GPU memory its devices did not give back.
    GpuLeft = "gpu_left",
    /// On any one rank of a distributed case.
    GpuRank = "gpu_rank",
    /// On the GPU memory the case's processes held outside the
    /// framework's allocator (the CUDA context, NCCL, CUDA graphs), its
    /// peak (`measure::outside`).
    GpuOutsideAllocator = "gpu_outside_allocator",
}

/// What a budget's value is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Takes {
    /// A size: `"512 MiB"` or a number of bytes.
    Size,
    /// A share of a device's memory: `0.9` or `"90%"`, above 0, at most 1.
    Share,
}

impl BudgetKind {
    /// The kind of `key`, if it is a budget's.
    pub fn from_key(key: &str) -> Option<BudgetKind> {
        BudgetKind::ALL.into_iter().find(|kind| kind.key() == key)
    }

    /// What its value is.
    pub fn takes(self) -> Takes {
        match self {
            BudgetKind::GpuFraction => Takes::Share,
            BudgetKind::Host
            | BudgetKind::Gpu
            | BudgetKind::GpuLeft
            | BudgetKind::GpuRank
            | BudgetKind::GpuOutsideAllocator => Takes::Size,
        }
    }

    /// Whether it is on a GPU figure: a case with `gpus = 0` may not have
    /// it.
    pub fn needs_gpu(self) -> bool {
        match self {
            BudgetKind::Host => false,
            BudgetKind::Gpu
            | BudgetKind::GpuFraction
            | BudgetKind::GpuLeft
            | BudgetKind::GpuRank
            | BudgetKind::GpuOutsideAllocator => true,
        }
    }

    /// Whether a test of a shared pytest session can be judged by it: its
    /// figure is the test's alone there (the host's growth; torch's
    /// allocator peak during the test, and the device's size for a
    /// fraction). Not `gpu_left`: the session keeps the allocator's cache
    /// after the test. Not `gpu_rank`: ranks are processes of their own.
    /// Not `gpu_outside_allocator`: the session's context and every test's
    /// cache are in its process's NVML figure.
    pub fn judged_in_a_session(self) -> bool {
        match self {
            BudgetKind::Host | BudgetKind::Gpu | BudgetKind::GpuFraction => true,
            BudgetKind::GpuLeft | BudgetKind::GpuRank | BudgetKind::GpuOutsideAllocator => false,
        }
    }

    /// Why a server case's `client_budget` may not have it; `None`: it
    /// may (the client's own figure is judged).
    pub fn not_for_a_client(self) -> Option<&'static str> {
        match self {
            BudgetKind::GpuLeft => Some(
                "`gpu_left` is the case's: what its GPUs did not give back once the server and its client are gone; put it in `budget`",
            ),
            BudgetKind::GpuOutsideAllocator => Some(
                "`gpu_outside_allocator` is the case's: the probe's reports are set against the server's processes and the client's alike; put it in `budget`",
            ),
            BudgetKind::Host | BudgetKind::Gpu | BudgetKind::GpuFraction | BudgetKind::GpuRank => {
                None
            }
        }
    }

    /// Whether `oomgate merge --suite` may judge it again from the
    /// figures a part recorded, when the suite changed it since. A rank's
    /// budget needs each tick's figures, which results do not keep.
    pub fn judged_again(self) -> bool {
        match self {
            BudgetKind::Host
            | BudgetKind::Gpu
            | BudgetKind::GpuFraction
            | BudgetKind::GpuLeft
            | BudgetKind::GpuOutsideAllocator => true,
            BudgetKind::GpuRank => false,
        }
    }

    /// The word of a case that failed it (`failure_kind`).
    pub fn failure(self) -> FailureType {
        match self {
            BudgetKind::Host
            | BudgetKind::Gpu
            | BudgetKind::GpuRank
            | BudgetKind::GpuOutsideAllocator => FailureType::Budget,
            BudgetKind::GpuFraction => FailureType::Headroom,
            BudgetKind::GpuLeft => FailureType::GpuLeft,
        }
    }

    /// `order`, checked when compiled to hold every kind once: for code
    /// that walks the kinds in an order of its own (the judge's checks,
    /// `oomgate list`). A kind left out is an array of the wrong length;
    /// one named twice fails the constant's evaluation.
    pub const fn every_once(order: [BudgetKind; Self::COUNT]) -> [BudgetKind; Self::COUNT] {
        let mut seen = [false; Self::COUNT];
        let mut at = 0;
        while at < Self::COUNT {
            let kind = order[at] as usize;
            assert!(!seen[kind], "a budget kind is named twice");
            seen[kind] = true;
            at += 1;
        }
        order
    }
}

/// A budget's value.
#[derive(Clone, Copy, PartialEq)]
pub enum BudgetValue {
    Size(Bytes),
    Share(f64),
}

/// As the value itself (`Bytes(536870912)`, `0.9`): a case's definition
/// hashes this text, and it must not change with the wrapper.
impl std::fmt::Debug for BudgetValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BudgetValue::Size(bytes) => bytes.fmt(f),
            BudgetValue::Share(share) => share.fmt(f),
        }
    }
}

/// Hard limits; a breach stops the case at once.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Budget {
    /// On the case's gated host peak: the largest of the kernel's floors
    /// (the case cgroup's anon + shmem charge, the tree's PSS sum, the
    /// largest VmHWM, reaped children's rusage; docs/host-measurement.md).
    pub host: Option<Bytes>,
    /// On the case's GPU peak, all its devices together.
    pub gpu: Option<Bytes>,
    /// Headroom: on each device, the case's peak may not exceed this share
    /// of the device's memory less its driver's reserve (0 < f <= 1).
    pub gpu_fraction: Option<f64>,
    /// After the case: GPU memory its devices did not give back (above
    /// their idle level once its processes are gone), checked once.
    pub gpu_left: Option<Bytes>,
    /// On any one rank of a distributed case: its processes' GPU memory
    /// summed over its devices (see `measure::ranks`).
    pub gpu_rank: Option<Bytes>,
    /// On the GPU memory outside the framework's allocator, its peak
    /// (NVML's per-process figure less the probe's `reserved`).
    pub gpu_outside_allocator: Option<Bytes>,
}

impl Budget {
    /// The limit of `kind`, when set.
    pub fn get(&self, kind: BudgetKind) -> Option<BudgetValue> {
        match kind {
            BudgetKind::Host => self.host.map(BudgetValue::Size),
            BudgetKind::Gpu => self.gpu.map(BudgetValue::Size),
            BudgetKind::GpuFraction => self.gpu_fraction.map(BudgetValue::Share),
            BudgetKind::GpuLeft => self.gpu_left.map(BudgetValue::Size),
            BudgetKind::GpuRank => self.gpu_rank.map(BudgetValue::Size),
            BudgetKind::GpuOutsideAllocator => self.gpu_outside_allocator.map(BudgetValue::Size),
        }
    }

    /// Set the limit of `kind`, or clear it (`None`, or a value of the
    /// form the kind does not take: see [`BudgetKind::takes`]).
    pub fn set(&mut self, kind: BudgetKind, value: Option<BudgetValue>) {
        let size = match value {
            Some(BudgetValue::Size(bytes)) => Some(bytes),
            _ => None,
        };
        let share = match value {
            Some(BudgetValue::Share(share)) => Some(share),
            _ => None,
        };
        match kind {
            BudgetKind::Host => self.host = size,
            BudgetKind::Gpu => self.gpu = size,
            BudgetKind::GpuFraction => self.gpu_fraction = share,
            BudgetKind::GpuLeft => self.gpu_left = size,
            BudgetKind::GpuRank => self.gpu_rank = size,
            BudgetKind::GpuOutsideAllocator => self.gpu_outside_allocator = size,
        }
    }

    /// Only the limits `oomgate merge --suite` judges again from recorded
    /// figures ([`BudgetKind::judged_again`]).
    pub fn judged_again(self) -> Budget {
        let mut budget = self;
        for kind in BudgetKind::ALL.into_iter().filter(|k| !k.judged_again()) {
            budget.set(kind, None);
        }
        budget
    }

    /// Each kind's limit from `self`, else from `under`.
    pub fn over(self, under: Budget) -> Budget {
        let mut budget = under;
        for kind in BudgetKind::ALL {
            if let Some(value) = self.get(kind) {
                budget.set(kind, Some(value));
            }
        }
        budget
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_is_read_and_set_by_its_key() {
        for kind in BudgetKind::ALL {
            assert_eq!(BudgetKind::from_key(kind.key()), Some(kind));
            assert_eq!(kind.name(), format!("budget.{}", kind.key()));
            let value = match kind.takes() {
                Takes::Size => BudgetValue::Size(Bytes(7)),
                Takes::Share => BudgetValue::Share(0.5),
            };
            let mut budget = Budget::default();
            budget.set(kind, Some(value));
            assert_eq!(budget.get(kind), Some(value), "{kind:?}");
            // Only its own field.
            let others = BudgetKind::ALL.into_iter().filter(|k| *k != kind);
            assert!(others.clone().all(|k| budget.get(k).is_none()), "{kind:?}");
            assert_eq!(Budget::default().over(budget), budget);
            assert_eq!(budget.over(Budget::default()), budget);
        }
        assert_eq!(BudgetKind::from_key("vram"), None);
        let every = BudgetKind::ALL
            .into_iter()
            .fold(Budget::default(), |mut b, kind| {
                let value = match kind.takes() {
                    Takes::Size => BudgetValue::Size(Bytes(7)),
                    Takes::Share => BudgetValue::Share(0.5),
                };
                b.set(kind, Some(value));
                b
            });
        let again = every.judged_again();
        for kind in BudgetKind::ALL {
            assert_eq!(again.get(kind).is_some(), kind.judged_again(), "{kind:?}");
        }
    }

    /// A definition hashes `format!("{:?}", budget.get(kind))`: the same
    /// text as the field it replaced.
    #[test]
    fn a_value_debugs_as_the_field_did() {
        let budget = Budget {
            host: Some(Bytes(512)),
            gpu_fraction: Some(0.9),
            ..Budget::default()
        };
        assert_eq!(
            format!("{:?}", budget.get(BudgetKind::Host)),
            format!("{:?}", budget.host)
        );
        assert_eq!(
            format!("{:?}", budget.get(BudgetKind::GpuFraction)),
            format!("{:?}", budget.gpu_fraction)
        );
        assert_eq!(format!("{:?}", budget.get(BudgetKind::Gpu)), "None");
    }
}

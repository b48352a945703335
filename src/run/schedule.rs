//! Which case starts next, and on which GPUs of the pool: pure bookkeeping,
//! no process and no NVML, so every rule is unit tested.
//!
//! The rules (see docs/scale-out.md):
//! - **Order.** Cases start longest first, by their wall time in a past
//!   run ([`launch_order`]): the longest case is not left to start last,
//!   alone, after every other one finished. Cases with no past time start
//!   first, in the suite's order (one of them may be the longest).
//! - **Fit.** A case starts when fewer than `jobs` cases run and the pool
//!   has what it needs: `gpus = N` GPUs nobody holds (the first free
//!   ones, by position in the pool). A case that does not fit yet waits
//!   and the next one in the order that fits starts instead.
//! - **Packing** (`--pack`): a one-GPU case whose peak is known (the
//!   lock's, or the suite's `gpu_memory`) may join other packed cases on a
//!   GPU when their reservations — each peak plus [`pack_margin`] — fit the
//!   device's memory; the fullest GPU that fits is taken, leaving others
//!   whole for cases that need one. A case retried alone after failing
//!   packed takes a whole GPU like an unpacked one.

use std::collections::HashMap;

use crate::units::Bytes;

/// One GPU of the pool (`run --gpus`), as `oomgate gpus` lists it. Reads
/// as its [`GpuInfo`](crate::measure::nvml::GpuInfo).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolGpu {
    /// Position in NVML's usable device table.
    pub position: usize,
    pub gpu: crate::measure::nvml::GpuInfo,
}

impl std::ops::Deref for PoolGpu {
    type Target = crate::measure::nvml::GpuInfo;

    fn deref(&self) -> &crate::measure::nvml::GpuInfo {
        &self.gpu
    }
}

/// How the cases of a run are scheduled.
#[derive(Debug, Clone)]
pub struct Schedule {
    /// The GPUs cases are given one by one (`--gpus`); `None`: every case
    /// sees the GPUs oomgate sees, and GPU cases run one at a time unless
    /// `jobs` says otherwise.
    pub pool: Option<Vec<PoolGpu>>,
    /// Most cases running at once (`--jobs`), at least 1.
    pub jobs: usize,
    /// Several cases may share a pool GPU (`--pack`).
    pub pack: bool,
    /// Each case's wall time in a past run, by case id (longest first).
    pub past_wall_s: HashMap<String, f64>,
}

impl Default for Schedule {
    fn default() -> Self {
        Schedule {
            pool: None,
            jobs: 1,
            pack: false,
            past_wall_s: HashMap::new(),
        }
    }
}

impl Schedule {
    /// Whether more than one case may run at once.
    pub fn parallel(&self) -> bool {
        self.jobs > 1
    }
}

/// The memory kept free beside a packed case's known peak: a tenth of it,
/// and at least 512 MiB (a CUDA context and allocator slack that a peak
/// recorded by process may not show).
pub fn pack_margin(peak: u64) -> u64 {
    (peak / 10).max(Bytes::from_mib(512).get())
}

/// The order cases start in: those without a past wall time first, in
/// the given order, then the rest longest first (ties in the given order).
pub fn launch_order(ids: &[&str], past_wall_s: &HashMap<String, f64>) -> Vec<usize> {
    let mut order: Vec<usize> = (0..ids.len()).collect();
    let key = |i: &usize| past_wall_s.get(ids[*i]).copied().filter(|s| s.is_finite());
    // A stable sort: `None` (no past time) before any time, then descending.
    order.sort_by(|a, b| match (key(a), key(b)) {
        (None, None) => std::cmp::Ordering::Equal,
        (None, Some(_)) => std::cmp::Ordering::Less,
        (Some(_), None) => std::cmp::Ordering::Greater,
        (Some(x), Some(y)) => y.total_cmp(&x),
    });
    order
}

/// What a case asks of the scheduler.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Demand {
    /// Whole GPUs of the pool; 0 without a pool or for a host-only case.
    pub gpus: u32,
    /// With packing: the memory to reserve on a shared GPU (peak plus
    /// margin); `None`: the case takes whole GPUs.
    pub packed_bytes: Option<u64>,
}

/// Where a started case runs.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Placement {
    /// Positions in the pool.
    pub gpus: Vec<usize>,
    /// Packed: the memory it reserves on its GPU, which other packed
    /// cases may share; `None`: its GPUs are its own.
    pub reserved: Option<u64>,
}

impl Placement {
    /// Whether the case may share its GPU with other packed cases.
    pub fn packed(&self) -> bool {
        self.reserved.is_some()
    }
}

#[derive(Debug, Clone, Copy)]
struct Waiting {
    case: usize,
    /// Retried alone after failing packed: whole GPUs only.
    alone: bool,
}

#[derive(Debug, Clone)]
struct Slot {
    total: u64,
    /// Memory reserved by the packed cases on it.
    reserved: u64,
    /// Cases running on it now.
    tenants: Vec<usize>,
    /// Held whole by one unpacked case.
    whole: bool,
}

/// Cases waiting and running, and what each pool GPU holds.
#[derive(Debug)]
pub struct Scheduler {
    waiting: Vec<Waiting>,
    slots: Vec<Slot>,
    running: usize,
    /// Of those running, the cases queued behind another on its worker
    /// ([`Scheduler::follow`]): not counted against `jobs` until they lead.
    following: usize,
    jobs: usize,
    pooled: bool,
}

impl Scheduler {
    /// `order`: case numbers in the order they should start.
    pub fn new(order: Vec<usize>, pool: Option<&[PoolGpu]>, jobs: usize) -> Self {
        Scheduler {
            waiting: order
                .into_iter()
                .map(|case| Waiting { case, alone: false })
                .collect(),
            slots: pool
                .unwrap_or_default()
                .iter()
                .map(|gpu| Slot {
                    total: gpu.total_bytes,
                    reserved: 0,
                    tenants: Vec::new(),
                    whole: false,
                })
                .collect(),
            running: 0,
            following: 0,
            jobs: jobs.max(1),
            pooled: pool.is_some(),
        }
    }

    /// The first waiting case (in order) that can start now, where, and
    /// whether it is a retry alone; `None` when none can. `demand` says
    /// what a case needs (`alone`: it may not be packed).
    pub fn next(
        &mut self,
        demand: impl Fn(usize, bool) -> Demand,
    ) -> Option<(usize, Placement, bool)> {
        if self.running.saturating_sub(self.following) >= self.jobs {
            return None;
        }
        for at in 0..self.waiting.len() {
            let Waiting { case, alone } = self.waiting[at];
            let wanted = demand(case, alone);
            let Some(placement) = self.fit(wanted, alone) else {
                continue;
            };
            self.waiting.remove(at);
            for &gpu in &placement.gpus {
                let slot = &mut self.slots[gpu];
                slot.tenants.push(case);
                match placement.reserved {
                    Some(bytes) => slot.reserved = slot.reserved.saturating_add(bytes),
                    None => slot.whole = true,
                }
            }
            self.running += 1;
            return Some((case, placement, alone));
        }
        None
    }

    fn fit(&self, demand: Demand, alone: bool) -> Option<Placement> {
        if !self.pooled || demand.gpus == 0 {
            return Some(Placement::default());
        }
        // A reservation no GPU of the pool could ever hold is no reason to
        // wait forever: the case takes a whole GPU, as unpacked.
        let largest = self.slots.iter().map(|s| s.total).max().unwrap_or(0);
        let packable = demand
            .packed_bytes
            .filter(|&bytes| demand.gpus == 1 && !alone && bytes <= largest);
        if let Some(bytes) = packable {
            // The fullest GPU it fits on, leaving emptier ones whole.
            return self
                .slots
                .iter()
                .enumerate()
                .filter(|(_, s)| !s.whole && s.reserved.saturating_add(bytes) <= s.total)
                .max_by_key(|(at, s)| (s.reserved, std::cmp::Reverse(*at)))
                .map(|(at, _)| Placement {
                    gpus: vec![at],
                    reserved: Some(bytes),
                });
        }
        let free: Vec<usize> = self
            .slots
            .iter()
            .enumerate()
            .filter(|(_, s)| s.tenants.is_empty())
            .map(|(at, _)| at)
            .take(demand.gpus as usize)
            .collect();
        (free.len() == demand.gpus as usize).then_some(Placement {
            gpus: free,
            reserved: None,
        })
    }

    /// The first waiting case, when `follows` says it may be queued behind
    /// a case running now, on that case's worker (a shared session's next
    /// test: it needs no GPU of the pool and runs in the same process):
    /// taken as started, outside the `jobs` limit until it leads
    /// ([`Scheduler::lead`]). Never a retry alone, and never out of order.
    pub fn follow(&mut self, follows: impl Fn(usize) -> bool) -> Option<usize> {
        let first = self.waiting.first()?;
        if first.alone || !follows(first.case) {
            return None;
        }
        let case = self.waiting.remove(0).case;
        self.running += 1;
        self.following += 1;
        Some(case)
    }

    /// A case queued behind another now leads on its worker (the one
    /// before ended), or was not started after all: counted against
    /// `jobs` as any running case.
    pub fn lead(&mut self) {
        self.following = self.following.saturating_sub(1);
    }

    /// A case ended: its GPUs and its job are free again.
    pub fn finished(&mut self, case: usize, placement: &Placement) {
        self.running = self.running.saturating_sub(1);
        for &gpu in &placement.gpus {
            let Some(slot) = self.slots.get_mut(gpu) else {
                continue;
            };
            slot.tenants.retain(|&c| c != case);
            match placement.reserved {
                Some(bytes) => slot.reserved = slot.reserved.saturating_sub(bytes),
                None => slot.whole = false,
            }
        }
    }

    /// A case whose thread died without stopping what it started: its job
    /// is free, its GPUs are not (its processes may still hold them).
    pub fn lost(&mut self, placement: &Placement) {
        self.running = self.running.saturating_sub(1);
        for &gpu in &placement.gpus {
            // Still its tenant, and whole: nobody is placed there again.
            if let Some(slot) = self.slots.get_mut(gpu) {
                slot.whole = true;
            }
        }
    }

    /// Run a case again, alone, before any other waiting case.
    pub fn retry_alone(&mut self, case: usize) {
        self.waiting.insert(0, Waiting { case, alone: true });
    }

    /// The cases running on a pool GPU now.
    pub fn tenants(&self, gpu: usize) -> &[usize] {
        self.slots.get(gpu).map_or(&[], |s| s.tenants.as_slice())
    }

    /// The first case waiting for its first start (a retry alone reuses
    /// its folder): most likely the next to start.
    pub fn first_waiting(&self) -> Option<usize> {
        self.waiting.iter().find(|w| !w.alone).map(|w| w.case)
    }

    /// Nothing runs.
    pub fn idle(&self) -> bool {
        self.running == 0
    }

    /// The waiting cases, in order, taken out (they will not run).
    pub fn drain_waiting(&mut self) -> Vec<usize> {
        self.waiting.drain(..).map(|w| w.case).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1 << 30;

    fn pool(n: usize, total: u64) -> Vec<PoolGpu> {
        (0..n)
            .map(|i| PoolGpu {
                position: i,
                gpu: crate::measure::nvml::GpuInfo {
                    index: i as u32,
                    uuid: format!("GPU-{i}"),
                    name: "Fake".into(),
                    total_bytes: total,
                    reserved_bytes: None,
                    accounting: None,
                    persistence: None,
                    mig: None,
                    mig_parent: None,
                },
            })
            .collect()
    }

    fn whole(gpus: u32) -> Demand {
        Demand {
            gpus,
            packed_bytes: None,
        }
    }

    #[test]
    fn unknown_times_start_first_then_longest_first() {
        let past: HashMap<String, f64> = [("a", 1.0), ("b", 9.0), ("d", 5.0), ("e", 9.0)]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect();
        let order = launch_order(&["a", "b", "c", "d", "e", "f"], &past);
        assert_eq!(order, vec![2, 5, 1, 4, 3, 0]);
        assert_eq!(launch_order(&["x", "y"], &HashMap::new()), vec![0, 1]);
    }

    #[test]
    fn one_gpu_cases_fill_the_pool_and_never_share() {
        let gpus = pool(4, 80 * GIB);
        let mut scheduler = Scheduler::new((0..8).collect(), Some(&gpus), 8);
        let mut started = Vec::new();
        while let Some((case, placement, _)) = scheduler.next(|_, _| whole(1)) {
            started.push((case, placement));
        }
        assert_eq!(started.len(), 4, "four GPUs, four cases");
        let mut used: Vec<usize> = started.iter().flat_map(|(_, p)| p.gpus.clone()).collect();
        used.sort_unstable();
        assert_eq!(used, vec![0, 1, 2, 3]);
        let (case, placement) = started.remove(1);
        scheduler.finished(case, &placement);
        let (next, again, _) = scheduler.next(|_, _| whole(1)).expect("a GPU is free");
        assert_eq!((next, again.gpus.clone()), (4, placement.gpus.clone()));
        assert!(scheduler.next(|_, _| whole(1)).is_none());
    }

    #[test]
    fn a_follower_waits_outside_the_jobs_limit_until_it_leads() {
        let mut s = Scheduler::new(vec![0, 1, 2, 3], None, 1);
        let none = |_, _| Demand {
            gpus: 0,
            packed_bytes: None,
        };
        assert_eq!(s.next(none).map(|n| n.0), Some(0));
        // Case 1 queued behind 0: the job limit is not spent on it.
        assert_eq!(s.follow(|c| c == 1), Some(1));
        // Only the first waiting case may follow, and only if it may.
        assert_eq!(s.follow(|c| c == 3), None);
        assert_eq!(s.next(none), None);
        // 0 ends: 1 leads, and still no other case starts (jobs = 1).
        s.finished(0, &Placement::default());
        s.lead();
        assert_eq!(s.next(none), None);
        assert_eq!(s.follow(|_| true), Some(2));
        s.finished(1, &Placement::default());
        s.lead();
        s.finished(2, &Placement::default());
        assert!(s.idle());
        assert_eq!(s.next(none).map(|n| n.0), Some(3));
    }

    #[test]
    fn jobs_cap_cases_even_without_gpus() {
        let mut scheduler = Scheduler::new((0..5).collect(), None, 2);
        let first = scheduler.next(|_, _| whole(0)).expect("first");
        let second = scheduler.next(|_, _| whole(0)).expect("second");
        assert!(scheduler.next(|_, _| whole(0)).is_none(), "two jobs");
        assert_eq!((first.0, second.0), (0, 1));
        scheduler.finished(0, &first.1);
        assert_eq!(scheduler.next(|_, _| whole(0)).map(|n| n.0), Some(2));
    }

    #[test]
    fn a_case_that_does_not_fit_waits_and_the_next_that_fits_starts() {
        let gpus = pool(2, 80 * GIB);
        let mut scheduler = Scheduler::new(vec![0, 1, 2], Some(&gpus), 8);
        let demand = |case: usize, _| whole(if case == 1 { 2 } else { 1 });
        let (a, pa, _) = scheduler.next(demand).expect("case 0");
        assert_eq!(a, 0);
        let (b, _, _) = scheduler.next(demand).expect("case 2 fits beside it");
        assert_eq!(b, 2, "case 1 needs both GPUs and waits");
        assert!(scheduler.next(demand).is_none());
        scheduler.finished(a, &pa);
        assert!(scheduler.next(demand).is_none(), "one GPU is still held");
        assert_eq!(scheduler.tenants(1), &[2]);
    }

    #[test]
    fn packed_cases_share_while_reservations_fit_and_whole_gpus_stay_whole() {
        let gpus = pool(2, 10 * GIB);
        let mut scheduler = Scheduler::new((0..5).collect(), Some(&gpus), 8);
        let packed = |bytes: u64| Demand {
            gpus: 1,
            packed_bytes: Some(bytes),
        };
        // 0, 1, 2 reserve 4 GiB each; 3 needs a whole GPU; 4 reserves 4 GiB.
        let demand = |case: usize, alone: bool| match case {
            3 => whole(1),
            _ if alone => whole(1),
            _ => packed(4 * GIB),
        };
        let (c0, p0, _) = scheduler.next(demand).expect("0");
        let (c1, p1, _) = scheduler.next(demand).expect("1");
        assert_eq!(p0.gpus, p1.gpus, "the fullest GPU that fits");
        assert!(p0.packed() && p1.packed());
        let (c2, p2, _) = scheduler.next(demand).expect("2");
        assert_ne!(p2.gpus, p0.gpus, "12 GiB do not fit in 10");
        // 3 needs a GPU nobody holds: none is left; 4 packs beside 2.
        let (c4, p4, _) = scheduler.next(demand).expect("4");
        assert_eq!((c4, &p4.gpus), (4, &p2.gpus));
        assert!(scheduler.next(demand).is_none());
        for (case, placement) in [(c0, &p0), (c1, &p1)] {
            scheduler.finished(case, placement);
        }
        let (c3, p3, _) = scheduler.next(demand).expect("3 gets the emptied GPU");
        assert_eq!((c3, p3.packed()), (3, false));
        // A retry alone never packs, and waits for a GPU of its own.
        scheduler.retry_alone(c2);
        assert!(scheduler.next(demand).is_none());
        scheduler.finished(c4, &p4);
        scheduler.finished(c2, &p2);
        let (again, placement, alone) = scheduler.next(demand).expect("the retry");
        assert_eq!((again, placement.packed(), alone), (c2, false, true));
        assert!(scheduler.idle() || scheduler.tenants(placement.gpus[0]) == [c2]);
    }

    #[test]
    fn a_reservation_no_gpu_holds_takes_a_whole_gpu_instead_of_waiting_forever() {
        let gpus = pool(2, 8 * GIB);
        let mut scheduler = Scheduler::new(vec![0, 1], Some(&gpus), 8);
        let huge = |_, _| Demand {
            gpus: 1,
            packed_bytes: Some(9 * GIB),
        };
        let (_, first, _) = scheduler.next(huge).expect("a whole GPU");
        let (_, second, _) = scheduler.next(huge).expect("the other");
        assert!(!first.packed() && !second.packed());
        assert_ne!(first.gpus, second.gpus);
    }

    #[test]
    fn a_lost_case_frees_its_job_but_not_its_gpus() {
        let gpus = pool(1, 8 * GIB);
        let mut scheduler = Scheduler::new(vec![0, 1], Some(&gpus), 8);
        let (_, placement, _) = scheduler.next(|_, _| whole(1)).expect("first");
        scheduler.lost(&placement);
        assert!(scheduler.idle());
        assert!(
            scheduler.next(|_, _| whole(1)).is_none(),
            "the GPU stays held"
        );
        assert_eq!(scheduler.drain_waiting(), vec![1]);
    }

    #[test]
    fn the_margin_is_a_tenth_and_at_least_512_mib() {
        assert_eq!(pack_margin(GIB), 512 << 20);
        assert_eq!(pack_margin(40 * GIB), 4 * GIB);
    }
}

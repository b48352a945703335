//! Which candidate to run next: binary search over an ordered range (the
//! commits from a good one to a bad one, the versions between two), and
//! delta debugging over a set of changes. Pure: the caller runs each
//! candidate and answers with its [`Verdict`].
//!
//! A candidate that cannot be judged (it does not build, install or
//! start, or fails for a reason that is not memory) is [`Verdict::Skip`]:
//! it is stepped around, never blamed (`git bisect run`'s exit 125).

use std::collections::BTreeMap;

pub use crate::results::bisect::Verdict;

/// Where a binary search over positions `0..=last` stands: position 0
/// is good and `last` bad, both proved before.
#[derive(Debug, Clone)]
pub struct Bisection {
    /// The latest position known good.
    good: usize,
    /// The earliest position known bad.
    bad: usize,
    skipped: Vec<usize>,
}

impl Bisection {
    /// A search between a good position 0 and a bad position `last`.
    pub fn new(last: usize) -> Self {
        Bisection {
            good: 0,
            bad: last,
            skipped: Vec::new(),
        }
    }

    /// The next position to run: the middle of what is left, or the
    /// nearest to it not skipped; `None` when nothing is left to run.
    pub fn next(&self) -> Option<usize> {
        if self.bad <= self.good + 1 {
            return None;
        }
        let middle = self.good + (self.bad - self.good) / 2;
        // Outwards from the middle, the later side first at each distance
        // (as git does not, but as reproducibly).
        (0..self.bad - self.good)
            .flat_map(|distance| [middle + distance, middle.wrapping_sub(distance)])
            .find(|&at| at > self.good && at < self.bad && !self.skipped.contains(&at))
    }

    /// Up to `k` positions to run at once (a GPU pool): they split what
    /// is left into `k + 1` nearly equal parts (`k = 1`: [`Self::next`]).
    pub fn next_batch(&self, k: usize) -> Vec<usize> {
        if k <= 1 {
            return self.next().into_iter().collect();
        }
        let open: Vec<usize> = (self.good + 1..self.bad)
            .filter(|at| !self.skipped.contains(at))
            .collect();
        if open.len() <= k {
            return open;
        }
        let mut batch: Vec<usize> = (1..=k).map(|j| open[open.len() * j / (k + 1)]).collect();
        batch.dedup();
        batch
    }

    /// Take the verdicts of a batch run at once: each in order of
    /// position, so that the earliest bad one stands.
    pub fn record_all(&mut self, verdicts: &[(usize, Verdict)]) {
        let mut sorted = verdicts.to_vec();
        sorted.sort_unstable_by_key(|(at, _)| *at);
        for (at, verdict) in sorted.iter().filter(|(_, v)| *v == Verdict::Skip) {
            self.record(*at, *verdict);
        }
        // The earliest bad first: a good one after it says nothing.
        if let Some((at, _)) = sorted.iter().find(|(_, v)| *v == Verdict::Bad) {
            self.record(*at, Verdict::Bad);
        }
        for (at, verdict) in sorted.iter().rev().filter(|(_, v)| *v == Verdict::Good) {
            self.record(*at, *verdict);
        }
    }

    /// Take one position's verdict.
    pub fn record(&mut self, at: usize, verdict: Verdict) {
        match verdict {
            Verdict::Good if at > self.good && at < self.bad => self.good = at,
            Verdict::Bad if at > self.good && at < self.bad => self.bad = at,
            Verdict::Skip => self.skipped.push(at),
            _ => {}
        }
    }

    /// The last good and first bad positions, once the search is over;
    /// the positions between them were all skipped (the first bad is one
    /// of them, or `first_bad` itself).
    pub fn answer(&self) -> Answer {
        let mut between: Vec<usize> = self
            .skipped
            .iter()
            .copied()
            .filter(|&at| at > self.good && at < self.bad)
            .collect();
        between.sort_unstable();
        Answer {
            last_good: self.good,
            first_bad: self.bad,
            skipped_between: between,
        }
    }

    /// Every position skipped so far, in order.
    pub fn skipped(&self) -> Vec<usize> {
        let mut skipped = self.skipped.clone();
        skipped.sort_unstable();
        skipped
    }
}

/// Where a bisection ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    pub last_good: usize,
    pub first_bad: usize,
    /// Positions between the two that could not be judged: when any, the
    /// first bad is one of them or `first_bad`.
    pub skipped_between: Vec<usize>,
}

/// ⌈log2 n⌉: the most runs a binary search needs to find one of `n`
/// candidates when none is skipped.
pub fn log2_bound(n: usize) -> u32 {
    match n {
        0 | 1 => 0,
        n => usize::BITS - (n - 1).leading_zeros(),
    }
}

/// Delta debugging (Zeller's ddmin): the smallest subset of `0..n` that
/// `test` still finds bad, given that the whole set is bad. A subset
/// `test` skips (it does not install, resolve or run) counts as not
/// reproducing; each subset is tested at most once. An error from `test`
/// (an interrupt) ends the search.
pub fn ddmin<E>(
    n: usize,
    mut test: impl FnMut(&[usize]) -> Result<Verdict, E>,
) -> Result<Vec<usize>, E> {
    let mut seen: BTreeMap<Vec<usize>, Verdict> = BTreeMap::new();
    let mut check = |subset: &[usize]| -> Result<bool, E> {
        let verdict = match seen.get(subset) {
            Some(verdict) => *verdict,
            None => {
                let verdict = test(subset)?;
                seen.insert(subset.to_vec(), verdict);
                verdict
            }
        };
        Ok(verdict == Verdict::Bad)
    };
    let mut current: Vec<usize> = (0..n).collect();
    let mut parts = 2usize;
    while current.len() >= 2 {
        let chunks = split(&current, parts);
        let mut reduced = false;
        for chunk in &chunks {
            if check(chunk)? {
                current = chunk.clone();
                parts = 2;
                reduced = true;
                break;
            }
        }
        if !reduced && chunks.len() > 2 {
            for chunk in &chunks {
                let complement: Vec<usize> = current
                    .iter()
                    .copied()
                    .filter(|i| !chunk.contains(i))
                    .collect();
                if check(&complement)? {
                    current = complement;
                    parts = (parts - 1).max(2);
                    reduced = true;
                    break;
                }
            }
        }
        if !reduced {
            if parts >= current.len() {
                break;
            }
            parts = (parts * 2).min(current.len());
        }
    }
    Ok(current)
}

/// `items` in `parts` runs of nearly equal length, in order.
fn split(items: &[usize], parts: usize) -> Vec<Vec<usize>> {
    let parts = parts.clamp(1, items.len().max(1));
    let mut chunks = Vec::with_capacity(parts);
    let mut start = 0;
    for part in 0..parts {
        let end = start + (items.len() - start) / (parts - part);
        chunks.push(items[start..end].to_vec());
        start = end;
    }
    chunks
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Run a bisection of positions `0..=last` where the first bad one
    /// is `first_bad` and `skips` cannot be judged; the answer and the
    /// positions run.
    fn search(last: usize, first_bad: usize, skips: &[usize]) -> (Answer, Vec<usize>) {
        let mut bisection = Bisection::new(last);
        let mut ran = Vec::new();
        while let Some(at) = bisection.next() {
            ran.push(at);
            let verdict = match (skips.contains(&at), at >= first_bad) {
                (true, _) => Verdict::Skip,
                (false, true) => Verdict::Bad,
                (false, false) => Verdict::Good,
            };
            bisection.record(at, verdict);
        }
        (bisection.answer(), ran)
    }

    #[test]
    fn finds_every_first_bad_within_the_bound() {
        for last in 1..40 {
            for first_bad in 1..=last {
                let (answer, ran) = search(last, first_bad, &[]);
                assert_eq!(answer.first_bad, first_bad, "last {last}");
                assert_eq!(answer.last_good, first_bad - 1);
                assert!(answer.skipped_between.is_empty());
                // Positions 1..last-1 are the candidates left to tell.
                assert!(
                    ran.len() as u32 <= log2_bound(last),
                    "{} runs for {last} positions",
                    ran.len()
                );
            }
        }
    }

    #[test]
    fn steps_around_what_cannot_be_judged_and_never_blames_it() {
        // The middle of 0..=16 is 8, and 8 does not build.
        let (answer, ran) = search(16, 11, &[8]);
        assert_eq!((answer.last_good, answer.first_bad), (10, 11));
        assert_eq!(ran[0], 8);
        assert_eq!(ran[1], 9, "the nearest to the middle next");
        // The first bad itself cannot be judged: the answer says which
        // positions it may be.
        let (answer, _) = search(16, 11, &[11, 12]);
        assert_eq!((answer.last_good, answer.first_bad), (10, 13));
        assert_eq!(answer.skipped_between, vec![11, 12]);
        // Nothing between can be judged.
        let (answer, ran) = search(4, 2, &[1, 2, 3]);
        assert_eq!((answer.last_good, answer.first_bad), (0, 4));
        assert_eq!(ran.len(), 3);
    }

    /// A search of `0..=last` run `k` at a time; the answer and how many
    /// batches it took.
    fn search_k(last: usize, first_bad: usize, k: usize) -> (Answer, usize) {
        let mut bisection = Bisection::new(last);
        let mut batches = 0;
        loop {
            let batch = bisection.next_batch(k);
            if batch.is_empty() {
                break;
            }
            assert!(batch.len() <= k);
            batches += 1;
            let verdicts: Vec<(usize, Verdict)> = batch
                .iter()
                .map(|&at| {
                    (
                        at,
                        if at >= first_bad {
                            Verdict::Bad
                        } else {
                            Verdict::Good
                        },
                    )
                })
                .collect();
            bisection.record_all(&verdicts);
        }
        (bisection.answer(), batches)
    }

    #[test]
    fn a_pool_runs_a_k_way_split_in_fewer_rounds() {
        for last in 2..60 {
            for first_bad in 1..=last {
                let (answer, rounds) = search_k(last, first_bad, 3);
                assert_eq!(
                    (answer.last_good, answer.first_bad),
                    (first_bad - 1, first_bad)
                );
                // log base 4 of the positions left, rounded up.
                let bound = ((last - 1) as f64).log(4.0).ceil() as usize + 1;
                assert!(rounds <= bound, "{rounds} rounds for {last} (k = 3)");
            }
        }
        assert_eq!(Bisection::new(10).next_batch(1), vec![5]);
        assert_eq!(Bisection::new(3).next_batch(4), vec![1, 2]);
    }

    #[test]
    fn a_batch_keeps_the_earliest_bad() {
        // Noise: 6 bad, 8 good: the good one after a bad says nothing.
        let mut bisection = Bisection::new(10);
        bisection.record_all(&[(8, Verdict::Good), (6, Verdict::Bad), (3, Verdict::Good)]);
        assert_eq!(bisection.next_batch(8), vec![4, 5]);
    }

    #[test]
    fn the_bound_is_the_ceiling_of_log2() {
        let bounds: Vec<u32> = [0, 1, 2, 3, 4, 5, 8, 9, 98].map(log2_bound).to_vec();
        assert_eq!(bounds, vec![0, 0, 1, 2, 2, 3, 3, 4, 7]);
    }

    /// ddmin over `n` changes where the growth needs all of `culprits`
    /// and `broken` subsets do not install; the answer and the tests run.
    fn minimise(n: usize, culprits: &[usize], broken: &[&[usize]]) -> (Vec<usize>, usize) {
        let mut runs = 0;
        let found = ddmin(n, |subset| {
            runs += 1;
            Ok::<_, ()>(if broken.contains(&subset) {
                Verdict::Skip
            } else if culprits.iter().all(|c| subset.contains(c)) {
                Verdict::Bad
            } else {
                Verdict::Good
            })
        });
        (found.expect("no error"), runs)
    }

    #[test]
    fn ddmin_finds_one_change_and_a_pair_that_only_grows_together() {
        assert_eq!(minimise(6, &[4], &[]).0, vec![4]);
        assert_eq!(minimise(1, &[0], &[]).0, vec![0]);
        let (pair, runs) = minimise(5, &[0, 3], &[]);
        assert_eq!(pair, vec![0, 3]);
        assert!(runs <= 20, "{runs} runs");
        // A pair alone in the set is found as itself, neither alone.
        assert_eq!(minimise(2, &[0, 1], &[]).0, vec![0, 1]);
        // A subset that does not install is stepped around.
        assert_eq!(minimise(4, &[2], &[&[2, 3]]).0, vec![2]);
    }

    #[test]
    fn ddmin_tests_no_subset_twice() {
        let mut tested = Vec::new();
        let found = ddmin(8, |subset| {
            assert!(!tested.contains(&subset.to_vec()), "{subset:?} twice");
            tested.push(subset.to_vec());
            Ok::<_, ()>(if subset.contains(&1) && subset.contains(&6) {
                Verdict::Bad
            } else {
                Verdict::Good
            })
        });
        assert_eq!(found, Ok(vec![1, 6]));
    }
}

//! Stopping what is left of a case: SIGTERM (and SIGCONT) to every
//! instance group and descendant, a grace period, SIGKILL, and reaping, so
//! nothing of the case survives it.

use std::thread;
use std::time::{Duration, Instant};

use super::case::CaseRunner;
use super::instance::Instance;
use crate::measure::cgroup::CaseCgroup;
use crate::process;

/// How often the stop procedure checks whether everything has exited.
const STOP_POLL: Duration = Duration::from_millis(20);
/// After SIGKILL, how long to wait for the kernel to tear processes down.
const KILL_SETTLE: Duration = Duration::from_secs(5);

impl CaseRunner<'_, '_> {
    /// The case's processes still running once every instance's workload
    /// ended, `supervisors` (instances' supervisors staying with what their
    /// workload left) not counted. When the case cgroup held the whole
    /// case, is empty (subtree included) and oomgate has no live child —
    /// so no descendant left the cgroup either: its top ancestor would have
    /// been re-parented to oomgate or to a supervisor — none, with no need
    /// to read every process on the host; otherwise a full scan.
    pub(super) fn live_processes(
        &mut self,
        cgroup: Option<&CaseCgroup>,
        supervisors: &[i32],
    ) -> usize {
        let proven_empty = cgroup.is_some_and(|c| c.is_empty().unwrap_or(false))
            && process::no_live_children(self.forkserver_pid());
        if proven_empty {
            0
        } else {
            self.limit_scan(supervisors);
            self.live_descendants(supervisors)
        }
    }

    /// Descendants still running but `supervisors`, read with a full scan
    /// (a skipped process must not survive a case), within the scan's
    /// scope (see `CaseRunner::limit_scan`).
    pub(super) fn live_descendants(&mut self, supervisors: &[i32]) -> usize {
        self.scanner
            .all_descendants_of(process::self_pid())
            .map(|tree| {
                tree.alive()
                    .filter(|p| !supervisors.contains(&p.pid))
                    .count()
            })
            .unwrap_or(0)
    }

    /// SIGTERM (and SIGCONT, so a stopped process can act on it) to every
    /// instance group and descendant, up to `grace` for them to exit, then
    /// SIGKILL; collect every exit status and reap re-parented orphans, so
    /// nothing of the case survives it. Returns the supervisor pids of
    /// instances that did not exit even after SIGKILL (stuck in the
    /// kernel), and the largest `ru_maxrss` (bytes) of the orphans reaped.
    ///
    /// `cgroup`: the case's cgroup when every process of the case is in it;
    /// an empty one then proves the case left nothing without reading
    /// every process on the host. `gone`: the caller has just found that
    /// nothing of the case runs, supervisors included.
    pub(super) fn stop_everything(
        &mut self,
        instances: &mut [Instance],
        signal: i32,
        grace: Duration,
        cgroup: Option<&CaseCgroup>,
        gone: bool,
    ) -> (Vec<i32>, u64) {
        let stopped = self.stop_tree(instances, signal, grace, cgroup, gone);
        // With cases at once, a process whose supervisor was killed from
        // outside is re-parented to oomgate, out of every case's scope; it
        // is still in the case's cgroup, which is emptied by force. (One
        // case at a time, the scans see every descendant of oomgate.)
        if let Some(cgroup) = cgroup.filter(|_| self.scoped) {
            if !cgroup.is_empty().unwrap_or(false) {
                crate::measure::cgroup::clear::empty_by_force(&cgroup.dir, KILL_SETTLE).ok();
            }
        }
        stopped
    }

    /// [`Self::stop_everything`] through the process tree.
    fn stop_tree(
        &mut self,
        instances: &mut [Instance],
        signal: i32,
        grace: Duration,
        cgroup: Option<&CaseCgroup>,
        gone: bool,
    ) -> (Vec<i32>, u64) {
        // Every supervisor, also those staying with what an ended run left:
        // each leads a process group.
        let leaders = |instances: &[Instance]| -> Vec<i32> {
            instances.iter().flat_map(Instance::supervisors).collect()
        };
        let mut maxrss = 0;
        if leaders(instances).is_empty() && (gone || self.live_processes(cgroup, &[]) == 0) {
            // Nothing of the case runs, and no supervisor: whatever child
            // of oomgate is left is a zombie orphan of the case — unless
            // other cases run, whose supervisors are oomgate's children
            // too (the run reaps such orphans once every case is over).
            let reaped = if self.scoped {
                0
            } else {
                process::reap_exited_children(self.forkserver_pid())
            };
            return (Vec::new(), reaped);
        }
        let groups = leaders(instances);
        self.limit_scan(&groups);
        for signal in [signal, libc::SIGCONT] {
            for &group in &groups {
                process::signal_group(group, signal);
            }
            process::signal_descendants(&mut self.scanner, signal, &groups);
        }
        let grace_end = Instant::now()
            .checked_add(grace)
            .unwrap_or_else(Instant::now);
        loop {
            for instance in instances.iter_mut() {
                instance.poll();
            }
            self.limit_scan(&leaders(instances));
            maxrss = maxrss.max(process::reap_adopted(
                &mut self.scanner,
                &leaders(instances),
            ));
            // A supervisor staying with leftovers ends with the last of
            // them: counted until then, and collected by its instance.
            let live = self.live_descendants(&[]);
            if grace_over(
                live,
                Instant::now(),
                grace_end,
                self.shared.interrupt.insisted(),
            ) {
                break;
            }
            thread::sleep(STOP_POLL);
        }
        let settle_end = Instant::now() + KILL_SETTLE;
        loop {
            self.limit_scan(&leaders(instances));
            for group in leaders(instances) {
                process::signal_group(group, libc::SIGKILL);
            }
            process::signal_descendants(&mut self.scanner, libc::SIGKILL, &[]);
            for instance in instances.iter_mut() {
                instance.poll();
            }
            self.limit_scan(&leaders(instances));
            maxrss = maxrss.max(process::reap_adopted(
                &mut self.scanner,
                &leaders(instances),
            ));
            let descendants = self
                .scanner
                .all_descendants_of(process::self_pid())
                .map(|t| t.len())
                .unwrap_or(0);
            if descendants == 0 || Instant::now() >= settle_end {
                break;
            }
            thread::sleep(STOP_POLL);
        }
        // A leader that outlived SIGKILL this long is stuck in the kernel
        // (uninterruptible sleep: a hung file system or GPU driver). Waiting
        // for it could block forever; report it instead.
        let stuck = leaders(instances);
        for instance in instances.iter_mut() {
            instance.abandon();
        }
        (stuck, maxrss)
    }
}

/// Whether the grace after the stop signal is over: nothing of the case is
/// left alive, its time is up, or a second Ctrl-C insisted.
fn grace_over(live: usize, now: Instant, grace_end: Instant, insisted: bool) -> bool {
    live == 0 || now >= grace_end || insisted
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_grace_ends_when_nothing_is_left_its_time_is_up_or_ctrl_c_insists() {
        let start = Instant::now();
        let end = start + Duration::from_secs(10);
        let later = end + Duration::from_millis(1);
        // (live, now, insisted, over)
        let table = [
            (3, start, false, false),
            (0, start, false, true),
            (3, end, false, true),
            (3, later, false, true),
            (3, start, true, true),
        ];
        for (live, now, insisted, over) in table {
            assert_eq!(
                grace_over(live, now, end, insisted),
                over,
                "{live} {insisted}"
            );
        }
    }
}

//! A run's measurement record (`crate::record`), from what the
//! sampling loop observed: its timeline written to the case's folder, the
//! torch snapshot it left summarised, the tails of the logs of the process
//! that explains it read back (masked), with a scan of its error output.
//! Everything here is reading and writing; nothing is decided (the judge
//! picks the explaining process, `judge::focus`, from the exits alone).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::case::CaseOutcome;
use super::case::CaseRunner;
use super::fault::WriteFault;
use super::instance::Instance;
use super::logs::{TAIL_BYTES, read_tail};
use crate::diagnose::{self, Scan};
use crate::environment::is_allocator_variable;
use crate::judge;
use crate::record::{Focus, FocusLogs, InstanceRecord, RunRecord, ServerRecord, Warning};
use crate::redact;
use crate::suite::{Case, server_env};

impl CaseRunner<'_, '_> {
    /// One run's measurement record from what its sampling loop observed:
    /// its timeline written, the files it left read back, the notes it
    /// earned said. `probe_value`: the value a capacity search ran it at.
    pub(super) fn measured(
        &mut self,
        case: &Case,
        case_dir: &Path,
        (repeat, probe_value): (u32, Option<u64>),
        started_at: String,
        outcome: CaseOutcome,
    ) -> RunRecord {
        let CaseOutcome {
            stop,
            instances,
            timeline,
            host,
            gpu: mut gpu_figures,
            foreign,
            cuda_visible_devices,
            settle,
            mut probe,
            soak_peaks,
            sample_errors,
            leftovers,
            wall_time,
            server,
        } = outcome;
        // A pytest test's message is the workload's text (an assertion may
        // quote a token): masked as it enters the results.
        if let Some(message) = probe
            .as_mut()
            .and_then(|p| p.pytest.as_mut())
            .and_then(|r| r.message.as_mut())
        {
            *message = redact::active().mask(message).into_owned();
        }
        // The allocator's own peak is a floor no sampling gap can miss:
        // the figure the budgets judge is never below it.
        let allocator_floor = gpu_figures.as_mut().and_then(|gpu| {
            gpu.hold_to_allocator_floor(probe.as_ref().and_then(|p| p.peak_reserved))
        });

        let timeline_path = match repeat {
            0 => case_dir.join("timeline.json"),
            k => case_dir.join(format!("timeline.repeat-{}.json", k + 1)),
        };
        if let Err(source) = write_json(&timeline_path, &timeline) {
            let fault = WriteFault::CaseFile {
                path: timeline_path.clone(),
                source,
            };
            self.record_fault(fault);
        }
        // Whatever torch memory snapshot the case left (its probe's, or
        // its own `_dump_snapshot`), summarised by allocation site.
        let allocation_sites =
            crate::snapshot::read_case(case_dir, case.sites_depth as usize, &case.cwd)
                .map(masked_sites);
        for note in allocation_sites.iter().flat_map(|s| &s.notes) {
            self.warn(Warning::Snapshot(note.clone()));
        }
        if leftovers > 0 {
            self.warn(Warning::Leftovers(leftovers));
        }
        if !host.notes.is_empty() {
            self.warn(Warning::Host {
                client: false,
                notes: host.notes.clone(),
            });
        }
        if let Some(client) = server.as_ref().filter(|s| !s.client_host.notes.is_empty()) {
            self.warn(Warning::Host {
                client: true,
                notes: client.client_host.notes.clone(),
            });
        }

        let relative = |path: &Path| -> PathBuf {
            path.strip_prefix(self.shared.out_dir)
                .unwrap_or(path)
                .to_path_buf()
        };
        let record = |instance: &Instance| InstanceRecord {
            index: instance.index,
            runs: instance.runs,
            exit: instance.exit,
            stdout_log: relative(&instance.logs.stdout),
            stderr_log: relative(&instance.logs.stderr),
            supervisor_lost: instance.supervisor_lost,
        };
        // The numbers the logs printed: the server's first, then each
        // instance's stdout and stderr.
        let outputs = if case.outputs.is_empty() {
            Vec::new()
        } else {
            let logs: Vec<crate::measure::output::Log> = server
                .iter()
                .map(|s| &s.instance)
                .chain(&instances)
                .flat_map(|i| [&i.logs.stdout, &i.logs.stderr])
                .map(|path| crate::measure::output::Log {
                    path: path.clone(),
                    shown: relative(path),
                })
                .collect();
            crate::measure::output::read(&case.outputs, &logs)
        };
        let exits: Vec<_> = instances.iter().map(|i| i.exit).collect();
        let focus = judge::focus(stop.as_ref(), &exits, server.is_some());
        let focused = match (focus, &server) {
            (Focus::Server, Some(server)) => Some(&server.instance),
            (Focus::Instance(index), _) => instances.iter().find(|i| i.index == index),
            (Focus::Server, None) => None,
        };
        let focus = FocusLogs {
            focus,
            stdout_tail: focused.map_or_else(String::new, |i| self.tail(&i.logs.stdout)),
            stderr_tail: focused.map_or_else(String::new, |i| self.tail(&i.logs.stderr)),
            scan: focused
                .filter(|i| judge::worth_scanning(stop.as_ref(), i.exit))
                .map(|i| masked_scan(diagnose::scan_log(&i.logs.stderr, i.stderr_offset))),
        };
        RunRecord {
            repeat,
            probe_value,
            concurrency: case.concurrency,
            started_at,
            wall_time,
            stop,
            instances: instances.iter().map(record).collect(),
            server: server.map(|server| ServerRecord {
                instance: record(&server.instance),
                port: server.port,
                ready: server.ready,
                ready_at: server.ready_at,
                stopped_with: server.stopped_with,
                client_host: server.client_host,
                client_gpu: server.client_gpu,
            }),
            samples: timeline.samples,
            server_phases: timeline.server,
            timeline_file: relative(&timeline_path),
            dir: relative(case_dir),
            host,
            gpu: gpu_figures,
            allocator_floor,
            foreign,
            cuda_visible_devices,
            settle,
            probe,
            soak_peaks,
            sample_errors,
            leftovers,
            allocation_sites,
            allocator_env: allocator_env(case),
            focus,
            outputs,
        }
    }

    /// A log's tail, masked with the text before the tail's cut in view.
    fn tail(&self, path: &Path) -> String {
        read_tail(path, TAIL_BYTES, &redact::active())
            .unwrap_or_else(|e| format!("[oomgate: cannot read {}: {e}]", path.display()))
    }
}

/// The allocator- and device-related variables the case is launched with:
/// oomgate's own environment overlaid with the case's, and with a server's
/// own — the server is what the case's figures measure (as recorded: a
/// secret-named one by its hash).
pub(super) fn allocator_env(case: &Case) -> BTreeMap<String, String> {
    let mut variables: BTreeMap<String, String> = std::env::vars()
        .filter(|(name, _)| is_allocator_variable(name))
        .collect();
    for (name, value) in case.env.iter().chain(&server_env(case)) {
        if is_allocator_variable(name) {
            variables.insert(name.clone(), value.clone());
        }
    }
    variables
        .into_iter()
        .map(|(name, value)| {
            let value = redact::env_value(&name, &value);
            (name, value)
        })
        .collect()
}

/// Write a case's JSON file, replacing whatever the workload left under
/// its name (a link is replaced, never written through); a write cut
/// short leaves no file, so no reader takes half a timeline for one.
fn write_json(path: &Path, value: &impl serde::Serialize) -> std::io::Result<()> {
    let text = serde_json::to_string(value).map_err(std::io::Error::other)?;
    crate::files::case::replace(path, text.as_bytes())
}

/// What oomgate copies from the workload's output is masked (its logs stay
/// its own bytes).
pub(super) fn masked_scan(mut scan: Scan) -> Scan {
    if let Some(exception) = scan.exception.as_mut() {
        *exception = redact::active().mask(exception).into_owned();
    }
    scan
}

/// A snapshot's text is the workload's (its frames' file and function
/// names, its files' names): masked as it enters the results, as its
/// output is, before any report shortens a site's name.
fn masked_sites(mut sites: crate::snapshot::AllocationSites) -> crate::snapshot::AllocationSites {
    let redactor = redact::active();
    let mask = |text: &mut String| {
        if let std::borrow::Cow::Owned(masked) = redactor.mask(text) {
            *text = masked;
        }
    };
    for site in sites
        .sites
        .iter_mut()
        .chain(sites.by_rank.values_mut().flatten())
    {
        mask(&mut site.site);
    }
    sites
        .files
        .iter_mut()
        .chain(&mut sites.notes)
        .chain(sites.allocator_settings.values_mut())
        .for_each(mask);
    sites
}

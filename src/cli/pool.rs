//! `--gpus`, `--jobs` and `--pack`: the schedule of a run, checked against
//! the suite and the GPUs before anything starts (every problem is exit 2,
//! except GPUs that cannot be read at all: exit 3).

use std::collections::HashMap;
use std::path::Path;

use clap::Args;

use super::shared::CliError;
use crate::measure::nvml::Gpu;
use crate::measure::visible;
use crate::run::{PoolGpu, Schedule};
use crate::suite::{Case, GpuMode};

/// How cases are spread over GPUs and run at once.
#[derive(Debug, Clone, Default, Args)]
pub struct ScheduleArgs {
    /// Run cases on a pool of GPUs, several at once: `all`, NVML indices as
    /// `oomgate gpus` lists them (`0,1,3`) or UUIDs (`GPU-8f…,GPU-1c…`).
    /// Each case gets `gpus` whole GPUs of the pool (default 1; 0 for a
    /// host-only case) through CUDA_VISIBLE_DEVICES, by UUID.
    #[arg(long, value_name = "GPUS", value_parser = parse_pool)]
    pub gpus: Option<PoolSpec>,
    /// Most cases running at once (default: the pool's size with --gpus,
    /// as many as fit with --pack, else the workers a `[[pytest]]` asks
    /// pytest-xdist for with `-n`, else 1). Host-only suites run in
    /// parallel with it too; each case keeps its own memory cgroup, each
    /// worker its own pytest session.
    #[arg(long, short = 'j', value_name = "N", value_parser = clap::value_parser!(u16).range(1..=1024))]
    pub jobs: Option<u16>,
    /// Let one-GPU cases share a pool GPU when their known peaks (the
    /// lock's, or the suite's `gpu_memory`) plus a margin fit its memory; a
    /// case that fails while sharing is retried alone.
    #[arg(long, requires = "gpus")]
    pub pack: bool,
}

/// The GPUs `--gpus` names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PoolSpec {
    All,
    /// Entries as given: NVML indices or UUIDs (a unique prefix will do).
    Devices(Vec<String>),
}

/// `--gpu` takes a measurement mode; a pool given to it is a mix-up with
/// `--gpus`, said as such.
pub fn parse_gpu_mode(value: &str) -> Result<GpuMode, String> {
    match value {
        "auto" => Ok(GpuMode::Auto),
        "required" => Ok(GpuMode::Required),
        "off" => Ok(GpuMode::Off),
        _ if parse_pool(value).is_ok() => Err(format!(
            "`--gpu` takes how GPU memory is measured (auto, required, off); to run cases on a pool of GPUs, use `--gpus {value}`"
        )),
        _ => Err("`--gpu` takes auto, required or off".to_string()),
    }
}

/// `all`, or a comma-separated list of NVML indices and UUIDs.
pub fn parse_pool(value: &str) -> Result<PoolSpec, String> {
    let value = value.trim();
    if matches!(value, "auto" | "required" | "off") {
        return Err(format!(
            "`--gpus` names the GPUs of a pool (all, 0,1, GPU-uuid,…); for how GPU memory is measured, use `--gpu {value}`"
        ));
    }
    if value == "all" {
        return Ok(PoolSpec::All);
    }
    let entries: Vec<String> = value.split(',').map(|e| e.trim().to_string()).collect();
    for entry in &entries {
        let index = entry.parse::<u32>().is_ok();
        let uuid = entry.starts_with("GPU-") || entry.starts_with("MIG-");
        if !index && !uuid {
            return Err(format!(
                "`{entry}` is not a GPU: give `all`, NVML indices as `oomgate gpus` lists them (0,1) or UUIDs (GPU-…)"
            ));
        }
        if entry.starts_with("MIG-") {
            return Err(format!(
                "`{entry}`: MIG instances cannot be pooled (oomgate cannot attribute their memory); give whole GPUs"
            ));
        }
    }
    Ok(PoolSpec::Devices(entries))
}

/// The schedule for a run: the pool resolved against the devices oomgate
/// may use, `--jobs` (else the workers pytest-xdist was asked for,
/// `xdist_workers`), and past wall times for longest-first ordering.
/// `gpu`: the GPUs NVML opened, or why it opened none (said when `--gpus`
/// needs them: nothing else has said it yet).
pub fn schedule(
    args: &ScheduleArgs,
    gpu_mode: GpuMode,
    gpu: Result<&Gpu, &str>,
    cases: &[&Case],
    past_wall_s: HashMap<String, f64>,
    xdist_workers: Option<usize>,
) -> Result<Schedule, CliError> {
    let pool = match &args.gpus {
        None => None,
        Some(spec) => {
            if gpu_mode == GpuMode::Off {
                return Err(CliError::BadInput(
                    "--gpus needs GPU measurement, but the GPU mode is off (--gpu off or the suite's `gpu = \"off\"`)".to_string(),
                ));
            }
            let gpu = gpu.map_err(|why| {
                CliError::Infrastructure(format!(
                    "--gpus needs NVML to read the GPUs, and it could not be loaded: {why}"
                ))
            })?;
            let pool = resolve(
                spec,
                gpu,
                std::env::var("CUDA_VISIBLE_DEVICES").ok().as_deref(),
            )?;
            refuse_cases_that_cannot_run(cases, &pool)?;
            Some(pool)
        }
    };
    if pool.is_none() {
        let asking: Vec<&str> = cases
            .iter()
            .filter(|c| c.gpus.is_some_and(|n| n > 1))
            .map(|c| c.id.as_str())
            .collect();
        if !asking.is_empty() {
            super::shared::write_stderr(&format!(
                "note: without --gpus, `gpus` is not applied: {} see every GPU oomgate sees",
                asking.join(", ")
            ));
        }
    }
    // Packed, a GPU holds as many cases as their memory allows: only the
    // pool's memory bounds them.
    let jobs = match (args.jobs, &pool) {
        (Some(jobs), _) => usize::from(jobs),
        (None, Some(_)) if args.pack => cases.len().max(1),
        (None, Some(pool)) => pool.len(),
        // pytest-xdist's `-n`, turned off in each pytest process: the
        // tests that many at once, each measured on its own.
        (None, None) => xdist_workers.unwrap_or(1).max(1),
    };
    Ok(Schedule {
        pool,
        jobs,
        pack: args.pack,
        // One case at a time keeps the suite's order, as it always did.
        past_wall_s: if jobs > 1 {
            past_wall_s
        } else {
            HashMap::new()
        },
    })
}

/// The pool's GPUs, in the order given, each once, each one oomgate may
/// use: its own `CUDA_VISIBLE_DEVICES` when set, else every NVML device.
fn resolve(
    spec: &PoolSpec,
    gpu: &Gpu,
    own_visible: Option<&str>,
) -> Result<Vec<PoolGpu>, CliError> {
    let devices: Vec<visible::DeviceId<'_>> = gpu
        .devices
        .iter()
        .map(|d| visible::DeviceId::from(&d.info))
        .collect();
    let usable = visible::select(own_visible, Some("PCI_BUS_ID"), &devices).positions;
    let describe = |positions: &[usize]| -> String {
        let listed: Vec<String> = positions
            .iter()
            .map(|&p| format!("{} ({})", gpu.devices[p].index, gpu.devices[p].uuid))
            .collect();
        if listed.is_empty() {
            "none".to_string()
        } else {
            listed.join(", ")
        }
    };
    let chosen: Vec<usize> = match spec {
        PoolSpec::All => usable.clone(),
        PoolSpec::Devices(entries) => {
            let mut chosen = Vec::with_capacity(entries.len());
            for entry in entries {
                let matches: Vec<usize> = match entry.parse::<u32>() {
                    // A MIG instance shares its GPU's index: an index
                    // names the GPU, or for one in MIG mode its first
                    // instance, as CUDA does.
                    Ok(index) => (0..gpu.devices.len())
                        .filter(|&p| {
                            gpu.devices[p].index == index && gpu.devices[p].mig_parent.is_none()
                        })
                        .filter_map(|p| visible::through_mig(p, &devices, &mut Vec::new()))
                        .collect(),
                    Err(_) => (0..gpu.devices.len())
                        .filter(|&p| gpu.devices[p].uuid.starts_with(entry.as_str()))
                        .collect(),
                };
                let position = match matches.as_slice() {
                    [one] => *one,
                    [] => {
                        return Err(CliError::BadInput(format!(
                            "--gpus: `{entry}` names no GPU; `oomgate gpus` lists them: {}",
                            describe(&(0..gpu.devices.len()).collect::<Vec<_>>())
                        )));
                    }
                    _ => {
                        return Err(CliError::BadInput(format!(
                            "--gpus: `{entry}` matches {} GPUs; give more of the UUID",
                            matches.len()
                        )));
                    }
                };
                if !usable.contains(&position) {
                    return Err(CliError::BadInput(format!(
                        "--gpus: GPU {entry} is hidden from oomgate by its own CUDA_VISIBLE_DEVICES={}; the pool may hold only {}",
                        own_visible.unwrap_or_default(),
                        describe(&usable)
                    )));
                }
                if chosen.contains(&position) {
                    return Err(CliError::BadInput(format!(
                        "--gpus: GPU {} is named twice",
                        gpu.devices[position].index
                    )));
                }
                chosen.push(position);
            }
            chosen
        }
    };
    if chosen.is_empty() {
        return Err(CliError::BadInput(format!(
            "--gpus {}: the pool holds no GPU (oomgate sees: {})",
            match spec {
                PoolSpec::All => "all".to_string(),
                PoolSpec::Devices(d) => d.join(","),
            },
            describe(&usable)
        )));
    }
    Ok(chosen
        .into_iter()
        .map(|position| {
            let device = &gpu.devices[position];
            PoolGpu {
                position,
                gpu: device.info.clone(),
            }
        })
        .collect())
}

/// Under a pool the pool decides what a case sees: a case that sets
/// `CUDA_VISIBLE_DEVICES` itself, or needs more GPUs than the pool has,
/// cannot run as written.
fn refuse_cases_that_cannot_run(cases: &[&Case], pool: &[PoolGpu]) -> Result<(), CliError> {
    let mut problems = Vec::new();
    for case in cases {
        if case.env.contains_key("CUDA_VISIBLE_DEVICES") {
            problems.push(format!(
                "case `{}` sets CUDA_VISIBLE_DEVICES in its env, but under --gpus the pool assigns GPUs; drop it and set `gpus = N`",
                case.id
            ));
        }
        let wanted = case.gpus.unwrap_or(1) as usize;
        if wanted > pool.len() {
            problems.push(format!(
                "case `{}` needs {wanted} GPUs (`gpus = {wanted}`), but the pool has {}",
                case.id,
                pool.len()
            ));
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(CliError::BadInput(problems.join("\n")))
    }
}

/// Each case's wall time in a past run, for longest-first ordering: the
/// previous results.json in the out dir, else the lock's figures. A file
/// that cannot be read only loses the ordering (said once).
pub fn past_wall_times(
    previous_results: &Path,
    lock: Option<&crate::baseline::Lock>,
) -> HashMap<String, f64> {
    let mut times: HashMap<String, f64> = lock
        .map(|lock| {
            lock.entries()
                .map(|(_, id, case)| (id.to_string(), case.wall_time_s))
                .collect()
        })
        .unwrap_or_default();
    if !previous_results.is_file() {
        return times;
    }
    let read = crate::files::read_input(
        previous_results,
        crate::files::MAX_RESULTS_BYTES,
        "a results file",
    )
    .map_err(|e| e.to_string())
    .and_then(|text| crate::results::readback::parse(&text).map_err(|e| e.to_string()));
    match read {
        Ok(view) => {
            for case in view.cases.iter().filter(|c| c.wall_time_s > 0.0) {
                times.insert(case.id.clone(), case.wall_time_s);
            }
        }
        Err(why) => super::shared::write_stderr(&format!(
            "note: past wall times not read from {} ({why}); cases start in the suite's order",
            previous_results.display()
        )),
    }
    times
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pool_given_to_gpu_and_a_mode_given_to_gpus_name_the_other_flag() {
        for pool in ["all", "0,1", "GPU-1234"] {
            let error = parse_gpu_mode(pool).expect_err(pool);
            assert!(error.contains(&format!("--gpus {pool}")), "{error}");
        }
        let error = parse_gpu_mode("sometimes").expect_err("not a mode");
        assert!(!error.contains("--gpus"), "{error}");
        for mode in ["auto", "required", "off"] {
            let error = parse_pool(mode).expect_err(mode);
            assert!(error.contains(&format!("--gpu {mode}")), "{error}");
        }
        assert_eq!(parse_gpu_mode("required"), Ok(GpuMode::Required));
    }

    #[test]
    fn pools_are_all_indices_or_uuids() {
        assert_eq!(parse_pool("all"), Ok(PoolSpec::All));
        assert_eq!(
            parse_pool("0, 3,GPU-ab"),
            Ok(PoolSpec::Devices(vec![
                "0".into(),
                "3".into(),
                "GPU-ab".into()
            ]))
        );
        for bad in ["", "0,,1", "first", "-1", "MIG-1234"] {
            assert!(parse_pool(bad).is_err(), "{bad}");
        }
    }
}

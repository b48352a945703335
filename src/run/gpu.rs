//! The GPU side of running a case: which devices it sees, and what is
//! already running on them before it starts.

use crate::measure::gpu::ForeignProcess;
use crate::measure::nvml::Gpu;
use crate::measure::visible::{self, Selection};
use crate::suite::Case;
use crate::units::Bytes;

/// The devices a case sees: `CUDA_VISIBLE_DEVICES` (and
/// `CUDA_DEVICE_ORDER`) as the pool set it (`pool`), else from the case's
/// env, else from oomgate's own.
pub fn selection(gpu: &Gpu, case: &Case, pool: Option<&str>) -> Selection {
    let lookup = |name: &str| {
        case.env
            .get(name)
            .cloned()
            .or_else(|| std::env::var(name).ok())
    };
    // A Kubernetes pod given MIG instances gets NVIDIA_VISIBLE_DEVICES =
    // their `MIG-…` UUIDs and, often, no CUDA_VISIBLE_DEVICES: CUDA sees
    // those instances, so they are what is measured.
    let value = match pool {
        Some(uuids) => Some(uuids.to_string()),
        None => lookup("CUDA_VISIBLE_DEVICES").or_else(|| {
            lookup("NVIDIA_VISIBLE_DEVICES").filter(|value| {
                value
                    .split(',')
                    .any(|entry| entry.trim().starts_with("MIG-"))
            })
        }),
    };
    let order = lookup("CUDA_DEVICE_ORDER");
    let devices: Vec<visible::DeviceId<'_>> = gpu
        .devices
        .iter()
        .map(|d| visible::DeviceId::from(&d.info))
        .collect();
    visible::select(value.as_deref(), order.as_deref(), &devices)
}

/// One line per foreign process, for warnings and failure messages.
pub fn describe_foreign(case_id: &str, foreign: &[ForeignProcess]) -> String {
    let list: Vec<String> = foreign
        .iter()
        .map(|p| {
            let name = p
                .name
                .as_deref()
                .map_or(String::new(), |n| format!(" ({n})"));
            let used = p
                .used_bytes
                .map_or("unknown memory".to_string(), |b| Bytes(b).to_string());
            format!("pid {}{name} on GPU {} using {used}", p.pid, p.device_index)
        })
        .collect();
    format!(
        "{case_id}: {} process(es) not started by oomgate already run on its GPUs: {}; its GPU figures share the device with them",
        foreign.len(),
        list.join(", ")
    )
}

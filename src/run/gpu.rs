//! The GPU side of running a case: which devices it sees, and what is
//! already running on them before it starts.

use crate::measure::cuda;
use crate::measure::nvml::Gpu;
use crate::measure::visible::{self, Selection, SelectionNote};
use crate::suite::Case;

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
    let by_rules = visible::select(value.as_deref(), order.as_deref(), &devices);
    // A pool names its GPUs by UUID: the rules are exact. Otherwise CUDA
    // itself is asked, where its driver library is installed.
    if pool.is_some() {
        return by_rules;
    }
    match cuda::devices(value.as_deref(), order.as_deref()) {
        Ok(uuids) => as_cuda_sees_it(gpu, &devices, &uuids, value, by_rules),
        Err(_) => by_rules,
    }
}

/// The selection from CUDA's own answer (UUID hex digits in CUDA's
/// numbering); a device CUDA shows that NVML does not list here leaves the
/// figures unknown. Said when it differs from what the rules read.
fn as_cuda_sees_it(
    gpu: &Gpu,
    devices: &[visible::DeviceId<'_>],
    uuids: &[String],
    value: Option<String>,
    by_rules: Selection,
) -> Selection {
    let mut selection = Selection {
        cuda_visible_devices: value,
        positions: Vec::new(),
        notes: Vec::new(),
        unmapped: false,
    };
    for uuid in uuids {
        // An older CUDA names a MIG device by its GPU's UUID: the GPU's
        // first instance is what is measured, never the GPU's own handle.
        let found = gpu
            .devices
            .iter()
            .position(|d| cuda::hex_of(&d.uuid) == *uuid)
            .map(|position| visible::through_mig(position, devices, &mut Vec::new()));
        match found {
            Some(Some(position)) => selection.positions.push(position),
            Some(None) | None => {
                selection.unmapped = true;
                selection
                    .notes
                    .push(SelectionNote::CudaUnlisted { uuid: uuid.clone() });
            }
        }
    }
    if selection.positions != by_rules.positions && !selection.unmapped {
        let uuids = |positions: &[usize]| -> Vec<String> {
            positions
                .iter()
                .map(|&p| gpu.devices[p].uuid.clone())
                .collect()
        };
        selection.notes.push(SelectionNote::CudaOrder {
            cuda: uuids(&selection.positions),
            by_rules: uuids(&by_rules.positions),
        });
    }
    selection
}

//! What `oomgate gpus` shows, read from NVML: every device it sees, its
//! memory, modes and processes, and how `CUDA_VISIBLE_DEVICES` maps onto
//! them. `report::inventory` renders it.

use serde::Serialize;

use super::gpu::process_name;
use super::nvml::{Gpu, GpuInfo, GpuProcess};
use super::visible::{self, Selection};

#[derive(Debug, Serialize)]
pub struct Inventory {
    pub driver_version: String,
    pub cuda_driver_version: Option<String>,
    pub devices: Vec<DeviceState>,
    /// Devices NVML lists but that could not be opened, and why.
    pub unusable: Vec<String>,
    /// How this shell's `CUDA_VISIBLE_DEVICES` maps onto the devices.
    pub visible: Selection,
    /// Visible devices by NVML index, in CUDA's order.
    pub visible_indices: Vec<u32>,
}

/// One device as `oomgate gpus` shows it: its [`GpuInfo`] (which it reads
/// as), its memory now and its processes.
#[derive(Debug, Serialize)]
pub struct DeviceState {
    #[serde(flatten)]
    pub gpu: GpuInfo,
    pub used_bytes: Option<u64>,
    pub free_bytes: Option<u64>,
    pub processes: Vec<ProcessState>,
    /// Set when the process list could not be read.
    pub processes_error: Option<String>,
}

impl std::ops::Deref for DeviceState {
    type Target = GpuInfo;

    fn deref(&self) -> &GpuInfo {
        &self.gpu
    }
}

#[derive(Debug, Serialize)]
pub struct ProcessState {
    pub pid: u32,
    pub name: Option<String>,
    pub used_bytes: Option<u64>,
}

impl Inventory {
    pub fn read(gpu: &mut Gpu) -> Self {
        let mut devices = Vec::with_capacity(gpu.devices.len());
        let mut processes: Vec<GpuProcess> = Vec::new();
        for position in 0..gpu.devices.len() {
            let memory = gpu.memory(position).ok();
            let processes_error = gpu
                .processes(position, &mut processes)
                .err()
                .map(|e| e.to_string());
            let device = &gpu.devices[position];
            devices.push(DeviceState {
                gpu: device.info.clone(),
                used_bytes: memory.map(|m| m.used),
                free_bytes: memory.map(|m| m.free),
                processes: processes
                    .iter()
                    .map(|p| ProcessState {
                        pid: p.pid,
                        name: process_name(p.pid),
                        used_bytes: p.used_bytes,
                    })
                    .collect(),
                processes_error,
            });
        }
        let uuids: Vec<visible::DeviceId<'_>> = gpu
            .devices
            .iter()
            .map(|d| visible::DeviceId::from(&d.info))
            .collect();
        let value = std::env::var("CUDA_VISIBLE_DEVICES").ok();
        let order = std::env::var("CUDA_DEVICE_ORDER").ok();
        let visible = visible::select(value.as_deref(), order.as_deref(), &uuids);
        let visible_indices = visible
            .positions
            .iter()
            .map(|&p| gpu.devices[p].index)
            .collect();
        Inventory {
            driver_version: gpu.driver_version.clone(),
            cuda_driver_version: gpu.cuda_driver_version.clone(),
            devices,
            unusable: gpu.unusable.clone(),
            visible,
            visible_indices,
        }
    }
}

//! `oomgate gpus`: every device NVML sees, its memory, modes and
//! processes, and how `CUDA_VISIBLE_DEVICES` maps onto them.

use std::fmt::Write as _;
use std::io;

use serde::Serialize;

use crate::measure::gpu::process_name;
use crate::measure::nvml::{Gpu, GpuProcess};
use crate::measure::visible::{self, Selection};
use crate::units::{Bytes, bytes_or_unknown};

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

#[derive(Debug, Serialize)]
pub struct DeviceState {
    pub index: u32,
    pub uuid: String,
    pub name: String,
    pub total_bytes: u64,
    pub used_bytes: Option<u64>,
    pub free_bytes: Option<u64>,
    pub accounting: Option<bool>,
    pub persistence: Option<bool>,
    pub processes: Vec<ProcessState>,
    /// Set when the process list could not be read.
    pub processes_error: Option<String>,
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
                index: device.index,
                uuid: device.uuid.clone(),
                name: device.name.clone(),
                total_bytes: device.total_bytes,
                used_bytes: memory.map(|m| m.0),
                free_bytes: memory.map(|m| m.1),
                accounting: device.accounting,
                persistence: device.persistence,
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
            .map(|d| (d.index, d.uuid.as_str(), d.name.as_str()))
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

/// `oomgate gpus --json`: the inventory, with `"nvml": {"available": true}`.
pub fn render_json(inventory: &Inventory) -> io::Result<String> {
    #[derive(Serialize)]
    struct Document<'a> {
        nvml: serde_json::Value,
        #[serde(flatten)]
        inventory: &'a Inventory,
    }
    let document = Document {
        nvml: serde_json::json!({ "available": true }),
        inventory,
    };
    let mut text = serde_json::to_string_pretty(&document).map_err(io::Error::other)?;
    text.push('\n');
    Ok(text)
}

/// `oomgate gpus --json` when NVML cannot be used: still one JSON document
/// (`"nvml": {"available": false, "reason": ...}`, no devices), so a
/// script reads stdout the same way whatever the machine.
pub fn render_json_unavailable(why: &str) -> io::Result<String> {
    let document = serde_json::json!({
        "nvml": { "available": false, "reason": why },
        "devices": [],
    });
    let mut text = serde_json::to_string_pretty(&document).map_err(io::Error::other)?;
    text.push('\n');
    Ok(text)
}

pub fn render_text(inventory: &Inventory) -> String {
    let mut out = String::new();
    let cuda = inventory
        .cuda_driver_version
        .as_deref()
        .unwrap_or("unknown");
    let _ = writeln!(
        out,
        "NVIDIA driver {}, CUDA driver API {cuda}, {} device(s)",
        inventory.driver_version,
        inventory.devices.len()
    );
    let mode = |value: Option<bool>| match value {
        Some(true) => "on",
        Some(false) => "off",
        None => "unsupported",
    };
    for device in &inventory.devices {
        let _ = writeln!(
            out,
            "\nGPU {}  {}  {}",
            device.index, device.name, device.uuid
        );
        let _ = writeln!(
            out,
            "  memory       {} total, {} used, {} free",
            Bytes(device.total_bytes),
            bytes_or_unknown(device.used_bytes),
            bytes_or_unknown(device.free_bytes)
        );
        let _ = writeln!(
            out,
            "  modes        accounting {}, persistence {}",
            mode(device.accounting),
            mode(device.persistence)
        );
        match (&device.processes_error, device.processes.is_empty()) {
            (Some(error), _) => {
                let _ = writeln!(out, "  processes    cannot be listed: {error}");
            }
            (None, true) => {
                let _ = writeln!(out, "  processes    none");
            }
            (None, false) => {
                for (i, process) in device.processes.iter().enumerate() {
                    let label = if i == 0 { "processes" } else { "" };
                    let name = process.name.as_deref().unwrap_or("not visible here");
                    let _ = writeln!(
                        out,
                        "  {label:<12} pid {} ({name}) {}",
                        process.pid,
                        bytes_or_unknown(process.used_bytes)
                    );
                }
            }
        }
    }
    for why in &inventory.unusable {
        let _ = writeln!(out, "\nunusable: {why}");
    }
    let shown: Vec<String> = inventory
        .visible_indices
        .iter()
        .map(|i| format!("GPU {i}"))
        .collect();
    let value = match &inventory.visible.cuda_visible_devices {
        Some(value) => format!("CUDA_VISIBLE_DEVICES={value:?}"),
        None => "CUDA_VISIBLE_DEVICES unset".to_string(),
    };
    let _ = writeln!(
        out,
        "\n{value}: a CUDA program here sees {}",
        if shown.is_empty() {
            "no GPU".to_string()
        } else {
            shown.join(", ")
        }
    );
    for note in &inventory.visible.notes {
        let _ = writeln!(out, "  note: {note}");
    }
    out
}

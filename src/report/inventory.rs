//! `oomgate gpus` for people (a table) and machines (`--json`), from the
//! inventory `measure::inventory` read.

use std::fmt::Write as _;
use std::io;

use serde::Serialize;

use crate::measure::inventory::Inventory;
use crate::units::{Bytes, bytes_or_unknown};

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
    let mut document = serde_json::to_value(&document).map_err(io::Error::other)?;
    // The selection's notes as the text shows them.
    if let Some(notes) = document.pointer_mut("/visible/notes") {
        *notes = inventory
            .visible
            .notes
            .iter()
            .map(super::words::selection_note)
            .collect();
    }
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
        let _ = writeln!(out, "  note: {}", super::words::selection_note(note));
    }
    out
}

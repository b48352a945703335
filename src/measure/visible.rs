//! Which GPUs a case sees: `CUDA_VISIBLE_DEVICES`, read the way CUDA
//! reads it, mapped to NVML devices.
//!
//! CUDA takes a comma-separated list of device indices or UUIDs (`GPU-…`,
//! a unique prefix is enough), and stops at the first entry it cannot use:
//! the devices before it stay visible, the rest are hidden. An empty value
//! hides every device; no variable shows all of them. oomgate applies the
//! same rules and says which entries were ignored, so a typo that silently
//! hides a GPU from the workload is visible in the report.
//!
//! Indices are matched in NVML's order (PCI bus order, as `nvidia-smi`
//! numbers devices). CUDA numbers devices fastest-first unless
//! `CUDA_DEVICE_ORDER=PCI_BUS_ID`; on a machine with mixed GPU models the
//! two orders can differ, which the selection notes. UUIDs are exact in
//! both orders.

use serde::Serialize;

/// The devices a case sees, as positions in the NVML device table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Selection {
    /// The variable's value, `None` when unset.
    pub cuda_visible_devices: Option<String>,
    /// Positions in the device table, in CUDA's order.
    pub positions: Vec<usize>,
    /// What the user should know: ignored entries, index-order caveats.
    pub notes: Vec<String>,
    /// The case sees a device oomgate cannot map (a MIG instance), so its
    /// GPU figures are unknown.
    pub unmapped: bool,
}

/// A device as `select` needs it: NVML index, UUID, model name.
pub type DeviceId<'a> = (u32, &'a str, &'a str);

/// Apply `CUDA_VISIBLE_DEVICES` (and `CUDA_DEVICE_ORDER`) to a device
/// table in NVML index order (devices that could not be opened left out,
/// so an index entry is matched against each device's NVML index).
pub fn select(
    value: Option<&str>,
    device_order: Option<&str>,
    devices: &[DeviceId<'_>],
) -> Selection {
    let uuids: Vec<&str> = devices.iter().map(|(_, uuid, _)| *uuid).collect();
    let mut selection = Selection {
        cuda_visible_devices: value.map(str::to_string),
        positions: Vec::new(),
        notes: Vec::new(),
        unmapped: false,
    };
    let Some(value) = value else {
        selection.positions = (0..uuids.len()).collect();
        return selection;
    };
    let mut used_an_index = false;
    for entry in value.split(',').map(str::trim) {
        let found = match entry.parse::<usize>() {
            Ok(index) => {
                used_an_index = true;
                devices
                    .iter()
                    .position(|(nvml_index, _, _)| {
                        usize::try_from(*nvml_index).is_ok_and(|i| i == index)
                    })
                    .ok_or_else(|| {
                        format!(
                            "entry `{entry}` names no usable device (there are {})",
                            uuids.len()
                        )
                    })
            }
            Err(_) if entry.starts_with("GPU-") => {
                let matches: Vec<usize> = uuids
                    .iter()
                    .enumerate()
                    .filter(|(_, u)| u.starts_with(entry))
                    .map(|(i, _)| i)
                    .collect();
                match matches.as_slice() {
                    [one] => Ok(*one),
                    [] => Err(format!("entry `{entry}` matches no device UUID")),
                    _ => Err(format!("entry `{entry}` matches several device UUIDs")),
                }
            }
            Err(_) if entry.starts_with("MIG-") => {
                selection.unmapped = true;
                selection.notes.push(format!(
                    "CUDA_VISIBLE_DEVICES entry `{entry}` is a MIG instance, which oomgate cannot map to a GPU yet: GPU figures are unknown"
                ));
                break;
            }
            Err(_) if entry.is_empty() && value.trim().is_empty() => return selection,
            Err(_) => Err(format!(
                "entry `{entry}` is neither a device index nor a GPU UUID"
            )),
        };
        match found {
            Ok(position) if selection.positions.contains(&position) => {
                selection.notes.push(format!(
                    "CUDA_VISIBLE_DEVICES lists device {position} twice; CUDA ignores it and every entry after it"
                ));
                break;
            }
            Ok(position) => selection.positions.push(position),
            Err(why) => {
                selection.notes.push(format!(
                    "CUDA_VISIBLE_DEVICES {why}; CUDA ignores it and every entry after it"
                ));
                break;
            }
        }
    }
    // The fastest-first order CUDA uses by default can only differ from PCI
    // bus order between different models.
    let mixed_models = devices.iter().any(|(_, _, name)| *name != devices[0].2);
    if used_an_index && mixed_models && device_order != Some("PCI_BUS_ID") {
        selection.notes.push(
            "indices in CUDA_VISIBLE_DEVICES are matched in PCI bus order (as nvidia-smi); set CUDA_DEVICE_ORDER=PCI_BUS_ID so CUDA numbers devices the same way, or use GPU UUIDs".to_string(),
        );
    }
    selection
}

#[cfg(test)]
mod tests {
    use super::*;

    const UUIDS: [&str; 3] = [
        "GPU-aaaaaaaa-0000-0000-0000-000000000000",
        "GPU-bbbbbbbb-0000-0000-0000-000000000000",
        "GPU-bbbbcccc-0000-0000-0000-000000000000",
    ];

    const SAME: [DeviceId<'static>; 3] = [
        (0, UUIDS[0], "H100"),
        (1, UUIDS[1], "H100"),
        (2, UUIDS[2], "H100"),
    ];
    const MIXED: [DeviceId<'static>; 3] = [
        (0, UUIDS[0], "H100"),
        (1, UUIDS[1], "A100"),
        (2, UUIDS[2], "H100"),
    ];

    #[test]
    fn indices_are_nvml_indices_when_a_device_is_unusable() {
        // NVML index 1 could not be opened: "2" is the second usable device.
        let usable = [SAME[0], SAME[2]];
        assert_eq!(select(Some("2"), None, &usable).positions, [1]);
        assert!(select(Some("1"), None, &usable).positions.is_empty());
    }

    fn positions(value: Option<&str>) -> Vec<usize> {
        select(value, Some("PCI_BUS_ID"), &SAME).positions
    }

    #[test]
    fn cuda_rules() {
        let table: &[(Option<&str>, &[usize])] = &[
            (None, &[0, 1, 2]),
            (Some(""), &[]),
            (Some("1"), &[1]),
            (Some("2,0"), &[2, 0]),
            (Some(" 1 , 2 "), &[1, 2]),
            (Some("GPU-aaaaaaaa-0000-0000-0000-000000000000"), &[0]),
            (Some("GPU-bbbbc"), &[2]),
            (Some("GPU-bbbb"), &[]),
            (Some("0,7,1"), &[0]),
            (Some("1,x,2"), &[1]),
            (Some("-1"), &[]),
            (Some("0,0,1"), &[0]),
            (Some("MIG-1234"), &[]),
            (Some("1,GPU-aaaa"), &[1, 0]),
        ];
        for (value, expected) in table {
            assert_eq!(positions(*value), *expected, "{value:?}");
        }
    }

    #[test]
    fn ignored_entries_are_explained() {
        let selection = select(Some("0,7,1"), Some("PCI_BUS_ID"), &SAME);
        assert_eq!(selection.notes.len(), 1);
        assert!(
            selection.notes[0].contains("entry `7` names no usable device"),
            "{:?}",
            selection.notes
        );
    }

    #[test]
    fn index_order_caveat_only_when_it_matters() {
        let caveat = |selection: Selection| {
            selection
                .notes
                .iter()
                .any(|n| n.contains("CUDA_DEVICE_ORDER"))
        };
        assert!(caveat(select(Some("1"), None, &MIXED)));
        assert!(
            !caveat(select(Some("1"), None, &SAME)),
            "identical models: same order"
        );
        assert!(!caveat(select(Some("1"), Some("PCI_BUS_ID"), &MIXED)));
        assert!(!caveat(select(Some(UUIDS[1]), None, &MIXED)));
    }

    #[test]
    fn mig_instances_make_figures_unknown() {
        let selection = select(Some("MIG-1234"), None, &SAME);
        assert!(selection.unmapped);
        assert!(
            selection.notes[0].contains("MIG instance"),
            "{:?}",
            selection.notes
        );
        assert!(!select(Some("0,7"), None, &SAME).unmapped);
    }
}

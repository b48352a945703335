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
//!
//! MIG: a GPU in MIG mode is measured through its instances, never its own
//! handle (which answers for every slice, other tenants' included). A
//! `MIG-…` entry names one instance; a MIG-mode GPU named by index or
//! `GPU-…` UUID gives its first instance, the one a CUDA process uses (a
//! process sees a single MIG device); with no variable every GPU not in
//! MIG mode and every instance is seen. An instance oomgate could not open
//! leaves the case's GPU figures unknown, with the reason.

use serde::Serialize;

/// The devices a case sees, as positions in the NVML device table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Selection {
    /// The variable's value, `None` when unset.
    pub cuda_visible_devices: Option<String>,
    /// Positions in the device table, in CUDA's order.
    pub positions: Vec<usize>,
    /// What the user should know: ignored entries, index-order caveats
    /// (worded by `report::words::selection_note`).
    pub notes: Vec<SelectionNote>,
    /// The case sees a device oomgate cannot map (a MIG instance), so its
    /// GPU figures are unknown.
    pub unmapped: bool,
}

/// What a selection says to its reader, as data.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum SelectionNote {
    /// A GPU in MIG mode is measured through its first instance, the one
    /// a CUDA process uses.
    MigFirstInstance { gpu: u32, instance: String },
    /// A GPU in MIG mode none of whose instances could be opened: its
    /// figures are unknown, never the GPU's own (which hold every slice).
    /// `entry`: the variable's entry that named it, if one did.
    MigUnopened { gpu: u32, entry: Option<String> },
    /// A `MIG-…` entry NVML does not list here (or oomgate could not open).
    MigUnlisted { entry: String },
    /// An entry names a device an earlier one named: CUDA ignores it and
    /// every entry after it.
    Repeated { position: usize },
    /// An entry CUDA cannot use: it and every entry after it are ignored.
    Ignored { entry: String, why: Unusable },
    /// Indices are matched in PCI bus order on a machine whose models
    /// differ, where CUDA's default order may not be.
    IndexOrder,
    /// CUDA (asked through libcuda) shows a device NVML does not list.
    CudaUnlisted { uuid: String },
    /// CUDA shows the case these devices (UUIDs), where the variable read
    /// in PCI bus order would give `by_rules`.
    CudaOrder {
        cuda: Vec<String>,
        by_rules: Vec<String>,
    },
}

/// Why CUDA cannot use a `CUDA_VISIBLE_DEVICES` entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Unusable {
    /// An index past the usable devices (`count` of them).
    NoDevice {
        count: usize,
    },
    NoUuid,
    SeveralUuids,
    /// Neither an index nor a UUID.
    Malformed,
}

/// A device as `select` needs it: NVML index, UUID, model name, and for a
/// MIG instance its GPU's UUID (the instance shares the GPU's index).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceId<'a> {
    pub index: u32,
    pub uuid: &'a str,
    pub name: &'a str,
    pub mig_parent: Option<&'a str>,
    /// A GPU NVML says is in MIG mode (whether or not its instances
    /// could be opened).
    pub mig_mode: bool,
}

impl<'a> DeviceId<'a> {
    pub const fn gpu(index: u32, uuid: &'a str, name: &'a str) -> Self {
        DeviceId {
            index,
            uuid,
            name,
            mig_parent: None,
            mig_mode: false,
        }
    }

    /// A GPU in MIG mode: NVML says so, or an instance names it.
    fn in_mig_mode(&self, devices: &[DeviceId<'_>]) -> bool {
        self.mig_parent.is_none()
            && (self.mig_mode || devices.iter().any(|d| d.mig_parent == Some(self.uuid)))
    }
}

impl<'a> From<&'a crate::measure::nvml::GpuInfo> for DeviceId<'a> {
    fn from(info: &'a crate::measure::nvml::GpuInfo) -> Self {
        DeviceId {
            index: info.index,
            uuid: &info.uuid,
            name: &info.name,
            mig_parent: info.mig_parent.as_deref(),
            mig_mode: info.mig == Some(true),
        }
    }
}

/// The device CUDA uses for the one at `position`: a MIG-mode GPU's first
/// instance, with a note; `None` for a MIG-mode GPU none of whose
/// instances could be opened.
pub(crate) fn through_mig(
    position: usize,
    devices: &[DeviceId<'_>],
    notes: &mut Vec<SelectionNote>,
) -> Option<usize> {
    let device = &devices[position];
    if device.mig_parent.is_some() || !device.in_mig_mode(devices) {
        return Some(position);
    }
    let first = devices
        .iter()
        .position(|d| d.mig_parent == Some(device.uuid))?;
    notes.push(SelectionNote::MigFirstInstance {
        gpu: device.index,
        instance: devices[first].uuid.to_string(),
    });
    Some(first)
}

/// Apply `CUDA_VISIBLE_DEVICES` (and `CUDA_DEVICE_ORDER`) to a device
/// table in NVML index order (devices that could not be opened left out,
/// so an index entry is matched against each device's NVML index).
pub fn select(
    value: Option<&str>,
    device_order: Option<&str>,
    devices: &[DeviceId<'_>],
) -> Selection {
    let uuids: Vec<&str> = devices.iter().map(|d| d.uuid).collect();
    let mut selection = Selection {
        cuda_visible_devices: value.map(str::to_string),
        positions: Vec::new(),
        notes: Vec::new(),
        unmapped: false,
    };
    let Some(value) = value else {
        // Every GPU; one in MIG mode as its first instance, as CUDA
        // shows it to a process.
        for position in (0..uuids.len()).filter(|&p| devices[p].mig_parent.is_none()) {
            match through_mig(position, devices, &mut selection.notes) {
                Some(shown) => selection.positions.push(shown),
                None => {
                    selection.unmapped = true;
                    selection.notes.push(SelectionNote::MigUnopened {
                        gpu: devices[position].index,
                        entry: None,
                    });
                }
            }
        }
        return selection;
    };
    let mut used_an_index = false;
    for entry in value.split(',').map(str::trim) {
        let found = match entry.parse::<usize>() {
            Ok(index) => {
                used_an_index = true;
                devices
                    .iter()
                    .position(|d| {
                        d.mig_parent.is_none() && usize::try_from(d.index).is_ok_and(|i| i == index)
                    })
                    .ok_or(Unusable::NoDevice { count: uuids.len() })
            }
            Err(_) if entry.starts_with("GPU-") || entry.starts_with("MIG-") => {
                let matches: Vec<usize> = uuids
                    .iter()
                    .enumerate()
                    .filter(|(_, u)| u.starts_with(entry))
                    .map(|(i, _)| i)
                    .collect();
                match matches.as_slice() {
                    [one] => Ok(*one),
                    [] if entry.starts_with("MIG-") => {
                        selection.unmapped = true;
                        selection.notes.push(SelectionNote::MigUnlisted {
                            entry: entry.to_string(),
                        });
                        break;
                    }
                    [] => Err(Unusable::NoUuid),
                    _ => Err(Unusable::SeveralUuids),
                }
            }
            Err(_) if entry.is_empty() && value.trim().is_empty() => return selection,
            Err(_) => Err(Unusable::Malformed),
        };
        let named = found.as_ref().ok().map(|&p| devices[p].index);
        let found = match found.map(|p| through_mig(p, devices, &mut selection.notes)) {
            Ok(Some(position)) => Ok(position),
            Ok(None) => {
                selection.unmapped = true;
                selection.notes.push(SelectionNote::MigUnopened {
                    gpu: named.unwrap_or_default(),
                    entry: Some(entry.to_string()),
                });
                break;
            }
            Err(why) => Err(why),
        };
        match found {
            Ok(position) if selection.positions.contains(&position) => {
                selection.notes.push(SelectionNote::Repeated { position });
                break;
            }
            Ok(position) => selection.positions.push(position),
            Err(why) => {
                selection.notes.push(SelectionNote::Ignored {
                    entry: entry.to_string(),
                    why,
                });
                break;
            }
        }
    }
    // The fastest-first order CUDA uses by default can only differ from PCI
    // bus order between different models.
    let mixed_models = devices.iter().any(|d| d.name != devices[0].name);
    if used_an_index && mixed_models && device_order != Some("PCI_BUS_ID") {
        selection.notes.push(SelectionNote::IndexOrder);
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
        DeviceId::gpu(0, UUIDS[0], "H100"),
        DeviceId::gpu(1, UUIDS[1], "H100"),
        DeviceId::gpu(2, UUIDS[2], "H100"),
    ];
    const MIXED: [DeviceId<'static>; 3] = [
        DeviceId::gpu(0, UUIDS[0], "H100"),
        DeviceId::gpu(1, UUIDS[1], "A100"),
        DeviceId::gpu(2, UUIDS[2], "H100"),
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
        assert_eq!(
            selection.notes,
            [SelectionNote::Ignored {
                entry: "7".into(),
                why: Unusable::NoDevice { count: 3 }
            }]
        );
    }

    #[test]
    fn index_order_caveat_only_when_it_matters() {
        let caveat = |selection: Selection| selection.notes.contains(&SelectionNote::IndexOrder);
        assert!(caveat(select(Some("1"), None, &MIXED)));
        assert!(
            !caveat(select(Some("1"), None, &SAME)),
            "identical models: same order"
        );
        assert!(!caveat(select(Some("1"), Some("PCI_BUS_ID"), &MIXED)));
        assert!(!caveat(select(Some(UUIDS[1]), None, &MIXED)));
    }

    #[test]
    fn a_mig_instance_nvml_does_not_list_makes_figures_unknown() {
        let selection = select(Some("MIG-1234"), None, &SAME);
        assert!(selection.unmapped);
        assert_eq!(
            selection.notes,
            [SelectionNote::MigUnlisted {
                entry: "MIG-1234".into()
            }]
        );
        assert!(!select(Some("0,7"), None, &SAME).unmapped);
    }

    /// GPU 0 is in MIG mode with two instances; GPU 1 is not.
    const MIG: [DeviceId<'static>; 4] = [
        DeviceId::gpu(0, UUIDS[0], "A100"),
        DeviceId::gpu(1, UUIDS[1], "A100"),
        DeviceId {
            index: 0,
            uuid: "MIG-11111111-0000-0000-0000-000000000000",
            name: "A100 MIG 3g.20gb",
            mig_parent: Some(UUIDS[0]),
            mig_mode: false,
        },
        DeviceId {
            index: 0,
            uuid: "MIG-22222222-0000-0000-0000-000000000000",
            name: "A100 MIG 3g.20gb",
            mig_parent: Some(UUIDS[0]),
            mig_mode: false,
        },
    ];

    #[test]
    fn a_gpu_in_mig_mode_is_measured_through_its_instances() {
        let table: &[(Option<&str>, &[usize])] = &[
            // Every GPU, GPU 0 as its first instance; never GPU 0's own.
            (None, &[2, 1]),
            (Some("MIG-2222"), &[3]),
            (Some("MIG-22222222-0000-0000-0000-000000000000,1"), &[3, 1]),
            // By index or GPU UUID: the first instance, as CUDA uses it.
            (Some("0"), &[2]),
            (Some(UUIDS[0]), &[2]),
            (Some("1,0"), &[1, 2]),
        ];
        for (value, expected) in table {
            let selection = select(*value, Some("PCI_BUS_ID"), &MIG);
            assert_eq!(selection.positions, *expected, "{value:?}");
            assert!(!selection.unmapped, "{value:?}");
        }
        let by_index = select(Some("0"), Some("PCI_BUS_ID"), &MIG);
        assert_eq!(
            by_index.notes,
            [SelectionNote::MigFirstInstance {
                gpu: 0,
                instance: MIG[2].uuid.into()
            }]
        );
        // GPU 0 is in MIG mode, but its instances could not be opened:
        // unknown, never GPU 0's own figures.
        let mut unopened = [MIG[0], MIG[1]];
        unopened[0].mig_mode = true;
        for value in [Some("0"), Some(UUIDS[0]), Some("MIG-3333")] {
            let selection = select(value, Some("PCI_BUS_ID"), &unopened);
            assert!(
                selection.unmapped && selection.positions.is_empty(),
                "{value:?}"
            );
        }
        let none = select(None, None, &unopened);
        assert_eq!(none.positions, [1]);
        assert!(
            none.unmapped,
            "GPU 0's figures are unknown: {:?}",
            none.notes
        );
    }
}

//! GPU figures on three generations of drivers, each a build of the fake
//! NVML library that behaves as that generation's does: the versioned
//! detail list (R550+), early R535's 32-byte `_v3` entries, and a driver
//! older than R510 (24-byte `_v3` entries, memory through version 1 only).
//! Every process list counts: compute, graphics and MPS; the driver's own
//! reserve is no process's headroom.

mod common;

use common::fake_nvml::*;
use common::*;

const GENERATIONS: [Variant; 3] = [Variant::Complete, Variant::R535Early, Variant::OldDriver];

fn one_device(extra: &str) -> String {
    format!(
        "driver 535.54.03\ncuda 12020\ndevice {UUID_0} total={} used={} accounting=0 persistence=1 {extra}name=Fake H100 80GB\n",
        8 * GIB,
        256 * MIB
    )
}

/// Early R535 drivers write 32-byte entries through the `_v3` call: read
/// as 24-byte ones, two processes of 512 MiB read as one, and with more
/// than 48 processes on the device the driver wrote past the buffer. Each
/// generation's layout is read whole, with 60 other processes listed.
#[test]
fn every_driver_generations_process_list_is_read_whole() {
    for variant in GENERATIONS {
        let project = Project::new(&gpu_suite(
            "20ms",
            "\"--mib\", \"512\", \"--child-mib\", \"512\", \"--ghosts\", \"60\", \"--hold\", \"1500ms\"",
            "",
        ))
        .with_fake_gpus(&one_device(""), variant);
        let run = project.run(&[]);
        run.assert_code(0);
        let case = run.case("c");
        assert_eq!(
            mib(&case["gpu_peak_bytes"]),
            Some(1024),
            "{variant:?}: both processes of the case, none of the 60 others\n{case:#}"
        );
        assert_eq!(case["gpu_peak_method"], "sampled@20ms", "{variant:?}");
        let listing = &run.results()["gpu"]["process_listing"];
        let expected = match variant {
            Variant::Complete => "detail-list",
            Variant::R535Early => "v3-wide",
            _ => "v3",
        };
        assert_eq!(listing, expected, "{variant:?}");
    }
}

/// A renderer (graphics list only) and an MPS client (MPS list only) hold
/// memory of the case as surely as a compute process; a process in two
/// lists counts once.
#[test]
fn graphics_and_mps_processes_count_and_a_process_in_two_lists_counts_once() {
    for variant in GENERATIONS {
        let project = Project::new(&gpu_suite(
            "20ms",
            "\"--mib\", \"256\", \"--lists\", \"compute,graphics\", \"--child-mib\", \"128\", \"--child-lists\", \"mps\", \"--hold\", \"1500ms\"",
            "",
        ))
        .with_fake_gpus(&one_device(""), variant);
        let run = project.run(&[]);
        run.assert_code(0);
        let case = run.case("c");
        assert_eq!(
            mib(&case["gpu_peak_bytes"]),
            Some(256 + 128),
            "{variant:?}\n{case:#}"
        );

        let renderer = Project::new(&gpu_suite(
            "20ms",
            "\"--mib\", \"192\", \"--lists\", \"graphics\", \"--hold\", \"1s\"",
            "",
        ))
        .with_fake_gpus(&one_device(""), variant);
        let run = renderer.run(&[]);
        run.assert_code(0);
        let case = run.case("c");
        assert_eq!(mib(&case["gpu_peak_bytes"]), Some(192), "{variant:?}");
        assert_eq!(case["gpu_peak_method"], "sampled@20ms", "{variant:?}");
    }
}

/// `memory_info_v2` says what the driver reserves; headroom is a share of
/// the rest. A driver without version 2 is still measured, through
/// version 1, with no reserve named.
#[test]
fn headroom_is_a_share_of_what_the_driver_does_not_reserve() {
    // Half of 8 GiB less 1 GiB reserved is 3.5 GiB: 3.75 GiB breaches it,
    // though it is under half of the total.
    let suite = gpu_suite(
        "20ms",
        "\"--mib\", \"3840\", \"--hold\", \"1s\"",
        "budget = { gpu_fraction = 0.5 }",
    );
    let reserved = format!("reserved={GIB} ");
    let project = Project::new(&suite).with_fake_gpus(&one_device(&reserved), Variant::Complete);
    let run = project.run(&[]);
    run.assert_code(1);
    let case = run.case("c");
    assert_eq!(mib(&case["gpu_devices"][0]["reserved_bytes"]), Some(1024));
    assert_eq!(mib(&case["gpu_peak_bytes"]), Some(3840));
    let message = run.message("c");
    assert!(
        message.contains("7.00 GiB usable (8.00 GiB less 1.00 GiB the driver reserves)")
            && message.contains("headroom limit (3.50 GiB)"),
        "{message}"
    );

    let old = Project::new(&suite).with_fake_gpus(&one_device(&reserved), Variant::OldDriver);
    let run = old.run(&[]);
    // Version 1 names no reserve (its `used` holds it): the limit is half
    // of the total, and the figure is the case's own all the same.
    run.assert_code(0);
    let case = run.case("c");
    assert!(
        case["gpu_devices"][0].get("reserved_bytes").is_none(),
        "{case:#}"
    );
    assert_eq!(mib(&case["gpu_peak_bytes"]), Some(3840));
}

//! GPU figures on three generations of drivers, each a build of the fake
//! NVML library that behaves as that generation's does: the versioned
//! detail list (R550+), early R535's 32-byte `_v3` entries, and a driver
//! older than R510 (24-byte `_v3` entries, memory through version 1 only).
//! Every process list counts: compute, graphics and MPS; the driver's own
//! reserve is no process's headroom.

mod common;

use common::fake_nvml::*;
use common::running::{Handshake, Running};
use common::*;

const GENERATIONS: [Variant; 3] = [Variant::Complete, Variant::R535Early, Variant::OldDriver];

fn one_device(extra: &str) -> String {
    format!(
        "driver 535.54.03\ncuda 12020\ndevice {UUID_0} total={} used={} accounting=0 persistence=1 {extra}name=Fake H100 80GB\n",
        8 * GIB,
        256 * MIB
    )
}

/// Case `c` of [`gpu_suite`] (gpu_alloc.py with `args`, plus `lines`)
/// run on the fake driver `config` of generation `variant`, with the exit
/// code `code`: the project (its folder lives as long as it does), the
/// run and the case.
fn run_case(
    variant: Variant,
    config: &str,
    (args, lines): (&str, &str),
    code: i32,
) -> (Project, Run, serde_json::Value) {
    let project = Project::new(&gpu_suite("20ms", args, lines)).with_fake_gpus(config, variant);
    let run = project.run(&[]);
    run.assert_code(code);
    let case = run.case("c");
    (project, run, case)
}

/// Early R535 drivers write 32-byte entries through the `_v3` call: read
/// as 24-byte ones, two processes of 512 MiB read as one, and with more
/// than 48 processes on the device the driver wrote past the buffer. Each
/// generation's layout is read whole, with 60 other processes listed.
#[test]
fn every_driver_generations_process_list_is_read_whole() {
    for variant in GENERATIONS {
        let (_project, run, case) = run_case(
            variant,
            &one_device(""),
            (
                "\"--mib\", \"512\", \"--child-mib\", \"512\", \"--ghosts\", \"60\", \"--hold\", \"1500ms\"",
                "",
            ),
            0,
        );
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
        let (_project, _, case) = run_case(
            variant,
            &one_device(""),
            (
                "\"--mib\", \"256\", \"--lists\", \"compute,graphics\", \"--child-mib\", \"128\", \"--child-lists\", \"mps\", \"--hold\", \"1500ms\"",
                "",
            ),
            0,
        );
        assert_eq!(
            mib(&case["gpu_peak_bytes"]),
            Some(256 + 128),
            "{variant:?}\n{case:#}"
        );

        let (_project, _, case) = run_case(
            variant,
            &one_device(""),
            (
                "\"--mib\", \"192\", \"--lists\", \"graphics\", \"--hold\", \"1s\"",
                "",
            ),
            0,
        );
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
    assert_eq!(case["failure_kind"], "headroom", "{case:#}");
    let headroom = assert_breached(&case, "budget.gpu_fraction.gpu0");
    assert_eq!(mib(&headroom["limit_bytes"]), Some(3584), "{headroom:#}");
    let facts = &headroom["facts"]["headroom"];
    assert_eq!(mib(&facts["total_bytes"]), Some(8192), "{headroom:#}");
    assert_eq!(mib(&facts["reserved_bytes"]), Some(1024), "{headroom:#}");

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

/// A GPU that falls off the bus mid-case (NVML: GPU_IS_LOST) leaves a GPU
/// figure of the time before only. It is never gated as whole: the
/// device's figure and the case's are null, with when and why, and the
/// case is an error of its own kind, `gpu-lost`, even though the workload
/// exited 0 and everything it was seen to hold was under its budget.
#[test]
fn a_gpu_lost_mid_case_leaves_no_figure_and_errors_the_case() {
    let project = Project::new("");
    let handshake = Handshake::new(&project);
    std::fs::write(
        project.suite(),
        gpu_suite(
            "20ms",
            &format!(
                "\"--mib\", \"512\", \"--hold\", \"200ms\", {}",
                handshake.args()
            ),
            "budget = { gpu = \"4 GiB\" }",
        ),
    )
    .expect("suite");
    let project = project.with_fake_gpus(&one_device("lost=lost.flag "), Variant::Complete);
    let mut running = Running::start(&project);
    running.wait_for(&handshake.started);
    handshake.go();
    let pid = handshake.allocated_pid(&mut running);
    running.wait_for(&project.listed(pid));
    std::fs::write(project.path().join("lost.flag"), "").expect("lose the GPU");
    // A tick after the loss, then the workload ends.
    std::thread::sleep(std::time::Duration::from_millis(100));
    handshake.release();
    let run = running.finish_within_a_minute();
    run.assert_code(1);
    let case = run.case("c");
    assert_eq!(case["status"], "error", "{case:#}");
    assert_eq!(case["failure_kind"], "gpu-lost", "{case:#}");
    assert!(case["gpu_peak_bytes"].is_null(), "{case:#}");
    let device = &case["gpu_devices"][0];
    assert!(device["peak_bytes"].is_null(), "{device:#}");
    assert!(
        device["lost"]["at_s"].as_f64().is_some_and(|at| at > 0.0),
        "{device:#}"
    );
    assert!(
        device["lost"]["reason"]
            .as_str()
            .is_some_and(|why| !why.is_empty()),
        "NVML's error kept: {device:#}"
    );
    let junit = std::fs::read_to_string(project.out().join("junit.xml")).expect("junit");
    assert!(junit.contains("type=\"gpu-lost\""), "{junit}");
}

/// NVML that lists no GPU (a container given none) cannot measure GPU
/// memory: `gpu = "required"` is exit 3 with the reason before anything
/// runs — never a pass with "gpu peak 0 B" — and `auto` runs the case
/// with its GPU figures unknown, saying why.
#[test]
fn a_machine_whose_nvml_lists_no_gpu_measures_no_gpu_memory() {
    let suite = gpu_suite("20ms", "\"--mib\", \"0\", \"--hold\", \"10ms\"", "");
    let no_devices = "driver 550.54.15\ncuda 12040\n";
    let project = Project::new(&suite).with_fake_gpus(no_devices, Variant::Complete);
    let run = project.run(&["--gpu", "required"]);
    run.assert_code(3);
    assert!(
        run.stderr.contains("GPU memory is required") && run.stderr.contains("NVML lists no GPU"),
        "{}",
        run.stderr
    );
    assert!(!project.out().join("cases").exists(), "nothing ran");

    let project =
        Project::new(&suite.replace("\"--mib\", \"0\", \"--hold\", \"10ms\"", "\"--help\""))
            .with_fake_gpus(no_devices, Variant::Complete);
    let run = project.run(&["--gpu", "auto"]);
    run.assert_code(0);
    let case = run.case("c");
    assert!(case["gpu_peak_bytes"].is_null(), "{case:#}");
    assert!(
        run.results()["measurement"]["gpu_note"]
            .as_str()
            .is_some_and(|note| note.contains("NVML lists no GPU")),
        "{:#}",
        run.results()["measurement"]
    );
}

/// Inside a container NVML reports the host's pids. A container pid that
/// happens to equal one NVML lists must not make a stranger's memory the
/// case's (nor its accounting record): in a pid namespace of its own,
/// oomgate matches no pid, reads no accounting, and the figure is the
/// device's rise, labelled as a container's. Run here under `unshare
/// --pid`, where the workload's own pid — what the fake driver lists —
/// is exactly such a coincidence.
#[test]
fn in_a_pid_namespace_of_its_own_no_pid_is_matched() {
    let project = Project::new(&gpu_suite(
        "20ms",
        "\"--mib\", \"512\", \"--hold\", \"600ms\"",
        "",
    ))
    .with_fake_gpus(
        &one_device("").replace("accounting=0", "accounting=1"),
        Variant::Complete,
    );
    let binary = project.oomgate().get_program().to_os_string();
    let mut command = std::process::Command::new("unshare");
    command
        .args(["--pid", "--fork", "--mount-proc"])
        .arg(binary)
        .arg("run")
        .arg(project.suite())
        .arg("--out")
        .arg(project.out());
    for (key, value) in project.oomgate().get_envs() {
        match value {
            Some(value) => command.env(key, value),
            None => command.env_remove(key),
        };
    }
    let run = project.finish(command);
    run.assert_code(0);
    let case = run.case("c");
    let device = &case["gpu_devices"][0];
    assert_eq!(device["method"], "device-delta", "{case:#}");
    assert_eq!(mib(&device["peak_bytes"]), Some(512), "{case:#}");
    assert!(device["accounting_peak_bytes"].is_null(), "{device:#}");
    assert!(
        device["note"]
            .as_str()
            .is_some_and(|n| n.contains("in a container") && n.contains("pid namespace")),
        "{device:#}"
    );
    let junit = std::fs::read_to_string(project.out().join("junit.xml")).expect("junit");
    assert!(junit.contains("in a container"), "{junit}");
}

/// With accounting on, a process born and dead between two samples — the
/// spike accounting exists for — is found in the driver's records, though
/// no sample ever listed it and no scan of the case's tree saw its pid: a
/// child holds 1 GiB for 20 ms beside its parent's steady 256 MiB (the
/// driver records it under a pid that no scan sees, as one that lived
/// between two scans has).
#[test]
fn accounting_finds_a_process_no_sample_saw() {
    let project = Project::new(&gpu_suite(
        "1s",
        "\"--mib\", \"256\", \"--hold\", \"1500ms\", \"--child-mib\", \"1024\", \"--child-hold\", \"20ms\", \"--child-pid-offset\", \"5000000\"",
        "",
    ))
    .with_fake_gpus(
        &one_device("").replace("accounting=0", "accounting=1"),
        Variant::Complete,
    );
    let run = project.run(&[]);
    run.assert_code(0);
    let case = run.case("c");
    let device = &case["gpu_devices"][0];
    assert_eq!(device["method"], "driver-accounting", "{case:#}");
    assert!(
        mib(&device["accounting_peak_bytes"]).is_some_and(|peak| peak >= 1024),
        "{device:#}"
    );
    assert!(
        mib(&case["gpu_peak_bytes"]).is_some_and(|peak| peak >= 1024),
        "{case:#}"
    );
}

/// The allocator's own peak, reported through the probe, is a floor: a
/// spike the samples missed (NVML saw 256 MiB; torch reserved 1 GiB at its
/// peak) raises the figure to it, the report says why, and the budget
/// judges the raised figure.
#[test]
fn the_allocators_peak_is_a_floor_of_the_gpu_figure() {
    let (_project, run, case) = run_case(
        Variant::Complete,
        &one_device(""),
        (
            "\"--mib\", \"256\", \"--hold\", \"300ms\", \"--probe-reserved-mib\", \"1024\"",
            "budget = { gpu = \"768 MiB\" }",
        ),
        1,
    );
    assert_eq!(mib(&case["gpu_peak_bytes"]), Some(1024), "{case:#}");
    assert_eq!(
        mib(&case["gpu_allocator_floor_bytes"]),
        Some(1024),
        "{case:#}"
    );
    assert_eq!(case["failure_kind"], "budget", "{case:#}");
    let details = std::fs::read_to_string(run.out.join("junit.xml")).expect("junit");
    assert!(
        details.contains("a spike was missed between samples"),
        "{details}"
    );
}

const MIG_A: &str = "MIG-aaaaaaaa-0000-0000-0000-000000000000";
const MIG_B: &str = "MIG-bbbbbbbb-0000-0000-0000-000000000000";

/// GPU 0 split into two MIG instances of 20 GiB.
fn mig_gpu() -> String {
    format!(
        "driver 550.54.15\ncuda 12040\ndevice {UUID_0} total={} used=0 accounting=0 persistence=1 name=Fake A100 40GB\nmig {UUID_0} {MIG_A} total={} used=0 name=Fake A100 MIG 3g.20gb\nmig {UUID_0} {MIG_B} total={} used=0 name=Fake A100 MIG 3g.20gb\n",
        40 * GIB,
        20 * GIB,
        20 * GIB
    )
}

/// A GPU in MIG mode is measured through its instances, never its own
/// handle, which answers for every slice: picked by index, the case is
/// measured on the first instance (the one a CUDA process uses), and
/// another tenant's 4 GiB on the other slice, arriving while the case
/// runs, is in no figure of the case — even its device delta.
#[test]
fn a_gpu_in_mig_mode_is_measured_through_its_instances() {
    let project = Project::new("");
    let handshake = Handshake::new(&project);
    // NVML's pid is not the workload's (as in a container): the device's
    // rise is all there is to measure, and it must be the slice's.
    std::fs::write(
        project.suite(),
        gpu_suite(
            "20ms",
            &format!(
                "\"--mib\", \"1024\", \"--pid-offset\", \"5000000\", \"--hold\", \"100ms\", {}",
                handshake.args()
            ),
            "env = { CUDA_VISIBLE_DEVICES = \"0\" }",
        ),
    )
    .expect("suite");
    let project = project.with_fake_gpus(&mig_gpu(), Variant::Complete);
    let mut running = Running::start(&project);
    running.wait_for(&handshake.started);
    handshake.go();
    let pid = handshake.allocated_pid(&mut running);
    running.wait_for(&project.listed(pid));
    // Two more samples with the tenant there (each list oomgate is handed
    // adds a line to the case's `listed` file).
    let lists = || std::fs::read_to_string(project.listed(pid)).map_or(0, |t| t.lines().count());
    let before = lists();
    let _tenant = Foreign::start(&project, MIG_B, 4 * GIB);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while lists() < before + 2 {
        assert!(
            std::time::Instant::now() < deadline,
            "oomgate stopped sampling"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    handshake.release();
    let run = running.finish_within_a_minute();
    run.assert_code(0);
    let case = run.case("c");
    let devices = case["gpu_devices"].as_array().cloned().unwrap_or_default();
    assert_eq!(devices.len(), 1, "{case:#}");
    assert_eq!(devices[0]["uuid"], MIG_A, "{case:#}");
    assert_eq!(devices[0]["mig_parent"], UUID_0, "{case:#}");
    assert_eq!(mib(&devices[0]["total_bytes"]), Some(20 * 1024));
    assert_eq!(devices[0]["method"], "device-delta", "{case:#}");
    assert_eq!(
        mib(&case["gpu_peak_bytes"]),
        Some(1024),
        "the case's slice only, not the tenant's 4 GiB on the other: {case:#}"
    );
    let gpus = &run.results()["gpu"]["devices"];
    assert_eq!(gpus[0]["mig"], true, "{gpus:#}");
    assert_eq!(
        gpus.as_array().map(Vec::len),
        Some(3),
        "the GPU and its two instances"
    );

    // Named by its MIG UUID, the other instance; its figure per process.
    let (_project, _, case) = run_case(
        Variant::Complete,
        &mig_gpu(),
        (
            "\"--mib\", \"512\", \"--hold\", \"300ms\"",
            &format!("env = {{ CUDA_VISIBLE_DEVICES = \"{MIG_B}\" }}"),
        ),
        0,
    );
    assert_eq!(case["gpu_devices"][0]["uuid"], MIG_B, "{case:#}");
    assert_eq!(case["gpu_peak_method"], "sampled@20ms", "{case:#}");
    assert_eq!(mib(&case["gpu_peak_bytes"]), Some(512), "{case:#}");
}

/// CUDA numbers devices fastest first unless `CUDA_DEVICE_ORDER=PCI_BUS_ID`:
/// on a machine with an A100 at PCI index 0 and a faster H100 at 1,
/// `CUDA_VISIBLE_DEVICES=0` is the H100. Where libcuda is installed,
/// oomgate asks it (in a child, as nvitop does) and measures the H100 the
/// workload uses; the rules alone would have measured the A100. Without
/// libcuda, the rules decide, and say the order may differ.
#[test]
fn cuda_itself_says_which_devices_a_case_sees() {
    let config = format!(
        "driver 550.54.15\ncuda 12040\ndevice {UUID_0} total={} used=0 accounting=0 persistence=1 speed=1 name=Fake A100 80GB\ndevice {UUID_1} total={} used=0 accounting=0 persistence=1 speed=2 name=Fake H100 80GB\n",
        8 * GIB,
        8 * GIB
    );
    let suite = gpu_suite(
        "20ms",
        "\"--mib\", \"512\", \"--hold\", \"300ms\"",
        "env = { CUDA_VISIBLE_DEVICES = \"0\" }",
    );
    let project = Project::new(&suite)
        .with_fake_gpus(&config, Variant::Complete)
        .with_fake_cuda();
    let run = project.run(&[]);
    run.assert_code(0);
    let case = run.case("c");
    let devices = case["gpu_devices"].as_array().cloned().unwrap_or_default();
    assert_eq!(devices.len(), 1, "{case:#}");
    assert_eq!(devices[0]["uuid"], UUID_1, "{case:#}");
    assert_eq!(mib(&case["gpu_peak_bytes"]), Some(512), "{case:#}");
    assert_eq!(case["gpu_peak_method"], "sampled@20ms", "{case:#}");
    assert!(run.stderr.contains("asked of libcuda"), "{}", run.stderr);

    // The rules alone: PCI order, with the caveat said.
    let rules = Project::new(&suite).with_fake_gpus(&config, Variant::Complete);
    let run = rules.run(&[]);
    let case = run.case("c");
    assert_eq!(case["gpu_devices"][0]["uuid"], UUID_0, "{case:#}");
    assert!(run.stderr.contains("CUDA_DEVICE_ORDER"), "{}", run.stderr);
}

/// The workload's step lines, as `oomgate_probe.step()` writes them under
/// torch, of a process NVML lists with 1 GiB while torch reserved 700 MiB
/// (600 allocated), and of its child, 512 MiB against 256 reserved.
fn reporting(child_reserved_mib: u32) -> String {
    format!(
        "\"--mib\", \"1024\", \"--hold\", \"800ms\", \"--report-reserved-mib\", \"700\", \"--report-allocated-mib\", \"600\", \"--child-mib\", \"512\", \"--child-hold\", \"800ms\", \"--child-report-reserved-mib\", \"{child_reserved_mib}\", \"--child-report-allocated-mib\", \"{child_reserved_mib}\""
    )
}

/// GPU memory outside the allocator is NVML's per-process figure less the
/// allocator's reserved at the same moment: 324 MiB for the workload and
/// 256 MiB for its child, 580 MiB for the case at its GPU peak, with the
/// 100 MiB reserved and not allocated beside it; in results.json, the
/// details and JUnit; a budget on it fails the case; locked, a growth of
/// it fails as a regression; and without a probe it is unknown, never
/// NVML's figure less nothing.
#[test]
fn memory_outside_the_allocator_is_nvml_less_reserved_per_process() {
    let (project, run, case) = run_case(
        Variant::Complete,
        &one_device(""),
        (
            &reporting(256),
            "budget = { gpu_outside_allocator = \"512 MiB\" }",
        ),
        1,
    );
    assert_eq!(mib(&case["outside_allocator_bytes"]), Some(580), "{case:#}");
    assert_eq!(
        mib(&case["outside_allocator_peak_bytes"]),
        Some(580),
        "{case:#}"
    );
    assert_eq!(mib(&case["gpu_fragmentation_bytes"]), Some(100), "{case:#}");
    let outside = &case["outside_allocator"];
    assert_eq!(mib(&outside["gpu_bytes"]), Some(1536), "{outside:#}");
    assert_eq!(mib(&outside["reserved_bytes"]), Some(956), "{outside:#}");
    let mut processes: Vec<Option<u64>> = outside["processes"]
        .as_array()
        .expect("processes")
        .iter()
        .map(|p| {
            assert!(p["pid"].as_u64().is_some(), "{p:#}");
            mib(&p["bytes"])
        })
        .collect();
    processes.sort_unstable();
    assert_eq!(processes, [Some(256), Some(324)], "{outside:#}");
    assert_eq!(case["failure_kind"], "budget", "{case:#}");
    let breach = assert_breached(&case, "budget.gpu_outside_allocator");
    assert!(
        breach["message"].as_str().is_some_and(|m| m.starts_with(
            "gpu memory outside the allocator peak 580.0 MiB (NVML per process less the allocator's reserved, at "
        ) && m.ends_with("exceeded budget 512.0 MiB (by 68.0 MiB)")),
        "{breach:#}"
    );
    let junit = std::fs::read_to_string(run.out.join("junit.xml")).expect("junit");
    assert!(
        junit.contains(&format!(r#"<property name="outside_allocator_bytes" value="{}"/>"#, 580 * MIB))
            && junit.contains("outside:     580.0 MiB outside the allocator at the GPU peak (NVML 1.50 GiB less reserved 956.0 MiB; largest 580.0 MiB), 100.0 MiB reserved and not allocated"),
        "{junit}"
    );

    let html = std::fs::read_to_string(run.out.join("report.html")).expect("html");
    assert!(
        html.contains("<h3>GPU memory at its peak, inside and outside the allocator</h3>")
            && html.contains(">allocated 856.0 MiB<")
            && html.contains(">reserved, not allocated 100.0 MiB<")
            && html.contains(">outside the allocator 580.0 MiB<"),
        "{html}"
    );

    // Locked, the child's allocator holding 128 MiB less leaves 128 MiB
    // more outside it: a regression of that figure alone.
    std::fs::write(project.suite(), gpu_suite("20ms", &reporting(256), "")).expect("suite");
    project.lock(&[]).assert_code(0);
    let lock = std::fs::read_to_string(project.lock_path()).expect("lock");
    assert!(
        lock.contains(&format!("outside_allocator_peak_bytes = {}", 580 * MIB)),
        "{lock}"
    );
    std::fs::write(project.suite(), gpu_suite("20ms", &reporting(128), "")).expect("suite");
    let run = project.run(&[]);
    run.assert_code(1);
    let case = run.case("c");
    assert_eq!(case["failure_kind"], "regression", "{case:#}");
    let regressed = assert_breached(&case, "baseline.outside_allocator");
    assert_eq!(mib(&regressed["figure_bytes"]), Some(708), "{regressed:#}");
    assert_eq!(
        mib(&regressed["baseline_bytes"]),
        Some(580),
        "{regressed:#}"
    );

    // No probe: unknown, and a budget on it cannot be verified.
    std::fs::write(
        project.suite(),
        gpu_suite(
            "20ms",
            "\"--mib\", \"1024\", \"--hold\", \"300ms\"",
            "budget = { gpu_outside_allocator = \"512 MiB\" }",
        ),
    )
    .expect("suite");
    let run = project.run(&["--no-baseline"]);
    run.assert_code(1);
    let case = run.case("c");
    assert!(case["outside_allocator_peak_bytes"].is_null(), "{case:#}");
    assert!(case["outside_allocator_bytes"].is_null(), "{case:#}");
    let unknown = check(&case, "budget.gpu_outside_allocator");
    assert_eq!(unknown["outcome"], "unknown", "{unknown:#}");
}

#[test]
fn the_mig_example_suite_is_valid() {
    let stdout = check_in_repository("examples/mig/slice.toml");
    assert!(
        stdout.contains("env:         PYTORCH_CUDA_ALLOC_CONF=expandable_segments:False"),
        "{stdout}"
    );
}

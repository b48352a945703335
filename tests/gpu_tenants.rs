//! GPU measurement beside other tenants, on the fake NVML driver: another
//! process's memory on the case's GPU (or another one) is never charged
//! to the case, and a figure that may hold it (the device delta of a
//! container's case) is reported as tainted rather than gated.

mod common;

use common::fake_nvml::*;
use common::running::{Handshake, Running};
use common::*;

/// A project on two fake GPUs whose case runs gpu_alloc.py with these
/// arguments and a [`Handshake`], plus extra case lines.
fn handshake_project(args: &str, case_lines: &str) -> (Project, Handshake) {
    let project = gpu_project("", &two_devices(false));
    let handshake = Handshake::new(&project);
    let suite = gpu_suite("20ms", &format!("{args}, {}", handshake.args()), case_lines);
    std::fs::write(project.suite(), suite).expect("write suite");
    (project, handshake)
}

/// Regression: a device the case never used was charged with another
/// tenant's growth (device delta per device), failing budgets falsely. The
/// tenant grows once oomgate has seen the case's own process on GPU 0.
#[test]
fn another_tenants_growth_on_an_unused_gpu_is_not_charged() {
    let (project, handshake) = handshake_project(
        "\"--mib\", \"1024\", \"--hold\", \"0s\"",
        "budget = { gpu = \"2 GiB\" }",
    );
    let mut running = Running::start(&project);
    running.wait_for(&handshake.started);
    handshake.go();
    let pid = handshake.allocated_pid(&mut running);
    running.wait_for(&project.listed(pid));
    let tenant = Foreign::start(&project, UUID_1, 4 * GIB);
    running.wait_for(&project.listed(tenant.pid()));
    handshake.release();
    let run = running.finish();
    run.assert_code(0);
    let case = run.case("c");
    assert_eq!(mib(&case["gpu_peak_bytes"]), Some(1024), "{case:#}");
    assert_eq!(mib(&case["gpu_devices"][1]["peak_bytes"]), Some(0));
    assert!(
        mib(&case["gpu_devices"][1]["device_peak_bytes"]).unwrap_or(0) >= 4096,
        "the tenant did grow: {case:#}"
    );
}

/// A pid offset that puts the pid NVML reports for the workload above the
/// kernel's limit (4194304), so it is never a visible process: a container,
/// where NVML's host pids match nothing in the case's tree.
const CONTAINER_PID_OFFSET: &str = "5000000";

/// Regression (issue 9): a tenant grew on another GPU before the case's
/// own process appeared; the device delta, live, charged it to the case
/// and stopped it over budget and headroom.
#[test]
fn another_tenants_growth_before_the_case_appears_does_not_stop_it() {
    let (project, handshake) = handshake_project(
        "\"--mib\", \"1024\", \"--hold\", \"0s\"",
        "budget = { gpu = \"2 GiB\", gpu_fraction = 0.4 }",
    );
    let (run, _tenant) = run_beside_a_tenant(&project, &handshake, UUID_1);
    run.assert_code(0);
    let case = run.case("c");
    assert_eq!(mib(&case["gpu_peak_bytes"]), Some(1024), "{case:#}");
    assert_eq!(case["gpu_peak_method"], "sampled@20ms");
    let device = &case["gpu_devices"][1];
    assert_eq!(mib(&device["peak_bytes"]), Some(0), "{case:#}");
    assert_eq!(device["tainted_by"], serde_json::json!([]));
    assert!(mib(&device["device_peak_bytes"]).unwrap_or(0) >= 4096);
}

/// Run the handshake case while another tenant, started once the case is
/// up, holds 4 GiB on the GPU `uuid`: the case allocates only after the
/// tenant is listed, and exits once its own process was listed too.
fn run_beside_a_tenant(project: &Project, handshake: &Handshake, uuid: &str) -> (Run, Foreign) {
    let mut running = Running::start(project);
    running.wait_for(&handshake.started);
    let tenant = Foreign::start(project, uuid, 4 * GIB);
    running.wait_for(&project.listed(tenant.pid()));
    handshake.go();
    let pid = handshake.allocated_pid(&mut running);
    running.wait_for(&project.listed(pid));
    handshake.release();
    (running.finish(), tenant)
}

/// A container's case (NVML's pids match none of its processes) on a GPU
/// where another tenant grows first: the device delta holds both, so it is
/// reported as tainted, and neither budget nor headroom fails the case.
#[test]
fn a_tainted_device_delta_is_reported_but_not_gated() {
    let (project, handshake) = handshake_project(
        &format!(
            "\"--mib\", \"1024\", \"--hold\", \"0s\", \"--pid-offset\", \"{CONTAINER_PID_OFFSET}\""
        ),
        "budget = { gpu = \"2 GiB\", gpu_fraction = 0.5 }",
    );
    let (run, tenant) = run_beside_a_tenant(&project, &handshake, UUID_0);
    run.assert_code(0);
    let case = run.case("c");
    let device = &case["gpu_devices"][0];
    assert_eq!(device["method"], "device-delta", "{case:#}");
    assert_eq!(mib(&device["peak_bytes"]), Some(1024 + 4096));
    assert_eq!(
        device["tainted_by"],
        serde_json::json!([{ "pid": tenant.pid(), "name": "sleep" }])
    );
    assert_eq!(case["gpu_peak_method"], "device-delta");
    assert_eq!(mib(&case["gpu_peak_bytes"]), Some(1024 + 4096));
    let taint = format!("tainted by pid {} (sleep)", tenant.pid());
    // Both limits see the figure, over each, and judge nothing of it.
    let budget = check(&case, "budget.gpu");
    assert_eq!(budget["passed"], true, "{budget:#}");
    assert_eq!(budget["outcome"], "not-gated", "{budget:#}");
    assert_eq!(
        mib(&budget["figure_bytes"]),
        Some(1024 + 4096),
        "{budget:#}"
    );
    assert_eq!(mib(&budget["limit_bytes"]), Some(2048), "{budget:#}");
    assert_eq!(
        budget["facts"]["budget"]["left_out"],
        serde_json::json!([{"index": 0, "by": [{"pid": tenant.pid(), "name": "sleep"}]}]),
        "{budget:#}"
    );
    let headroom = check(&case, "budget.gpu_fraction.gpu0");
    assert_eq!(headroom["passed"], true, "{headroom:#}");
    assert_eq!(headroom["outcome"], "not-gated", "{headroom:#}");
    assert!(
        headroom["figure_bytes"].as_u64() > headroom["limit_bytes"].as_u64(),
        "{headroom:#}"
    );
    assert_eq!(
        headroom["facts"]["headroom"]["taint"],
        serde_json::json!([{"pid": tenant.pid(), "name": "sleep"}]),
        "{headroom:#}"
    );
    assert!(
        run.stderr
            .contains("gpu peak 5.00 GiB (device-delta, tainted)"),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr.contains(&format!(
            "note: c: GPU 0 by device-delta [{taint}: not gated]"
        )),
        "{}",
        run.stderr
    );
    let junit = std::fs::read_to_string(project.out().join("junit.xml")).expect("junit");
    assert!(
        junit.contains(&format!(
            "case 5.00 GiB by device-delta [{taint}: not gated]"
        )),
        "{junit}"
    );
    // Nor is it a baseline: a lock from these results gates no GPU figure.
    let lock = project.path().join("suite.lock");
    let locked = project
        .oomgate()
        .arg("lock")
        .arg(project.suite())
        .arg("--from")
        .arg(project.out().join("results.json"))
        .output()
        .expect("oomgate lock");
    let stderr = String::from_utf8_lossy(&locked.stderr);
    assert_eq!(locked.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("tainted by another process"), "{stderr}");
    let text = std::fs::read_to_string(&lock).expect("lock written");
    assert!(!text.contains("gpu_peak_bytes"), "{text}");
}

/// The same container case with no other process on its GPU: the device
/// delta is the case's own rise and gates, live, like any figure.
#[test]
fn an_untainted_device_delta_still_gates() {
    for (budget, name, limit) in [
        ("gpu = \"512 MiB\"", "budget.gpu", 512 * MIB),
        // A tenth of the device's 8 GiB, rounded down to a byte.
        (
            "gpu_fraction = 0.1",
            "budget.gpu_fraction.gpu0",
            8 * GIB / 10,
        ),
    ] {
        let project = gpu_project(
            &gpu_suite(
                "20ms",
                &format!(
                    "\"--mib\", \"1024\", \"--hold\", \"60s\", \"--pid-offset\", \"{CONTAINER_PID_OFFSET}\""
                ),
                &format!("budget = {{ {budget} }}"),
            ),
            &two_devices(false),
        );
        let run = project.run(&[]);
        run.assert_code(1);
        let case = run.case("c");
        let breached = assert_breached(&case, name);
        assert_eq!(mib(&breached["figure_bytes"]), Some(1024), "{breached:#}");
        assert_eq!(breached["limit_bytes"], limit, "{breached:#}");
        assert_eq!(case["gpu_peak_method"], "device-delta", "{case:#}");
        // Stopped live: the 60 s workload was killed by oomgate.
        assert!(case["instances"][0]["exit"]["signal"].is_u64(), "{case:#}");
        assert_eq!(case["gpu_devices"][0]["tainted_by"], serde_json::json!([]));
    }
}

/// Once the case's own process is seen, its per-process figure gates, even
/// with another tenant on the same GPU (whose memory it does not include).
#[test]
fn the_per_process_figure_gates_beside_a_foreign_process() {
    let project = gpu_project(
        &gpu_suite(
            "20ms",
            "\"--mib\", \"1024\", \"--hold\", \"60s\"",
            "budget = { gpu = \"512 MiB\" }",
        ),
        &two_devices(false),
    );
    let _tenant = Foreign::start(&project, UUID_0, 4 * GIB);
    let run = project.run(&[]);
    run.assert_code(1);
    let case = run.case("c");
    let budget = assert_breached(&case, "budget.gpu");
    assert_eq!(mib(&budget["figure_bytes"]), Some(1024), "{budget:#}");
    assert_eq!(mib(&budget["limit_bytes"]), Some(512), "{budget:#}");
    // Stopped live: the 60 s workload was killed by oomgate.
    assert!(case["instances"][0]["exit"]["signal"].is_u64(), "{case:#}");
    let device = &case["gpu_devices"][0];
    assert_eq!(device["method"], "sampled@20ms");
    assert_eq!(device["tainted_by"], serde_json::json!([]));
}

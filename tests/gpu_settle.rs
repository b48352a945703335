//! A GPU that settles between cases: the driver frees a finished
//! process's memory asynchronously, so a case started at once can find an
//! earlier case's memory still on its GPU. Each case waits, before it
//! starts, for its GPUs to come back to their idle level (on the fake NVML
//! driver, whose `until=` keeps a dead process's memory for a while).

mod common;

use common::fake_nvml::*;
use common::*;

fn two_cases(linger_ms: u32, second_lines: &str) -> String {
    let alloc = toml_str(&workload("gpu_alloc.py"));
    format!(
        "[suite]\nname = \"settle\"\nsample_interval = \"20ms\"\n\
         [[case]]\nname = \"a\"\ncommand = [\"python3\", {alloc}, \"--mib\", \"2048\", \"--hold\", \"100ms\", \"--linger-ms\", \"{linger_ms}\"]\nsettle_timeout = \"0s\"\n\
         [[case]]\nname = \"b\"\ncommand = [\"python3\", {alloc}, \"--mib\", \"256\", \"--hold\", \"100ms\"]\n{second_lines}\n"
    )
}

fn one_gpu() -> String {
    format!(
        "driver 550.54.15\ncuda 12040\n{}",
        device(UUID_0, 8 * GIB, 256 * MIB, false, "Fake H100 80GB")
    )
}

/// The second case waits until the first one's 2 GiB is back, then starts
/// on a GPU at its idle level: its `before_bytes` holds none of it. (The
/// first case's own wait after it ends, which would absorb it, is off:
/// `settle_timeout = "0s"` on it.)
#[test]
fn a_case_waits_for_the_memory_an_earlier_case_left_on_its_gpu() {
    let project = Project::new(&two_cases(800, "")).with_fake_gpus(&one_gpu(), Variant::Complete);
    let run = project.run(&[]);
    run.assert_code(0);
    let b = run.case("b");
    let settle = &b["settle"];
    assert_eq!(settle["settled"], true, "{b:#}");
    assert!(
        settle["waited_s"].as_f64().is_some_and(|s| s > 0.2),
        "it waited for the driver: {settle:#}"
    );
    assert_eq!(
        mib(&b["gpu_devices"][0]["before_bytes"]),
        Some(256),
        "the GPU at its idle level when b started: {b:#}"
    );
    assert!(run.case("a").get("settle").is_none(), "a does not wait");
}

/// A wait that runs out starts the case anyway and says what still held
/// the GPU; `settle_timeout = "0s"` does not wait at all.
#[test]
fn a_wait_that_runs_out_is_said_and_zero_does_not_wait() {
    let project = Project::new(&two_cases(5000, "settle_timeout = \"300ms\""))
        .with_fake_gpus(&one_gpu(), Variant::Complete);
    let run = project.run(&[]);
    run.assert_code(0);
    let b = run.case("b");
    assert_eq!(b["settle"]["settled"], false, "{b:#}");
    let waited = b["settle"]["waited_s"].as_f64().unwrap_or(0.0);
    assert!((0.25..3.0).contains(&waited), "{waited}");
    assert_eq!(
        mib(&b["settle"]["devices"][0]["above_idle_bytes"]),
        Some(2048),
        "{b:#}"
    );
    assert!(
        run.stderr
            .contains("b: GPU 0 still held 2.00 GiB above its idle level (no process listed: memory the driver has not returned)"),
        "{}",
        run.stderr
    );

    let project = Project::new(&format!(
        "{}\n",
        two_cases(5000, "").replace(
            "[suite]\nname = \"settle\"\nsample_interval = \"20ms\"\n",
            "[suite]\nname = \"settle\"\nsample_interval = \"20ms\"\n[defaults]\nsettle_timeout = \"0s\"\n"
        )
    ))
    .with_fake_gpus(&one_gpu(), Variant::Complete);
    let run = project.run(&[]);
    run.assert_code(0);
    let b = run.case("b");
    assert!(b.get("settle").is_none(), "{b:#}");
    assert!(
        mib(&b["gpu_devices"][0]["before_bytes"]).is_some_and(|before| before >= 2048),
        "started at once, beside the memory not yet returned: {b:#}"
    );
}

/// After a case, what its GPUs did not give back is measured, waited for
/// as the next case would wait: memory the driver returns late counts as
/// given back; memory still held at the end of the wait is the case's
/// `gpu_left_bytes`, and `budget.gpu_left` fails it as `gpu-left`.
#[test]
fn what_a_case_does_not_give_back_is_gated_by_gpu_left() {
    let alloc = toml_str(&workload("gpu_alloc.py"));
    let suite = |linger_ms: u32, settle: &str| {
        format!(
            "[suite]\nname = \"left\"\nsample_interval = \"20ms\"\n[[case]]\nname = \"c\"\ncommand = [\"python3\", {alloc}, \"--mib\", \"2048\", \"--hold\", \"100ms\", \"--linger-ms\", \"{linger_ms}\"]\nbudget = {{ gpu_left = \"64 MiB\" }}\n{settle}\n"
        )
    };
    let returned = Project::new(&suite(300, "")).with_fake_gpus(&one_gpu(), Variant::Complete);
    let run = returned.run(&[]);
    run.assert_code(0);
    let case = run.case("c");
    assert_eq!(case["gpu_left_bytes"], 0, "{case:#}");

    let kept = Project::new(&suite(10_000, "settle_timeout = \"300ms\""))
        .with_fake_gpus(&one_gpu(), Variant::Complete);
    let run = kept.run(&[]);
    run.assert_code(1);
    let case = run.case("c");
    assert_eq!(case["failure_kind"], "gpu-left", "{case:#}");
    assert_eq!(mib(&case["gpu_left_bytes"]), Some(2048), "{case:#}");
    let left = assert_breached(&case, "budget.gpu_left");
    assert_eq!(mib(&left["figure_bytes"]), Some(2048), "{left:#}");
    assert_eq!(mib(&left["limit_bytes"]), Some(64), "{left:#}");
}

/// A GPU OOM on a GPU that had not settled may be the earlier case's
/// memory, not the case's own: the case is run again, once, and a pass
/// then is reported flaky — never silently green.
#[test]
fn an_oom_on_a_gpu_that_had_not_settled_is_retried_once_and_flaky() {
    let alloc = toml_str(&workload("gpu_alloc.py"));
    let suite = format!(
        "[suite]\nname = \"retry\"\nsample_interval = \"20ms\"\n\
         [[case]]\nname = \"a\"\ncommand = [\"python3\", {alloc}, \"--mib\", \"4096\", \"--hold\", \"50ms\", \"--linger-ms\", \"700\"]\nsettle_timeout = \"0s\"\n\
         [[case]]\nname = \"b\"\ncommand = [\"python3\", {alloc}, \"--mib\", \"6144\", \"--hold\", \"50ms\"]\nsettle_timeout = \"300ms\"\n"
    );
    let project = Project::new(&suite).with_fake_gpus(&one_gpu(), Variant::Complete);
    let run = project.run(&[]);
    let b = run.case("b");
    assert_eq!(b["status"], "passed", "{b:#}");
    let first = &b["retried_alone"]["first_attempt"];
    assert_eq!(first["failure_kind"], "gpu-oom", "{b:#}");
    assert_eq!(b["retried_alone"]["flaky"], true, "{b:#}");
    assert!(
        run.stderr
            .contains("b: ran out of GPU memory while its GPU had not settled"),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr.contains("its GPU not yet settled"),
        "{}",
        run.stderr
    );
    run.assert_code(0);
}

/// Another tenant on the GPU from before the run starts is in neither the
/// idle level nor what is waited on: an earlier case's memory not yet
/// given back is still seen beside it, not hidden by it.
#[test]
fn a_tenant_there_from_the_start_does_not_hide_what_was_not_given_back() {
    let project = Project::new(&two_cases(5000, "settle_timeout = \"300ms\""))
        .with_fake_gpus(&one_gpu(), Variant::Complete);
    let _tenant = Foreign::start(&project, UUID_0, 4 * GIB);
    let run = project.run(&[]);
    run.assert_code(0);
    let b = run.case("b");
    assert_eq!(b["settle"]["settled"], false, "{b:#}");
    assert_eq!(
        mib(&b["settle"]["devices"][0]["above_idle_bytes"]),
        Some(2048),
        "the first case's 2 GiB, beside the tenant's 4 GiB: {b:#}"
    );
}

//! Distributed cases: every rank measured on its own (a process with
//! `RANK` and what it starts), on the fake NVML driver's four GPUs, with a
//! torchrun-like launcher (fixtures/workloads/ranks.py).

mod common;

use common::fake_nvml::*;
use common::*;

fn four_gpus() -> String {
    let mut config = "driver 550.54.15\ncuda 12040\n".to_string();
    for i in 0..4 {
        config.push_str(&device(
            &format!("GPU-0000000{i}-0000-0000-0000-000000000000"),
            16 * GIB,
            0,
            false,
            "Fake H100 80GB",
        ));
    }
    config
}

fn project(case_lines: &str) -> Project {
    Project::new(&format!(
        "[suite]\nname = \"ddp\"\nsample_interval = \"20ms\"\n[[case]]\nname = \"train\"\ncommand = [\"python3\", {}, \"--nproc\", \"4\", \"--mib\", \"512\", \"--step-mib\", \"256\", \"--hold\", \"600ms\"]\n{case_lines}\n",
        toml_str(&workload("ranks.py"))
    ))
    .with_fake_gpus(&four_gpus(), Variant::Complete)
}

/// Four ranks on four GPUs, each with its own figure: 512, 768, 1024 and
/// 1280 MiB; the case's own figure is their sum, as always.
#[test]
fn each_rank_is_measured_on_its_own() {
    let project = project("");
    let run = project.run(&[]);
    run.assert_code(0);
    let case = run.case("train");
    let ranks = case["ranks"].as_array().expect("ranks");
    assert_eq!(ranks.len(), 4, "{case:#}");
    for (i, rank) in ranks.iter().enumerate() {
        assert_eq!(rank["rank"], i as u64);
        assert_eq!(
            mib(&rank["gpu_peak_bytes"]),
            Some(512 + 256 * i as u64),
            "{rank:#}"
        );
        assert_eq!(rank["devices"], serde_json::json!([i]), "{rank:#}");
        assert!(
            rank["host_peak_bytes"].as_u64().is_some_and(|b| b > MIB),
            "its own processes' host floors: {rank:#}"
        );
    }
    assert_eq!(mib(&case["gpu_peak_bytes"]), Some(512 + 768 + 1024 + 1280));
    assert!(
        run.stderr.contains("largest: rank 3, 1.25 GiB on GPU 3"),
        "{}",
        run.stderr
    );
    // The timeline draws each rank as its own line, with its peak.
    let timeline = read_json(&project.out().join("cases/train/timeline.json"));
    let lines = timeline["ranks"].as_object().expect("the timeline's ranks");
    assert_eq!(lines.len(), 4, "{:?}", lines.keys());
    for i in 0..4u64 {
        let line = &lines[&i.to_string()];
        assert_eq!(
            mib(&line["gpu_peak"]["bytes"]),
            Some(512 + 256 * i),
            "rank {i}"
        );
        let points = line["points"].as_array().expect("points");
        assert!(!points.is_empty(), "rank {i} has no point");
        assert!(
            points.iter().all(|p| p["gpu_bytes"]
                .as_u64()
                .is_some_and(|b| b <= (512 + 256 * i) * MIB)),
            "rank {i}: {points:?}"
        );
    }
}

/// `budget.gpu_rank` limits any one rank: rank 3's 1280 MiB is over 1 GiB
/// (rank 2's 1 GiB exactly is not), while the case's 3.5 GiB in all is
/// no concern of that budget.
#[test]
fn a_rank_over_its_budget_fails_the_case_and_is_named() {
    let project = project("budget = { gpu_rank = \"1 GiB\" }");
    let run = project.run(&[]);
    run.assert_code(1);
    let case = run.case("train");
    assert_eq!(case["failure_kind"], "budget", "{case:#}");
    let rank = assert_breached(&case, "budget.gpu_rank");
    assert_eq!(mib(&rank["figure_bytes"]), Some(1280), "{rank:#}");
    assert_eq!(mib(&rank["limit_bytes"]), Some(1024), "{rank:#}");
    assert_eq!(
        rank["facts"]["budget"]["method"],
        serde_json::json!({"rank": {"rank": 3, "devices": [3]}}),
        "{rank:#}"
    );
    let within = project_with_budget("2 GiB");
    within.run(&[]).assert_code(0);
}

fn project_with_budget(limit: &str) -> Project {
    project(&format!("budget = {{ gpu_rank = \"{limit}\" }}"))
}

/// The lock keeps each rank's figures; a regression names the rank that
/// grew, compared with the same rank.
#[test]
fn a_regression_names_the_rank_that_grew() {
    let project = project("");
    project.lock(&[]).assert_code(0);
    let lock = std::fs::read_to_string(project.lock_path()).expect("lock");
    assert!(lock.contains(".cases.train.ranks]]"), "{lock}");
    grow_rank_2(&project, "");
    let run = project.run(&[]);
    run.assert_code(1);
    let case = run.case("train");
    assert_eq!(case["failure_kind"], "regression", "{case:#}");
    let growth = &case["rank_growth"];
    assert_eq!(growth["rank"], 2, "{case:#}");
    assert_eq!(mib(&growth["before"]), Some(1024), "{growth:#}");
    assert_eq!(mib(&growth["after"]), Some(1536), "{growth:#}");
    let diff = project.diff_lock_and_results();
    assert!(diff.stdout.contains("rank 2 grew most"), "{}", diff.stdout);
}

/// The case's command with rank 2 taking 512 MiB more (and `extra`
/// arguments).
fn grow_rank_2(project: &Project, extra: &str) {
    let suite = std::fs::read_to_string(project.suite()).expect("suite");
    std::fs::write(
        project.suite(),
        suite.replace(
            "\"600ms\"",
            &format!("\"600ms\", \"--grow-rank\", \"2\", \"--grow-mib\", \"512\"{extra}"),
        ),
    )
    .expect("suite");
}

/// Each rank's torch memory snapshot gives that rank's allocation sites,
/// kept in the lock per rank; a regression names the rank, and where in
/// it the memory grew, against the same rank's locked sites.
#[test]
fn each_ranks_snapshot_gives_its_own_sites_and_a_regression_says_where() {
    let project = project("");
    let suite = std::fs::read_to_string(project.suite()).expect("suite");
    std::fs::write(
        project.suite(),
        suite.replace("\"600ms\"", "\"600ms\", \"--snapshots\""),
    )
    .expect("suite");
    let locked = project.lock(&[]);
    locked.assert_code(0);
    let case = locked.case("train");
    let ranks = case["ranks"].as_array().expect("ranks");
    for rank in ranks {
        assert_eq!(
            rank["allocation_sites"][0]["site"], "model.py:10 load",
            "{case:#}"
        );
    }
    // The case's sites are the ranks' sum: four ranks' 400 MiB loads.
    assert_eq!(
        mib(&case["allocation_sites"]["sites"][0]["bytes"]),
        Some(4 * 400),
        "{case:#}"
    );
    let lock = std::fs::read_to_string(project.lock_path()).expect("lock");
    assert!(lock.contains("model.py:88 attention"), "{lock}");
    let sites = oomgate()
        .arg("sites")
        .arg(project.out().join("results.json"))
        .output()
        .expect("oomgate sites");
    let printed = String::from_utf8_lossy(&sites.stdout);
    assert!(
        printed.contains("    rank 2: model.py:10 load 400.0 MiB, model.py:88 attention 100.0 MiB"),
        "{printed}"
    );

    grow_rank_2(&project, "");
    let run = project.run(&[]);
    run.assert_code(1);
    let message = run.message("train");
    assert!(
        message.contains(
            "rank 2 grew most: 1.00 GiB → 1.50 GiB, at model.py:88 attention +512.0 MiB (100.0 MiB → 612.0 MiB)"
        ),
        "{message}"
    );
    // Said once: the case's own sites (their sum) would repeat it.
    assert_eq!(message.matches("model.py:88").count(), 1, "{message}");
    let growth = &run.case("train")["rank_growth"];
    assert_eq!(growth["rank"], 2, "{growth:#}");
    assert_eq!(
        growth["sites"][0]["site"], "model.py:88 attention",
        "{growth:#}"
    );
}

#[test]
fn the_torchrun_example_suite_is_valid() {
    let stdout = check_in_repository("examples/torchrun/ddp.toml");
    assert!(stdout.contains("budget gpu_rank 70.0 GiB"), "{stdout}");
    assert!(
        stdout.contains("budget gpu_outside_allocator 6.00 GiB"),
        "{stdout}"
    );
}

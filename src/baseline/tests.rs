use super::*;

fn lock() -> Lock {
    let mut cases = BTreeMap::new();
    cases.insert(
        "a".to_string(),
        LockedCase {
            host_peak_bytes: Some(100),
            host_peak: Some(crate::units::Bytes(100).to_string()),
            host_peak_method: Some(HostMethod::CgroupV1),
            host_peak_source: None,
            host_floors: BTreeMap::new(),
            host_spread_bytes: None,
            host_working_peak_bytes: None,
            host_working_peak: None,
            host_working_spread_bytes: None,
            gpu_peak_bytes: None,
            gpu_peak: None,
            gpu_peak_method: None,
            gpu_spread_bytes: None,
            wall_time_s: 1.5,
            definition_hash: "00".into(),
            command: vec!["python3".into(), "x.py".into()],
            server: None,
            params: BTreeMap::new(),
            env: [("A".to_string(), "1".to_string())].into(),
            allocator_env: [(
                "PYTORCH_CUDA_ALLOC_CONF".to_string(),
                "expandable_segments:True".to_string(),
            )]
            .into(),
            capacity: None,
            capacity_of: None,
            probe_peak_allocated_bytes: None,
            outside_allocator_peak_bytes: None,
            tolerance: None,
            allocation_sites: None,
            ranks: Vec::new(),
            outputs: BTreeMap::new(),
        },
    );
    Lock {
        version: LOCK_VERSION,
        suite: "s".into(),
        locked_at: "2026-12-02T10:00:00.000+00:00".into(),
        environment: Environment {
            oomgate_version: "0.1.0".into(),
            ..Environment::default()
        },
        cases,
        testbeds: Default::default(),
    }
}

#[test]
fn round_trips_through_toml() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("s.lock");
    write(&path, &lock()).expect("write");
    let text = std::fs::read_to_string(&path).expect("read");
    assert!(text.starts_with("# oomgate baseline"), "{text}");
    assert!(text.contains("version = 4"), "{text}");
    assert_eq!(read(&path).expect("parse"), lock());
    // Version 4 records each case's tolerances; a version 3 lock has
    // none, and still reads.
    let mut tolerant = lock();
    let tolerance = CaseTolerances {
        capacity: Some(crate::capacity::Tolerance::Share(0.05)),
        ..Tolerances::default().into()
    };
    if let Some(case) = tolerant.cases.get_mut("a") {
        case.tolerance = Some(tolerance);
    }
    write(&path, &tolerant).expect("write");
    assert_eq!(read(&path).expect("parse"), tolerant);
    let older = text.replace("version = 4", "version = 3");
    let read_back = parse(&older, &path).expect("a version 3 lock reads");
    assert_eq!(read_back.cases["a"].tolerance, None);
}

#[test]
fn corrupt_and_newer_locks_are_errors() {
    let path = Path::new("s.lock");
    assert!(matches!(
        parse("version = 1\nsuite = ", path),
        Err(LockError::Corrupt { .. })
    ));
    assert!(matches!(
        parse("suite = \"s\"", path),
        Err(LockError::Corrupt { .. })
    ));
    assert!(matches!(
        parse("version = 5\nwhatever = true", path),
        Err(LockError::Newer { found: 5, .. })
    ));
    assert!(matches!(
        parse("version = 1\nsuite = \"s\"", path),
        Err(LockError::Corrupt { .. })
    ));
}

/// Version 1 locks (RSS sums) are still read; their host figures are
/// then `procfs-rss`, never compared with today's.
#[test]
fn version_1_locks_are_read_as_rss_sums() {
    let text = "version = 1\nsuite = \"s\"\nlocked_at = \"t\"\n[environment]\noomgate_version = \"0.1.0\"\n[cases.a]\nhost_peak_bytes = 100\nwall_time_s = 1.0\ndefinition_hash = \"00\"\ncommand = [\"x\"]\n";
    let lock = parse(text, Path::new("s.lock")).expect("a version 1 lock reads");
    assert_eq!(lock.cases["a"].host_method(), HostMethod::ProcfsRss);
}

#[test]
fn definition_changes_are_named() {
    let locked = &lock().cases["a"];
    let command = vec!["python3".to_string(), "y.py".to_string()];
    let params = BTreeMap::new();
    let env: BTreeMap<String, String> = [
        ("A".to_string(), "2".to_string()),
        ("B".to_string(), "x".to_string()),
    ]
    .into();
    let allocator_env = BTreeMap::new();
    let server = LockedServer {
        command: vec![
            "serve".into(),
            "--max-num-seqs=64".into(),
            "--port".into(),
            "{port}".into(),
        ],
        env: [("VLLM_USE_V1".to_string(), "1".to_string())].into(),
    };
    let now = CaseNow {
        host: None,
        host_method: HostMethod::CgroupV1,
        host_source: None,
        host_floors: HostFloors::default(),
        working: None,
        gpu: None,
        gpu_method: Some(crate::measure::gpu::GpuMethod::DeviceDelta),
        gpu_tainted: false,
        allocated: None,
        outside: None,
        command: &command,
        server: Some(&server),
        params: &params,
        env: &env,
        allocator_env: &allocator_env,
        outputs: &[],
    };
    let mut locked = locked.clone();
    locked.gpu_peak_method = Some(crate::measure::gpu::GpuMethod::Sampled { interval_ms: 50 });
    locked.server = Some(LockedServer {
        command: vec!["serve".into(), "--port".into(), "{port}".into()],
        env: BTreeMap::new(),
    });
    let changes = definition_changes(&locked, now);
    assert_eq!(
        changes,
        [
            "command: python3 x.py → python3 y.py",
            "server command: serve --port '{port}' → serve --max-num-seqs=64 --port '{port}'",
            // A is not a memory variable: the lock keeps its hash.
            &format!("env A: {} → \"2\"", redact::hashed_value("A", "1")),
            "env B: unset → \"x\"",
            "server env VLLM_USE_V1: unset → \"1\"",
            "allocator env PYTORCH_CUDA_ALLOC_CONF: \"expandable_segments:True\" → unset",
            "gpu figure method: sampled@50ms → device-delta",
        ]
    );
}

#[test]
fn a_host_figure_of_another_method_is_not_compared() {
    let command = vec!["python3".to_string(), "x.py".to_string()];
    let empty = BTreeMap::new();
    let env: BTreeMap<String, String> = [("A".to_string(), "1".to_string())].into();
    let now = |method| CaseNow {
        host: Some(1_000),
        host_method: method,
        host_source: None,
        host_floors: HostFloors::default(),
        working: None,
        gpu: None,
        gpu_method: None,
        gpu_tainted: false,
        allocated: None,
        outside: None,
        command: &command,
        server: None,
        params: &empty,
        env: &env,
        allocator_env: &empty,
        outputs: &[],
    };
    let locked = lock().cases["a"].clone();
    let same = compare_case(
        Some(&locked),
        now(HostMethod::CgroupV1),
        Tolerances::default(),
        true,
    );
    assert_eq!(same.host.outcome, Outcome::Within);
    let other = compare_case(
        Some(&locked),
        now(HostMethod::ProcfsPss),
        Tolerances::default(),
        true,
    );
    assert_eq!(other.host.outcome, Outcome::Skipped);
    assert_eq!(
        other.host.not_compared,
        Some(NotCompared::HostMethod {
            locked: "cgroup-v1".into(),
            now: "procfs-pss".into()
        })
    );
    // A lock from before methods were recorded measured RSS sums.
    let mut legacy = locked;
    legacy.host_peak_method = None;
    let old = compare_case(
        Some(&legacy),
        now(HostMethod::CgroupV1),
        Tolerances::default(),
        true,
    );
    assert_eq!(old.host.outcome, Outcome::Skipped);
    assert!(
        matches!(&old.host.not_compared, Some(NotCompared::HostMethod { locked, .. }) if locked == "procfs-rss"),
        "{:?}",
        old.host.not_compared
    );
}

/// torch's allocator in a shared pytest session and NVML in a process of
/// its own measure different things (the CUDA context is in one only):
/// one is never compared with the other; two NVML methods are.
#[test]
fn a_gpu_figure_of_the_allocator_is_not_compared_with_nvmls() {
    use crate::measure::gpu::GpuMethod;
    let command = vec!["python3".to_string(), "x.py".to_string()];
    let empty = BTreeMap::new();
    let env: BTreeMap<String, String> = [("A".to_string(), "1".to_string())].into();
    let mut locked = lock().cases["a"].clone();
    locked.gpu_peak_bytes = Some(1_000);
    locked.gpu_peak_method = Some(GpuMethod::Sampled { interval_ms: 50 });
    let now = |method| CaseNow {
        gpu: Some(900),
        gpu_method: Some(method),
        ..run_of(HostFloors::default(), &command, &empty, &env)
    };
    let compared = |method| compare_case(Some(&locked), now(method), Tolerances::default(), true);
    let session = compared(GpuMethod::Allocator);
    assert_eq!(session.gpu.outcome, Outcome::Skipped);
    assert_eq!(
        session.gpu.not_compared,
        Some(NotCompared::GpuMethod {
            locked: "sampled@50ms".into(),
            now: "torch-allocator".into()
        })
    );
    let accounting = compared(GpuMethod::DriverAccounting);
    assert_eq!(accounting.gpu.not_compared, None);
    assert_ne!(accounting.gpu.outcome, Outcome::Skipped);
}

#[test]
fn a_tainted_gpu_figure_is_not_compared() {
    let command = vec!["python3".to_string(), "x.py".to_string()];
    let empty = BTreeMap::new();
    let env: BTreeMap<String, String> = [("A".to_string(), "1".to_string())].into();
    let mut locked = lock().cases["a"].clone();
    locked.gpu_peak_bytes = Some(1_000);
    let now = |tainted| CaseNow {
        host: Some(100),
        host_method: HostMethod::CgroupV1,
        host_source: None,
        host_floors: HostFloors::default(),
        working: None,
        gpu: Some(u64::MAX / 2),
        gpu_method: Some(crate::measure::gpu::GpuMethod::DeviceDelta),
        gpu_tainted: tainted,
        allocated: None,
        outside: None,
        command: &command,
        server: None,
        params: &empty,
        env: &env,
        allocator_env: &empty,
        outputs: &[],
    };
    let clean = compare_case(Some(&locked), now(false), Tolerances::default(), true);
    assert_eq!(clean.gpu.outcome, Outcome::Regressed);
    let tainted = compare_case(Some(&locked), now(true), Tolerances::default(), true);
    assert_eq!(tainted.gpu.outcome, Outcome::Skipped);
    assert_eq!(tainted.gpu.not_compared, Some(NotCompared::Tainted));
}

#[test]
fn definition_hash_is_stable_and_sensitive() {
    let command = vec!["a".to_string()];
    let empty = BTreeMap::new();
    let env: BTreeMap<String, String> = [("K".to_string(), "v".to_string())].into();
    assert_eq!(
        definition_hash(&command, None, &empty, &env),
        definition_hash(&command, None, &empty, &env)
    );
    assert_ne!(
        definition_hash(&command, None, &empty, &env),
        definition_hash(&command, None, &env, &empty)
    );
}

mod fuzz {
    use proptest::prelude::*;

    use super::*;

    const LOCK: &str = "version = 2\nsuite = \"s\"\nlocked_at = \"t\"\n[environment]\noomgate_version = \"0.1.0\"\n[cases.a]\nhost_peak_bytes = 100\nhost_peak_method = \"cgroup-v1\"\nwall_time_s = 1.0\ndefinition_hash = \"00\"\ncommand = [\"x\"]\n";

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        /// A lock is committed and edited by hand: any text, and any
        /// damage to a good lock, reads as a lock or as a clear error.
        #[test]
        fn any_lock_text_is_read_or_refused(text in "\\PC{0,300}") {
            let _ = parse(&text, Path::new("s.lock"));
        }

        #[test]
        fn a_damaged_lock_is_read_or_refused(cut in 0usize..LOCK.len(), insert in "\\PC{0,12}") {
            let mut text = LOCK.to_string();
            if text.is_char_boundary(cut) {
                text.insert_str(cut, &insert);
            }
            let _ = parse(&text, Path::new("s.lock"));
            let _ = parse(&LOCK[..cut.min(LOCK.len())], Path::new("s.lock"));
        }
    }

    /// Linear time, bounded depth: a lock of 10,000 cases reads within a
    /// generous bound, and nesting that would exhaust a stack is an error.
    #[test]
    fn large_and_deep_locks_are_read_or_refused_in_bounded_time() {
        let mut text = String::from(
            "version = 3\nsuite = \"s\"\nlocked_at = \"t\"\n[environment]\noomgate_version = \"0.1.0\"\n",
        );
        for i in 0..10_000 {
            text.push_str(&format!(
            "[cases.c{i}]\nhost_peak_bytes = {i}\nwall_time_s = 1.0\ndefinition_hash = \"00\"\ncommand = [\"x\", \"{i}\"]\n"
        ));
        }
        let start = std::time::Instant::now();
        let lock = parse(&text, Path::new("s.lock")).expect("a large lock");
        assert_eq!(lock.cases.len(), 10_000);
        let deep = format!("version = 3\nx = {}", "[".repeat(200_000));
        assert!(parse(&deep, Path::new("s.lock")).is_err());
        assert!(start.elapsed() < std::time::Duration::from_secs(60));
    }
}

const MIB: u64 = 1 << 20;

/// A run of case `a` as `compare_case` sees it: its gated figure the
/// largest of `floors`, its working memory theirs (with a cgroup).
fn run_of<'a>(
    floors: HostFloors,
    command: &'a [String],
    empty: &'a BTreeMap<String, String>,
    env: &'a BTreeMap<String, String>,
) -> CaseNow<'a> {
    let peak = floors.largest();
    CaseNow {
        host: peak.map(|(_, bytes)| bytes),
        host_method: HostMethod::CgroupV1,
        host_source: peak.map(|(floor, _)| floor),
        host_floors: floors,
        working: floors.cgroup_anon_shmem_bytes,
        gpu: None,
        gpu_method: None,
        gpu_tainted: false,
        allocated: None,
        outside: None,
        command,
        server: None,
        params: empty,
        env,
        allocator_env: empty,
        outputs: &[],
    }
}

/// Case `a` locked from a run with these floors, as `lock` writes it.
fn locked_with(floors: HostFloors, spread: Option<u64>) -> LockedCase {
    let command = vec!["python3".to_string(), "x.py".to_string()];
    let (empty, env) = (BTreeMap::new(), lock().cases["a"].env.clone());
    let run = run_of(floors, &command, &empty, &env);
    let mut locked = lock().cases["a"].clone();
    locked.host_peak_bytes = run.host;
    locked.host_peak_source = run.host_source;
    locked.host_floors = floors.named();
    locked.host_spread_bytes = spread;
    locked.host_working_peak_bytes = run.working;
    locked
}

/// `cgroup-anon-shmem`, `pss-sum`, `vmhwm`, `rusage-maxrss` in MiB (0:
/// not observed); `pss-anon-shmem` a little under the cgroup's charge.
fn floors(anon: u64, pss: u64, vmhwm: u64, maxrss: u64) -> HostFloors {
    let mib = |v: u64| (v > 0).then_some(v * MIB);
    HostFloors {
        cgroup_anon_shmem_bytes: mib(anon),
        pss_sum_bytes: mib(pss),
        vmhwm_bytes: mib(vmhwm),
        rusage_maxrss_bytes: mib(maxrss),
        pss_anon_shmem_bytes: mib(anon.saturating_sub(2)),
        session_tree_bytes: None,
    }
}

/// The verdicts of docs/baselines.md#comparing, each row a pair of runs
/// that happened: the gated figure is compared with the gated figure and
/// every floor with the same floor, whichever set the figure; a growth in
/// file pages only, while the working memory stayed within, is no
/// regression and says so.
#[test]
fn the_host_verdict_cannot_be_lowered_by_which_floor_was_seen() {
    let command = vec!["python3".to_string(), "x.py".to_string()];
    let empty = BTreeMap::new();
    let env = lock().cases["a"].env.clone();
    struct Row {
        what: &'static str,
        locked: HostFloors,
        now: HostFloors,
        host: Outcome,
        working: Outcome,
        floor_breach: Option<HostFloor>,
        file_pages: bool,
    }
    let rows = [
        Row {
            // The 3× burst of a tree: the lock's PSS sweep caught its 1.5 s
            // plateau; the run's 20 ms burst was seen by the cgroup and
            // each child's ru_maxrss, not by a sweep.
            what: "3x burst, lock set by pss-sum",
            locked: floors(156, 162, 44, 44),
            now: floors(517, 150, 0, 164),
            host: Outcome::Regressed,
            working: Outcome::Regressed,
            floor_breach: Some(HostFloor::RusageMaxrss),
            file_pages: false,
        },
        Row {
            // Five-fold growth in a short test whose lock was set by a
            // sweep and whose run was too quick for one.
            what: "5x growth of a quick test",
            locked: floors(30, 46, 46, 46),
            now: floors(230, 0, 0, 247),
            host: Outcome::Regressed,
            working: Outcome::Regressed,
            floor_breach: Some(HostFloor::RusageMaxrss),
            file_pages: false,
        },
        Row {
            // The same quick test unchanged, no sweep in either run, or in
            // one of them: compared, within, never "not compared".
            what: "quick test unchanged, sweep in the lock only",
            locked: floors(30, 46, 46, 46),
            now: floors(30, 0, 0, 46),
            host: Outcome::Within,
            working: Outcome::Within,
            floor_breach: None,
            file_pages: false,
        },
        Row {
            // Spawned workers: the lock's sweeps missed the plateau (its
            // figure the cgroup's), the run's caught it with the library
            // pages of every worker: file pages, the working memory equal.
            what: "plateau swept in the run only",
            locked: floors(1503, 1100, 700, 700),
            now: floors(1503, 1957, 700, 700),
            host: Outcome::Within,
            working: Outcome::Within,
            floor_breach: Some(HostFloor::PssSum),
            file_pages: true,
        },
        Row {
            // And the other way: the lock caught it, the run did not (a
            // pass, lower than the lock).
            what: "plateau swept in the lock only",
            locked: floors(1503, 1957, 700, 700),
            now: floors(1503, 1100, 700, 700),
            host: Outcome::Improved,
            working: Outcome::Within,
            floor_breach: None,
            file_pages: false,
        },
        Row {
            // import torch from a warm and a cold page cache: VmHWM 541 and
            // 737 MB, the same anonymous memory.
            what: "page cache warmer than the lock's",
            locked: floors(300, 500, 541, 541),
            now: floors(301, 690, 737, 737),
            host: Outcome::Within,
            working: Outcome::Within,
            floor_breach: Some(HostFloor::RusageMaxrss),
            file_pages: true,
        },
        Row {
            // Working memory +25% (383 → 584 MiB) hidden under a resident
            // set set by teardown's library pages: the working figure fails.
            what: "working memory grew under a flat resident set",
            locked: floors(383, 700, 800, 800),
            now: floors(480, 700, 805, 805),
            host: Outcome::Within,
            working: Outcome::Regressed,
            floor_breach: None,
            file_pages: false,
        },
        Row {
            // A torch process: the lock's sweep read its VmHWM while it was
            // still importing, the run's at the end; both reaped at 700 MiB.
            // The same mark read at another moment: no growth.
            what: "a VmHWM read early in the lock",
            locked: floors(0, 150, 200, 700),
            now: floors(0, 160, 700, 700),
            host: Outcome::Within,
            working: Outcome::NoBaseline,
            floor_breach: None,
            file_pages: false,
        },
        Row {
            // A floor that grew past its bound while the gated figure did
            // not (it is set by another floor): fails, naming the floor.
            what: "one file-page floor grew, working memory too",
            locked: floors(200, 300, 900, 900),
            now: floors(330, 500, 900, 900),
            host: Outcome::Regressed,
            working: Outcome::Regressed,
            floor_breach: Some(HostFloor::PssSum),
            file_pages: false,
        },
    ];
    for row in rows {
        let locked = locked_with(row.locked, None);
        let now = run_of(row.now, &command, &empty, &env);
        let c = compare_case(Some(&locked), now, Tolerances::default(), true);
        assert_eq!(c.host.outcome, row.host, "{}: host {:?}", row.what, c.host);
        assert_eq!(c.working.outcome, row.working, "{}: working", row.what);
        assert_eq!(
            c.host.floor_breach.map(|b| b.floor),
            row.floor_breach,
            "{}",
            row.what
        );
        assert_eq!(c.host.anon_within.is_some(), row.file_pages, "{}", row.what);
        // The compared figures are the gated ones, and the delta theirs.
        assert_eq!(c.host.new_bytes, now.host, "{}", row.what);
        assert_eq!(
            c.host.baseline_bytes, locked.host_peak_bytes,
            "{}",
            row.what
        );
        assert_eq!(
            c.host.delta_bytes,
            Some(now.host.unwrap_or(0) as i64 - locked.host_peak_bytes.unwrap_or(0) as i64),
            "{}",
            row.what
        );
    }
}

/// Without a case cgroup the working memory is only sampled: it is not
/// gated, and so cannot excuse a growth as file pages.
#[test]
fn without_a_cgroup_no_growth_is_excused_as_file_pages() {
    let command = vec!["python3".to_string(), "x.py".to_string()];
    let empty = BTreeMap::new();
    let env = lock().cases["a"].env.clone();
    let procfs = |floors| CaseNow {
        host_method: HostMethod::ProcfsPss,
        working: None,
        ..run_of(floors, &command, &empty, &env)
    };
    let mut locked = locked_with(floors(0, 500, 541, 541), None);
    locked.host_peak_method = Some(HostMethod::ProcfsPss);
    locked.host_working_peak_bytes = None;
    let c = compare_case(
        Some(&locked),
        procfs(floors(0, 690, 737, 737)),
        Tolerances::default(),
        true,
    );
    assert_eq!(c.host.outcome, Outcome::Regressed);
    assert_eq!(c.host.anon_within, None);
    assert_eq!(c.working.outcome, Outcome::NoBaseline);
    assert_eq!(c.working.new_bytes, None);
}

/// A lock written before the working memory was gated: its host figure
/// compares as always; the working memory has no baseline (a required
/// baseline fails it, and a re-lock gates it), and excuses nothing.
#[test]
fn a_lock_without_a_working_figure_gates_the_host_figure_alone() {
    let command = vec!["python3".to_string(), "x.py".to_string()];
    let empty = BTreeMap::new();
    let env = lock().cases["a"].env.clone();
    let mut locked = locked_with(floors(300, 500, 541, 541), None);
    locked.host_working_peak_bytes = None;
    let now = run_of(floors(301, 690, 737, 737), &command, &empty, &env);
    let c = compare_case(Some(&locked), now, Tolerances::default(), true);
    assert_eq!(c.host.outcome, Outcome::Regressed);
    assert_eq!(c.working.outcome, Outcome::NoBaseline);
    assert_eq!(c.working.new_bytes, Some(301 * MIB));
}

/// A locked spread widens every floor's bound as it does the gated
/// figure's: a noisy figure's floors are as noisy.
#[test]
fn a_locked_spread_widens_the_floors_bounds_too() {
    let command = vec!["python3".to_string(), "x.py".to_string()];
    let empty = BTreeMap::new();
    let env = lock().cases["a"].env.clone();
    let locked = locked_with(floors(0, 1000, 900, 0), Some(100 * MIB));
    let now = |pss| {
        let mut run = run_of(floors(0, pss, 900, 0), &command, &empty, &env);
        run.working = None;
        run.host_method = HostMethod::CgroupV1;
        run
    };
    let within = compare_case(Some(&locked), now(1300), Tolerances::default(), true);
    assert_eq!(within.host.outcome, Outcome::Within);
    let beyond = compare_case(Some(&locked), now(1301), Tolerances::default(), true);
    assert_eq!(beyond.host.outcome, Outcome::Regressed);
}

/// Floors in MiB, each observed or not (`None`).
fn any_floors() -> impl proptest::strategy::Strategy<Value = HostFloors> {
    use proptest::prelude::*;
    let floor = || proptest::option::weighted(0.8, 1u64..4000);
    (floor(), floor(), floor(), floor(), floor()).prop_map(|(a, p, v, r, pa)| HostFloors {
        cgroup_anon_shmem_bytes: a.map(|m| m * MIB),
        pss_sum_bytes: p.map(|m| m * MIB),
        vmhwm_bytes: v.map(|m| m * MIB),
        rusage_maxrss_bytes: r.map(|m| m * MIB),
        pss_anon_shmem_bytes: pa.map(|m| m * MIB),
        session_tree_bytes: None,
    })
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(2048))]

    /// Whatever floors two runs observed: the host figure compared is the
    /// gated figure of each (so the delta shown is the two figures'); a
    /// gated figure past its bound fails unless the working memory, on
    /// both sides, shows it is file pages; a compared floor past its bound
    /// does the same; and nothing observed on both sides is left
    /// uncompared.
    #[test]
    fn the_host_verdict_holds_the_invariants(
        locked_floors in any_floors(),
        now_floors in any_floors(),
        with_working in proptest::bool::ANY,
    ) {
        use proptest::prop_assert;
        use proptest::prop_assert_eq;
        let command = vec!["python3".to_string(), "x.py".to_string()];
        let empty = BTreeMap::new();
        let env = lock().cases["a"].env.clone();
        let mut locked = locked_with(locked_floors, None);
        let mut now = run_of(now_floors, &command, &empty, &env);
        if !with_working {
            locked.host_working_peak_bytes = None;
            now.working = None;
        }
        let tolerance = Tolerances::default();
        let c = compare_case(Some(&locked), now, tolerance, true);
        // (1) The figures compared are the gated figures shown, and the
        // delta is theirs.
        prop_assert_eq!(c.host.new_bytes, now.host);
        prop_assert_eq!(c.host.baseline_bytes, locked.host_peak_bytes);
        if let (Some(new), Some(base)) = (now.host, locked.host_peak_bytes) {
            prop_assert_eq!(c.host.delta_bytes, Some(new as i64 - base as i64));
            // (3) Both sides observed: compared.
            prop_assert!(c.host.outcome != Outcome::Skipped && c.host.outcome != Outcome::NoBaseline);
            // (2) Past the bound: a regression, unless the working memory
            // was compared on both sides and stayed within.
            let limit = compare::upper_limit(base, tolerance.host);
            let excused = c.host.anon_within.is_some();
            if new > limit {
                prop_assert!(c.host.outcome == Outcome::Regressed || excused, "{:?}", c.host);
            }
            if excused {
                prop_assert!(matches!(c.working.outcome, Outcome::Within | Outcome::Improved));
                prop_assert!(c.working.new_bytes.is_some() && c.working.baseline_bytes.is_some());
            }
            // (5) A floor past its bound fails, named, or is excused.
            if let Some(breach) = c.host.floor_breach {
                prop_assert!(breach.now_bytes > breach.limit_bytes);
                prop_assert_eq!(Some(breach.now_bytes), now_floors.get(breach.floor));
                prop_assert_eq!(Some(breach.locked_bytes), locked_floors.get(breach.floor));
                prop_assert!(c.host.outcome == Outcome::Regressed || excused);
            }
            // Without the working memory on both sides nothing is excused.
            if !with_working {
                prop_assert!(!excused);
            }
        }
        // The working memory: compared exactly when both sides have it.
        if with_working {
            let both = now.working.is_some() && locked.host_working_peak_bytes.is_some();
            prop_assert_eq!(both, matches!(c.working.outcome, Outcome::Within | Outcome::Improved | Outcome::Regressed));
        }
    }
}

#[test]
fn a_lock_is_held_by_one_writer_at_a_time_beside_its_real_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let lock = dir.path().join("suite.lock");
    let first = hold(&lock, std::time::Duration::ZERO).expect("the first holds it");
    let second = hold(&lock, std::time::Duration::from_millis(30));
    let why = second
        .expect_err("the second waits, then gives up")
        .to_string();
    assert!(
        why.contains(".suite.lock.held") && why.contains("another oomgate"),
        "{why}"
    );
    drop(first);
    let again = hold(&lock, std::time::Duration::ZERO).expect("free once dropped");
    // A lock named through a link is held beside the file it points to.
    std::fs::write(&lock, "").expect("write");
    let link = dir.path().join("link.lock");
    std::os::unix::fs::symlink(&lock, &link).expect("link");
    assert_eq!(held_path(&link), held_path(&lock));
    assert!(hold(&link, std::time::Duration::ZERO).is_err());
    drop(again);
    // A link planted as the held file is never followed.
    let planted = tempfile::tempdir().expect("tempdir");
    let other = planted.path().join("x.lock");
    std::os::unix::fs::symlink(
        dir.path().join("elsewhere"),
        planted.path().join(".x.lock.held"),
    )
    .expect("plant");
    assert!(hold(&other, std::time::Duration::ZERO).is_err());
    assert!(!dir.path().join("elsewhere").exists());
}

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
            tolerance: None,
            allocation_sites: None,
            ranks: Vec::new(),
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
        gpu: None,
        gpu_method: Some(crate::measure::gpu::GpuMethod::DeviceDelta),
        gpu_tainted: false,
        allocated: None,
        command: &command,
        server: Some(&server),
        params: &params,
        env: &env,
        allocator_env: &allocator_env,
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
        gpu: None,
        gpu_method: None,
        gpu_tainted: false,
        allocated: None,
        command: &command,
        server: None,
        params: &empty,
        env: &env,
        allocator_env: &empty,
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
        gpu: Some(u64::MAX / 2),
        gpu_method: Some(crate::measure::gpu::GpuMethod::DeviceDelta),
        gpu_tainted: tainted,
        allocated: None,
        command: &command,
        server: None,
        params: &empty,
        env: &env,
        allocator_env: &empty,
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

/// Regression: an unchanged tree of spawned workers read 1503 MiB by its
/// cgroup in one run and 1957 MiB by a PSS sweep in the next, and failed
/// +30%. The figure is compared on the lock's own floor, never across.
#[test]
fn a_host_figure_is_compared_on_the_locks_own_floor() {
    const MIB: u64 = 1 << 20;
    let command = vec!["python3".to_string(), "x.py".to_string()];
    let empty = BTreeMap::new();
    let env: BTreeMap<String, String> = [("A".to_string(), "1".to_string())].into();
    let now = |source, floors| CaseNow {
        host: Some(1957 * MIB),
        host_method: HostMethod::CgroupV1,
        host_source: Some(source),
        host_floors: floors,
        gpu: None,
        gpu_method: None,
        gpu_tainted: false,
        allocated: None,
        command: &command,
        server: None,
        params: &empty,
        env: &env,
        allocator_env: &empty,
    };
    let mut locked = lock().cases["a"].clone();
    locked.host_peak_bytes = Some(1503 * MIB);
    locked.host_peak_source = Some(HostFloor::CgroupAnonShmem);
    let both = HostFloors {
        cgroup_anon_shmem_bytes: Some(1503 * MIB),
        pss_sum_bytes: Some(1957 * MIB),
        ..HostFloors::default()
    };
    let tight = Tolerances {
        host: crate::suite::Tolerance {
            relative: 0.05,
            absolute: crate::units::Bytes::from_mib(16),
            spread_k: 3.0,
        },
        ..Tolerances::default()
    };
    let same = compare_case(Some(&locked), now(HostFloor::PssSum, both), tight, true);
    assert_eq!(same.host.outcome, Outcome::Within);
    assert_eq!(same.host.new_bytes, Some(1503 * MIB));
    assert_eq!(same.host.floor, Some(HostFloor::CgroupAnonShmem));
    // This run has no figure of the lock's floor: not compared, says why.
    let pss_only = HostFloors {
        pss_sum_bytes: Some(1957 * MIB),
        ..HostFloors::default()
    };
    let other = compare_case(Some(&locked), now(HostFloor::PssSum, pss_only), tight, true);
    assert_eq!(other.host.outcome, Outcome::Skipped);
    assert_eq!(
        other.host.not_compared,
        Some(NotCompared::HostSource {
            locked: HostFloor::CgroupAnonShmem,
            now: Some(HostFloor::PssSum)
        })
    );
    // A lock that names no floor compares the gated figure, as before.
    locked.host_peak_source = None;
    let legacy = compare_case(Some(&locked), now(HostFloor::PssSum, both), tight, true);
    assert_eq!(legacy.host.outcome, Outcome::Regressed);
}

/// Two byte-identical environments gave `import torch` a VmHWM of 737 and
/// 541 MB (RssFile 440 vs 244 MB): what the page cache held. A figure past
/// its bound on a floor that counts file pages is a regression only when
/// its anonymous + shmem memory grew past the bound too.
#[test]
fn growth_in_file_pages_alone_is_no_regression() {
    const MIB: u64 = 1 << 20;
    let command = vec!["python3".to_string(), "x.py".to_string()];
    let empty = BTreeMap::new();
    let env: BTreeMap<String, String> = [("A".to_string(), "1".to_string())].into();
    let now = |floors: HostFloors| CaseNow {
        host: floors.vmhwm_bytes,
        host_method: HostMethod::CgroupV1,
        host_source: Some(HostFloor::Vmhwm),
        host_floors: floors,
        gpu: None,
        gpu_method: None,
        gpu_tainted: false,
        allocated: None,
        command: &command,
        server: None,
        params: &empty,
        env: &env,
        allocator_env: &empty,
    };
    let floors = |vmhwm: u64, anon: u64| HostFloors {
        cgroup_anon_shmem_bytes: Some(anon * MIB),
        pss_anon_shmem_bytes: Some((anon - 2) * MIB),
        vmhwm_bytes: Some(vmhwm * MIB),
        ..HostFloors::default()
    };
    let mut locked = lock().cases["a"].clone();
    locked.host_peak_bytes = Some(541 * MIB);
    locked.host_peak_source = Some(HostFloor::Vmhwm);
    locked.host_floors = floors(541, 300).named();
    let tolerance = Tolerances::default();

    let warm = compare_case(Some(&locked), now(floors(737, 301)), tolerance, true);
    assert_eq!(warm.host.outcome, Outcome::Within);
    assert_eq!(
        warm.host.anon_within,
        Some(AnonWithin {
            now_bytes: 301 * MIB,
            locked_bytes: 300 * MIB
        })
    );
    assert_eq!(
        warm.host.new_bytes,
        Some(737 * MIB),
        "the figure stays as read"
    );

    // Anonymous memory grew too: a regression, as before.
    let grown = compare_case(Some(&locked), now(floors(737, 450)), tolerance, true);
    assert_eq!(grown.host.outcome, Outcome::Regressed);
    assert_eq!(grown.host.anon_within, None);

    // A lock from before the split was recorded compares as it did.
    locked.host_floors = BTreeMap::from([("vmhwm".to_string(), 541 * MIB)]);
    let old = compare_case(Some(&locked), now(floors(737, 301)), tolerance, true);
    assert_eq!(old.host.outcome, Outcome::Regressed);
}

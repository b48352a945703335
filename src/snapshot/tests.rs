//! Snapshots in torch's exact format, made by fixtures/snapshots/make_snapshot.py
//! (every figure there is stated), read and summarised.

use std::path::{Path, PathBuf};

use super::*;

const MIB: u64 = 1024 * 1024;

/// A scenario's pickle in `dir`, its frames' files under `dir`.
fn make(dir: &Path, name: &str, scenario: &str, extra: &[&str]) -> PathBuf {
    let out = dir.join(name);
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/snapshots/make_snapshot.py");
    let status = std::process::Command::new("python3")
        .arg(script)
        .arg(&out)
        .arg(scenario)
        .arg("--workdir")
        .arg(dir)
        .args(extra)
        .status()
        .expect("python3");
    assert!(status.success(), "make_snapshot.py {scenario}");
    out
}

fn summary(scenario: &str, extra: &[&str], depth: usize) -> AllocationSites {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = make(dir.path(), "memory_snapshot.pickle", scenario, extra);
    read_file(&path, "memory_snapshot.pickle", depth, dir.path()).expect("summarised")
}

fn sites(summary: &AllocationSites) -> Vec<(&str, u64)> {
    summary
        .sites
        .iter()
        .map(|s| (s.site.as_str(), s.bytes / MIB))
        .collect()
}

#[test]
fn the_sites_live_at_the_peak_are_the_traces_replayed() {
    let s = summary("basic", &[], 1);
    assert_eq!(s.from, SitesFrom::Peak);
    assert!(!s.estimated);
    assert_eq!(s.allocated_bytes, 500 * MIB, "load 400 + attention 100");
    assert_eq!(
        sites(&s),
        [("model.py:10 load", 400), ("model.py:88 attention", 100)]
    );
    assert_eq!(s.reserved_bytes, 512 * MIB);
    assert_eq!(
        s.fragmentation_bytes,
        62 * MIB,
        "512 reserved, 450 allocated at the dump"
    );
    assert_eq!(
        s.allocator_settings
            .get("expandable_segments")
            .map(String::as_str),
        Some("False")
    );
    assert_eq!(s.devices, 1);
}

#[test]
fn deeper_sites_name_the_callers() {
    let s = summary("basic", &[], 2);
    assert_eq!(s.sites[1].site, "model.py:88 attention ← train.py:20 step");
}

#[test]
fn a_trace_that_lost_its_start_is_an_estimate() {
    let s = summary("truncated", &[], 1);
    assert!(s.estimated);
    assert_eq!(
        s.allocated_bytes,
        700 * MIB,
        "load, attention and the unseen 200: {s:#?}"
    );
    assert_eq!(
        sites(&s),
        [
            ("model.py:10 load", 400),
            ("(allocated before the trace began)", 200),
            ("model.py:88 attention", 100)
        ]
    );
    assert!(
        s.notes.iter().any(|n| n.contains("dropped its start")),
        "{:?}",
        s.notes
    );
}

#[test]
fn devices_and_graph_pools_and_dumps_without_history() {
    let s = summary("devices", &[], 1);
    assert_eq!(s.devices, 2);
    assert_eq!(
        s.allocated_bytes,
        800 * MIB,
        "500 on device 0, 300 on device 1"
    );
    assert!(
        sites(&s).contains(&("model.py:88 attention", 400)),
        "100 + 300: {:?}",
        sites(&s)
    );

    let s = summary("graph", &[], 1);
    assert_eq!(s.graph_pool_bytes, 64 * MIB);
    assert!(
        s.notes.iter().any(|n| n.contains("CUDA graph")),
        "{:?}",
        s.notes
    );

    let s = summary("nohistory", &[], 1);
    assert_eq!(s.from, SitesFrom::Dump);
    assert_eq!(s.allocated_bytes, 450 * MIB);
    assert_eq!(
        sites(&s),
        [("model.py:10 load", 400), ("(no stack recorded)", 50)]
    );
}

#[test]
fn growth_against_a_baseline_names_the_site_and_the_settings() {
    let before = summary("basic", &[], 1);
    let after = summary(
        "basic",
        &["--grow", "500", "--setting", "expandable_segments=True"],
        1,
    );
    let growth = grown(&before, &after, 5);
    assert_eq!(
        growth.describe(),
        "model.py:88 attention +500.0 MiB (100.0 MiB → 600.0 MiB); allocator expandable_segments False → True"
    );
}

#[test]
fn every_pickle_protocol_from_2_reads_the_same() {
    let dir = tempfile::tempdir().expect("temp dir");
    let base = make(dir.path(), "memory_snapshot.pickle", "basic", &[]);
    for protocol in [2, 3, 5] {
        let path = dir.path().join(format!("p{protocol}.pickle"));
        let status = std::process::Command::new("python3")
            .args(["-c", "import pickle,sys; pickle.dump(pickle.load(open(sys.argv[1],'rb')), open(sys.argv[2],'wb'), protocol=int(sys.argv[3]))"])
            .arg(&base)
            .arg(&path)
            .arg(protocol.to_string())
            .status()
            .expect("python3");
        assert!(status.success());
        let s = read_file(&path, "p", 1, dir.path()).expect("summarised");
        assert_eq!(s.allocated_bytes, 500 * MIB, "protocol {protocol}");
    }
}

/// A pickle that would run code, one cut short, a planted link: refused,
/// never a panic.
#[test]
fn what_is_not_a_snapshot_is_refused() {
    let dir = tempfile::tempdir().expect("temp dir");
    let evil = dir.path().join("evil.pickle");
    let status = std::process::Command::new("python3")
        .args([
            "-c",
            "import pickle,os,sys; pickle.dump({'segments': [os.system]}, open(sys.argv[1],'wb'))",
        ])
        .arg(&evil)
        .status()
        .expect("python3");
    assert!(status.success());
    let error = read_file(&evil, "evil.pickle", 1, dir.path()).expect_err("refused");
    assert!(
        error.to_string().contains("Python class or function"),
        "{error}"
    );

    let good = make(dir.path(), "memory_snapshot.pickle", "basic", &[]);
    let bytes = std::fs::read(&good).expect("read");
    for cut in [0, 1, 2, 20, bytes.len() / 2, bytes.len() - 1] {
        let short = dir.path().join("short.pickle");
        std::fs::write(&short, &bytes[..cut]).expect("write");
        assert!(
            read_file(&short, "short.pickle", 1, dir.path()).is_err(),
            "cut at {cut}"
        );
    }
    let link = dir.path().join("memory_snapshot_oom.pickle");
    std::os::unix::fs::symlink(&good, &link).expect("link");
    let error = read_file(&link, "memory_snapshot_oom.pickle", 1, dir.path()).expect_err("refused");
    assert!(error.to_string().contains("symbolic link"), "{error}");
}

/// A case folder with a snapshot per rank: each read, their sites summed.
#[test]
fn a_cases_ranks_are_summed() {
    let dir = tempfile::tempdir().expect("temp dir");
    make(dir.path(), "memory_snapshot.rank-0.pickle", "basic", &[]);
    make(
        dir.path(),
        "memory_snapshot.rank-1.pickle",
        "basic",
        &["--grow", "100"],
    );
    // An OOM snapshot of a rank that also left its end-of-run one is not read.
    make(
        dir.path(),
        "memory_snapshot_oom.rank-1.pickle",
        "basic",
        &[],
    );
    let s = read_case(dir.path(), 1, dir.path()).expect("snapshots");
    assert_eq!(
        s.files,
        [
            "memory_snapshot.rank-0.pickle",
            "memory_snapshot.rank-1.pickle"
        ]
    );
    assert_eq!(s.allocated_bytes, 1100 * MIB);
    assert_eq!(
        sites(&s),
        [("model.py:10 load", 800), ("model.py:88 attention", 300)]
    );
    // Each rank's own, for its `ranks[]` entry.
    let attention = |rank: u32| {
        s.by_rank[&rank]
            .iter()
            .find(|site| site.site == "model.py:88 attention")
            .map(|site| site.bytes / MIB)
    };
    assert_eq!(s.by_rank.len(), 2);
    assert_eq!((attention(0), attention(1)), (Some(100), Some(200)));
}

/// Arbitrary bytes after a valid header never panic.
#[test]
fn garbage_never_panics() {
    use proptest::prelude::*;
    proptest!(ProptestConfig::with_cases(256), |(tail in proptest::collection::vec(any::<u8>(), 0..256))| {
        let mut bytes = vec![0x80, 4];
        bytes.extend(tail);
        let _ = pickle::read(&bytes[..], true);
    });
}

/// A snapshot of 60,000 events with deep stacks, and the same read as a
/// file over the size limit is (its trace dropped as it is read).
#[test]
fn a_large_file_and_one_read_without_its_trace() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = make(
        dir.path(),
        "memory_snapshot.pickle",
        "large",
        &["--events", "20000"],
    );
    let s = read_file(&path, "memory_snapshot.pickle", 1, dir.path()).expect("summarised");
    assert_eq!(
        s.allocated_bytes,
        500 * MIB,
        "the 1 MiB pairs come after the peak"
    );
    assert_eq!(
        sites(&s),
        [("model.py:10 load", 400), ("model.py:88 attention", 100)]
    );

    let file = std::fs::File::open(&path).expect("open");
    let value = pickle::read(std::io::BufReader::new(file), false).expect("read");
    let s = summary::summarise(&value, 1, dir.path()).expect("summarised");
    assert_eq!(s.from, SitesFrom::Dump);
    assert_eq!(s.allocated_bytes, 450 * MIB, "the blocks live at the dump");
}

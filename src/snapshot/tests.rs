//! Snapshots in torch's exact format, made by fixtures/snapshots/make_snapshot.py
//! (every figure there is stated), read and summarised.

use std::path::{Path, PathBuf};
use std::time::Duration;

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
        let _ = pickle::read(&bytes[..], true, pickle::Limits::none());
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
    let value =
        pickle::read(std::io::BufReader::new(file), false, pickle::Limits::none()).expect("read");
    let s = summary::summarise(&value, 1, dir.path()).expect("summarised");
    assert_eq!(s.from, SitesFrom::Dump);
    assert_eq!(s.allocated_bytes, 450 * MIB, "the blocks live at the dump");
}

/// A pickle written opcode by opcode (protocol 4, the names of
/// `pickletools`), as a hostile workload can write one.
#[derive(Clone)]
struct Pickle(Vec<u8>);

impl Pickle {
    fn new() -> Self {
        Pickle(vec![0x80, 4])
    }

    /// Raw opcodes and arguments.
    fn op(&mut self, bytes: &[u8]) -> &mut Self {
        self.0.extend_from_slice(bytes);
        self
    }

    /// SHORT_BINUNICODE or BINUNICODE.
    fn str(&mut self, text: &str) -> &mut Self {
        match u8::try_from(text.len()) {
            Ok(len) => self.op(&[0x8c, len]),
            Err(_) => {
                let len = u32::try_from(text.len()).expect("short enough");
                self.op(b"X").op(&len.to_le_bytes())
            }
        };
        self.op(text.as_bytes())
    }

    /// BININT.
    fn int(&mut self, n: i32) -> &mut Self {
        self.op(b"J").op(&n.to_le_bytes())
    }

    /// `key: value` into the dict below them (SETITEM).
    fn item(&mut self, key: &str, value: impl FnOnce(&mut Self)) -> &mut Self {
        self.str(key);
        value(self);
        self.op(b"s")
    }

    /// STOP, and the bytes.
    fn stop(&mut self) -> Vec<u8> {
        self.op(b".");
        self.0.clone()
    }
}

/// A snapshot's root: `{"segments": [...], <rest>}`, each of `segment`'s
/// segments appended.
fn snapshot(segments: impl FnOnce(&mut Pickle), rest: impl FnOnce(&mut Pickle)) -> Vec<u8> {
    let mut p = Pickle::new();
    p.op(b"}");
    p.str("segments").op(b"]");
    segments(&mut p);
    p.op(b"s");
    rest(&mut p);
    p.stop()
}

/// A segment of `bytes` on `device` holding one active block of them.
fn segment(p: &mut Pickle, device: i32, address: i32, bytes: i32) {
    p.op(b"}")
        .item("device", |p| {
            p.int(device);
        })
        .item("total_size", |p| {
            p.int(bytes);
        })
        .item("blocks", |p| {
            p.op(b"]}")
                .item("state", |p| {
                    p.str("active_allocated");
                })
                .item("size", |p| {
                    p.int(bytes);
                })
                .item("address", |p| {
                    p.int(address);
                })
                .op(b"a");
        })
        .op(b"a");
}

/// `bytes` as `name` in a fresh folder, read as a case's snapshot is.
fn read_bytes(bytes: &[u8]) -> Result<AllocationSites, SnapshotError> {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("memory_snapshot.pickle");
    std::fs::write(&path, bytes).expect("write");
    read_file(&path, "memory_snapshot.pickle", 1, dir.path())
}

fn refusal(bytes: &[u8]) -> String {
    let error = read_bytes(bytes).expect_err("not read");
    let text = error.to_string();
    assert!(
        text.starts_with("memory_snapshot.pickle: not read: "),
        "{text}"
    );
    text
}

/// Lists, tuples or dicts nested 50,000 deep under a valid root: not read
/// (the depth named), never a stack overflow; 90 deep is read.
#[test]
fn deep_nesting_is_not_read_and_never_overflows_the_stack() {
    let nested = |depth: usize, (open, leaf, close): (&[u8], &[u8], &[u8])| {
        snapshot(
            |_| {},
            move |p| {
                p.str("deep");
                for _ in 1..depth {
                    p.op(open);
                }
                p.op(leaf);
                for _ in 1..depth {
                    p.op(close);
                }
                p.op(b"s");
            },
        )
    };
    // [[[...]]], ((...,),), {"k": {"k": ...}}
    for shape in [
        (&b"]"[..], &b"]"[..], &b"a"[..]),
        (b"", b")", b"\x85"),
        (b"}\x8c\x01k", b"}", b"s"),
    ] {
        let text = refusal(&nested(50_000, shape));
        assert!(text.contains("nest more than 100 deep"), "{text}");
        let s = read_bytes(&nested(90, shape)).expect("read");
        assert_eq!(s.allocated_bytes, 0);
    }
    // A list put inside itself (a cycle, never freed) or changed once it
    // is inside another (its depth no longer known): damaged.
    let cycle = snapshot(
        |_| {},
        |p| {
            p.str("x").op(b"]\x94h\x00a").op(b"s");
        },
    );
    assert!(read_bytes(&cycle).is_err());
    let changed = snapshot(
        |_| {},
        |p| {
            p.str("x").op(b"]\x94]h\x00ah\x00K\x01a").op(b"s");
        },
    );
    let error = read_bytes(&changed).expect_err("damaged").to_string();
    assert!(error.contains("already inside another"), "{error}");
}

/// A 9-byte pickle that memoizes into slot 2²⁸−1 takes a few bytes, not
/// gigabytes; sparse slots hold what was put in them.
#[test]
fn a_memo_slot_number_costs_nothing() {
    let tiny = pickle::Limits {
        memory: 64 << 10,
        ..pickle::Limits::none()
    };
    let nine = b"\x80\x04Nr\xff\xff\xff\x0f.";
    assert!(matches!(
        pickle::read(&nine[..], true, tiny),
        Ok(pickle::Value::None)
    ));
    let mut p = Pickle::new();
    p.int(7).op(b"r\xff\xff\xff\x0f0");
    p.int(8).op(b"r\x00\x00\x00\x700");
    p.op(b"j\xff\xff\xff\x0f");
    let read = pickle::read(&p.stop()[..], true, tiny);
    assert!(matches!(read, Ok(pickle::Value::Int(7))), "{read:?}");
    let unset = b"\x80\x04Nr\xff\xff\xff\x0fj\xfe\xff\xff\x0f.";
    let error = pickle::read(&unset[..], true, tiny).expect_err("never set");
    assert!(error.to_string().contains("never set"), "{error}");
}

/// 16 MiB of `NONE` opcodes would take 256 MiB on the stack: not read,
/// past 4× the file and 64 MiB.
#[test]
fn a_file_that_would_take_more_memory_than_its_bound_is_not_read() {
    let mut bytes = vec![0x80, 4];
    bytes.resize(16 << 20, b'N');
    let text = refusal(&bytes);
    assert!(
        text.contains("would take more than 128.0 MiB of memory"),
        "{text}"
    );
    // A string longer than the file is cut short, never allocated.
    let long = b"\x80\x04\x8d\x00\x00\x00\x04\x00\x00\x00\x00.";
    assert!(matches!(
        read_bytes(long),
        Err(SnapshotError::Pickle {
            source: PickleError::Truncated,
            ..
        })
    ));
}

/// 100,000 single-item SETITEMs into one dict (each looked at whole
/// before), and as many segments on as many devices (each device's blocks
/// looked for among all): read well within the limit.
#[test]
fn single_setitems_and_many_devices_are_linear() {
    let bytes = snapshot(
        |_| {},
        |p| {
            for i in 0..100_000 {
                p.item(&format!("key{i}"), |p| {
                    p.op(b"N");
                });
            }
        },
    );
    let s = read_bytes(&bytes).expect("read");
    assert_eq!(s.devices, 0);

    let devices = 100_000;
    let bytes = snapshot(
        |p| {
            for device in 0..devices {
                segment(p, device, 4096, 1024);
            }
        },
        |p| {
            // One trace, so that each device's peak is replayed.
            p.str("device_traces").op(b"]]}");
            p.item("action", |p| {
                p.str("alloc");
            })
            .item("addr", |p| {
                p.int(8192);
            })
            .item("size", |p| {
                p.int(512);
            })
            .item("frames", |p| {
                p.op(b"]");
            });
            p.op(b"aa").op(b"s");
        },
    );
    let s = read_bytes(&bytes).expect("read");
    assert_eq!(s.devices, devices as usize);
    assert_eq!(s.allocated_bytes, 1024 * devices as u64 + 512);
}

/// Past its time limit a case's snapshot is "not read", and so is the
/// rest of its files; the reader itself stops at its deadline.
#[test]
fn a_read_past_its_limit_is_not_read() {
    let dir = tempfile::tempdir().expect("temp dir");
    make(dir.path(), "memory_snapshot.rank-0.pickle", "basic", &[]);
    make(dir.path(), "memory_snapshot.rank-1.pickle", "basic", &[]);
    let s = read_case_within(dir.path(), 1, dir.path(), Duration::ZERO).expect("snapshots");
    assert!(s.files.is_empty());
    assert_eq!(
        s.notes,
        [
            "memory_snapshot.rank-0.pickle: not read: reading took longer than 0 s",
            "memory_snapshot.rank-1.pickle: not read: reading took longer than 0 s"
        ]
    );
    let late = pickle::Limits {
        deadline: Some(std::time::Instant::now()),
        ..pickle::Limits::none()
    };
    assert!(matches!(
        pickle::read(&b"\x80\x04N."[..], true, late),
        Err(PickleError::Late)
    ));
}

/// Bytes allocated on the test's thread, and their peak: what a read
/// really takes, beside what it counts.
mod counting {
    use std::alloc::{GlobalAlloc, Layout, System};
    use std::cell::Cell;

    thread_local! {
        static NOW: Cell<usize> = const { Cell::new(0) };
        static PEAK: Cell<usize> = const { Cell::new(0) };
    }

    pub struct Counting;

    fn grew(bytes: usize) {
        let _ = NOW.try_with(|now| {
            let n = now.get().saturating_add(bytes);
            now.set(n);
            let _ = PEAK.try_with(|peak| peak.set(peak.get().max(n)));
        });
    }

    fn shrank(bytes: usize) {
        let _ = NOW.try_with(|now| now.set(now.get().saturating_sub(bytes)));
    }

    // SAFETY: every call is System's, with the caller's arguments.
    unsafe impl GlobalAlloc for Counting {
        unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
            let p = unsafe { System.alloc(layout) };
            if !p.is_null() {
                grew(layout.size());
            }
            p
        }

        unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
            let p = unsafe { System.alloc_zeroed(layout) };
            if !p.is_null() {
                grew(layout.size());
            }
            p
        }

        unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
            unsafe { System.dealloc(ptr, layout) };
            shrank(layout.size());
        }

        unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
            let p = unsafe { System.realloc(ptr, layout, new_size) };
            if !p.is_null() {
                // Both are held while the bytes move.
                grew(new_size);
                shrank(layout.size());
            }
            p
        }
    }

    /// `f`'s result, and the most bytes this thread held above what it
    /// held when `f` began.
    pub fn peak<T>(f: impl FnOnce() -> T) -> (T, usize) {
        let start = NOW.with(Cell::get);
        PEAK.with(|peak| peak.set(start));
        let out = f();
        (out, PEAK.with(Cell::get).saturating_sub(start))
    }
}

#[global_allocator]
static COUNTING: counting::Counting = counting::Counting;

/// Pickle pieces a generator strings together: every opcode the reader
/// takes, with arguments that reach far (large slots, long lengths).
fn piece() -> impl proptest::strategy::Strategy<Value = Vec<u8>> {
    use proptest::prelude::*;
    prop_oneof![
        // Values.
        Just(b"N".to_vec()),
        Just(b"\x88".to_vec()),
        any::<u8>().prop_map(|n| vec![b'K', n]),
        any::<i32>().prop_map(|n| [&b"J"[..], &n.to_le_bytes()].concat()),
        any::<u64>().prop_map(|n| [&[0x8a, 8][..], &n.to_le_bytes()].concat()),
        prop::sample::select(vec![
            "filename",
            "line",
            "name",
            "action",
            "alloc",
            "addr",
            "size",
            "frames",
            "segments",
            "blocks",
            "state",
            "active_allocated",
            "device",
            "device_traces",
            "total_size",
            "x"
        ])
        .prop_map(|s| [&[0x8c, s.len() as u8][..], s.as_bytes()].concat()),
        any::<u32>().prop_map(|n| [&b"X"[..], &n.to_le_bytes()].concat()),
        (0u8..4).prop_map(|n| [&b"C"[..], &[n][..], &[7u8; 3][..]].concat()),
        // Containers and marks.
        Just(b"]".to_vec()),
        Just(b"}".to_vec()),
        Just(b")".to_vec()),
        Just(b"(".to_vec()),
        Just(b"a".to_vec()),
        Just(b"e".to_vec()),
        Just(b"s".to_vec()),
        Just(b"u".to_vec()),
        Just(b"t".to_vec()),
        Just(b"\x85".to_vec()),
        Just(b"\x86".to_vec()),
        Just(b"\x87".to_vec()),
        Just(b"\x91".to_vec()),
        Just(b"2".to_vec()),
        Just(b"0".to_vec()),
        Just(b"1".to_vec()),
        // The memo.
        Just(b"\x94".to_vec()),
        any::<u8>().prop_map(|n| vec![b'q', n % 8]),
        any::<u8>().prop_map(|n| vec![b'h', n % 8]),
        any::<u32>().prop_map(|n| [&b"r"[..], &n.to_le_bytes()].concat()),
        any::<u32>().prop_map(|n| [&b"j"[..], &n.to_le_bytes()].concat()),
        // Repeats: one piece many times over (a long run of one opcode).
        (
            prop::sample::select(vec![
                &b"N"[..],
                b"]",
                b"(",
                b"\x94",
                b"Na",
                b"]a",
                b"Ns",
                b"h\x00a",
                b"\x85"
            ]),
            1usize..2000
        )
            .prop_map(|(p, n)| p.repeat(n)),
        // A dict filled one item at a time; one put in a list, then
        // recalled and put there again and again.
        (1usize..2000).prop_map(|n| [&b"}"[..], &b"NNs".repeat(n)].concat()),
        (1usize..1500).prop_map(|n| {
            [
                &b"]}q\x07("[..],
                &b"NN".repeat(n),
                b"ua",
                &b"h\x07a".repeat(n),
            ]
            .concat()
        }),
    ]
}

/// A snapshot made here, with frames, events and segments, its bytes
/// then damaged at random.
fn mutated() -> impl proptest::strategy::Strategy<Value = Vec<u8>> {
    use proptest::prelude::*;
    let base = snapshot(
        |p| {
            for device in 0..3 {
                segment(p, device, 4096 * device, 1 << 20);
            }
        },
        |p| {
            p.str("device_traces").op(b"]]\x94(");
            for i in 0..20 {
                p.op(b"}\x94(");
                p.str("action").str(if i % 2 == 0 {
                    "alloc"
                } else {
                    "free_requested"
                });
                p.str("addr").int(4096 * (i / 2)).str("size").int(1 << 20);
                p.str("frames").op(b"]\x94(");
                for line in 0..3 {
                    p.op(b"}\x94(").str("filename").str("model.py");
                    p.str("line").int(line).str("name").str("f").op(b"u");
                }
                p.op(b"e").op(b"u");
            }
            p.op(b"e").op(b"a").op(b"s");
        },
    );
    let len = base.len();
    proptest::collection::vec((0..len, any::<u8>(), 0u8..4), 1..8).prop_map(move |edits| {
        let mut bytes = base.clone();
        for (at, byte, how) in edits {
            let at = at.min(bytes.len().saturating_sub(1));
            match how {
                0 => bytes[at] = byte,
                1 => bytes.insert(at, byte),
                2 if bytes.len() > 3 => {
                    bytes.remove(at);
                }
                _ => {
                    let copy: Vec<u8> = bytes[at..].iter().take(64).copied().collect();
                    bytes.splice(at..at, copy);
                }
            }
        }
        bytes
    })
}

/// The property: any pickle of N bytes is read (or refused) without a
/// panic, in work under 200·N and memory under 3·N + 1 MiB — the bytes
/// the allocator really gave, not the reader's own count.
fn linear(bytes: &[u8]) -> Result<(), proptest::test_runner::TestCaseError> {
    let n = bytes.len();
    let limits = pickle::Limits {
        memory: 3 * n + (1 << 20),
        deadline: None,
        size: Some(n as u64),
    };
    let ((read, work), peak) = counting::peak(|| {
        let (read, work) = pickle::read_counting(bytes, true, limits);
        // Freed here: the drop is part of the read.
        drop(read.as_ref().ok().cloned());
        (read.map(|_| ()), work)
    });
    // What the limit lets through, and what can be allocated before it
    // is looked at (a growing vector's next size, a string of the file).
    let slack = 2 * n + (256 << 10);
    proptest::prop_assert!(
        peak <= limits.memory + slack,
        "{n} bytes took {peak} bytes of memory ({read:?})"
    );
    proptest::prop_assert!(
        work <= 200 * n as u64 + 64,
        "{n} bytes took {work} steps ({read:?})"
    );
    Ok(())
}

#[test]
fn any_pickle_is_read_in_linear_time_and_memory() {
    use proptest::prelude::*;
    proptest!(ProptestConfig::with_cases(256), |(pieces in proptest::collection::vec(piece(), 0..200), stop in any::<bool>())| {
        let mut bytes = vec![0x80, 4];
        for piece in pieces {
            bytes.extend(piece);
        }
        if stop {
            bytes.push(b'.');
        }
        linear(&bytes)?;
    });
}

#[test]
fn a_damaged_snapshot_is_read_in_linear_time_and_memory() {
    use proptest::prelude::*;
    proptest!(ProptestConfig::with_cases(512), |(bytes in mutated())| {
        linear(&bytes)?;
    });
}

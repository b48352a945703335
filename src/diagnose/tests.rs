//! The parsers and the classifier on fixture texts written from the
//! documented shapes (fixtures/oom/), and fuzzed with proptest.

use std::path::Path;

use super::*;

const MIB: u64 = 1024 * 1024;
const GIB: u64 = 1024 * MIB;

fn fixture(name: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/oom")
        .join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn scan_fixture(name: &str) -> Scan {
    scan(fixture(name).as_bytes())
}

fn size(text: &str) -> u64 {
    text.parse::<crate::units::Bytes>()
        .map(crate::units::Bytes::get)
        .unwrap_or(u64::MAX)
}

#[test]
fn every_fixture_classifies() {
    let table: &[(&str, Option<Evidence>)] = &[
        ("pytorch-current.txt", Some(Evidence::Oom)),
        ("pytorch-other-processes.txt", Some(Evidence::Oom)),
        ("pytorch-container.txt", Some(Evidence::Oom)),
        ("pytorch-2.1-capacty.txt", Some(Evidence::Oom)),
        ("pytorch-empty-index.txt", Some(Evidence::Oom)),
        ("pytorch-legacy.txt", Some(Evidence::Oom)),
        ("pytorch-xpu.txt", Some(Evidence::Oom)),
        ("pytorch-mlu.txt", Some(Evidence::Oom)),
        ("pytorch-ranks-interleaved.txt", Some(Evidence::Oom)),
        ("jax.txt", Some(Evidence::Oom)),
        ("jax-old.txt", Some(Evidence::Oom)),
        ("tensorflow.txt", Some(Evidence::Oom)),
        ("cublas.txt", Some(Evidence::Oom)),
        ("no-kernel-image.txt", Some(Evidence::Setup)),
        ("driver-too-old.txt", Some(Evidence::Setup)),
        ("no-gpus.txt", Some(Evidence::Setup)),
        ("busy.txt", Some(Evidence::Setup)),
        ("not-compiled.txt", Some(Evidence::Setup)),
        ("mig-allocator-assert.txt", Some(Evidence::Setup)),
        ("illegal-access.txt", Some(Evidence::Fault)),
        ("nccl.txt", Some(Evidence::Fault)),
        ("torch-cpu-alloc.txt", Some(Evidence::HostAlloc)),
        ("python-memoryerror.txt", Some(Evidence::HostAlloc)),
        ("numpy-alloc.txt", Some(Evidence::HostAlloc)),
    ];
    for (name, expected) in table {
        assert_eq!(scan_fixture(name).evidence, *expected, "{name}");
    }
    assert_eq!(scan("all good\nloss 0.12\n".as_bytes()).evidence, None);
}

#[test]
fn host_allocation_failures_have_their_size() {
    let torch = scan_fixture("torch-cpu-alloc.txt").oom.expect("figures");
    assert_eq!(
        (
            torch.framework.as_str(),
            torch.backend.as_deref(),
            torch.requested_bytes
        ),
        ("pytorch", Some("host"), Some(1 << 40))
    );
    let numpy = scan_fixture("numpy-alloc.txt").oom.expect("figures");
    assert_eq!(numpy.requested_bytes, Some(size("7.28 TiB")));
    let python = scan_fixture("python-memoryerror.txt").oom.expect("figures");
    assert_eq!(
        (python.framework.as_str(), python.requested_bytes),
        ("python", None)
    );
    for (line, framework, bytes) in [
        (
            "terminate called after throwing an instance of 'std::bad_alloc'",
            "c++",
            None,
        ),
        ("memory allocation of 4096 bytes failed", "rust", Some(4096)),
        ("OSError: [Errno 12] Cannot allocate memory", "os", None),
    ] {
        let figures = oom::parse_host(line).expect(line);
        assert_eq!(
            (figures.framework.as_str(), figures.requested_bytes),
            (framework, bytes)
        );
    }
    // Not failures: the GPU's OOM error class, a word in a log.
    assert_eq!(
        oom::parse_host("torch.OutOfMemoryError: CUDA out of memory."),
        None
    );
    assert_eq!(
        oom::parse_host("retrying after MemoryError in worker 3"),
        None
    );
}

/// The diagnosis of a case that exited 1 with this fixture as its stderr.
fn diagnose_fixture(name: &str) -> Diagnosis {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = dir.path().join("stderr.log");
    std::fs::write(&log, fixture(name)).expect("write");
    diagnose(
        CaseStatus::Failed,
        Some(Exit::Code(1)),
        false,
        false,
        &scan_log(&log, 0),
        Some(0),
    )
    .expect("a diagnosis")
}

#[test]
fn a_failed_host_allocation_is_its_own_kind_with_a_headline_and_a_hint() {
    let mut diagnosis = diagnose_fixture("torch-cpu-alloc.txt");
    assert_eq!(diagnosis.kind, FailureKind::HostAllocFailed);
    diagnosis.hints = hints::case_hints(&diagnosis, Some(200 << 20));
    let step = crate::probe::StepSeen {
        step: Some(7),
        phase: Some("train".into()),
        instance: 0,
        rank: None,
    };
    assert_eq!(
        headline(
            &diagnosis,
            Some(&step),
            &[],
            Some("2.5.1"),
            &indexmap::IndexMap::new()
        )
        .as_deref(),
        Some(
            "host-alloc-failed at step 7 (train): tried to allocate 1.00 TiB of host memory (PyTorch's DefaultCPUAllocator); torch 2.5.1"
        )
    );
    assert_eq!(diagnosis.hints.len(), 1, "{:?}", diagnosis.hints);
    // A kernel kill outranks what the workload printed.
    let scanned = scan_fixture("torch-cpu-alloc.txt");
    assert_eq!(scanned.evidence, Some(Evidence::HostAlloc));
    let killed = diagnose(
        CaseStatus::Failed,
        Some(Exit::Code(1)),
        false,
        false,
        &scanned,
        Some(1),
    )
    .expect("a diagnosis");
    assert_eq!(killed.kind, FailureKind::HostOom);
}

/// vLLM's MIG runners: the caching allocator's NVML assertion is a setup
/// failure (no memory was short), its headline the assertion, its hint
/// the fix.
#[test]
fn the_allocators_nvml_assertion_on_mig_is_setup_with_its_fix() {
    let mut diagnosis = diagnose_fixture("mig-allocator-assert.txt");
    assert_eq!(diagnosis.kind, FailureKind::CudaSetup);
    assert!(diagnosis.oom.is_none());
    diagnosis.hints = hints::case_hints(&diagnosis, None);
    assert_eq!(diagnosis.hints.len(), 1, "{:?}", diagnosis.hints);
    assert!(
        diagnosis.hints[0].contains("PYTORCH_CUDA_ALLOC_CONF=expandable_segments:False"),
        "{:?}",
        diagnosis.hints
    );
    let headline =
        headline(&diagnosis, None, &[], None, &indexmap::IndexMap::new()).expect("a headline");
    assert!(
        headline.starts_with("cuda-setup: RuntimeError: NVML_SUCCESS == r INTERNAL ASSERT FAILED"),
        "{headline}"
    );
}

#[test]
fn a_host_oom_names_the_step_and_no_framework_the_script_never_used() {
    let diagnosis = Diagnosis {
        kind: FailureKind::HostOom,
        oom: None,
        exception: None,
        rank: None,
        oom_ranks: Vec::new(),
        hints: Vec::new(),
    };
    let step = crate::probe::StepSeen {
        step: Some(12),
        phase: None,
        instance: 0,
        rank: None,
    };
    assert_eq!(
        headline(
            &diagnosis,
            Some(&step),
            &[],
            Some("2.5.1"),
            &indexmap::IndexMap::new()
        )
        .as_deref(),
        Some("host-oom at step 12: the kernel's OOM killer killed a process of the case")
    );
}

#[test]
fn pytorch_current_figures() {
    let oom = scan_fixture("pytorch-current.txt").oom.expect("figures");
    assert_eq!(oom.framework, "pytorch");
    assert_eq!(oom.backend.as_deref(), Some("CUDA"));
    assert_eq!(oom.requested_bytes, Some(2 * GIB));
    assert_eq!(oom.device_index, Some(0));
    assert_eq!(oom.total_bytes, Some(size("139.81 GiB")));
    assert_eq!(oom.free_bytes, Some(size("1.19 GiB")));
    assert_eq!(oom.process_bytes, Some(size("138.61 GiB")));
    assert_eq!(oom.allocated_bytes, Some(size("130.02 GiB")));
    assert_eq!(oom.reserved_unallocated_bytes, Some(size("7.95 GiB")));
    assert!(oom.other_processes.is_empty());
}

#[test]
fn other_processes_private_pools_and_container_shapes() {
    let oom = scan_fixture("pytorch-other-processes.txt")
        .oom
        .expect("figures");
    assert_eq!(oom.device_index, Some(1));
    assert_eq!(oom.requested_bytes, Some(20 * MIB));
    assert_eq!(
        oom.other_processes,
        vec![(4242, 61 * GIB), (5151, size("12.50 GiB"))]
    );
    assert_eq!(oom.private_pool_bytes, Some(256 * MIB));
    assert_eq!(oom.reserved_unallocated_bytes, Some(300 * MIB));
    assert_eq!(oom.process_bytes, Some(size("5.71 GiB")));

    // Inside a container the process itself is a plain `Process N` entry.
    let oom = scan_fixture("pytorch-container.txt").oom.expect("figures");
    assert_eq!(oom.requested_bytes, Some(512 * 1024));
    assert_eq!(oom.other_processes, vec![(31337, size("23.63 GiB"))]);
    assert_eq!(oom.process_bytes, None);
}

#[test]
fn older_and_other_spellings() {
    let oom = scan_fixture("pytorch-2.1-capacty.txt")
        .oom
        .expect("figures");
    assert_eq!(
        (oom.device_index, oom.total_bytes),
        (Some(2), Some(size("39.39 GiB")))
    );
    let oom = scan_fixture("pytorch-empty-index.txt")
        .oom
        .expect("figures");
    assert_eq!(
        (oom.device_index, oom.total_bytes),
        (None, Some(size("15.77 GiB")))
    );
    let oom = scan_fixture("pytorch-legacy.txt").oom.expect("figures");
    assert_eq!(oom.framework, "pytorch-legacy");
    assert_eq!(oom.device_index, Some(0));
    assert_eq!(oom.requested_bytes, Some(36 * MIB));
    assert_eq!(oom.total_bytes, Some(size("7.93 GiB")));
    assert_eq!(oom.allocated_bytes, Some(size("130.35 MiB")));
    assert_eq!(oom.free_bytes, Some(size("47.06 MiB")));
    assert_eq!(oom.reserved_bytes, Some(188 * MIB));
    assert_eq!(
        scan_fixture("pytorch-xpu.txt")
            .oom
            .and_then(|o| o.backend)
            .as_deref(),
        Some("XPU")
    );
    let mlu = scan_fixture("pytorch-mlu.txt").oom.expect("figures");
    assert_eq!(
        (mlu.backend.as_deref(), mlu.device_index),
        (Some("MLU"), Some(3))
    );
}

#[test]
fn jax_tensorflow_and_runtime() {
    let jax = scan_fixture("jax.txt");
    // A JAX OOM's hint names the variables that decide its pool.
    let diagnosis = diagnose_fixture("jax.txt");
    assert_eq!(diagnosis.kind, FailureKind::GpuOom);
    let hints = hints::case_hints(&diagnosis, None);
    assert!(
        hints
            .iter()
            .any(|h| h.contains("XLA_PYTHON_CLIENT_PREALLOCATE=false")
                && h.contains("XLA_PYTHON_CLIENT_MEM_FRACTION")),
        "{hints:?}"
    );
    assert_eq!(
        jax.oom.as_ref().and_then(|o| o.requested_bytes),
        Some(6_291_456)
    );
    let exception = jax.exception.expect("exception");
    assert!(exception.contains("BufferAssignment stats:"), "{exception}");
    assert!(
        exception.contains("maybe_live_out allocation"),
        "{exception}"
    );
    assert_eq!(
        scan_fixture("jax-old.txt")
            .oom
            .and_then(|o| o.requested_bytes),
        Some(17_179_869_184)
    );
    let tf = scan_fixture("tensorflow.txt").oom.expect("figures");
    assert_eq!(tf.framework, "tensorflow");
    assert_eq!(tf.tensor_shape.as_deref(), Some("[16,112,112,147]"));
    assert_eq!(tf.device_index, Some(0));
    assert_eq!(
        scan_fixture("cublas.txt")
            .oom
            .map(|o| o.framework)
            .as_deref(),
        Some("cuda-runtime")
    );
}

#[test]
fn interleaved_ranks_keep_the_first_exception_and_list_every_rank() {
    let scan = scan_fixture("pytorch-ranks-interleaved.txt");
    assert_eq!(scan.rank, Some(3));
    assert_eq!(scan.oom_ranks, vec![3, 1]);
    let oom = scan.oom.expect("figures");
    assert_eq!(
        (oom.device_index, oom.requested_bytes),
        (Some(3), Some(3 * GIB))
    );
    let exception = scan.exception.expect("exception");
    assert!(
        exception.starts_with("[rank3]: torch.OutOfMemoryError"),
        "{exception}"
    );
    assert!(
        !exception.contains("[rank1]"),
        "another rank's lines must not join it: {exception}"
    );
}

#[test]
fn an_oom_outranks_a_fault_reported_before_it() {
    let text = "RuntimeError: CUDA error: an illegal memory access was encountered\nstuff\n\ntorch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.00 GiB. GPU 0 has a total capacity of 8.00 GiB of which 0 B is free.\n";
    let scan = scan(text.as_bytes());
    assert_eq!(scan.evidence, Some(Evidence::Oom));
    assert_eq!(scan.oom.and_then(|o| o.requested_bytes), Some(GIB));
}

#[test]
fn an_oom_early_in_a_huge_log_is_found() {
    let mut text = fixture("pytorch-current.txt");
    let filler = "step 1234 loss 0.1234 lr 3e-4 tokens/s 1834.2\n".repeat(200_000); // ~9 MiB
    text.push_str(&filler);
    let scan = scan(text.as_bytes());
    assert_eq!(scan.oom.and_then(|o| o.requested_bytes), Some(2 * GIB));
}

#[test]
fn an_endless_line_is_cut_not_buffered() {
    let mut text = "x".repeat(10 * 1024 * 1024);
    text.push_str("\ntorch.OutOfMemoryError: CUDA out of memory. Tried to allocate 4.00 MiB. GPU 0 has a total capacity of 8.00 GiB of which 1.00 MiB is free.\n");
    let scan = scan(text.as_bytes());
    assert_eq!(scan.oom.and_then(|o| o.requested_bytes), Some(4 * MIB));
}

/// Regression (issue 20): a workload that killed its supervisor was a
/// suspected host OOM. The log's evidence and a counted OOM kill still
/// come first.
#[test]
fn a_killed_supervisor_replaces_only_what_the_exit_alone_suggested() {
    let diagnosis = |kind| Diagnosis {
        kind,
        oom: None,
        exception: None,
        rank: None,
        oom_ranks: Vec::new(),
        hints: Vec::new(),
    };
    for (kind, expected) in [
        (FailureKind::HostOomSuspected, FailureKind::SupervisorKilled),
        (FailureKind::ExitNonzero, FailureKind::SupervisorKilled),
        (FailureKind::GpuOom, FailureKind::GpuOom),
        (FailureKind::HostOom, FailureKind::HostOom),
        (FailureKind::CudaFault, FailureKind::CudaFault),
    ] {
        assert_eq!(
            with_supervisor_killed(diagnosis(kind)).kind,
            expected,
            "{kind:?}"
        );
    }
    let killed = diagnosis(FailureKind::SupervisorKilled);
    assert_eq!(
        headline(&killed, None, &[], None, &indexmap::IndexMap::new()).as_deref(),
        Some(
            "supervisor-killed: oomgate's supervisor of the workload (its parent process) was killed from outside oomgate, and the workload with it"
        )
    );
}

#[test]
fn classification_uses_the_exit_when_the_log_is_silent() {
    let dir = tempfile::tempdir().expect("tempdir");
    let silent = dir.path().join("silent.log");
    std::fs::write(&silent, "training...\n").expect("write");
    let kind = |status, exit, stopped| {
        diagnose(status, exit, stopped, false, &scan_log(&silent, 0), None).map(|d| d.kind)
    };
    assert_eq!(
        kind(CaseStatus::Failed, Some(Exit::Signal(9)), false),
        Some(FailureKind::HostOomSuspected)
    );
    assert_eq!(
        kind(CaseStatus::Failed, Some(Exit::Code(137)), false),
        Some(FailureKind::HostOomSuspected)
    );
    assert_eq!(
        kind(CaseStatus::Failed, Some(Exit::Code(1)), false),
        Some(FailureKind::ExitNonzero)
    );
    assert_eq!(
        kind(CaseStatus::TimedOut, Some(Exit::Signal(9)), true),
        Some(FailureKind::Timeout)
    );
    assert_eq!(kind(CaseStatus::Passed, Some(Exit::Code(0)), false), None);
    // The case cgroup counted an OOM kill: certain, whatever the exit.
    let counted = |exit, kills| {
        diagnose(
            CaseStatus::Failed,
            Some(exit),
            false,
            false,
            &scan_log(&silent, 0),
            kills,
        )
        .map(|d| d.kind)
    };
    assert_eq!(
        counted(Exit::Signal(9), Some(1)),
        Some(FailureKind::HostOom)
    );
    assert_eq!(counted(Exit::Code(1), Some(2)), Some(FailureKind::HostOom));
    assert_eq!(
        counted(Exit::Signal(9), Some(0)),
        Some(FailureKind::HostOomSuspected),
        "no kill counted: still only a suspicion"
    );
    let oom_log = dir.path().join("oom.log");
    std::fs::write(&oom_log, fixture("pytorch-current.txt")).expect("write");
    assert_eq!(
        diagnose(
            CaseStatus::TimedOut,
            None,
            true,
            false,
            &scan_log(&oom_log, 0),
            None
        )
        .map(|d| d.kind),
        Some(FailureKind::GpuOom),
        "a hang after an OOM is an OOM"
    );
    assert_eq!(
        diagnose(
            CaseStatus::Failed,
            Some(Exit::Code(1)),
            false,
            false,
            &scan_log(&oom_log, 0),
            Some(1)
        )
        .map(|d| d.kind),
        Some(FailureKind::GpuOom),
        "a GPU OOM message names the failure even when the host also killed something"
    );
}

mod fuzz {
    use proptest::prelude::*;

    use super::*;

    const FRAGMENTS: &[&str] = &[
        "CUDA out of memory. Tried to allocate ",
        "Out of memory. Tried to allocate ",
        "GPU ",
        " has a total capacity of ",
        " has a total capacty of ",
        " of which ",
        " is free. ",
        "Process ",
        " has ",
        " memory in use. ",
        "Including non-PyTorch memory, this process has ",
        "Of the allocated memory ",
        " is allocated by PyTorch, with ",
        " allocated in private pools (e.g., CUDA Graphs), and ",
        " is reserved by PyTorch but unallocated.",
        "(GPU 0; ",
        " total capacity; ",
        " already allocated; ",
        " free; ",
        " reserved in total by PyTorch)",
        "RESOURCE_EXHAUSTED: Out of memory while trying to allocate ",
        "OOM when allocating tensor with shape[",
        "device:GPU:",
        "[rank",
        "]: ",
        "20.00 MiB",
        "1.5 GiB",
        "99999999999999999999.99 EiB",
        "3.00 B",
        "12",
        ".",
        "\n",
        "é",
        "\u{0}",
        "]",
    ];

    fn message() -> impl Strategy<Value = String> {
        prop::collection::vec(
            prop_oneof![
                prop::sample::select(FRAGMENTS).prop_map(str::to_string),
                ".{0,8}"
            ],
            0..40,
        )
        .prop_map(|parts| parts.concat())
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

        #[test]
        fn parsers_never_panic(text in message()) {
            let _ = oom::parse(&text);
            let _ = scan(text.as_bytes());
            let _ = split_rank(&text);
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..4096)) {
            let _ = scan(bytes.as_slice());
        }
    }

    /// Linear time: a 4 MB message with 100,000 process entries parses in
    /// well under the generous limit; a quadratic scan would take hours.
    #[test]
    fn parsing_a_huge_message_is_linear() {
        let line = format!(
            "CUDA out of memory. Tried to allocate 1.00 GiB. GPU 0 has a total capacity of 8.00 GiB of which 0 B is free. {}",
            "Process 1 has 1.00 GiB memory in use. ".repeat(100_000)
        );
        let start = std::time::Instant::now();
        let figures = oom::parse(&line).expect("an OOM");
        assert_eq!(figures.other_processes.len(), 100_000);
        assert!(
            start.elapsed() < std::time::Duration::from_secs(20),
            "{:?}",
            start.elapsed()
        );
    }
}

/// Regressions found in review: each of these was misread.
mod regressions {
    use super::*;

    #[test]
    fn a_warning_is_not_the_error() {
        let text =
            "UserWarning: CUDA error: no device, falling back to CPU\nValueError: bad shape\n";
        assert_eq!(scan(text.as_bytes()).evidence, None);
    }

    #[test]
    fn nccl_stating_an_allocation_failure_is_an_oom() {
        let text = "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled cuda error\nncclUnhandledCudaError: Call to CUDA function failed.\nLast error:\nCuda failure 'out of memory'\n";
        let scan = scan(text.as_bytes());
        assert_eq!(scan.evidence, Some(Evidence::Oom));
        assert_eq!(
            scan.oom.map(|o| o.framework).as_deref(),
            Some("cuda-runtime")
        );
    }

    #[test]
    fn an_oom_right_after_a_fault_is_not_swallowed_by_the_fault_block() {
        let text = "RuntimeError: CUDA error: an illegal memory access was encountered\ntorch.OutOfMemoryError: CUDA out of memory. Tried to allocate 8.00 MiB. GPU 0 has a total capacity of 8.00 GiB of which 0 B is free.\n";
        assert_eq!(scan(text.as_bytes()).evidence, Some(Evidence::Oom));
    }

    #[test]
    fn mlu_free_memory_without_a_space_and_a_gpu_in_a_log_prefix() {
        let mlu = scan_fixture("pytorch-mlu.txt").oom.expect("figures");
        assert_eq!(mlu.free_bytes, Some(MIB));
        let line = "worker GPU 7 step 3: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 8.00 MiB. GPU 1 has a total capacity of 8.00 GiB of which 0 B is free.";
        assert_eq!(oom::parse(line).and_then(|o| o.device_index), Some(1));
    }

    #[test]
    fn process_words_without_figures_stay_linear() {
        let line = format!(
            "CUDA out of memory. Tried to allocate 1.00 GiB. GPU 0 has a total capacity of 8.00 GiB of which 0 B is free. {}",
            "Process 1 ".repeat(6_000)
        );
        let text = format!("{line}\n").repeat(200);
        let start = std::time::Instant::now();
        let scan = scan(text.as_bytes());
        assert_eq!(scan.evidence, Some(Evidence::Oom));
        assert!(
            start.elapsed() < std::time::Duration::from_secs(20),
            "{:?}",
            start.elapsed()
        );
    }
}

/// Regression: the scan read a whole 2 GiB log at 40 MB/s, ignoring
/// signals. Only the run's last SCAN_LIMIT bytes are read: the failure at
/// the end is found, an error buried before them is not looked for.
#[test]
fn only_the_tail_of_a_huge_log_is_scanned() {
    let dir = tempfile::tempdir().expect("tempdir");
    let filler = "x".repeat(1024 * 1024);
    let oom = fixture("pytorch-current.txt");
    let write = |name: &str, oom_first: bool| {
        let path = dir.path().join(name);
        let mut text = String::new();
        if oom_first {
            text.push_str(&oom);
        }
        for _ in 0..(super::SCAN_LIMIT / (1024 * 1024) + 8) {
            text.push_str(&filler);
            text.push('\n');
        }
        if !oom_first {
            text.push_str(&oom);
        }
        std::fs::write(&path, text).expect("write");
        path
    };
    let kind = |path: &std::path::Path| {
        diagnose(
            CaseStatus::Failed,
            Some(Exit::Code(1)),
            false,
            false,
            &scan_log(path, 0),
            None,
        )
        .map(|d| d.kind)
    };
    assert_eq!(kind(&write("end.log", false)), Some(FailureKind::GpuOom));
    assert_eq!(
        kind(&write("start.log", true)),
        Some(FailureKind::ExitNonzero)
    );
}

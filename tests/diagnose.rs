//! Diagnosis end to end: workloads that fail the way real frameworks do,
//! classified from their output and exit, with the figures in the first
//! line a reader sees.

mod common;

use common::fake_nvml::*;
use common::*;

fn oom_fixture(name: &str) -> String {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/oom")
        .join(name)
        .display()
        .to_string()
}

/// One case per way of failing.
fn failing_suite() -> String {
    let fail = toml_str(&workload("fail.py"));
    let case = |name: &str, args: &str| {
        format!("[[case]]\nname = \"{name}\"\ncommand = [\"python3\", {fail}, {args}]\n")
    };
    [
        "[suite]\nname = \"d\"\nsample_interval = \"20ms\"\n[defaults]\nkill_grace = \"1s\"\n"
            .to_string(),
        case(
            "oom",
            &format!(
                "\"--text\", {}",
                toml_str(&oom_fixture("pytorch-current.txt"))
            ),
        ),
        case(
            "ranks",
            &format!(
                "\"--text\", {}",
                toml_str(&oom_fixture("pytorch-ranks-interleaved.txt"))
            ),
        ),
        // A real refused allocation: 2 GiB under a 300 MB address-space limit.
        "[[case]]\nname = \"hostalloc\"\ncommand = [\"sh\", \"-c\", \"ulimit -v 300000; exec python3 -c 'x = bytearray(1 << 31)'\"]\n".to_string(),
        case(
            "fragmented",
            &format!(
                "\"--text\", {}",
                toml_str(&oom_fixture("pytorch-fragmented.txt"))
            ),
        ),
        case(
            "crowded",
            &format!(
                "\"--text\", {}",
                toml_str(&oom_fixture("pytorch-other-processes.txt"))
            ),
        ),
        case(
            "setup",
            &format!(
                "\"--text\", {}",
                toml_str(&oom_fixture("no-kernel-image.txt"))
            ),
        ),
        case(
            "fault",
            &format!(
                "\"--text\", {}",
                toml_str(&oom_fixture("illegal-access.txt"))
            ),
        ),
        case("killed", "\"--sigkill\""),
        // Regression (issue 20): a workload that kills its parent, oomgate's
        // supervisor, was diagnosed as a suspected host OOM.
        "[[case]]\nname = \"parent\"\ncommand = [\"sh\", \"-c\", \"kill -9 $PPID; sleep 5\"]\n".to_string(),
        case("plain", "\"--exit\", \"3\""),
        "[[case]]\nname = \"hang\"\ncommand = [\"sleep\", \"30\"]\ntimeout = \"1s\"\n".to_string(),
    ]
    .concat()
}

#[test]
fn each_kind_of_failure_is_classified() {
    let project = Project::new(&failing_suite());
    let run = project.run(&[]);
    run.assert_code(1);
    let kind = |id: &str| {
        run.case(id)["diagnosis"]["kind"]
            .as_str()
            .map(str::to_string)
    };
    assert_eq!(kind("oom").as_deref(), Some("gpu-oom"));
    assert_eq!(kind("ranks").as_deref(), Some("gpu-oom"));
    assert_eq!(kind("setup").as_deref(), Some("cuda-setup"));
    assert_eq!(kind("fault").as_deref(), Some("cuda-fault"));
    assert_eq!(kind("killed").as_deref(), Some("host-oom-suspected"));
    assert_eq!(kind("parent").as_deref(), Some("supervisor-killed"));
    assert_eq!(kind("plain").as_deref(), Some("exit-nonzero"));
    assert_eq!(kind("hang").as_deref(), Some("timeout"));
    assert_eq!(kind("hostalloc").as_deref(), Some("host-alloc-failed"));
    // The failure kind CI reads: the same family words everywhere.
    let failure_kind = |id: &str| run.case(id)["failure_kind"].as_str().map(str::to_string);
    for (id, word) in [
        ("oom", "gpu-oom"),
        ("hostalloc", "host-oom"),
        ("killed", "host-oom-suspected"),
        ("parent", "supervisor-killed"),
        ("plain", "crash"),
        ("hang", "timeout"),
        ("setup", "cuda-setup"),
    ] {
        assert_eq!(failure_kind(id).as_deref(), Some(word), "{id}");
    }
    let junit = std::fs::read_to_string(project.out().join("junit.xml")).expect("junit");
    assert!(junit.contains("type=\"host-oom\""), "{junit}");

    let message = |id: &str| run.message(id);
    assert!(
        message("oom").starts_with(
            "gpu-oom: tried to allocate 2.00 GiB on GPU 0 (139.8 GiB total, 1.19 GiB free) — the command exited with code 1"
        ),
        "{}",
        message("oom")
    );
    assert!(
        message("ranks").starts_with(
            "gpu-oom on rank 3 (ranks 3, 1 ran out): tried to allocate 3.00 GiB on GPU 3"
        ),
        "{}",
        message("ranks")
    );
    assert!(
        message("setup").starts_with("cuda-setup: RuntimeError: CUDA error: no kernel image"),
        "{}",
        message("setup")
    );
    assert!(
        message("killed")
            .starts_with("host-oom-suspected: killed by SIGKILL with no error message"),
        "{}",
        message("killed")
    );

    assert!(
        message("parent").starts_with(
            "supervisor-killed: oomgate's supervisor of the workload (its parent process) was killed from outside oomgate, and the workload with it — "
        ),
        "{}",
        message("parent")
    );
    // What is known is said, not a guess at the host's OOM killer.
    assert!(
        !message("parent").contains("out-of-memory killer")
            && message("parent")
                .contains("its supervisor (the workload's parent, oomgate's) was killed"),
        "{}",
        message("parent")
    );
    assert!(
        run.case("parent")["diagnosis"]["hints"][0]
            .as_str()
            .is_some_and(|hint| hint.contains("`kill $PPID`")),
        "{}",
        run.case("parent")["diagnosis"]
    );

    let oom = run.case("oom");
    assert_eq!(oom["diagnosis"]["oom"]["requested_bytes"], 2u64 << 30);
    // 7.95 GiB unallocated against 130 GiB allocated is no symptom: no hint.
    assert_eq!(oom["diagnosis"]["hints"], serde_json::json!([]));
    let hints = run.case("fragmented")["diagnosis"]["hints"].to_string();
    assert!(
        hints.contains(
            "16.1 GiB is reserved by PyTorch but unallocated, against 20.4 GiB allocated"
        ),
        "{hints}"
    );
    assert!(
        hints.contains("a gap alone does not prove fragmentation"),
        "{hints}"
    );
    assert!(!hints.contains("empty_cache"), "{hints}");
    let hints = run.case("crowded")["diagnosis"]["hints"].to_string();
    assert!(hints.contains("The device was nearly full (3.19 MiB free of 79.2 GiB) while this process held 5.71 GiB"), "{hints}");
    assert!(hints.contains("process 4242 61.0 GiB"), "{hints}");
    let exception = oom["diagnosis"]["exception"].as_str().unwrap_or_default();
    assert!(
        exception.starts_with("torch.OutOfMemoryError: CUDA out of memory."),
        "{exception}"
    );

    let junit = std::fs::read_to_string(project.out().join("junit.xml")).expect("junit");
    let document = roxmltree::Document::parse(&junit).expect("valid XML");
    let failure = document
        .descendants()
        .find(|n| n.has_tag_name("testcase") && n.attribute("name") == Some("oom"))
        .and_then(|case| case.children().find(|n| n.has_tag_name("failure")))
        .expect("a failure");
    assert_eq!(failure.attribute("type"), Some("gpu-oom"));
    assert!(
        failure
            .attribute("message")
            .unwrap_or_default()
            .starts_with("gpu-oom: tried to allocate 2.00 GiB")
    );
    let body = failure.text().unwrap_or_default();
    assert!(body.contains("diagnosis:   gpu-oom"), "{body}");
    assert!(
        body.contains("exception:\ntorch.OutOfMemoryError"),
        "{body}"
    );

    let summary = std::fs::read_to_string(project.out().join("summary.md")).expect("summary");
    assert!(
        summary.contains("- **`oom`** — `gpu-oom: tried to allocate 2.00 GiB on GPU 0"),
        "{summary}"
    );
    assert!(
        summary.contains("  - hint: `16.1 GiB is reserved"),
        "{summary}"
    );
    assert!(
        summary.contains("  ```text\n  torch.OutOfMemoryError: CUDA out of memory."),
        "{summary}"
    );
    assert!(
        run.stderr.contains("hint: 16.1 GiB is reserved"),
        "{}",
        run.stderr
    );
}

/// With the fake driver: the GPU model joins the headline, and when only
/// the largest matrix value runs out of memory, that is said.
#[test]
fn only_the_largest_values_failing_is_pointed_out() {
    let suite = format!(
        "[suite]\nname = \"m\"\nsample_interval = \"20ms\"\n[[case]]\nname = \"alloc-{{mib}}\"\ncommand = [\"python3\", {}, \"--mib\", \"{{mib}}\", \"--hold\", \"100ms\"]\nmatrix = {{ mib = [1000, 4000, 9000] }}\n",
        toml_str(&workload("gpu_alloc.py"))
    );
    let project = Project::new(&suite).with_fake_gpus(&two_devices(false), Variant::Complete);
    let run = project.run(&[]);
    run.assert_code(1);
    assert_eq!(run.case("alloc-1000")["status"], "passed");
    let failed = run.case("alloc-9000");
    let message = failed["message"].as_str().unwrap_or_default();
    assert!(
        message.starts_with(
            "gpu-oom: tried to allocate 8.79 GiB on GPU 0 (Fake H100 80GB, 8.00 GiB total"
        ),
        "{message}"
    );
    assert!(message.contains("; mib=9000"), "{message}");
    let hints = failed["diagnosis"]["hints"].to_string();
    assert!(
        hints.contains(
            "Only the largest mib values ran out of GPU memory (9000) while mib = 4000 passed"
        ),
        "{hints}"
    );
}

/// The reader's view of an OOM case, whole: the JUnit failure element and
/// the summary.md entry, with paths and timings normalised.
#[test]
fn junit_and_markdown_snapshots_of_an_oom_case() {
    let fail = toml_str(&workload("fail.py"));
    let suite = format!(
        "[suite]\nname = \"snap\"\n[[case]]\nname = \"oom\"\ncommand = [\"python3\", {fail}, \"--text\", {}]\n",
        toml_str(&oom_fixture("pytorch-fragmented.txt"))
    );
    let project = Project::new(&suite);
    project.run(&[]).assert_code(1);

    let summary = std::fs::read_to_string(project.out().join("summary.md")).expect("summary");
    let failures = summary.split("### Failures\n\n").nth(1).unwrap_or_default();
    let expected = "- **`oom`** — `gpu-oom: tried to allocate 4.00 GiB on GPU 0 (39.4 GiB total, 2.25 GiB free) — the command exited with code 1` (logs: `cases/oom`)
  - hint: `16.1 GiB is reserved by PyTorch but unallocated, against 20.4 GiB allocated: inspect torch.cuda.memory_summary() / memory_stats() before tuning the allocator — a gap alone does not prove fragmentation. As a next step only: PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True, or max_split_size_mb (ignored by cudaMallocAsync).`

  ```text
  torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 4.00 GiB. GPU 0 has a total capacity of 39.38 GiB of which 2.25 GiB is free. Including non-PyTorch memory, this process has 37.12 GiB memory in use. Of the allocated memory 20.40 GiB is allocated by PyTorch, and 16.10 GiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for Memory Management  (https://docs.pytorch.org/docs/stable/notes/cuda.html#optimizing-memory-usage-with-pytorch-cuda-alloc-conf)
  ```
";
    assert_eq!(failures, expected);

    let junit = std::fs::read_to_string(project.out().join("junit.xml")).expect("junit");
    let document = roxmltree::Document::parse(&junit).expect("valid XML");
    let failure = document
        .descendants()
        .find(|n| n.has_tag_name("failure"))
        .expect("failure");
    assert_eq!(failure.attribute("type"), Some("gpu-oom"));
    assert_eq!(
        failure.attribute("message"),
        Some(
            "gpu-oom: tried to allocate 4.00 GiB on GPU 0 (39.4 GiB total, 2.25 GiB free) — the command exited with code 1"
        )
    );
    // The body, minus the lines that vary (time, peaks, paths).
    let body: Vec<&str> = failure
        .text()
        .unwrap_or_default()
        .lines()
        .filter(|l| {
            ![
                "host peak:",
                "host floors:",
                "host working memory:",
                "host charged peak:",
                "host note:",
                "wall time:",
                "samples:",
                "cwd:",
                "command:",
                "gpu peak:",
            ]
            .iter()
            .any(|p| l.starts_with(p))
        })
        .collect();
    let expected_body = [
        "case:        oom",
        "status:      FAIL — gpu-oom: tried to allocate 4.00 GiB on GPU 0 (39.4 GiB total, 2.25 GiB free) — the command exited with code 1",
        "instances:   #0 exited with code 1",
        "diagnosis:   gpu-oom",
        "hint:        16.1 GiB is reserved by PyTorch but unallocated, against 20.4 GiB allocated: inspect torch.cuda.memory_summary() / memory_stats() before tuning the allocator — a gap alone does not prove fragmentation. As a next step only: PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True, or max_split_size_mb (ignored by cudaMallocAsync).",
        "exception:",
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 4.00 GiB. GPU 0 has a total capacity of 39.38 GiB of which 2.25 GiB is free. Including non-PyTorch memory, this process has 37.12 GiB memory in use. Of the allocated memory 20.40 GiB is allocated by PyTorch, and 16.10 GiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for Memory Management  (https://docs.pytorch.org/docs/stable/notes/cuda.html#optimizing-memory-usage-with-pytorch-cuda-alloc-conf)",
        "logs:        cases/oom",
    ];
    assert_eq!(body, expected_body);
}

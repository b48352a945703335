//! Torch memory snapshots a workload leaves, read by the real binary:
//! one built to break the reader is "not read" for its case, and the run
//! goes on.

mod common;

use common::*;

/// A workload that leaves `memory_snapshot.pickle` of the bytes Python
/// evaluates `expression` to.
fn leaving(id: &str, expression: &str) -> String {
    let script = format!(
        "import os; open(os.path.join(os.environ['OOMGATE_OUT'], 'memory_snapshot.pickle'), 'wb').write({expression})"
    );
    format!(
        "[[case]]\nname = {}\ncommand = [\"python3\", \"-c\", {}]\n",
        toml_str(id),
        toml_str(&script)
    )
}

/// 50,000 nested lists under a valid snapshot root (a stack overflow
/// that aborted the whole run), a 9-byte pickle naming memo slot 2²⁸−1
/// (gigabytes), 100,000 single-item SETITEMs (quadratic): each case
/// passes, its snapshot noted "not read" or read, and the run ends whole.
#[test]
fn a_snapshot_built_to_break_the_reader_never_ends_the_run() {
    let root = r"b'\x80\x04}\x8c\x08segments]s'";
    let suite = format!(
        "[suite]\nname = \"s\"\nsample_interval = \"20ms\"\n\n{}{}{}{}",
        leaving(
            "deep",
            &format!(r"{root} + b'\x8c\x01x' + b']' * 50000 + b'a' * 49999 + b's.'")
        ),
        leaving("memo", r"b'\x80\x04Nr\xff\xff\xff\x0f.'"),
        leaving(
            "setitems",
            &format!("{root} + b''.join(b'\\x8c\\x06k%05dNs' % i for i in range(100000)) + b'.'"),
        ),
        leaving("after", &format!("{root} + b'.'")),
    );
    let project = Project::new(&suite);
    let run = project.run(&[]);
    run.assert_code(0);
    let results = read_json(&project.out().join("results.json"));
    assert!(
        results["finished_at"].is_string(),
        "a final results.json, not a checkpoint"
    );
    for id in ["deep", "memo", "setitems", "after"] {
        assert_eq!(run.case(id)["status"], "passed", "{id}");
    }
    let notes = run.case("deep")["allocation_sites"]["notes"].to_string();
    assert!(
        notes.contains(
            "memory_snapshot.pickle: not read: its lists, dicts and tuples nest more than 100 deep"
        ),
        "{notes}"
    );
    assert!(
        run.stderr
            .contains("deep: memory snapshot: memory_snapshot.pickle: not read"),
        "{}",
        run.stderr
    );
    let notes = run.case("memo")["allocation_sites"]["notes"].to_string();
    assert!(notes.contains("not a torch memory snapshot"), "{notes}");
    let sites = &run.case("setitems")["allocation_sites"];
    assert_eq!(sites["files"][0], "memory_snapshot.pickle", "{sites:#}");
    assert_eq!(
        run.case("after")["allocation_sites"]["files"][0],
        "memory_snapshot.pickle"
    );
}

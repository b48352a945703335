//! `oomgate merge` end to end: shards of a suite run by the real binary
//! (split with `--filter` here, as `--partition` splits them in CI), merged
//! into one set of reports. A shard merged alone is that shard; shards
//! merge in the suite's order, a missing one fails the gate; parts that
//! overlap, are of other suites or schemas, or cannot be read are refused
//! with exit 2 and nothing written; a merged run locks unless its parts
//! ran on other GPU models or measured host memory differently.

mod common;

use std::path::{Path, PathBuf};

use common::fake_nvml::*;
use common::*;

fn python_path() -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    format!(
        "{}:{}",
        root.join("python").display(),
        root.join("fixtures/python").display()
    )
}

/// Three cases: a small allocation, a PyTorch OOM (a failure with a
/// diagnosis and a stderr tail), and a training loop reporting through the
/// probe (a probe chart, a stdout tail).
fn suite() -> String {
    let oom = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/oom/pytorch-current.txt");
    format!(
        "[suite]\nname = \"m\"\nsample_interval = \"20ms\"\n\n\
         [[case]]\nname = \"small\"\ncommand = [\"python3\", {}, \"--mib\", \"8\", \"--hold\", \"100ms\"]\n\n\
         [[case]]\nname = \"oom\"\ncommand = [\"python3\", {}, \"--text\", {}, \"--exit\", \"1\"]\n\n\
         [[case]]\nname = \"train\"\ncommand = [\"python3\", {}, \"--steps\", \"12\", \"--leak-mib\", \"8\"]\nenv = {{ PYTHONPATH = {} }}\n",
        toml_str(&workload("alloc.py")),
        toml_str(&workload("fail.py")),
        toml_str(&oom.display().to_string()),
        toml_str(&workload("probe_train.py")),
        toml_str(&python_path())
    )
}

impl Project {
    /// `oomgate run` of the cases matching `filters`, into `shards/<name>`.
    fn shard(&self, name: &str, filters: &[&str]) -> Run {
        let out = self.path().join("shards").join(name);
        let mut command = self.oomgate();
        command.arg("run").arg(self.suite()).arg("--out").arg(&out);
        for filter in filters {
            command.args(["--filter", filter]);
        }
        Run::from(command.output().expect("run a shard"), out)
    }

    /// `oomgate merge` of these parts (relative to the project) into `merged`.
    fn merge(&self, parts: &[&str], extra: &[&str]) -> Run {
        let out = self.path().join("merged");
        let output = self
            .oomgate()
            .current_dir(self.path())
            .arg("merge")
            .args(parts)
            .arg("--out")
            .arg(&out)
            .args(extra)
            .output()
            .expect("run oomgate merge");
        Run::from(output, out)
    }
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

/// A results.json without what only a merge or a partitioned run adds.
fn without_merge_fields(mut results: serde_json::Value) -> serde_json::Value {
    if let Some(fields) = results.as_object_mut() {
        for key in ["merged_from", "parts", "partition", "run_id"] {
            fields.remove(key);
        }
    }
    results
}

fn ids(results: &serde_json::Value, key: &str) -> Vec<String> {
    results[key]
        .as_array()
        .map(|items| {
            items
                .iter()
                .map(|item| {
                    item["id"]
                        .as_str()
                        .or(item.as_str())
                        .unwrap_or("?")
                        .to_string()
                })
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn a_shard_merged_alone_is_that_shard() {
    let project = Project::new(&suite());
    project.shard("all", &[]).assert_code(1);
    let merged = project.merge(&["shards/all"], &[]);
    merged.assert_code(1);
    let shard = project.path().join("shards/all");
    // Every page is the shard's, to the byte: the log tails, the memory
    // and probe charts, the diagnosis.
    for file in ["junit.xml", "summary.md", "report.html"] {
        assert!(
            read(&shard.join(file)) == read(&merged.out.join(file)),
            "{file} differs"
        );
    }
    let page = read(&merged.out.join("report.html"));
    assert!(page.contains("What the probe reported"), "probe chart");
    assert!(page.contains("end of stderr"), "stderr tail");
    let junit = read(&merged.out.join("junit.xml"));
    assert!(
        junit.contains("--- end of stdout ---\ntrained 12 steps"),
        "{junit}"
    );
    // results.json too, but for what the merge adds.
    let results = merged.results();
    assert_eq!(results["merged_from"], 1);
    assert_eq!(results["parts"][0]["dir"], "shards/all");
    // The merge is a run of its own: its id is made of its parts'.
    let shard_id = read_json(&shard.join("results.json"))["run_id"].clone();
    assert!(results["run_id"].is_string() && results["run_id"] != shard_id);
    assert_eq!(
        without_merge_fields(results),
        without_merge_fields(read_json(&shard.join("results.json")))
    );
    // The case folders came along.
    for file in [
        "cases/oom/stderr.log",
        "cases/train/metrics.jsonl",
        "cases/small/timeline.json",
    ] {
        assert!(merged.out.join(file).is_file(), "{file}");
    }
}

#[test]
fn shards_merge_in_the_suites_order_and_a_missing_one_fails_the_gate() {
    let project = Project::new(&suite());
    project.shard("1", &["train", "small"]).assert_code(0);
    project.shard("2", &["oom"]).assert_code(1);
    // The field `--partition` writes, read when present (set, not added:
    // an oomgate with --partition writes it, null without the flag).
    let first = project.path().join("shards/1/results.json");
    let mut results = read_json(&first);
    results["partition"] = serde_json::json!({"kind": "count", "index": 1, "total": 2});
    std::fs::write(&first, results.to_string()).expect("write");

    let step_summary = project.path().join("step-summary.md");
    let output = project
        .oomgate()
        .current_dir(project.path())
        .env("GITHUB_STEP_SUMMARY", &step_summary)
        .args([
            "merge",
            "shards/1",
            "shards/2/results.json",
            "--out",
            "merged",
            "--suite",
            "suite.toml",
        ])
        .output()
        .expect("merge");
    let merged = Run::from(output, project.path().join("merged"));
    merged.assert_code(1);
    let results = merged.results();
    assert_eq!(ids(&results, "cases"), ["small", "oom", "train"]);
    assert_eq!(results["summary"]["planned"], 3);
    assert_eq!(results["summary"]["passed"], 2);
    assert_eq!(results["summary"]["failed"], 1);
    assert_eq!(results["merged_from"], 2);
    assert_eq!(results["parts"][0]["partition"]["kind"], "count");
    assert_eq!(results["parts"][1]["dir"], "shards/2/results.json");
    assert_eq!(results["parts"][1]["cases"], serde_json::json!(["oom"]));
    let summary = read(&merged.out.join("summary.md"));
    assert!(summary.contains("| `shards/1` | "), "{summary}");
    assert!(
        summary.contains(" | `count:1/2` | `2 passed, 0 failed` | "),
        "{summary}"
    );
    assert!(
        summary.contains("None: every part ran in the first part's environment."),
        "{summary}"
    );
    assert!(read(&step_summary).starts_with("## oomgate: m — 2 passed, 1 failed"));
    assert!(
        merged
            .stderr
            .contains("merged 2 part(s), 3 case(s) of suite `m`"),
        "{}",
        merged.stderr
    );

    // Without the shard that held `oom`: the suite's case no part ran is
    // not run, an error in JUnit, and the gate fails although every case
    // that ran passed.
    let partial = project.merge(&["shards/1"], &["--suite", "suite.toml"]);
    partial.assert_code(1);
    // Its recorded partition says which shard is missing.
    assert!(
        partial
            .stderr
            .contains("note: the parts are 1 of the 2 shards of count:M/2: shard(s) 2 missing"),
        "{}",
        partial.stderr
    );
    let results = partial.results();
    assert_eq!(ids(&results, "cases"), ["small", "train"]);
    assert_eq!(results["not_run"], serde_json::json!(["oom"]));
    let junit = read(&partial.out.join("junit.xml"));
    assert!(
        junit.contains(&format!(
            "<error message=\"not run: {}\" type=\"not-run\"/>",
            oomgate::report::NO_PART_MESSAGE
        )),
        "{junit}"
    );
    assert!(read(&partial.out.join("summary.md")).contains("**Not run by any part**: `oom`"));
    // Without the suite, nothing is known to be missing: the parts' cases
    // pass, in part order.
    let alone = project.merge(&["shards/1"], &[]);
    alone.assert_code(0);
    assert_eq!(ids(&alone.results(), "cases"), ["small", "train"]);
}

/// Regression (issue 20): a shard whose oomgate was killed (a cancelled
/// CI job) merged green — "4 passed, 0 failed" — with the case it ran
/// `running` and the cases it never reached missing.
#[test]
fn a_killed_shard_merges_red_its_unfinished_cases_not_run() {
    let pids = tempfile::tempdir().expect("tempdir");
    let pid_file = pids.path().join("delta.pid");
    let quick = |name: &str| format!("[[case]]\nname = \"{name}\"\ncommand = [\"true\"]\n\n");
    let suite = format!(
        "[suite]\nname = \"k\"\nsample_interval = \"20ms\"\n\n{}{}{}\
         [[case]]\nname = \"delta\"\ncommand = [\"sh\", \"-c\", {}]\n\n{}",
        quick("alpha"),
        quick("bravo"),
        quick("charlie"),
        toml_str(&format!(
            "echo $$ > '{}'; exec sleep 60",
            pid_file.display()
        )),
        quick("echo")
    );
    let project = Project::new(&suite);
    project.shard("1", &["alpha", "bravo"]).assert_code(0);
    let out = project.path().join("shards/2");
    let mut killed = project
        .oomgate()
        .arg("run")
        .arg(project.suite())
        .arg("--out")
        .arg(&out)
        .args([
            "--filter", "charlie", "--filter", "delta", "--filter", "echo",
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("start the shard");
    let sleeper = wait_for_pid(&pid_file, std::time::Duration::from_secs(30));
    // Killed once its checkpoint lists `delta` in flight.
    let checkpoint = out.join("results.json");
    let in_flight = || {
        let text = std::fs::read_to_string(&checkpoint).unwrap_or_default();
        let results: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
        results["cases"]
            .as_array()
            .and_then(|cases| cases.last())
            .is_some_and(|case| case["id"] == "delta" && case["status"] == "running")
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !in_flight() {
        assert!(
            std::time::Instant::now() < deadline,
            "delta never reached the checkpoint"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    killed.kill().expect("SIGKILL the shard's oomgate");
    killed.wait().expect("wait for it");
    // Its supervisor takes the workload with it.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while alive(sleeper) {
        assert!(
            std::time::Instant::now() < deadline,
            "the workload outlived its shard"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let part = read_json(&checkpoint);
    assert!(part["finished_at"].is_null(), "{part:#}");
    assert_eq!(
        part["planned_cases"],
        serde_json::json!(["charlie", "delta", "echo"]),
        "a checkpoint names every planned case"
    );

    let check = |merged: &Run, what: &str| {
        merged.assert_code(1);
        let results = merged.results();
        assert_eq!(
            ids(&results, "cases"),
            ["alpha", "bravo", "charlie"],
            "{what}"
        );
        assert_eq!(
            results["not_run"],
            serde_json::json!(["delta", "echo"]),
            "{what}"
        );
        assert_eq!(results["summary"]["passed"], 3, "{what}");
        assert_eq!(results["summary"]["planned"], 5, "{what}");
        assert!(results.get("planned_cases").is_none(), "{what}");
        let text = read(&merged.out.join("results.json"));
        assert!(!text.contains("\"running\""), "{what}: {text}");
        let junit = read(&merged.out.join("junit.xml"));
        for id in ["delta", "echo"] {
            assert!(
                junit.contains(&format!(
                    "<testcase name=\"{id}\" classname=\"k\">\n            <error message=\"not run: {}\" type=\"not-run\"/>",
                    oomgate::report::UNFINISHED_MESSAGE.replace('\'', "&apos;")
                )),
                "{what}: {id}: {junit}"
            );
        }
        assert!(
            read(&merged.out.join("summary.md"))
                .contains("**Not finished by its part**: `delta, echo`"),
            "{what}"
        );
        assert!(
            merged.stderr.contains("note: part shards/2 did not finish (its results.json has no finished_at: its oomgate was killed?): 1 finished case(s) kept, 2 listed as not run"),
            "{what}: {}",
            merged.stderr
        );
    };
    check(
        &project.merge(&["shards/1", "shards/2"], &[]),
        "without the suite",
    );
    check(
        &project.merge(&["shards/1", "shards/2"], &["--suite", "suite.toml"]),
        "with the suite",
    );
    // Killed between two cases, with no case in flight in its checkpoint:
    // the cases it never reached are still not run.
    let mut between = part.clone();
    if let Some(cases) = between["cases"].as_array_mut() {
        cases.retain(|case| case["status"] != "running");
    }
    std::fs::write(&checkpoint, between.to_string()).expect("write");
    check(
        &project.merge(&["shards/1", "shards/2"], &[]),
        "between cases",
    );
}

#[test]
fn parts_that_cannot_be_merged_exit_2_and_nothing_is_written() {
    const SCHEMA: u32 = oomgate::results::SCHEMA_VERSION;
    let project = Project::new(&suite());
    project.shard("1", &["small"]).assert_code(0);
    project.shard("2", &["small", "oom"]).assert_code(1);
    let copy = |from: &str, to: &str, edit: &dyn Fn(String) -> String| {
        let dir = project.path().join("shards").join(to);
        std::fs::create_dir_all(&dir).expect("mkdir");
        let text = read(
            &project
                .path()
                .join("shards")
                .join(from)
                .join("results.json"),
        );
        std::fs::write(dir.join("results.json"), edit(text)).expect("write");
    };
    copy("1", "other-suite", &|t| {
        t.replacen("\"name\": \"m\"", "\"name\": \"n\"", 1)
    });
    copy("1", "older", &|t| {
        t.replacen(&format!("\"schema\": {SCHEMA}"), "\"schema\": 3", 1)
    });
    copy("1", "corrupt", &|t| {
        t.replacen("\"planned\": 1", "\"planned\": \"one\"", 1)
    });
    copy("1", "truncated", &|t| t[..t.len() / 2].to_string());
    copy("1", "escaping", &|t| t.replace("cases/small", "../../etc"));
    std::fs::create_dir_all(project.path().join("shards/empty")).expect("mkdir");

    for (parts, expected) in [
        (
            vec!["shards/1", "shards/2"],
            "case `small` is in two parts, shards/1 and shards/2",
        ),
        (
            vec!["shards/1", "shards/other-suite"],
            "shards/1 holds results of suite `m`, shards/other-suite of suite `n`",
        ),
        (
            vec!["shards/2", "shards/older"],
            &format!("shards/2 has results schema {SCHEMA}, shards/older schema 3"),
        ),
        (
            vec!["shards/corrupt"],
            &format!(
                "part shards/corrupt: shards/corrupt/results.json: not readable as oomgate results (schema {SCHEMA}): invalid type: string \"one\", expected usize at line "
            ),
        ),
        (
            vec!["shards/truncated"],
            "part shards/truncated: shards/truncated/results.json: not an oomgate results file: EOF while parsing",
        ),
        (
            vec!["shards/escaping"],
            "case `small` names `../../etc`, which is not a path inside the out dir's cases/ folder",
        ),
        (
            vec!["shards/empty"],
            "part shards/empty: no results.json in it (shards/empty/results.json)",
        ),
        (
            vec!["shards/none"],
            "part shards/none: No such file or directory",
        ),
        (
            vec!["shards/1", "shards/1/results.json"],
            "shards/1 and shards/1/results.json are the same part",
        ),
    ] {
        let refused = project.merge(&parts, &["--suite", "suite.toml"]);
        refused.assert_code(2);
        assert!(
            refused.stderr.contains(expected),
            "{parts:?}: {}",
            refused.stderr
        );
        assert!(!refused.out.exists(), "{parts:?}: nothing written");
    }
    let unknown = project.merge(&["shards/1"], &["--suite", "other.toml"]);
    unknown.assert_code(2);
    std::fs::write(
        project.path().join("other.toml"),
        suite().replace("name = \"small\"", "name = \"tiny\""),
    )
    .expect("write");
    let unknown = project.merge(&["shards/1"], &["--suite", "other.toml"]);
    unknown.assert_code(2);
    assert!(
        unknown
            .stderr
            .contains("shards/1 has cases suite `m` (other.toml) does not: small"),
        "{}",
        unknown.stderr
    );
    // The out dir must not be a part, nor someone else's folder.
    let output = project
        .oomgate()
        .current_dir(project.path())
        .args(["merge", "shards/1", "--out", "shards/1"])
        .output()
        .expect("merge");
    let into_part = Run::from(output, PathBuf::new());
    into_part.assert_code(2);
    assert!(
        into_part
            .stderr
            .contains("--out shards/1 is, or holds, the part shards/1"),
        "{}",
        into_part.stderr
    );
    let output = project
        .oomgate()
        .current_dir(project.path())
        .args(["merge", "shards/1", "--out", "."])
        .output()
        .expect("merge");
    Run::from(output, PathBuf::new()).assert_code(2);
}

/// A GPU case `c` and a host case `h`, for shards on fake GPUs.
fn gpu_suite() -> String {
    format!(
        "[suite]\nname = \"g\"\nsample_interval = \"20ms\"\n\n\
         [[case]]\nname = \"c\"\ncommand = [\"python3\", {}, \"--mib\", \"500\", \"--hold\", \"200ms\"]\n\n\
         [[case]]\nname = \"h\"\ncommand = [\"python3\", {}, \"--mib\", \"16\", \"--hold\", \"100ms\"]\n",
        toml_str(&workload("gpu_alloc.py")),
        toml_str(&workload("alloc.py"))
    )
}

fn gpus(model: &str) -> String {
    format!(
        "driver 550.54.15\ncuda 12040\n{}",
        device(UUID_0, 8 * GIB, 256 << 20, false, model)
    )
}

impl Project {
    fn lock_from(&self, results: &Path) -> Run {
        let output = self
            .oomgate()
            .arg("lock")
            .arg(self.suite())
            .arg("--from")
            .arg(results)
            .output()
            .expect("lock");
        Run::from(output, self.out())
    }
}

#[test]
fn a_merged_run_locks_unless_its_parts_figures_are_not_comparable() {
    let project =
        Project::new(&gpu_suite()).with_fake_gpus(&gpus("Fake H100 80GB"), Variant::Complete);
    project.shard("1", &["c"]).assert_code(0);
    project.shard("2", &["h"]).assert_code(0);
    let merged = project.merge(&["shards/1", "shards/2"], &["--suite", "suite.toml"]);
    merged.assert_code(0);
    let lock_path = project.path().join("suite.lock");
    let locked = project.lock_from(&merged.out.join("results.json"));
    locked.assert_code(0);
    assert!(
        locked.stderr.contains("locked 2 case(s) of suite `g`"),
        "{}",
        locked.stderr
    );
    let lock = read(&lock_path);
    assert!(lock.contains("gpu_peak = \"500.0 MiB\""), "{lock}");
    std::fs::remove_file(&lock_path).expect("remove the lock");

    // The second shard on another GPU model: listed as a difference in the
    // report, and locked into two testbeds, each with its part's
    // environment.
    std::fs::write(
        project.path().join("fake-nvml.conf"),
        format!("{}\nlisted listed\n", gpus("Fake A100 40GB")),
    )
    .expect("rewrite the fake GPUs");
    project.shard("2", &["h"]).assert_code(0);
    let merged = project.merge(&["shards/1", "shards/2"], &["--suite", "suite.toml"]);
    merged.assert_code(0);
    let why = "GPU models differ: shards/1 on Fake H100 80GB, shards/2 on Fake A100 40GB";
    let summary = read(&merged.out.join("summary.md"));
    assert!(
        summary.contains(
            "- **`shards/2`**: `gpu 0 Fake H100 80GB (8.00 GiB) → Fake A100 40GB (8.00 GiB)"
        ),
        "{summary}"
    );
    assert!(
        summary.contains(&format!("**Not comparable**: `{why}")),
        "{summary}"
    );
    project
        .lock_from(&merged.out.join("results.json"))
        .assert_code(0);
    let lock: toml::Table = toml::from_str(&read(&lock_path)).expect("a lock");
    let testbed = |name: &str| lock["testbeds"][name]["environment"]["gpu_models"].to_string();
    assert!(
        testbed("Fake H100 80GB ×1").contains("Fake H100 80GB"),
        "{lock:#?}"
    );
    assert!(
        testbed("Fake A100 40GB ×1").contains("Fake A100 40GB"),
        "{lock:#?}"
    );
    std::fs::remove_file(&lock_path).expect("remove the lock");

    // The same GPUs again, but host memory measured without a cgroup in
    // one part: not comparable either. cgroup-v1 with cgroup-v2 is.
    project.shard("2", &["h"]).assert_code(0);
    std::fs::write(
        project.path().join("fake-nvml.conf"),
        format!("{}\nlisted listed\n", gpus("Fake H100 80GB")),
    )
    .expect("rewrite the fake GPUs");
    project.shard("2", &["h"]).assert_code(0);
    let part = project.path().join("shards/2/results.json");
    let measured = |method: &str| {
        let mut results = read_json(&part);
        results["measurement"]["host_method"] = method.into();
        std::fs::write(&part, results.to_string()).expect("write");
    };
    let first =
        read_json(&project.path().join("shards/1/results.json"))["measurement"]["host_method"]
            .as_str()
            .unwrap_or("?")
            .to_string();
    measured("procfs-rss");
    let merged = project.merge(&["shards/1", "shards/2"], &[]);
    merged.assert_code(0);
    let refused = project.lock_from(&merged.out.join("results.json"));
    refused.assert_code(1);
    assert!(
        refused.stderr.contains(&format!(
            "host memory measured by {first} in shards/1, by procfs-rss in shards/2"
        )),
        "{}",
        refused.stderr
    );
    let comparable = if first.starts_with("cgroup") {
        if first == "cgroup-v1" {
            "cgroup-v2"
        } else {
            "cgroup-v1"
        }
    } else {
        first.as_str()
    };
    measured(comparable);
    let merged = project.merge(&["shards/1", "shards/2"], &[]);
    merged.assert_code(0);
    project
        .lock_from(&merged.out.join("results.json"))
        .assert_code(0);
}

/// A shard that ran another definition of a case than `--suite`'s is
/// never passed under the old one: a budget tightened since is judged
/// again from the shard's figures (and fails as the suite alone would);
/// a command changed since, or a definition the results do not record,
/// fails the case as `other-definition`, naming what differs.
#[test]
fn a_part_is_judged_by_the_suites_definition_not_the_one_it_ran() {
    let defined = |budget: &str, mib: &str| {
        format!(
            "[suite]\nname = \"d\"\nsample_interval = \"20ms\"\n\n\
             [[case]]\nname = \"a\"\ncommand = [\"python3\", {}, \"--mib\", \"{mib}\", \"--hold\", \"200ms\"]\nbudget = {{ host = \"{budget}\" }}\n\n\
             [[case]]\nname = \"b\"\ncommand = [\"true\"]\n",
            toml_str(&workload("alloc.py"))
        )
    };
    let project = Project::new(&defined("1 GiB", "48"));
    project.shard("1", &[]).assert_code(0);
    let write = |name: &str, text: String| {
        std::fs::write(project.path().join(name), text).expect("write a suite")
    };
    write("v2.toml", defined("16 MiB", "48"));
    write("v3.toml", defined("1 GiB", "40"));
    let case = |run: &Run, id: &str| {
        let results = run.results();
        results["cases"]
            .as_array()
            .and_then(|cases| cases.iter().find(|c| c["id"] == id).cloned())
            .unwrap_or_else(|| panic!("no case {id}: {results:#}"))
    };

    // The same definition merges as it ran.
    let same = project.merge(&["shards/1"], &["--suite", "suite.toml"]);
    same.assert_code(0);
    assert!(!same.stderr.contains("definition"), "{}", same.stderr);

    // A budget tightened since: judged again, it fails as v2 alone does.
    let tightened = project.merge(&["shards/1"], &["--suite", "v2.toml"]);
    tightened.assert_code(1);
    let judged = case(&tightened, "a");
    assert_eq!(judged["status"], "failed", "{judged:#}");
    assert_eq!(judged["failure_kind"], "budget", "{judged:#}");
    let budget = assert_breached(&judged, "budget.host");
    assert_eq!(budget["limit_bytes"], 16 * MIB, "{budget:#}");
    assert_eq!(case(&tightened, "b")["status"], "passed");
    assert!(
        tightened.stderr.contains(
            "case `a` of part shards/1 ran under other limits than v2.toml (its budget.host differs): judged again under the suite's, it fails"
        ),
        "{}",
        tightened.stderr
    );
    let alone = project
        .oomgate()
        .arg("run")
        .arg(project.path().join("v2.toml"))
        .arg("--out")
        .arg(project.path().join("v2-alone"))
        .output()
        .expect("run v2");
    let alone = Run::from(alone, project.path().join("v2-alone"));
    alone.assert_code(1);
    assert_eq!(case(&alone, "a")["failure_kind"], "budget");

    // A command changed since: another definition, not passed.
    let changed = project.merge(&["shards/1"], &["--suite", "v3.toml"]);
    changed.assert_code(1);
    let other = case(&changed, "a");
    assert_eq!(other["status"], "failed", "{other:#}");
    assert_eq!(other["failure_kind"], "other-definition", "{other:#}");
    let message = other["message"].as_str().unwrap_or_default();
    assert!(
        message.starts_with(
            "ran another definition of the case than v3.toml: its command differs; run it again with this suite"
        ),
        "{message}"
    );
    assert_eq!(case(&changed, "b")["status"], "passed");

    // Results that record no definition are not passed either.
    let part = project.path().join("shards/1/results.json");
    let mut results = read_json(&part);
    for case in results["cases"].as_array_mut().into_iter().flatten() {
        if let Some(fields) = case.as_object_mut() {
            fields.remove("definition");
        }
    }
    std::fs::write(&part, results.to_string()).expect("write");
    let unrecorded = project.merge(&["shards/1"], &["--suite", "suite.toml"]);
    unrecorded.assert_code(1);
    let message = case(&unrecorded, "b")["message"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        message.contains("its results record no definition"),
        "{message}"
    );
}

/// A `[[parity]]` whose sides ran in two shards is judged by neither
/// (each says so and passes) and by the merge once both are in: broken
/// there, it fails the merged run with its own testcase.
#[test]
fn a_parity_across_shards_is_judged_by_the_merge() {
    let alloc = toml_str(&workload("alloc.py"));
    let project = Project::new(&format!(
        "[suite]\nname = \"m\"\nsample_interval = \"20ms\"\n\n\
         [[case]]\nname = \"offload\"\ncommand = [\"python3\", {alloc}, \"--mib\", \"90\", \"--hold\", \"200ms\"]\n\n\
         [[case]]\nname = \"plain\"\ncommand = [\"python3\", {alloc}, \"--mib\", \"100\", \"--hold\", \"200ms\"]\n\n\
         [[parity]]\nlhs = \"offload\"\nrhs = \"plain\"\nfigure = \"host_peak\"\nrule = \"lhs <= 0.6 * rhs\"\n"
    ));
    for (shard, id) in [("a", "=offload"), ("b", "=plain")] {
        let run = project.shard(shard, &[id]);
        run.assert_code(0);
        let parity = &run.results()["parity"][0];
        assert_eq!(parity["outcome"], "not-judged", "{parity:#}");
    }
    let merged = project.merge(&["shards/a", "shards/b"], &[]);
    merged.assert_code(1);
    let parity = &merged.results()["parity"][0];
    assert_eq!(parity["outcome"], "broken", "{parity:#}");
    assert!(
        parity["lhs_value"].is_f64() && parity["rhs_value"].is_f64(),
        "{parity:#}"
    );
    let junit = read(&project.path().join("merged/junit.xml"));
    assert!(
        junit.contains("<testcase name=\"parity: offload vs plain\""),
        "{junit}"
    );
    // With the suite, its rules are the ones judged: a rule loosened since
    // the shards ran holds.
    std::fs::write(
        project.suite(),
        read(&project.suite()).replace("0.6 * rhs", "1.2 * rhs"),
    )
    .expect("suite");
    let suite = project.suite().display().to_string();
    let merged = project.merge(&["shards/a", "shards/b"], &["--suite", &suite]);
    merged.assert_code(0);
    assert_eq!(merged.results()["parity"][0]["outcome"], "held");
}

//! `oomgate bisect`, for real and offline: a git repository built here
//! whose commit N makes a workload grow (with commits that do not build,
//! and one whose suite lacks the case, where the search lands), driven
//! by oomgate's own search and by `git bisect run`; a folder of wheels
//! of a tiny package built here (one version allocates more, one cannot
//! be installed) installed by pip from `--find-links` only; a pair of
//! packages that only grow together.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::{oomgate, read_json};

/// `git` in `dir`, quiet, as a test user; panics when it fails.
fn git(dir: &Path, args: &[&str]) -> String {
    match try_git(dir, args) {
        Ok(out) => out,
        Err(why) => panic!("git {args:?}: {why}"),
    }
}

/// `git` in `dir`: its stdout, or its stderr when it fails.
fn try_git(dir: &Path, args: &[&str]) -> Result<String, String> {
    let output = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args([
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@t",
            "-c",
            "commit.gpgsign=false",
        ])
        .args(args)
        .env_remove("GIT_DIR")
        .env_remove("GIT_WORK_TREE")
        .output()
        .expect("git");
    if !output.status.success() {
        return Err(String::from_utf8_lossy(&output.stderr).into_owned());
    }
    Ok(String::from_utf8_lossy(&output.stdout).trim().to_string())
}

/// The workload: holds as many MiB as `size.txt` says, touched.
const WORK: &str = "mib = int(open('size.txt').read())\nbuf = bytearray(mib * 1024 * 1024)\nfor i in range(0, len(buf), 4096):\n    buf[i] = 1\n";

fn suite(case: &str) -> String {
    format!(
        "[suite]\nname = \"grow\"\n[environment]\npython = \".venv/bin/python\"\n[[case]]\nname = \"{case}\"\ncommand = [\".venv/bin/python\", \"work.py\"]\ntimeout = \"60s\"\n[[case]]\nname = \"{case}-offload\"\ncommand = [\"python3\", \"-c\", \"pass\"]\n"
    )
}

/// A repository with `commits` commits after a first one ("start"): the
/// workload holds `sizes(i)` MiB at commit i (0 is "start"), `broken`
/// commits fail the build (`test ! -e BROKEN`), and at `renamed` commits
/// the suite has no case `train`. The interpreter the suite names,
/// `.venv/bin/python`, is untracked (a link to python3), as a team's
/// virtual environment is. Its commits' hashes, first to last.
fn repository(
    dir: &Path,
    commits: usize,
    sizes: impl Fn(usize) -> u32,
    broken: &[usize],
    renamed: &[usize],
) -> Vec<String> {
    git(dir, &["init", "-q", "-b", "main", "."]);
    std::fs::create_dir_all(dir.join(".venv/bin")).expect("venv folder");
    let python = which("python3");
    std::os::unix::fs::symlink(&python, dir.join(".venv/bin/python")).expect("link python");
    std::fs::write(dir.join(".gitignore"), ".venv/\n").expect("gitignore");
    std::fs::write(dir.join("work.py"), WORK).expect("work.py");
    let mut hashes = Vec::new();
    for i in 0..=commits {
        std::fs::write(dir.join("size.txt"), sizes(i).to_string()).expect("size");
        let case = if renamed.contains(&i) {
            "train-renamed"
        } else {
            "train"
        };
        std::fs::write(dir.join("suite.toml"), suite(case)).expect("suite");
        if broken.contains(&i) {
            std::fs::write(dir.join("BROKEN"), "").expect("broken");
        } else {
            let _ = std::fs::remove_file(dir.join("BROKEN"));
        }
        git(dir, &["add", "-A"]);
        let message = if i == 0 {
            "start".to_string()
        } else {
            format!("commit {i}")
        };
        git(dir, &["commit", "-q", "--allow-empty", "-m", &message]);
        hashes.push(git(dir, &["rev-parse", "HEAD"]));
    }
    hashes
}

fn which(program: &str) -> PathBuf {
    std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .map(|d| d.join(program))
        .find(|p| p.is_file())
        .unwrap_or_else(|| panic!("{program} is not on PATH"))
}

fn text(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// `oomgate bisect suite.toml --case train --out OUT EXTRA…` in `dir`,
/// not started.
fn bisect_command(dir: &Path, out: &Path, extra: &[&str]) -> Command {
    let mut command = oomgate();
    command
        .arg("bisect")
        .arg(dir.join("suite.toml"))
        .args(["--case", "train", "--out"])
        .arg(out)
        .args(extra)
        .current_dir(dir);
    command
}

fn bisect(dir: &Path, out: &Path, extra: &[&str]) -> Output {
    bisect_command(dir, out, extra)
        .output()
        .expect("oomgate bisect")
}

/// The checkout as the user left it: HEAD, the status, the worktrees.
fn checkout_state(dir: &Path) -> (String, String, String) {
    (
        git(dir, &["rev-parse", "HEAD"]),
        git(dir, &["status", "--porcelain", "--ignored"]),
        git(dir, &["worktree", "list", "--porcelain"]),
    )
}

#[test]
fn commits_find_the_step_and_step_around_what_cannot_be_judged() {
    let repo = tempfile::tempdir().expect("tempdir");
    let dir = repo.path();
    // 0..=12: the middle, 6, does not build; 7's suite lacks the case;
    // 9 grows the workload from 20 to 90 MiB.
    let hashes = repository(dir, 12, |i| if i >= 9 { 90 } else { 20 }, &[6], &[7]);
    // A dirty checkout, left as it is.
    std::fs::write(dir.join("untracked.txt"), "mine").expect("untracked");
    std::fs::write(dir.join("work.py"), format!("{WORK}# my edit\n")).expect("edit");
    let before = checkout_state(dir);
    let scratch = tempfile::tempdir().expect("tempdir");
    let out = scratch.path().join("bisect");
    let answer = scratch.path().join("answer.json");
    let output = bisect(
        dir,
        &out,
        &[
            "--good",
            &hashes[0],
            "--bad",
            "main",
            "--build",
            "test ! -e BROKEN",
            "--json",
            answer.to_str().expect("utf-8"),
        ],
    );
    let said = text(&output);
    assert_eq!(output.status.code(), Some(0), "{said}");
    assert!(
        said.contains(&format!("first bad: {} \"commit 9\"", &hashes[9][..12])),
        "{said}"
    );
    assert!(
        said.contains(&format!("last good: {} \"commit 8\"", &hashes[8][..12])),
        "{said}"
    );
    let json = read_json(&out.join("bisect.json"));
    assert_eq!(json["first_bad"], hashes[9].as_str(), "{json}");
    assert_eq!(json["last_good"], hashes[8].as_str());
    assert_eq!(json["ending"], "found");
    // --json writes the same answer where it is asked.
    assert_eq!(read_json(&answer), json);
    // Both ends, then 6 (no build), 7 (no case), 5, 8, 10, 9.
    assert_eq!(json["runs"], 7, "{json}");
    assert_eq!(json["bound"], 4);
    let skipped = json["skipped"].as_array().expect("skipped");
    assert_eq!(skipped.len(), 2, "{json}");
    assert_eq!(skipped[0]["candidate"], hashes[6].as_str());
    assert!(
        skipped[0]["reason"]
            .as_str()
            .unwrap_or("")
            .contains("does not build"),
        "{json}"
    );
    assert_eq!(skipped[1]["candidate"], hashes[7].as_str());
    assert!(
        skipped[1]["reason"]
            .as_str()
            .unwrap_or("")
            .contains("bad input"),
        "{json}"
    );
    // Why: both figures, and both runs' case folders, kept.
    let finding = &json["findings"][0];
    let good = finding["last_good"]["host_peak_bytes"]
        .as_u64()
        .expect("good figure");
    let bad = finding["first_bad"]["host_peak_bytes"]
        .as_u64()
        .expect("bad figure");
    assert!(bad > good + 60 * common::MIB, "{good} -> {bad}");
    for side in ["last_good", "first_bad"] {
        let folder = finding[side]["case_folder"].as_str().expect("case folder");
        assert!(Path::new(folder).join("stdout.log").exists(), "{folder}");
    }
    let md = std::fs::read_to_string(out.join("bisect.md")).expect("bisect.md");
    assert!(
        md.contains(&format!("| first bad | `{}` `commit 9` |", hashes[9])),
        "{md}"
    );
    let folder = finding["first_bad"]["case_folder"]
        .as_str()
        .expect("folder");
    assert!(
        md.contains(&format!("- first bad's case folder: `{folder}`")),
        "{md}"
    );
    // The checkout is as it was; no worktree is left.
    assert_eq!(checkout_state(dir), before);
    assert!(!out.join("worktrees").exists());
    assert!(out.join("bisect.log").exists());
    // The untracked interpreter was borrowed from the checkout.
    let linked =
        std::fs::read_to_string(out.join("steps").join(&hashes[8][..12]).join("linked.txt"))
            .expect("linked.txt");
    assert!(linked.starts_with(".venv -> "), "{linked}");
}

#[test]
fn a_second_bisect_takes_every_step_from_the_history() {
    let repo = tempfile::tempdir().expect("tempdir");
    let dir = repo.path();
    let hashes = repository(dir, 8, |i| if i >= 3 { 90 } else { 20 }, &[], &[]);
    let scratch = tempfile::tempdir().expect("tempdir");
    let history = format!("sqlite:{}", scratch.path().join("history.db").display());
    let range = [
        "--good",
        &hashes[0],
        "--bad",
        &hashes[8],
        "--history",
        &history,
    ];
    let first = bisect(dir, &scratch.path().join("first"), &range);
    assert_eq!(first.status.code(), Some(0), "{}", text(&first));
    let second = bisect(dir, &scratch.path().join("second"), &range);
    let said = text(&second);
    assert_eq!(second.status.code(), Some(0), "{said}");
    let json = read_json(&scratch.path().join("second/bisect.json"));
    assert_eq!(json["first_bad"], hashes[3].as_str(), "{said}");
    assert_eq!(json["runs"], 0, "nothing run again: {said}");
    assert!(said.contains("from the history"), "{said}");
    // The suite's series holds none of them.
    let shown = oomgate()
        .args(["history", "show", "--history", &history, "--json"])
        .output()
        .expect("history show");
    let runs = serde_json::from_slice::<serde_json::Value>(&shown.stdout).unwrap_or_default();
    assert!(
        runs["runs"].as_array().is_none_or(|r| r.is_empty()),
        "{runs}"
    );
}

#[test]
fn a_pool_of_gpus_runs_commits_at_once() {
    use common::fake_nvml::{GIB, Variant, device, library_dir};
    let repo = tempfile::tempdir().expect("tempdir");
    let dir = repo.path();
    let hashes = repository(dir, 12, |i| if i >= 9 { 90 } else { 20 }, &[], &[]);
    // Each run takes a while, so that runs at once overlap.
    std::fs::write(
        dir.join("work.py"),
        format!("import time\n{WORK}time.sleep(0.6)\n"),
    )
    .expect("work.py");
    git(dir, &["commit", "-qam", "slower"]);
    let mut config = "driver 550.54.15\ncuda 12040\n".to_string();
    for i in 0..3 {
        let uuid = format!("GPU-{i}{i}{i}{i}{i}{i}{i}{i}-aaaa-bbbb-cccc-dddddddddddd");
        config.push_str(&device(&uuid, 8 * GIB, 0, false, "Fake H100 80GB"));
    }
    let scratch = tempfile::tempdir().expect("tempdir");
    let config_path = scratch.path().join("fake-nvml.conf");
    std::fs::write(&config_path, format!("{config}\nlisted listed\n")).expect("config");
    let out = scratch.path().join("bisect");
    let output = oomgate()
        .arg("bisect")
        .arg(dir.join("suite.toml"))
        .args(["--case", "train", "--out"])
        .arg(&out)
        .args([
            "--good",
            &hashes[0],
            "--bad",
            &hashes[12],
            "--gpus",
            "0,1,2",
        ])
        .env("LD_LIBRARY_PATH", library_dir(Variant::Complete))
        .env("OOMGATE_FAKE_NVML_CONFIG", &config_path)
        .current_dir(dir)
        .output()
        .expect("oomgate bisect --gpus");
    let said = text(&output);
    assert_eq!(output.status.code(), Some(0), "{said}");
    let json = read_json(&out.join("bisect.json"));
    assert_eq!(json["first_bad"], hashes[9].as_str(), "{said}");
    assert_eq!(json["slots"], 3);
    // The ends, then rounds of three: 11 candidates in two rounds.
    let rounds = json["rounds"].as_u64().expect("rounds");
    assert!(rounds <= 4, "{rounds} rounds: {said}");
    assert!(said.contains("round(s) of up to 3 at once"), "{said}");
    // Each run had a GPU of its own.
    let gpus: std::collections::BTreeSet<String> = json["steps"]
        .as_array()
        .expect("steps")
        .iter()
        .filter_map(|s| s["case_folder"].as_str())
        .filter_map(|folder| {
            let results = Path::new(folder).join("../../results.json");
            read_json(&results)["cases"][0]["cuda_visible_devices"]
                .as_str()
                .map(str::to_string)
        })
        .collect();
    assert!(gpus.len() >= 2, "{gpus:?}");
}

#[test]
fn every_step_of_a_creep_with_all_steps() {
    let repo = tempfile::tempdir().expect("tempdir");
    let dir = repo.path();
    let hashes = repository(
        dir,
        8,
        |i| match i {
            0..=2 => 20,
            3..=5 => 70,
            _ => 150,
        },
        &[],
        &[],
    );
    let scratch = tempfile::tempdir().expect("tempdir");
    let out = scratch.path().join("bisect");
    let output = bisect(
        dir,
        &out,
        &["--good", &hashes[0], "--bad", &hashes[8], "--all-steps"],
    );
    let said = text(&output);
    assert_eq!(output.status.code(), Some(0), "{said}");
    let json = read_json(&out.join("bisect.json"));
    let firsts: Vec<&str> = json["findings"]
        .as_array()
        .expect("findings")
        .iter()
        .map(|f| f["first_bad"]["candidate"]["id"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(
        firsts,
        vec![hashes[3].as_str(), hashes[6].as_str()],
        "{said}"
    );
}

#[test]
fn ends_that_do_not_differ_are_not_bisected() {
    let repo = tempfile::tempdir().expect("tempdir");
    let dir = repo.path();
    let hashes = repository(dir, 6, |_| 30, &[], &[]);
    let scratch = tempfile::tempdir().expect("tempdir");
    // Without --out: a fresh folder in the temporary directory, named
    // at the start, nothing written into the checkout.
    let before = checkout_state(dir);
    let output = oomgate()
        .args(["bisect", "suite.toml", "--case", "train", "--good"])
        .args([&hashes[0], "--bad", &hashes[6]])
        .env("TMPDIR", scratch.path())
        .current_dir(dir)
        .output()
        .expect("oomgate bisect");
    let said = text(&output);
    assert_eq!(output.status.code(), Some(1), "{said}");
    assert!(said.contains("not reproducible here"), "{said}");
    let out = said
        .lines()
        .find_map(|l| {
            l.split_once("steps and logs in ")
                .map(|(_, p)| PathBuf::from(p.trim()))
        })
        .unwrap_or_else(|| panic!("no folder named: {said}"));
    assert!(out.starts_with(scratch.path()), "{}", out.display());
    assert_eq!(checkout_state(dir), before);
    let json = read_json(&out.join("bisect.json"));
    assert_eq!(json["ending"], "not-reproducible");
    assert_eq!(json["runs"], 2, "only the ends ran: {json}");
    assert!(json["first_bad"].is_null());
}

#[test]
fn bad_input_is_exit_2_and_touches_nothing() {
    let repo = tempfile::tempdir().expect("tempdir");
    let dir = repo.path();
    let hashes = repository(dir, 2, |i| 20 + 60 * i as u32, &[], &[]);
    let scratch = tempfile::tempdir().expect("tempdir");
    for (args, expected) in [
        (
            vec!["--good", "no-such-rev", "--bad", "main"],
            "names no commit",
        ),
        (
            vec!["--good", hashes[2].as_str(), "--bad", hashes[0].as_str()],
            "not an ancestor",
        ),
        (vec!["--good", hashes[0].as_str()], "--good and --bad"),
    ] {
        let out = scratch.path().join("never");
        let output = bisect(dir, &out, &args);
        let said = text(&output);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {said}");
        assert!(said.contains(expected), "{args:?}: {said}");
    }
    // Worktrees never go into the checkout.
    let inside = dir.join("bisect-out");
    let output = bisect(dir, &inside, &["--good", &hashes[0], "--bad", &hashes[2]]);
    assert_eq!(output.status.code(), Some(2), "{}", text(&output));
    assert!(
        text(&output).contains("inside the repository"),
        "{}",
        text(&output)
    );
    assert!(!inside.exists());
    // A good end on a side branch merged later is not on the bad end's
    // first-parent line: the range would not be one.
    git(dir, &["checkout", "-q", "-b", "side", &hashes[0]]);
    std::fs::write(dir.join("side.txt"), "side").expect("side");
    git(dir, &["add", "-A"]);
    git(dir, &["commit", "-qm", "on the side"]);
    let side = git(dir, &["rev-parse", "HEAD"]);
    git(dir, &["checkout", "-q", "main"]);
    git(
        dir,
        &["merge", "-q", "--no-ff", "-m", "merge the side", "side"],
    );
    let output = bisect(
        dir,
        &scratch.path().join("side"),
        &["--good", &side, "--bad", "main"],
    );
    assert_eq!(output.status.code(), Some(2), "{}", text(&output));
    assert!(text(&output).contains("--all-parents"), "{}", text(&output));
    // An out dir holding someone's files is refused, and left as it is.
    let theirs = scratch.path().join("theirs");
    std::fs::create_dir_all(&theirs).expect("dir");
    std::fs::write(theirs.join("notes.txt"), "keep").expect("file");
    let output = bisect(dir, &theirs, &["--good", &hashes[0], "--bad", &hashes[2]]);
    assert_eq!(output.status.code(), Some(2), "{}", text(&output));
    assert_eq!(std::fs::read_dir(&theirs).expect("dir").count(), 1);
}

/// `bisect --check` in the checkout, as `git bisect run` calls it, with
/// its folder in `out` (one folder for every call, as a team's script
/// names one).
fn check(dir: &Path, out: &Path, extra: &[&str]) -> Output {
    check_command(dir, out, extra)
        .output()
        .expect("oomgate bisect --check")
}

fn check_command(dir: &Path, out: &Path, extra: &[&str]) -> Command {
    let mut command = oomgate();
    command
        .arg("bisect")
        .arg("suite.toml")
        .args(["--case", "train", "--check", "--out"])
        .arg(out)
        .args(extra)
        .current_dir(dir);
    command
}

#[test]
fn the_check_speaks_git_bisect_run_exit_codes() {
    let repo = tempfile::tempdir().expect("tempdir");
    let dir = repo.path();
    let hashes = repository(dir, 10, |i| if i >= 7 { 90 } else { 20 }, &[4], &[]);
    // The good end's lock, written outside the repository.
    let scratch = tempfile::tempdir().expect("tempdir");
    let lock = scratch.path().join("good.lock");
    git(dir, &["checkout", "-q", &hashes[0]]);
    let locked = oomgate()
        .args(["lock", "suite.toml", "--filter", "=train", "--output"])
        .arg(&lock)
        .arg("--out")
        .arg(scratch.path().join("lock-out"))
        .current_dir(dir)
        .output()
        .expect("lock");
    assert!(locked.status.success(), "{}", text(&locked));
    let against = [
        "--against",
        lock.to_str().expect("utf-8"),
        "--build",
        "test ! -e BROKEN",
    ];
    for (at, code) in [(2, 0), (8, 1), (4, 125)] {
        git(dir, &["checkout", "-q", &hashes[at]]);
        let output = check(dir, &scratch.path().join("check"), &against);
        assert_eq!(
            output.status.code(),
            Some(code),
            "commit {at}: {}",
            text(&output)
        );
    }
    // A command line that is wrong aborts git bisect (128), as does a
    // reference that is not a lock.
    let output = check(dir, &scratch.path().join("check"), &["--good", "HEAD"]);
    assert_eq!(output.status.code(), Some(128), "{}", text(&output));
    let output = check(dir, &scratch.path().join("check"), &["--no-such-flag"]);
    assert_eq!(output.status.code(), Some(128), "{}", text(&output));
    std::fs::write(scratch.path().join("garbage.lock"), "not toml [").expect("garbage");
    let garbage = scratch.path().join("garbage.lock");
    let output = check(
        dir,
        &scratch.path().join("check"),
        &["--against", garbage.to_str().expect("utf-8")],
    );
    assert_eq!(output.status.code(), Some(128), "{}", text(&output));
    // A case the good end's lock does not hold is a mistyped name, not a
    // commit that lacks it (which would skip every commit): 128.
    let output = oomgate()
        .args([
            "bisect",
            "suite.toml",
            "--case",
            "trian",
            "--check",
            "--out",
        ])
        .arg(scratch.path().join("check"))
        .args(against)
        .current_dir(dir)
        .output()
        .expect("oomgate bisect --check");
    assert_eq!(output.status.code(), Some(128), "{}", text(&output));
    assert!(
        text(&output).contains("no case `trian`"),
        "{}",
        text(&output)
    );
    // GPU memory required from a driver that does not load: oomgate
    // cannot run the case here at all, which says nothing of the commit
    // (never 1, and not a skip of every commit): 128.
    git(dir, &["checkout", "-q", &hashes[2]]);
    let output = check_command(
        dir,
        &scratch.path().join("check"),
        &[&against[..], &["--gpu", "required"]].concat(),
    )
    .env(
        "LD_LIBRARY_PATH",
        common::fake_nvml::library_dir(common::fake_nvml::Variant::Complete),
    )
    .env_remove("OOMGATE_FAKE_NVML_CONFIG")
    .output()
    .expect("oomgate bisect --check");
    assert_eq!(output.status.code(), Some(128), "{}", text(&output));
    // git drives it to the same answer.
    git(dir, &["checkout", "-q", "main"]);
    git(dir, &["bisect", "start", &hashes[10], &hashes[0]]);
    let exe = env!("CARGO_BIN_EXE_oomgate");
    let run = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args([
            "bisect",
            "run",
            exe,
            "bisect",
            "suite.toml",
            "--case",
            "train",
            "--check",
        ])
        .args(against)
        .env("NO_COLOR", "1")
        .env("OOMGATE_LIBCUDA", "none")
        .output()
        .expect("git bisect run");
    let said = text(&run);
    assert!(
        said.contains(&format!("{} is the first bad commit", hashes[7])),
        "{said}"
    );
    git(dir, &["bisect", "reset"]);
}

#[test]
fn an_interrupted_bisect_leaves_nothing_and_resumes() {
    let repo = tempfile::tempdir().expect("tempdir");
    let dir = repo.path();
    let hashes = repository(dir, 8, |i| if i >= 5 { 90 } else { 20 }, &[], &[]);
    // Each candidate's build takes a while: the interrupt lands in one.
    let scratch = tempfile::tempdir().expect("tempdir");
    let out = scratch.path().join("bisect");
    let child = bisect_command(
        dir,
        &out,
        &[
            "--good",
            &hashes[0],
            "--bad",
            &hashes[8],
            "--build",
            "sleep 0.5",
        ],
    )
    .stdout(std::process::Stdio::piped())
    .stderr(std::process::Stdio::piped())
    .spawn()
    .expect("bisect");
    // Wait for the first step after the ends.
    let started = std::time::Instant::now();
    while !out.join("steps").join(&hashes[4][..12]).exists() {
        assert!(started.elapsed().as_secs() < 120, "no step started");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    // SAFETY: a signal to the child this test started.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let output = child.wait_with_output().expect("wait");
    assert_eq!(output.status.code(), Some(130), "{}", text(&output));
    assert!(!out.join("worktrees").exists(), "no worktree is left");
    assert_eq!(git(dir, &["worktree", "list"]).lines().count(), 1);
    let json = read_json(&out.join("bisect.json"));
    assert_eq!(json["ending"], "interrupted");
    assert!(out.join("bisect.log").exists());
    // --resume takes the ends from the first bisect and finishes.
    let output = bisect(
        dir,
        &out,
        &[
            "--good",
            &hashes[0],
            "--bad",
            &hashes[8],
            "--build",
            "sleep 0.5",
            "--resume",
        ],
    );
    let said = text(&output);
    assert_eq!(output.status.code(), Some(0), "{said}");
    let json = read_json(&out.join("bisect.json"));
    assert_eq!(json["first_bad"], hashes[5].as_str(), "{json}");
    let reused = json["steps"]
        .as_array()
        .expect("steps")
        .iter()
        .filter(|s| s["taken_from"] == "resumed")
        .count();
    assert_eq!(reused, 2, "both ends reused: {said}");
    // Resumed under other conditions (each run twice), nothing is taken.
    let output = bisect(
        dir,
        &out,
        &[
            "--good",
            &hashes[0],
            "--bad",
            &hashes[8],
            "--build",
            "sleep 0.5",
            "--resume",
            "--repeat",
            "2",
        ],
    );
    let said = text(&output);
    assert_eq!(output.status.code(), Some(0), "{said}");
    let json = read_json(&out.join("bisect.json"));
    assert!(
        json["steps"]
            .as_array()
            .expect("steps")
            .iter()
            .all(|s| s["taken_from"].is_null()),
        "{said}"
    );
}

#[test]
fn a_killed_bisect_is_pruned_by_the_next() {
    let repo = tempfile::tempdir().expect("tempdir");
    let dir = repo.path();
    let hashes = repository(dir, 4, |i| if i >= 2 { 90 } else { 20 }, &[], &[]);
    let scratch = tempfile::tempdir().expect("tempdir");
    let out = scratch.path().join("killed");
    let child = bisect_command(
        dir,
        &out,
        &[
            "--good", &hashes[0], "--bad", &hashes[4], "--build", "sleep 30",
        ],
    )
    .stdout(std::process::Stdio::null())
    .stderr(std::process::Stdio::null())
    .spawn()
    .expect("bisect");
    let started = std::time::Instant::now();
    // `git worktree list` fails while `git worktree add` is half way (its
    // `locked` file comes and goes): such a look counts as "not yet".
    while try_git(dir, &["worktree", "list"]).map_or(0, |l| l.lines().count()) < 2 {
        assert!(started.elapsed().as_secs() < 60, "no worktree made");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    // SAFETY: a signal to the child this test started.
    unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
    let _ = child.wait_with_output();
    assert_eq!(
        git(dir, &["worktree", "list"]).lines().count(),
        2,
        "left behind"
    );
    let output = bisect(
        dir,
        &scratch.path().join("next"),
        &["--good", &hashes[0], "--bad", &hashes[4]],
    );
    let said = text(&output);
    assert_eq!(output.status.code(), Some(0), "{said}");
    assert!(said.contains("left by a bisect that was killed"), "{said}");
    assert_eq!(git(dir, &["worktree", "list"]).lines().count(), 1, "{said}");
    assert!(!out.join("worktrees").exists());
}

/// Source of a tiny package whose `run()` holds `mib` MiB, touched.
fn holding(mib: &str) -> String {
    format!(
        "def run():\n    mib = {mib}\n    buf = bytearray(mib * 1024 * 1024)\n    for i in range(0, len(buf), 4096):\n        buf[i] = 1\n"
    )
}

/// Write a wheel into `folder` (fixtures/bisect/make_wheel.py).
fn wheel(folder: &Path, name: &str, version: &str, source: &str, requires: &[&str]) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/bisect/make_wheel.py");
    let status = Command::new("python3")
        .arg(script)
        .arg(folder)
        .args([name, version, source])
        .args(requires)
        .status()
        .expect("make_wheel.py");
    assert!(status.success());
}

/// `--package tinypkg` from `good` to `bad`, from the `wheels` folder only.
fn tinypkg_versions<'a>(good: &'a str, bad: &'a str, wheels: &'a str) -> [&'a str; 9] {
    [
        "--package",
        "tinypkg",
        "--good",
        good,
        "--bad",
        bad,
        "--find-links",
        wheels,
        "--no-index",
    ]
}

/// A virtual environment at `dir/base` with these wheels installed from
/// `wheels` only.
fn base_environment(dir: &Path, wheels: &Path, install: &[&str]) -> PathBuf {
    let base = dir.join("base");
    let status = Command::new("python3")
        .args(["-m", "venv"])
        .arg(&base)
        .status()
        .expect("venv");
    assert!(status.success());
    pip_install(&base, wheels, install);
    base
}

fn pip_install(base: &Path, wheels: &Path, install: &[&str]) {
    let output = Command::new(base.join("bin/python"))
        .args([
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "--no-index",
            "--find-links",
        ])
        .arg(wheels)
        .args(install)
        .output()
        .expect("pip install");
    assert!(output.status.success(), "{}", text(&output));
}

fn package_suite(dir: &Path, packages: &[&str], command: &str) {
    let packages: Vec<String> = packages.iter().map(|p| format!("\"{p}\"")).collect();
    std::fs::write(
        dir.join("suite.toml"),
        format!(
            "[suite]\nname = \"pkgs\"\n[environment]\npython = \"base/bin/python\"\npackages = [{}]\n[[case]]\nname = \"train\"\ncommand = [\"python3\", \"-c\", \"{command}\"]\ntimeout = \"60s\"\n",
            packages.join(", ")
        ),
    )
    .expect("suite");
}

#[test]
fn one_packages_versions_from_a_folder_of_wheels() {
    let project = tempfile::tempdir().expect("tempdir");
    let dir = project.path();
    let wheels = dir.join("wheels");
    std::fs::create_dir_all(&wheels).expect("wheels");
    // 1.0 .. 1.9: from 1.6 on, 90 MiB instead of 20; 1.4 needs a package
    // that exists nowhere, so it cannot be installed; from 1.7 on, it
    // requires tinydep 2.0 exactly, where the environment pins 1.0 (as
    // torch 2.10 requires another triton than 2.9).
    wheel(&wheels, "tinydep", "1.0", "", &[]);
    wheel(&wheels, "tinydep", "2.0", "", &[]);
    for minor in 0..10 {
        let version = format!("1.{minor}");
        let source = holding(if minor >= 6 { "90" } else { "20" });
        let requires: &[&str] = match minor {
            4 => &["no-such-dependency-anywhere"],
            7.. => &["tinydep==2.0"],
            _ => &[],
        };
        wheel(&wheels, "tinypkg", &version, &source, requires);
    }
    base_environment(dir, &wheels, &["tinypkg==1.0", "tinydep==1.0"]);
    package_suite(
        dir,
        &["tinypkg", "tinydep"],
        "import tinypkg; tinypkg.run()",
    );
    let out = dir.join("bisect");
    let wheels_arg = wheels.display().to_string();
    let output = bisect_command(dir, &out, &tinypkg_versions("1.0", "1.9", &wheels_arg))
        .output()
        .expect("oomgate bisect --package");
    let said = text(&output);
    assert_eq!(output.status.code(), Some(0), "{said}");
    let json = read_json(&out.join("bisect.json"));
    assert_eq!(json["first_bad"], "1.6", "{said}");
    assert_eq!(json["last_good"], "1.5");
    assert_eq!(json["findings"][0]["restore"], "pip install 'tinypkg==1.5'");
    // The ends, then 1.4 (does not install: no run), 1.5, 1.7, 1.6.
    assert_eq!(json["runs"], 5, "{said}");
    let skipped = json["skipped"].as_array().expect("skipped");
    assert_eq!(skipped.len(), 1, "{json}");
    assert_eq!(skipped[0]["candidate"], "1.4");
    assert!(
        skipped[0]["reason"]
            .as_str()
            .unwrap_or("")
            .contains("does not install"),
        "{json}"
    );
    // Each run recorded the version it ran with: the environment's drift.
    // 1.9 and 1.7 moved tinydep with them; 1.6, run after 1.7, has it
    // back at its pin.
    let drift = json["findings"][0]["drift"].to_string();
    assert!(drift.contains("tinypkg 1.5 → 1.6"), "{drift}");
    assert!(!drift.contains("tinydep"), "{drift}");
    let moved = std::fs::read_to_string(out.join("steps/tinypkg-1.7/install.log"))
        .expect("1.7's install log");
    assert!(moved.contains("(tinydep) are let go of theirs"), "{moved}");
    // The environment is gone; the suite's own is as it was.
    assert!(!out.join("env").exists());
    let frozen = Command::new(dir.join("base/bin/python"))
        .args(["-m", "pip", "freeze"])
        .output()
        .expect("freeze");
    assert_eq!(
        String::from_utf8_lossy(&frozen.stdout).trim(),
        "tinydep==1.0\ntinypkg==1.0"
    );
}

#[test]
fn a_pair_of_packages_that_only_grow_together() {
    let project = tempfile::tempdir().expect("tempdir");
    let dir = project.path();
    let wheels = dir.join("wheels");
    std::fs::create_dir_all(&wheels).expect("wheels");
    // pkga 2.0 holds 90 MiB only with pkgb 2.0's fused kernel; pkgc's
    // bump changes nothing.
    wheel(&wheels, "pkga", "1.0", &holding("20"), &[]);
    wheel(
        &wheels,
        "pkga",
        "2.0",
        &holding("90 if getattr(__import__('pkgb'), 'FUSED', False) else 20"),
        &[],
    );
    wheel(&wheels, "pkgb", "1.0", "", &[]);
    wheel(&wheels, "pkgb", "2.0", "FUSED = True\n", &[]);
    wheel(&wheels, "pkgc", "1.0", "", &[]);
    wheel(&wheels, "pkgc", "2.0", "", &[]);
    let base = base_environment(dir, &wheels, &["pkga==1.0", "pkgb==1.0", "pkgc==1.0"]);
    package_suite(dir, &["pkga", "pkgb", "pkgc"], "import pkga; pkga.run()");
    // The good run, then the same suite after the bump: both record
    // their packages.
    for (run, versions) in [("good", "1.0"), ("bad", "2.0")] {
        let pins: Vec<String> = ["pkga", "pkgb", "pkgc"]
            .iter()
            .map(|p| format!("{p}=={versions}"))
            .collect();
        let pins: Vec<&str> = pins.iter().map(String::as_str).collect();
        pip_install(&base, &wheels, &pins);
        // As the team runs it: its environment first on PATH.
        let path = std::env::join_paths(std::iter::once(base.join("bin")).chain(
            std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default()),
        ))
        .expect("PATH");
        let output = oomgate()
            .arg("run")
            .arg(dir.join("suite.toml"))
            .arg("--out")
            .arg(dir.join(run))
            .env("PATH", path)
            .current_dir(dir)
            .output()
            .expect("run");
        assert!(output.status.success(), "{}", text(&output));
    }
    let out = dir.join("bisect");
    let (good, bad) = (dir.join("good/results.json"), dir.join("bad/results.json"));
    let paths = [good, bad, wheels].map(|p| p.display().to_string());
    let output = bisect_command(
        dir,
        &out,
        &[
            "--good-run",
            &paths[0],
            "--bad-run",
            &paths[1],
            "--find-links",
            &paths[2],
            "--no-index",
        ],
    )
    .output()
    .expect("oomgate bisect --good-run");
    let said = text(&output);
    assert_eq!(output.status.code(), Some(0), "{said}");
    let json = read_json(&out.join("bisect.json"));
    assert_eq!(json["first_bad"], "pkga==2.0 pkgb==2.0", "{said}");
    assert_eq!(
        json["findings"][0]["restore"],
        "pip install 'pkga==1.0' 'pkgb==1.0'"
    );
    // The ends, then ddmin over (a, b, c), each subset once: {a} and
    // {b, c} (halves), {b} and {c} (thirds), then the complements {a, c}
    // and {a, b}, which grows; its halves {a} and {b} are known.
    assert_eq!(json["runs"], 8, "{said}");
}

#[test]
fn a_terminated_package_bisect_leaves_no_environment_and_no_process() {
    let project = tempfile::tempdir().expect("tempdir");
    let dir = project.path();
    let wheels = dir.join("wheels");
    std::fs::create_dir_all(&wheels).expect("wheels");
    for minor in 0..4 {
        wheel(
            &wheels,
            "tinypkg",
            &format!("1.{minor}"),
            &holding("20"),
            &[],
        );
    }
    base_environment(dir, &wheels, &["tinypkg==1.0"]);
    // Each run holds on long enough for the signal to land in it.
    package_suite(
        dir,
        &["tinypkg"],
        "import tinypkg, time; tinypkg.run(); time.sleep(120)",
    );
    let out = dir.join("bisect");
    let wheels_arg = wheels.display().to_string();
    let child = bisect_command(dir, &out, &tinypkg_versions("1.0", "1.3", &wheels_arg))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("bisect");
    // The good end's case running in the bisect's environment.
    let started = std::time::Instant::now();
    let out_text = out.display().to_string();
    while !processes_naming("time.sleep(120)") {
        assert!(started.elapsed().as_secs() < 120, "no run started");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    std::thread::sleep(std::time::Duration::from_millis(300));
    // SAFETY: a signal to the child this test started.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let output = child.wait_with_output().expect("wait");
    assert_eq!(output.status.code(), Some(130), "{}", text(&output));
    assert!(!out.join("env").exists(), "the environment is removed");
    assert_eq!(read_json(&out.join("bisect.json"))["ending"], "interrupted");
    assert!(out.join("bisect.log").exists());
    assert!(
        !processes_naming(&out_text),
        "a process of the bisect is left"
    );
}

/// Whether a live process's command line or environment holds `text`
/// (the bisect's folder: its runs, its environment's interpreter).
fn processes_naming(text: &str) -> bool {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return false;
    };
    entries.flatten().any(|entry| {
        let proc = entry.path();
        let zombie = std::fs::read_to_string(proc.join("stat")).is_ok_and(|stat| {
            stat.rsplit_once(')')
                .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z'))
        });
        let holds = |file: &str| {
            let bytes = std::fs::read(proc.join(file)).unwrap_or_default();
            String::from_utf8_lossy(&bytes).contains(text)
        };
        !zombie && (holds("cmdline") || holds("environ"))
    })
}

#[test]
fn a_merge_is_one_step_on_the_first_parent_line() {
    let repo = tempfile::tempdir().expect("tempdir");
    let dir = repo.path();
    // main: start, 1..=4 at 20 MiB; a side branch from 2 grows to 90 MiB
    // and is merged; one more commit after the merge.
    let hashes = repository(dir, 4, |_| 20, &[], &[]);
    git(dir, &["checkout", "-q", "-b", "side", &hashes[2]]);
    std::fs::write(dir.join("size.txt"), "90").expect("size");
    git(dir, &["commit", "-q", "-am", "side grows"]);
    let side = vec![git(dir, &["rev-parse", "HEAD"])];
    std::fs::write(dir.join("notes.txt"), "x").expect("notes");
    git(dir, &["add", "notes.txt"]);
    git(dir, &["commit", "-q", "-m", "side 2"]);
    let side = [side, vec![git(dir, &["rev-parse", "HEAD"])]].concat();
    git(dir, &["checkout", "-q", "main"]);
    git(dir, &["merge", "-q", "--no-ff", "-m", "merge side", "side"]);
    let merge = git(dir, &["rev-parse", "HEAD"]);
    git(
        dir,
        &["commit", "-q", "--allow-empty", "-m", "after the merge"],
    );
    let scratch = tempfile::tempdir().expect("tempdir");
    let out = scratch.path().join("first-parent");
    let output = bisect(dir, &out, &["--good", &hashes[0], "--bad", "main"]);
    let said = text(&output);
    assert_eq!(output.status.code(), Some(0), "{said}");
    let json = read_json(&out.join("bisect.json"));
    // The merge is the step; the side branch's commits are not candidates.
    assert_eq!(json["first_bad"], merge.as_str(), "{said}");
    assert_eq!(json["last_good"], hashes[4].as_str(), "{said}");
    assert!(said.contains("(5 candidate(s) between the ends"), "{said}");
    let ran: Vec<&str> = json["steps"]
        .as_array()
        .expect("steps")
        .iter()
        .filter_map(|s| s["candidate"]["id"].as_str())
        .collect();
    assert!(ran.contains(&merge.as_str()), "{ran:?}");
    assert!(side.iter().all(|s| !ran.contains(&s.as_str())), "{ran:?}");
    // --all-parents takes the side branch's commits as candidates too.
    let out = scratch.path().join("all-parents");
    let output = bisect(
        dir,
        &out,
        &["--good", &hashes[0], "--bad", "main", "--all-parents"],
    );
    let said = text(&output);
    assert_eq!(output.status.code(), Some(0), "{said}");
    assert!(said.contains("(7 candidate(s) between the ends"), "{said}");
}

//! Helpers for integration tests: a temporary project holding a suite, the
//! real `oomgate` binary run against it, and its reports read back.

#![allow(dead_code)] // each test binary uses its own subset

pub mod baselines;
pub mod cgroups;
pub mod fake_nvml;
pub mod pytest;
pub mod running;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

pub const MIB: u64 = 1024 * 1024;

/// The repository's fixture workloads.
pub fn workloads() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/workloads")
}

pub fn workload(name: &str) -> String {
    workloads().join(name).display().to_string()
}

pub fn oomgate() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_oomgate"));
    // Plain output, whatever the terminal of the person running the tests.
    command
        .env("NO_COLOR", "1")
        .env_remove("GITHUB_ACTIONS")
        .env_remove("OOMGATE_HISTORY");
    // A real CUDA driver on the machine running the tests knows none of
    // the fake NVML's devices: it is asked only where a test installs the
    // fake one (`Project::with_fake_cuda`).
    command.env("OOMGATE_LIBCUDA", "none");
    command
}

/// `oomgate check` of a suite in the repository (`examples/...`), as a
/// user runs it from the checkout: asserts it is accepted, returns what
/// it printed.
pub fn check_in_repository(suite: &str) -> String {
    let output = oomgate()
        .args(["check", suite])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("oomgate check");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

/// A temporary folder with a suite file in it.
pub struct Project {
    pub dir: tempfile::TempDir,
    /// Extra environment for every oomgate this project runs.
    pub env: Vec<(String, String)>,
}

impl Project {
    pub fn new(suite: &str) -> Self {
        let dir = tempfile::tempdir().expect("create temp dir");
        std::fs::write(dir.path().join("suite.toml"), suite).expect("write suite");
        Project {
            dir,
            env: Vec::new(),
        }
    }

    /// An oomgate command with this project's environment.
    pub fn oomgate(&self) -> Command {
        let mut command = oomgate();
        command.envs(self.env.iter().map(|(k, v)| (k, v)));
        command
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    pub fn suite(&self) -> PathBuf {
        self.path().join("suite.toml")
    }

    pub fn out(&self) -> PathBuf {
        self.path().join("out")
    }

    /// `oomgate run suite.toml --out out`, not started yet.
    pub fn run_command(&self) -> Command {
        let mut command = self.oomgate();
        command
            .arg("run")
            .arg(self.suite())
            .arg("--out")
            .arg(self.out());
        command
    }

    /// `oomgate run suite.toml --out out` plus extra arguments.
    pub fn run(&self, extra: &[&str]) -> Run {
        let mut command = self.run_command();
        command.args(extra);
        self.finish(command)
    }

    /// Run a prepared `oomgate` command to its end.
    pub fn finish(&self, mut command: Command) -> Run {
        Run::from(command.output().expect("run oomgate"), self.out())
    }

    pub fn results(&self) -> serde_json::Value {
        read_json(&self.out().join("results.json"))
    }

    /// `oomgate lock suite.toml --out out` plus extra arguments.
    pub fn lock(&self, extra: &[&str]) -> Run {
        let output = self
            .oomgate()
            .arg("lock")
            .arg(self.suite())
            .arg("--out")
            .arg(self.out())
            .args(extra)
            .output();
        Run::from(output.expect("run oomgate lock"), self.out())
    }

    /// `lock --from` this project's last results.
    pub fn lock_from_results(&self) -> Run {
        let results = self.out().join("results.json");
        self.lock(&["--from", &results.display().to_string()])
    }

    pub fn lock_path(&self) -> PathBuf {
        self.path().join("suite.lock")
    }

    /// `oomgate diff BEFORE AFTER` plus extra arguments.
    pub fn diff(&self, before: &Path, after: &Path, extra: &[&Path]) -> Run {
        let output = self
            .oomgate()
            .arg("diff")
            .arg(before)
            .arg(after)
            .args(extra)
            .output();
        Run::from(output.expect("run oomgate diff"), self.out())
    }

    /// `oomgate diff` of this project's lock and its last results.
    pub fn diff_lock_and_results(&self) -> Run {
        self.diff(&self.lock_path(), &self.out().join("results.json"), &[])
    }
}

pub struct Run {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    pub out: PathBuf,
}

impl Run {
    pub fn from(output: Output, out: PathBuf) -> Self {
        Run {
            code: output.status.code(),
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
            out,
        }
    }

    pub fn results(&self) -> serde_json::Value {
        read_json(&self.out.join("results.json"))
    }

    /// The case with this id in results.json.
    pub fn case(&self, id: &str) -> serde_json::Value {
        let results = self.results();
        results["cases"]
            .as_array()
            .and_then(|cases| cases.iter().find(|c| c["id"] == id).cloned())
            .unwrap_or_else(|| panic!("case {id} not in results:\n{results:#}"))
    }

    /// The message of the case with this id (empty when it passed).
    pub fn message(&self, id: &str) -> String {
        self.case(id)["message"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    }

    pub fn assert_code(&self, expected: i32) {
        assert_eq!(
            self.code,
            Some(expected),
            "exit code\n--- stdout\n{}\n--- stderr\n{}",
            self.stdout,
            self.stderr
        );
    }
}

/// The check of `case` (a case of results.json) with this name
/// (`budget.host`, `baseline.gpu`, `limit.metric.loss`): what a verdict is
/// asserted on, its `passed`, `outcome`, `figure_bytes` and
/// `limit_bytes`, rather than its words. Fails the test when the case has
/// no such check.
pub fn check(case: &serde_json::Value, name: &str) -> serde_json::Value {
    case["checks"]
        .as_array()
        .and_then(|checks| checks.iter().find(|c| c["name"] == name).cloned())
        .unwrap_or_else(|| panic!("no check {name} in the case:\n{case:#}"))
}

/// A failed check of `case` breached its bound, as results.json records
/// it: not passed, outcome `breached`, and its figure above its limit.
pub fn assert_breached(case: &serde_json::Value, name: &str) -> serde_json::Value {
    let check = check(case, name);
    assert_eq!(check["passed"], false, "{check:#}");
    assert_eq!(check["outcome"], "breached", "{check:#}");
    if let (Some(figure), Some(limit)) = (
        check["figure_bytes"].as_u64(),
        check["limit_bytes"].as_u64(),
    ) {
        assert!(figure > limit, "{check:#}");
    }
    check
}

pub fn read_json(path: &Path) -> serde_json::Value {
    let text =
        std::fs::read_to_string(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("parse {}: {e}\n{text}", path.display()))
}

/// A suite with one case that runs a fixture workload with `args`, already
/// written as TOML strings (`"\"--mib\", \"64\""`); sampled every 20 ms.
pub fn single_case_suite(id: &str, workload_name: &str, args: &str) -> String {
    format!(
        "[suite]\nname = \"t\"\nsample_interval = \"20ms\"\n\n[[case]]\nname = {}\ncommand = [\"python3\", {}, {args}]\n",
        toml_str(id),
        toml_str(&workload(workload_name))
    )
}

/// TOML string literal for a path or argument.
pub fn toml_str(text: &str) -> String {
    format!("{text:?}")
}

/// Whether a pid is a running (non-zombie) process.
pub fn alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| !rest.trim_start().starts_with('Z')),
        Err(_) => false,
    }
}

/// Wait until `path` exists and holds a pid.
pub fn wait_for_pid(path: &Path, timeout: Duration) -> i32 {
    let deadline = Instant::now() + timeout;
    loop {
        if let Ok(text) = std::fs::read_to_string(path) {
            if let Ok(pid) = text.trim().parse() {
                return pid;
            }
        }
        assert!(
            Instant::now() < deadline,
            "{} never appeared",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Read a pid file that must exist.
pub fn read_pid(path: &Path) -> i32 {
    wait_for_pid(path, Duration::from_secs(0))
}

/// A tmpfs of `size` mounted on `dir` for the test's life, or why none
/// can be (not root, no mount permission in a container).
pub struct SmallDisk {
    pub dir: PathBuf,
}

impl SmallDisk {
    pub fn mount(dir: &Path, size: &str) -> Result<Self, String> {
        use std::ffi::CString;
        use std::os::unix::ffi::OsStrExt;
        std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
        let target = CString::new(dir.as_os_str().as_bytes()).map_err(|e| e.to_string())?;
        let options = CString::new(format!("size={size}")).map_err(|e| e.to_string())?;
        // SAFETY: every argument is a NUL-terminated string that outlives
        // the call.
        let rc = unsafe {
            libc::mount(
                c"tmpfs".as_ptr(),
                target.as_ptr(),
                c"tmpfs".as_ptr(),
                0,
                options.as_ptr().cast(),
            )
        };
        if rc != 0 {
            return Err(std::io::Error::last_os_error().to_string());
        }
        Ok(SmallDisk {
            dir: dir.to_path_buf(),
        })
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        use std::os::unix::ffi::OsStrExt;
        if let Ok(target) = std::ffi::CString::new(self.dir.as_os_str().as_bytes()) {
            // SAFETY: a NUL-terminated path; a lazy unmount never blocks.
            unsafe {
                libc::umount2(target.as_ptr(), libc::MNT_DETACH);
            }
        }
    }
}

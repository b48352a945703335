//! Tests that act while a case runs: `oomgate run` in the background
//! ([`Running`]), and the files a test and `gpu_alloc.py` synchronise on
//! ([`Handshake`]).

use super::{Project, Run, toml_str};

/// `oomgate run` in the background, for tests that act while a case runs.
pub struct Running {
    child: Option<std::process::Child>,
    out: std::path::PathBuf,
}

impl Running {
    pub fn start(project: &Project) -> Self {
        Self::start_with(project, &[])
    }

    /// `oomgate run` with extra arguments, in the background.
    pub fn start_with(project: &Project, extra: &[&str]) -> Self {
        let mut command = project.run_command();
        command.args(extra);
        Self::spawn(project, command)
    }

    /// A prepared `oomgate run` command (`project.run_command()` with
    /// more set on it), in the background.
    pub fn spawn(project: &Project, mut command: std::process::Command) -> Self {
        let child = command
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("start oomgate");
        Running {
            child: Some(child),
            out: project.out(),
        }
    }

    /// Wait for a file the workload or the fake driver creates. Fails at
    /// once if oomgate has exited; the minute's limit only guards against
    /// a hung test.
    pub fn wait_for(&mut self, path: &std::path::Path) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while !path.exists() {
            let exited = self
                .child
                .as_mut()
                .is_none_or(|child| !matches!(child.try_wait(), Ok(None)));
            // The file may have come just before oomgate exited.
            if exited && !path.exists() {
                let run = self.finish_now();
                panic!(
                    "oomgate exited before {} appeared\n--- stderr\n{}",
                    path.display(),
                    run.stderr
                );
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{} never appeared",
                path.display()
            );
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }

    /// oomgate's pid.
    pub fn pid(&self) -> i32 {
        let child = self.child.as_ref().expect("oomgate was started");
        i32::try_from(child.id()).expect("a pid")
    }

    /// Wait for oomgate to exit by itself, at most a generous minute (then
    /// it is killed and the test fails: it hung).
    pub fn finish_within_a_minute(mut self) -> Run {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        let child = self.child.as_mut().expect("oomgate was started");
        while matches!(child.try_wait(), Ok(None)) {
            if std::time::Instant::now() > deadline {
                child.kill().ok();
                let run = self.finish_now();
                panic!("oomgate hung\n--- stderr\n{}", run.stderr);
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        self.finish_now()
    }

    pub fn finish(mut self) -> Run {
        self.finish_now()
    }

    pub fn finish_now(&mut self) -> Run {
        let child = self.child.take().expect("oomgate was started");
        let output = child.wait_with_output().expect("wait for oomgate");
        Run::from(output, self.out.clone())
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            child.kill().ok();
            child.wait().ok();
        }
    }
}

/// The files a test and gpu_alloc.py synchronise on: the workload creates
/// `started`, waits for `go`, allocates, writes the pid NVML reports for it
/// to `allocated`, and waits for `release` before it holds and exits.
pub struct Handshake {
    pub started: std::path::PathBuf,
    pub go: std::path::PathBuf,
    pub allocated: std::path::PathBuf,
    pub release: std::path::PathBuf,
}

impl Handshake {
    pub fn new(project: &Project) -> Self {
        let file = |name: &str| project.path().join(name);
        Handshake {
            started: file("started"),
            go: file("go"),
            allocated: file("allocated"),
            release: file("release"),
        }
    }

    /// gpu_alloc.py's arguments, as TOML strings.
    pub fn args(&self) -> String {
        let path = |p: &std::path::Path| toml_str(&p.display().to_string());
        format!(
            "\"--started\", {}, \"--wait-for\", {}, \"--allocated\", {}, \"--release\", {}",
            path(&self.started),
            path(&self.go),
            path(&self.allocated),
            path(&self.release)
        )
    }

    pub fn go(&self) {
        std::fs::write(&self.go, "").expect("write go");
    }

    /// The pid NVML reports for the workload, once it holds its memory.
    pub fn allocated_pid(&self, running: &mut Running) -> u32 {
        running.wait_for(&self.allocated);
        let text = std::fs::read_to_string(&self.allocated).expect("read allocated");
        text.trim().parse().expect("a pid")
    }

    pub fn release(&self) {
        std::fs::write(&self.release, "").expect("write release");
    }
}

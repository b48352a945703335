//! The fake NVML driver (fixtures/fake-nvml), built on first use and put on
//! the library path as `libnvidia-ml.so.1`, the name oomgate loads.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use super::{MIB, Project, toml_str, workload};

pub const GIB: u64 = 1024 * 1024 * 1024;
pub const UUID_0: &str = "GPU-00000000-1111-2222-3333-444444444444";
pub const UUID_1: &str = "GPU-11111111-1111-2222-3333-444444444444";

/// Which build of the fake library.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Variant {
    /// An R550-or-later driver: the versioned detail list, memory v2.
    Complete,
    /// Lacks nvmlDeviceGetComputeRunningProcesses_v3, like an old driver.
    MissingProcessList,
    /// An early R535 driver: the `_v3` calls write 32-byte entries.
    R535Early,
    /// A driver older than R510: `_v3` lists of 24-byte entries, memory
    /// through version 1 only.
    OldDriver,
}

impl Variant {
    /// The fake's cargo feature, and the folder it is built into.
    fn feature_and_name(self) -> (Option<&'static str>, &'static str) {
        match self {
            Variant::Complete => (None, "fake-nvml"),
            Variant::MissingProcessList => (
                Some("missing-process-list"),
                "fake-nvml-missing-process-list",
            ),
            Variant::R535Early => (Some("r535-early"), "fake-nvml-r535-early"),
            Variant::OldDriver => (Some("old-driver"), "fake-nvml-old-driver"),
        }
    }
}

/// The folder holding `libnvidia-ml.so.1` for a variant, built if needed.
/// `cargo build` runs once per test process; it is a no-op when up to date
/// and cargo's lock serialises concurrent test processes.
pub fn library_dir(variant: Variant) -> PathBuf {
    static BUILT: [OnceLock<PathBuf>; 4] = [const { OnceLock::new() }; 4];
    BUILT[variant as usize]
        .get_or_init(|| build(variant))
        .clone()
}

fn build(variant: Variant) -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let (feature, name) = variant.feature_and_name();
    let target = root.join("target").join(name);
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    let mut command = Command::new(cargo);
    command
        .current_dir(root)
        .args(["build", "--quiet", "-p", "fake-nvml", "--target-dir"])
        .arg(&target);
    if let Some(feature) = feature {
        command.args(["--features", feature]);
    }
    let status = command.status().expect("run cargo build for the fake NVML");
    assert!(status.success(), "building fixtures/fake-nvml failed");
    let lib_dir = target.join("lib");
    std::fs::create_dir_all(&lib_dir).expect("create lib dir");
    // Copy under a unique name, then rename: another test process may be
    // loading the library at this moment.
    let staged = lib_dir.join(format!(".libnvidia-ml.so.1.{}", std::process::id()));
    std::fs::copy(target.join("debug/libfake_nvml.so"), &staged).expect("copy the fake library");
    std::fs::rename(&staged, lib_dir.join("libnvidia-ml.so.1")).expect("install the fake library");
    lib_dir
}

/// One fake device line: `total` and `used` in bytes.
pub fn device(uuid: &str, total: u64, used: u64, accounting: bool, name: &str) -> String {
    format!(
        "device {uuid} total={total} used={used} accounting={} persistence=1 name={name}\n",
        u8::from(accounting)
    )
}

/// Two 8 GiB devices, 256 MiB in use on each before anything runs.
pub fn two_devices(accounting: bool) -> String {
    format!(
        "driver 550.54.15\ncuda 12040\n{}{}",
        device(UUID_0, 8 * GIB, 256 << 20, accounting, "Fake H100 80GB"),
        device(UUID_1, 8 * GIB, 256 << 20, accounting, "Fake H100 80GB"),
    )
}

impl Project {
    /// Make every oomgate this project runs see the fake driver with this
    /// configuration (and the fixture workloads find its state folder). The
    /// driver records the processes it lists, see [`Self::listed`].
    pub fn with_fake_gpus(mut self, config: &str, variant: Variant) -> Self {
        let config_path = self.path().join("fake-nvml.conf");
        std::fs::write(&config_path, format!("{config}\nlisted listed\n"))
            .expect("write fake NVML config");
        self.env.push((
            "LD_LIBRARY_PATH".into(),
            library_dir(variant).display().to_string(),
        ));
        self.env.push((
            "OOMGATE_FAKE_NVML_CONFIG".into(),
            config_path.display().to_string(),
        ));
        self
    }

    /// Install the fake library as `libcuda.so.1` too, ahead of the NVML
    /// one on the library path: CUDA itself is asked which devices a case
    /// sees (after [`Self::with_fake_gpus`]).
    pub fn with_fake_cuda(mut self) -> Self {
        let folder = self.path().join("cuda-lib");
        std::fs::create_dir_all(&folder).expect("cuda lib dir");
        let nvml = library_dir(Variant::Complete);
        std::fs::copy(nvml.join("libnvidia-ml.so.1"), folder.join("libcuda.so.1"))
            .expect("install the fake libcuda");
        self.env.push((
            "LD_LIBRARY_PATH".into(),
            format!("{}:{}", folder.display(), nvml.display()),
        ));
        self.env.push((
            "OOMGATE_LIBCUDA".into(),
            folder.join("libcuda.so.1").display().to_string(),
        ));
        self
    }

    /// The fake driver's process folder.
    pub fn fake_gpu_state(&self) -> PathBuf {
        self.path().join("procs")
    }

    /// The file that appears once the fake driver has handed out a process
    /// list with `pid` in it: oomgate has seen the process.
    pub fn listed(&self, pid: u32) -> PathBuf {
        self.path().join("listed").join(pid.to_string())
    }
}

/// A suite with one case `c` running gpu_alloc.py with these arguments
/// (TOML strings), plus extra case lines.
pub fn gpu_suite(interval: &str, args: &str, case_lines: &str) -> String {
    format!(
        "[suite]\nname = \"g\"\nsample_interval = \"{interval}\"\n[[case]]\nname = \"c\"\ncommand = [\"python3\", {}, {args}]\nkill_grace = \"1s\"\n{case_lines}\n",
        toml_str(&workload("gpu_alloc.py"))
    )
}

pub fn gpu_project(suite: &str, config: &str) -> Project {
    Project::new(suite).with_fake_gpus(config, Variant::Complete)
}

pub fn mib(value: &serde_json::Value) -> Option<u64> {
    value.as_u64().map(|b| b / MIB)
}

/// A process on the GPU that the test (not oomgate) started.
pub struct Foreign {
    child: std::process::Child,
}

impl Foreign {
    pub fn start(project: &Project, uuid: &str, bytes: u64) -> Self {
        let child = std::process::Command::new("sleep")
            .arg("60")
            .spawn()
            .expect("spawn sleep");
        let state = project.fake_gpu_state();
        std::fs::create_dir_all(&state).expect("state dir");
        std::fs::write(
            state.join(child.id().to_string()),
            format!("owner={} device={uuid} used={bytes}\n", child.id()),
        )
        .expect("write foreign process");
        Foreign { child }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Foreign {
    fn drop(&mut self) {
        self.child.kill().ok();
        self.child.wait().ok();
    }
}

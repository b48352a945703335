//! A Python with pytest for the `[[pytest]]` tests: `OOMGATE_TEST_PYTHON`
//! when set (scripts/test sets it), else the environment
//! `scripts/pytest-venv.sh` makes in `target/pytest-venv` (pytest from
//! PyPI); and one with the real `jax` (`scripts/jax-venv.sh`), for the
//! probe's test against it. Each made once whatever the number of test
//! processes asking at once.

use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

pub fn python() -> PathBuf {
    static PYTHON: OnceLock<PathBuf> = OnceLock::new();
    PYTHON
        .get_or_init(|| {
            if let Some(python) = std::env::var_os("OOMGATE_TEST_PYTHON") {
                return PathBuf::from(python);
            }
            made_venv("pytest-venv.sh", "pytest-venv", "pytest")
        })
        .clone()
}

/// A Python with the real `jax` (CPU, from PyPI):
/// `scripts/jax-venv.sh` in `target/jax-venv`, made once.
pub fn jax_python() -> PathBuf {
    static PYTHON: OnceLock<PathBuf> = OnceLock::new();
    PYTHON
        .get_or_init(|| made_venv("jax-venv.sh", "jax-venv", "jax"))
        .clone()
}

/// The python of the environment `scripts/SCRIPT` makes in
/// `target/FOLDER`, made once whatever the number of test processes
/// asking at once: nextest runs each test in a process of its own; one
/// makes the environment, the others wait for it on a lock.
fn made_venv(script: &str, folder: &str, what: &str) -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    std::fs::create_dir_all(root.join("target")).expect("target/");
    let lock = std::fs::File::create(root.join(format!("target/{folder}.lock")))
        .expect("the environment's lock");
    // SAFETY: flock on a descriptor this function owns.
    assert_eq!(unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX) }, 0);
    let output = std::process::Command::new(root.join("scripts").join(script))
        .arg(root.join("target").join(folder))
        .output()
        .unwrap_or_else(|e| panic!("run scripts/{script}: {e}"));
    assert!(
        output.status.success(),
        "scripts/{script} failed ({what} is installed from PyPI):\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    PathBuf::from(String::from_utf8_lossy(&output.stdout).trim())
}

//! A Python with pytest for the `[[pytest]]` tests: `OOMGATE_TEST_PYTHON`
//! when set (scripts/test sets it), else the environment
//! `scripts/pytest-venv.sh` makes in `target/pytest-venv` (pytest from
//! PyPI), made once whatever the number of test processes asking at once.

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
            let root = Path::new(env!("CARGO_MANIFEST_DIR"));
            std::fs::create_dir_all(root.join("target")).expect("target/");
            // nextest runs each test in a process of its own: one makes the
            // environment, the others wait for it on this lock.
            let lock = std::fs::File::create(root.join("target/pytest-venv.lock"))
                .expect("target/pytest-venv.lock");
            // SAFETY: flock on a descriptor this function owns.
            assert_eq!(unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX) }, 0);
            let output = std::process::Command::new(root.join("scripts/pytest-venv.sh"))
                .arg(root.join("target/pytest-venv"))
                .output()
                .expect("run scripts/pytest-venv.sh");
            assert!(
                output.status.success(),
                "scripts/pytest-venv.sh failed (pytest is installed from PyPI):\n{}",
                String::from_utf8_lossy(&output.stderr)
            );
            PathBuf::from(String::from_utf8_lossy(&output.stdout).trim())
        })
        .clone()
}

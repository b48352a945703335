//! Writing report files: atomically, and to every path the user asked for.

use std::io::{self, Write};
use std::path::{Path, PathBuf};

use super::{Event, Reporter, json, junit};

/// Replace `path` with `contents` so that a reader (or a crash) never sees
/// a half-written file: write a temporary file beside it, then rename.
pub fn write_atomic(path: &Path, contents: &[u8]) -> io::Result<()> {
    let folder = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    std::fs::create_dir_all(folder)?;
    let mut file = tempfile::NamedTempFile::new_in(folder)?;
    // Temporary files are private (0600); a report or lock is for everyone
    // who may read the folder, as a file written in place would be.
    {
        use std::os::unix::fs::PermissionsExt;
        file.as_file()
            .set_permissions(std::fs::Permissions::from_mode(0o644))?;
    }
    file.write_all(contents)?;
    file.as_file().sync_data()?;
    file.persist(path).map_err(|e| e.error)?;
    Ok(())
}

/// results.json and junit.xml, rewritten after every case and at the end.
pub struct ResultFiles {
    pub json: Vec<PathBuf>,
    pub junit: Vec<PathBuf>,
}

impl ResultFiles {
    fn write(&self, results: &crate::results::RunResults) -> io::Result<()> {
        let json_text = json::render(results)?;
        for path in &self.json {
            write_atomic(path, json_text.as_bytes()).map_err(|e| with_path(e, path))?;
        }
        let junit_text = junit::render(results)?;
        for path in &self.junit {
            write_atomic(path, junit_text.as_bytes()).map_err(|e| with_path(e, path))?;
        }
        Ok(())
    }
}

fn with_path(error: io::Error, path: &Path) -> io::Error {
    io::Error::new(error.kind(), format!("{}: {error}", path.display()))
}

impl Reporter for ResultFiles {
    fn handle(&mut self, event: &Event<'_>) -> io::Result<()> {
        match event {
            Event::CaseFinished { results, .. } | Event::RunFinished { results } => {
                self.write(results)
            }
            _ => Ok(()),
        }
    }
}

//! The TOML in the README and docs/ is what users copy. Each block is
//! either a whole suite, which `oomgate check` (the real binary) accepts as
//! written, or a part of one (a case's keys, a lock file) whose first line
//! is a comment that says so.

mod common;

use std::path::{Path, PathBuf};

use common::*;

/// A ```toml block of a Markdown file, and the line it starts on.
struct Block {
    file: PathBuf,
    line: usize,
    text: String,
}

impl Block {
    fn at(&self) -> String {
        format!("{}:{}", self.file.display(), self.line)
    }

    /// A whole suite: its first table, after comments and blank lines, is
    /// `[suite]`.
    fn is_suite(&self) -> bool {
        self.text
            .lines()
            .map(str::trim)
            .find(|line| !line.is_empty() && !line.starts_with('#'))
            .is_some_and(|line| line == "[suite]")
    }
}

fn blocks() -> Vec<Block> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = vec![root.join("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .expect("docs/")
        .map(|entry| entry.expect("docs/ entry").path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "md"))
        .collect();
    docs.sort();
    files.extend(docs);

    let mut blocks = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).expect("a Markdown file");
        let mut open: Option<Block> = None;
        for (index, line) in text.lines().enumerate() {
            match open.as_mut() {
                None if line.trim_start() == "```toml" => {
                    open = Some(Block {
                        file: file.strip_prefix(root).unwrap_or(&file).to_path_buf(),
                        line: index + 2,
                        text: String::new(),
                    });
                }
                Some(_) if line.trim_start() == "```" => blocks.extend(open.take()),
                Some(block) => {
                    block.text.push_str(line);
                    block.text.push('\n');
                }
                None => {}
            }
        }
        assert!(
            open.is_none(),
            "{}: a ```toml block is not closed",
            file.display()
        );
    }
    blocks
}

#[test]
fn every_toml_block_is_a_whole_suite_or_says_what_it_is_part_of() {
    let blocks = blocks();
    assert!(
        blocks.len() >= 10,
        "only {} toml blocks found",
        blocks.len()
    );
    let unlabelled: Vec<String> = blocks
        .iter()
        .filter(|block| !block.is_suite() && !block.text.trim_start().starts_with('#'))
        .map(|block| {
            format!(
                "{}: {}",
                block.at(),
                block.text.lines().next().unwrap_or("")
            )
        })
        .collect();
    assert!(
        unlabelled.is_empty(),
        "these blocks are neither a whole suite (starting with [suite]) nor say in a first-line \
         comment what they are part of:\n{}",
        unlabelled.join("\n")
    );
}

#[test]
fn every_whole_suite_in_the_docs_passes_check_as_written() {
    let suites: Vec<Block> = blocks().into_iter().filter(Block::is_suite).collect();
    assert!(
        suites.len() >= 4,
        "only {} whole suites found",
        suites.len()
    );
    for block in suites {
        let dir = tempfile::tempdir().expect("tempdir");
        // Suites may say `workdir = ".."`: the file sits one folder down.
        let suite = dir.path().join("suites/doc.toml");
        std::fs::create_dir_all(suite.parent().expect("a folder")).expect("suites/");
        std::fs::write(&suite, &block.text).expect("write the suite");
        if block.text.contains("[[pytest]]") {
            give_pytest_what_it_collects(&block.text, suite.parent().expect("a folder"));
        }
        let output = oomgate()
            .arg("check")
            .arg(&suite)
            .output()
            .expect("oomgate check");
        assert!(
            output.status.success(),
            "{}: `oomgate check` refuses the suite as written:\n{}\n{}",
            block.at(),
            String::from_utf8_lossy(&output.stderr),
            block.text
        );
    }
}

/// A `[[pytest]]` suite is collected by `check`: its interpreter (a python
/// with pytest) and a test under each of its paths.
fn give_pytest_what_it_collects(text: &str, folder: &Path) {
    let table: toml::Table = text.parse().expect("the suite is TOML");
    let tables = table["pytest"].as_array().expect("[[pytest]] tables");
    for pytest in tables {
        if let Some(python) = pytest.get("python").and_then(|p| p.as_str()) {
            let link = folder.join(python);
            std::fs::create_dir_all(link.parent().expect("a folder")).expect("the venv's folder");
            // A script, not a link: a venv's python finds its packages
            // from the path it is started by.
            let script = format!(
                "#!/bin/sh\nexec '{}' \"$@\"\n",
                common::pytest::python().display()
            );
            std::fs::write(&link, script).expect("write the interpreter");
            std::fs::set_permissions(&link, std::os::unix::fs::PermissionsExt::from_mode(0o755))
                .expect("make it executable");
        }
        for path in pytest["paths"].as_array().expect("paths") {
            let tests = folder.join(path.as_str().expect("a path"));
            std::fs::create_dir_all(&tests).expect("the tests' folder");
            std::fs::write(
                tests.join("test_doc.py"),
                "import pytest\n\n@pytest.mark.gpu\ndef test_it():\n    pass\n",
            )
            .expect("a test file");
        }
    }
}

//! Collecting a suite's `[[pytest]]` tests: pytest is run with oomgate's
//! plugin (`--collect-only`), which writes every test's node id, place and
//! `oomgate` markers as JSON; each test becomes a case
//! (`suite::PytestSource::cases`).
//!
//! oomgate runs pytest with its own copy of the plugin (the wheel's
//! `oomgate_probe/pytest_plugin.py`, built into the binary), so a test
//! environment without the `oomgate` wheel collects and runs all the same.
//! The copy is written by each oomgate process into a fresh read-only
//! folder of its own, where no bytecode can be cached ([`install_plugin`]), put
//! first on each test's `PYTHONPATH`, and checked before each test starts
//! ([`check_plugin`]).

use std::io::{Read, Seek};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::suite::{Case, Collected, Granularity, PytestSession, PytestSource, Suite};

pub mod session;

/// How a suite's tests are collected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Collecting {
    /// `--collect-only`: to list or check them.
    Only,
    /// To run them: a table whose tests share a session is collected by
    /// that session, which then waits, parked, for the run
    /// (`run::RunSetup::pytest_sessions`), so pytest collects once.
    Session,
}

/// The plugin, as the wheel ships it.
pub const PLUGIN_SOURCE: &str = include_str!("../python/oomgate_probe/pytest_plugin.py");

/// The longest a collection may take: importing a large test suite (torch,
/// its extensions, model code) takes seconds to a minute.
pub const COLLECT_TIMEOUT: Duration = Duration::from_secs(10 * 60);

/// The most of pytest's own output kept for a failed collection's message.
const OUTPUT_TAIL_LINES: usize = 60;

/// Why a suite's tests could not be collected; each is the user's input
/// (exit 2), said with pytest's own words where it has some.
#[derive(Debug, thiserror::Error)]
pub enum CollectError {
    #[error("cannot set up oomgate's pytest plugin in {dir}: {reason}")]
    Plugin { dir: PathBuf, reason: String },
    #[error("{table}: cannot run `{command}` in {cwd}: {source}")]
    Start {
        table: String,
        command: String,
        cwd: PathBuf,
        source: std::io::Error,
    },
    #[error("{table}: pytest could not collect the tests (`{command}` {how}):\n{output}")]
    Failed {
        table: String,
        command: String,
        how: String,
        output: String,
    },
    #[error("{table}: pytest collected no test (`{command}`){output}")]
    Empty {
        table: String,
        command: String,
        output: String,
    },
    #[error("{table}: the collection's report cannot be read: {reason}")]
    Report { table: String, reason: String },
    #[error("{}", .0.join("\n"))]
    Tests(Vec<String>),
}

/// Collect every `[[pytest]]` of `suite` and add its tests to
/// `suite.cases`, after the `[[case]]` cases, in the tables' order. What
/// is worth saying (markers ignored) is returned, and the sessions that
/// collected (with [`Collecting::Session`]), parked for the run.
pub fn collect(
    suite: &mut Suite,
    how: Collecting,
) -> Result<(Vec<String>, session::Parked), CollectError> {
    let parked = session::Parked::default();
    if suite.pytest.is_empty() {
        return Ok((Vec::new(), parked));
    }
    let installed = std::sync::Arc::new(install_plugin()?);
    let plugin = installed.path().to_path_buf();
    suite.pytest_plugin = Some(installed);
    let mut warnings = Vec::new();
    let mut errors = Vec::new();
    let mut taken: std::collections::HashMap<String, String> = suite
        .cases
        .iter()
        .map(|c| (c.folder.clone(), c.id.clone()))
        .collect();
    let mut ids: std::collections::HashSet<String> =
        suite.cases.iter().map(|c| c.id.clone()).collect();
    for source in &suite.pytest {
        let shares = how == Collecting::Session
            && !source.isolate
            && source.granularity == Granularity::Test;
        let collected = match shares {
            true => {
                let (collected, session) = collect_in_session(source, &plugin)?;
                parked.park(session);
                collected
            }
            false => run_collection(source, &plugin)?,
        };
        let asked = collected.xdist_workers.as_deref().and_then(xdist_count);
        suite.xdist_workers = suite.xdist_workers.max(asked);
        let expanded = source.cases(&collected);
        warnings.extend(expanded.warnings);
        errors.extend(expanded.errors);
        for mut case in expanded.cases {
            if !ids.insert(case.id.clone()) {
                errors.push(format!(
                    "{}: `{}` is already a case of the suite: a `[[case]]` name or another [[pytest]] collects it too",
                    source.describe(),
                    case.id
                ));
                continue;
            }
            // Parameter ids differing only in characters a folder cannot
            // hold (`[a b]`, `[a_b]`) get the id's hash: a pytest id is not
            // the user's to rename.
            if taken.contains_key(&case.folder) {
                case.folder = format!(
                    "{}-{:08x}",
                    case.folder,
                    crate::suite::fnv1a(case.id.as_bytes()) as u32
                );
            }
            taken.insert(case.folder.clone(), case.id.clone());
            suite.cases.push(case);
        }
    }
    if !errors.is_empty() {
        return Err(CollectError::Tests(errors));
    }
    Ok((warnings, parked))
}

/// `PYTHONPATH` with the plugin's folder first: the case's own value (its
/// env), else the one oomgate was started with. Only the launched copy of
/// a case gets it: what a case records is its env as written, the same
/// from run to run (the folder is new each run).
fn put_plugin_on_path(case: &mut Case, plugin: &Path) {
    let value = plugin_path(case.env.get("PYTHONPATH").map(String::as_str), plugin);
    case.env.insert("PYTHONPATH".to_string(), value);
}

/// `PYTHONPATH` for a process of a pytest case: the plugin's folder, then
/// `own` (the case's value), else the one oomgate was started with.
pub fn plugin_path(own: Option<&str>, plugin: &Path) -> String {
    let inherited = own
        .map(str::to_string)
        .or_else(|| std::env::var("PYTHONPATH").ok())
        .filter(|p| !p.is_empty());
    let first = plugin.display().to_string();
    match inherited {
        Some(rest) => format!("{first}:{rest}"),
        None => first,
    }
}

/// The workers `-n` asks pytest-xdist for: a count, or `auto` and
/// `logical` as this machine's CPUs; `None` for none or what xdist would
/// refuse.
pub fn xdist_count(asked: &str) -> Option<usize> {
    match asked.trim() {
        "auto" | "logical" => std::thread::available_parallelism()
            .ok()
            .map(std::num::NonZeroUsize::get),
        count => count.parse::<usize>().ok().filter(|&n| n > 0),
    }
}

/// This process's copy of the plugin, once installed (one per oomgate
/// process, see [`install_plugin`]): what a pytest case's processes get
/// first on their `PYTHONPATH`.
static INSTALLED: std::sync::Mutex<Option<PathBuf>> = std::sync::Mutex::new(None);

/// The folder of this process's copy of the plugin, if installed.
pub fn installed_plugin() -> Option<PathBuf> {
    INSTALLED.lock().ok()?.clone()
}

/// A pytest case as launched: its `PYTHONPATH` with the plugin first.
pub fn launched(case: &Case) -> Case {
    let mut launched = case.clone();
    if let Some(plugin) = installed_plugin() {
        put_plugin_on_path(&mut launched, &plugin);
    }
    launched
}

/// Start the table's shared session, which collects its tests: they, as
/// the plugin wrote them, and the session, waiting for the run.
fn collect_in_session(
    source: &PytestSource,
    plugin: &Path,
) -> Result<(Collected, session::Session), CollectError> {
    let table = source.describe();
    let command = source.session_command(&[]);
    let shown = crate::suite::shell_join(&command);
    let report = collection_file(plugin)?;
    let mut case = source.template.clone();
    put_plugin_on_path(&mut case, plugin);
    let spec = PytestSession {
        table: source.index,
        command,
        nodeid: String::new(),
    };
    let session =
        session::Session::start(&case, &spec, Some(report.path()), COLLECT_TIMEOUT, &|| {
            false
        })
        .map_err(|not| {
            let lines: Vec<&str> = not.output.trim_end().lines().collect();
            let said = lines[lines.len().saturating_sub(OUTPUT_TAIL_LINES)..].join("\n");
            match not.exit {
                // pytest's exit 5: nothing collected (a wrong path, `-m`
                // that selects nothing).
                Some(crate::vocabulary::Exit::Code(5)) => CollectError::Empty {
                    table: table.clone(),
                    command: shown.clone(),
                    output: if said.is_empty() {
                        String::new()
                    } else {
                        format!(":\n{said}")
                    },
                },
                // pytest ended well without the plugin's word: the plugin
                // was not loaded (pytest then ran the tests itself).
                Some(crate::vocabulary::Exit::Code(0)) => {
                    match read_collection(&table, &shown, report.path(), &said) {
                        Err(refused) => refused,
                        Ok(_) => CollectError::Failed {
                            table: table.clone(),
                            command: shown.clone(),
                            how: "ended before oomgate's plugin said it was ready".into(),
                            output: said,
                        },
                    }
                }
                _ => CollectError::Failed {
                    table: table.clone(),
                    command: shown.clone(),
                    how: not.how,
                    output: said,
                },
            }
        })?;
    let said = session.output_since(0, "the session's output");
    let collected = read_collection(&table, &shown, report.path(), said.trim_end())?;
    Ok((collected, session))
}

/// A fresh file beside the plugin's folder for the plugin to write a
/// collection to.
fn collection_file(plugin: &Path) -> Result<tempfile::NamedTempFile, CollectError> {
    tempfile::Builder::new()
        .prefix("collect-")
        .suffix(".json")
        .tempfile_in(plugin.parent().unwrap_or(plugin))
        .map_err(|e| CollectError::Plugin {
            dir: plugin.to_path_buf(),
            reason: e.to_string(),
        })
}

/// Run one table's collection; its tests as the plugin wrote them.
fn run_collection(source: &PytestSource, plugin: &Path) -> Result<Collected, CollectError> {
    let table = source.describe();
    let argv = source.collect_command();
    let shown = crate::suite::shell_join(&argv);
    let report = collection_file(plugin)?;
    let mut output = tempfile::tempfile().map_err(|e| CollectError::Plugin {
        dir: plugin.to_path_buf(),
        reason: e.to_string(),
    })?;
    let failed_to_start = |error: std::io::Error| CollectError::Start {
        table: table.clone(),
        command: shown.clone(),
        cwd: source.template.cwd.clone(),
        source: error,
    };
    let mut case = source.template.clone();
    put_plugin_on_path(&mut case, plugin);
    let mut command = std::process::Command::new(&case.program);
    command
        .args(&argv[1..])
        .current_dir(&case.cwd)
        .envs(&case.env)
        .env("OOMGATE_COLLECT", report.path())
        .stdin(std::process::Stdio::null())
        .stdout(output.try_clone().map_err(failed_to_start)?)
        .stderr(output.try_clone().map_err(failed_to_start)?)
        // Its own process group, so what the test modules start at import
        // is stopped with it.
        .process_group(0);
    // Variables oomgate sets for a running case would turn the plugin's
    // in-process check off, or point a probe at nothing.
    for name in crate::suite::RESERVED_ENV {
        command.env_remove(name);
    }
    let parent = std::process::id() as i32;
    // SAFETY: die_with_parent only makes async-signal-safe system calls.
    unsafe {
        command.pre_exec(move || crate::process::die_with_parent(parent));
    }
    let mut child = command.spawn().map_err(failed_to_start)?;
    let group = i32::try_from(child.id()).unwrap_or(0);
    let deadline = Instant::now() + COLLECT_TIMEOUT;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Some(status),
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(10)),
            Ok(None) | Err(_) => {
                child.kill().ok();
                child.wait().ok();
                break None;
            }
        }
    };
    crate::process::end_group(group, Duration::from_secs(2));
    let said = tail(&mut output);
    let how = match status {
        None => format!(
            "did not finish in {}",
            humantime::format_duration(COLLECT_TIMEOUT)
        ),
        Some(status) => match (
            status.code(),
            std::os::unix::process::ExitStatusExt::signal(&status),
        ) {
            (Some(0), _) => String::new(),
            (Some(code), _) => format!("exited {code}"),
            (None, Some(signal)) => format!("was killed by signal {signal}"),
            (None, None) => "ended".to_string(),
        },
    };
    // pytest's exit 5: nothing collected (a wrong path, `-m` that selects nothing).
    if status.and_then(|s| s.code()) == Some(5) {
        return Err(CollectError::Empty {
            table,
            command: shown,
            output: if said.is_empty() {
                String::new()
            } else {
                format!(":\n{said}")
            },
        });
    }
    if !how.is_empty() {
        return Err(CollectError::Failed {
            table,
            command: shown,
            how,
            output: said,
        });
    }
    read_collection(&table, &shown, report.path(), &said)
}

/// The collection the plugin wrote to `report`; `said`, the last of what
/// pytest printed, for the errors.
fn read_collection(
    table: &str,
    shown: &str,
    report: &Path,
    said: &str,
) -> Result<Collected, CollectError> {
    let table = table.to_string();
    let text = crate::files::read_input(report, crate::files::MAX_RESULTS_BYTES, "a collection")
        .map_err(|e| CollectError::Report {
            table: table.clone(),
            reason: e.to_string(),
        })?;
    if text.is_empty() {
        return Err(CollectError::Report {
            table,
            reason: format!(
                "pytest ran but oomgate's plugin wrote nothing: was `-p {}` refused, or `-p no:{}` in `args`?{}",
                crate::suite::PYTEST_PLUGIN_MODULE,
                crate::suite::PYTEST_PLUGIN_MODULE,
                if said.is_empty() {
                    String::new()
                } else {
                    format!("\n{said}")
                }
            ),
        });
    }
    let collected: Collected = serde_json::from_str(&text).map_err(|e| CollectError::Report {
        table: table.clone(),
        reason: e.to_string(),
    })?;
    if collected.tests.is_empty() {
        return Err(CollectError::Empty {
            table,
            command: shown.to_string(),
            output: String::new(),
        });
    }
    Ok(collected)
}

/// The last lines of what pytest said, masked.
fn tail(file: &mut std::fs::File) -> String {
    let mut bytes = Vec::new();
    file.rewind().ok();
    file.take(4 * 1024 * 1024).read_to_end(&mut bytes).ok();
    let text = String::from_utf8_lossy(&bytes);
    let lines: Vec<&str> = text.trim_end().lines().collect();
    let kept = &lines[lines.len().saturating_sub(OUTPUT_TAIL_LINES)..];
    crate::redact::mask_written(&kept.join("\n")).into_owned()
}

/// The plain-bytecode and pytest-rewrite caches Python would look in for
/// the plugin's module: an empty file here, so no bytecode can be read or
/// written.
const PYCACHE: &str = "__pycache__";

/// What the plugin's folder holds: the plugin, and the `__pycache__` file.
fn plugin_files() -> [(String, &'static [u8]); 2] {
    [
        (
            format!("{}.py", crate::suite::PYTEST_PLUGIN_MODULE),
            PLUGIN_SOURCE.as_bytes(),
        ),
        (PYCACHE.to_string(), b""),
    ]
}

/// Write this process's copy of the plugin: a sealed folder
/// ([`crate::files::SealedDir`]),
/// `$TMPDIR/oomgate-<uid>/pytest-<pid>-<random>/`, holding the plugin and
/// a `__pycache__` that is an empty read-only file, so Python and pytest's
/// assertion rewriter find no bytecode to load and write none. Removed when
/// the suite holding it is dropped (at the end of the command).
///
/// A folder shared between runs (as before) let a test plant bytecode that
/// a later, separate run loaded as the plugin. The tests of this run can
/// still reach this folder (they run as the same user), so it is checked
/// before every test starts ([`check_plugin`]).
pub fn install_plugin() -> Result<crate::files::SealedDir, CollectError> {
    let base = private_base()?;
    remove_shared_plugins(&base);
    let files = plugin_files();
    let files: Vec<(&str, &[u8])> = files.iter().map(|(n, c)| (n.as_str(), *c)).collect();
    let sealed = crate::files::SealedDir::create(&base, "pytest-", &files).map_err(|e| {
        CollectError::Plugin {
            dir: base.clone(),
            reason: e.to_string(),
        }
    })?;
    if let Ok(mut installed) = INSTALLED.lock() {
        *installed = Some(sealed.path().to_path_buf());
    }
    Ok(sealed)
}

/// Whether `dir` still holds the plugin as [`install_plugin`] wrote it.
/// `Err` says what changed.
pub fn check_plugin(dir: &Path) -> Result<(), String> {
    let files = plugin_files();
    let files: Vec<(&str, &[u8])> = files.iter().map(|(n, c)| (n.as_str(), *c)).collect();
    crate::files::sealed::check(dir, &files)
}

/// `$TMPDIR/oomgate-<uid>`, made if missing, mode 0700 and the user's own.
fn private_base() -> Result<PathBuf, CollectError> {
    // SAFETY: geteuid takes nothing and cannot fail.
    let uid = unsafe { libc::geteuid() };
    let base = std::env::temp_dir().join(format!("oomgate-{uid}"));
    let failed = |reason: String| CollectError::Plugin {
        dir: base.clone(),
        reason,
    };
    match std::fs::DirBuilder::new().mode(0o700).create(&base) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(failed(e.to_string())),
    }
    // A folder another user made, or one others may write, could hand
    // pytest a planted plugin.
    let meta = std::fs::symlink_metadata(&base).map_err(|e| failed(e.to_string()))?;
    if !meta.is_dir() || meta.uid() != uid || meta.permissions().mode() & 0o022 != 0 {
        return Err(failed(format!(
            "it is not a folder of this user's (uid {uid}) that only they can write; remove it, or set TMPDIR elsewhere"
        )));
    }
    Ok(base)
}

/// Remove the folders earlier versions shared between runs
/// (`pytest-<16 hex digits>`), which a test could have written into.
fn remove_shared_plugins(base: &Path) {
    let Ok(entries) = std::fs::read_dir(base) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let shared = name
            .strip_prefix("pytest-")
            .is_some_and(|hash| hash.len() == 16 && hash.bytes().all(|b| b.is_ascii_hexdigit()));
        if shared && entry.file_type().is_ok_and(|t| t.is_dir()) {
            let _ = crate::files::remove_tree(&entry.path());
        }
    }
}

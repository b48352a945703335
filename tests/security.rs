//! Secrets from the environment, the suite and the command line never reach
//! anything oomgate writes; the workload's own logs keep its bytes.

mod common;

use common::*;

const HF: &str = "hf_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789";
const WANDB: &str = "wandb-0123456789abcdef";
const SK: &str = "sk-proj-abcdefghijklmnopqrstuvwxyz012345";
const FLAG_TOKEN: &str = "flag-token-value-42";
const RUNNER_TOKEN: &str = "runner-held-secret-99";
const BEARER: &str = "bearer.value-0123456789";
const INTERNAL: &str = "internal-deadbeef";

/// Every secret of the suite below, as it would leak.
fn secrets() -> Vec<&'static str> {
    vec![HF, WANDB, SK, FLAG_TOKEN, RUNNER_TOKEN, BEARER, INTERNAL]
}

/// A case that prints every secret it was given, then exits with `exit`.
fn suite(exit: u8, hf: &str) -> String {
    let script = format!(
        "echo \"token $HF_TOKEN wandb $WANDB_API_KEY runner $MY_SERVICE_TOKEN\" >&2; \
         echo \"args: $*\" >&2; \
         echo 'Authorization: Bearer {BEARER}' >&2; \
         echo 'ticket {INTERNAL}' >&2; \
         echo \"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB for $HF_TOKEN\" >&2; \
         exit {exit}"
    );
    format!(
        r#"[suite]
name = "secrets"
gpu = "off"
redact = ["internal-[0-9a-f]{{8}}"]

[defaults.env]
HF_TOKEN = "{hf}"
PYTORCH_CUDA_ALLOC_CONF = "expandable_segments:True"
OMP_NUM_THREADS = "4"

[environment.commands]
whoami = ["sh", "-c", "echo runner is $MY_SERVICE_TOKEN"]

[[case]]
name = "leaky"
command = ["sh", "-c", {script}, "sh", "--api-key={SK}", "--token", "{FLAG_TOKEN}", "--batch", "64"]
env = {{ WANDB_API_KEY = "{WANDB}", TOKENIZERS_PARALLELISM = "false" }}
"#,
        script = toml_str(&script),
    )
}

fn project(exit: u8, hf: &str) -> Project {
    let mut project = Project::new(&suite(exit, hf));
    project
        .env
        .push(("MY_SERVICE_TOKEN".into(), RUNNER_TOKEN.into()));
    project
}

/// Every file oomgate wrote under `dir` but the workload's own logs.
fn written_files(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if !path
                .file_name()
                .is_some_and(|n| n.to_string_lossy().ends_with(".log"))
            {
                found.push(path);
            }
        }
    }
    found
}

fn assert_clean(what: &str, text: &str) {
    for secret in secrets() {
        assert!(
            !text.contains(secret),
            "{secret} leaked into {what}:\n{text}"
        );
    }
}

#[test]
fn no_secret_reaches_any_report_the_terminal_or_the_github_summary() {
    let project = project(1, HF);
    let step_summary = project.path().join("step-summary.md");
    let junit = project.path().join("extra-junit.xml");
    let mut command = project.run_command();
    command
        .arg("--junit")
        .arg(&junit)
        .env("GITHUB_ACTIONS", "true")
        .env("GITHUB_STEP_SUMMARY", &step_summary);
    let run = project.finish(command);
    run.assert_code(1);

    assert_clean("stdout (annotations)", &run.stdout);
    assert_clean("stderr (terminal)", &run.stderr);
    assert!(run.stdout.contains("::error"), "{}", run.stdout);
    let files = written_files(&project.out());
    assert!(files.len() >= 5, "{files:?}");
    for path in files.iter().chain([&step_summary, &junit]) {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        assert_clean(&path.display().to_string(), &text);
    }

    // The failure's text is there, masked: the reader still sees it.
    let case = run.case("leaky");
    let exception = case["diagnosis"]["exception"].as_str().unwrap_or_default();
    assert_eq!(
        exception,
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB for ***",
        "{case:#}"
    );
    let junit_text = std::fs::read_to_string(&junit).expect("junit");
    assert!(
        junit_text.contains("Authorization: Bearer ***"),
        "{junit_text}"
    );
    assert!(junit_text.contains("ticket ***"), "{junit_text}");
    // The command keeps its shape; secrets by flag are `***`.
    assert_eq!(
        case["command"],
        serde_json::json!([
            "sh",
            "-c",
            case["command"][2],
            "sh",
            "--api-key=***",
            "--token",
            "***",
            "--batch",
            "64"
        ]),
        "{case:#}"
    );
    // Secret-named variables are recorded by name and hash only.
    let env = &case["env"];
    for name in ["HF_TOKEN", "WANDB_API_KEY"] {
        let value = env[name].as_str().unwrap_or_default();
        assert!(value.starts_with("<secret "), "{name}: {value}");
    }
    assert_eq!(env["OMP_NUM_THREADS"], "4");
    assert_eq!(env["TOKENIZERS_PARALLELISM"], "false");
    let results = run.results();
    assert_eq!(
        results["environment"]["commands"]["whoami"]["output"],
        "runner is ***"
    );

    // The workload's own logs are its own bytes.
    let log =
        std::fs::read_to_string(project.out().join("cases/leaky/stderr.log")).expect("stderr.log");
    assert!(log.contains(HF) && log.contains(RUNNER_TOKEN), "{log}");
}

#[test]
fn the_lock_holds_hashes_and_memory_variables_only_and_names_a_changed_secret() {
    let project = project(0, HF);
    let locked = project.finish({
        let mut command = project.oomgate();
        command
            .arg("lock")
            .arg(project.suite())
            .arg("--out")
            .arg(project.out());
        command
    });
    locked.assert_code(0);
    let lock = std::fs::read_to_string(project.path().join("suite.lock")).expect("lock");
    assert_clean("the lock", &lock);
    assert!(
        lock.contains("PYTORCH_CUDA_ALLOC_CONF = \"expandable_segments:True\""),
        "{lock}"
    );
    assert!(lock.contains("HF_TOKEN = \"<secret "), "{lock}");
    assert!(lock.contains("OMP_NUM_THREADS = \"<hash "), "{lock}");
    assert!(lock.contains("\"--api-key=***\""), "{lock}");

    // Unchanged: nothing reported as changed.
    let same = project.run(&[]);
    same.assert_code(0);
    let changes = &same.case("leaky")["baseline"]["changes"];
    assert_eq!(changes, &serde_json::json!([]), "{changes:#}");

    // A new token: the change is named, neither value shown.
    let other = "hf_ZyXwVuTsRqPoNmLkJiHgFeDcBa9876543210";
    std::fs::write(project.suite(), suite(0, other)).expect("rewrite suite");
    let changed = project.run(&[]);
    changed.assert_code(0);
    let changes = changed.case("leaky")["baseline"]["changes"].to_string();
    assert!(changes.contains("env HF_TOKEN: <secret "), "{changes}");
    assert!(
        !changes.contains(HF) && !changes.contains(other),
        "{changes}"
    );
    assert!(!changed.stderr.contains(other), "{}", changed.stderr);
}

#[test]
fn check_shows_the_suite_redacted() {
    let project = project(0, HF);
    let output = project
        .oomgate()
        .arg("check")
        .arg(project.suite())
        .output()
        .expect("run oomgate check");
    let shown = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{shown}");
    assert_clean("check", &shown);
    assert!(shown.contains("HF_TOKEN=<secret"), "{shown}");
}

#[test]
fn a_bad_redact_pattern_is_a_located_error() {
    let project = Project::new(
        "[suite]\nname = \"s\"\nredact = [\"ok-[0-9]+\", \"(unclosed\"]\n\n[[case]]\nname = \"a\"\ncommand = [\"true\"]\n",
    );
    let output = project
        .oomgate()
        .arg("check")
        .arg(project.suite())
        .output()
        .expect("run oomgate check");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("suite.toml:3:"), "{stderr}");
    assert!(
        stderr.contains("`redact` pattern is not usable"),
        "{stderr}"
    );
}

#[test]
fn a_case_id_that_would_hold_a_secret_is_refused() {
    let project = Project::new(
        "[suite]\nname = \"s\"\n[[case]]\nname = \"c-{tok}\"\ncommand = [\"true\", \"--api-key\", \"{tok}\"]\nmatrix = { tok = [\"Zq9XmB27LpQw4\"] }\n",
    );
    let run = project.run(&[]);
    run.assert_code(2);
    // Located at the case's name, the id shown masked.
    assert!(
        run.stderr
            .contains("suite.toml:4:8: case id `c-***` holds a secret"),
        "{}",
        run.stderr
    );
    assert!(!run.stderr.contains("Zq9XmB27LpQw4"), "{}", run.stderr);
    assert!(!project.out().exists(), "nothing ran");

    // An ordinary flag that ends in `key` is no secret: its case runs.
    let project = Project::new(
        "[suite]\nname = \"s\"\n[[case]]\nname = \"bench-{model}\"\ncommand = [\"true\", \"--cache-key\", \"{model}\"]\nmatrix = { model = [\"llama-7b-hf\"] }\n",
    );
    project.run(&[]).assert_code(0);
}

/// A case id that only looks like a token is the user's name for it: the
/// suite runs, with a located warning, and every report writes the id as
/// it is. What the workload prints in that shape is still masked.
#[test]
fn a_case_id_that_looks_like_a_token_is_written_as_it_is() {
    let id = "sk-learn-logistic-regression-large";
    let project = Project::new(&format!(
        "[suite]\nname = \"s\"\ngpu = \"off\"\n[[case]]\nname = \"{id}\"\ncommand = [\"sh\", \"-c\", \"t=abcdefghijklmnopqrstuvwxyz; echo printed sk-proj-$t >&2; exit 1\"]\n"
    ));
    let run = project.run(&[]);
    run.assert_code(1);
    assert!(
        run.stderr.contains(&format!(
            "suite.toml:5:8: warning: case id `{id}` looks like a token"
        )),
        "{}",
        run.stderr
    );
    for file in ["results.json", "junit.xml", "summary.md", "report.html"] {
        let text = std::fs::read_to_string(project.out().join(file)).unwrap_or_default();
        assert!(text.contains(id), "{file} lost the id:\n{text}");
        assert!(
            !text.contains("sk-proj-abcdefghijklmnopqrstuvwxyz"),
            "{file} holds the printed token"
        );
    }
    assert!(run.stderr.contains(id), "{}", run.stderr);
}

/// A secret set only in a server's `env` (or `[defaults]`, a matrix, the
/// client's) is masked everywhere, as one in the case's own `env` is: here
/// in the failed server's log tail, in junit.xml and report.html.
#[test]
fn a_secret_in_any_env_layer_is_masked_everywhere() {
    let secret = "Zq9XmB27LpQw4-server-only";
    let project = Project::new(&format!(
        r#"[suite]
name = "s"
gpu = "off"

[[case]]
name = "served"
command = ["sh", "-c", "echo client saw nothing >&2; exit 1"]

[case.server]
command = ["sh", "-c", "echo serving with $SERVE_TOKEN >&2; exit 3"]
ready = {{ log = "ready" }}
env = {{ SERVE_TOKEN = "{secret}" }}
"#
    ));
    let run = project.run(&[]);
    run.assert_code(1);
    let files = written_files(&project.out());
    assert!(files.len() >= 4, "{files:?}");
    for path in files {
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            !text.contains(secret),
            "{} holds it:\n{text}",
            path.display()
        );
    }
    assert!(!run.stderr.contains(secret), "{}", run.stderr);
    // The server's log keeps its own bytes.
    let server_log = std::fs::read_to_string(project.out().join("cases/served/server.stderr.log"))
        .unwrap_or_default();
    assert!(server_log.contains(secret), "{server_log}");
}

/// A secret that straddles the cut of the 64 KiB log tail (on one long
/// line, no newline to cut at) leaves no part of itself in any report.
#[test]
fn a_secret_across_the_log_tails_cut_leaves_no_part() {
    let secret = "Kd82HsP0aQx-straddling-the-cut-77";
    // The tail's cut, 64 KiB before the end, falls 10 bytes into it.
    let after = 64 * 1024 + 10 - secret.len();
    let project = Project::new(&format!(
        "[suite]\nname = \"s\"\ngpu = \"off\"\n[[case]]\nname = \"long\"\ncommand = [\"python3\", \"-c\", \"import os, sys; sys.stderr.write('x' * 5000 + os.environ['LONG_TOKEN'] + 'y' * {after}); sys.exit(1)\"]\nenv = {{ LONG_TOKEN = \"{secret}\" }}\n",
    ));
    let run = project.run(&[]);
    run.assert_code(1);
    for path in written_files(&project.out()) {
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        for part in secret.as_bytes().windows(8) {
            let part = std::str::from_utf8(part).unwrap_or_default();
            assert!(!text.contains(part), "{part:?} in {}", path.display());
        }
    }
}

#[test]
fn flags_inside_a_shell_string_are_redacted_everywhere() {
    let project = Project::new(
        "[suite]\nname = \"s\"\n[[case]]\nname = \"sh\"\ncommand = [\"bash\", \"-c\", \"echo run --api-key Zq9XmB27LpQw4 --token Kd82HsP0aQx >&2; exit 1\"]\n",
    );
    let run = project.run(&[]);
    run.assert_code(1);
    for path in written_files(&project.out()) {
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        for secret in ["Zq9XmB27LpQw4", "Kd82HsP0aQx"] {
            assert!(
                !text.contains(secret),
                "{secret} in {}:\n{text}",
                path.display()
            );
        }
    }
    assert_eq!(
        run.case("sh")["command"][2],
        "echo run --api-key *** --token *** >&2; exit 1"
    );
}

/// A merge job has neither the shard's environment nor, without
/// `--suite`, the suite's secrets: the end of each log it shows comes from
/// the shard's junit.xml, masked by the shard's run, never from the logs.
#[test]
fn a_merge_without_the_shards_secrets_writes_none_of_them() {
    let project = project(1, HF);
    project.run(&[]).assert_code(1);
    let merged = project.path().join("merged");
    let output = oomgate()
        .arg("merge")
        .arg(project.out())
        .arg("--out")
        .arg(&merged)
        .output()
        .expect("merge");
    let run = Run::from(output, merged.clone());
    run.assert_code(1);
    assert_clean("stdout", &run.stdout);
    assert_clean("stderr", &run.stderr);
    let files = written_files(&merged);
    assert!(files.len() >= 5, "{files:?}");
    for path in &files {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        assert_clean(&path.display().to_string(), &text);
    }
    let junit = std::fs::read_to_string(merged.join("junit.xml")).expect("junit");
    assert!(junit.contains("Authorization: Bearer ***"), "{junit}");
    assert!(junit.contains("ticket ***"), "{junit}");
    // The logs came along as they are: the workload's own bytes.
    let log = std::fs::read_to_string(merged.join("cases/leaky/stderr.log")).expect("log");
    assert!(log.contains(BEARER), "{log}");
}

/// A token, as a workload would leave it; the suite holds only its
/// reverse, so nothing of it reaches a report through the suite's text.
const WORKLOAD_TOKEN: &str = "hf_Qw3Er5Ty7Ui9Op1As3Df5Gh7Jk9Lz1Xc3";

/// The first 8 characters of `secret` found in `text`.
fn piece_of(secret: &str, text: &str) -> Option<String> {
    secret
        .as_bytes()
        .windows(8)
        .map(|w| String::from_utf8_lossy(w).into_owned())
        .find(|part| text.contains(part.as_str()))
}

fn assert_no_piece(secret: &str, what: &str, text: &str) {
    if let Some(part) = piece_of(secret, text) {
        panic!("{part:?} of the token reached {what}:\n{text}");
    }
}

/// A torch memory snapshot whose frame file is named after a token
/// (`…/model_hf_….py`, no secret variable holds it): the token reaches
/// neither results.json, report.html (where a long site's label is cut to
/// 57 characters, inside the token), the summary, the terminal, the lock
/// (written by the run and by `lock --from`), nor `oomgate sites`.
#[test]
fn a_token_in_a_snapshots_frame_file_reaches_no_report_nor_the_lock() {
    let reversed: String = WORKLOAD_TOKEN[3..].chars().rev().collect();
    let script = format!(
        r#"import os, pickle, sys
sys.path.insert(0, {snapshots:?})
from make_snapshot import build
token = "hf_" + "{reversed}"[::-1]
snapshot = build("basic", os.getcwd())
def rename(value):
    if isinstance(value, dict):
        if "filename" in value:
            value["filename"] = value["filename"].replace("model.py", "packages/vision/transformers/layers/model_" + token + ".py")
        for v in value.values():
            rename(v)
    elif isinstance(value, list):
        for v in value:
            rename(v)
rename(snapshot)
with open(os.path.join(os.environ["OOMGATE_OUT"], "memory_snapshot.pickle"), "wb") as out:
    pickle.dump(snapshot, out)
"#,
        snapshots = workloads().join("../snapshots").display().to_string(),
    );
    let project = Project::new(&format!(
        "[suite]\nname = \"s\"\ngpu = \"off\"\n[[case]]\nname = \"snap\"\ncommand = [\"python3\", \"-c\", {}]\n",
        toml_str(&script)
    ));
    let step_summary = project.path().join("step-summary.md");
    let output = project
        .oomgate()
        .arg("lock")
        .arg(project.suite())
        .arg("--out")
        .arg(project.out())
        .env("GITHUB_ACTIONS", "true")
        .env("GITHUB_STEP_SUMMARY", &step_summary)
        .output()
        .expect("lock");
    let locked = Run::from(output, project.out());
    locked.assert_code(0);
    let case = locked.case("snap");
    assert_eq!(
        case["allocation_sites"]["sites"][0]["site"],
        "packages/vision/transformers/layers/model_***.py:10 load",
        "{case:#}"
    );
    assert_no_piece(WORKLOAD_TOKEN, "the terminal", &locked.stderr);
    assert_no_piece(WORKLOAD_TOKEN, "stdout", &locked.stdout);
    let files = written_files(&project.out());
    assert!(
        files.iter().any(|f| f.ends_with("report.html")),
        "{files:?}"
    );
    for path in files
        .iter()
        .filter(|f| !f.ends_with("memory_snapshot.pickle"))
        .chain([&step_summary, &project.lock_path()])
    {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        assert_no_piece(WORKLOAD_TOKEN, &path.display().to_string(), &text);
    }
    let lock = std::fs::read_to_string(project.lock_path()).expect("lock");
    assert!(lock.contains("layers/model_***.py:10 load"), "{lock}");

    std::fs::remove_file(project.lock_path()).expect("remove the lock");
    let from = project.lock_from_results();
    from.assert_code(0);
    let lock = std::fs::read_to_string(project.lock_path()).expect("lock");
    assert_no_piece(WORKLOAD_TOKEN, "the lock from results", &lock);
    for target in [
        project.out().join("results.json"),
        project.out().join("cases/snap/memory_snapshot.pickle"),
    ] {
        let sites = oomgate().arg("sites").arg(&target).output().expect("sites");
        let printed = String::from_utf8_lossy(&sites.stdout);
        assert!(printed.contains("load"), "{printed}");
        assert_no_piece(WORKLOAD_TOKEN, "oomgate sites", &printed);
    }
}

/// What pytest leaves of a long repr (`'hf_Qw3Er5Ty7...5Gh7Jk9Lz1Xc3'`)
/// and a line holding the token wrapped at 20 columns: no 8 characters of
/// the token reach junit.xml, report.html or results.json.
#[test]
fn no_piece_of_a_known_secret_reaches_a_report() {
    let script = "import os, sys, textwrap\n\
t = os.environ['HF_TOKEN']\n\
sys.stderr.write(\"E       assert '%s...%s' == 'x'\\n\" % (t[:12], t[-13:]))\n\
sys.stderr.write('\\n'.join(textwrap.wrap('HF_TOKEN=' + t + ' is set', 20)) + '\\n')\n\
sys.exit(1)\n";
    let project = Project::new(&format!(
        "[suite]\nname = \"s\"\ngpu = \"off\"\n[[case]]\nname = \"pieces\"\ncommand = [\"python3\", \"-c\", {}]\nenv = {{ HF_TOKEN = \"{WORKLOAD_TOKEN}\" }}\n",
        toml_str(script)
    ));
    let run = project.run(&[]);
    run.assert_code(1);
    let log = std::fs::read_to_string(project.out().join("cases/pieces/stderr.log")).expect("log");
    assert!(log.contains("hf_Qw3Er5Ty7...5Gh7Jk9Lz1Xc3"), "{log}");
    assert_no_piece(WORKLOAD_TOKEN, "the terminal", &run.stderr);
    let files = written_files(&project.out());
    assert!(files.iter().any(|f| f.ends_with("junit.xml")), "{files:?}");
    for path in &files {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        assert_no_piece(WORKLOAD_TOKEN, &path.display().to_string(), &text);
    }
    let junit = std::fs::read_to_string(project.out().join("junit.xml")).expect("junit");
    assert!(
        junit.contains("assert &apos;***...***&apos; == &apos;x&apos;")
            || junit.contains("assert '***...***' == 'x'"),
        "{junit}"
    );
}

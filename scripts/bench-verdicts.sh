#!/usr/bin/env bash
# Verdict stability: the same workload must get the same verdict in every
# run, and a regression must fail in every run. Standard library Python
# and pytest only (no torch); see scripts/bench-torch-host.sh for torch.
#
#   tree   a tree of 4 fresh interpreters holding 30 MiB each for 1 s,
#          locked, run RUNS times unchanged (all must pass), then RUNS times
#          at 150 MiB each for 20 ms, a burst no PSS sweep sees (all must
#          fail);
#   pytest 20 tests of about 0.3 s each (a process per test), locked, run
#          RUNS times unchanged with --require-baseline (every test must
#          pass, none "not compared"), then RUNS times with one test keeping
#          200 MiB more (that test, and only it, must fail).
#
#   scripts/bench-verdicts.sh [RUNS]     # default 5
#   BUSY=2 scripts/bench-verdicts.sh     # with 2 spinning processes beside
#
# Prints one Markdown row per check: what was run, the runs, the verdicts.
# See docs/performance.md.
set -euo pipefail
cd "$(dirname "$0")/.."
runs="${1:-5}"
cargo build --release --quiet
oomgate="$PWD/target/release/oomgate"
python="${OOMGATE_TEST_PYTHON:-$(scripts/pytest-venv.sh target/pytest-venv)}"
# shellcheck source=scripts/bench-busy.sh
. scripts/bench-busy.sh

# The verdicts of one run: "passed failed uncompared" counts from results.json.
verdicts() {
    python3 - "$1" <<'PY'
import json, sys
cases = json.load(open(sys.argv[1]))["cases"]
passed = sum(c["status"] == "passed" for c in cases)
failed = [c["id"] for c in cases if c["status"] != "passed"]
uncompared = sum(
    1 for c in cases for ch in c["checks"]
    if ch["name"].startswith("baseline") and ch.get("outcome") in ("not-compared", "no-baseline")
)
print(passed, len(failed), uncompared, ",".join(f.split("::")[-1] for f in failed) or "-")
PY
}

# RUNS runs of a suite, into PREFIX-1 ... PREFIX-RUNS, printing each run's
# verdicts; the arguments after the first two go to `oomgate run`.
runs_of() {
    local suite="$1" prefix="$2"
    shift 2
    for run in $(seq 1 "$runs"); do
        "$oomgate" run "$suite" --out "$prefix-$run" "$@" >/dev/null 2>&1 || true
        verdicts "$prefix-$run/results.json"
    done
}

row() { # label, expectation, then one "passed failed uncompared names" line per run
    local label="$1" expect="$2"
    shift 2
    python3 - "$label" "$expect" "$@" <<'PY'
import sys
label, expect, lines = sys.argv[1], sys.argv[2], sys.argv[3:]
runs = [l.split(" ") for l in lines]
failed_runs = sum(int(r[1]) > 0 for r in runs)
names = sorted({n for r in runs for n in r[3].split(",") if n != "-"})
uncompared = sum(int(r[2]) for r in runs)
print(f"| {label} | {expect} | {len(runs)} | {failed_runs} of {len(runs)} | {', '.join(names) or '-'} | {uncompared} |")
PY
}

echo "| workload | expected | runs | runs with a failed case | failed cases | figures not compared |"
echo "| --- | --- | --- | --- | --- | --- |"

# The tree.
tree="$work/tree"
mkdir -p "$tree"
tree_suite() {
    cat > "$tree/suite.toml" <<TOML
[suite]
name = "tree"
gpu = "off"
[[case]]
name = "tree"
command = ["python3", "$PWD/fixtures/workloads/host_patterns.py", "burst-tree", "--children", "4", "--mib", "$1", "--hold", "$2"]
TOML
}
tree_suite 30 1s
"$oomgate" lock "$tree/suite.toml" --out "$tree/lock" >/dev/null 2>&1
mapfile -t same < <(runs_of "$tree/suite.toml" "$tree/same" --require-baseline)
row "tree of 4 × 30 MiB for 1 s, unchanged" "all pass" "${same[@]}"
tree_suite 150 20ms
mapfile -t grown < <(runs_of "$tree/suite.toml" "$tree/grown")
row "the same, 4 × 150 MiB for 20 ms" "every run fails" "${grown[@]}"

# The pytest suite.
project="$work/pytest"
mkdir -p "$project/tests"
for i in $(seq -w 1 19); do
    cat > "$project/tests/test_short_$i.py" <<PY
import time

def test_short_$i():
    data = bytearray(8 << 20)
    for offset in range(0, len(data), 4096):
        data[offset] = 1
    time.sleep(0.25)
    assert len(data) == 8 << 20
PY
done
cat > "$project/tests/test_grow.py" <<'PY'
import os, time

def test_grow():
    data = bytearray((8 + int(os.environ.get("BENCH_GROW_MIB", "0"))) << 20)
    for offset in range(0, len(data), 4096):
        data[offset] = 1
    time.sleep(0.25)
    assert data[0] == 1
PY
cat > "$project/suite.toml" <<TOML
[suite]
name = "short-tests"
gpu = "off"
[[pytest]]
paths = ["tests"]
python = "$python"
TOML
"$oomgate" lock "$project/suite.toml" --out "$project/lock" >/dev/null 2>&1
mapfile -t same < <(runs_of "$project/suite.toml" "$project/same" --require-baseline)
row "20 pytest tests of 0.3 s, unchanged (--require-baseline)" "all pass" "${same[@]}"
mapfile -t grown < <(BENCH_GROW_MIB=200 runs_of "$project/suite.toml" "$project/grown")
row "the same, test_grow keeping 200 MiB more" "test_grow fails, alone" "${grown[@]}"

#!/usr/bin/env bash
# Host-memory accuracy on workloads whose true peak is known: each is run
# with a memory cgroup per case (where this machine allows one) and with
# /proc only, and the reported host peak, the floor that set it, and the
# cgroup's charged peak (page cache included) are printed side by side.
# See docs/performance.md and docs/host-measurement.md.
#
#   scripts/bench-host-accuracy.sh
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --quiet
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
patterns="$PWD/fixtures/workloads/host_patterns.py"
alloc="$PWD/fixtures/workloads/alloc.py"

cat > "$work/suite.toml" <<TOML
[suite]
name = "accuracy"
sample_interval = "50ms"

[[case]]
name = "shared-200mib-4-forks"
command = ["python3", "$patterns", "shared", "--mib", "200", "--children", "4", "--hold", "1s"]

[[case]]
name = "1024-sleeps"
command = ["python3", "$patterns", "sleepers", "--count", "1024", "--hold", "3s"]
timeout = "2m"

[[case]]
name = "spike-300mib-interval-2s"
command = ["python3", "$patterns", "spike", "--mib", "300", "--after", "1s"]

[[case]]
name = "grandchild-spike-300mib"
command = ["sh", "-c", "python3 $patterns spike --mib 300 --after 0; sleep 0.5"]

[[case]]
name = "spike-101mib-budget-64mib"
command = ["python3", "$patterns", "spike", "--mib", "101", "--after", "0"]
budget = { host = "64 MiB" }

[[case]]
name = "dev-shm-300mib"
command = ["python3", "$patterns", "shm", "--mib", "300", "--hold", "1s"]

[[case]]
name = "true"
command = ["true"]

[[case]]
name = "page-cache-300mib"
command = ["python3", "$patterns", "cache", "--mib", "300", "--hold", "200ms"]

[[case]]
name = "alloc-256mib"
command = ["python3", "$alloc", "--mib", "256", "--hold", "500ms"]
TOML
# The two spikes at a 2 s interval need their own suite setting.
sed 's/sample_interval = "50ms"/sample_interval = "2s"/' "$work/suite.toml" > "$work/suite-2s.toml"

for method in auto procfs; do
    target/release/oomgate run "$work/suite.toml" --out "$work/out-$method" --no-baseline --host-method "$method" >/dev/null 2>&1 || true
    target/release/oomgate run "$work/suite-2s.toml" --out "$work/out-2s-$method" --no-baseline --host-method "$method" >/dev/null 2>&1 || true
done

python3 - "$work" <<'PY'
import json, sys
work = sys.argv[1]
def load(name):
    return {c["id"]: c for c in json.load(open(f"{work}/{name}/results.json"))["cases"]}
runs = {m: (load(f"out-{m}"), load(f"out-2s-{m}")) for m in ("auto", "procfs")}
def mib(v):
    return "null" if v is None else f"{v / 2**20:.1f} MiB"
print(f"| workload | {'cgroup method':>14} | gated peak (floor) | charged peak | /proc only: gated peak (floor) |")
print("| --- | --- | --- | --- | --- |")
for case in runs["auto"][0]:
    two_s = case.startswith("spike-300") or case.startswith("grandchild")
    cells = []
    for m in ("auto", "procfs"):
        c = runs[m][1 if two_s else 0][case]
        verdict = "" if c["status"] == "passed" else f", {c['status']}"
        cells.append((c["host_method"], f"{mib(c['host_peak_bytes'])} ({c['host_peak_source']}{verdict})", mib(c["host_charged_peak_bytes"])))
    name = case + (" (2 s interval)" if two_s else "")
    print(f"| {name} | {cells[0][0]} | {cells[0][1]} | {cells[0][2]} | {cells[1][1]} |")
PY

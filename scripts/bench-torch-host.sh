#!/usr/bin/env bash
# Host-memory accuracy and stability on real PyTorch (CPU): each workload of
# scripts/torch_host_workloads.py is locked once and run again RUNS-1 times,
# every run under scripts/pss_truth.py, an independent sampler of the tree's
# PSS every 5 ms. Prints, per workload, the figure against that truth, the
# spread over the runs, the floor that set each run's figure, the
# anonymous + shmem figure against the sampler's, and how many unchanged
# runs failed against their own lock. Not run by CI: torch (the package
# index's build, about 5.5 GB installed) goes into a venv of its own,
# $OOMGATE_TORCH_VENV (default ~/.cache/oomgate-bench-torch), the first time.
# See docs/performance.md.
#
#   scripts/bench-torch-host.sh [RUNS]          # default 5
#   BUSY=2 scripts/bench-torch-host.sh          # with 2 spinning processes beside
#   WORKLOADS="spawned server" scripts/bench-torch-host.sh 3
#   GROW=0.10 scripts/bench-torch-host.sh       # the runs after the lock hold 10% of the
#                                               # locked working memory more: each should fail
#   NEIGHBOURS=2 scripts/bench-torch-host.sh    # with 2 idle `import torch` processes beside
#   LOCK_REPEAT=3 scripts/bench-torch-host.sh   # lock with `lock --repeat 3` (a locked spread)
set -euo pipefail
cd "$(dirname "$0")/.."
runs="${1:-5}"
venv="${OOMGATE_TORCH_VENV:-$HOME/.cache/oomgate-bench-torch}"
if ! "$venv/bin/python" -c "import torch" 2>/dev/null; then
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet torch
fi
cargo build --release --quiet
# shellcheck source=scripts/bench-busy.sh
. scripts/bench-busy.sh
python="$venv/bin/python"
# Idle processes of the same venv: they share torch's library pages with
# the case, which moves its PSS (each page's share) but not its working
# memory.
for _ in $(seq 1 "${NEIGHBOURS:-0}"); do
    "$python" -c 'import time, torch; time.sleep(100000)' 2>/dev/null &
    busy+=("$!")
done
if [ "${NEIGHBOURS:-0}" -gt 0 ]; then sleep 10; fi
truth="$PWD/scripts/pss_truth.py"
workloads="$PWD/scripts/torch_host_workloads.py"

load="$PWD/fixtures/workloads/load.py"

workloads_run="${WORKLOADS:-single train dataloader spawned shared spike server}"
for workload in $workloads_run; do
    suite="$work/$workload.toml"
    # TOML-escaped quotes around the truth's path.
    under_truth="exec $python $truth \\\"\$OOMGATE_OUT/truth.json\\\" -- $python $workloads $workload"
    if [ "$workload" = server ]; then
        # The server under truth; the load client (standard library) apart.
        case_lines="command = [\"python3\", \"$load\", \"--url\", \"http://127.0.0.1:{port}/generate\", \"--requests\", \"160\", \"--concurrency\", \"8\"]
server = { command = [\"sh\", \"-c\", \"$under_truth {port}\"], ready = \"http://127.0.0.1:{port}/health\", ready_timeout = \"1m\" }"
    else
        case_lines="command = [\"sh\", \"-c\", \"$under_truth\"]"
    fi
    cat > "$suite" <<TOML
[suite]
name = "torch-$workload"
gpu = "off"
sample_interval = "50ms"

[[case]]
name = "$workload"
$case_lines
timeout = "2m"
TOML
    target/release/oomgate lock "$suite" --out "$work/$workload-1" ${LOCK_REPEAT:+--repeat "$LOCK_REPEAT"} >/dev/null 2>&1 || echo "lock of $workload failed" >&2
    # GROW: the main process holds that share of the locked working memory
    # more (rounded up to a MiB), from its start to its end.
    extra=$(python3 -c 'import json, math, sys
case = json.load(open(sys.argv[1]))["cases"][0]
print(math.ceil(float(sys.argv[2]) * (case.get("host_working_peak_bytes") or 0) / 2**20))' "$work/$workload-1/results.json" "${GROW:-0}" 2>/dev/null || echo 0)
    for run in $(seq 2 "$runs"); do
        OOMGATE_BENCH_EXTRA_MIB="$extra" target/release/oomgate run "$suite" --out "$work/$workload-$run" >/dev/null 2>&1 \
            && echo 0 > "$work/$workload-$run/exit" || echo $? > "$work/$workload-$run/exit"
    done
done

python3 - "$work" "$runs" "${GROW:-0}" $workloads_run <<'PY'
import json, statistics, sys
work, runs, grow, names = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), sys.argv[4:]
what = f"holding {grow:.0%} of the locked working memory more" if grow else "unchanged"
print(f"| workload | figure / truth | spread over runs (truth's) | floor per run | anon + shmem / truth's | locked working memory | working vs the lock | failed against the lock ({what}) |")
print("| --- | --- | --- | --- | --- | --- | --- | --- |")
for workload in names:
    ratios, figures, truths, floors, anon, failed = [], [], [], [], [], 0
    working, locked_working, failed_by = [], None, set()
    for run in range(1, runs + 1):
        out = f"{work}/{workload}-{run}"
        try:
            case = json.load(open(f"{out}/results.json"))["cases"][0]
            truth = json.load(open(f"{out}/cases/{workload}/truth.json"))
        except (OSError, ValueError, IndexError):
            floors.append("missing")
            continue
        figure = case["host_peak_bytes"]
        figures.append(figure)
        truths.append(truth["pss_peak_bytes"])
        ratios.append(figure / truth["pss_peak_bytes"])
        floors.append(case["host_peak_source"] or "null")
        mine = max(filter(None, (case["host_floors"].get("cgroup_anon_shmem_bytes"), case["host_floors"].get("pss_anon_shmem_bytes"))), default=None)
        if mine and truth["anon_shmem_peak_bytes"]:
            anon.append(mine / truth["anon_shmem_peak_bytes"])
        if run == 1:
            locked_working = case.get("host_working_peak_bytes")
        elif locked_working and case.get("host_working_peak_bytes"):
            working.append(case["host_working_peak_bytes"] / locked_working - 1)
        if run > 1 and open(f"{out}/exit").read().strip() != "0":
            failed += 1
            failed_by.update(c["name"] for c in case["checks"] if not c["passed"])
    span = lambda xs: f"{min(xs):.3f}–{max(xs):.3f}" if xs else "-"
    spread = lambda xs: (max(xs) - min(xs)) / statistics.median(xs) * 100 if xs else float("nan")
    moved = f"{min(working):+.1%} to {max(working):+.1%}" if working else "-"
    by = f" ({', '.join(sorted(failed_by))})" if failed_by else ""
    locked = f"{locked_working / 2**20:.0f} MiB" if locked_working else "-"
    print(f"| {workload} | {span(ratios)} | {spread(figures):.1f}% ({spread(truths):.1f}%) | {', '.join(sorted(set(floors)))} ({len(floors)} runs) | {span(anon)} | {locked} | {moved} | {failed} of {runs - 1}{by} |")
PY

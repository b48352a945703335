#!/usr/bin/env bash
# The runner loop's own cost: suites of N trivial cases (`true`), and of
# 20 cases that each sleep 50 ms, timed as whole processes with farm-bench
# (paired, A B A B ...), each run into a fresh out dir, and the smallest
# suite against a shell loop running the same commands (the harness's
# overhead per case). Prints farm-bench's tables and, per suite size,
# oomgate's own CPU per case (`runner_cpu_s` over the cases, from each
# run's results.json) and its peak RSS.
#
#   scripts/bench-loop.sh                       # target/release/oomgate, 1000 vs 4000 cases
#   OOMGATE=/tmp/oomgate-old OOMGATE_B=target/release/oomgate scripts/bench-loop.sh
#   SIZES="200 1000" RUNS=5 scripts/bench-loop.sh
#   OUT_BASE=/dev/shm scripts/bench-loop.sh     # out dirs on tmpfs: the harness alone
#
# The out dirs go under $OUT_BASE (default /tmp). Each case makes a few
# inodes there, and what one costs depends on the file system, and on
# ext4 even on the folder: the script first says how long creating a
# file took there (docs/performance.md, "The out dir's file system").
#
# Needs: farm-bench on PATH, python3. Runs with --gpu off --no-baseline.
set -euo pipefail
cd "$(dirname "$0")/.."

OOMGATE=${OOMGATE:-target/release/oomgate}
OOMGATE_B=${OOMGATE_B:-$OOMGATE}
SIZES=${SIZES:-"1000 4000"}
RUNS=${RUNS:-3}
OUT_BASE=${OUT_BASE:-/tmp}
work=$(mktemp -d "$OUT_BASE/oomgate-bench-loop.XXXXXX")
trap 'rm -rf "$work"' EXIT

python3 - "$work" <<'EOF'
import os, sys, time
folder = os.path.join(sys.argv[1], "create-probe")
os.mkdir(folder)
start = time.perf_counter()
for i in range(500):
    os.close(os.open(os.path.join(folder, f"f{i}"), os.O_CREAT | os.O_WRONLY, 0o644))
took = (time.perf_counter() - start) / 500
print(f"== creating a file under {sys.argv[1]}: {took * 1e6:.0f} µs (500 files)")
EOF

suite() { # name count command...
    local name=$1 count=$2
    shift 2
    python3 - "$name" "$count" "$@" > "$work/$name.toml" <<'EOF'
import json, sys
name, count, command = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
print(f'[suite]\nname = "{name}"')
for i in range(count):
    print(f'[[case]]\nname = "c{i:05d}"\ncommand = {json.dumps(command)}')
EOF
}

run() { # binary suite-name: one run into a fresh out dir under $work/runs
    printf "sh -c 'exec %s run %s --out \$(mktemp -d %s/runs/%s.XXXXXX) --no-baseline --gpu off'" \
        "$(realpath "$1")" "$work/$2.toml" "$work" "$2"
}

mkdir -p "$work/runs"
suite sleep20 20 sleep 0.05
echo "== 20 cases of sleep 0.05: A = $OOMGATE, B = $OOMGATE_B"
eval "farm-bench -n $RUNS --timeout 600 --vs \"$(run "$OOMGATE_B" sleep20)\" -- $(run "$OOMGATE" sleep20)"

set -- $SIZES
for size in "$@"; do suite "true$size" "$size" true; done
if [ $# -ge 2 ]; then
    small=$1 large=${!#}
    echo "== $large against $small cases of true, both $OOMGATE (linear: $((large / small)).0)"
    eval "farm-bench -n $RUNS --timeout 1800 --vs \"$(run "$OOMGATE" "true$small")\" -- $(run "$OOMGATE" "true$large")"
fi

# The harness's overhead per case: the same commands, one after the other,
# from a shell loop (fork, exec, wait: what any launcher pays), against
# oomgate running them as cases.
small=$1
printf '#!/bin/bash\nfor ((i = 0; i < $1; i++)); do /bin/true; done\n' > "$work/loop.sh"
chmod +x "$work/loop.sh"
echo "== $small cases of true against a shell loop of $small × /bin/true (overhead per case: (A - B) / $small)"
eval "farm-bench -n $RUNS --timeout 1800 --vs \"$work/loop.sh $small\" -- $(run "$OOMGATE" "true$small")"

echo "== oomgate's own cost per case, from results.json (runner_cpu_s includes writing the reports)"
for results in "$work"/runs/*/results.json; do
    python3 - "$results" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
n = len(r["cases"])
walls = sorted(c["wall_time_s"] for c in r["cases"])
print(f'{r["suite"]["name"]:>9}: {n:5d} cases, runner_cpu_s {r["runner_cpu_s"]:.3f} '
      f'= {1000 * r["runner_cpu_s"] / n:.3f} ms a case, median case wall {1000 * walls[n // 2]:.2f} ms, '
      f'runner peak RSS {r["runner_max_rss_bytes"] / 2**20:.1f} MiB')
EOF
done | sort

#!/usr/bin/env bash
# The sampler's own CPU cost. oomgate runs one idle case for SECONDS_PER_RUN
# seconds (default 20): a single `sleep`, then trees of 50, 200 and 1000
# processes, each at 50 ms and 10 ms sampling intervals (SHAPES picks some). oomgate's own CPU time (runner_cpu_s in
# results.json: getrusage of oomgate itself, excluding the workload) over the
# wall time is the share of one core that measuring costs, start-up and
# reports included. See docs/performance.md.
#
#   scripts/bench-sampler.sh            # 20 s per configuration
#   SECONDS_PER_RUN=60 scripts/bench-sampler.sh
#   INTERVALS=50ms SECONDS_PER_RUN=60 scripts/bench-sampler.sh   # one interval only
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${SECONDS_PER_RUN:-20}"
cargo build --release --quiet
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

tree_cmd() {
    echo "import subprocess, time; ps = [subprocess.Popen(['sleep', '$((seconds + 5))']) for _ in range($1)]; time.sleep($seconds); [p.kill() for p in ps]"
}

# The fake NVML driver with 8 devices, for the GPU sampler's share. It reads
# its state from files, which a real driver does not: its cost is counted
# in oomgate's CPU time, so the GPU figures are an upper bound.
cargo build --release --quiet -p fake-nvml --target-dir target/fake-nvml-release
mkdir -p "$work/lib"
cp target/fake-nvml-release/release/libfake_nvml.so "$work/lib/libnvidia-ml.so.1"
{
    echo "driver 550.54.15"
    echo "cuda 12040"
    for i in 0 1 2 3 4 5 6 7; do
        echo "device GPU-0000000$i-0000-0000-0000-000000000000 total=85899345920 used=0 name=Fake H100"
    done
} > "$work/fake-nvml.conf"

printf '%-9s %-22s %12s %12s %9s\n' interval configuration "cpu seconds" "wall seconds" "core %"
for interval in ${INTERVALS:-50ms 10ms}; do
    for shape in ${SHAPES:-single tree50 tree200 tree1000 tree50-8gpus}; do
        case "$shape" in
            single) command="[\"sleep\", \"$seconds\"]" ;;
            tree200) command="[\"python3\", \"-c\", \"$(tree_cmd 199)\"]" ;;
            tree1000) command="[\"python3\", \"-c\", \"$(tree_cmd 999)\"]" ;;
            *) command="[\"python3\", \"-c\", \"$(tree_cmd 49)\"]" ;;
        esac
        if [ "$shape" = tree50-8gpus ]; then
            gpu=auto
            export LD_LIBRARY_PATH="$work/lib" OOMGATE_FAKE_NVML_CONFIG="$work/fake-nvml.conf"
        else
            gpu=off
            unset LD_LIBRARY_PATH OOMGATE_FAKE_NVML_CONFIG
        fi
        cat > "$work/suite.toml" <<TOML
[suite]
name = "bench"
sample_interval = "$interval"
gpu = "$gpu"
[[case]]
name = "idle"
command = $command
TOML
        # oomgate records its own CPU time (getrusage of itself, so the
        # workload is not counted) in results.json; nothing polls it while
        # it runs, since every process started on the host would make
        # oomgate list /proc again.
        start=$(date +%s.%N)
        target/release/oomgate run "$work/suite.toml" --out "$work/out" >/dev/null 2>&1 || true
        end=$(date +%s.%N)
        python3 - "$work/out/results.json" "$start" "$end" "$interval" "$shape" <<'PY'
import json, sys
cpu = json.load(open(sys.argv[1]))["runner_cpu_s"]
wall = float(sys.argv[3]) - float(sys.argv[2])
print(f"{sys.argv[4]:<9} {sys.argv[5]:<22} {cpu:12.2f} {wall:12.1f} {100 * cpu / wall:8.2f}%")
PY
    done
done

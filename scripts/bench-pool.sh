#!/usr/bin/env bash
# A GPU pool's speed-up, on fake GPUs (fixtures/fake-nvml) so it runs on
# any machine: the same suite of 8 one-GPU cases, each "allocating" 512 MiB
# and holding it HOLD (default 1.5 s), run on a pool of 1 GPU and on a
# pool of 4. Prints the prepared commands, then times them with hyperfine
# when it is installed.
# See docs/performance.md.
#
#   scripts/bench-pool.sh
#   HOLD=500ms CASES=16 scripts/bench-pool.sh
#   RUNS=10 scripts/bench-pool.sh
set -euo pipefail
cd "$(dirname "$0")/.."
root="$PWD"
cargo build --release --quiet
cargo build --quiet -p fake-nvml --target-dir target/fake-nvml
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/lib"
cp target/fake-nvml/debug/libfake_nvml.so "$work/lib/libnvidia-ml.so.1"

hold="${HOLD:-1500ms}"
cases="${CASES:-8}"
{
  echo "driver 550.54.15"
  echo "cuda 12040"
  for i in 0 1 2 3; do
    echo "device GPU-${i}${i}${i}${i}${i}${i}${i}${i}-0000-0000-0000-000000000000 total=85899345920 used=536870912 accounting=0 persistence=1 name=Fake H100 80GB"
  done
} >"$work/fake-nvml.conf"
{
  printf '[suite]\nname = "pool-bench"\n'
  for i in $(seq 1 "$cases"); do
    printf '[[case]]\nname = "c%s"\ncommand = ["python3", "%s", "--mib", "512", "--hold", "%s"]\n' \
      "$i" "$root/fixtures/workloads/gpu_alloc.py" "$hold"
  done
} >"$work/suite.toml"

export LD_LIBRARY_PATH="$work/lib"
export OOMGATE_FAKE_NVML_CONFIG="$work/fake-nvml.conf"
one="$root/target/release/oomgate run $work/suite.toml --out $work/one --no-baseline --progress none --gpus 0"
four="$root/target/release/oomgate run $work/suite.toml --out $work/four --no-baseline --progress none --gpus all"
echo "pool of 1: $one"
echo "pool of 4: $four"
$four >/dev/null 2>&1 # a check that it runs, and a warm-up
if command -v hyperfine >/dev/null; then
  hyperfine --warmup 1 --runs "${RUNS:-5}" "$four" "$one"
else
  echo "hyperfine is not installed: timing each once with bash's time"
  time $four >/dev/null 2>&1
  time $one >/dev/null 2>&1
fi

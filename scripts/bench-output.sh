#!/usr/bin/env bash
# What `metrics_from_output` costs: a case that prints LINES lines (about
# 93 bytes each, a server's log), run with and without numbers read from
# its output. Three suites: none; one rare line (vLLM's "GPU KV cache
# size: N tokens", once near the end); and that plus a regex matching
# every line (`pick = "max"` over a throughput printed on each). Prints
# the A/B commands; times them with hyperfine where it is installed. See
# docs/performance.md.
#
#   scripts/bench-output.sh [LINES]   # default 2000000 (186 MB of log)
set -euo pipefail
cd "$(dirname "$0")/.."
lines="${1:-2000000}"
cargo build --release --quiet
oomgate="$PWD/target/release/oomgate"
work="${BENCH_DIR:-$(mktemp -d)}"
cat > "$work/spew.py" <<PY
import sys
line = "INFO 12-06 10:00:00 [engine.py:123] Avg prompt throughput: 1234.5 tokens/s, Running: 64 reqs\n"
out = sys.stdout
for i in range($lines):
    out.write(line)
    if i == $lines - 1000:
        out.write("INFO 12-06 10:00:00 [kv_cache_utils.py:716] GPU KV cache size: 1,489,281 tokens\n")
PY
kv="{ name = \"kv\", regex = 'KV cache size: ([\\d,]+) tokens', better = \"higher\" }"
tput="{ name = \"tput\", regex = 'Avg prompt throughput: ([\\d.]+)', better = \"higher\", pick = \"max\" }"
suite() {
    printf '[suite]\nname = "bench-output"\ngpu = "off"\n[[case]]\nname = "spew"\ncommand = ["python3", "%s/spew.py"]\ntimeout = "10m"\n%s\n' "$work" "$1"
}
suite "" > "$work/none.toml"
suite "metrics_from_output = [$kv]" > "$work/rare.toml"
suite "metrics_from_output = [$kv, $tput]" > "$work/every.toml"
"$oomgate" run "$work/every.toml" --out "$work/check" --no-baseline > /dev/null 2>&1
python3 - "$work/check/results.json" <<'PY'
import json, sys
outputs = {o["name"]: o for o in json.load(open(sys.argv[1]))["cases"][0]["outputs"]}
assert outputs["kv"]["value"] == 1489281 and outputs["kv"]["matches"] == 1, outputs
assert outputs["tput"]["value"] == 1234.5, outputs
print("read:", {name: (o["value"], o["matches"], o["at"]) for name, o in outputs.items()})
PY
for variant in rare every; do
    echo "A: $oomgate run $work/$variant.toml --out $work/o-$variant --no-baseline"
done
echo "B: $oomgate run $work/none.toml --out $work/o-none --no-baseline"
if command -v hyperfine > /dev/null; then
    hyperfine --warmup 1 \
        "$oomgate run $work/rare.toml --out $work/o-rare --no-baseline" \
        "$oomgate run $work/every.toml --out $work/o-every --no-baseline" \
        "$oomgate run $work/none.toml --out $work/o-none --no-baseline"
fi

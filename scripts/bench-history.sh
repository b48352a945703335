#!/usr/bin/env bash
# The run history's costs (docs/performance.md#the-run-history):
#
#   - recording a run of 4,000 cases (`history add` of its results.json
#     into a history that holds one such run already), paired with
#     reading the same results.json alone (`oomgate budgets`), so that the
#     difference is the recording;
#   - the size each such run adds to the SQLite file;
#   - `history show` over 1,000 runs of 200 cases.
#
#   scripts/bench-history.sh                 # target/release/oomgate
#   OOMGATE=path/to/oomgate RUNS=9 scripts/bench-history.sh
#
# Needs farm-bench on PATH and python3. Writes about 1 GB of results
# files into a temporary folder, 100 at a time, and removes them.
set -euo pipefail
cd "$(dirname "$0")/.."

OOMGATE=$(realpath "${OOMGATE:-target/release/oomgate}")
RUNS=${RUNS:-7}
work=$(mktemp -d /tmp/oomgate-bench-history.XXXXXX)
trap 'rm -rf "$work"' EXIT

# A results.json with one passing case, from the quickstart's small case.
"$OOMGATE" run suites/quickstart.toml --filter alloc-64mib --out "$work/seed" --no-baseline --gpu off >/dev/null 2>&1

# RUN FROM COUNT CASES: results files r<FROM>..r<FROM+COUNT-1>.json of CASES cases.
make_runs() {
    python3 - "$work/seed/results.json" "$work" "$1" "$2" "$3" <<'PY'
import copy, json, sys, uuid
seed, out, first, count, cases = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:])
source = json.load(open(seed))
case = source["cases"][0]
for r in range(first, first + count):
    results = copy.deepcopy(source)
    results["run_id"] = str(uuid.UUID(int=(r + 1) << 64 | 0x4000_0000_0000, version=4))
    results["started_at"] = "2026-%02d-%02dT%02d:%02d:00.000+00:00" % (1 + r // 100 % 12, 1 + r // 4 % 28, r % 24, r % 60)
    results["cases"] = []
    for i in range(cases):
        c = dict(case)
        c["id"] = f"case-{i:05d}"
        c["host_peak_bytes"] = 100_000_000 + i * 1000 + r * 10
        results["cases"].append(c)
    json.dump(results, open(f"{out}/r{r:04d}.json", "w"))
PY
}

echo "== recording a run of 4,000 cases"
make_runs 0 2 4000
"$OOMGATE" history add "$work/r0000.json" --history "sqlite:$work/base.sqlite" >/dev/null
before=$(stat -c %s "$work/base.sqlite")
cat >"$work/record.sh" <<SH
#!/bin/sh
cp "$work/base.sqlite" "$work/h.sqlite"
exec "$OOMGATE" history add "$work/r0001.json" --history "sqlite:$work/h.sqlite" >/dev/null
SH
cat >"$work/read.sh" <<SH
#!/bin/sh
cp "$work/base.sqlite" "$work/h.sqlite"
exec "$OOMGATE" budgets "$work/r0001.json" >/dev/null
SH
chmod +x "$work/record.sh" "$work/read.sh"
farm-bench -n "$RUNS" --vs "$work/read.sh" -- "$work/record.sh"
"$work/record.sh"
after=$(stat -c %s "$work/h.sqlite")
echo "size added by one run of 4,000 cases: $((after - before)) bytes ($(( (after - before) / 4000 )) a case)"
rm -f "$work"/r*.json "$work"/*.sqlite*

echo "== history show over 1,000 runs of 200 cases"
for batch in $(seq 0 9); do
    make_runs $((batch * 100)) 100 200
    "$OOMGATE" history add "$work"/r*.json --history "sqlite:$work/show.sqlite" >/dev/null
    rm -f "$work"/r*.json
done
ls -l "$work/show.sqlite"
farm-bench -n "$RUNS" -- "$OOMGATE" history show --history "sqlite:$work/show.sqlite" --last 1000

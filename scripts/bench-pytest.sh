#!/usr/bin/env bash
# A `[[pytest]]` suite against plain pytest: N one-line tests in one file,
# for two sizes, each `oomgate run` (its tests in the shared session, into
# a fresh out dir) paired with `python -m pytest -q` over the same tests
# with farm-bench (A B A B ...). The difference of the two sizes is the
# slope: what each test costs under oomgate and under pytest; the rest is
# the fixed cost (start-up, collection, reports).
#
#   scripts/bench-pytest.sh                       # target/release/oomgate, 400 vs 2000 tests
#   SIZES="400 2000 5000" RUNS=9 scripts/bench-pytest.sh
#   OOMGATE=/tmp/oomgate-old scripts/bench-pytest.sh
#
# Needs: farm-bench on PATH, python3, the pinned pytest of
# scripts/pytest-venv.sh (made if missing). Runs with --gpu off --no-baseline.
set -euo pipefail
cd "$(dirname "$0")/.."

OOMGATE=$(realpath "${OOMGATE:-target/release/oomgate}")
SIZES=${SIZES:-"400 2000"}
RUNS=${RUNS:-7}
python=$(scripts/pytest-venv.sh)
work=$(mktemp -d /tmp/oomgate-bench-pytest.XXXXXX)
trap 'rm -rf "$work"' EXIT

for n in $SIZES; do
    mkdir -p "$work/p$n/tests"
    python3 - "$work/p$n/tests/test_many.py" "$n" <<'EOF'
import sys
with open(sys.argv[1], "w") as f:
    for i in range(int(sys.argv[2])):
        f.write(f"def test_{i}():\n    assert {i} >= 0\n\n")
EOF
    printf '[suite]\nname = "bench-%s"\n\n[[pytest]]\npaths = ["tests"]\npython = "%s"\n' \
        "$n" "$python" >"$work/p$n/suite.toml"
    # One run of oomgate into a fresh out dir, which is removed after.
    cat >"$work/run-$n.sh" <<EOF
#!/bin/sh
out=\$(mktemp -d "$work/out.XXXXXX")
"$OOMGATE" run "$work/p$n/suite.toml" --out "\$out" --no-baseline --gpu off >/dev/null 2>&1
status=\$?
rm -rf "\$out"
# 0: every test passed.
exit \$status
EOF
    chmod +x "$work/run-$n.sh"
    echo "== $n tests: A = oomgate run (shared session), B = python -m pytest -q"
    farm-bench -n "$RUNS" --timeout 1800 \
        --vs "sh -c 'cd $work/p$n && exec $python -m pytest -q tests >/dev/null 2>&1'" \
        -- "$work/run-$n.sh"
done

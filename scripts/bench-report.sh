#!/usr/bin/env bash
# How long report.html takes to open for a suite of many tests: N one-line
# pytest tests (one of them failing) run once by oomgate, then headless
# Chromium loads, lays out and paints the page (a screenshot of its first
# screen), paired with farm-bench against the same browser on a one-line
# page: the difference is the page's own cost.
#
#   scripts/bench-report.sh                # target/release/oomgate, 5000 tests
#   N=8000 RUNS=9 scripts/bench-report.sh
#
# Needs: farm-bench and chromium on PATH, the pinned pytest of
# scripts/pytest-venv.sh (made if missing).
set -euo pipefail
cd "$(dirname "$0")/.."

OOMGATE=$(realpath "${OOMGATE:-target/release/oomgate}")
N=${N:-5000}
RUNS=${RUNS:-7}
python=$(scripts/pytest-venv.sh)
work=$(mktemp -d /tmp/oomgate-bench-report.XXXXXX)
trap 'rm -rf "$work"' EXIT

mkdir -p "$work/tests"
python3 - "$work/tests/test_many.py" "$N" <<'PY'
import sys
with open(sys.argv[1], "w") as f:
    f.write("import pytest\n\n@pytest.mark.parametrize('i', range(%d))\n" % int(sys.argv[2]))
    f.write("def test_one(i):\n    assert i != 7\n")
PY
printf '[suite]\nname = "report-%s"\n\n[[pytest]]\npaths = ["tests"]\npython = "%s"\n' \
    "$N" "$python" >"$work/suite.toml"
"$OOMGATE" run "$work/suite.toml" --out "$work/out" --no-baseline --gpu off >/dev/null 2>&1 || true
printf '<!doctype html><title>small</title><p>small</p>\n' >"$work/small.html"
ls -l "$work/out/report.html"
browser=(chromium --headless --no-sandbox --disable-gpu "--window-size=1280,900" "--screenshot=$work/shot.png")
farm-bench -n "$RUNS" --timeout 600 --vs "${browser[*]} file://$work/small.html" -- \
    "${browser[@]}" "file://$work/out/report.html"

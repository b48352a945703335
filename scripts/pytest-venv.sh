#!/usr/bin/env bash
# A virtual environment with pytest and pytest-xdist (from PyPI, pinned),
# for the tests of `[[pytest]]` suites (tests/pytest.rs). Idempotent: an environment that
# already has this pytest is kept. Prints the environment's python.
#
#   scripts/pytest-venv.sh [DIR]     # default: target/pytest-venv
#
# scripts/test calls it and hands the python to the tests as
# OOMGATE_TEST_PYTHON; without that variable the tests call it themselves.
set -euo pipefail
# Printed absolute, for whoever runs it from wherever.
dir=$(realpath -m -- "${1:-$(dirname "$0")/../target/pytest-venv}")
cd "$(dirname "$0")/.."

# Keep in step with docs/pytest.md's tested versions.
PYTEST_VERSION=8.3.4
PYTEST_XDIST_VERSION=3.6.1

python=$dir/bin/python
if [ -x "$python" ] && "$python" -c "import pytest, xdist, sys; sys.exit(pytest.__version__ != '$PYTEST_VERSION' or xdist.__version__ != '$PYTEST_XDIST_VERSION')" 2>/dev/null; then
    echo "$python"
    exit 0
fi
rm -rf "$dir.partial"
python3 -m venv "$dir.partial" >&2
"$dir.partial/bin/pip" install --quiet --disable-pip-version-check --no-input \
    "pytest==$PYTEST_VERSION" "pytest-xdist==$PYTEST_XDIST_VERSION" >&2
# venv writes absolute paths into its scripts; python itself is a link and
# runs from the new place, which is all the tests use.
rm -rf "$dir"
mv "$dir.partial" "$dir"
echo "$python"

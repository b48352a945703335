#!/usr/bin/env bash
# maturin, pinned, in a virtual environment of its own (from PyPI, a
# binary wheel). Idempotent: an environment that already has this maturin
# is kept. Prints the path of the maturin command.
#
#   scripts/maturin-venv.sh [DIR]     # default: target/maturin-venv
#
# Used by scripts/release-dry-run.sh and scripts/sizes.sh; release.yml
# runs the same version through maturin-action.
set -euo pipefail
cd "$(dirname "$0")/.."

# Keep in step with MATURIN_VERSION in .github/workflows/release.yml.
MATURIN_VERSION=1.16.0

dir=${1:-target/maturin-venv}
maturin=$dir/bin/maturin
if [ -x "$maturin" ] && [ "$("$maturin" --version 2>/dev/null)" = "maturin $MATURIN_VERSION" ]; then
    echo "$maturin"
    exit 0
fi
rm -rf "$dir.partial"
python3 -m venv "$dir.partial" >&2
"$dir.partial/bin/pip" install --quiet --disable-pip-version-check --no-input \
    --only-binary=:all: "maturin==$MATURIN_VERSION" >&2
rm -rf "$dir"
mv "$dir.partial" "$dir"
echo "$maturin"

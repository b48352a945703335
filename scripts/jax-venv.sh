#!/usr/bin/env bash
# A virtual environment with the real `jax` (CPU, from PyPI, pinned), for
# the probe's test against it (tests/probe.rs): on CPU, jax's
# `memory_stats()` is None, which the probe must handle and say.
# Idempotent: an environment that already has this jax is kept. Prints the
# environment's python.
#
#   scripts/jax-venv.sh [DIR]     # default: target/jax-venv
set -euo pipefail
dir=$(realpath -m -- "${1:-$(dirname "$0")/../target/jax-venv}")
cd "$(dirname "$0")/.."

# Keep in step with docs/probe.md.
JAX_VERSION=0.10.2

python=$dir/bin/python
if [ -x "$python" ] && "$python" -c "import jax, sys; sys.exit(jax.__version__ != '$JAX_VERSION')" 2>/dev/null; then
    echo "$python"
    exit 0
fi
rm -rf "$dir.partial"
python3 -m venv "$dir.partial" >&2
"$dir.partial/bin/pip" install --quiet --disable-pip-version-check --no-input \
    "jax==$JAX_VERSION" "jaxlib==$JAX_VERSION" >&2
rm -rf "$dir"
mv "$dir.partial" "$dir"
echo "$python"

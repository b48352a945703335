#!/usr/bin/env bash
# The test environment of examples/pytest/opt-einsum.toml: a virtual
# environment beside it with pytest and the package under test, pinned.
# Idempotent. Needs python3 with venv, and the package index.
set -euo pipefail
cd "$(dirname "$0")"
if [ ! -x .venv-opt-einsum/bin/python ]; then
    python3 -m venv .venv-opt-einsum
fi
.venv-opt-einsum/bin/pip install --quiet --disable-pip-version-check \
    pytest==8.3.4 opt_einsum==3.4.0 numpy==2.4.6
echo "ready: oomgate run $(pwd)/opt-einsum.toml"

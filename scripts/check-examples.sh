#!/usr/bin/env bash
# Checks the scale-out examples under examples/ (docs/scale-out.md), as
# .ci/run does:
#
#   - the shell scripts (Slurm) with `bash -n`, and shellcheck when it is
#     installed (.ci/run installs Debian's; without it, a warning);
#   - the Kubernetes manifests against the Kubernetes API's JSON schemas,
#     strictly (an unknown field is an error), for the oldest Kubernetes the
#     examples support and the newest the validator knows, with
#     kubernetes-validate from PyPI, pinned below, in a throwaway virtual
#     environment. It bundles the schemas: validating reads no network;
#   - what every shard of each engine runs, by running it
#     (scripts/check-examples.py): the partitions cover the suite once,
#     the merge takes every shard.
#
# The GitHub Actions example is linted with the repository's workflows by
# .ci/actionlint.cjs.
#
#   scripts/check-examples.sh            # uses target/release/oomgate, built if missing
#   OOMGATE=path/to/oomgate scripts/check-examples.sh
#
# Needs python3 with venv, and PyPI for the validator.
set -euo pipefail
cd "$(dirname "$0")/.."

# kubernetes-validate and what it needs, pinned; wheels only.
PACKAGES=(
    kubernetes-validate==1.37.0
    attrs==26.1.0
    importlib_resources==7.1.0
    jsonschema==4.26.0
    jsonschema-specifications==2025.9.1
    packaging==26.4
    PyYAML==6.0.4
    referencing==0.37.0
    rpds-py==2026.9.1
    typing_extensions==4.16.0
)
# The oldest Kubernetes the examples support (backoffLimitPerIndex is on
# by default from 1.29), and the newest the validator knows.
KUBERNETES_VERSIONS=(1.29.0 1.37.0)

started=$SECONDS
work=$(mktemp -d "${TMPDIR:-/tmp}/oomgate-examples.XXXXXX")
trap 'rm -rf "$work"' EXIT

scripts=(examples/slurm/*.sh examples/slurm/*.sbatch)
for script in "${scripts[@]}"; do
    bash -n "$script"
done
if command -v shellcheck >/dev/null 2>&1; then
    shellcheck "${scripts[@]}" scripts/check-examples.sh
    echo "shell: ${#scripts[@]} scripts pass bash -n and shellcheck"
else
    echo "warning: shellcheck is not installed: the example scripts pass bash -n only" >&2
fi

python3 -m venv "$work/venv"
"$work/venv/bin/pip" install --quiet --disable-pip-version-check --no-input \
    --only-binary=:all: --no-deps "${PACKAGES[@]}"
manifests=(examples/kubernetes/*.yaml)
for version in "${KUBERNETES_VERSIONS[@]}"; do
    "$work/venv/bin/kubernetes-validate" --strict --quiet -k "$version" "${manifests[@]}"
done
echo "kubernetes: ${#manifests[@]} manifests valid for Kubernetes ${KUBERNETES_VERSIONS[*]} (strict)"

oomgate=${OOMGATE:-target/release/oomgate}
if [ ! -x "$oomgate" ]; then
    cargo build --release --quiet --bin oomgate
    oomgate=target/release/oomgate
fi
"$work/venv/bin/python" scripts/check-examples.py "$oomgate"
echo "examples checked in $((SECONDS - started))s"

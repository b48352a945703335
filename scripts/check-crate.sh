#!/usr/bin/env bash
# Checks what `cargo install oomgate` gets from crates.io: the package
# holds the sources, the pytest plugin the binary embeds, the README and
# both licences, and nothing of the repository's tests, fixtures or CI;
# its manifest names the repository; and it builds on its own
# (`cargo publish --dry-run` packages it, then compiles the package in
# isolation; nothing is uploaded).
#
#   scripts/check-crate.sh [--allow-dirty]   # .ci/run, on a clean clone
#
# Needs cargo and the crates.io registry (the dry run resolves the
# dependencies as the registry would).
set -euo pipefail
cd "$(dirname "$0")/.."

allow=()
if [ "${1:-}" = "--allow-dirty" ]; then
    allow=(--allow-dirty)
fi

list=$(cargo package --list --quiet "${allow[@]}")
missing=()
for wanted in Cargo.toml Cargo.lock README.md LICENSE-MIT LICENSE-APACHE src/main.rs \
    python/oomgate_probe/__init__.py python/oomgate_probe/pytest_plugin.py; do
    grep -qxF "$wanted" <<<"$list" || missing+=("$wanted")
done
if [ ${#missing[@]} -gt 0 ]; then
    echo "error: the crate lacks ${missing[*]} (Cargo.toml's include)" >&2
    exit 1
fi
stray=$(grep -E '^(tests|fixtures|docs|examples|scripts|suites|target|oomgate-out|\.ci|\.github)/' <<<"$list" || true)
if [ -n "$stray" ]; then
    echo "error: the crate carries files that belong to the repository only:" >&2
    echo "$stray" >&2
    exit 1
fi
echo "cargo package --list: $(wc -l <<<"$list") files, none of the repository's tests, fixtures or CI"

repository=$(cargo metadata --no-deps --format-version 1 | python3 -c \
    'import json, sys; print(next(p for p in json.load(sys.stdin)["packages"] if p["name"] == "oomgate")["repository"] or "")')
if [ "$repository" != "https://github.com/oomgate/oomgate" ]; then
    echo "error: Cargo.toml's repository is '$repository'" >&2
    exit 1
fi

# The tests stay in the repository, so cargo says, one line each, that the
# package leaves them out: expected, and dropped from the output here.
expected='^warning: ignoring \(test\|bench\|example\) `'
if ! output=$(cargo publish --dry-run --locked "${allow[@]}" 2>&1); then
    grep -v "$expected" <<<"$output" >&2 || true
    echo "error: cargo publish --dry-run failed" >&2
    exit 1
fi
grep -v "$expected" <<<"$output" || true
echo "cargo publish --dry-run: the crate builds from its own files"

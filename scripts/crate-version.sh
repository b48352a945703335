#!/usr/bin/env bash
# The crate's version, as Cargo.toml gives it: the one place the release
# and packaging scripts read it from. Runs from anywhere.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -c 'import tomllib; print(tomllib.load(open("Cargo.toml", "rb"))["package"]["version"])'

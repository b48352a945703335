#!/usr/bin/env bash
# The release's steps for this machine's target, as release.yml runs them
# for each one, without publishing anything: the wheel built with maturin,
# checked installed (scripts/check-wheel.sh), its binary archived
# (scripts/release-archive.sh), and SHA256SUMS over both.
#
#   scripts/release-dry-run.sh [--dist] [OUTDIR]   # default OUTDIR: target/release-dry-run
#
# Without --dist the wheel is built with the `release` profile: the binary
# `cargo build --release` (.ci/run's quickstart step) already compiled is
# relinked with its symbols stripped, instead of building the `dist`
# profile (LTO) from scratch, which takes minutes. Release wheels use
# `dist` (pyproject.toml); both profiles compile the same code. Outside the
# manylinux container the wheel is tagged for this machine's glibc.
#
# Needs python3 (3.11 or later, for tomllib) with venv, cargo, and the
# PyPI registry for maturin (scripts/maturin-venv.sh).
set -euo pipefail
cd "$(dirname "$0")/.."

profile=release
if [ "${1:-}" = "--dist" ]; then
    profile=dist
    shift
fi
if [ $# -gt 1 ]; then
    echo "usage: scripts/release-dry-run.sh [--dist] [OUTDIR]" >&2
    exit 2
fi
out=${1:-target/release-dry-run}
case "$(uname -m)" in
    x86_64) target=x86_64-unknown-linux-gnu ;;
    aarch64) target=aarch64-unknown-linux-gnu ;;
    *) echo "error: releases are built for x86_64 and aarch64, not $(uname -m)" >&2; exit 2 ;;
esac

started=$SECONDS
rm -rf "$out"
mkdir -p "$out/dist" "$out/release"
maturin=$(scripts/maturin-venv.sh)
echo "building the wheel: $("$maturin" --version), $profile profile"
"$maturin" build --profile "$profile" --out "$out/dist"
wheel=$(find "$out/dist" -name 'oomgate-*.whl' -print -quit)

scripts/check-wheel.sh "$wheel"
scripts/release-archive.sh "$wheel" "$target" "$out/release"
cp "$wheel" "$out/release/"
(cd "$out/release" && sha256sum -- * > SHA256SUMS && cat SHA256SUMS)
echo "release dry run for $target passed in $((SECONDS - started)) s: $out/release"

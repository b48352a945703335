#!/usr/bin/env bash
# A release's binary archive, taken from its wheel: the very binary the
# wheel holds, with the README and the licences, as
# OUTDIR/oomgate-VERSION-TARGET.tar.gz (VERSION from Cargo.toml). Checks
# the binary is an ELF file for TARGET and, where this machine can run it,
# that the unpacked archive's `oomgate --version` says VERSION.
#
#   scripts/release-archive.sh WHEEL TARGET OUTDIR
#
# release.yml runs it on each target's wheel; scripts/release-dry-run.sh
# (.ci/run) on this machine's.
set -euo pipefail
if [ $# -ne 3 ]; then
    echo "usage: scripts/release-archive.sh WHEEL TARGET OUTDIR" >&2
    exit 2
fi
wheel=$(realpath -m -- "$1") target=$2 out=$(realpath -m -- "$3")
cd "$(dirname "$0")/.."
case "$target" in
    x86_64-*) arch=x86_64 ;;
    aarch64-*) arch=aarch64 ;;
    *) echo "error: unsupported target '$target' (x86_64-… or aarch64-…)" >&2; exit 2 ;;
esac
if [ ! -f "$wheel" ]; then
    echo "error: no wheel at '$wheel'" >&2
    exit 1
fi

version=$(scripts/crate-version.sh)
name="oomgate-$version-$target"
work=$(mktemp -d "${TMPDIR:-/tmp}/oomgate-archive.XXXXXX")
trap 'rm -rf "$work"' EXIT

mkdir -p "$work/$name" "$out"
# The wheel is a zip; python's zipfile needs no unzip on the machine. The
# ELF header says which machine the binary is for (e_machine: 62 x86_64,
# 183 aarch64).
python3 - "$wheel" "oomgate-$version.data/scripts/oomgate" "$work/$name/oomgate" "$arch" <<'PY'
import os, struct, sys, zipfile
wheel, member, dest, arch = sys.argv[1:]
with zipfile.ZipFile(wheel) as z:
    try:
        data = z.read(member)
    except KeyError:
        sys.exit(f"error: {wheel} has no {member} (is it this version's wheel?)")
if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
    sys.exit(f"error: {member} is not a 64-bit little-endian ELF file")
found = {62: "x86_64", 183: "aarch64"}.get(struct.unpack_from("<H", data, 18)[0], "another machine")
if found != arch:
    sys.exit(f"error: {member} is built for {found}, not {arch}")
with open(dest, "wb") as f:
    f.write(data)
os.chmod(dest, 0o755)
PY
cp README.md LICENSE-MIT LICENSE-APACHE "$work/$name/"
tar -C "$work" -czf "$out/$name.tar.gz" --owner=0 --group=0 --sort=name "$name"

if [ "$(uname -m)" = "$arch" ]; then
    mkdir "$work/unpacked"
    tar -C "$work/unpacked" -xzf "$out/$name.tar.gz"
    said=$("$work/unpacked/$name/oomgate" --version)
    if [ "$said" != "oomgate $version" ]; then
        echo "error: the archive's 'oomgate --version' says '$said'; Cargo.toml says $version" >&2
        exit 1
    fi
    echo "$out/$name.tar.gz: $said, $(du -k "$out/$name.tar.gz" | cut -f1) KiB"
else
    echo "$out/$name.tar.gz: an $arch binary (not run: this machine is $(uname -m))"
fi

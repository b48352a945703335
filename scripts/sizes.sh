#!/usr/bin/env bash
# Measures what a user downloads and installs: the binary of each profile,
# the wheel built from it, the release archive and the crate, and prints
# them as the Markdown table docs/performance.md and the README quote.
#
#   scripts/sizes.sh                 # sizes, from this checkout's target/
#   scripts/sizes.sh --from-scratch  # also each profile's build time, in a fresh target folder
#
# Needs cargo, python3 with venv, and PyPI for maturin
# (scripts/maturin-venv.sh). The dist build (fat LTO) is the slow part.
set -euo pipefail
cd "$(dirname "$0")/.."

scratch=false
if [ "${1:-}" = "--from-scratch" ]; then
    scratch=true
elif [ $# -gt 0 ]; then
    echo "usage: scripts/sizes.sh [--from-scratch]" >&2
    exit 2
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/oomgate-sizes.XXXXXX")
trap 'rm -rf "$work"' EXIT
target_dir=${CARGO_TARGET_DIR:-target}
if $scratch; then
    target_dir=$work/target
fi
export CARGO_TARGET_DIR=$target_dir
maturin=$(scripts/maturin-venv.sh)
mib() { python3 -c 'import os, sys; print(f"{os.path.getsize(sys.argv[1]) / 2**20:.1f} MiB")' "$1"; }
# The binary a wheel installs, as stored in it (uncompressed).
in_wheel() {
    python3 - "$1" <<'PY'
import sys, zipfile
sizes = [i.file_size for i in zipfile.ZipFile(sys.argv[1]).infolist() if i.filename.endswith(".data/scripts/oomgate")]
if len(sizes) != 1:
    sys.exit(f"{sys.argv[1]}: no oomgate binary in the wheel")
print(f"{sizes[0] / 2**20:.1f} MiB")
PY
}

# Each figure is read as soon as it exists: maturin rebuilds a profile's
# binary stripped, in place.
started=$SECONDS
cargo build --quiet --locked --release
release_took="$((SECONDS - started)) s"
release_binary=$(mib "$target_dir/release/oomgate")
started=$SECONDS
cargo build --quiet --locked --profile dist
dist_took="$((SECONDS - started)) s"
dist_binary=$(mib "$target_dir/dist/oomgate")

"$maturin" build --quiet --profile release --out "$work/wheel-release" >/dev/null 2>&1
"$maturin" build --quiet --profile dist --out "$work/wheel-dist" >/dev/null 2>&1
release_wheel=$(find "$work/wheel-release" -name '*.whl' -print -quit)
dist_wheel=$(find "$work/wheel-dist" -name '*.whl' -print -quit)
release_stripped=$(in_wheel "$release_wheel")
release_wheel_size=$(mib "$release_wheel")
dist_wheel_size=$(mib "$dist_wheel")
target=$(uname -m)-unknown-linux-gnu
scripts/release-archive.sh "$dist_wheel" "$target" "$work/archive" >/dev/null
archive=$(find "$work/archive" -name '*.tar.gz' -print -quit)
archive_size=$(mib "$archive")
cargo package --quiet --locked --allow-dirty --no-verify --target-dir "$work/package" 2>/dev/null
crate=$(find "$work/package/package" -name 'oomgate-*.crate' -print -quit)
crate_size=$(mib "$crate")

version=$(scripts/crate-version.sh)
echo "oomgate $version, $(rustc --version), $target, $(nproc) cores, $(date -u +%Y-%m-%d)"
echo
if $scratch; then
    echo "| build | binary | wheel | build from scratch |"
    echo "| --- | --- | --- | --- |"
    echo "| \`release\` (line tables; \`cargo install\`) | $release_binary | | $release_took |"
    echo "| \`release\`, stripped (\`maturin build --profile release\`, CI's check) | $release_stripped | $release_wheel_size | relink only |"
    echo "| \`dist\`: fat LTO, stripped (wheels, archives) | $dist_binary | $dist_wheel_size | $dist_took after \`release\` |"
else
    echo "| build | binary | wheel |"
    echo "| --- | --- | --- |"
    echo "| \`release\` (line tables; \`cargo install\`) | $release_binary | |"
    echo "| \`release\`, stripped (\`maturin build --profile release\`, CI's check) | $release_stripped | $release_wheel_size |"
    echo "| \`dist\`: fat LTO, stripped (wheels, archives) | $dist_binary | $dist_wheel_size |"
fi
echo
echo "release archive $(basename "$archive"): $archive_size; crate $(basename "$crate"): $crate_size"

#!/usr/bin/env bash
# Checks the Python wheel the way a user gets it: installed into a fresh
# virtual environment, `oomgate` prints the version Cargo.toml gives and
# runs the quickstart suite, `oomgate_probe` imports from the environment,
# and the binary carries no symbols or debug info.
#
#   scripts/check-wheel.sh WHEEL
#
# scripts/release-dry-run.sh (.ci/run) builds a wheel and checks it with
# this script; release.yml checks each target's wheel with it.
#
# Needs python3 (3.11 or later, for tomllib) with venv.
set -euo pipefail
if [ $# -ne 1 ]; then
    echo "usage: scripts/check-wheel.sh WHEEL" >&2
    exit 2
fi
wheel=$(realpath -m -- "$1")
cd "$(dirname "$0")/.."
repo=$(pwd)

started=$SECONDS
work=$(mktemp -d "${TMPDIR:-/tmp}/oomgate-wheel.XXXXXX")
trap 'rm -rf "$work"' EXIT
pip_flags=(--quiet --disable-pip-version-check --no-input)

version=$(scripts/crate-version.sh)

if [ ! -f "$wheel" ]; then
    echo "error: no wheel at '$wheel'" >&2
    exit 1
fi

echo "installing $(basename "$wheel") into a fresh virtual environment"
python3 -m venv "$work/venv"
# --no-index: everything the package needs is in the wheel.
"$work/venv/bin/pip" install "${pip_flags[@]}" --no-index "$wheel"
oomgate=$work/venv/bin/oomgate
python=$work/venv/bin/python

said=$("$oomgate" --version)
if [ "$said" != "oomgate $version" ]; then
    echo "error: 'oomgate --version' says '$said'; Cargo.toml says $version" >&2
    exit 1
fi
echo "oomgate --version: $said"

# From the temporary folder, so that nothing in the checkout can be the
# module that is imported.
(cd "$work" && "$python" - "$work/venv" "$version" <<'EOF'
import os, sys
import oomgate_probe
venv, version = sys.argv[1:]
where = os.path.realpath(oomgate_probe.__file__)
assert where.startswith(os.path.realpath(venv) + os.sep), f"oomgate_probe imported from {where}, not the environment"
assert oomgate_probe.__version__ == version, f"oomgate_probe.__version__ is {oomgate_probe.__version__}; Cargo.toml says {version}"
assert not oomgate_probe.enabled()
print(f"import oomgate_probe: {where}")
# The pytest plugin is registered for pytest to find (pytest itself is
# not in this environment: the entry point is read, not loaded).
from importlib.metadata import entry_points
found = [e for e in entry_points(group="pytest11") if e.name == "oomgate"]
assert [e.value for e in found] == ["oomgate_probe.pytest_plugin"], f"pytest11 entry points: {found}"
plugin = os.path.join(os.path.dirname(where), "pytest_plugin.py")
assert os.path.isfile(plugin), f"{plugin} is not in the wheel"
print("pytest11 entry point: oomgate = oomgate_probe.pytest_plugin")
# The project's home, as PyPI shows it.
from importlib.metadata import metadata
urls = dict(u.split(", ", 1) for u in metadata("oomgate").get_all("Project-URL") or [])
assert urls.get("Repository") == "https://github.com/oomgate/oomgate", f"Project-URL: {urls}"
print(f"Project-URL Repository: {urls['Repository']}")
EOF
)

# No .symtab and no .debug_* section: the binary is stripped. Rust keeps
# .debug_gdb_scripts (a few bytes naming gdb's pretty-printers) in
# stripped binaries too: it is loaded data, not debug info.
"$python" - "$oomgate" "$wheel" <<'EOF'
import os, struct, sys
path, wheel = sys.argv[1:]
with open(path, "rb") as f:
    elf = f.read()
assert elf[:4] == b"\x7fELF" and elf[4] == 2 and elf[5] == 1, "not a 64-bit little-endian ELF file"
shoff, = struct.unpack_from("<Q", elf, 0x28)
shentsize, shnum, shstrndx = struct.unpack_from("<HHH", elf, 0x3A)
def header(i):
    return struct.unpack_from("<IIQQQQ", elf, shoff + i * shentsize)
names_at = header(shstrndx)[4]
names = [elf[names_at + header(i)[0]:].split(b"\0", 1)[0].decode() for i in range(shnum)]
kept = [n for n in names if n == ".symtab" or (n.startswith(".debug") and n != ".debug_gdb_scripts")]
assert not kept, f"{path} is not stripped: {kept}"
mib = lambda p: os.path.getsize(p) / 2**20
print(f"stripped; binary {mib(path):.1f} MiB, wheel {mib(wheel):.1f} MiB")
EOF

# From another folder: the suite's paths resolve from the suite file. Not
# under GitHub Actions' eyes: .ci/run's own quickstart already reported.
echo "oomgate run suites/quickstart.toml (installed command)"
(cd "$work" && env -u GITHUB_ACTIONS -u GITHUB_STEP_SUMMARY \
    "$oomgate" run "$repo/suites/quickstart.toml" --out "$work/quickstart-out")

echo "wheel check passed in $((SECONDS - started)) s"

#!/usr/bin/env bash
# Real-GPU validation: run suites/gpu-smoke.toml through the real NVML and
# hold oomgate's figures to PyTorch's own. Needs an NVIDIA GPU, its driver,
# python3 with torch (CUDA) and a prebuilt oomgate: it never builds (the
# machine needs no Rust and no network). Finishes within 5 minutes.
#
#   OOMGATE=path/to/oomgate scripts/gpu-smoke.sh   # built elsewhere: cargo build --profile dist
#   scripts/gpu-smoke.sh                           # else target/dist/oomgate, target/release/oomgate, or oomgate on PATH
#   SMOKE_OUT=dir scripts/gpu-smoke.sh             # where the runs go (default: a new folder under /tmp)
#   PYTHON=/path/to/python3 scripts/gpu-smoke.sh   # the python with torch (default python3)
#
# Exit 0: every check held; 1: a check failed (each is printed, and why);
# 2: nothing to run (no oomgate binary, no torch with CUDA). What each check
# proves: docs/gpu-validation.md, where the printed table goes.
set -euo pipefail
cd "$(dirname "$0")/.."

oomgate="${OOMGATE:-}"
if [ -z "$oomgate" ]; then
    for candidate in target/dist/oomgate target/release/oomgate "$(command -v oomgate || true)"; do
        if [ -n "$candidate" ] && [ -x "$candidate" ]; then
            oomgate="$candidate"
            break
        fi
    done
fi
if [ -z "$oomgate" ] || [ ! -x "$oomgate" ]; then
    echo "gpu-smoke: no oomgate binary; build one where Rust is (cargo build --profile dist) and pass OOMGATE=path" >&2
    exit 2
fi
python="${PYTHON:-python3}"
if ! "$python" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
    echo "gpu-smoke: $python has no torch with a usable CUDA device" >&2
    exit 2
fi
# Never $OUT: runners use it for their own collection folder.
smoke_out="${SMOKE_OUT:-$(mktemp -d /tmp/oomgate-gpu-smoke.XXXXXX)}"
mkdir -p "$smoke_out"
echo "gpu-smoke: $("$oomgate" --version), writing to $smoke_out"

echo "== oomgate gpus"
timeout 60 "$oomgate" gpus
timeout 60 "$oomgate" gpus --json > "$smoke_out/gpus.json"
echo
echo "== nvidia-smi"
timeout 60 nvidia-smi --query-gpu=index,name,driver_version,memory.total,memory.used,accounting.mode,persistence_mode --format=csv || true
"$python" -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)"
echo

# The suite's commands run python3 from PATH: put the chosen one first.
bindir="$smoke_out/bin"
mkdir -p "$bindir"
python_path="$(command -v "$python")"
printf '#!/bin/sh\nexec "%s" "$@"\n' "$python_path" > "$bindir/python3"
chmod +x "$bindir/python3"
export PATH="$bindir:$PATH"

echo "== oomgate run suites/gpu-smoke.toml"
set +e
timeout 240 "$oomgate" run suites/gpu-smoke.toml --out "$smoke_out/run" --no-baseline
code=$?
set -e
echo "oomgate exit code: $code (1 expected: real-oom fails on purpose)"

# CUDA_VISIBLE_DEVICES as CUDA reads it, against torch's own count: a
# duplicate stops the list, -1 hides every device, a UUID names one.
uuid="$("$python" -c "import json,sys; print(json.load(open(sys.argv[1]))['devices'][0]['uuid'])" "$smoke_out/gpus.json")"
{
    printf '[suite]\nname = "gpu-smoke-visible"\ngpu = "auto"\n'
    for form in "0,0" "-1" "$uuid"; do
        printf '[[case]]\nname = "visible %s"\ncommand = ["python3", "-c", "import torch; print(\\"DEVICE_COUNT\\", torch.cuda.device_count())"]\nenv = { CUDA_VISIBLE_DEVICES = "%s" }\n' "$form" "$form"
    done
} > "$smoke_out/visible.toml"
echo "== CUDA_VISIBLE_DEVICES forms"
set +e
timeout 60 "$oomgate" run "$smoke_out/visible.toml" --out "$smoke_out/visible" --no-baseline
set -e

# A pytest session's per-test GPU figure: what each test added to torch's
# allocator (where this python has pytest; else said and skipped).
session_ran=0
if "$python" -c "import pytest" 2>/dev/null; then
    mkdir -p "$smoke_out/session/tests"
    cat > "$smoke_out/session/tests/test_gpu_session.py" <<'TESTS'
import torch

MIB = 1 << 20


def hold(mib):
    x = torch.empty(mib * MIB, dtype=torch.uint8, device="cuda")
    x.fill_(1)
    torch.cuda.synchronize()
    del x


def test_a_first():
    hold(256)


def test_b_from_the_cache():
    hold(128)


def test_c_grows():
    hold(1024)
TESTS
    printf '[suite]\nname = "gpu-smoke-session"\ngpu = "auto"\n[[pytest]]\npaths = ["tests"]\npython = "%s"\n' "$python_path" > "$smoke_out/session/suite.toml"
    echo "== a pytest session, per-test GPU figures"
    set +e
    timeout 120 "$oomgate" run "$smoke_out/session/suite.toml" --out "$smoke_out/session/out" --no-baseline
    set -e
    session_ran=1
else
    echo "gpu-smoke: $python has no pytest: the pytest session check is skipped"
fi

"$python" - "$smoke_out" "$code" "$session_ran" <<'PY'
import json, os, sys

out, code = sys.argv[1], int(sys.argv[2])
MIB = 1024 * 1024
GIB = 1024 * MIB
# What NVML counts beyond torch's reserve, per process: the CUDA context
# and library workspaces.
CONTEXT = (256 * MIB, 1536 * MIB)
STEADY = ("hold-1024mib", "hold-8192mib", "concurrent-x4")
problems, notes = [], []


def mib(v):
    return "unknown" if v is None else f"{v / MIB:,.0f} MiB"


def torch_lines(run, case):
    lines = []
    for inst in case["instances"]:
        path = os.path.join(run, inst["stdout_log"])
        if os.path.exists(path):
            for line in open(path, errors="replace"):
                if line.startswith("TORCH "):
                    lines.append(json.loads(line[6:]))
    return lines


if code not in (0, 1):
    problems.append(f"oomgate run exited {code}: an error of oomgate's own, not a verdict")
run = os.path.join(out, "run")
results = json.load(open(os.path.join(run, "results.json")))
accounting = any(d.get("accounting") for d in (results.get("gpu") or {}).get("devices", []))
print()
print("| case | status | NVML peak (method) | per device | torch max reserved (sum) | torch max allocated (sum) | (NVML − reserved) per process |")
print("| --- | --- | --- | --- | --- | --- | --- |")
for case in results["cases"]:
    name = case["id"]
    lines = torch_lines(run, case)
    # real-oom prints only its `before-fill` line: it never finishes a fill.
    done = [t for t in lines if t.get("phase") != "before-fill"] or lines
    processes = len({t["pid"] for t in done})
    reserved = sum(t["max_memory_reserved"] for t in done) if done else None
    allocated = sum(t["max_memory_allocated"] for t in done) if done else None
    peak, method = case.get("gpu_peak_bytes"), case.get("gpu_peak_method")
    devices = "; ".join(
        f"GPU {d['index']}: {mib(d['peak_bytes'])} {d['method']}"
        + (f", sampled {mib(d['sampled_peak_bytes'])}" if d.get("sampled_peak_bytes") is not None else "")
        + (f", accounting {mib(d['accounting_peak_bytes'])}" if d.get("accounting_peak_bytes") is not None else "")
        for d in case["gpu_devices"]
        if d["peak_bytes"]
    )
    per_process = (peak - reserved) / processes if None not in (peak, reserved) and processes else None
    print(f"| {name} | {case['status']} | {mib(peak)} ({method}) | {devices} | {mib(reserved)} | {mib(allocated)} | {mib(per_process)} |")

    expected = "failed" if name == "real-oom" else "passed"
    if case["status"] != expected:
        problems.append(f"{name}: {case['status']} (expected {expected}): {case.get('message')}")
    if name == "real-oom" and case.get("failure_kind") != "gpu-oom":
        problems.append(f"real-oom: failure_kind {case.get('failure_kind')}, not gpu-oom")
    # Every figure known: the gate never judges a guess.
    if peak is None:
        problems.append(f"{name}: the GPU figure is unknown ({method})")
    if case["host_peak_bytes"] is None:
        problems.append(f"{name}: the host figure is unknown")
    if not done:
        problems.append(f"{name}: the workload printed no TORCH line")
        continue
    if name in STEADY and not str(method).startswith("sampled@"):
        problems.append(f"{name}: steady memory measured by {method}, not sampled@")
    # With accounting off, sampling may miss short-spike's peak, which
    # torch's max_memory_reserved holds: informational, below.
    if peak is not None and peak < reserved and (name != "short-spike" or accounting):
        problems.append(f"{name}: NVML peak {mib(peak)} below torch's reserved peak {mib(reserved)}")
    # oomgate's own memory outside the allocator (the probe's reserved set
    # against NVML per process) against this independent one.
    if name in STEADY:
        outside = case.get("outside_allocator_bytes")
        if outside is None:
            problems.append(f"{name}: outside_allocator_bytes is unknown though the workload reported through the probe")
        elif per_process is not None and abs(outside / processes - per_process) > 64 * MIB:
            problems.append(
                f"{name}: outside the allocator {mib(outside)} for {processes} process(es), "
                f"against NVML − torch's reserved {mib(per_process)} a process"
            )
    if name in STEADY and per_process is not None and not CONTEXT[0] <= per_process <= CONTEXT[1]:
        problems.append(
            f"{name}: NVML − reserved is {mib(per_process)} a process, outside the CUDA context's "
            f"{mib(CONTEXT[0])}–{mib(CONTEXT[1])}"
        )
    if name == "short-spike":
        spike = 8192 * MIB
        caught = peak is not None and peak >= spike
        if accounting and not caught:
            problems.append(f"short-spike: accounting is on, yet the 8 GiB spike is missing ({mib(peak)}, {method})")
        elif not accounting:
            notes.append(
                f"short-spike: accounting off, the 20 ms spike was {'caught' if caught else 'missed'} by sampling "
                "(informational; turn accounting on, nvidia-smi -am 1, to require it)"
            )

# The snapshot's sites against the workload's known allocations and
# torch's own peak (fixtures/workloads/torch_sites.py).
for case in results["cases"]:
    if case["id"] != "sites":
        continue
    sites = case.get("allocation_sites")
    lines = torch_lines(run, case)
    if not sites:
        problems.append("sites: no allocation_sites in results.json (no snapshot read)")
        continue
    by_name = {s["site"].split(" ", 1)[-1]: s["bytes"] for s in sites["sites"]}
    print(f"\nsites: allocated at the peak {mib(sites['allocated_bytes'])} ({sites['from']}); "
          + ", ".join(f"{s['site']} {mib(s['bytes'])}" for s in sites["sites"][:5]))
    if lines and sites["allocated_bytes"] != lines[0]["max_memory_allocated"]:
        problems.append(f"sites: allocated peak {mib(sites['allocated_bytes'])}, torch max_memory_allocated {mib(lines[0]['max_memory_allocated'])}")
    for name, expected in (("load", 256 * MIB), ("attention", 512 * MIB)):
        if by_name.get(name) != expected:
            problems.append(f"sites: {name} holds {mib(by_name.get(name))} at the peak, expected {mib(expected)}")

visible = json.load(open(os.path.join(out, "visible", "results.json")))
print()
print("| CUDA_VISIBLE_DEVICES | devices oomgate measured | torch.cuda.device_count() |")
print("| --- | --- | --- |")
for case in visible["cases"]:
    form = case["env"].get("CUDA_VISIBLE_DEVICES")
    counts = []
    for inst in case["instances"]:
        path = os.path.join(out, "visible", inst["stdout_log"])
        if os.path.exists(path):
            counts += [int(l.split()[1]) for l in open(path) if l.startswith("DEVICE_COUNT ")]
    seen = len(case["gpu_devices"])
    print(f"| `{form}` | {seen} | {counts[0] if counts else 'none printed'} |")
    if not counts or counts[0] != seen:
        problems.append(f"CUDA_VISIBLE_DEVICES={form}: oomgate measured {seen} device(s), torch sees {counts}")

if sys.argv[3] == "1":
    session = json.load(open(os.path.join(out, "session", "out", "results.json")))
    print()
    print("| pytest test (one session) | method | figure | NVML of the session (sampled) |")
    print("| --- | --- | --- | --- |")
    # What each test added to torch's allocator: the first its 256 MiB,
    # the second its 128 MiB though the cache served it, the third its GiB.
    expected = {"test_a_first": 256 * MIB, "test_b_from_the_cache": 128 * MIB, "test_c_grows": 1024 * MIB}
    for case in session["cases"]:
        name = case["id"].split("::")[-1]
        figure, method = case.get("gpu_peak_bytes"), case.get("gpu_peak_method")
        sampled = sum(d.get("sampled_peak_bytes") or 0 for d in case.get("gpu_devices", []))
        print(f"| {name} | {method} | {mib(figure)} | {mib(sampled)} |")
        if method != "torch-allocator" or figure != expected.get(name):
            problems.append(f"session {name}: {mib(figure)} by {method}, expected {mib(expected.get(name))} by torch-allocator")
        elif sampled < figure + CONTEXT[0]:
            problems.append(f"session {name}: NVML's {mib(sampled)} is below the allocator's {mib(figure)} plus a CUDA context")

print()
env = results.get("gpu") or {}
print(
    f"driver {env.get('driver_version')}, CUDA {env.get('cuda_driver_version')}, process lists "
    f"{env.get('process_listing')}, accounting {'on' if accounting else 'off'}, "
    + ", ".join(f"{d['name']} {mib(d['total_bytes'])} (reserved {mib(d.get('reserved_bytes'))})" for d in env.get("devices", []))
)
for note in notes:
    print("note: " + note)
if problems:
    print("\nPROBLEMS:\n" + "\n".join(problems))
    sys.exit(1)
print("\ngpu-smoke: every check held")
PY

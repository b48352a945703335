#!/usr/bin/env bash
# Real-GPU validation: run suites/gpu-smoke.toml through the real NVML and
# compare oomgate's figures with PyTorch's own. Needs an NVIDIA GPU, its
# driver, and python3 with torch (CUDA). Finishes in well under 5 minutes.
#
#   scripts/gpu-smoke.sh            # builds oomgate (release), runs, prints a table
#   OOMGATE=path/to/oomgate scripts/gpu-smoke.sh
#
# Paste the printed table into docs/gpu-validation.md.
set -euo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-gpu-smoke-out}"
if [ -z "${OOMGATE:-}" ]; then
    cargo build --release --quiet
    OOMGATE=target/release/oomgate
fi

echo "== oomgate gpus"
"$OOMGATE" gpus
echo
echo "== nvidia-smi"
nvidia-smi --query-gpu=index,name,driver_version,memory.total,memory.used,accounting.mode --format=csv || true
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)" || true
echo

echo "== oomgate run suites/gpu-smoke.toml"
set +e
"$OOMGATE" run suites/gpu-smoke.toml --out "$out"
code=$?
set -e
echo "oomgate exit code: $code (1 expected: real-oom fails on purpose)"

python3 - "$out" <<'PY'
import json, os, sys
out = sys.argv[1]
results = json.load(open(os.path.join(out, "results.json")))
MIB = 1024 * 1024
def mib(v):
    return "unknown" if v is None else f"{v / MIB:,.0f} MiB"
print()
print(f"| case | status | NVML peak (method) | per device | torch max reserved (sum) | torch max allocated (sum) | NVML − reserved |")
print(f"| --- | --- | --- | --- | --- | --- | --- |")
problems = []
for case in results["cases"]:
    torch_lines = []
    for inst in case["instances"]:
        path = os.path.join(out, inst["stdout_log"])
        if os.path.exists(path):
            for line in open(path, errors="replace"):
                if line.startswith("TORCH "):
                    torch_lines.append(json.loads(line[6:]))
    done = [t for t in torch_lines if t.get("phase") != "before-fill"] or torch_lines
    reserved = sum(t["max_memory_reserved"] for t in done) if done else None
    allocated = sum(t["max_memory_allocated"] for t in done) if done else None
    peak = case.get("gpu_peak_bytes")
    devices = "; ".join(
        f"GPU {d['index']}: {mib(d['peak_bytes'])} {d['method']}"
        + (f", sampled {mib(d['sampled_peak_bytes'])}" if d.get("sampled_peak_bytes") is not None else "")
        + (f", accounting {mib(d['accounting_peak_bytes'])}" if d.get("accounting_peak_bytes") is not None else "")
        for d in case["gpu_devices"] if d["peak_bytes"]
    )
    gap = mib(peak - reserved) if peak is not None and reserved is not None else "-"
    print(f"| {case['id']} | {case['status']} | {mib(peak)} ({case.get('gpu_peak_method')}) | {devices} | {mib(reserved)} | {mib(allocated)} | {gap} |")
    expected = "failed" if case["id"] == "real-oom" else "passed"
    if case["status"] != expected:
        problems.append(f"{case['id']}: {case['status']} (expected {expected}): {case.get('message')}")
    if peak is not None and reserved is not None and peak < reserved:
        problems.append(f"{case['id']}: NVML peak below torch's reserved peak")
print()
env = results.get("gpu") or {}
print(f"driver {env.get('driver_version')}, CUDA {env.get('cuda_driver_version')}, "
      + ", ".join(f"{d['name']} {mib(d['total_bytes'])}" for d in env.get("devices", [])))
if problems:
    print("\nPROBLEMS:\n" + "\n".join(problems))
    sys.exit(1)
print("\ngpu-smoke: every figure consistent")
PY

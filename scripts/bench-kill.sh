#!/usr/bin/env bash
# How long a case outlives an oomgate killed with SIGKILL (a cancelled CI
# job). oomgate runs one case whose workload (fixtures/workloads/tree.py)
# starts a child, a grandchild that leaves the process group with setsid()
# and a double-forked daemon, all ignoring SIGTERM. Once all four have
# written their pids, oomgate gets SIGKILL, and their /proc entries are
# read every 0.5 ms until none of the four runs (an exited process that
# waits to be reaped holds no memory: it counts as gone). Repeated
# REPETITIONS times (default 20); prints each time, the median and the
# largest. See docs/performance.md.
#
#   scripts/bench-kill.sh
#   HOST_METHOD=procfs scripts/bench-kill.sh     # no memory cgroup: the tree alone
#   REPETITIONS=50 scripts/bench-kill.sh
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --quiet
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

python3 - "$work" "${REPETITIONS:-20}" "${HOST_METHOD:-auto}" <<'PY'
import os, signal, statistics, subprocess, sys, time

work, repetitions, host_method = sys.argv[1], int(sys.argv[2]), sys.argv[3]
tree = os.path.abspath("fixtures/workloads/tree.py")
oomgate = os.path.abspath("target/release/oomgate")
roles = ["parent", "child", "grandchild", "daemon"]


def running(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def wait_for_pids(pid_dir, deadline):
    pids = {}
    while len(pids) < len(roles):
        if time.monotonic() > deadline:
            sys.exit(f"the workload did not start: {sorted(pids)}")
        for role in roles:
            try:
                with open(os.path.join(pid_dir, f"{role}.pid")) as f:
                    pids[role] = int(f.read())
            except (OSError, ValueError):
                pass
        time.sleep(0.01)
    return pids


times = []
for repetition in range(repetitions):
    pid_dir = os.path.join(work, f"pids-{repetition}")
    os.mkdir(pid_dir)
    suite = os.path.join(work, "suite.toml")
    with open(suite, "w") as f:
        f.write(
            '[suite]\nname = "kill"\nsample_interval = "50ms"\n[[case]]\nname = "tree"\n'
            f'command = ["python3", "{tree}", "--pid-dir", "{pid_dir}", '
            '"--detach", "--daemon", "--ignore-term"]\n'
        )
    run = subprocess.Popen(
        [oomgate, "run", suite, "--out", os.path.join(work, "out"), "--host-method", host_method],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    pids = wait_for_pids(pid_dir, time.monotonic() + 60)
    killed_at = time.monotonic()
    run.send_signal(signal.SIGKILL)
    while any(running(pid) for pid in pids.values()):
        if time.monotonic() - killed_at > 60:
            sys.exit(f"survived oomgate for a minute: {pids}")
        time.sleep(0.0005)
    elapsed_ms = (time.monotonic() - killed_at) * 1000
    run.wait()
    times.append(elapsed_ms)
    print(f"run {repetition + 1:2d}: last process gone {elapsed_ms:7.1f} ms after SIGKILL")

print(
    f"host method {host_method}, {repetitions} runs: median {statistics.median(times):.1f} ms, "
    f"max {max(times):.1f} ms"
)
PY

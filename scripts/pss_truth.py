#!/usr/bin/env python3
"""An independent truth for oomgate's host figure: run a command and sample
the PSS of the whole tree (this process included, as oomgate sees it)
every 5 ms from /proc/PID/smaps_rollup, keeping the largest sum, and the
largest sum of its anonymous + shmem part. Written as JSON to OUT when the
command ends; the command's exit code is this process's. SIGTERM and
SIGINT are passed on to the command (a server being stopped).

    pss_truth.py OUT -- python3 workload.py ...
"""

import json
import os
import signal
import subprocess
import sys
import time

INTERVAL = 0.005


def tree(root):
    pending, seen = [root], []
    while pending:
        pid = pending.pop()
        seen.append(pid)
        try:
            for task in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{task}/children") as children:
                    pending.extend(int(child) for child in children.read().split())
        except OSError:
            pass
    return seen


def rollup(pid):
    fields = {}
    try:
        with open(f"/proc/{pid}/smaps_rollup") as text:
            for line in text:
                parts = line.split()
                if len(parts) == 3 and parts[0].endswith(":"):
                    fields[parts[0][:-1]] = int(parts[1]) * 1024
    except OSError:
        return None
    return fields


def main():
    out, command = sys.argv[1], sys.argv[sys.argv.index("--") + 1 :]
    child = subprocess.Popen(command)
    # A server is stopped by a signal to this process: passed on, and the
    # tree sampled until the command has ended.
    for stop in (signal.SIGTERM, signal.SIGINT):
        signal.signal(stop, lambda number, _frame: child.send_signal(number))
    peak = anon_peak = samples = 0
    while child.poll() is None:
        pss = anon = 0
        for pid in tree(os.getpid()):
            fields = rollup(pid)
            if fields:
                pss += fields.get("Pss", 0)
                anon += fields.get("Pss_Anon", 0) + fields.get("Pss_Shmem", 0)
        peak, anon_peak, samples = max(peak, pss), max(anon_peak, anon), samples + 1
        time.sleep(INTERVAL)
    with open(out, "w") as file:
        json.dump({"pss_peak_bytes": peak, "anon_shmem_peak_bytes": anon_peak, "samples": samples}, file)
    return child.returncode


if __name__ == "__main__":
    sys.exit(main())

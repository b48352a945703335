#!/usr/bin/env python3
"""What one PSS/VmHWM sweep of oomgate's host sampler costs.

oomgate reads /proc/PID/smaps_rollup (PSS: a walk of the process's page
tables) and /proc/PID/status (VmHWM) of every process of a case, paced so
that sweeps stay within a share of one core (see docs/host-measurement.md).
This script times the same reads (open, read, close: as oomgate does them)
for two shapes, so the pacing can be checked against the kernel's real cost:

    scripts/bench-pss.py trees       # 1, 200 and 1000 sleeping processes
    scripts/bench-pss.py big --touch-gib 8 --map-gib 64
                                     # one process with 64 GiB of a file mapped
                                     # (every 64th page read) and 8 GiB touched

Standard library only; figures include Python's own overhead per read
(a few microseconds), so they are an upper bound.
"""

import argparse
import mmap
import os
import statistics
import subprocess
import sys
import time

GIB = 1024 ** 3


def read(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        while os.read(fd, 65536):
            pass
    finally:
        os.close(fd)


def sweep(pids):
    start = time.perf_counter()
    for pid in pids:
        read(f"/proc/{pid}/smaps_rollup")
        read(f"/proc/{pid}/status")
    return time.perf_counter() - start


def trees(args):
    print(f"{'processes':>10} {'sweep ms (median of ' + str(args.repeat) + ')':>26} {'per process us':>15}")
    for count in (1, 200, 1000):
        sleepers = [subprocess.Popen(["sleep", "600"]) for _ in range(count)]
        try:
            time.sleep(0.5)
            pids = [p.pid for p in sleepers]
            times = [sweep(pids) for _ in range(args.repeat)]
            median = statistics.median(times)
            print(f"{count:>10} {median * 1000:>26.2f} {median / count * 1e6:>15.1f}")
        finally:
            for p in sleepers:
                p.kill()
            for p in sleepers:
                p.wait()


def big(args):
    import tempfile

    # The mapping: a sparse file (no memory committed), read through so its
    # page tables are filled; the touched part: anonymous memory written.
    sparse = tempfile.TemporaryFile()
    sparse.truncate(args.map_gib * GIB)
    mapped = mmap.mmap(sparse.fileno(), args.map_gib * GIB, prot=mmap.PROT_READ)
    for offset in range(0, args.map_gib * GIB, 64 * mmap.PAGESIZE):
        mapped[offset]
    region = mmap.mmap(-1, args.touch_gib * GIB)
    for offset in range(0, args.touch_gib * GIB, mmap.PAGESIZE):
        region[offset] = 1
    pid = os.getpid()
    times = []
    for _ in range(args.repeat):
        start = time.perf_counter()
        read(f"/proc/{pid}/smaps_rollup")
        times.append(time.perf_counter() - start)
    status_times = []
    for _ in range(args.repeat):
        start = time.perf_counter()
        read(f"/proc/{pid}/status")
        status_times.append(time.perf_counter() - start)
    print(f"{args.map_gib} GiB mapped, {args.touch_gib} GiB touched: "
          f"smaps_rollup {statistics.median(times) * 1000:.2f} ms, "
          f"status {statistics.median(status_times) * 1e6:.1f} us (medians of {args.repeat})")
    region.close()
    mapped.close()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("shape", choices=["trees", "big"])
    parser.add_argument("--repeat", type=int, default=9)
    parser.add_argument("--touch-gib", type=int, default=8)
    parser.add_argument("--map-gib", type=int, default=64)
    args = parser.parse_args()
    {"trees": trees, "big": big}[args.shape](args)
    return 0


if __name__ == "__main__":
    sys.exit(main())

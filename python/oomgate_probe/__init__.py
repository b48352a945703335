"""Report training progress and allocator figures to oomgate.

Dependency-free: it writes JSON lines to the file oomgate names in
``$OOMGATE_METRICS`` and does nothing when run outside oomgate. With torch
and CUDA available it adds the allocator's figures to every step.

    import oomgate_probe as probe

    with probe.guard():                 # on CUDA OOM: memory_summary() into the case folder
        for step, batch in enumerate(loader):
            probe.step("forward", step=step)
            loss = model(batch)
            probe.step("backward", step=step)
            loss.backward()
            probe.metric("tokens_per_s", tokens / elapsed)

With ``OOMGATE_SNAPSHOT=1``, ``guard()`` also records the allocation
history (``torch.cuda.memory._record_memory_history``) and dumps a snapshot
pickle into the case folder on OOM or when the block ends, for PyTorch's
memory visualiser (https://pytorch.org/memory_viz).
"""

import contextlib
import json
import os
import sys
import time

__all__ = ["step", "metric", "guard", "enabled"]
# oomgate's version (Cargo.toml); scripts/check-wheel.sh checks they match.
__version__ = "0.1.0"

_path = os.environ.get("OOMGATE_METRICS")
_out = os.environ.get("OOMGATE_OUT")
_step = 0


def enabled():
    """Whether oomgate is listening."""
    return bool(_path)


def _write(record):
    if not _path:
        return
    line = json.dumps(record, separators=(",", ":"))
    # One write per line, appended: lines from several threads or processes
    # do not interleave inside a line.
    fd = os.open(_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


def _torch():
    """torch, if it is already imported and has CUDA; never imports it."""
    torch = sys.modules.get("torch")
    try:
        if torch is not None and torch.cuda.is_available():
            return torch
    except Exception:  # a broken CUDA setup must not break the workload
        pass
    return None


def step(phase=None, step=None, **figures):
    """Report the start of a step (and its phase). Allocator figures come
    from torch.cuda when available; pass ``allocated=``, ``reserved=`` (bytes)
    to report your own."""
    global _step
    if step is None:
        step = _step
    _step = step + 1
    record = {"event": "step", "step": int(step), "time": time.time()}
    if phase is not None:
        record["phase"] = str(phase)
    torch = _torch()
    if torch is not None:
        try:
            record["allocated"] = int(torch.cuda.memory_allocated())
            record["reserved"] = int(torch.cuda.memory_reserved())
            record["peak_allocated"] = int(torch.cuda.max_memory_allocated())
            record["peak_reserved"] = int(torch.cuda.max_memory_reserved())
        except Exception:
            pass
    for key in ("allocated", "reserved", "peak_allocated", "peak_reserved"):
        if key in figures:
            record[key] = int(figures[key])
    _write(record)


def metric(name, value):
    """Report a custom metric (throughput, loss, accuracy)."""
    _write({"event": "metric", "name": str(name), "value": float(value)})


def _is_oom(error):
    torch = sys.modules.get("torch")
    oom_type = getattr(torch, "OutOfMemoryError", None) if torch else None
    if oom_type is None and torch is not None:
        oom_type = getattr(getattr(torch, "cuda", None), "OutOfMemoryError", None)
    if oom_type is not None and isinstance(error, oom_type):
        return True
    return "out of memory" in str(error).lower()


def _folder():
    return _out or os.getcwd()


@contextlib.contextmanager
def guard():
    """Run a block; on a CUDA out-of-memory error, write
    ``torch.cuda.memory_summary()`` to ``memory_summary.txt`` in the case
    folder (and, with ``OOMGATE_SNAPSHOT=1``, a snapshot pickle), then
    re-raise. The error is never swallowed."""
    torch = _torch()
    snapshot = os.environ.get("OOMGATE_SNAPSHOT") == "1" and torch is not None
    if snapshot:
        try:
            torch.cuda.memory._record_memory_history(max_entries=100000)
        except Exception as error:
            print(f"oomgate_probe: cannot record allocation history: {error}", file=sys.stderr)
            snapshot = False
    try:
        yield
    except BaseException as error:
        if _is_oom(error) and torch is not None:
            try:
                with open(os.path.join(_folder(), "memory_summary.txt"), "w") as f:
                    f.write(torch.cuda.memory_summary())
            except Exception as failure:
                print(f"oomgate_probe: cannot write memory_summary: {failure}", file=sys.stderr)
            if snapshot:
                _dump_snapshot(torch, "memory_snapshot_oom.pickle")
                snapshot = False
        raise
    finally:
        if snapshot:
            _dump_snapshot(torch, "memory_snapshot.pickle")


def _dump_snapshot(torch, name):
    try:
        torch.cuda.memory._dump_snapshot(os.path.join(_folder(), name))
    except Exception as error:
        print(f"oomgate_probe: cannot dump the memory snapshot: {error}", file=sys.stderr)

"""Report training progress and allocator figures to oomgate.

Dependency-free: it writes JSON lines to the file oomgate names in
``$OOMGATE_METRICS`` and does nothing when run outside oomgate. With torch
and CUDA available it adds the allocator's figures to every step; with
jax imported (and no CUDA torch), JAX's own (``device.memory_stats()``),
saying once when its devices have none (CPU) or when JAX preallocates
the GPU (what NVML then shows is the pool, not the use).

    import oomgate_probe as probe

    with probe.guard():                 # on CUDA OOM: memory_summary() into the case folder
        for step, batch in enumerate(loader):
            probe.step("forward", step=step)
            loss = model(batch)
            probe.step("backward", step=step)
            loss.backward()
            probe.metric("tokens_per_s", tokens / elapsed)

With ``OOMGATE_SNAPSHOT`` set (``1``, ``exit``, ``oom``), ``guard()`` also
records the allocation history (``record_memory()``, which a workload may
call itself) and dumps snapshot pickles into the case folder, at the end
and on OOM: oomgate reads them into allocation sites (which code holds the
memory at the peak), and PyTorch's memory visualiser
(https://pytorch.org/memory_viz) opens them.
"""

import atexit
import contextlib
import json
import os
import sys
import time

__all__ = ["step", "metric", "guard", "enabled", "record_memory"]
# oomgate's version (Cargo.toml); scripts/check-wheel.sh checks they match.
__version__ = "0.1.0"

_path = os.environ.get("OOMGATE_METRICS")
# The rank of a distributed worker (torchrun, accelerate, mpirun, srun):
# its step lines say which rank they are of.
_rank = next(
    (
        int(os.environ[name])
        for name in ("RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID", "LOCAL_RANK")
        if os.environ.get(name, "").strip().isdigit()
    ),
    None,
)
_out = os.environ.get("OOMGATE_OUT")
_step = 0
# What was said about the allocator's figures, said once.
_said = set()


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


def _jax():
    """jax, if it is already imported; never imports it."""
    return sys.modules.get("jax")


def _jax_figures(jax):
    """JAX's allocator figures, summed over this process's devices, and a
    note worth saying: why there are none (a CPU's ``memory_stats()`` is
    None), or what preallocation does to NVML's figure. JAX cannot reset
    its peak: ``peak_allocated`` is the peak since the process started."""
    try:
        devices = list(jax.local_devices())
        stats = [d.memory_stats() for d in devices]
    except Exception as error:  # a broken backend must not break the workload
        return {}, f"jax: the devices' memory_stats() failed ({type(error).__name__}): no allocator figures"
    usable = [s for s in stats if s]
    if not usable:
        platforms = ", ".join(sorted({str(getattr(d, "platform", "?")) for d in devices})) or "no"
        return {}, f"jax: memory_stats() is None on its {platforms} devices: no allocator figures (JAX keeps them for GPUs and TPUs)"

    def total(*keys):
        found = [next((s[k] for k in keys if s.get(k) is not None), None) for s in usable]
        return int(sum(found)) if found and all(v is not None for v in found) else None

    figures = {
        "allocated": total("bytes_in_use"),
        "peak_allocated": total("peak_bytes_in_use"),
        "reserved": total("pool_bytes", "bytes_reserved"),
        "peak_reserved": total("peak_pool_bytes", "peak_bytes_reserved"),
    }
    figures = {k: v for k, v in figures.items() if v is not None}
    preallocate = os.environ.get("XLA_PYTHON_CLIENT_PREALLOCATE", "").strip().lower()
    fraction = os.environ.get("XLA_PYTHON_CLIENT_MEM_FRACTION")
    if preallocate in ("false", "0"):
        note = "jax: XLA_PYTHON_CLIENT_PREALLOCATE=false: JAX allocates on demand, so NVML's figure follows its use"
    else:
        share = f"{fraction} of" if fraction else "75% of"
        note = (
            f"jax: XLA_PYTHON_CLIENT_PREALLOCATE is {'set to ' + repr(preallocate) if preallocate else 'unset'}: "
            f"JAX preallocates {share} each GPU, so NVML's figure is that pool, not the use; "
            "the probe's allocated figures are JAX's own (peaks since the process started: JAX cannot reset them)"
        )
    return figures, note


def step(
    phase=None,
    step=None,
    *,
    allocated=None,
    reserved=None,
    peak_allocated=None,
    peak_reserved=None,
):
    """Report the start of a step (and its phase).

    ``step`` counts on from the last one when left out. The allocator's
    figures (bytes) come from torch.cuda when it is available; pass
    ``allocated=``, ``reserved=``, ``peak_allocated=``, ``peak_reserved=``
    to report your own (another framework, or the figures of a region you
    measured), which replace torch's. ``peak_allocated`` and
    ``peak_reserved`` are what ``limits`` on ``probe.peak_allocated`` and
    ``probe.peak_reserved`` judge.
    """
    global _step
    if step is None:
        step = _step
    _step = step + 1
    # The pid: oomgate sets the allocator's reserved memory against the
    # GPU memory NVML counts for this process (memory outside the
    # allocator: the CUDA context, NCCL, CUDA graphs).
    record = {"event": "step", "step": int(step), "time": time.time(), "pid": os.getpid()}
    if phase is not None:
        record["phase"] = str(phase)
    if _rank is not None:
        record["rank"] = _rank
    torch = _torch()
    jax = _jax() if torch is None else None
    if torch is not None:
        try:
            record["allocated"] = int(torch.cuda.memory_allocated())
            record["reserved"] = int(torch.cuda.memory_reserved())
            record["peak_allocated"] = int(torch.cuda.max_memory_allocated())
            record["peak_reserved"] = int(torch.cuda.max_memory_reserved())
            record["allocator"] = "torch"
        except Exception:
            pass
    elif jax is not None:
        figures, note = _jax_figures(jax)
        record.update(figures)
        record["allocator"] = "jax"
        if note and note not in _said:
            _said.add(note)
            record["allocator_note"] = note
    given = {
        "allocated": allocated,
        "reserved": reserved,
        "peak_allocated": peak_allocated,
        "peak_reserved": peak_reserved,
    }
    for key, value in given.items():
        if value is not None:
            record[key] = int(value)
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


# What OOMGATE_SNAPSHOT asks for: snapshots at the end ("exit"; "peak" is
# the same file, whose trace oomgate replays to the peak), on a CUDA
# out-of-memory error ("oom"), or both ("1").
_SNAPSHOT_MODES = {"1": {"exit", "oom"}, "exit": {"exit"}, "peak": {"exit"}, "oom": {"oom"}}
_recording = None  # the set of modes once record_memory() started
_dumped = set()


def _snapshot_name(kind):
    """``memory_snapshot.pickle`` / ``memory_snapshot_oom.pickle``, one per
    rank (``memory_snapshot.rank-3.pickle``) when ``RANK`` is set."""
    base = "memory_snapshot_oom" if kind == "oom" else "memory_snapshot"
    rank = os.environ.get("RANK")
    if rank is not None and rank.strip().isdigit():
        return "%s.rank-%d.pickle" % (base, int(rank))
    return base + ".pickle"


def record_memory(max_entries=100000, when=None):
    """Record the allocation history (``torch.cuda.memory._record_memory_history``)
    and write torch memory snapshots into the case folder, which oomgate
    reads into allocation sites: ``memory_snapshot.pickle`` when the
    process exits (or ``guard()`` ends), ``memory_snapshot_oom.pickle`` on a
    CUDA out-of-memory error. ``when`` is ``"exit"``, ``"oom"`` or ``"1"``
    (both); by default ``$OOMGATE_SNAPSHOT``, else both. A no-op without
    torch and CUDA. Returns whether recording started."""
    global _recording
    if _recording is not None:
        return True
    when = when or os.environ.get("OOMGATE_SNAPSHOT") or "1"
    modes = _SNAPSHOT_MODES.get(str(when).strip().lower())
    if modes is None:
        print(f"oomgate_probe: OOMGATE_SNAPSHOT={when!r} is not 1, exit, peak or oom; no snapshot", file=sys.stderr)
        return False
    torch = _torch()
    if torch is None:
        return False
    try:
        torch.cuda.memory._record_memory_history(max_entries=int(max_entries))
    except Exception as error:
        print(f"oomgate_probe: cannot record allocation history: {error}", file=sys.stderr)
        return False
    _recording = modes
    if "oom" in modes:
        def observer(device, alloc, device_alloc, device_free):
            _dump_snapshot(torch, "oom")
        try:
            torch._C._cuda_attach_out_of_memory_observer(observer)
        except Exception as error:
            print(f"oomgate_probe: cannot watch for out-of-memory errors: {error}", file=sys.stderr)
    if "exit" in modes:
        atexit.register(lambda: _dump_snapshot(torch, "exit"))
    return True


@contextlib.contextmanager
def guard():
    """Run a block; on a CUDA out-of-memory error, write
    ``torch.cuda.memory_summary()`` to ``memory_summary.txt`` in the case
    folder, then re-raise: the error is never swallowed. With
    ``OOMGATE_SNAPSHOT`` set, it starts ``record_memory()`` and writes the
    end-of-run snapshot when the block ends."""
    torch = _torch()
    if os.environ.get("OOMGATE_SNAPSHOT") and torch is not None:
        record_memory()
    try:
        yield
    except BaseException as error:
        if _is_oom(error) and torch is not None:
            try:
                with open(os.path.join(_folder(), "memory_summary.txt"), "w") as f:
                    f.write(torch.cuda.memory_summary())
            except Exception as failure:
                print(f"oomgate_probe: cannot write memory_summary: {failure}", file=sys.stderr)
            if _recording and "oom" in _recording:
                _dump_snapshot(torch, "oom")
        raise
    finally:
        if _recording and "exit" in _recording:
            _dump_snapshot(torch, "exit")


def _dump_snapshot(torch, kind):
    """Write the snapshot of this kind, once per kind (an OOM observer and
    guard() both see the same error; guard() and atexit the same end)."""
    if kind in _dumped:
        return
    _dumped.add(kind)
    try:
        torch.cuda.memory._dump_snapshot(os.path.join(_folder(), _snapshot_name(kind)))
    except Exception as error:
        print(f"oomgate_probe: cannot dump the memory snapshot: {error}", file=sys.stderr)

"""oomgate's pytest plugin: the ``oomgate`` marker, and its check without oomgate.

    @pytest.mark.oomgate(host="2 GiB", gpu="8 GiB", gpu_fraction=0.9,
                         gpu_left="64 MiB", timeout="5m", gpus=2, repeat=3,
                         tolerance={"relative": "5%"}, isolate=True)
    def test_forward(): ...

The marker may stand on a test, a class or a module (``pytestmark``); the
closest wins, keyword by keyword. It does three things:

- **Registers the marker**, so ``pytest --strict-markers`` accepts it.
- **Under oomgate** (a suite's ``[[pytest]]``), oomgate collects the tests
  through this plugin (``OOMGATE_COLLECT`` names the file the collection is
  written to, as JSON) and judges each test by its own measurements;
  nothing is checked in-process then. A test runs either in a shared
  session or in a process of its own (isolated).
- **In a shared session** (``OOMGATE_SESSION``: two descriptors, oomgate's
  commands and this plugin's answers), the plugin takes over pytest's run
  loop: it says it is ready once pytest has collected, then runs each test
  oomgate names, one at a time, and answers with its outcome. Between two
  tests it waits on oomgate, so oomgate reads the process's memory from
  outside (``/proc``) while nothing runs: the kernel's high-water mark,
  reset by oomgate at each test's start. Where the process has imported
  torch and initialised CUDA, the plugin resets the allocator's peaks
  before each test (``torch.cuda.reset_peak_memory_stats``) and answers
  with each device's ``max_memory_reserved`` and ``max_memory_allocated``
  after it, and what the allocator held at its start: NVML's figure of the
  session holds what earlier tests left in the allocator's cache, so
  oomgate judges the test by what it added to these.
- **Under oomgate, reports each test's outcome** as pytest words it
  (passed, failed, error, skipped, xfailed, xpassed, with pytest's short
  message) as one line of ``OOMGATE_METRICS``, for oomgate to say what
  failed (an assertion is not a crash). The line informs; the test's exit
  status decides.
- **Under plain pytest** (no ``OOMGATE_METRICS``), a test marked with a
  ``gpu`` budget is checked in-process: ``torch.cuda.reset_peak_memory_stats()``
  before it, ``torch.cuda.max_memory_reserved()`` (every visible device,
  summed) after it. The CUDA context (hundreds of MiB per device) is not in
  that figure, so this catches gross breaches only; oomgate's NVML figure is
  the gate.

It ships in the ``oomgate`` wheel as ``oomgate_probe.pytest_plugin`` and is
registered through ``[project.entry-points.pytest11]``. oomgate itself runs
pytest with its own copy of this file (``-p oomgate_pytest``), so a test
environment without the wheel works as well. The file imports nothing
outside the standard library and pytest.
"""

import json
import math
import os
import re
import sys

import pytest

MARKER = "oomgate"
# Keywords the marker takes; oomgate checks their values.
KEYWORDS = ("host", "gpu", "gpu_fraction", "gpu_left", "gpu_rank", "gpu_outside_allocator", "timeout", "gpus", "repeat", "tolerance", "creep", "isolate")

_UNITS = {
    "": 1,
    "b": 1,
    "k": 1000,
    "kb": 1000,
    "m": 1000**2,
    "mb": 1000**2,
    "g": 1000**3,
    "gb": 1000**3,
    "t": 1000**4,
    "tb": 1000**4,
    "kib": 1024,
    "mib": 1024**2,
    "gib": 1024**3,
    "tib": 1024**4,
}


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "oomgate(host=, gpu=, gpu_fraction=, gpu_left=, gpu_rank=, gpu_outside_allocator=, timeout=, gpus=, repeat=, tolerance=, creep=, isolate=): "
        "memory budgets and case settings for oomgate (https://github.com/oomgate/oomgate)",
    )


def _jsonable(value):
    """A marker value as JSON, or a note that it cannot be one."""
    if isinstance(value, float) and not math.isfinite(value):
        # JSON has no NaN or infinity: named, as any value it cannot hold.
        return {"__unsupported__": "%r (not a finite number)" % value}
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    return {"__unsupported__": repr(value)}


def _level(node):
    if isinstance(node, pytest.Module):
        return "module"
    if isinstance(node, pytest.Class):
        return "class"
    if isinstance(node, pytest.Item):
        return "function"
    return "package"


def _markers(item):
    """The item's oomgate markers, closest first, with where each stands."""
    found = []
    for node, mark in item.iter_markers_with_node(name=MARKER):
        found.append(
            {
                "level": _level(node),
                "node": node.nodeid,
                "args": [_jsonable(a) for a in mark.args],
                "kwargs": {k: _jsonable(v) for k, v in mark.kwargs.items()},
            }
        )
    return found


def _test(item, invocation_dir):
    """What oomgate needs of one collected test."""
    path = str(getattr(item, "path", None) or item.fspath)
    relative = os.path.relpath(path, invocation_dir)
    rest = item.nodeid.split("::", 1)[1] if "::" in item.nodeid else ""
    module = item.nodeid.split("::", 1)[0]
    cls = item.getparent(pytest.Class)
    location = item.location
    return {
        "nodeid": item.nodeid,
        # The argument that runs this test from the invocation directory.
        "arg": relative + ("::" + rest if rest else ""),
        "file": relative,
        "module_nodeid": module,
        "line": None if location[1] is None else location[1] + 1,
        "class": None if cls is None else cls.name,
        "name": item.name,
        "markers": _markers(item),
    }


def _xdist_workers(config):
    """The workers pytest-xdist was asked for (``-n``, from the project's
    addopts or the block's args), when it is loaded and asked for any."""
    if not config.pluginmanager.hasplugin("xdist"):
        return None
    workers = getattr(config, "_oomgate_xdist_workers", None)
    if workers is None:
        workers = getattr(config.option, "numprocesses", None)
    if workers in (None, 0, "0"):
        return None
    return str(workers)


def pytest_load_initial_conftests(early_config, parser, args):
    # A shared session is one process oomgate measures: pytest-xdist's
    # workers (``-n`` from the project's addopts or the block's args) would
    # run the tests elsewhere. ``-n 0`` after every other argument wins
    # when the options are parsed, which is after this hook; what was
    # asked is still reported with the collection.
    if not os.environ.get("OOMGATE_SESSION") or not early_config.pluginmanager.hasplugin("xdist"):
        return
    asked = getattr(early_config.known_args_namespace, "numprocesses", None)
    if asked not in (None, 0, "0"):
        early_config._oomgate_xdist_workers = asked
        args.extend(["-n", "0"])


def pytest_collection_finish(session):
    target = os.environ.get("OOMGATE_COLLECT")
    if not target:
        return
    invocation_dir = str(session.config.invocation_params.dir)
    document = {
        "pytest": pytest.__version__,
        "python": sys.version.split()[0],
        "rootdir": str(session.config.rootpath),
        "invocation_dir": invocation_dir,
        "xdist_workers": _xdist_workers(session.config),
        "tests": [_test(item, invocation_dir) for item in session.items],
    }
    with open(target, "w", encoding="utf-8") as out:
        json.dump(document, out, allow_nan=False)


def parse_size(text):
    """``"8 GiB"``, ``"512MB"`` or a number of bytes, as bytes."""
    if isinstance(text, bool):
        raise ValueError("a size, not a boolean")
    if isinstance(text, (int, float)):
        return int(text)
    match = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([A-Za-z]*)\s*", str(text))
    if not match or match.group(2).lower() not in _UNITS:
        raise ValueError("not a size: %r (write e.g. \"8 GiB\")" % (text,))
    return int(float(match.group(1)) * _UNITS[match.group(2).lower()])


def _gpu_budget(item):
    """The closest marker's ``gpu`` keyword, in bytes; None without one."""
    for mark in item.iter_markers(name=MARKER):
        if "gpu" in mark.kwargs:
            return parse_size(mark.kwargs["gpu"])
    return None


def _cuda():
    """torch with CUDA, if torch is importable and sees a GPU."""
    try:
        import torch
    except ImportError:
        return None
    try:
        return torch if torch.cuda.is_available() else None
    except Exception:
        return None


# A new-style wrapper (pluggy 1.2, pytest 8): what it raises after the
# test is the test's failure.
@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    # Under oomgate its own measurements judge the test.
    under_oomgate = os.environ.get("OOMGATE_METRICS") or os.environ.get("OOMGATE_SESSION")
    budget = None if under_oomgate else _gpu_budget(item)
    torch = _cuda() if budget is not None else None
    if torch is not None:
        for device in range(torch.cuda.device_count()):
            torch.cuda.reset_peak_memory_stats(device)
    # Raises what the test raised: a failed test is not checked again.
    result = yield
    if torch is None:
        return result
    peak = sum(torch.cuda.max_memory_reserved(d) for d in range(torch.cuda.device_count()))
    if peak > budget:
        pytest.fail(
            "oomgate: %s reserved %.1f MiB of GPU memory at its peak, over its marker's gpu=%.1f MiB "
            "(torch.cuda.max_memory_reserved, the CUDA context not included)"
            % (item.nodeid, peak / 2**20, budget / 2**20),
            pytrace=False,
        )
    return result


# Each phase's report of the test running in this process, by node id.
_REPORTS = {}
# A message is the workload's text: a few lines are plenty to say what
# failed, and oomgate bounds what it reads anyway.
_MESSAGE_LIMIT = 1000


def pytest_runtest_logreport(report):
    if os.environ.get("OOMGATE_METRICS") or _SESSION is not None:
        _REPORTS.setdefault(report.nodeid, []).append(report)


def _message(report):
    """pytest's own short message of a report: its crash line, or a skip's
    reason."""
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        text = str(longrepr[2])
    else:
        crash = getattr(longrepr, "reprcrash", None)
        text = getattr(crash, "message", None) or (str(longrepr) if longrepr else "")
    text = text.strip()
    if text.startswith("Skipped: "):
        text = text[len("Skipped: "):]
    return text[:_MESSAGE_LIMIT]


def outcome_of(reports):
    """``(outcome, phase, message)`` of a test from its phases' reports, as
    pytest's summary words it."""
    for report in reports:
        if report.failed:
            if report.when == "call":
                return "failed", "call", _message(report)
            return "error", report.when, _message(report)
    for report in reports:
        if report.skipped:
            if hasattr(report, "wasxfail"):
                return "xfailed", report.when, str(report.wasxfail or "")[:_MESSAGE_LIMIT]
            return "skipped", report.when, _message(report)
    for report in reports:
        if report.when == "call" and hasattr(report, "wasxfail"):
            return "xpassed", "call", str(report.wasxfail or "")[:_MESSAGE_LIMIT]
    return "passed", "call", ""


def pytest_runtest_logfinish(nodeid, location):
    if _SESSION is not None:
        # The session answers oomgate itself, test by test.
        return
    target = os.environ.get("OOMGATE_METRICS")
    reports = _REPORTS.pop(nodeid, None)
    if not target or not reports:
        return
    outcome, when, message = outcome_of(reports)
    line = {"event": "pytest", "nodeid": nodeid, "outcome": outcome, "when": when}
    if message:
        line["message"] = message
    try:
        with open(target, "a", encoding="utf-8") as out:
            out.write(json.dumps(line) + "\n")
    except OSError:
        # The probe's file is oomgate's to read; a test that cannot write
        # it is judged by its exit status alone.
        pass


# The shared session: oomgate's commands in, this plugin's answers out.
_SESSION = None
# What one answer may carry of a test's output: oomgate keeps the last
# 64 KiB, masked with the 16 KiB before them in view.
_OUTPUT_LIMIT = 80 * 1024


class _Session:
    """The two descriptors ``OOMGATE_SESSION`` names (``"R,W"``)."""

    def __init__(self, spec):
        read_fd, write_fd = (int(part) for part in spec.split(","))
        # Not handed on to what a test executes. A child a test forks still
        # has them, as any inherited descriptor: oomgate watches the
        # session's own process, so a child keeping them open does not
        # hide the session's death.
        os.set_inheritable(read_fd, False)
        os.set_inheritable(write_fd, False)
        self.commands = os.fdopen(read_fd, "r", encoding="utf-8", newline="\n")
        self.answers = os.fdopen(write_fd, "w", encoding="utf-8", newline="\n")

    def say(self, message):
        self.answers.write(json.dumps(message) + "\n")
        self.answers.flush()

    def next_test(self):
        """The node id oomgate asks for next; None at the end."""
        line = self.commands.readline()
        if not line:
            return None
        return json.loads(line)["run"]


def _tail(text):
    text = text or ""
    return text[-_OUTPUT_LIMIT:]


def _answer(nodeid, reports):
    outcome, when, message = outcome_of(reports)
    # Each phase's report holds the output captured up to it: the last
    # holds it all.
    last = reports[-1] if reports else None
    stdout = getattr(last, "capstdout", "") or ""
    stderr = getattr(last, "capstderr", "") or ""
    failure = "\n".join(r.longreprtext for r in reports if r.failed and r.longreprtext)
    return {
        "done": nodeid,
        "outcome": outcome,
        "when": when,
        "message": message,
        "stdout": _tail(stdout),
        "stderr": _tail(stderr + (("\n" if stderr else "") + failure if failure else "")),
    }


def _torch_cuda():
    """torch.cuda, where the test process has imported torch and
    initialised CUDA (never imported here: that takes seconds, and a test
    that does not use torch has no allocator figure)."""
    torch = sys.modules.get("torch")
    cuda = getattr(torch, "cuda", None)
    try:
        return cuda if cuda is not None and cuda.is_initialized() else None
    except Exception:
        return None


def _reset_allocator_peaks():
    """Start a test's allocator peaks at what the allocator holds now, and
    say what that is (per device); None where torch has no CUDA
    initialised (a test that initialises it starts from nothing)."""
    cuda = _torch_cuda()
    if cuda is None:
        return None
    try:
        start = {"reserved": [], "allocated": []}
        for device in range(cuda.device_count()):
            cuda.reset_peak_memory_stats(device)
            start["reserved"].append(int(cuda.memory_reserved(device)))
            start["allocated"].append(int(cuda.memory_allocated(device)))
        return start
    except Exception as error:  # said, and the test runs on
        sys.stderr.write("oomgate: torch.cuda.reset_peak_memory_stats: %r\n" % (error,))
        return None


def _allocator_peaks(start):
    """torch's allocator peaks since the test started, per device in
    CUDA's order, with what it held at the start (`start`); None where
    torch has no CUDA initialised."""
    cuda = _torch_cuda()
    if cuda is None:
        return None
    try:
        devices = range(cuda.device_count())
        start = start or {}
        return {
            "reserved": [int(cuda.max_memory_reserved(d)) for d in devices],
            "allocated": [int(cuda.max_memory_allocated(d)) for d in devices],
            "allocated_end": [int(cuda.memory_allocated(d)) for d in devices],
            "reserved_start": start.get("reserved", [0 for _ in devices]),
            "allocated_start": start.get("allocated", [0 for _ in devices]),
        }
    except Exception as error:
        sys.stderr.write("oomgate: torch.cuda.max_memory_reserved: %r\n" % (error,))
        return None


def _open_session():
    """Open oomgate's session channel, when there is one."""
    global _SESSION
    spec = os.environ.get("OOMGATE_SESSION")
    if spec and _SESSION is None:
        _SESSION = _Session(spec)


@pytest.hookimpl(tryfirst=True)
def pytest_runtestloop(session):
    _open_session()
    if _SESSION is None:
        return None
    # As pytest's own loop: errors in collection end the session.
    if session.testsfailed and not session.config.option.continue_on_collection_errors:
        raise session.Interrupted(
            "%d error%s during collection" % (session.testsfailed, "s" if session.testsfailed != 1 else "")
        )
    if session.config.option.collectonly:
        return True
    items = session.items
    where = {item.nodeid: index for index, item in enumerate(items)}
    setup = getattr(session, "_setupstate", None)
    _SESSION.say({"ready": len(items), "pid": os.getpid()})
    while True:
        nodeid = _SESSION.next_test()
        if nodeid is None:
            break
        index = where.get(nodeid)
        if index is None:
            _SESSION.say({"missing": nodeid})
            continue
        item = items[index]
        # The fixtures of the test before that this one does not share
        # are torn down first: the test after it in collection order was
        # guessed as the next one, which keeps module and class fixtures
        # alive while oomgate asks for the tests in that order.
        if setup is not None:
            try:
                setup.teardown_exact(item)
            except Exception as error:  # a fixture's teardown: said, not fatal
                sys.stderr.write("oomgate: tearing down before %s: %r\n" % (nodeid, error))
        guess = items[index + 1] if index + 1 < len(items) else None
        start = _reset_allocator_peaks()
        item.config.hook.pytest_runtest_protocol(item=item, nextitem=guess if setup is not None else None)
        answer = _answer(nodeid, _REPORTS.pop(nodeid, []))
        answer["gpu"] = _allocator_peaks(start)
        _SESSION.say(answer)
    if setup is not None:
        try:
            setup.teardown_exact(None)
        except Exception as error:
            sys.stderr.write("oomgate: tearing down at the session's end: %r\n" % (error,))
    return True

"""The heaplens pytest plugin (docs/pytest.md).

`pytest --heaplens` runs the session under `heaplens run` (re-executing
pytest under it, once the tests are collected) and ends with the tests
that allocated, peaked and leaked the most. Two markers set limits:

    @pytest.mark.limit_memory("24 MB")  # the test's peak: the most its own
                                         # allocations held at once
    @pytest.mark.limit_leaks("1 MB")    # its allocations still live at its
                                         # end, after gc.collect()

Each test is a window of time in the session's capture. At the end of a
test with a limit, the plugin marks the capture (heaplens_mark, in the
preloaded library) and asks `heaplens window` for the window's figures, which
it reads once the agent has written the mark. The numbers are estimates
from sampling; the session's rate is chosen from the smallest limit so that
an estimate's 95 % interval is within 5 % of it.
"""
import ctypes
import gc
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import time

import pytest

from . import binary

# Set in the session heaplens runs. Not HEAPLENS_*: heaplens run passes on
# none of those, which belong to the profiler of the process.
_CAPTURE_ENV = "PYTEST_HEAPLENS_CAPTURE"
_REMOVE_ENV = "PYTEST_HEAPLENS_REMOVE"  # the capture's temporary directory
_DEFAULT_RATE = 512 * 1024
# An estimate of B bytes from samples at rate r has a standard deviation of
# at most sqrt(B·r) (small blocks; larger ones are estimated better), so
# 1.96·sqrt(L·r) ≤ 0.05·L when r ≤ L·(0.05/1.96)² ≈ L/1537.
_RATE_DIVISOR = 1537

# How long a mark waits for room in a full ring, in seconds: the agent
# empties rings about every 100 ms, longer on a loaded machine.
_MARK_WAIT = 30
# Below this rate nearly every allocation is sampled, and the session gets
# a ring as large as heaplens run gives --rate 1: pytest's start-up alone
# records tens of MB of new stacks. Equal to launch.ExactRingSize
# (TestPytestPluginRingIsExactRingSize).
_SMALL_RATE = 64 * 1024
_SMALL_RATE_RING = "128MiB"
_UNITS = {"": 1, "B": 1, "K": 1 << 10, "KB": 1 << 10, "KIB": 1 << 10, "M": 1 << 20, "MB": 1 << 20,
          "MIB": 1 << 20, "G": 1 << 30, "GB": 1 << 30, "GIB": 1 << 30}


def parse_size(text):
    """Bytes in "24 MB", "512KiB", "1.5 GB" (powers of 1024, as memray's markers)."""
    m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([A-Za-z]*)\s*", str(text))
    if not m or m.group(2).upper() not in _UNITS:
        raise ValueError("not a size: %r (write e.g. \"24 MB\" or \"512 KiB\")" % (text,))
    n = float(m.group(1)) * _UNITS[m.group(2).upper()]
    if n < 1:
        raise ValueError("a size limit must be at least 1 byte: %r" % (text,))
    return int(n)


def format_size(n):
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(n) >= size:
            return "%.1f %s" % (n / size, unit)
    return "%.0f B" % n


def pytest_addoption(parser):
    group = parser.getgroup("heaplens", "memory profiling with heaplens")
    group.addoption("--heaplens", action="store_true",
                    help="run the session under heaplens: tables of the tests that allocated, peaked and leaked most; "
                         "limit_memory and limit_leaks markers enforced")
    group.addoption("--heaplens-rate", metavar="SIZE",
                    help="sampling rate (mean bytes between samples, e.g. 64KiB; 1 = every allocation); "
                         "default: chosen from the smallest limit of the collected tests, else 512KiB")
    group.addoption("--heaplens-capture", metavar="DIR",
                    help="write the session's capture into DIR and keep it (default: a temporary directory, removed)")


def pytest_configure(config):
    config.addinivalue_line("markers", "limit_memory(size): fail when the test's allocations held more than size at once "
                                       "(estimated by heaplens; needs --heaplens)")
    config.addinivalue_line("markers", "limit_leaks(size): fail when more than size of the test's allocations are still "
                                       "live at its end, after gc.collect() (estimated by heaplens; needs --heaplens)")
    if not config.getoption("heaplens"):
        return
    if os.environ.get(_CAPTURE_ENV):
        config.pluginmanager.register(_Session(config, os.environ[_CAPTURE_ENV]), "heaplens-session")
    elif _library_function("heaplens_mark", [ctypes.c_uint64], ctypes.c_int) is not None:
        raise pytest.UsageError("--heaplens: pytest already runs under heaplens; run pytest --heaplens alone, "
                                "it starts heaplens itself")
    else:
        config.pluginmanager.register(_Launcher(config), "heaplens-launcher")


def _library_function(name, argtypes, restype):
    """A function of the preloaded library (preload/heaplens.h), or None
    when the library is not in this process."""
    try:
        f = getattr(ctypes.CDLL(None), name)
    except (AttributeError, OSError):
        return None
    f.argtypes, f.restype = argtypes, restype
    return f


def _limits(item):
    out = {}
    for name in ("limit_memory", "limit_leaks"):
        m = item.get_closest_marker(name)
        if m is not None:
            if len(m.args) != 1:
                raise pytest.UsageError("%s: @pytest.mark.%s takes one size, e.g. \"24 MB\"" % (item.nodeid, name))
            try:
                out[name] = parse_size(m.args[0])
            except ValueError as e:
                raise pytest.UsageError("%s: @pytest.mark.%s: %s" % (item.nodeid, name, e))
    return out


class _Launcher:
    """In a session not yet under heaplens: collect quietly, choose the rate
    from the limits, then become `heaplens run -- python -m pytest …`."""

    def __init__(self, config):
        self.config = config
        # The session that heaplens runs reports everything; this one would
        # only say it twice.
        reporter = config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            config.pluginmanager.unregister(reporter)

    @pytest.hookimpl(trylast=True)
    def pytest_collection_finish(self, session):
        config = self.config
        rate = config.getoption("heaplens_rate")
        if rate is None:
            rate = _DEFAULT_RATE
            for item in session.items:
                for limit in _limits(item).values():
                    rate = min(rate, max(1, limit // _RATE_DIVISOR))
            rate = 1 << (rate.bit_length() - 1)  # a power of two, rounded down
        keep = config.getoption("heaplens_capture")
        directory = os.path.abspath(keep) if keep else tempfile.mkdtemp(prefix="heaplens-pytest-")
        os.makedirs(directory, exist_ok=True)
        capture = os.path.join(directory, "pytest-%d.hlc" % os.getpid())
        env = dict(os.environ)
        env[_CAPTURE_ENV] = capture
        if not keep:
            env[_REMOVE_ENV] = directory
        args = [binary(), "run", "-q", "-o", capture, "--rate", str(rate)]
        if rate < _SMALL_RATE:
            args += ["--ring-size", _SMALL_RATE_RING]
        args += ["--", sys.executable, "-m", "pytest"] + list(config.invocation_params.args)
        sys.stdout.flush()
        sys.stderr.flush()
        os.chdir(str(config.invocation_params.dir))
        try:
            os.execve(args[0], args, env)
        except OSError as e:
            raise pytest.UsageError("--heaplens: cannot run %s: %s" % (args[0], e))


class _Window:
    """One test: when it ran, in CLOCK_MONOTONIC ns."""

    def __init__(self, nodeid, start):
        self.nodeid, self.start, self.end = nodeid, start, start

    def spec(self):
        return {"name": self.nodeid, "pid": os.getpid(), "from": self.start, "until": self.end}


class _Session:
    """In the session heaplens runs: a window per test, limits checked at
    each test's end, the tables at the session's end."""

    def __init__(self, config, capture):
        self.config = config
        self.capture = capture
        self.windows = []
        self.failures = {}  # nodeid -> message
        self.marks = 0
        self.mark = _library_function("heaplens_mark", [ctypes.c_uint64], ctypes.c_int)
        dropped = _library_function("heaplens_dropped", [], ctypes.c_uint64)
        self.dropped = dropped if dropped is not None else (lambda: 0)

    def _figures(self, windows):
        """heaplens window's figures for windows, once the capture holds
        everything recorded until now."""
        if self.mark is None:
            raise RuntimeError("heaplens's library is not in this process (was pytest started by heaplens run?)")
        self.marks += 1
        self._record_mark(self.marks)
        spec = "".join(json.dumps(w.spec()) + "\n" for w in windows)
        env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD" and not k.startswith("HEAPLENS_")}
        r = subprocess.run([binary(), "window", self.capture, "--mark", "%d:%d" % (os.getpid(), self.marks)],
                           input=spec, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           universal_newlines=True, env=env)
        if r.returncode != 0:
            raise RuntimeError("heaplens window: " + r.stderr.strip())
        return json.loads(r.stdout)

    def _record_mark(self, value):
        """heaplens_mark(value), again while the ring is full: a test that
        allocated fast at a small rate, or a busy machine, can fill it
        before the agent's next poll empties it."""
        deadline = time.monotonic() + _MARK_WAIT
        pause = 0.001
        while not self.mark(value):
            if time.monotonic() > deadline:
                raise RuntimeError("heaplens could not record a mark: its ring stayed full for %d s" % _MARK_WAIT)
            time.sleep(pause)
            pause = min(2 * pause, 0.05)

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_call(self, item):
        gc.collect()
        dropped = self.dropped()
        w = _Window(item.nodeid, time.monotonic_ns())
        yield
        gc.collect()  # what the test dropped is not a leak
        w.end = time.monotonic_ns()
        self.windows.append(w)
        dropped = self.dropped() - dropped
        limits = _limits(item)
        if not limits:
            return
        try:
            doc = self._figures([w])[0]
        except RuntimeError as e:
            self.failures[item.nodeid] = "heaplens could not measure the test: %s" % e
            return
        msgs = []
        test_fn = getattr(item, "originalname", item.name)
        for name, key, what in (("limit_memory", "peak", "held at its peak"), ("limit_leaks", "leaked", "leaked")):
            if name in limits and doc[key]["bytes"] > limits[name]:
                msgs.append(_over(item.nodeid, what, doc[key], limits[name], test_fn))
        if dropped:
            # A lost allocation makes the figures too low, a lost free a leak
            # that is not: no verdict either way.
            msgs.append("%s: heaplens dropped %d sampled allocations and frees during the test (its ring was full: "
                        "the agent fell behind), so its figures cannot be trusted; a larger --heaplens-rate records fewer"
                        % (item.nodeid, dropped))
        if msgs:
            msgs.append("see it whole: heaplens report %s --pid %d --window %s" % (self.capture, os.getpid(), doc["window"]))
            self.failures[item.nodeid] = "\n\n".join(msgs)

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item, call):
        outcome = yield
        report = outcome.get_result()
        msg = self.failures.pop(item.nodeid, None)
        if msg is not None and call.when == "call" and report.passed:
            report.outcome = "failed"
            report.longrepr = msg

    def pytest_terminal_summary(self, terminalreporter):
        tr = terminalreporter
        tr.section("heaplens")
        if not self.windows:
            tr.write_line("no test ran")
            return
        try:
            docs = self._figures(self.windows)
        except RuntimeError as e:
            tr.write_line("heaplens could not measure the tests: %s" % e)
            return
        for key, title in (("allocated", "allocated the most"), ("peak", "held the most at once"),
                           ("leaked", "leaked the most")):
            top = sorted((d for d in docs if d[key]["bytes"] > 0), key=lambda d: -d[key]["bytes"])[:5]
            if not top:
                continue
            tr.write_line("tests that %s:" % title)
            for d in top:
                f = d[key]
                site = _site(f["top"][0]["frames"]) if f["top"] else "?"
                tr.write_line("  %12s ± %-10s %s  (top site: %s)" % (format_size(f["bytes"]), format_size(f["ci95"]),
                                                                      d["name"], site))
        if os.environ.get(_REMOVE_ENV):
            tr.write_line("(the capture is removed at exit; --heaplens-capture DIR keeps it)")
        else:
            tr.write_line("capture: %s (heaplens report, heaplens serve; a test alone: --pid %d --window FROM,UNTIL)"
                          % (self.capture, os.getpid()))

    def pytest_unconfigure(self, config):
        directory = os.environ.get(_REMOVE_ENV)
        if directory:
            # heaplens run still writes the capture until this process exits;
            # unlinking it now is safe: the file goes when the writer closes it.
            for name in os.listdir(directory):
                os.unlink(os.path.join(directory, name))
            os.rmdir(directory)


def _over(nodeid, what, fig, limit, test_fn):
    lines = ["%s %s %s ± %s (95 %% interval), over its limit of %s" % (
        nodeid, what, format_size(fig["bytes"]), format_size(fig["ci95"]), format_size(limit))]
    outside = []
    for st in fig["top"]:
        frames = _below(st["frames"], test_fn)
        if frames is None:
            if any(_PYTEST_FILE.search(f) for f in st["frames"]):
                outside.append(st)
                continue
            frames = st["frames"]  # a thread the test started, say
        lines.append("")
        lines.append("  %s ± %s in:" % (format_size(st["bytes"]), format_size(st["ci95"])))
        lines.extend("    " + f for f in frames)
    if outside:
        # pytest's and its plugins' own work during the test: counted, as the
        # window holds it, but its stacks say nothing about the test.
        lines.append("")
        lines.append("  and %s in %d stack(s) that do not pass through %s (pytest's own work during the test)" % (
            format_size(sum(st["bytes"] for st in outside)), len(outside), test_fn))
    return "\n".join(lines)


# A frame of pytest or pluggy, which run the test: "name (…/_pytest/x.py:N)".
_PYTEST_FILE = re.compile(r"/(_pytest|pluggy)/[^/]+\.py:\d+\)$")


def _below(frames, test_fn):
    """The frames of a stack (leaf first) up to the test function, or None
    when it does not pass through it: pytest's own frames above it say
    nothing about the test."""
    for i, f in enumerate(frames):
        if f.startswith(test_fn + " ("):
            return frames[:i + 1]
    return None


_PY_FRAME = re.compile(r"^(.*) \((?:.*/)?([^/]+\.py:\d+)\)$")


def _site(frames):
    """A stack's site for a table: its innermost Python frame (file name
    without directory), after the native leaf when that differs."""
    for i, f in enumerate(frames):
        m = _PY_FRAME.match(f)
        if m:
            py = "%s (%s)" % (m.group(1), m.group(2))
            return py if i == 0 else "%s ← %s" % (frames[0].split(" (")[0], py)
    return frames[0] if frames else "?"

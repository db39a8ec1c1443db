"""The sample project of the heaplens pytest plugin (test/e2e/wheel_test.go).

Every test says in its name whether --heaplens must pass or fail it; the
sizes are far from the limits, so that sampling cannot decide. What a
failing test's message must name is in EXPECT.
"""
import ctypes
import os
import signal
import threading
import time

import pytest

import native  # native.c, built for each Python by the e2e test

try:
    import numpy
except ImportError:  # the e2e test installs numpy; its absence fails there, loudly
    numpy = None

MiB = 1 << 20
_cache = {}

# What the failure message of each failing test names (a frame of the top stack).
EXPECT = {
    "test_leaky_cache_fails": "fill_cache",
    "test_numpy_spike_fails": "spike",
    "test_c_leak_fails": "native_hold",
    "test_openmp_leak_fails": "[pool: libgomp (openmp)]",
    "test_full_ring_fails": "sampled allocations and frees during the test",
}


def fill_cache(n):
    for i in range(n):
        _cache[len(_cache)] = bytearray(64 * 1024)


def spike():
    a = numpy.ones((1024, 1024))  # 8 MiB
    return float(((a * 2) + (a * 3) + (a * 4)).sum())  # temporaries: several 8 MiB arrays at once


def run_openmp(n):
    native.omp_hold(n, 2)


@pytest.mark.limit_leaks("1 MB")
def test_leaky_cache_fails():
    fill_cache(128)  # 8 MiB kept


@pytest.mark.limit_leaks("32 MB")
def test_leaky_cache_within_limit_passes():
    fill_cache(32)  # 2 MiB kept


@pytest.mark.limit_memory("8 MB")
def test_numpy_spike_fails():
    assert spike() > 0  # peak of about 32 MiB, all freed


@pytest.mark.limit_memory("256 MB")
@pytest.mark.limit_leaks("4 MB")
def test_numpy_spike_within_limits_passes():
    assert spike() > 0


@pytest.mark.limit_leaks("1 MB")
def test_c_leak_fails():
    native.hold(16 * MiB, 64)


@pytest.mark.limit_leaks("1 MB")
def test_openmp_leak_fails():
    run_openmp(8 * MiB)  # 2 threads × 8 MiB kept


def test_unmarked_allocates_passes():
    data = [bytearray(MiB) for _ in range(16)]
    assert len(data) == 16


@pytest.mark.limit_memory("1 GB")
def test_full_ring_fails():
    """The agent stops emptying the ring while this test fills it, and goes
    on 0.3 s after the test returns: the plugin's mark at the test's end
    finds the ring full and must wait for room, and the records dropped
    meanwhile make the figures untrustworthy, which the failure says."""
    try:
        mark = ctypes.CDLL(None).heaplens_mark
    except AttributeError:
        return  # not under heaplens (pytest without --heaplens): nothing to drop
    mark.argtypes, mark.restype = [ctypes.c_uint64], ctypes.c_int
    agent = os.getppid()  # heaplens run, which started this pytest
    with open("/proc/%d/comm" % agent) as f:
        assert f.read().strip() == "heaplens", "the parent is not heaplens run"
    os.kill(agent, signal.SIGSTOP)
    try:
        deadline = time.monotonic() + 60
        while mark(1 << 62):  # a value the plugin never uses
            for _ in range(1000):
                bytearray(4096)  # sampled, freed: two records each
            assert time.monotonic() < deadline, "the ring did not fill in 60 s"
        bytearray(4096)  # dropped: the ring is full
    except BaseException:
        os.kill(agent, signal.SIGCONT)
        raise
    threading.Timer(0.3, os.kill, (agent, signal.SIGCONT)).start()

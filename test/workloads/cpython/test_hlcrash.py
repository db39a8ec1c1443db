"""For the harness of test/cpython: the interpreter dies of SIGSEGV under
heaplens only, in the middle of the module, so that run has no results."""
import os
import signal
import unittest

UNDER_HEAPLENS = "libheaplens" in os.environ.get("LD_PRELOAD", "")


class Crash(unittest.TestCase):
    def test_a_passes(self):
        pass

    def test_b_crashes_under_heaplens(self):
        if UNDER_HEAPLENS:
            signal.signal(signal.SIGSEGV, signal.SIG_DFL)  # no faulthandler
            os.kill(os.getpid(), signal.SIGSEGV)

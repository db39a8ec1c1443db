"""Known outcomes for the harness of test/cpython: one case of each kind,
one that fails under heaplens only, one that flips on every run both ways,
and an environment change under heaplens only."""
import os
import unittest

UNDER_HEAPLENS = "libheaplens" in os.environ.get("LD_PRELOAD", "")


def nth_run(name):
    """How many times this case ran before, bare or under heaplens."""
    mode = "heaplens" if UNDER_HEAPLENS else "bare"
    path = os.path.join(os.environ["HLFIX_DIR"], f"{name}-{mode}")
    n = int(open(path).read()) if os.path.exists(path) else 0
    with open(path, "w") as f:
        f.write(str(n + 1))
    return n


class Outcomes(unittest.TestCase):
    def test_ok(self):
        pass

    def test_fail(self):
        self.assertEqual(1, 2, "fails both ways")

    def test_error(self):
        raise RuntimeError("errs both ways")

    @unittest.skip("skipped both ways")
    def test_skip(self):
        pass

    @unittest.expectedFailure
    def test_xfail(self):
        self.assertEqual(1, 2)

    def test_subtest(self):
        for i in range(3):
            with self.subTest(i=i):
                self.assertNotEqual(i, 1, "one subtest fails both ways")


class BrokenFixture(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        raise RuntimeError("setUpClass errs both ways")

    def test_never_runs(self):
        pass


class UnderHeaplens(unittest.TestCase):
    def test_differs(self):
        self.assertFalse(UNDER_HEAPLENS, "fails under heaplens only")

    def test_flips(self):
        # Fails on every other run, bare and under heaplens alike; the
        # first run under heaplens fails, the first bare one passes.
        self.assertEqual((nth_run("flips") + UNDER_HEAPLENS) % 2, 0, "flaky")

    def test_alters_environment(self):
        # regrtest says "Warning -- os.environ was modified".
        if UNDER_HEAPLENS:
            os.environ["HLFIX_LEFT_BEHIND"] = "1"

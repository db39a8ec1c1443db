"""heaplens: which code holds your memory.

The profiler is a Go program (heaplens/_bin/heaplens) that runs a command
with its library preloaded; this package finds it, runs it for
`python -m heaplens` and the `heaplens` console script, and holds the
pytest plugin (heaplens.pytest_plugin).
"""
import os

from ._version import __version__

__all__ = ["__version__", "binary"]


def binary():
    """The path of the heaplens program this package holds."""
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "_bin", "heaplens")

"""`python -m heaplens ARGS` and the `heaplens` console script: the same CLI."""
import os
import sys

from . import binary


def main():
    exe = binary()
    try:
        os.execv(exe, [exe] + sys.argv[1:])
    except OSError as e:
        sys.exit("heaplens: cannot run %s: %s (reinstall the heaplens wheel)" % (exe, e))


if __name__ == "__main__":
    main()

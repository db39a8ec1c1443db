"""Runs the standard library's json.tool, as `python3 -m json.tool IN OUT`
does: a real program nobody here wrote. It parses a large JSON document
into dicts, lists and strings and writes it back indented.

Usage: py_jsontool.py IN OUT

The benchmark generates IN and checks OUT (sha256). The last line is
"checksum=... loop_s=... maxrss_kb=... cpu_s=..." (checksum: OUT's size)."""
import os
import runpy
import sys
import time

from peak_rss import peak_rss_kb  # beside this script


def main():
    src, dst = sys.argv[1], sys.argv[2]
    sys.argv = ["json.tool", src, dst]
    t0 = time.perf_counter()
    try:
        runpy.run_module("json.tool", run_name="__main__", alter_sys=True)
    except SystemExit as e:
        if e.code:
            raise
    loop = time.perf_counter() - t0
    print("checksum=%d loop_s=%.4f maxrss_kb=%d cpu_s=%.4f"
          % (os.path.getsize(dst), loop, peak_rss_kb(), time.process_time()))


if __name__ == "__main__":
    main()

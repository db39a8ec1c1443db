"""Runs splicecallers.c's routes (the library at argv[1]) argv[2] times in a
Python process, where the library's walks splice onto the thread's last,
and prints each route's count and whether mid's CFA was the same under
each pair of routes."""
import ctypes
import sys


def main():
    lib = ctypes.CDLL(sys.argv[1])
    count = (ctypes.c_long * 4)()
    same = lib.splice_run(ctypes.c_long(int(sys.argv[2])), count)
    print("A=%d B=%d P=%d Q=%d same_cfa=%d" % (count[0], count[1], count[2], count[3], same))


main()

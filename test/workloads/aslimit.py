# aslimit: under an address-space limit (ulimit -v), prints the limit it
# runs with, then maps 128 MiB blocks (never touched: no memory is used)
# until the limit refuses one, and prints how many it got.
import mmap
import resource

print("limit", resource.getrlimit(resource.RLIMIT_AS))
keep = []
try:
    while True:
        keep.append(mmap.mmap(-1, 128 << 20, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS))
except OSError:
    pass
print("blocks", len(keep))

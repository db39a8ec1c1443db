"""Runs every variant of ompteam.c twice through ctypes (the library is
loaded RTLD_LOCAL, as every extension is) and prints its team size and
result, as ompteam_main.c does."""
import ctypes
import sys

lib = ctypes.CDLL(sys.argv[1])
names = ctypes.cast(ctypes.addressof(ctypes.c_char_p.in_dll(lib, "omp_variants")), ctypes.POINTER(ctypes.c_char_p))
team = ctypes.c_int.in_dll(lib, "team")
result = ctypes.c_long.in_dll(lib, "result")
variants = []
while names[len(variants)]:
    variants.append(names[len(variants)].decode())
for rep in range(2):
    for name in variants:
        f = getattr(lib, name)
        if name.endswith("_tail"):
            f(*[0] * 8)
        else:
            f()
        print("%s team=%d result=%d" % (name, team.value, result.value), flush=True)

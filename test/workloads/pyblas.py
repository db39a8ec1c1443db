"""OpenBLAS through numpy (Debian's python3-numpy, libopenblas0-pthread):
OpenBLAS maps a buffer for its calling thread at the first product, and one
per worker thread when it starts them, at import. Run with
OPENBLAS_NUM_THREADS=2."""
import numpy  # SITE:import (OpenBLAS starts its worker here)


def matmul_site():
    a = numpy.ones((512, 512))
    return float((a @ a).sum())  # SITE:matmul


print(matmul_site())

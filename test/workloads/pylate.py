# pylate: eight 4 MiB numpy arrays made with np.empty at the start (pages
# untouched), filled with ones 1.3 s later (after the agent's reading of
# residency at about 1 s) and 0.2 s before the program ends, live at its
# end: the leaks view must show them resident (read when the interpreter
# begins finalizing, before it frees them).
import time

import numpy as np

first = np.ones(48 << 20, np.uint8)  # RSS's high comes first: the fill stays under it
time.sleep(0.15)
del first
arrays = [np.empty(4 << 20, np.uint8) for _ in range(8)]  # the 32 MiB
time.sleep(1.3)
for a in arrays:
    a.fill(1)
time.sleep(0.2)
print("filled", sum(int(a[12345]) for a in arrays))

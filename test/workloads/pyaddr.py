"""Addresses pymalloc gives: 1000 bytes(400) objects (433-byte requests,
448-byte blocks) allocated in a row fill fresh pools block after block, so
consecutive ids differ by 448 except where a pool or arena ends. Prints
how many of the 999 steps are exactly 448 bytes. A profiler that moves
sampled objects elsewhere lowers the count (to 0 when it samples them all)."""
keep = [bytes(400) for _ in range(1000)]
steps = sum(1 for a, b in zip(keep, keep[1:]) if id(b) - id(a) == 448)
print("steps448=%d" % steps)

"""tracemalloc started first (-X tracemalloc), then stopped and started
again: stopping puts back the allocator tracemalloc wrapped, which may
drop a profiler's hooks. Objects made before the stop are freed after it
(none stays live); the ones made after it stay."""
import tracemalloc

N, SIZE = 100000, 100  # bytes(SIZE) asks for 33 + SIZE bytes

before = [bytes(SIZE) for _ in range(N)]  # SITE:before
tracemalloc.stop()
after = [bytes(SIZE) for _ in range(N)]  # SITE:after
del before
tracemalloc.start()
again = [bytes(SIZE) for _ in range(N // 2)]  # SITE:again
tracemalloc.stop()
del again
print("pytracestop done")

#!/usr/bin/env bash
# make demo: profiles leaky, a program whose allocation sites have known
# sizes, and says how to read what heaplens prints.
set -euo pipefail
cd "$(dirname "$0")/.."
gcc -O2 -g -fomit-frame-pointer -pthread -o bin/leaky test/workloads/leaky.c
cat <<'EOF'
== heaplens run -- ./bin/leaky ==
leaky's four threads each keep 20000 blocks of 256 B (keep_small) and 16 blocks of 1 MiB
(keep_large), allocate and free 50000 blocks of 4 KiB (churn) and grow one buffer to 4 MiB
(grow). It prints the exact bytes of each site (its standard output), then heaplens prints
its summary (standard error):

EOF
./bin/heaplens run -o bin/leaky.hlc -- ./bin/leaky
cat <<'EOF'

== how to read it ==
- heaplens samples about one allocation per 512 KiB allocated (--rate), so its numbers are
  estimates: compare "keep_small 20480000" (19.5 MiB exact) and "keep_large 67108864" (64 MiB)
  above with the leak suspects. Each estimate comes with "± X", a 95 % interval computed from
  the samples: the exact value lies inside it about 19 times in 20. --rate 1 records every
  allocation and prints exact values, at a much higher cost.
- churn allocates 781 MiB but frees all of it: it shows in "allocated", not among the leaks.
- peak heap and RSS differ: the heap counts the bytes the program asked for and still holds;
  RSS counts the pages the kernel gave the process: keep_large touches only 64 B of each
  1 MiB block, so most of it never becomes resident, while code, libraries, thread stacks and
  the allocator's own free memory are resident without being heap.

== heaplens report bin/leaky.hlc --view leaks --top 2 ==
EOF
./bin/heaplens report bin/leaky.hlc --view leaks --top 2

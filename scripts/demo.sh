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
- the estimated heap and RSS differ, and both are right. "RSS peak ... exact" is the kernel's
  own high-water mark of resident memory (ru_maxrss: what /usr/bin/time -f %M prints; the bare
  run below gives leaky's figure without heaplens, whose library and ring add a little).
  The heap counts blocks at the size the program asked for: keep_large's 64 blocks reserve
  64 MiB but write 64 B each, so only the page or two around those bytes is resident: the
  summary's "large blocks ... by resident bytes" lines show it, beside what they reserve. What
  leaky holds resident is mostly keep_small's 19.5 MiB (and malloc's 16-byte header on each of
  its 80000 blocks), then code, libraries and thread stacks; grow writes one byte per step and
  churn reuses the same few pages. --view resident ranks the sites by what they held resident
  at the highest RSS reading (the last report below): keep_small first, keep_large at a few
  hundred KiB. "heaplens's ring is at most ..." says how much of the exact figure is heaplens's.
- "sampled: the highest reading" is RSS as read while leaky ran: at every poll of its first
  100 ms, then every 100 ms. It can miss a short peak; the exact figure above cannot.

EOF
if [ -x /usr/bin/time ]; then
	echo "== leaky bare: the kernel's high-water mark without heaplens =="
	/usr/bin/time -f "maxrss %M KiB" ./bin/leaky >/dev/null
	echo
fi
cat <<'EOF'
== heaplens report bin/leaky.hlc --view leaks --top 2 ==
EOF
./bin/heaplens report bin/leaky.hlc --view leaks --top 2
cat <<'EOF'

== heaplens report bin/leaky.hlc --view resident --top 2 ==
EOF
./bin/heaplens report bin/leaky.hlc --view resident --top 2

#!/bin/bash
# pipeline.sh: a bash pipeline of several processes, with known answers (the
# test computes them itself).
set -u
seq 1 100000 | awk '{ print $1 % 97 }' | sort -n | uniq -c | sort -k1,1nr -k2,2n | awk 'NR <= 3 { print $2 ": " $1 }'
echo "pipeline status: ${PIPESTATUS[*]}"
seq 1 100000 | tr -d '\n' | wc -c
echo "to standard error" >&2

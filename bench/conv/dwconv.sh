#!/usr/bin/env bash
# bench/conv/dwconv.sh [THREADS] — build bench/conv/dwconv.c against the runtime in $B (make all
# first) and run it: depthwise conv2d, the direct kernel vs im2col + GEMM (default 2 threads).
set -euo pipefail
cd "$(dirname "$0")/../.."
B=${B:-build}
mkdir -p "$B/conv-bench"
cc -std=c11 -D_GNU_SOURCE -O2 -fopenmp -Iruntime bench/conv/dwconv.c "$B/lib/libmodelrt.a" \
    $(cat "$B/lib/libmodelrt.libs") -lm -o "$B/conv-bench/dwconv"
"$B/conv-bench/dwconv" "${1:-2}"

#!/usr/bin/env bash
# bench/conv/nhwc.sh [THREADS] [N] [interleaved] — build and run nhwc.c (ResNet-18's convs in nChw16c and nhwc)
# against Debian's oneDNN (libdnnl-dev).
set -euo pipefail
cd "$(dirname "$0")"
out=${B:-../../build}/conv-bench
mkdir -p "$out"
gcc -O2 -fopenmp nhwc.c -o "$out/nhwc" -ldnnl
OMP_NUM_THREADS=${1:-1} "$out/nhwc" "${2:-1}" ${3:-}

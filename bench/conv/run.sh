#!/usr/bin/env bash
# bench/conv/run.sh [THREADS] — build and run conv_bench.cpp against Debian's oneDNN (libdnnl-dev).
set -euo pipefail
cd "$(dirname "$0")"
out=${B:-../../build}/conv-bench
mkdir -p "$out"
g++ -O2 -fopenmp conv_bench.cpp -o "$out/conv_bench" -ldnnl
OMP_NUM_THREADS=${1:-1} "$out/conv_bench"

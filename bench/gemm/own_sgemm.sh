#!/usr/bin/env bash
# bench/gemm/own_sgemm.sh — build bench/gemm/own_sgemm.c and run it at 1 and 2 threads in each
# weight mode (issue 12: an own AVX-512 GEMM against oneDNN's matmul primitive as rt_matmul.c makes
# it). A measurement, not part of modelc or its tests; results in bench/gemm/RESULTS.md.
#
#   bash bench/gemm/own_sgemm.sh [REPEATS] [ROUNDS]      (default 3 repeats of 5 rounds)
#
# Modes: weights packed once (SG_INPLACE=0), or [K,N] weights packed per call into per-thread
# scratch (SG_INPLACE=1) or read where they are (SG_INPLACE=2) — GPT-2's Conv1D shapes only, the
# [N,K] ones stay packed once; weights warm (one copy, in the caches) or cold (SG_COLD=1: copies
# in turn, from memory). Output to build/gemm/own_sgemm.txt as well; bench/gemm/own_sgemm_table.py
# makes the tables of medians.
set -u
cd "$(dirname "$0")/../.."
REPEATS=${1:-3}
ROUNDS=${2:-5}
mkdir -p build/gemm
gcc -DSG_PF=1024 -O2 -std=gnu11 -D_GNU_SOURCE -Wall -fopenmp -ffp-contract=off bench/gemm/own_sgemm.c -ldnnl -lm \
    -o build/gemm/own_sgemm || exit 1
{
echo "# $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(nproc) cores, $(gcc --version | head -1)"
for rep in $(seq "$REPEATS"); do
    for th in 1 2; do
        for mode in "0 0" "0 1" "1 0" "1 1" "2 0" "2 1"; do
            set -- $mode
            SG_INPLACE=$1 SG_COLD=$2 SG_KC=${SG_KC:-384} OMP_NUM_THREADS=$th build/gemm/own_sgemm "$ROUNDS"
        done
    done
done
} | tee build/gemm/own_sgemm.txt

#!/bin/bash
# nvcc-compile.sh CU INCLUDE_DIR OBJ: compile a generated NAME.cu with nvcc when nvcc is on
# PATH; print "nvcc: ok" on success and "nvcc: skipped" when there is no nvcc, so the calling
# test runs (and checks the emitted CUDA) on CPU-only machines too.
set -e
cu=$1 inc=$2 obj=$3
if ! command -v nvcc >/dev/null 2>&1; then
    echo "nvcc: skipped"
    exit 0
fi
# sm_90 machine code: ptxas runs here on the real target (the suites build PTX only)
nvcc -c -std=c++17 -gencode arch=compute_90,code=sm_90 "$cu" -I"$inc" -o "$obj"
echo "nvcc: ok"

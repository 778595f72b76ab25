#!/bin/bash
# nvcc-ptx-fma.sh CU MODELC: compile a generated NAME.cu to PTX twice, with modelc's own nvcc
# flags (modelc --print-nvcc-flags) and with nvcc's defaults, and count the fused multiply-adds
# (fma.rn) in each. modelc's must have none, so the CUDA kernels round as the C path does; the
# default build must have some, or the model does not exercise contraction and the check could
# not fail. Prints "nvcc: ok ..." or "nvcc: skipped" (no nvcc on PATH); exits 1 otherwise.
set -eu
cu=$1 modelc=$2
if ! command -v nvcc >/dev/null 2>&1; then
    echo "nvcc: skipped"
    exit 0
fi
dir=$(dirname "$cu")
# one target: -ptx takes no more
flags=$(MODELC_GENCODE="-gencode arch=compute_90,code=compute_90" $modelc --print-nvcc-flags)
# shellcheck disable=SC2086
nvcc -ptx $flags -std=c++17 "$cu" -o "$dir/modelc.ptx"
nvcc -ptx -O3 -std=c++17 -arch=compute_90 -I"$(dirname "$modelc")/../include/modelc" "$cu" -o "$dir/default.ptx"
ours=$(grep -c 'fma\.rn' "$dir/modelc.ptx" || true)
dflt=$(grep -c 'fma\.rn' "$dir/default.ptx" || true)
if [ "$ours" -ne 0 ]; then
    echo "nvcc: FAIL: $ours fma.rn in the PTX built with modelc's flags ($flags)"
    exit 1
fi
if [ "$dflt" -eq 0 ]; then
    echo "nvcc: FAIL: no fma.rn even with nvcc's defaults: the model does not test contraction"
    exit 1
fi
echo "nvcc: ok (0 fma.rn with modelc's flags, $dflt with nvcc's defaults)"

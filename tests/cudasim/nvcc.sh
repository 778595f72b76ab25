#!/usr/bin/env bash
# tests/cudasim/nvcc.sh — what the simulator's modelc ($B/cudasim/bin/modelc) runs instead of nvcc:
# the host C++ compiler on a .cu file, against the CUDA simulator's headers. nvcc's -gencode
# pairs are dropped (there is no device code to generate), -fmad=false|true become the host
# compiler's -ffp-contract=off|fast; every other argument is passed on.
set -u
here="$(cd "$(dirname "$0")" && pwd)"
args=()
while [ $# -gt 0 ]; do
    case "$1" in
        -gencode) shift 2 ;;
        -fmad=false) args+=(-ffp-contract=off); shift ;;
        -fmad=true) args+=(-ffp-contract=fast); shift ;;
        *) args+=("$1"); shift ;;
    esac
done
exec "${CXX:-g++}" -x c++ -std=c++17 -I"$here/include" "${args[@]}"

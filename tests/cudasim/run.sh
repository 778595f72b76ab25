#!/usr/bin/env bash
# tests/cudasim/run.sh — the CUDA code on the simulated device (tests/cudasim/include/cudasim.h):
#   1. the simulator's own tests (test_cudasim.cu): what a GPU runs, and what it rejects;
#   2. tests/runtime/cuda_check.c against the runtime built for the simulator (make cudasim):
#      every runtime CUDA kernel and the cuBLAS/cuBLASLt GEMMs against the CPU references;
#   3. the runtime's unit tests (tests/runtime/test_runtime.c) with two simulated GPUs, so that
#      the CUDA half of the device API (rt_cuda.c) runs where the ordinary suite has no GPU.
# Prints one line per test, "PASS: cudasim/NAME" or "FAIL: cudasim/NAME: why", and exits 1 if any
# failed. Needs no GPU and no nvcc: only the host C and C++ compilers.
#
#   B      build directory (default: build); the simulator builds into $B/cudasim
#   CC     C compiler (default: cc); CXX: C++ compiler (default: g++)
set -u
cd "$(dirname "$0")/../.."
B="${B:-build}"
CC="${CC:-cc}"
CXX="${CXX:-g++}"

work="$(mktemp -d "${TMPDIR:-/tmp}/cudasim-tests.XXXXXX")"
trap 'rm -rf "$work"' EXIT
failed=0

# fail_log NAME WHY LOGFILE: a FAIL line with the log's first lines, indented.
fail_log() {
    echo "FAIL: cudasim/$1: $2:"
    sed 's/^/    /' "$3" | head -40
    failed=1
}

if ! ${MAKE:-make} -s --no-print-directory B="$B" cudasim >"$work/make.log" 2>&1; then
    fail_log build "make cudasim failed" "$work/make.log"
    exit 1
fi
echo "PASS: cudasim/build (make cudasim)"
sim="$B/cudasim"
simlib="$(cd "$sim/lib" && pwd)"
link="$(cat "$sim/libmodelrt-sim.libs")"
unset CUDA_VISIBLE_DEVICES CUDASIM_DEVICES CUDASIM_PEER CUDASIM_FILL CUDASIM_QUIET MODELRT_DEVICE \
      MODELRT_TEST_FAKE_CUDA

# ---------------------------------------------------------------- 1. the simulator itself
if ! "$CXX" -std=c++17 -x c++ -O1 -g -Wall -Wextra -Werror -Itests/cudasim/include -Iruntime \
        tests/cudasim/test_cudasim.cu -o "$work/test_cudasim" -L"$simlib" -lcudasim -l:libcublas.so.13 \
        -Wl,--disable-new-dtags,-rpath,"$simlib" 2>"$work/cxx.log"; then
    fail_log sim/build "compiling tests/cudasim/test_cudasim.cu failed or warned" "$work/cxx.log"
else
    for t in $("$work/test_cudasim" --list); do
        out="$(timeout 60 "$work/test_cudasim" "$t" 2>"$work/$t.err")"
        rc=$?
        if [ $rc -eq 0 ] && [ "$out" = PASS ]; then
            echo "PASS: cudasim/sim/$t"
        else
            failed=1
            case "$out" in
                FAIL:*) echo "FAIL: cudasim/sim/$t:${out#FAIL:}" ;;
                *) echo "FAIL: cudasim/sim/$t: exit status $rc: $(tail -n2 "$work/$t.err" | tr '\n' ' ')" ;;
            esac
        fi
    done
fi

# ---------------------------------------------------------------- 2. the runtime's kernels
blas_cflags="$(pkg-config --cflags openblas 2>/dev/null)"
# shellcheck disable=SC2086
if ! "$CC" -std=c11 -D_GNU_SOURCE -O1 -g -Wall -Wextra -Werror $blas_cflags -Iruntime tests/runtime/cuda_check.c \
        "$sim/libmodelrt-sim.a" $link -o "$work/cuda_check" 2>"$work/cc.log"; then
    fail_log kernels/build "compiling tests/runtime/cuda_check.c against libmodelrt-sim.a failed" "$work/cc.log"
else
    out="$(CUDASIM_DEVICES=2:16384:9.0 timeout 300 "$work/cuda_check" 2>"$work/cuda_check.err")"
    rc=$?
    sed -n 's#^\(PASS\|FAIL\|SKIP\): runtime/cuda/#\1: cudasim/#p' <<<"$out"
    if grep -q '^SKIP:' <<<"$out"; then # on the simulator, nothing may be skipped
        echo "FAIL: cudasim/kernels: cuda_check skipped: $(grep -m1 '^SKIP:' <<<"$out")"
        failed=1
    elif [ $rc -ne 0 ] || grep -q '^FAIL:' <<<"$out"; then
        failed=1
        grep -q '^FAIL:' <<<"$out" ||
            echo "FAIL: cudasim/kernels: exit status $rc: $(tail -n3 "$work/cuda_check.err" | tr '\n' ' ')"
    fi
fi

# ---------------------------------------------------------------- 3. the runtime's unit tests
# shellcheck disable=SC2086
if ! "$CC" -std=c11 -D_GNU_SOURCE -O1 -g -Wall -Wextra -Werror -Iruntime tests/runtime/test_runtime.c \
        "$sim/libmodelrt-sim.a" $link -o "$work/test_runtime" 2>"$work/cc3.log"; then
    fail_log runtime/build "compiling tests/runtime/test_runtime.c against libmodelrt-sim.a failed" "$work/cc3.log"
else
    mkdir -p "$work/rt"
    for t in $("$work/test_runtime" --list); do
        out="$(CUDASIM_DEVICES=2:16384:9.0 MRT_TEST_DIR="$work/rt" timeout 60 "$work/test_runtime" "$t" \
               2>"$work/rt.err")"
        rc=$?
        if [ $rc -eq 0 ] && [ "$out" = PASS ]; then
            echo "PASS: cudasim/runtime/$t"
        else
            failed=1
            case "$out" in
                FAIL:*) echo "FAIL: cudasim/runtime/$t:${out#FAIL:}" ;;
                *) echo "FAIL: cudasim/runtime/$t: exit status $rc: $(grep -m1 cudasim: "$work/rt.err" ||
                                                                     tail -n1 "$work/rt.err")" ;;
            esac
        fi
    done
fi
exit $failed

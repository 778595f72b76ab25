#!/usr/bin/env bash
# tests/runtime/run.sh — build and run the runtime unit tests (tests/runtime/test_runtime.c)
# against $B/lib/libmodelrt.a. Prints one line per test, "PASS: runtime/NAME" or
# "FAIL: runtime/NAME: why", and exits 1 if any failed.
#
#   B              build directory holding lib/libmodelrt.a (default: build)
#   CC             C compiler (default: cc)
#   MODELC_CFLAGS  extra flags, e.g. -fsanitize=address,undefined (used to compile and link)
#
# Each test runs in its own process, so a crash, a sanitizer report or a leak found at exit is
# charged to the test that caused it.
set -u
cd "$(dirname "$0")/../.."
B="${B:-build}"
CC="${CC:-cc}"
CFLAGS_EXTRA="${MODELC_CFLAGS:-}"

work="$(mktemp -d "${TMPDIR:-/tmp}/modelrt-tests.XXXXXX")"
trap 'rm -rf "$work"' EXIT

lib="$B/lib/libmodelrt.a"
if [ ! -f "$lib" ]; then
    echo "FAIL: runtime/build: $lib not found (run: make $lib)"
    exit 1
fi
# The link line the library needs (the Makefile writes it beside the library: with CUDA it adds
# the static CUDA runtime); older build trees without it fall back to pkg-config.
if [ -s "$B/lib/libmodelrt.libs" ]; then
    libs="$(cat "$B/lib/libmodelrt.libs")"
else
    libs="$(pkg-config --libs libcjson openblas 2>/dev/null || echo -lcjson -lopenblas)"
fi
bin="$work/test_runtime"
# shellcheck disable=SC2086
if ! "$CC" -std=c11 -D_GNU_SOURCE -O1 -g -Wall -Wextra $CFLAGS_EXTRA -Iruntime \
        tests/runtime/test_runtime.c "$lib" $libs -lm -lpthread -o "$bin" 2>"$work/cc.log"; then
    echo "FAIL: runtime/build: compiling tests/runtime/test_runtime.c failed:"
    sed 's/^/    /' "$work/cc.log" | head -40
    exit 1
fi
if [ -s "$work/cc.log" ]; then # warnings are failures: the tests are held to the library's flags
    echo "FAIL: runtime/build: warnings compiling tests/runtime/test_runtime.c:"
    sed 's/^/    /' "$work/cc.log" | head -40
    exit 1
fi

export MRT_TEST_DIR="$work"
# allocator_may_return_null: the out-of-memory paths are tested with allocations ASan would
# otherwise abort on before the library sees the NULL.
# protect_shadow_gap=0: the CUDA driver maps memory where ASan keeps its shadow gap (GPU runs).
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1}:allocator_may_return_null=1:protect_shadow_gap=0"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
unset MODELRT_DEVICE
# The CUDA kernels against the CPU references: runs them where a GPU is visible; elsewhere it
# only shows that a program linked with the library starts and says why nothing ran.
blas_cflags="$(pkg-config --cflags openblas 2>/dev/null)"
# shellcheck disable=SC2086
if ! "$CC" -std=c11 -D_GNU_SOURCE -O1 -g -Wall -Wextra $CFLAGS_EXTRA $blas_cflags -Iruntime \
        tests/runtime/cuda_check.c "$lib" $libs -lm -lpthread -o "$work/cuda_check" 2>"$work/cc2.log" ||
        [ -s "$work/cc2.log" ]; then
    echo "FAIL: runtime/cuda/build: compiling tests/runtime/cuda_check.c failed or warned:"
    sed 's/^/    /' "$work/cc2.log" | head -40
    cuda_failed=1
else
    cuda_out="$("$work/cuda_check" 2>"$work/cuda_check.err")"
    cuda_failed=$?
    echo "PASS: runtime/cuda/build (cuda_check.c compiles and links against libmodelrt)"
    echo "$cuda_out"
    if [ $cuda_failed -ne 0 ] && ! grep -q '^FAIL:' <<<"$cuda_out"; then
        echo "FAIL: runtime/cuda/run: exit status $cuda_failed: $(tail -n3 "$work/cuda_check.err" | tr '\n' ' ')"
    fi
fi

# The values and signatures rt_nccl.c gives NCCL (which it loads at run time, without nccl.h)
# against an installed nccl.h: compiled, not run.
nccl_inc="" cuda_inc=""
for d in ${NCCL_HOME:+$NCCL_HOME/include} /usr/include /usr/local/include /usr/local/cuda/include; do
    [ -z "$nccl_inc" ] && [ -f "$d/nccl.h" ] && nccl_inc="$d"
done
for d in ${CUDA_HOME:+$CUDA_HOME/include} /usr/local/cuda/include /usr/include; do
    [ -z "$cuda_inc" ] && [ -f "$d/cuda_runtime_api.h" ] && cuda_inc="$d"
done
if [ -z "$nccl_inc" ] || [ -z "$cuda_inc" ]; then
    echo "SKIP: runtime/nccl_abi: no ${nccl_inc:+cuda_runtime_api.h}${nccl_inc:-nccl.h} found (NCCL's or CUDA's headers)"
elif "$CC" -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror -Iruntime -I"$nccl_inc" -I"$cuda_inc" \
        -c tests/runtime/nccl_abi.c -o "$work/nccl_abi.o" 2>"$work/nccl_abi.log"; then
    echo "PASS: runtime/nccl_abi (rt_nccl.c's NCCL values and calls match $nccl_inc/nccl.h)"
else
    echo "FAIL: runtime/nccl_abi: rt_nccl.c's NCCL values or calls differ from $nccl_inc/nccl.h:"
    sed 's/^/    /' "$work/nccl_abi.log" | head -20
    cuda_failed=1
fi

failed=$cuda_failed
for t in $("$bin" --list); do
    out="$("$bin" "$t" 2>"$work/$t.err")"
    rc=$?
    if [ $rc -eq 0 ] && [ "$out" = "PASS" ]; then
        echo "PASS: runtime/$t"
        continue
    fi
    failed=1
    case "$out" in
        FAIL:*) echo "FAIL: runtime/$t:${out#FAIL:}" ;;
        *)  # crashed, or a sanitizer spoke after the test passed
            why="$(grep -m1 -E 'ERROR|SUMMARY|runtime error' "$work/$t.err" || tail -n1 "$work/$t.err")"
            echo "FAIL: runtime/$t: exit status $rc${why:+: $why}" ;;
    esac
done

# The f16 / bf16 conversions of mrt_kernels.h, every 16-bit pattern and a sample of floats,
# against NumPy (tests/runtime/half_check.py holds the reference and prints the lines).
# shellcheck disable=SC2086
if ! "$CC" -std=c11 -D_GNU_SOURCE -O1 -g -Wall -Wextra $CFLAGS_EXTRA $blas_cflags -Iruntime \
        tests/runtime/test_half.c -lm -o "$work/test_half" 2>"$work/cc3.log" || [ -s "$work/cc3.log" ]; then
    echo "FAIL: runtime/half/build: compiling tests/runtime/test_half.c failed or warned:"
    sed 's/^/    /' "$work/cc3.log" | head -40
    failed=1
elif ! python3 tests/runtime/half_check.py "$work/test_half"; then
    failed=1
fi

# mrt_tanhf (gelu's tanh) and mrt_erff (exact gelu's erf) against libm's double tanh and erf: every 61st
# float and all of [0.5, 0.95] (where their formulas meet),
# vectorized as the generated loops run it (`tests/runtime/test_tanh` with no argument: all 2^31).
# shellcheck disable=SC2086
if ! "$CC" -std=c11 -D_GNU_SOURCE -O2 -fopenmp-simd -g -Wall -Wextra $CFLAGS_EXTRA -Iruntime \
        tests/runtime/test_tanh.c -lm -o "$work/test_tanh" 2>"$work/cc4.log" || [ -s "$work/cc4.log" ]; then
    echo "FAIL: runtime/tanh/build: compiling tests/runtime/test_tanh.c failed or warned:"
    sed 's/^/    /' "$work/cc4.log" | head -40
    failed=1
elif ! "$work/test_tanh" 61; then
    failed=1
fi

# A CPU kernel with two paths (AVX-512 chosen at run time, and a portable one that ENV=portable
# forces): its test program against references in double, once per path; the two runs' output
# files must then agree bit for bit.
#   two_paths NAME SOURCE ENV WHAT
two_paths() {
    local name=$1 src=$2 env=$3 what=$4
    # shellcheck disable=SC2086
    if ! "$CC" -std=c11 -D_GNU_SOURCE -O1 -g -Wall -Wextra $CFLAGS_EXTRA -Iruntime \
            "$src" "$lib" $libs -lm -lpthread -o "$work/test_$name" 2>"$work/cc_$name.log" ||
            [ -s "$work/cc_$name.log" ]; then
        echo "FAIL: runtime/$name/build: compiling $src failed or warned:"
        sed 's/^/    /' "$work/cc_$name.log" | head -40
        failed=1
    elif ! "$work/test_$name" "$work/${name}_default.bin" ||
            ! (set -o pipefail; env "$env=portable" "$work/test_$name" "$work/${name}_portable.bin" |
               sed "s|runtime/$name|runtime/$name/portable|"); then
        failed=1
    elif ! cmp -s "$work/${name}_default.bin" "$work/${name}_portable.bin"; then
        echo "FAIL: runtime/$name/paths: the default and the portable $what differ ($(cmp "$work/${name}_default.bin" "$work/${name}_portable.bin" 2>&1 | head -1))"
        failed=1
    else
        echo "PASS: runtime/$name/paths (the default and the portable path agree bit for bit)"
    fi
}

# The direct depthwise conv2d (rt_dwconv.c) against a double reference on random shapes.
two_paths dwconv tests/runtime/test_dwconv.c MODELRT_DWCONV "depthwise paths"
# The row kernels of rt_rows.c (softmax, layer norm) and mrt_exp_nonpos against references in
# double.
two_paths rows tests/runtime/test_rows.c MODELRT_SIMD "row kernels"
# The fused attention of rt_rows.c against a reference in double, at 1, 2 and 3 threads.
two_paths attn tests/runtime/test_attn.c MODELRT_SIMD "attention kernels"
exit $failed

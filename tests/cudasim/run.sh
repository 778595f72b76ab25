#!/usr/bin/env bash
# tests/cudasim/run.sh — the CUDA code on the simulated device (tests/cudasim/include/cudasim.h):
#   1. the simulator's own tests (test_cudasim.cu): what a GPU runs, and what it rejects;
#   2. tests/runtime/cuda_check.c against the runtime built for the simulator (make cudasim):
#      every runtime CUDA kernel and the cuBLAS/cuBLASLt GEMMs against the CPU references, with
#      the threads of a block scheduled lowest first (with CUDASIM_FULL=1 again highest first and
#      at random), then on cuda:1 of two GPUs (MRT_CHECK_DEVICE); and field case B12 sampled: softmax over
#      [131073, 16384] (more than 2^31 elements, 17 GB allocated, never touched) with only the
#      blocks of rows 0, 1, 131071 and 131072 (at element 2^31) run (CUDASIM_SAMPLE_BLOCKS), and
#      the kernel modelc generates for y = x + 1 over 2^31 + 64 f16 elements, sampled alike;
#   3. the runtime's unit tests (tests/runtime/test_runtime.c) with two simulated GPUs, so that
#      the CUDA half of the device API (rt_cuda.c) runs where the ordinary suite has no GPU;
#   4. the tests/numeric cases of numeric_quick.txt (with CUDASIM_FULL=1 every case) compiled
#      by $B/cudasim/bin/modelc (NAME.cu by the host C++ compiler) and run with --device cuda
#      against the reference interpreter, and a few of them with --device cuda:1 of two GPUs;
#   5. generated models run on the simulated GPUs against their own CPU run (|gpu - cpu| <=
#      1e-5 (1 + |cpu|)): examples/digits (and its launch, copy and host synchronization counts
#      per run, from --time, with CUDA graphs and without), the CUDA graphs of a generated run()
#      (graphs_check.c: replay, re-capture, device buffers, a check in a replay), and
#      tests/numeric's dev_split_bits with its cpu:N
#      regions mapped to two GPUs, with peer access and without (staged copies), and
#      tests/cudasim/transfer_race.model (a peer copy whose source block is reused at once),
#      then each of them replayed as one CUDA graph over its GPUs (eager without peer access),
#      and digits falling back to eager runs when its capture fails (CUDASIM_CAPTURE_FAIL);
#   6. the examples ResNet-18 and GPT-2 (batch 1) and MiniLM with MODELRT_DEVICE=cuda, each
#      against PyTorch by its own check.py as make gpu-check runs them (about 10, 3 and 10 s),
#      then ResNet-18 replayed as a CUDA graph (its counts, and the eager run's logits);
#   7. data-parallel inference on two GPUs (tests/dp), and tests/train (the models against PyTorch,
#      resume, eval, gradcheck) and dropout's masks (dropout.py) on a simulated GPU (TRAIN_DEVICE=cuda).
# Prints one line per test, "PASS: cudasim/NAME" or "FAIL: cudasim/NAME: why", then the suite line
# "cudasim: N passed, N failed" (those lines counted), and exits 1 if any failed. Needs no GPU
# and no nvcc: only the host C and C++ compilers.
#
#   B      build directory (default: build); the simulator builds into $B/cudasim
#   CUDASIM_FULL=1 (make cudasim-full): what make test leaves out to stay quick: section 2's
#          checks again with the threads of a block run highest first and at random
#          (CUDASIM_SCHEDULE), every numeric case in section 4 (make test: numeric_quick.txt's,
#          which launch every kernel the whole set does; the full run checks that they still do)
#   CC     C compiler (default: cc); CXX: C++ compiler (default: g++)
set -u
cd "$(dirname "$0")/../.."
B="${B:-build}"
CC="${CC:-cc}"
CXX="${CXX:-g++}"
full="${CUDASIM_FULL:-0}"

work="$(mktemp -d "${TMPDIR:-/tmp}/cudasim-tests.XXXXXX")"
trap 'rm -rf "$work"' EXIT
failed=0
{ # the tests; their output is kept in $work/out to count for the suite line at the end

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
sim="$(cd "$B/cudasim" && pwd)"
simlib="$sim/lib"
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
    out="$(CUDASIM_DEVICES=2:16384:9.0 CUDASIM_PEER=0 timeout 300 "$work/cuda_check" 2>"$work/cuda_check.err")"
    rc=$?
    if [ $rc -eq 0 ] && grep -q '^PASS: runtime/cuda/gpu_to_gpu_copies' <<<"$out" && ! grep -q '^\(FAIL\|SKIP\):' <<<"$out"; then
        echo "PASS: cudasim/kernels_no_peer (CUDASIM_PEER=0: GPU-to-GPU copies staged)"
    else
        failed=1
        echo "FAIL: cudasim/kernels_no_peer: CUDASIM_PEER=0: exit status $rc:" \
             "$(grep -m1 '^\(FAIL\|SKIP\):' <<<"$out" || tail -n2 "$work/cuda_check.err" | tr '\n' ' ')"
    fi
    # other interleavings show other races; make test keeps the lowest-first order above (the
    # kernels' __syncthreads and shared memory are checked under it), make cudasim-full adds these
    scheds=""
    [ "$full" = 1 ] && scheds="reverse random:1"
    for sched in $scheds; do
        out="$(CUDASIM_DEVICES=2:16384:9.0 CUDASIM_SCHEDULE=$sched timeout 300 "$work/cuda_check" \
               2>"$work/cuda_check.err")"
        rc=$?
        n="$(grep -c '^PASS:' <<<"$out")"
        if [ $rc -eq 0 ] && ! grep -q '^\(FAIL\|SKIP\):' <<<"$out"; then
            echo "PASS: cudasim/kernels_schedule_${sched%%:*} ($n checks, CUDASIM_SCHEDULE=$sched)"
        else
            failed=1
            echo "FAIL: cudasim/kernels_schedule_${sched%%:*}: CUDASIM_SCHEDULE=$sched: exit status $rc:" \
                 "$(grep -m1 '^\(FAIL\|SKIP\):' <<<"$out" || tail -n2 "$work/cuda_check.err" | tr '\n' ' ')"
        fi
    done
    # Every check again on cuda:1 of two GPUs, without peer access, so that a kernel handed a
    # cuda:0 buffer faults (the GPU-to-GPU copies go to cuda:0, staged).
    out="$(CUDASIM_DEVICES=2:16384:9.0 CUDASIM_PEER=0 MRT_CHECK_DEVICE=cuda:1 timeout 300 "$work/cuda_check" \
           2>"$work/cuda_check.err")"
    rc=$?
    sed -n 's#^\(PASS\|FAIL\|SKIP\): runtime/cuda/#\1: cudasim/cuda_check_cuda1/#p' <<<"$out"
    if [ $rc -ne 0 ] || grep -q '^\(FAIL\|SKIP\):' <<<"$out" || ! grep -q '^# cuda:1 ' <<<"$out"; then
        failed=1
        grep -q '^\(FAIL\|SKIP\):' <<<"$out" ||
            echo "FAIL: cudasim/cuda_check_cuda1: exit status $rc: $(tail -n3 "$work/cuda_check.err" | tr '\n' ' ')"
    fi
    # Field case B12 without the 17 GB: X and Y [131073, 16384] f32 allocated on a 20 GiB device
    # and left unfilled (CUDASIM_FILL=none), and of softmax_rows_kernel's 131073 blocks (one per
    # row) only rows 0, 1, 131071 and 131072 run; row 131072 starts at element 2^31, where a
    # 32-bit row offset reads 8 GiB below X (a fault) or leaves the row unwritten (NaN).
    out="$(CUDASIM_DEVICES=1:20480:9.0 CUDASIM_FILL=none MRT_CHECK_B12=sampled \
           CUDASIM_SAMPLE_BLOCKS=softmax_rows_kernel:0,1,131071,131072 timeout 120 "$work/cuda_check" \
           2>"$work/b12.err")"
    rc=$?
    if [ $rc -eq 0 ] && grep -q '^PASS: runtime/cuda/b12_softmax_2g_sampled' <<<"$out" &&
       ! grep -q '^\(FAIL\|SKIP\):' <<<"$out"; then
        sed -n 's#^PASS: runtime/cuda/b12_softmax_2g_sampled#PASS: cudasim/b12_softmax_2g_sampled#p' <<<"$out"
    else
        failed=1
        echo "FAIL: cudasim/b12_softmax_2g_sampled: exit status $rc:" \
             "$(grep -m1 '^\(FAIL\|SKIP\):' <<<"$out" || grep -m1 'cudasim:' "$work/b12.err" ||
                tail -n2 "$work/b12.err" | tr '\n' ' ')"
    fi
fi
# B12's companion, generated: tests/cudasim/b12_add.model (y = x + 1 over 2^31 + 64 f16) emitted
# as C and driven by tests/cudasim/b12_check.c on device buffers, only the first and the last
# block of its capped grid run: block 0's grid-stride loop ends past element 2^31 (an int32 index
# there leaves y's tail unwritten, or never ends: the timeout).
b="$work/b12_add"
mkdir -p "$b"
# shellcheck disable=SC2086
if ! { "$sim/bin/modelc" tests/cudasim/b12_add.model --emit-c -o "$b" &&
       tests/cudasim/nvcc.sh -O1 -g -Iruntime -c "$b/b12_add.cu" -o "$b/model_cu.o" &&
       "$CC" -std=c11 -D_GNU_SOURCE -O1 -g -DMRT_WITH_CUDA -Itests/cudasim/include -Iruntime \
           -c "$b/b12_add.c" -o "$b/model.o" &&
       "$CC" -std=c11 -D_GNU_SOURCE -O1 -g -Wall -Wextra -Werror -DMRT_WITH_CUDA -I"$b" -Iruntime \
           tests/cudasim/b12_check.c "$b/model.o" "$b/model_cu.o" "$sim/libmodelrt-sim.a" $link -o "$b/check"; } \
        >"$b/log" 2>&1; then
    fail_log b12_add_2g_sampled/build "building tests/cudasim/b12_check.c failed" "$b/log"
else
    out="$(CUDASIM_DEVICES=1:20480:9.0 CUDASIM_FILL=none CUDASIM_SAMPLE_BLOCKS=b12_add_k0_g:0,-1 timeout 60 \
           "$b/check" 2>"$b/err")"
    rc=$?
    echo "$out"
    if [ $rc -ne 0 ] || ! grep -q '^PASS: cudasim/b12_add_2g_sampled' <<<"$out"; then
        failed=1
        grep -q '^FAIL' <<<"$out" ||
            echo "FAIL: cudasim/b12_add_2g_sampled: exit status $rc$([ $rc = 124 ] && echo ' (timed out)'):" \
                 "$(tail -n2 "$b/err" | tr '\n' ' ')"
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

# ---------------------------------------------------------------- 4. the numeric cases
# make test: the cases of tests/cudasim/numeric_quick.txt, which launch every runtime kernel,
# library call and kind of generated kernel that the whole set launches (tests/numeric runs every
# case on the CPU); make cudasim-full: every case, traced (CUDASIM_TRACE), then the check that
# the quick list still launches all that the whole set did (numeric_cover.py check).
PY="${PYTHON:-python3}"
if [ "$full" = 1 ]; then
    numeric_sel=()
    trace=(CUDASIM_TRACE="$work/numeric.trace")
else
    numeric_sel=(--cases tests/cudasim/numeric_quick.txt)
    trace=()
fi
out="$(env CUDASIM_DEVICES=2:16384:9.0 MODELC="$sim/bin/modelc" "${trace[@]}" timeout 1200 "$PY" tests/numeric/run.py \
       --device cuda "${numeric_sel[@]}" 2>"$work/numeric.err")"
rc=$?
sed -n 's#^\(PASS\|FAIL\|SKIP\): numeric/#\1: cudasim/numeric/#p' <<<"$out"
if [ $rc -ne 0 ]; then
    failed=1
    grep -q '^FAIL:' <<<"$out" ||
        echo "FAIL: cudasim/numeric: exit status $rc: $(tail -n3 "$work/numeric.err" | tr '\n' ' ')"
fi
if [ "$full" = 1 ]; then # each case's generated kernels, for their variants (element type, faults, rank)
    mkdir -p "$work/emit"
    for m in tests/numeric/cases/*.model; do
        c="$(basename "$m" .model)"
        "$sim/bin/modelc" "$m" --emit-c -o "$work/emit/$c" --max-batch 4 --max-dim seq=16 >/dev/null 2>&1 ||
            "$sim/bin/modelc" "$m" --emit-c -o "$work/emit/$c" --max-batch 4 >/dev/null 2>&1
    done
    "$PY" tests/cudasim/numeric_cover.py check "$work/numeric.trace" "$work/emit" tests/cudasim/numeric_quick.txt ||
        failed=1
fi
# a few of them on cuda:1 of two GPUs: GEMM with an epilogue, convolution, attention, softmax,
# half-precision library calls, layer norm, and a device-side range check
out="$(CUDASIM_DEVICES=2:16384:9.0 MODELC="$sim/bin/modelc" timeout 600 "$PY" tests/numeric/run.py \
       --device cuda:1 -k gemm_epilogue_bcast -k nn_conv2d_basic -k nn_sdpa_causal -k softmax_axes \
       -k half_library -k nn_layer_norm_offset -k move_gather_out_of_range 2>"$work/numeric1.err")"
rc=$?
sed -n 's#^\(PASS\|FAIL\|SKIP\): numeric/#\1: cudasim/numeric_cuda1/#p' <<<"$out"
if [ $rc -ne 0 ] || [ "$(grep -c '^PASS:' <<<"$out")" -ne 7 ]; then
    failed=1
    grep -q '^FAIL:' <<<"$out" ||
        echo "FAIL: cudasim/numeric_cuda1: exit status $rc, $(grep -c '^PASS:' <<<"$out") of 7 cases passed:" \
             "$(tail -n3 "$work/numeric1.err" | tr '\n' ' ')"
fi

# ---------------------------------------------------------------- 5. models, GPU against CPU
# model_check NAME MODEL WEIGHTS INPUTS OUTPUTS [ENV=VALUE ...] -- RUN_ARGS...: compile MODEL with the
# simulator's modelc, run it on the CPU and with RUN_ARGS under ENV, compare every output.
model_check() {
    local name=$1 model=$2 weights=$3 inputs=$4 outputs=$5
    shift 5
    local envs=()
    while [ $# -gt 0 ] && [ "$1" != -- ]; do envs+=("$1"); shift; done
    shift
    local d="$work/model_$name" io=() o built
    mkdir -p "$d"
    # one build per model: the checks of the same model on other devices share it
    built="$work/built_$(printf '%s' "$model" | tr -c 'A-Za-z0-9_' _)"
    if [ -x "$built" ]; then
        ln "$built" "$d/prog"
    elif ! "$sim/bin/modelc" "$model" -o "$d/prog" --max-batch 4 >"$d/log" 2>&1; then
        fail_log "model/$name" "modelc failed" "$d/log"
        return
    else
        ln "$d/prog" "$built"
    fi
    for o in $inputs; do io+=(--input "$o"); done
    for o in $outputs; do io+=(--output "$o=$d/cpu_$o.npy"); done
    if ! "$d/prog" --weights "$weights" "${io[@]}" --device cpu >"$d/log" 2>&1; then
        fail_log "model/$name" "the CPU run failed" "$d/log"
        return
    fi
    io=()
    for o in $inputs; do io+=(--input "$o"); done
    for o in $outputs; do io+=(--output "$o=$d/gpu_$o.npy"); done
    if ! env "${envs[@]}" "$d/prog" --weights "$weights" "${io[@]}" "$@" >"$d/log" 2>&1; then
        fail_log "model/$name" "the run with $* failed" "$d/log"
        return
    fi
    "$PY" - "$name" "$d" $outputs <<'PYEOF' || failed=1
import sys
import numpy as np
name, d, outs = sys.argv[1], sys.argv[2], sys.argv[3:]
worst, bad = 0.0, None
for o in outs:
    c, g = np.load("%s/cpu_%s.npy" % (d, o)), np.load("%s/gpu_%s.npy" % (d, o))
    if c.shape != g.shape:
        bad = "output %s: shape %s on the GPU, %s on the CPU" % (o, g.shape, c.shape)
        break
    r = np.abs(g.astype(np.float64) - c) / (1.0 + np.abs(c.astype(np.float64)))
    m = float(r.max()) if r.size else 0.0
    if not np.isfinite(m) or m > 1e-5:
        i = np.unravel_index(int(np.nanargmax(np.where(np.isfinite(r), r, np.inf))), r.shape)
        bad = "output %s: at %s the GPU gives %r, the CPU %r" % (o, tuple(int(k) for k in i), g[i], c[i])
        break
    worst = max(worst, m)
if bad:
    print("FAIL: cudasim/model/%s: %s (tolerance 1e-5)" % (name, bad))
    sys.exit(1)
print("PASS: cudasim/model/%s maxdiff %.3g tolerance 1e-05" % (name, worst))
PYEOF
}

ex=examples/digits
model_check digits "$ex/digits.model" "$ex/digits.safetensors" "x=$ex/test_x.npy" logits \
    CUDASIM_DEVICES=1 -- --device cuda
# What a digits run asks of the GPU (--time on the simulator): its two GEMMs (replayed as one
# CUDA graph; with MODELRT_CUDA_GRAPHS=0 two library calls), the input's copy in and the logits'
# copy out, and no host synchronization before the end: the copy of the logits to pageable
# memory and the end-of-run stream synchronization are its only two.
"$PY" -c "import numpy as np; np.save('$work/digits_x4.npy', np.load('$ex/test_x.npy')[:4])"
for graphs in 1 0; do
    if [ $graphs = 1 ]; then
        want="0 kernel launches, 0 library calls, 1 graph launches, 2 copies, 2 host synchronizations"
    else
        want="0 kernel launches, 2 library calls, 0 graph launches, 2 copies, 2 host synchronizations"
    fi
    got="$(CUDASIM_DEVICES=1 MODELRT_CUDA_GRAPHS=$graphs "$work/model_digits/prog" --weights "$ex/digits.safetensors" \
           --input x="$work/digits_x4.npy" --output logits="$work/digits_graphs$graphs.npy" --device cuda --time \
           --repeat 3 2>&1 >/dev/null | sed -n 's/^time: simulated CUDA per run: //p')"
    if [ "$got" = "$want" ]; then
        echo "PASS: cudasim/model/digits_counts_graphs$graphs (per run: $got)"
    else
        echo "FAIL: cudasim/model/digits_counts_graphs$graphs: per run: '$got', expected '$want'"
        failed=1
    fi
done
# the replayed graph's cuBLASLt GEMMs (their split-K workspace captured) give the eager run's logits
if cmp -s "$work/digits_graphs1.npy" "$work/digits_graphs0.npy"; then
    echo "PASS: cudasim/model/digits_graph_replay (logits bit-identical to the run without CUDA graphs)"
else
    echo "FAIL: cudasim/model/digits_graph_replay: the replayed graph's logits differ from the eager run's"
    failed=1
fi

# --profile on a GPU: each kernel is timed between stream synchronizations, so the profiled runs
# go eagerly (two library calls, no graph launch) and give the same logits; the profile has
# digits' two GEMMs and their FLOPs at batch 4 (2*4*64*128 + 2*4*128*10 = 75776).
prof="$(CUDASIM_DEVICES=1 "$work/model_digits/prog" --weights "$ex/digits.safetensors" --input x="$work/digits_x4.npy" \
        --output logits="$work/digits_prof.npy" --device cuda --time --repeat 3 --profile 2>&1 >/dev/null)"
if ! echo "$prof" | grep -q "^time: simulated CUDA per run: 0 kernel launches, 2 library calls, 0 graph launches"; then
    echo "FAIL: cudasim/model/digits_profile: the profiled runs were not eager: $(echo "$prof" | grep '^time: simulated')"
    failed=1
elif ! echo "$prof" | grep -q "^profile:   GEMMs and convolutions .* 7.58e-05 GFLOP per call" ||
     [ "$(echo "$prof" | grep -c 'k[01] matmul digits.model')" != 2 ]; then
    echo "FAIL: cudasim/model/digits_profile: unexpected profile:"; echo "$prof" | sed 's/^/    /'
    failed=1
elif ! cmp -s "$work/digits_prof.npy" "$work/digits_graphs0.npy"; then
    echo "FAIL: cudasim/model/digits_profile: the profiled run's logits differ from the eager run's"
    failed=1
else
    echo "PASS: cudasim/model/digits_profile (eager, 2 GEMM kernels, 7.58e-05 GFLOP per call of run(), same logits)"
fi

# A call that fails while the run is being captured as a CUDA graph (CUDASIM_CAPTURE_FAIL=op:N:
# the N-th operation queued on a capturing stream, here digits' first or second GEMM; =end:
# cudaStreamEndCapture) makes that run itself fall back: the capture is dropped and its calls run
# again eagerly. The logits are the CPU run's, one warning says so, and the timed runs after it
# run with graphs off (--repeat 3 after the eager and the capturing warm-ups).
digits_cpu4="$work/digits_cpu4.npy"
"$work/model_digits/prog" --weights "$ex/digits.safetensors" --input x="$work/digits_x4.npy" --output logits="$digits_cpu4" \
    --device cpu >/dev/null 2>&1 || echo "FAIL: cudasim/model/digits_capture_fail: the CPU run failed"
for inj in op:1 op:2 end; do
    log="$work/capture_fail.log"
    rm -f "$work/capture_fail.npy"
    CUDASIM_DEVICES=1 CUDASIM_CAPTURE_FAIL=$inj "$work/model_digits/prog" --weights "$ex/digits.safetensors" \
        --input x="$work/digits_x4.npy" --output logits="$work/capture_fail.npy" --device cuda --time --repeat 3 >"$log" 2>&1
    rc=$?
    got="$(sed -n 's/^time: simulated CUDA per run: //p' "$log")"
    want="0 kernel launches, 2 library calls, 0 graph launches, 2 copies, 2 host synchronizations"
    warns="$(grep -c 'cannot be a CUDA graph (.*); running without graphs' "$log")"
    name="digits_capture_fail_${inj%%:*}${inj#*:}"
    [ "$inj" = end ] && name=digits_capture_fail_end
    if [ $rc -ne 0 ] || [ "$warns" != 1 ] || [ "$got" != "$want" ]; then
        fail_log "model/$name" "CUDASIM_CAPTURE_FAIL=$inj: exit status $rc, $warns 'cannot be a CUDA graph' warnings (want 1), per run: '$got' (want '$want')" "$log"
        continue
    fi
    "$PY" - "$name" "$digits_cpu4" "$work/capture_fail.npy" "$inj" <<'PYEOF' || failed=1
import sys
import numpy as np
name, cpu, gpu, inj = sys.argv[1:]
c, g = np.load(cpu).astype(np.float64), np.load(gpu).astype(np.float64)
m = float((np.abs(g - c) / (1.0 + np.abs(c))).max()) if c.shape == g.shape else float("inf")
if not m <= 1e-5:
    print("FAIL: cudasim/model/%s: CUDASIM_CAPTURE_FAIL=%s: logits %s differ from the CPU run's by %g (tolerance 1e-5)"
          % (name, inj, g.shape, m))
    sys.exit(1)
print("PASS: cudasim/model/%s (CUDASIM_CAPTURE_FAIL=%s: one warning, then per run: 0 graph launches; maxdiff %.3g "
      "tolerance 1e-05)" % (name, inj, m))
PYEOF
done

# The memory pre-flight counts cuBLAS's workspace (32 MiB on sm_90): digits' 42 KB fit a 30 MiB
# GPU, its workspace does not, and an explicit device says so before allocating anything.
log="$work/preflight.log"
if ! CUDASIM_DEVICES=1:30:9.0 MODELRT_CUDA_GRAPHS=0 "$work/model_digits/prog" --weights "$ex/digits.safetensors" \
        --input x="$work/digits_x4.npy" --device cuda >"$log" 2>&1 &&
   grep -q "the model needs 33596416 there (.*, 33554432 cuBLAS workspace)$" "$log"; then
    echo "PASS: cudasim/model/preflight_workspace ($(grep -o 'needs [0-9]* there' "$log"))"
else
    fail_log model/preflight_workspace "expected the pre-flight to refuse a 30 MiB GPU, counting the cuBLAS workspace" "$log"
fi
# ... and the memory of the CUDA graphs the run keeps (4 of 8 MiB) when it will use them: on a
# second GPU of 48 MiB (CUDASIM_DEVICES with a size per device), digits runs without graphs and
# is refused with them, the graphs named; cuda:0 (16 GiB) runs it with graphs.
log="$work/preflight_graphs.log"
x4=(--weights "$ex/digits.safetensors" --input x="$work/digits_x4.npy")
if CUDASIM_DEVICES=2:16384,48:9.0 MODELRT_CUDA_GRAPHS=0 "$work/model_digits/prog" "${x4[@]}" --device cuda:1 \
        --repeat 3 >"$log" 2>&1 &&
   CUDASIM_DEVICES=2:16384,48:9.0 "$work/model_digits/prog" "${x4[@]}" --device cuda:0 --repeat 3 >>"$log" 2>&1 &&
   ! CUDASIM_DEVICES=2:16384,48:9.0 "$work/model_digits/prog" "${x4[@]}" --device cuda:1 >>"$log" 2>&1 &&
   grep -q "cuda:1 has 50331648 bytes free (of 50331648), the model needs 67150848 there (.*, 33554432 cuBLAS workspace, 33554432 CUDA graphs (up to 4 of 8388608; MODELRT_CUDA_GRAPHS=0 runs without))" "$log"; then
    echo "PASS: cudasim/model/preflight_graphs (48 MiB: runs with MODELRT_CUDA_GRAPHS=0; with graphs $(grep -o 'needs [0-9]* there' "$log"))"
else
    fail_log model/preflight_graphs "expected a 48 MiB cuda:1 to run digits without CUDA graphs and to be refused with them" "$log"
fi

# CUDA graphs of a generated run() (tests/cudasim/graphs_check.c): replayed bit for bit, with one
# graph launch and no kernel launch; re-captured for other sizes and other device buffers; a bad
# id reported from a replay. The model is emitted as C and built here against the simulator.
g="$work/graphs"
mkdir -p "$g"
# shellcheck disable=SC2086
if ! { "$sim/bin/modelc" tests/numeric/cases/symbolic_attention.model --emit-c -o "$g" --max-batch 4 --max-dim seq=16 &&
       tests/cudasim/nvcc.sh -O1 -g -Iruntime -c "$g/symbolic_attention.cu" -o "$g/model_cu.o" &&
       "$CC" -std=c11 -D_GNU_SOURCE -O1 -g -DMRT_WITH_CUDA -Itests/cudasim/include -Iruntime \
           -c "$g/symbolic_attention.c" -o "$g/model.o" &&
       "$CC" -std=c11 -D_GNU_SOURCE -O1 -g -Wall -Wextra -Werror -DMRT_WITH_CUDA -I"$g" -Iruntime \
           tests/cudasim/graphs_check.c "$g/model.o" "$g/model_cu.o" "$sim/libmodelrt-sim.a" $link -o "$g/check" &&
       "$PY" -c "
import sys; sys.path.insert(0, 'tools')
import numpy as np
from safetensors_np import write
r = np.random.default_rng(5)
write('$g/w.safetensors', {k: r.normal(size=s).astype(np.float32) for k, s in
                           {'emb': (50, 16), 'pos': (16, 16), 'wq': (16, 16)}.items()})"; } >"$g/log" 2>&1; then
    fail_log graphs/build "building tests/cudasim/graphs_check.c failed" "$g/log"
else
    out="$(CUDASIM_DEVICES=1 timeout 120 "$g/check" "$g/w.safetensors" 2>"$g/err")"
    rc=$?
    echo "$out"
    if [ $rc -ne 0 ] || grep -q '^FAIL' <<<"$out" || [ "$(grep -c '^PASS' <<<"$out")" -ne 5 ]; then
        failed=1
        grep -q '^FAIL' <<<"$out" || echo "FAIL: cudasim/graphs: exit status $rc: $(tail -n2 "$g/err" | tr '\n' ' ')"
    fi
fi
"$PY" - "$work/split" <<'PYEOF' || { echo "FAIL: cudasim/model/dev_split: cannot write its inputs"; failed=1; }
import os, sys
import numpy as np
sys.path.insert(0, "tools")
from safetensors_np import write
d = sys.argv[1]
os.makedirs(d, exist_ok=True)
rng = np.random.default_rng(7)
shapes = {"conv.weight": (4, 3, 3, 3), "conv.bias": (4,), "fc.weight": (10, 16), "fc.bias": (10,),
          "ln.weight": (10,), "ln.bias": (10,)}
write(os.path.join(d, "w.safetensors"), {k: rng.normal(size=s).astype(np.float32) for k, s in shapes.items()})
write(os.path.join(d, "none.safetensors"), {})
np.save(os.path.join(d, "x.npy"), rng.normal(size=(3, 3, 6, 6)).astype(np.float32))
PYEOF
split=tests/numeric/cases/dev_split_bits.model
model_check dev_split_peer "$split" "$work/split/w.safetensors" "x=$work/split/x.npy" "y s m" \
    CUDASIM_DEVICES=2 -- --device cuda --device-map cpu:1=cuda:1,cpu:2=cuda:0
model_check dev_split_staged "$split" "$work/split/w.safetensors" "x=$work/split/x.npy" "y s m" \
    CUDASIM_DEVICES=2 CUDASIM_PEER=0 -- --device cuda --device-map cpu:1=cuda:1,cpu:2=cuda:0
model_check dev_split_three "$split" "$work/split/w.safetensors" "x=$work/split/x.npy" "y s m" \
    CUDASIM_DEVICES=3 -- --device cuda:2 --device-map cpu:1=cuda:0,cpu:2=cuda:1
# a transfer between GPUs whose source block is reused by the source slot right after it
"$PY" -c "import numpy as np; np.save('$work/split/race_x.npy', np.random.default_rng(3).normal(size=(2, 64)).astype(np.float32))"
model_check transfer_race tests/cudasim/transfer_race.model "$work/split/none.safetensors" "x=$work/split/race_x.npy" "z y" \
    CUDASIM_DEVICES=2 -- --device cuda --device-map cpu:1=cuda:1
model_check transfer_race_one_gpu tests/cudasim/transfer_race.model "$work/split/none.safetensors" "x=$work/split/race_x.npy" \
    "z y" CUDASIM_DEVICES=1 -- --device cuda --device-map cpu:1=cuda:0
# mrt_erff, mrt_tanhf and the gelus on every 16411th float bit pattern (positive and negative),
# plus +-0, +-inf, NaN and the neighbourhoods of their formulas' seams: the simulated GPU's
# kernels against the CPU's default run, bit for bit, and the CPU with MODELRT_SIMD=portable and
# =avx2 (the baseline and x86-64-v3 copies of the generated loops) against it too.
d="$work/transcendental"
mkdir -p "$d"
rows="$("$PY" - "$d" <<'PYEOF'
import sys
import numpy as np
u = np.arange(0, 2**32, 16411, dtype=np.uint64).astype(np.uint32)
seams = np.concatenate([np.arange(np.float32(a).view(np.uint32) - 1500, np.float32(a).view(np.uint32) + 1500,
                                  dtype=np.uint32) for a in (0.625, 0.875, 0.9, 4.0, 10.0)])
special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan], np.float32).view(np.uint32)
x = np.concatenate([u, seams, seams | np.uint32(0x80000000), special]).view(np.float32)
x = np.concatenate([x, np.zeros((-len(x)) % 4096, np.float32)]).reshape(-1, 4096)
np.save(sys.argv[1] + "/x.npy", x)
print(x.shape[0])
PYEOF
)"
if ! "$sim/bin/modelc" tests/cudasim/transcendental.model -o "$d/prog" --max-batch "$rows" >"$d/log" 2>&1; then
    fail_log transcendental_bits "modelc failed" "$d/log"
else
    tb_ok=1
    for run in cpu portable avx2 gpu; do
        case $run in
        cpu) envs=(CUDASIM_DEVICES=1) args=(--device cpu) ;;
        portable) envs=(CUDASIM_DEVICES=1 MODELRT_SIMD=portable) args=(--device cpu) ;;
        avx2) envs=(CUDASIM_DEVICES=1 MODELRT_SIMD=avx2) args=(--device cpu) ;;
        gpu) envs=(CUDASIM_DEVICES=1) args=(--device cuda) ;;
        esac
        io=(--input "x=$d/x.npy")
        for o in g gt e t; do io+=(--output "$o=$d/${run}_$o.npy"); done
        if ! env "${envs[@]}" "$d/prog" --weights "$work/split/none.safetensors" "${io[@]}" "${args[@]}" >"$d/log" 2>&1; then
            fail_log transcendental_bits "the run with ${envs[*]} ${args[*]} failed" "$d/log"
            tb_ok=0
        fi
    done
    if [ $tb_ok = 1 ]; then
        "$PY" - "$d" <<'PYEOF' || failed=1
import sys
import numpy as np
d = sys.argv[1]
n = np.load(d + "/x.npy").size
bad = []
for o in ("g", "gt", "e", "t"):
    c = np.load("%s/cpu_%s.npy" % (d, o)).view(np.uint32)
    for run in ("portable", "avx2", "gpu"):
        r = np.load("%s/%s_%s.npy" % (d, run, o)).view(np.uint32)
        k = int(np.count_nonzero(r != c))
        if k:
            i = int(np.flatnonzero(r.ravel() != c.ravel())[0])
            bad.append("%s: %s differs from the CPU's default run on %d of %d (first at flat index %d: %08x vs %08x)"
                       % (o, run, k, n, i, r.ravel()[i], c.ravel()[i]))
if bad:
    print("FAIL: cudasim/transcendental_bits: " + "; ".join(bad))
    sys.exit(1)
print("PASS: cudasim/transcendental_bits (gelu, gelu tanh, erf, tanh on %d floats: GPU, portable and AVX2 runs "
      "bit-identical to the CPU default)" % n)
PYEOF
    fi
fi
# The split models as CUDA graphs (--repeat 3 --time, after the eager and the capturing
# warm-ups): captured on slot 0's stream, which forks into the other slots' streams and joins them
# back, the copies between GPUs in the graph, so that each run is one graph launch with no kernel
# launch or library call of its own; every output bit for bit the eager run's (MODELRT_CUDA_GRAPHS=0).
# GPUs without peer access (copies through the host) run eagerly: no graph launch.
# split_graphs NAME PROG WEIGHTS INPUT OUTPUTS GRAPH_LAUNCHES [ENV=VALUE ...] -- RUN_ARGS...
split_graphs() {
    local name=$1 prog=$2 weights=$3 input=$4 outputs=$5 want=$6
    shift 6
    local envs=() o g got d="$work/graphs_$name" bad=""
    while [ $# -gt 0 ] && [ "$1" != -- ]; do envs+=("$1"); shift; done
    shift
    mkdir -p "$d"
    if [ ! -x "$prog" ]; then
        echo "FAIL: cudasim/model/${name}_graphs: $prog was not built"
        failed=1
        return
    fi
    for g in 0 1; do
        local io=(--input "$input")
        for o in $outputs; do io+=(--output "$o=$d/graphs${g}_$o.npy"); done
        if ! env "${envs[@]}" MODELRT_CUDA_GRAPHS=$g "$prog" --weights "$weights" "${io[@]}" "$@" --time --repeat 3 \
                >"$d/log$g" 2>&1; then
            fail_log "model/${name}_graphs" "the run with MODELRT_CUDA_GRAPHS=$g $* --time --repeat 3 failed" "$d/log$g"
            return
        fi
    done
    got="$(sed -n 's/^time: simulated CUDA per run: //p' "$d/log1")"
    for o in $outputs; do cmp -s "$d/graphs0_$o.npy" "$d/graphs1_$o.npy" || bad="$bad $o"; done
    if [ "$want" = 1 ]; then
        case "$got" in "0 kernel launches, 0 library calls, 1 graph launches, "*) ;; *) bad="$bad (counts)" ;; esac
    else
        case "$got" in *" 0 graph launches, "*) ;; *) bad="$bad (counts)" ;; esac
    fi
    if grep -q "cannot be a CUDA graph" "$d/log1"; then bad="$bad (a capture failed)"; fi
    if [ -z "$bad" ]; then
        echo "PASS: cudasim/model/${name}_graphs (per run: $got; outputs $outputs bit-identical to the eager run's)"
    else
        echo "FAIL: cudasim/model/${name}_graphs: expected $want graph launch and no kernel launch or library call per run," \
             "and every output bit for bit the eager run's; per run: '$got', differ:$bad"
        failed=1
    fi
}
split_graphs dev_split_peer "$work/model_dev_split_peer/prog" "$work/split/w.safetensors" "x=$work/split/x.npy" "y s m" 1 \
    CUDASIM_DEVICES=2 -- --device cuda --device-map cpu:1=cuda:1,cpu:2=cuda:0
split_graphs dev_split_three "$work/model_dev_split_three/prog" "$work/split/w.safetensors" "x=$work/split/x.npy" "y s m" 1 \
    CUDASIM_DEVICES=3 -- --device cuda:2 --device-map cpu:1=cuda:0,cpu:2=cuda:1
split_graphs dev_split_staged "$work/model_dev_split_staged/prog" "$work/split/w.safetensors" "x=$work/split/x.npy" "y s m" 0 \
    CUDASIM_DEVICES=2 CUDASIM_PEER=0 -- --device cuda --device-map cpu:1=cuda:1,cpu:2=cuda:0
split_graphs transfer_race "$work/model_transfer_race/prog" "$work/split/none.safetensors" "x=$work/split/race_x.npy" "z y" 1 \
    CUDASIM_DEVICES=2 -- --device cuda --device-map cpu:1=cuda:1
split_graphs transfer_race_one_gpu "$work/model_transfer_race_one_gpu/prog" "$work/split/none.safetensors" \
    "x=$work/split/race_x.npy" "z y" 1 CUDASIM_DEVICES=1 -- --device cuda --device-map cpu:1=cuda:0
# The pre-flight counts the graphs of a model split over GPUs too (slot 0's device holds them): on
# a 72 MiB cuda:0 (two slots there: two cuBLAS workspaces) dev_split_peer runs without graphs and
# is refused with them, the graphs named.
log="$work/preflight_split_graphs.log"
sp=(--weights "$work/split/w.safetensors" --input x="$work/split/x.npy" --device cuda --device-map cpu:1=cuda:1,cpu:2=cuda:0)
if CUDASIM_DEVICES=2:72,16384:9.0 MODELRT_CUDA_GRAPHS=0 "$work/model_dev_split_peer/prog" "${sp[@]}" >"$log" 2>&1 &&
   ! CUDASIM_DEVICES=2:72,16384:9.0 "$work/model_dev_split_peer/prog" "${sp[@]}" >>"$log" 2>&1 &&
   grep -q "cuda:0 has 75497472 bytes free (of 75497472), the model needs [0-9]* there (.*, 33554432 CUDA graphs (up to 4 of 8388608" "$log"; then
    echo "PASS: cudasim/model/preflight_split_graphs (72 MiB cuda:0: runs with MODELRT_CUDA_GRAPHS=0; with graphs $(grep -o 'needs [0-9]* there' "$log"))"
else
    fail_log model/preflight_split_graphs "expected a 72 MiB cuda:0 to run dev_split_peer without CUDA graphs and to be refused with them" "$log"
fi
# A capture over two GPUs that fails in a stream it forked into (op:5: a cuBLAS GEMM on cuda:1) or
# at its end: the run falls back as digits' does, every output bit for bit the eager run's.
for inj in op:5 end; do
    d="$work/graphs_dev_split_peer"
    log="$d/capture_fail.log"
    io=()
    for o in y s m; do io+=(--output "$o=$d/fail_$o.npy"); done
    CUDASIM_DEVICES=2 CUDASIM_CAPTURE_FAIL=$inj "$work/model_dev_split_peer/prog" --weights "$work/split/w.safetensors" \
        --input x="$work/split/x.npy" "${io[@]}" --device cuda --device-map cpu:1=cuda:1,cpu:2=cuda:0 --time --repeat 3 \
        >"$log" 2>&1
    rc=$?
    got="$(sed -n 's/^time: simulated CUDA per run: //p' "$log")"
    warns="$(grep -c 'cannot be a CUDA graph (.*); running without graphs' "$log")"
    same=1
    for o in y s m; do cmp -s "$d/graphs0_$o.npy" "$d/fail_$o.npy" || same=0; done
    case "$got" in *" 0 graph launches, "*) ;; *) same=0 ;; esac
    if [ $rc -eq 0 ] && [ "$warns" = 1 ] && [ $same = 1 ]; then
        echo "PASS: cudasim/model/dev_split_peer_capture_fail_${inj/:/} (CUDASIM_CAPTURE_FAIL=$inj: one warning, per run: $got;" \
             "outputs bit-identical to the eager run's)"
    else
        fail_log "model/dev_split_peer_capture_fail_${inj/:/}" "CUDASIM_CAPTURE_FAIL=$inj: exit status $rc, $warns warnings (want 1), per run: '$got', outputs the eager run's: $same" "$log"
    fi
done
# A kernel that faults while it runs (CUDASIM_FAULT: a sticky illegal address): MODELRT_CUDA_SYNC=1
# names it; without, the end-of-run synchronization says that queued work faulted and how to
# find which, instead of blaming the run (or, on a GPU, the next kernel's launch).
prog="$work/model_transfer_race_one_gpu/prog"
for mode in sync async; do
    if [ $mode = sync ]; then
        want="transfer_race k2 (node %4 'u', line 7): faulted while it ran: cudaErrorIllegalAddress"
    else
        want="cudaErrorIllegalAddress (an illegal memory access was encountered): a kernel or library call queued before faulted (the last launched was"
    fi
    log="$work/fault_$mode.log"
    if [ -x "$prog" ] && ! env CUDASIM_DEVICES=1 CUDASIM_QUIET=1 CUDASIM_FAULT=transfer_race_k2_g \
             MODELRT_CUDA_SYNC=$([ $mode = sync ] && echo 1 || echo 0) "$prog" --weights "$work/split/none.safetensors" \
             --input x="$work/split/race_x.npy" --output z="$work/fault_z.npy" --output y="$work/fault_y.npy" \
             --device cuda --device-map cpu:1=cuda:0 >"$log" 2>&1 && grep -qF "$want" "$log"; then
        echo "PASS: cudasim/model/fault_$mode (a fault injected in k2 is reported as: ...$want...)"
    else
        fail_log "model/fault_$mode" "expected the run to fail with '$want'" "$log"
    fi
done
# ... and a fault in a replayed graph (k2's third run: the first is eager, the second captured,
# the third a replay) names the graph, not the last launch of its capture
log="$work/fault_replay.log"
want="a kernel or library call queued before faulted (the last launched was the CUDA graph of the run on cuda:0 (a replay"
if [ -x "$prog" ] && ! env CUDASIM_DEVICES=1 CUDASIM_QUIET=1 CUDASIM_FAULT=transfer_race_k2_g:3 "$prog" \
         --weights "$work/split/none.safetensors" --input x="$work/split/race_x.npy" --output z="$work/fault_z.npy" \
         --output y="$work/fault_y.npy" --device cuda --device-map cpu:1=cuda:0 --repeat 4 >"$log" 2>&1 &&
   grep -qF "$want" "$log"; then
    echo "PASS: cudasim/model/fault_replay (a fault in a replayed graph: ...$want...)"
else
    fail_log model/fault_replay "expected the run to fail with '$want'" "$log"
fi

# ---------------------------------------------------------------- 6. the examples, on the GPU
# ResNet-18 and GPT-2 at batch 1, MiniLM on its 5 sentences: each example's own check (against
# PyTorch's outputs, at the tolerance of its check.py, as make gpu-check runs them) with
# MODELRT_DEVICE=cuda on one simulated GPU; the run must say it ran on cuda:0, and make no host
# synchronization before its end: one per output copied back to pageable memory, and the
# end-of-run stream synchronization (the third word: their number).
for ex in "resnet18 check-b1 2" "gpt2 check-b1 2" "minilm test 3"; do
    set -- $ex
    log="$work/example_$1.log"
    CUDASIM_DEVICES=1 MODELRT_DEVICE=cuda timeout 300 ${MAKE:-make} -s --no-print-directory -C "examples/$1" "$2" \
        MODELC="$sim/bin/modelc" B="$work/examples" PYTHON="$PY" >"$log" 2>&1
    rc=$?
    counts="$(sed -n 's/^time: simulated CUDA per run: //p' "$log" | head -n1)"
    if [ "$1" = minilm ] && grep -q "not installed" "$log"; then
        echo "SKIP: cudasim/example/$1: $(grep -m1 'not installed' "$log")"
    elif [ $rc -eq 0 ] && grep -q '^PASS: ' "$log" && ! grep -q '^FAIL' "$log" &&
         grep -q '^time: .*device cuda:0' "$log" && [ "${counts##*copies, }" = "$3 host synchronizations" ]; then
        sed -n "s#^PASS: examples/#PASS: cudasim/example/#p" "$log" | sed "s#\$# (per run: $counts)#"
    else
        failed=1
        fail_log "example/$1" "make -C examples/$1 $2 with MODELRT_DEVICE=cuda: exit status $rc, per run: $counts" \
            "$log"
    fi
done
# ---------------------------------------------------------------- 7. training and several GPUs
# Data-parallel inference on two simulated GPUs (--devices cuda:0,cuda:1): each replica's shard
# bit for bit as the shard alone, and the device-list errors; data-parallel training through the
# NCCL stand-in (two GPUs in one process, two torchrun processes, two mpirun ranks) against one GPU
# and the CPU, NCCL's errors, and the gradient buckets queued while the backward pass goes on.
dp_quick=(--quick) # make test: GPU training at batch 8 (even shards) left out; batches 7 and 3 kept
[ "$full" = 1 ] && dp_quick=()
out="$(CUDASIM_DEVICES=2:16384:9.0 MODELC="$sim/bin/modelc" timeout 600 "$PY" tests/dp/run.py --device-kind cuda \
       "${dp_quick[@]}" 2>"$work/dp.err")"
rc=$?
grep '^\(PASS\|FAIL\|SKIP\): ' <<<"$out"
if [ $rc -ne 0 ]; then
    failed=1
    grep -q '^FAIL:' <<<"$out" || echo "FAIL: cudasim/dp: exit status $rc: $(tail -n3 "$work/dp.err" | tr '\n' ' ')"
fi
# Training on the simulated GPU: every tests/train model step for step against PyTorch (the
# backward and optimizer kernels, the multi-tensor step), the resume and divergence checks, and
# the gradients against finite differences.
# gradcheck: a case per backward kernel family (the CPU suite runs them all). make test keeps the
# gradient checks that launch what the models here do not (cumsum, interpolation, argmax and the
# ties rules), and the MLPs and the CNN; GPT-2's kernels run in dropout.py's devices check below
# (GPT-2 trained on the simulated GPU against the CPU) and in the gradient checks of
# layer_norm, embedding and attention. make cudasim-full: every family below, and GPT-2 too.
sim_train() { # NAME ARGS...: tests/train/NAME.py on the simulated GPU
    local t=$1 out rc
    shift
    out="$(CUDASIM_DEVICES=1 TRAIN_DEVICE=cuda MODELC="$sim/bin/modelc" timeout 900 "$PY" tests/train/$t.py "$@" \
           2>"$work/train_$t.err")"
    rc=$?
    sed -n 's#^\(PASS\|FAIL\|SKIP\): #\1: cudasim/#p' <<<"$out"
    if [ $rc -ne 0 ]; then
        failed=1
        grep -q '^FAIL:' <<<"$out" ||
            echo "FAIL: cudasim/train/$t: exit status $rc: $(tail -n3 "$work/train_$t.err" | tr '\n' ' ')"
    fi
}
# the gradient checks beside the models (each runs one program at a time; the machine has 2 cores):
# their lines after the models' (a FAIL line among them fails the suite, see its end)
if [ "$full" = 1 ]; then
    gradcheck_k=(-k conv2d -k depthwise -k max_pool2d -k avg_pool2d -k adaptive -k batch_norm -k layer_norm
        -k embedding -k gather -k attention -k ties -k softmax -k concat_cumsum -k conv_transpose2d_dilated
        -k interpolate_nearest_scale -k interpolate_bilinear_align -k concat_batch -k cumsum_batch -k matmul_broadcast
        -k slice_batch)
    train_k=(-k mlp -k cnn -k gpt2)
else
    gradcheck_k=(-k layer_norm -k embedding -k attention -k ties -k concat_cumsum -k interpolate_nearest_scale
        -k interpolate_bilinear_align)
    train_k=(-k mlp -k cnn)
fi
sim_train gradcheck "${gradcheck_k[@]}" >"$work/sim_gradcheck.out" &
gradcheck_pid=$!
sim_train run "${train_k[@]}"   # the models step for step (resume, eval and the C API: the CPU suite)
wait $gradcheck_pid
cat "$work/sim_gradcheck.out"
# ResNet-18 at batch 1 replayed as a CUDA graph (the binary section 6 built, --repeat 2 after its
# eager and capturing warm-ups, the fewest that replay twice; each run simulates the whole network):
# one graph launch, no kernel launch or library call of its own, and still no host
# synchronization before the end of the run.
prog="$work/examples/resnet18/resnet18"
want="0 kernel launches, 0 library calls, 1 graph launches, 2 copies, 2 host synchronizations"
if [ -x "$prog" ]; then
    got="$(CUDASIM_DEVICES=1 "$prog" --weights "$work/examples/resnet18/resnet18.safetensors" \
           --input x="$work/examples/resnet18/x_b1.npy" --output logits="$work/resnet18_graph.npy" --device cuda \
           --time --repeat 2 2>&1 >/dev/null | sed -n 's/^time: simulated CUDA per run: //p')"
    if [ "$got" = "$want" ] && cmp -s "$work/resnet18_graph.npy" "$work/examples/resnet18/logits_b1.npy"; then
        echo "PASS: cudasim/example/resnet18/graph_replay (per run: $got; logits bit-identical to the eager run's)"
    else
        echo "FAIL: cudasim/example/resnet18/graph_replay: per run: '$got', expected '$want' and the eager run's logits"
        failed=1
    fi
else
    echo "FAIL: cudasim/example/resnet18/graph_replay: $prog was not built"
    failed=1
fi

# Dropout's masks against NumPy's Philox4x32-10, each built by the
# simulator's modelc and run with PROG train --device cuda (TRAIN_DEVICE): the same tolerances
# as on the CPU, and the same dropout masks (dropout.py's devices check trains a GPT-2 with
# dropout on both, the CPU with $B/bin/modelc when it is built).
cpu_modelc=""
[ -x "$B/bin/modelc" ] && cpu_modelc="$(cd "$B/bin" && pwd)/modelc"
for t in "dropout.py"; do
    log="$work/train_${t%%.py*}.log"
    CUDASIM_DEVICES=1 TRAIN_DEVICE=cuda MODELC="$sim/bin/modelc" MODELC_CPU="$cpu_modelc" timeout 600 \
        "$PY" tests/train/$t >"$log" 2>&1
    rc=$?
    if [ $rc -eq 0 ] && grep -q '^PASS: ' "$log" && ! grep -q '^FAIL' "$log"; then
        sed -n 's#^\(PASS\|SKIP\): #\1: cudasim/train/#p' "$log"
    else
        fail_log "train/${t%%.py*}" "tests/train/$t with TRAIN_DEVICE=cuda: exit status $rc" "$log"
    fi
done
exit $failed
} | tee "$work/out"
rc=${PIPESTATUS[0]}

# ---------------------------------------------------------------- the suite line
npass="$(grep -c '^PASS: ' "$work/out")"
nfail="$(grep -c '^FAIL: ' "$work/out")"
nskip="$(grep -c '^SKIP: ' "$work/out")"
if [ "$rc" -ne 0 ] && [ "$nfail" -eq 0 ]; then
    echo "FAIL: cudasim/suite: exit status $rc without a FAIL line"
    nfail=1
fi
echo "cudasim: $npass passed, $nfail failed$([ "$nskip" -gt 0 ] && echo " ($nskip skipped)")"
[ "$rc" -eq 0 ] && [ "$nfail" -eq 0 ]

#!/usr/bin/env bash
# tests/run_tests.sh — run the test suites (see tests/README.md) and end with one line
# "N passed, N failed, N skipped". Each suite prints "PASS: name" / "FAIL: name: why" lines; a
# suite that exits non-zero without printing a FAIL line counts as one failure.
#   bash tests/run_tests.sh                  every suite
#   SUITE=lit bash tests/run_tests.sh        one suite (make test SUITE=lit)
#   SUITE=numeric,plan bash tests/run_tests.sh   a comma list
#   FULL=1 bash tests/run_tests.sh           every suite with what make test leaves out to stay
#                                            quick (make test-full; see tests/README.md)
# Environment: SUITE (default all), FULL (default 0), B (build dir, default build), PYTHON
# (default python3), MODELC_CFLAGS.
set -u
cd "$(dirname "$0")/.."
SUITES="lit runtime numeric plan cudasim train dp digits embed install resnet18 gpt2 minilm zoo bench onnx"
SUITE=${SUITE:-all}
SELECTED=" "
for s in ${SUITE//,/ }; do
    if [ "$s" = all ]; then
        SELECTED=" $SUITES "
    elif [[ " $SUITES " == *" $s "* ]]; then
        SELECTED="$SELECTED$s "
    else
        echo "run_tests.sh: error: unknown suite '$s' in SUITE=$SUITE; suites: $SUITES (or all)" >&2
        exit 2
    fi
done
if [ "$SELECTED" = " " ]; then
    echo "run_tests.sh: error: SUITE is empty; suites: $SUITES (or all)" >&2
    exit 2
fi
B=${B:-build}
PYTHON=${PYTHON:-python3}
export B PYTHON
# FULL=1 (make test-full): the cudasim suite in full (CUDASIM_FULL: every numeric case on the
# simulated GPU, the kernels under three thread schedules), and nvcc on every numeric case and
# gradient check (make test: every 4th; the others are built with --no-cuda, since their CPU
# path is what runs, and the cudasim suite compiles their .cu as C++ for the simulator)
FULL=${FULL:-0}
if [ "$FULL" = 1 ]; then
    export CUDASIM_FULL=1
    CUDA_EVERY=1
else
    CUDA_EVERY=4
fi
# The suites run two programs at a time on a 2-core machine: OpenMP threads that spin while they
# wait (libgomp's default) then steal each other's cores, so here they sleep. Results do not
# depend on it (nor on the thread count: the threads tests check that).
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
# nvcc builds each generated .cu as compute_80 PTX only (a third of the CPU time of the default
# sm_80 + sm_90 + PTX): the tests check that every .cu compiles and links, and on a machine with
# a GPU the driver compiles the PTX for it (every GPU the runtime uses, 8.0 and newer, can run
# compute_80 PTX); tests/lit/cuda and make gpu-check build the real targets.
export MODELC_GENCODE=${MODELC_GENCODE:-"-gencode arch=compute_80,code=compute_80"}
export MODELC="$PWD/$B/bin/modelc"
LOG=$(mktemp)
trap 'rm -f "$LOG"' EXIT
start=$(date +%s)

# suite NAME CMD...: run CMD when NAME is selected, collect its PASS/FAIL/SKIP lines.
suite() {
    local name=$1
    shift
    [[ "$SELECTED" == *" $name "* ]] || return 0
    echo "== $name"
    local out rc t0
    out=$(mktemp)
    t0=$(date +%s)
    "$@" >"$out" 2>&1
    rc=$?
    echo "   $name: $(( $(date +%s) - t0 )) s"
    grep -E '^(PASS|FAIL|SKIP|XPASS|UNRESOLVED|TIMEOUT|UNSUPPORTED): ' "$out" |
        sed 's/^XPASS:/FAIL:/; s/^UNRESOLVED:/FAIL:/; s/^TIMEOUT:/FAIL:/; s/^UNSUPPORTED:/SKIP:/' >>"$LOG"
    if [ $rc -ne 0 ] || grep -qE '^(FAIL|XPASS|UNRESOLVED|TIMEOUT): ' "$out"; then
        cat "$out"
        if ! grep -qE '^(FAIL|XPASS|UNRESOLVED|TIMEOUT): ' "$out"; then
            echo "FAIL: $name: suite exited with status $rc" | tee -a "$LOG"
        fi
    else
        grep -cE '^PASS: ' "$out" | sed "s/^/   passed: /"
        grep -E '^(SKIP|UNSUPPORTED): ' "$out" | sed 's/^/   /'
    fi
    rm -f "$out"
}

# llvm_tool NAME: NAME on PATH, else in the newest /usr/lib/llvm-N/bin that has it.
llvm_tool() {
    local d
    if command -v "$1" >/dev/null 2>&1; then
        command -v "$1"
        return 0
    fi
    for d in $(printf '%s\n' /usr/lib/llvm-*/bin | sort -V -r); do
        if [ -x "$d/$1" ]; then
            echo "$d/$1"
            return 0
        fi
    done
    return 1
}

# lit: FileCheck and not are found here and in tests/lit/lit.cfg.py alike.
lit_suite() {
    local fc nt
    if ! fc=$(llvm_tool FileCheck) || ! nt=$(llvm_tool not); then
        echo "FAIL: lit: FileCheck and not not found on PATH or in /usr/lib/llvm-*/bin" \
             "(install LLVM's test tools, e.g. Debian llvm-14-tools, or put them on PATH)"
        return 1
    fi
    PATH="$(dirname "$fc"):$(dirname "$nt"):$PATH" lit -v tests/lit
}

suite lit lit_suite
suite runtime bash tests/runtime/run.sh
suite cudasim bash tests/cudasim/run.sh
suite numeric "$PYTHON" tests/numeric/run.py --cuda-every $CUDA_EVERY
# train: the gradient checks run beside the rest (each script runs one program at a time; the
# machine has 2 cores), their lines printed after it
suite train bash -c 'g=$(mktemp); "$PYTHON" tests/train/gradcheck.py --cuda-every '$CUDA_EVERY' >"$g" 2>&1 & gp=$!
    "$PYTHON" tests/train/run.py && "$PYTHON" tests/train/dropout.py && \
    make -s -C examples/digits train MODELC="$MODELC" B="$PWD/$B" PYTHON="$PYTHON"; rc=$?
    wait $gp; grc=$?; cat "$g"; rm -f "$g"; [ $rc -eq 0 ] && [ $grc -eq 0 ]'
# plan: nvcc builds the default-flags executable of each case and of every 4th random program
# (the CPU path is what runs; tests/lit compiles every example's .cu too)
suite plan "$PYTHON" tests/plan/run.py --cuda-every 4
suite dp "$PYTHON" tests/dp/run.py
suite digits bash -c 'make -s -C examples/digits demo MODELC="$MODELC" B="$PWD/$B" && echo "PASS: examples/digits"'
suite embed bash -c 'make -s -C examples/embed run MODELC="$MODELC" B="$PWD/$B" && echo "PASS: examples/embed"'
suite install bash tests/install_test.sh
suite resnet18 make -s -C examples/resnet18 test MODELC="$MODELC" B="$PWD/$B"
suite gpt2 make -s -C examples/gpt2 test MODELC="$MODELC" B="$PWD/$B"
suite minilm make -s -C examples/minilm test MODELC="$MODELC" B="$PWD/$B"
suite zoo make -s -C examples/zoo test MODELC="$MODELC" B="$PWD/$B"
# onnx: tools/onnx2model.py's error tests and a quick subset of the ONNX node tests
suite onnx bash tests/onnx/run.sh
# bench: only that bench/run.py runs (modelc alone on digits b1, checked against the committed
# logits; no network, no peers, no timing judged): --quick, then the full mode, whose JSON must
# hold the machine's peaks (bench/peaks.c) and modelc's profile (PROG --profile) with the GEMMs'
# FLOPs of digits b1 (2*64*128 + 2*128*10 = 18944), and its 3 rounds with their median as the time
suite bench bash -c '"$PYTHON" bench/run.py --no-venv --modelc-only --quick -k "digits b1" --results "" \
    --workdir "$PWD/$B/bench-smoke" --modelc "$MODELC" && echo "PASS: bench/run.py --modelc-only (digits b1)" &&
  "$PYTHON" bench/run.py --no-venv --modelc-only -k "digits b1" --results "$PWD/$B/bench-smoke/results" \
    --workdir "$PWD/$B/bench-smoke" --modelc "$MODELC" >/dev/null &&
  "$PYTHON" -c "
import json, sys
d = json.load(open(sys.argv[1]))
mc = d[\"rows\"][0][\"peers\"][\"modelc\"]
pk, pr, rm = d[\"machine\"].get(\"peaks\"), mc.get(\"profile\"), mc.get(\"round_ms\")
ok = pk and pk[\"sgemm_gflops\"] > 0 and pk[\"triad_gbs\"] > 0 and pr and abs(pr[\"gflop\"] - 1.89e-05) < 1e-7
ok = ok and rm and len(rm) == 3 and mc[\"ms\"] == sorted(rm)[1]
print((\"PASS\" if ok else \"FAIL\") + \": bench/run.py full mode: machine peaks %s, modelc profile %s GFLOP per run (want 1.89e-05), rounds %s (want 3, ms their median)\" % (pk, pr and pr.get(\"gflop\"), rm))
" "$PWD/$B/bench-smoke/results/cpu.json"'

passed=$(grep -c '^PASS: ' "$LOG")
failed=$(grep -c '^FAIL: ' "$LOG")
skipped=$(grep -c '^SKIP: ' "$LOG")
if [ "$failed" -gt 0 ]; then
    echo "== failures"
    grep '^FAIL: ' "$LOG"
fi
echo "== $(( $(date +%s) - start )) s"
if [ "$skipped" -gt 0 ]; then
    echo "== skipped (not counted as passed)"
    grep '^SKIP: ' "$LOG"
fi
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]

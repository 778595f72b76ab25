#!/usr/bin/env bash
# tests/run_tests.sh — run every test suite (see tests/README.md) and end with one line
# "N passed, N failed". Each suite prints "PASS: name" / "FAIL: name: why" lines; a suite that
# exits non-zero without printing a FAIL line counts as one failure.
# Environment: B (build dir, default build), PYTHON (default python3), MODELC_CFLAGS.
set -u
cd "$(dirname "$0")/.."
B=${B:-build}
PYTHON=${PYTHON:-python3}
export B PYTHON
export MODELC="$PWD/$B/bin/modelc"
LOG=$(mktemp)
trap 'rm -f "$LOG"' EXIT
start=$(date +%s)

suite() {
    local name=$1
    shift
    echo "== $name"
    local out rc
    out=$(mktemp)
    "$@" >"$out" 2>&1
    rc=$?
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

FILECHECK_DIR=$(dirname "$(command -v FileCheck 2>/dev/null || echo /usr/lib/llvm-14/bin/FileCheck)")
suite lit env PATH="$FILECHECK_DIR:$PATH" lit -v tests/lit
suite runtime bash tests/runtime/run.sh
suite cudasim bash tests/cudasim/run.sh
suite numeric "$PYTHON" tests/numeric/run.py
suite plan "$PYTHON" tests/plan/run.py
suite digits bash -c 'make -s -C examples/digits demo MODELC="$MODELC" B="$PWD/$B" && echo "PASS: examples/digits"'
suite embed bash -c 'make -s -C examples/embed run MODELC="$MODELC" B="$PWD/$B" && echo "PASS: examples/embed"'
suite install bash tests/install_test.sh
suite resnet18 make -s -C examples/resnet18 test MODELC="$MODELC" B="$PWD/$B"
suite gpt2 make -s -C examples/gpt2 test MODELC="$MODELC" B="$PWD/$B"
suite minilm make -s -C examples/minilm test MODELC="$MODELC" B="$PWD/$B"

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

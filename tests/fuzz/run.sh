#!/usr/bin/env bash
# tests/fuzz/run.sh — run by `make fuzz` after the harnesses are built: seeds the corpora, runs
# each target in FUZZ_TARGETS for FUZZ_SECONDS with libFuzzer, and prints per target the
# executions, the corpus size and the crashes (files under $FZ/crashes/<target>/). Exit status 1
# if any target found a crash. Environment: FZ (build/fuzz), PYTHON, FUZZ_SECONDS (60),
# FUZZ_TARGETS ("model safetensors npy"), FUZZ_ARGS (more libFuzzer flags).
set -u
cd "$(dirname "$0")/../.."
FZ=${FZ:-build/fuzz}
PYTHON=${PYTHON:-python3}
FUZZ_SECONDS=${FUZZ_SECONDS:-60}
FUZZ_TARGETS=${FUZZ_TARGETS:-model safetensors npy}
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
"$PYTHON" tests/fuzz/seed.py "$FZ/corpus" || exit 1
status=0
for t in $FUZZ_TARGETS; do
    mkdir -p "$FZ/corpus/$t" "$FZ/crashes/$t"
    log="$FZ/$t.log"
    dict=()
    [ -f "$FZ/corpus/$t.dict" ] && dict=(-dict="$FZ/corpus/$t.dict")
    echo "== fuzz_$t: ${FUZZ_SECONDS} s"
    # -rss_limit_mb: a compile of a fuzzed model may not need more than this
    # shellcheck disable=SC2086
    "$FZ/fuzz_$t" -max_total_time="$FUZZ_SECONDS" -rss_limit_mb=2048 -timeout=20 -max_len=65536 \
        -artifact_prefix="$FZ/crashes/$t/" -print_final_stats=1 "${dict[@]}" ${FUZZ_ARGS:-} "$FZ/corpus/$t" >"$log" 2>&1
    rc=$?
    execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -1)
    crashes=$(find "$FZ/crashes/$t" -type f | wc -l)
    echo "fuzz_$t: ${execs:-?} executions, corpus $(ls "$FZ/corpus/$t" | wc -l) files, $crashes crash files (exit $rc; log $log)"
    if [ "$rc" -ne 0 ] || [ "$crashes" -gt 0 ]; then
        status=1
        grep -E 'ERROR|SUMMARY|==[0-9]+==|Test unit written' "$log" | head -20
    fi
done
exit $status

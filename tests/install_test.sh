#!/usr/bin/env bash
# tests/install_test.sh — `make install PREFIX=tmp` then build the embedding example against the
# installed tree with pkg-config only, and compile+run digits with the installed modelc.
# Prints PASS:/FAIL: lines (see tests/README.md).
set -u
cd "$(dirname "$0")/.."
B=${B:-build}
prefix=$(mktemp -d)
work=$(mktemp -d)
trap 'rm -rf "$prefix" "$work"' EXIT
fail() { echo "FAIL: install/$1: $2"; exit 1; }

make -s install PREFIX="$prefix" B="$B" >"$work/log" 2>&1 || { cat "$work/log"; fail make "make install failed"; }
for f in bin/modelc lib/libmodelrt.a include/modelc/modelrt.h include/modelc/mrt_kernels.h include/modelc/mrt_launch.h lib/pkgconfig/modelrt.pc; do
    [ -e "$prefix/$f" ] || fail layout "missing $f"
done
[ ! -e "$prefix/include/modelc/rt_internal.h" ] || fail layout "internal header rt_internal.h installed"
echo "PASS: install/layout"

export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
"$prefix/bin/modelc" examples/digits/digits.model --emit-c -o "$work" || fail pkgconfig "modelc --emit-c failed"
# shellcheck disable=SC2046
${CC:-cc} -O2 -I"$work" examples/embed/embed.c "$work/digits.c" $(pkg-config --cflags --libs modelrt) \
    ${MODELC_CFLAGS:-} -o "$work/embed" || fail pkgconfig "build with pkg-config modelrt failed"
"$work/embed" examples/digits/digits.safetensors examples/digits/test_x.npy examples/digits/torch_logits.npy \
    >"$work/out" 2>&1 || { cat "$work/out"; fail pkgconfig "embed run failed"; }
echo "PASS: install/pkgconfig-embed"

"$prefix/bin/modelc" examples/digits/digits.model -o "$work/digits" || fail modelc "installed modelc cannot build an executable"
"$work/digits" --weights examples/digits/digits.safetensors --input x=examples/digits/test_x.npy \
    --output logits="$work/logits.npy" 2>/dev/null || fail modelc "installed executable failed"
${PYTHON:-python3} examples/digits/check.py "$work/logits.npy" >/dev/null || fail modelc "logits differ from PyTorch"
echo "PASS: install/modelc"

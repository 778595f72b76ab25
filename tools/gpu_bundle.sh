#!/usr/bin/env bash
# tools/gpu_bundle.sh — pack what `make gpu-check` needs on a GPU machine that has nvcc, gcc and
# PyTorch but neither network nor this project's Debian packages (a lent GPU machine, a cluster
# node): oneDNN and cJSON (libraries and headers), the OpenCL loader oneDNN links, the parser
# and lexer bison and flex generated here (so no bison or flex is needed there), and GNU make
# as a fallback. Run it after `make all` on a machine where tools/setup.sh has installed them.
#
#   bash tools/gpu_bundle.sh OUT.tar.xz
#
# On the GPU machine, in the repository root:
#
#   mkdir -p /tmp/mdeps && tar xJf OUT.tar.xz -C /tmp/mdeps && . /tmp/mdeps/env.sh
#   make gpu-check
#
# env.sh puts the libraries on LIBRARY_PATH and LD_LIBRARY_PATH and the headers on CPATH (after
# the machine's own), puts make on PATH only where the machine has none, copies the generated
# parser into build/gen and marks it and build/setup.stamp up to date (setup.sh would try to
# install packages). Nothing is installed system-wide.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: tools/gpu_bundle.sh OUT.tar.xz}
for f in build/gen/model.tab.c build/gen/model.tab.h build/gen/lex.yy.c build/gen/lex.yy.h; do
    [ -f "$f" ] || { echo "gpu_bundle: $f missing: run 'make all' first" >&2; exit 1; }
done
lib=/usr/lib/x86_64-linux-gnu
[ -f "$lib/libdnnl.so" ] && [ -f /usr/include/dnnl.h ] ||
    { echo "gpu_bundle: oneDNN (libdnnl-dev) is not installed here" >&2; exit 1; }
[ -f /usr/include/cjson/cJSON.h ] ||
    { echo "gpu_bundle: cJSON (libcjson-dev) is not installed here" >&2; exit 1; }
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/lib" "$stage/include/cjson" "$stage/bin" "$stage/gen"
# -L: the files behind the soname links, under the names the linker and loader look for
for so in libdnnl.so libdnnl.so.2 libcjson.so libcjson.so.1 libOpenCL.so.1; do
    cp -L "$lib/$so" "$stage/lib/$so"
done
cp -a /usr/include/dnnl*.h /usr/include/oneapi "$stage/include/"
cp /usr/include/cjson/cJSON.h "$stage/include/cjson/"
cp "$(command -v make)" "$stage/bin/make"
cp build/gen/model.tab.[ch] build/gen/lex.yy.[ch] "$stage/gen/"
cat >"$stage/env.sh" <<'EOF'
# Sourced in the repository root on the GPU machine (see tools/gpu_bundle.sh).
_d=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export LIBRARY_PATH="${LIBRARY_PATH:+$LIBRARY_PATH:}$_d/lib"
export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$_d/lib"
export CPATH="${CPATH:+$CPATH:}$_d/include:$_d/include/cjson"
command -v make >/dev/null 2>&1 || export PATH="$PATH:$_d/bin"
mkdir -p build/gen
cp "$_d"/gen/* build/gen/
# newer than their sources, in dependency order: make regenerates nothing
touch build/setup.stamp build/gen/model.tab.c build/gen/model.tab.h
touch build/gen/lex.yy.c build/gen/lex.yy.h
EOF
tar cJf "$out" -C "$stage" .
echo "gpu_bundle: wrote $out ($(du -h "$out" | cut -f1))"

#!/usr/bin/env bash
# bench/gemm/run.sh — build bench/gemm/gemm_bench.c against every BLAS/GEMM library that can be
# had here and print one table (issue 12, item 4; a measurement, not part of modelc or its tests).
#
#   bash bench/gemm/run.sh [--install] [THREADS] [MIN_SECONDS]     (default 2 threads, 0.5 s)
#
# Libraries, each skipped with a line saying why when it is not there:
#   debian-openblas   libopenblas-dev (what modelc links), with OPENBLAS_CORETYPE=Haswell, with
#                     SkylakeX, and with the core OpenBLAS detects itself
#   scipy-openblas    the scipy-openblas32 wheel (a current OpenBLAS, symbols prefixed scipy_)
#   debian-dnnl       libdnnl-dev (oneDNN 2.x, OpenMP), dnnl_sgemm
#   pypi-dnnl         the onednn wheel (oneDNN 3.x, CPU runtime SYCL over TBB; its dependencies
#                     dpcpp-cpp-rt and tbb put libsycl, libsvml, libtbb beside it), dnnl_sgemm
#   debian-blis       libblis-dev (BLIS 0.9, OpenMP), its cblas_sgemm
#   pypi-mkl          the mkl wheel (libmkl_rt), cblas_sgemm
#   debian-xsmm       libxsmm-dev (libxsmm 1.17, static), libxsmm_sgemm_omp of libxsmmext (OpenMP)
#   own               bench/gemm/own_gemm.c: a blocked GEMM in plain C (gcc -O3 -march=native -fopenmp)
# GEMM_ONLY="debian-dnnl debian-xsmm own" (column names) runs only those columns.
# --install first installs the missing ones: the Debian packages with apt-get, the wheels into
# build/gemm-venv with pip (pinned below). Builds go to build/gemm/.
set -u
cd "$(dirname "$0")/../.."
INSTALL=0
if [ "${1:-}" = --install ]; then INSTALL=1; shift; fi
THREADS=${1:-2}
MIN_S=${2:-0.5}
OUT=build/gemm
VENV=build/gemm-venv
SRC=bench/gemm/gemm_bench.c
PINS="scipy-openblas32==0.3.34.481.3 mkl==2026.2.1 onednn==2026.1.0"   # mkl brings intel-openmp and tbb; onednn dpcpp-cpp-rt (SYCL, TBB)
mkdir -p "$OUT"
export OPENBLAS_NUM_THREADS=$THREADS OMP_NUM_THREADS=$THREADS BLIS_NUM_THREADS=$THREADS \
       MKL_NUM_THREADS=$THREADS OMP_PROC_BIND=false

if [ $INSTALL = 1 ]; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        libopenblas-dev libdnnl-dev libblis-dev libxsmm-dev >/dev/null || echo "gemm: apt-get install failed"
    [ -x $VENV/bin/python ] || python3 -m venv $VENV
    # shellcheck disable=SC2086
    $VENV/bin/pip install -q $PINS || echo "gemm: pip install failed (offline?)"
fi

have_pkg() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'install ok installed'; }
pkgver() { dpkg-query -W -f='${Version}' "$1" 2>/dev/null; }
SITE=$(ls -d $VENV/lib/python3*/site-packages 2>/dev/null | head -1)
pipver() { [ -n "$SITE" ] && ls -d "$SITE/$1"-*.dist-info 2>/dev/null | sed 's/.*-\([^-]*\)\.dist-info/\1/' | head -1; }

# run NAME ENV... -- CC-ARGS...: build $OUT/NAME, run it with ENV
run() {
    local name=$1; shift
    case " ${GEMM_ONLY:-$name} " in *" $name "*) ;; *) return ;; esac
    local envs=()
    while [ "$1" != -- ]; do envs+=("$1"); shift; done
    shift
    if ! cc -O2 -std=c11 -D_GNU_SOURCE "$SRC" -o "$OUT/gemm_$name" "$@" -lm 2>"$OUT/$name.build.log"; then
        echo "# $name: skipped: build failed: $(tail -1 "$OUT/$name.build.log")"
        return
    fi
    echo "# $name: load average $(cut -d' ' -f1 /proc/loadavg) before"
    env "${envs[@]}" "$OUT/gemm_$name" "$name" "$MIN_S" | if [ "$FIRST" = 1 ]; then cat; else grep -v '^library '; fi
    FIRST=0
}
FIRST=1

main() {
echo "# $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(nproc) usable cores," \
     "$THREADS threads, flags: $(grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' | grep -E '^(avx2|fma|avx512f|avx512_vnni|avx512_bf16|amx_bf16|amx_tile)$' | tr '\n' ' ')"
if have_pkg libopenblas-dev; then
    OB="-DSGEMM_CBLAS=cblas_sgemm -DINFO_CONFIG=openblas_get_config -DINFO_CORE=openblas_get_corename $(pkg-config --libs openblas)"
    echo "# debian-openblas: libopenblas-dev $(pkgver libopenblas-dev)"
    # shellcheck disable=SC2086
    run debian-ob-hsw OPENBLAS_CORETYPE=Haswell -- $OB
    # shellcheck disable=SC2086
    run debian-ob-skx OPENBLAS_CORETYPE=SkylakeX -- $OB
    # shellcheck disable=SC2086
    run debian-ob-auto -u OPENBLAS_CORETYPE -- $OB
else
    echo "# debian-openblas: skipped: libopenblas-dev not installed"
fi
OBDIR=$SITE/scipy_openblas32/lib
if [ -n "$SITE" ] && [ -f "$OBDIR/libscipy_openblas.so" ]; then
    echo "# scipy-openblas: scipy-openblas32 $(pipver scipy_openblas32)"
    run scipy-ob -u OPENBLAS_CORETYPE -- -DSGEMM_CBLAS=scipy_cblas_sgemm -DINFO_CONFIG=scipy_openblas_get_config \
        -DINFO_CORE=scipy_openblas_get_corename -L"$OBDIR" -Wl,-rpath,"$PWD/$OBDIR" -lscipy_openblas
else
    echo "# scipy-openblas: skipped: no scipy-openblas32 wheel in $VENV (--install)"
fi
if have_pkg libdnnl-dev; then
    echo "# debian-dnnl: libdnnl-dev $(pkgver libdnnl-dev)"
    run debian-dnnl -- -DSGEMM_DNNL -ldnnl
else
    echo "# debian-dnnl: skipped: libdnnl-dev not installed (apt-get install libdnnl-dev)"
fi
if [ -n "$SITE" ] && [ -f $VENV/lib/libdnnl.so.3 ]; then
    echo "# pypi-dnnl: onednn $(pipver onednn), tbb $(pipver tbb)"
    run pypi-dnnl LD_LIBRARY_PATH="$PWD/$VENV/lib" -- -DSGEMM_DNNL -L$VENV/lib -l:libdnnl.so.3 -Wl,-rpath,"$PWD/$VENV/lib"
else
    echo "# pypi-dnnl: skipped: no onednn wheel in $VENV (--install)"
fi
if have_pkg libblis-dev; then
    echo "# debian-blis: libblis-dev $(pkgver libblis-dev) ($(readlink -f /usr/lib/x86_64-linux-gnu/libblis.so.4 | xargs dirname | xargs basename))"
    run debian-blis -- -DSGEMM_CBLAS=cblas_sgemm -lblis
else
    echo "# debian-blis: skipped: libblis-dev not installed (apt-get install libblis-dev)"
fi
if [ -n "$SITE" ] && [ -f $VENV/lib/libmkl_rt.so.3 ]; then
    echo "# pypi-mkl: mkl $(pipver mkl), intel-openmp $(pipver intel_openmp)"
    run pypi-mkl -- -DSGEMM_CBLAS=cblas_sgemm -L$VENV/lib -l:libmkl_rt.so.3 -Wl,-rpath,"$PWD/$VENV/lib"
else
    echo "# pypi-mkl: skipped: no mkl wheel in $VENV (--install)"
fi
if have_pkg libxsmm-dev; then
    echo "# debian-xsmm: libxsmm-dev $(pkgver libxsmm-dev)"
    run debian-xsmm -- -DSGEMM_XSMM -fopenmp -lxsmmext -lxsmm -lpthread -lrt -ldl
else
    echo "# debian-xsmm: skipped: libxsmm-dev not installed (apt-get install libxsmm-dev)"
fi
OWNFLAGS="-O3 -march=native -fopenmp -ffp-contract=fast -std=gnu11"
# shellcheck disable=SC2086
if cc $OWNFLAGS -c bench/gemm/own_gemm.c -o $OUT/own_gemm.o 2>"$OUT/own_gemm.build.log"; then
    echo "# own: bench/gemm/own_gemm.c, $(cc --version | head -1), $OWNFLAGS"
    run own -- -DSGEMM_OWN $OUT/own_gemm.o -fopenmp
else
    echo "# own: skipped: own_gemm.c did not build: $(tail -1 "$OUT/own_gemm.build.log")"
fi
}

# The measurements as they come, then one table: GFLOP/s of the median call (of the fastest), a
# row per shape, a column per library.
main | tee "$OUT/results.txt"
python3 - "$OUT/results.txt" <<'PY'
import sys
libs, rows = [], {}
for line in open(sys.argv[1]):
    f = line.split()
    if not f or f[0] in ("#", "library") or len(f) < 9:
        continue
    fb = "FALLBACK" in f   # libxsmm handed the shape to BLAS: not timed
    if fb:
        f = f[:f.index("FALLBACK")]
    bad = f[-1] == "FAILED"
    f = f[:-1] if bad else f
    lib, gf = f[0], "BLAS" if fb else "wrong" if bad else "%s (%s)" % (f[-3], f[-2])
    shape = "%s (%s)" % (" ".join(f[1:-7]), " x ".join(f[-7:-4]))
    if lib not in libs:
        libs.append(lib)
    rows.setdefault(shape, {})[lib] = gf
print()
print("GFLOP/s of the median call (of the fastest call)")
print()
print("| shape (M x N x K) | " + " | ".join(libs) + " |")
print("|---|" + "---:|" * len(libs))
for shape, v in rows.items():
    print("| %s | %s |" % (shape, " | ".join(v.get(l, "-") for l in libs)))
PY

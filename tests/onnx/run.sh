#!/usr/bin/env bash
# tests/onnx/run.sh — the importer's tests (SUITE=onnx): tools/onnx2model.py on bad and odd
# input (test_importer.py), tools/torch2model.py (test_torch2model.py; TORCH_PYTHON=/path/python
# runs its torch checks), then the quick subset of the ONNX node tests (every 6th case of
# make onnx-conformance), where a case listed in quick_expected.txt must still pass, then the
# real models of examples/import against PyTorch's committed outputs.
# PASS/FAIL lines; exits non-zero on any failure.
set -u
cd "$(dirname "$0")/../.."
PY=${PYTHON:-python3}
MODELC=${MODELC:-build/bin/modelc}
if ! "$PY" -c 'import onnx' 2>/dev/null; then
    echo "FAIL: onnx: the onnx Python package is missing for $PY (tools/setup.sh installs it)"
    exit 1
fi
rc=0
MODELC="$MODELC" nice -n 10 "$PY" tests/onnx/test_importer.py || rc=1
# tools/torch2model.py: its errors without torch; the end-to-end checks under TORCH_PYTHON (a
# Python with torch, onnx, onnxscript, safetensors) or $PY if it has them, else one SKIP line
MODELC="$MODELC" TORCH_PYTHON="${TORCH_PYTHON:-}" nice -n 10 "$PY" tests/onnx/test_torch2model.py || rc=1
nice -n 10 "$PY" tools/onnx_conformance.py --quick -j 2 --modelc "$MODELC" \
    --expect tests/onnx/quick_expected.txt || rc=1
# the real models (examples/import: seeded weights, PyTorch's committed outputs)
# the four smallest real models here; all eight: make -C examples/import test
make -s -C examples/import test MODELS="mobilenet_v3_small bert gpt2 llama" MODELC="$(cd "$(dirname "$MODELC")" && pwd)/$(basename "$MODELC")" PYTHON="$PY" || rc=1
exit $rc

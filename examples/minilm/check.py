#!/usr/bin/env python3
"""Compare modelc's all-MiniLM-L6-v2 outputs with PyTorch's (the committed reference).

    python3 check.py TOKEN_EMBEDDINGS.npy SENTENCE_EMBEDDINGS.npy

Prints, per sentence, the cosine similarity of the mean-pooled sentence embedding with
PyTorch's and the largest absolute difference; the smallest per-token cosine and the largest
absolute difference over all token embeddings (padding positions included); the tolerances;
then `PASS: examples/minilm/b5 (...)` or `FAIL: examples/minilm/b5: why`. Passes when every
sentence and every token has cosine >= 0.9999 and the largest absolute difference is at most
1e-4 * max|ref|. Exits 1 on failure, 2 on a usage or file error.
"""
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
NAME = "examples/minilm/b5"
MIN_COS = 0.9999
RTOL = 1e-4  # max|got - ref| <= RTOL * max|ref|


def cosine(a, b):
    return np.sum(a * b, -1) / (np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1))


def main(argv):
    if len(argv) != 3:
        print("usage: check.py TOKEN_EMBEDDINGS.npy SENTENCE_EMBEDDINGS.npy", file=sys.stderr)
        return 2
    try:
        got_t, got_s = np.load(argv[1]), np.load(argv[2])
        ref_t = np.load(os.path.join(HERE, "token_embeddings.npy"))
        ref_s = np.load(os.path.join(HERE, "sentence_embeddings.npy"))
    except (OSError, ValueError) as e:
        print(f"check.py: error: {e}", file=sys.stderr)
        return 2
    for what, got, ref in (("token_embeddings", got_t, ref_t),
                           ("sentence_embedding", got_s, ref_s)):
        if got.shape != ref.shape or got.dtype != np.float32:
            print(f"FAIL: {NAME}: {what} is {got.dtype}{list(got.shape)}, "
                  f"expected float32{list(ref.shape)}")
            return 1
    if not (np.all(np.isfinite(got_t)) and np.all(np.isfinite(got_s))):
        print(f"FAIL: {NAME}: non-finite values in the outputs")
        return 1
    g_t, r_t = got_t.astype(np.float64), ref_t.astype(np.float64)
    g_s, r_s = got_s.astype(np.float64), ref_s.astype(np.float64)

    cos_s = cosine(g_s, r_s)
    for i, c in enumerate(cos_s):
        print(f"sentence {i}: cosine {c:.8f}, max abs diff {np.max(np.abs(g_s[i] - r_s[i])):.2e}")
    cos_t = cosine(g_t, r_t)
    diff_t = float(np.max(np.abs(g_t - r_t)))
    diff_s = float(np.max(np.abs(g_s - r_s)))
    rel_t = diff_t / float(np.max(np.abs(r_t)))
    rel_s = diff_s / float(np.max(np.abs(r_s)))
    print(f"token embeddings: min cosine {cos_t.min():.8f}, max abs diff {diff_t:.2e} "
          f"({rel_t:.1e} of max|ref|)")
    print(f"sentence embeddings: min cosine {cos_s.min():.8f}, max abs diff {diff_s:.2e} "
          f"({rel_s:.1e} of max|ref|)")
    print(f"tolerance: cosine >= {MIN_COS}, max abs diff <= {RTOL:.0e} * max|ref|")
    bad = []
    if cos_s.min() < MIN_COS:
        bad.append(f"sentence {int(cos_s.argmin())} cosine {cos_s.min():.6f} < {MIN_COS}")
    if cos_t.min() < MIN_COS:
        i, j = np.unravel_index(int(cos_t.argmin()), cos_t.shape)
        bad.append(f"token [{i},{j}] cosine {cos_t.min():.6f} < {MIN_COS}")
    if max(rel_t, rel_s) > RTOL:
        bad.append(f"max abs diff {max(rel_t, rel_s):.1e} of max|ref| > {RTOL:.0e}")
    if bad:
        print(f"FAIL: {NAME}: " + "; ".join(bad))
        return 1
    print(f"PASS: {NAME} (5 sentences: min cosine {min(cos_s.min(), cos_t.min()):.7f}, "
          f"max abs diff {max(diff_t, diff_s):.1e})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

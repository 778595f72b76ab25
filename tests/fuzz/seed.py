#!/usr/bin/env python3
"""tests/fuzz/seed.py OUT — seed corpora for the fuzz harnesses, in OUT/<target>/:

  model        every .model file under examples/ and tests/, and tools/randgraph.py's
               programs for seeds 0..99 (small and medium)
  safetensors  the example weights under 1 MiB, and small files for fuzz_safetensors.c's
               small param set (a: f32[2,3], b: i32[4], c: i64[]) written by safetensors_np:
               plain, with __metadata__, in another key order, with a wrong dtype or shape
  npy          the example .npy files under 64 KiB, and small arrays of every dtype the
               reader takes, ranks 0..3, format versions 1.0, 2.0 and 3.0
  regressions  every file under tests/fuzz/regressions/<target>/ (inputs that once crashed)
and OUT/<target>.dict, libFuzzer dictionaries (the language's words; safetensors' JSON keys and
dtypes; npy's magic and header keys).

Existing files are kept (a corpus grows between runs); seeds are named by content.
"""
import glob
import hashlib
import io
import json
import os
import re
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tools"))
import randgraph  # noqa: E402
import safetensors_np  # noqa: E402 (its dtype names)


def put(out, target, data):
    d = os.path.join(out, target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    name = "seed-" + hashlib.sha1(data).hexdigest()[:16]
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def st_bytes(tensors, metadata=None):
    """A safetensors file as safetensors_np.write makes it, with an optional __metadata__."""
    header, chunks, off = {}, [], 0
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, a in tensors.items():
        raw = np.ascontiguousarray(a).tobytes()
        header[name] = {"dtype": safetensors_np.NAMES[a.dtype], "shape": list(a.shape),
                        "data_offsets": [off, off + len(raw)]}
        chunks.append(raw)
        off += len(raw)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    return len(h).to_bytes(8, "little") + h + b"".join(chunks)


def npy_bytes(a, version=None):
    b = io.BytesIO()
    np.lib.format.write_array(b, a, version=version)
    return b.getvalue()


def main():
    out = sys.argv[1]
    n = {"model": 0, "safetensors": 0, "npy": 0}

    for p in sorted(glob.glob(os.path.join(ROOT, "examples", "**", "*.model"), recursive=True) +
                    glob.glob(os.path.join(ROOT, "tests", "**", "*.model"), recursive=True)):
        with open(p, "rb") as f:
            put(out, "model", f.read())
        n["model"] += 1
    for seed in range(100):
        put(out, "model", randgraph.generate(seed, "small" if seed % 2 == 0 else "medium"))
        n["model"] += 1

    for p in glob.glob(os.path.join(ROOT, "examples", "**", "*.safetensors"), recursive=True):
        if os.path.getsize(p) <= 1 << 20:
            with open(p, "rb") as f:
                put(out, "safetensors", f.read())
            n["safetensors"] += 1
    r = np.random.default_rng(0)
    a = r.standard_normal((2, 3)).astype(np.float32)
    b = np.arange(4, dtype=np.int32)
    c = np.array(7, dtype=np.int64)
    for tensors, meta in [({"a": a, "b": b, "c": c}, None),
                          ({"a": a, "b": b, "c": c}, {"format": "pt"}),
                          ({"c": c, "b": b, "a": a}, None),
                          ({"a": a.astype(np.int32), "b": b, "c": c}, None),
                          ({"a": a.reshape(3, 2), "b": b, "c": c}, None),
                          ({"a": a, "b": b}, None),
                          ({"a": a, "b": b, "c": c, "d": b}, None)]:
        put(out, "safetensors", st_bytes(tensors, meta))
        n["safetensors"] += 1

    for p in glob.glob(os.path.join(ROOT, "examples", "**", "*.npy"), recursive=True):
        if os.path.getsize(p) <= 64 << 10:
            with open(p, "rb") as f:
                put(out, "npy", f.read())
            n["npy"] += 1
    for dt in (np.float32, np.int32, np.int64):
        for shape in [(), (0,), (3,), (2, 3), (2, 1, 2)]:
            arr = (r.standard_normal(shape) * 10).astype(dt)
            for version in (None, (2, 0), (3, 0)):
                put(out, "npy", npy_bytes(arr, version))
                n["npy"] += 1

    # A libFuzzer dictionary for fuzz_model: the keywords, dtypes, functions and attribute
    # names, so that mutations form words the parser knows.
    words = {"model", "input", "param", "output", "true", "false", "block", "return", "as", "on",
             "f32", "i32", "i64", "batch", "cpu", "cuda", "cpu:1", "cuda:1", "=", "{", "}", "(", ")",
             "[", "]", ",", ":", "+", "-", "*", "/", "#", "1e-5", "-1", "2147483647"}
    with open(os.path.join(ROOT, "compiler", "ops.def")) as f:
        ops = f.read()
    words |= set(re.findall(r'^FN\("([a-z0-9_]+)"', ops, re.M))
    words |= set(re.findall(r'[" ]([a-z_]+):[a-z]', ops))
    with open(os.path.join(out, "model.dict"), "w") as f:
        for w in sorted(words):
            f.write('"%s"\n' % w.replace("\\", "\\\\").replace('"', '\\"'))

    st_words = ['"dtype"', '"shape"', '"data_offsets"', '"__metadata__"', '"F32"', '"I32"', '"I64"',
                '"F16"', '"BF16"', '"fc1.weight"', '"a"', "null", "[]", "{}", "\\u0000", "18446744073709551615"]
    with open(os.path.join(out, "safetensors.dict"), "w") as f:
        for w in st_words:
            f.write('"%s"\n' % w.replace("\\", "\\\\").replace('"', '\\"'))
    with open(os.path.join(out, "npy.dict"), "w") as f:
        for w in ["\x93NUMPY", "'descr'", "'fortran_order'", "'shape'", "'<f4'", "'<i4'", "'<i8'", "'>f4'",
                  "True", "False", "()", "(0,)", "9223372036854775807"]:
            f.write('"%s"\n' % "".join(c if c.isprintable() and c not in '"\\' else "\\x%02X" % ord(c) for c in w))

    for target in n:
        for p in glob.glob(os.path.join(HERE, "regressions", target, "*")):
            with open(p, "rb") as f:
                put(out, target, f.read())
            n[target] += 1
    print("seeds: " + ", ".join("%s %d" % kv for kv in n.items()))


if __name__ == "__main__":
    main()

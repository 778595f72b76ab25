"""tools/safetensors_np.py — read and write safetensors files with NumPy alone.

The format (https://github.com/huggingface/safetensors): an 8-byte little-endian header length N,
N bytes of JSON mapping each tensor name to {"dtype", "shape", "data_offsets": [begin, end]}
(offsets relative to the data region, plus an optional "__metadata__" entry), then the data.
Used by the reference interpreter, the tests, the examples' weight scripts and the benchmarks,
so none of them needs the safetensors package.
"""
import json
import os

import numpy as np

# NumPy has no bfloat16: a BF16 tensor is a uint16 array of its bits (the top half of an f32),
# as modelc's npy files and tools/refinterp.py hold it (refinterp.half_encode rounds floats to it).
DTYPES = {"F32": np.float32, "F64": np.float64, "F16": np.float16, "BF16": np.uint16, "I32": np.int32,
          "I64": np.int64, "I16": np.int16, "I8": np.int8, "U8": np.uint8, "BOOL": np.bool_}
NAMES = {np.dtype(v): k for k, v in DTYPES.items()}


class SafetensorsError(ValueError):
    """A malformed file; the message names the file and the tensor."""


def read(path):
    """{name: array} from a safetensors file (arrays are copies in native byte order)."""
    with open(path, "rb") as f:
        blob = f.read()
    if len(blob) < 8:
        raise SafetensorsError("%s: truncated safetensors file" % path)
    n = int.from_bytes(blob[:8], "little")
    if 8 + n > len(blob):
        raise SafetensorsError("%s: header length %d beyond the file" % (path, n))
    header = json.loads(blob[8:8 + n].decode("utf-8"))
    data = blob[8 + n:]
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        if e["dtype"] not in DTYPES:
            raise SafetensorsError("%s: tensor '%s': unsupported dtype %s" % (path, name, e["dtype"]))
        dt = np.dtype(DTYPES[e["dtype"]]).newbyteorder("<")
        begin, end = e["data_offsets"]
        shape = tuple(e["shape"])
        for i, dim in enumerate(shape):
            if dim == 0:  # field case B18: a clean error, never a division by a dimension
                raise SafetensorsError("%s: tensor %s: dimension %d is 0" % (path, name, i))
        a = np.frombuffer(data[begin:end], dtype=dt)
        if a.size != int(np.prod(shape, dtype=np.int64)):
            raise SafetensorsError("%s: tensor '%s': %d bytes for shape %s" % (path, name, end - begin, shape))
        out[name] = a.reshape(shape).astype(dt.newbyteorder("="))
    return out


def write(path, tensors):
    """Write {name: array} (any dtype in DTYPES, any rank including 0) to `path`, whole or not at
    all: the file is written under a temporary name and renamed."""
    header, chunks, off = {}, [], 0
    for name, a in tensors.items():
        a = np.asarray(a)
        raw = a.astype(a.dtype.newbyteorder("<")).tobytes(order="C")
        header[name] = {"dtype": NAMES[a.dtype], "shape": list(a.shape), "data_offsets": [off, off + len(raw)]}
        chunks.append(raw)
        off += len(raw)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    tmp = "%s.tmp.%d" % (path, os.getpid())
    try:
        with open(tmp, "wb") as f:
            f.write(len(h).to_bytes(8, "little"))
            f.write(h)
            for c in chunks:
                f.write(c)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise

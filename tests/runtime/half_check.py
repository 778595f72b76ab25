#!/usr/bin/env python3
"""tests/runtime/half_check.py — mrt_kernels.h's f16 / bf16 conversions against NumPy.

    python3 tests/runtime/half_check.py BIN      # BIN: tests/runtime/test_half.c, built

Checks, printing one PASS/FAIL line each (the run.sh format) and exiting 1 on a failure:
  - every f16 bit pattern to f32 against NumPy's float16 -> float32 (bits; a NaN's payload too);
  - every bf16 bit pattern to f32: the pattern shifted into the top half of an f32;
  - f32 to f16 on a sample of floats (every f16 value, the midpoints between neighbours and
    one f32 ulp either side, zeros, subnormals of both, 65504..65520..inf, NaNs, and random
    bit patterns) against NumPy's float32 -> float16 (round to nearest even);
  - f32 to bf16 on the same floats against the nearest of the two bf16 values around the float
    (compared in float64, a tie to the even one, past the largest finite value to inf) — not
    the bit trick the C code uses;
  - int32 to f16 and bf16 through mrt_i64_to_f32_odd against NumPy's float64 (exact for int32)
    -> float16 and the same nearest-value reference for bf16;
  - round trips f16 -> f32 -> f16 and bf16 -> f32 -> bf16 keep every non-NaN pattern.
A NaN must give a quiet NaN of the same sign (NumPy keeps a signaling NaN's pattern; modelc
quiets it, as CUDA's and x86's conversions do)."""

import os
import subprocess
import sys
import tempfile

import numpy as np

failed = False


def report(name, bad, total, detail=""):
    global failed
    if bad:
        failed = True
        print("FAIL: runtime/half/%s: %d of %d wrong%s" % (name, bad, total, detail))
    else:
        print("PASS: runtime/half/%s (%d values, 0 wrong)" % (name, total))


def first(mask, *cols):
    i = int(np.argmax(mask))
    return ": first at %s" % ", ".join(c(i) for c in cols)


def samples():
    h = np.arange(65536, dtype=np.uint32).astype(np.uint16)
    fin = h[(h & 0x7c00) != 0x7c00]
    v = np.sort(fin.view(np.float16).astype(np.float64))
    mids = (v[1:] + v[:-1]) / 2                    # exact in float32: 12 bits at most
    m32 = mids.astype(np.float32)
    near = np.concatenate([m32, np.nextafter(m32, np.float32(np.inf)), np.nextafter(m32, np.float32(-np.inf))])
    special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, 65504, 65519.99, 65520, 65536, 1e30,
                        -65520, 2.0 ** -24, 2.0 ** -25, 2.0 ** -25 * 1.0000001, 2.0 ** -26, 2.0 ** -14,
                        3.4028235e38, -3.4028235e38, 1e-45, 1e-40, -1e-40, 0.1, 1 / 3], dtype=np.float32)
    rng = np.random.default_rng(10)
    rand = rng.integers(0, 2 ** 32, 2_000_000, dtype=np.uint64).astype(np.uint32).view(np.float32)
    nans = np.array([0x7f800001, 0x7fc00000, 0xffc00001, 0x7fffffff, 0xff800001, 0x7f802000], np.uint32).view(np.float32)
    # bf16 ties and their neighbours: a random top half with a low half of 0x8000 (+-1)
    top = rng.integers(0, 2 ** 16, 100_000, dtype=np.uint64).astype(np.uint32) << 16
    ties = np.concatenate([top | 0x8000, top | 0x7fff, top | 0x8001]).astype(np.uint32).view(np.float32)
    return np.concatenate([fin.view(np.float16).astype(np.float32), near, special, rand, nans, ties]).astype(np.float32)


def bf16_ref(x):
    """The bf16 bits nearest to the float64 values x (ties to even, overflow to inf, NaN quiet)."""
    x = np.asarray(x, np.float64)
    sign = np.signbit(x).astype(np.uint32) << 15
    a = np.abs(x)
    f = a.astype(np.float32)               # an f32 at most: truncating its bits gives lo <= a
    lo = (f.view(np.uint32) >> 16).astype(np.uint32)
    lo = np.where((lo.astype(np.uint32) << 16).view(np.float32).astype(np.float64) > a, lo - 1, lo)
    hi = lo + 1
    dec = lambda b: np.where(b >= 0x7f80, 2.0 ** 128, (b.astype(np.uint32) << 16).view(np.float32).astype(np.float64))
    with np.errstate(invalid="ignore"):
        dlo, dhi = a - dec(lo), dec(hi) - a
    r = np.where(dlo < dhi, lo, np.where(dhi < dlo, hi, np.where(lo & 1, hi, lo)))
    r = np.where(np.isinf(a), 0x7f80, np.minimum(r, 0x7f80))
    return (r | sign).astype(np.uint16)


def check_rounded(name, got, want, x):
    xn = np.isnan(x)
    g32, w32 = got.astype(np.uint32), want.astype(np.uint32)
    exp_mask = 0x7c00 if name.startswith("f32_to_f16") else 0x7f80
    quiet = 0x0200 if exp_mask == 0x7c00 else 0x0040
    nan_ok = ((g32 & exp_mask) == exp_mask) & ((g32 & quiet) != 0) & ((g32 >> 15) == (w32 >> 15))
    bad = np.where(xn, ~nan_ok, g32 != w32)
    report(name, int(bad.sum()), len(x),
           first(bad, lambda i: "x=%r (0x%08x)" % (float(x[i]), x.view(np.uint32)[i] if x.dtype == np.float32 else 0),
                 lambda i: "got 0x%04x" % g32[i], lambda i: "want 0x%04x" % w32[i]) if bad.any() else "")


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: half_check.py BIN")
    prog = sys.argv[1]
    np.seterr(invalid="ignore")   # casting a signaling NaN; NaNs are checked on their own
    with tempfile.TemporaryDirectory() as d:
        tpath = os.path.join(d, "tables.bin")
        subprocess.run([prog, "TABLES", tpath], check=True)
        t = np.fromfile(tpath, dtype="<u4")
        h = np.arange(65536, dtype=np.uint32).astype(np.uint16)
        want = h.view(np.float16).astype(np.float32).view(np.uint32)
        bad = t[:65536] != want
        report("f16_to_f32_all", int(bad.sum()), 65536,
               first(bad, lambda i: "0x%04x" % i, lambda i: "got 0x%08x" % t[i], lambda i: "want 0x%08x" % want[i])
               if bad.any() else "")
        want = h.astype(np.uint32) << 16
        bad = t[65536:] != want
        report("bf16_to_f32_all", int(bad.sum()), 65536)

        x = samples()
        ints = np.concatenate([np.arange(-70000, 70000), np.random.default_rng(11).integers(-2 ** 31, 2 ** 31, 500_000),
                               [2 ** 31 - 1, -2 ** 31, 2 ** 24 + 2 ** 16 + 1, 2 ** 24 + 2 ** 16, 16777217, 65519, 65520, 2049, 2051]])
        ints = ints.astype(np.int64)
        n = max(len(x), len(ints))
        xin = np.concatenate([x, np.zeros(n - len(x), np.float32)])
        iin = np.concatenate([ints, np.zeros(n - len(ints), np.int64)]).astype(np.int32)
        for pass_, (arr, tag) in enumerate(((xin, "f"), (iin, "i"))):
            fpath, opath = os.path.join(d, "in.bin"), os.path.join(d, "out.bin")
            arr.view(np.uint32).astype("<u4").tofile(fpath)
            subprocess.run([prog, "FLOATS", fpath, opath], check=True)
            o = np.fromfile(opath, dtype="<u2").reshape(4, n)
            if tag == "f":
                m = len(x)
                with np.errstate(over="ignore"):
                    check_rounded("f32_to_f16", o[0, :m], x.astype(np.float16).view(np.uint16), x)
                check_rounded("f32_to_bf16", o[1, :m], bf16_ref(x), x)
            else:
                m = len(ints)
                v = ints.astype(np.float64)
                with np.errstate(over="ignore"):
                    check_rounded("i32_to_f16", o[2, :m], v.astype(np.float16).view(np.uint16), v)
                check_rounded("i32_to_bf16", o[3, :m], bf16_ref(v), v)
        # round trips: f16 -> f32 (the table) -> f16, and bf16 likewise, every pattern
        rt = np.concatenate([t[:65536], t[65536:]]).astype("<u4")
        fpath, opath = os.path.join(d, "rt.bin"), os.path.join(d, "rt_out.bin")
        rt.tofile(fpath)
        subprocess.run([prog, "FLOATS", fpath, opath], check=True)
        o = np.fromfile(opath, dtype="<u2").reshape(4, 2 * 65536)
        for k, (name, got, exp_mask) in enumerate((("f16_round_trip", o[0, :65536], 0x7c00),
                                                    ("bf16_round_trip", o[1, 65536:], 0x7f80))):
            pat = np.arange(65536, dtype=np.uint32)
            nan = ((pat & exp_mask) == exp_mask) & ((pat & (0x7fff ^ exp_mask)) != 0)
            quiet = 0x0200 if exp_mask == 0x7c00 else 0x0040
            want = np.where(nan, pat | quiet, pat)       # a NaN comes back quiet, payload kept
            bad = got.astype(np.uint32) != want
            report(name, int(bad.sum()), 65536,
                   first(bad, lambda i: "0x%04x" % i, lambda i: "got 0x%04x" % got[i]) if bad.any() else "")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""fit_mrt_poly.py -- the coefficients of mrt_kernels.h's mrt_exp_reduced and of mrt_erff's
|x| >= 0.875 branch, as committed (run it to reproduce them; NumPy and mpmath, e.g.
build/bench-venv/bin/python tools/fit_mrt_poly.py).

  exp:  e^r = 1 + r P(r), P of degree 5, on r in [-ln2/2, ln2/2], relative error weighted
        (the polynomial evaluated by Horner in fmaf; 2000 Chebyshev nodes)
  erfc: log(erfc(t)) = Q(t), Q of degree 6, on t in [0.875, 4], the error weighted by erfc(t):
        erf = 1 - e^Q makes an error dQ in Q one of erfc(t) dQ in erf (3000 Chebyshev nodes)

Each fit is weighted least squares iterated toward minimax (Lawson's algorithm: the weights
multiplied by the error at each node, 40 rounds); the coefficients are then rounded to float one
at a time, lowest degree first, the higher ones re-fitted after each rounding. References in
mpmath at 30 digits. Prints each coefficient (as float32) and the weighted maximum error in units
of 2^-24 (an ulp of erf in [0.5, 1); of e^r near 1).
"""
import math

import numpy as np
from mpmath import erfc, exp, log, mp, mpf

mp.dps = 30


def cheb(a, b, n):
    k = np.arange(n)
    return np.sort((a + b) / 2 + (b - a) / 2 * np.cos((2 * k + 1) * np.pi / (2 * n)))


def lawson(V, f, w, iters=40):
    lw = np.ones(len(f))
    for _ in range(iters):
        W = w * np.sqrt(lw)
        c, *_ = np.linalg.lstsq(V * W[:, None], f * W, rcond=None)
        e = np.abs(V @ c - f) * w
        lw = lw * e
        lw /= lw.sum()
    return c


def fit_rounded(V, f, w):
    fixed = []
    for k in range(V.shape[1]):
        rest = f - (V[:, :k] @ np.array(fixed) if k else 0)
        fixed.append(float(np.float32(lawson(V[:, k:], rest, w)[0])))
    return np.array(fixed)


def main():
    h = math.log(2) / 2
    r = cheb(-h, h, 2000)
    f = np.array([float(exp(mpf(x))) for x in r])
    V = np.vander(r, 7, increasing=True)[:, 1:]  # r .. r^6; the constant 1 fixed
    c = fit_rounded(V, f - 1, 1 / f)
    print("exp, coefficients of r .. r^6:", ", ".join("%.9g" % x for x in c))
    print("  max relative error %.3f ulp (2^-24)" % (np.max(np.abs(1 + V @ c - f) / f) / 2**-24))
    t = cheb(0.875, 4.0, 3000)
    f = np.array([float(log(erfc(mpf(x)))) for x in t])
    w = np.array([math.erfc(x) for x in t])
    V = np.vander(t, 7, increasing=True)
    c = fit_rounded(V, f, w)
    print("log erfc, coefficients of 1 .. t^6:", ", ".join("%.9g" % x for x in c))
    print("  max error in erf %.3f ulp (2^-24)" % (np.max(np.abs(V @ c - f) * w) / 2**-24))


if __name__ == "__main__":
    main()

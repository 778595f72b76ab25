#!/usr/bin/env python3
"""bench/compile_time.py — how modelc's compile time and memory grow with the model's size.

    python3 bench/compile_time.py [--modelc build/bin/modelc] [--sizes 1000,10000,50000]
                                  [--kind chain|matmul|both] [--dump memplan] [--build N]

Generates two families of models in build/bench/compile_time/ and times
`modelc M.model --dump=memplan` on each (the whole front end and both memory plans, no C):
  chain   N statements, each one elementwise op on the previous value (add, mul, relu, tanh in
          turn): one long fused chain, the symbol table and the plan's lists at their largest
  matmul  N matmuls, each of the previous value by one shared f32[16,16] param, each followed by
          a relu: N GEMM kernels with epilogues, N arena blocks, N steps in the plan
It prints, per model: statements, wall seconds, peak resident memory (the child's ru_maxrss, from
os.wait4) and seconds per 1000 statements, so that a super-linear phase shows as a growing last
column. The issue's targets (issue 16, item 4): a 50,000-statement chain and a 20,000-matmul
chain each under 2 s and 1 GB.

--build N also times building the executable (C compiler included) for an N-matmul model with
N distinct params (N kernels), CPU only, and prints the time modelc spent and the generated C's
size (with --keep-c).

Not a test: nothing fails on a number; the exit status is 1 only when modelc itself fails.
"""
import argparse
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "build", "bench", "compile_time")


def chain_model(n):
    ops = ["{p} + 1.0", "{p} * 0.5", "relu({p})", "tanh({p})"]
    lines = ["model chain%d {" % n, "  input x: f32[batch, 64]"]
    prev = "x"
    for i in range(n - 1):
        lines.append("  t%d = %s" % (i, ops[i % 4].format(p=prev)))
        prev = "t%d" % i
    lines.append("  output y = %s" % ops[(n - 1) % 4].format(p=prev))
    lines.append("}")
    return "\n".join(lines) + "\n"


def matmul_model(n, distinct=False):
    lines = ["model mm%d {" % n, "  input x: f32[batch, 16]"]
    if distinct:
        lines += ["  param w%d: f32[16, 16]" % i for i in range(n)]
    else:
        lines.append("  param w: f32[16, 16]")
    prev = "x"
    for i in range(n - 1):
        lines.append("  t%d = relu(matmul(%s, %s))" % (i, prev, "w%d" % i if distinct else "w"))
        prev = "t%d" % i
    lines.append("  output y = matmul(%s, %s)" % (prev, "w%d" % (n - 1) if distinct else "w"))
    lines.append("}")
    return "\n".join(lines) + "\n"


def run(cmd, env=None):
    """Run cmd; return (seconds, peak RSS in MiB, returncode, stderr tail)."""
    t0 = time.monotonic()
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    err = p.stderr.read()
    _, status, ru = os.wait4(p.pid, 0)
    dt = time.monotonic() - t0
    p.returncode = os.waitstatus_to_exitcode(status)
    return dt, ru.ru_maxrss / 1024.0, p.returncode, err.decode(errors="replace")[-400:]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--modelc", default=os.path.join(ROOT, "build", "bin", "modelc"))
    ap.add_argument("--sizes", default=None,
                    help="comma-separated statement counts (default: chain 5000,20000,50000; "
                         "matmul 2000,10000,20000)")
    ap.add_argument("--kind", choices=["chain", "matmul", "both"], default="both")
    ap.add_argument("--dump", default="memplan")
    ap.add_argument("--build", type=int, default=0, metavar="N",
                    help="also time building an executable with N kernels")
    a = ap.parse_args()
    os.makedirs(OUT, exist_ok=True)
    kinds = ["chain", "matmul"] if a.kind == "both" else [a.kind]
    default = {"chain": [5000, 20000, 50000], "matmul": [2000, 10000, 20000]}
    failed = False
    print("%-8s %8s %9s %10s %14s" % ("kind", "stmts", "seconds", "peak MiB", "s per 1000"))
    for kind in kinds:
        sizes = [int(s) for s in a.sizes.split(",")] if a.sizes else default[kind]
        for n in sizes:
            path = os.path.join(OUT, "%s%d.model" % (kind, n))
            with open(path, "w") as f:
                f.write(chain_model(n) if kind == "chain" else matmul_model(n))
            dt, mib, rc, err = run([a.modelc, path, "--dump=" + a.dump])
            print("%-8s %8d %9.3f %10.1f %14.4f%s" % (kind, n, dt, mib, dt / n * 1000,
                                                     "" if rc == 0 else "  FAILED: " + err))
            sys.stdout.flush()
            failed |= rc != 0
    if a.build:
        n = a.build
        path = os.path.join(OUT, "build%d.model" % n)
        with open(path, "w") as f:
            f.write(matmul_model(n, distinct=True))
        exe = os.path.join(OUT, "build%d" % n)
        dt, mib, rc, err = run([a.modelc, path, "--no-cuda", "--keep-c", "-o", exe])
        csize = sum(os.path.getsize(exe + ext) for ext in (".c", "_main.c", ".h")
                    if os.path.exists(exe + ext))
        print("build    %8d %9.3f %10.1f %14.4f  (generated C %.1f MiB)%s"
              % (n, dt, mib, dt / n * 1000, csize / 2**20, "" if rc == 0 else "  FAILED: " + err))
        failed |= rc != 0
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

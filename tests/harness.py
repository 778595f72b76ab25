"""tests/harness.py — what tests/numeric/run.py and tests/plan/run.py share.

Both suites compile a model with modelc, write its params to a .safetensors file and its inputs
to .npy files, run the executable (`PROG --weights W --input k=k.npy ... --output y=y.npy ...`),
read the outputs back and print one `PASS: suite/name` or `FAIL: suite/name: why` line per job.
This module holds those steps; what a suite checks stays in its own run.py.

    import harness                                   # after sys.path has tests/ in it
    p = harness.run_cmd([modelc, path, "-o", prog], "compile", timeout=60)
    w, ips = harness.write_io(d, "A", model, inputs, params)
    outs, p = harness.execute(d, prog, "A", model, w, ips, timeout=60)   # outs None: it failed
    fails = harness.run_jobs(job, jobs, j=2)         # job(args) -> (ok, line)

Importing it puts tools/ on sys.path (refinterp, randgraph, safetensors_np).
"""

import contextlib
import os
import subprocess
import sys
from concurrent.futures import ProcessPoolExecutor

import numpy as np

TESTS = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(TESTS)
if os.path.join(ROOT, "tools") not in sys.path:
    sys.path.insert(0, os.path.join(ROOT, "tools"))
import safetensors_np  # noqa: E402

# Model dtypes as NumPy dtypes; bf16, which NumPy lacks, as uint16 arrays of its bits (the
# '<u2' npy files and BF16 safetensors modelc reads and writes; refinterp.half_encode makes them).
NP_DT = {"f32": np.float32, "i32": np.int32, "i64": np.int64, "bool": np.bool_, "f16": np.float16,
         "bf16": np.uint16}


class CaseFail(Exception):
    """A test failed; the message says why (it follows `FAIL: suite/name: `)."""


def modelc_path():
    """The compiler under test: $MODELC, or build/bin/modelc in this checkout."""
    return os.environ.get("MODELC", os.path.join(ROOT, "build", "bin", "modelc"))


def run_cmd(cmd, what, timeout, env=None):
    """Run cmd (a list) with its output captured (env: its environment, None: this one's);
    CaseFail if it times out or cannot start."""
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        raise CaseFail("%s timed out after %gs: %s" % (what, timeout, " ".join(cmd)))
    except OSError as e:
        raise CaseFail("%s: cannot run %s: %s" % (what, cmd[0], e))


def tail(s, n=3):
    """The last n non-empty lines of s, joined with ' | ' (for one-line failure messages)."""
    lines = [l for l in s.strip().splitlines() if l.strip()]
    return " | ".join(lines[-n:])


def write_io(d, tag, model, inputs, params):
    """Write params (when the model has any) and inputs under d; return (weights path or None,
    {input name: .npy path})."""
    wpath = None
    if model.params:
        wpath = os.path.join(d, "weights_%s.safetensors" % tag)
        safetensors_np.write(wpath, params)
    ipaths = {}
    for k, a in inputs.items():
        ipaths[k] = os.path.join(d, "in_%s_%s.npy" % (tag, k.replace(".", "_")))
        np.save(ipaths[k], a)
    return wpath, ipaths


def execute(d, prog, tag, model, wpath, ipaths, extra=(), device=None, timeout=60, env=None):
    """Run the compiled program on the files write_io wrote; return ({output: array}, process),
    or (None, process) when it exits non-zero. Outputs go to d/out_TAG_I.npy (any stale ones
    removed first); an output that cannot be read back is a CaseFail."""
    cmd = [prog]
    if wpath:
        cmd += ["--weights", wpath]
    for k, p in ipaths.items():
        cmd += ["--input", "%s=%s" % (k, p)]
    opaths = {}
    for i, k in enumerate(model.outputs):
        opaths[k] = os.path.join(d, "out_%s_%d.npy" % (tag, i))
        if os.path.exists(opaths[k]):
            os.unlink(opaths[k])
        cmd += ["--output", "%s=%s" % (k, opaths[k])]
    if device:
        cmd += ["--device", device]
    cmd += list(extra)
    p = run_cmd(cmd, "run (%s)" % tag, timeout, env)
    if p.returncode != 0:
        return None, p
    outs = {}
    for k, path in opaths.items():
        try:
            outs[k] = np.load(path)
        except Exception as e:  # noqa: BLE001
            raise CaseFail("run (%s): output %s unreadable: %s" % (tag, k, e))
    return outs, p


def run_jobs(fn, jobs, j):
    """Run fn(job) -> (ok, line) for every job, j at a time in worker processes (in this one
    when j <= 1); print each line in job order as it comes; return the number not ok."""
    fails = 0
    with contextlib.ExitStack() as stack:
        if j <= 1:
            results = map(fn, jobs)
        else:
            results = stack.enter_context(ProcessPoolExecutor(max_workers=j)).map(fn, jobs)
        for ok, line in results:
            fails += not ok
            print(line, flush=True)
    return fails


def compiler_missing(modelc, names):
    """When modelc is not an executable, print `FAIL: NAME: compiler not found` for each name
    and return True."""
    if os.access(modelc, os.X_OK):
        return False
    for n in names:
        print("FAIL: %s: compiler not found: %s (set MODELC)" % (n, modelc))
    return True

#!/usr/bin/env python3
"""tests/onnx/test_torch2model.py — tools/torch2model.py: its argument and output errors (no
torch needed: they are refused before torch is imported), then, with a Python that has torch,
onnx and onnxscript, a small Conv+BN+Linear module end to end.

The torch part runs under TORCH_PYTHON (a path, e.g. /work/venv-torch/bin/python), else under
this Python if it has torch; with neither it prints one SKIP line saying so. Prints one
PASS/FAIL/SKIP line per check. MODELC (default build/bin/modelc) compiles the end-to-end case.
"""
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
TOOL = os.path.join(ROOT, "tools", "torch2model.py")
MODELC = os.environ.get("MODELC", os.path.join(ROOT, "build", "bin", "modelc"))
FAILED = 0

# the module the end-to-end checks import from the current directory (issue: `mymods:Small`
# run from the module's folder could not be imported)
MYMODS = '''
import torch


class Small(torch.nn.Module):
    def __init__(self, c=3):
        super().__init__()
        self.conv = torch.nn.Conv2d(c, 4, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(4)
        self.fc = torch.nn.Linear(4, 5)

    def forward(self, x):
        h = torch.relu(self.bn(self.conv(x)))
        return self.fc(h.mean((2, 3)))


class Pair(torch.nn.Module):
    """Returns a dict of two tensors (as a Hugging Face ModelOutput does)."""
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 3)

    def forward(self, x):
        y = self.fc(x)
        return {"logits": y, "probs": torch.softmax(y, -1)}


class Unsupported(torch.nn.Module):
    """Exports (NonZero), but the importer refuses it."""
    def forward(self, x):
        return torch.nonzero(x)


class Unexportable(torch.nn.Module):
    """Control flow on a value: torch.export refuses it."""
    def forward(self, x):
        if x.sum() > 0:
            return x * 2
        return x
'''


def report(ok, name, why=""):
    global FAILED
    if ok:
        print("PASS: torch2model/%s" % name)
    else:
        FAILED += 1
        print("FAIL: torch2model/%s: %s" % (name, why))


def run_tool(py, args, cwd):
    p = subprocess.run([py, TOOL] + args, capture_output=True, text=True, cwd=cwd)
    return p.returncode, p.stdout, p.stderr


def leftovers(d, keep):
    return sorted(f for f in os.listdir(d) if f not in keep)


def expect_error(py, d, name, args, needles, keep):
    rc, so, se = run_tool(py, args, d)
    missing = [n for n in needles if n not in se]
    left = leftovers(d, keep)
    if rc != 1:
        report(False, name, "exit status %d, expected 1: %s" % (rc, se.strip()[-800:]))
    elif missing:
        report(False, name, "message lacks %s: %s" % (missing, se.strip()[-800:]))
    elif "\ntorch2model: error: " not in "\n" + se or "Traceback" in se or "\x1b[" in se:
        report(False, name, "not a clean 'torch2model: error:' message: %s" % se.strip()[-800:])
    elif left:
        report(False, name, "files left behind: %s" % left)
    else:
        report(True, name)


def find_torch_python():
    cands = [os.environ["TORCH_PYTHON"]] if os.environ.get("TORCH_PYTHON") else [sys.executable]
    for py in cands:
        p = subprocess.run([py, "-c", "import torch, onnx, onnxscript, safetensors"], capture_output=True)
        if p.returncode == 0:
            return py
    return None


def no_torch_checks(d):
    """Refused before torch is imported: these run under any Python."""
    py = sys.executable
    os.mkdir(os.path.join(d, "dir.model"))
    keep = {"dir.model"}
    expect_error(py, d, "kwargs_not_object", ["m:Small", "--input", "x=f32[2,3]", "-o", "o", "--kwargs", "[3,4]"],
                 ["--kwargs [3,4]", "JSON object"], keep)
    expect_error(py, d, "output_is_directory", ["m:Small", "--input", "x=f32[2,3]", "-o", "dir"],
                 ["dir.model is a directory"], keep)
    expect_error(py, d, "output_unwritable", ["m:Small", "--input", "x=f32[2,3]", "-o", "/proc/foo"],
                 ["/proc/foo", "cannot write in /proc"], keep)
    expect_error(py, d, "output_empty_base", ["m:Small", "--input", "x=f32[2,3]", "-o", "sub" + os.sep],
                 ["base name"], keep)
    expect_error(py, d, "max_batch_zero", ["m:Small", "--input", "x=f32[batch,3]", "-o", "o", "--max-batch", "0"],
                 ["--max-batch 0", "at least 1"], keep)
    p = subprocess.run([py, TOOL, "--help"], capture_output=True, text=True)
    report(p.returncode == 0 and all(o in p.stdout for o in ("--keep-unused-inputs", "--no-blocks", "--widen-ints")),
           "passes_onnx2model_options", p.stdout[-400:])


def torch_checks(py, d):
    with open(os.path.join(d, "mymods.py"), "w") as f:
        f.write(MYMODS)
    keep = {"mymods.py", "__pycache__"}
    # clean errors: a constructor needing arguments, a function, an export failure
    expect_error(py, d, "constructor_needs_arguments", ["torch.nn:Linear", "--input", "x=f32[2,3]", "-o", "o"],
                 ["torch.nn:Linear()", "missing", "--kwargs"], keep)
    expect_error(py, d, "function_not_module", ["torch:relu", "--input", "x=f32[2,3]", "-o", "o"],
                 ["torch:relu", "nn.Module"], keep)
    expect_error(py, d, "export_failure", ["mymods:Unexportable", "--input", "x=f32[2,3]", "-o", "o", "--check"],
                 ["torch.onnx.export failed"], keep)
    expect_error(py, d, "import_failure_leaves_nothing", ["mymods:Unsupported", "--input", "x=f32[2,3]", "-o", "o",
                                                          "--check", "--keep-onnx"], ["NonZero", "not supported"], keep)

    # Conv + BN + Linear from the current directory: the weights are exactly the state_dict
    out = os.path.join(d, "s")
    rc, so, se = run_tool(py, ["mymods:Small", "--input", "x=f32[batch,3,8,8]", "-o", "s", "--check", "--no-blocks"], d)
    if rc != 0:
        report(False, "state_dict_keys", "rc %d: %s" % (rc, se.strip()[-1500:]))
        return
    modes = {f: os.stat(os.path.join(d, f)).st_mode & 0o777 for f in ("s.model", "s.safetensors", "s.in.x.npy")}
    report(all(m == 0o666 & ~UMASK for m in modes.values()), "file_modes",
           "modes %s, umask %o" % ({k: oct(v) for k, v in modes.items()}, UMASK))
    # in the torch Python: the state_dict against the weights file, then a "trained"
    # state_dict (random values, BN statistics included) saved by safetensors.torch
    script = r'''
import sys, numpy as np, torch, safetensors.torch as st
sys.path.insert(0, sys.argv[1]); sys.path.insert(0, sys.argv[2])
import mymods, safetensors_np
torch.manual_seed(0)  # torch2model's --seed
m = mymods.Small()
w = safetensors_np.read(sys.argv[3] + ".safetensors")
sd = {k: v.numpy() for k, v in m.state_dict().items()}
if sorted(w) != sorted(sd):
    sys.exit("keys: weights %s, state_dict %s" % (sorted(w), sorted(sd)))
for k in sd:
    if not np.array_equal(np.asarray(w[k]), sd[k]):
        sys.exit("%s differs from the state_dict" % k)
torch.manual_seed(7)
with torch.no_grad():
    for k, v in m.state_dict().items():
        if v.dtype == torch.float32:
            v.copy_(torch.rand_like(v) + 0.5 if "var" in k else torch.randn_like(v))
m.eval()
st.save_file(m.state_dict(), sys.argv[3] + ".trained.safetensors")
x = torch.randn(3, 3, 8, 8, generator=torch.Generator().manual_seed(1))
np.save(sys.argv[3] + ".tx.npy", x.numpy())
np.save(sys.argv[3] + ".tref.npy", m(x).detach().numpy())
'''
    p = subprocess.run([py, "-c", script, d, os.path.join(ROOT, "tools"), out], capture_output=True, text=True)
    report(p.returncode == 0, "state_dict_keys", (p.stderr.strip() or p.stdout.strip())[-800:])
    if p.returncode != 0 or not os.path.exists(MODELC):
        return
    import numpy as np
    exe = out + "_exe"
    p = subprocess.run([MODELC, out + ".model", "-o", exe, "--no-cuda", "-O0"], capture_output=True, text=True)
    for tag, wts, x, ref in (("check_outputs", out + ".safetensors", out + ".in.x.npy", out + ".ref.linear.npy"),
                             ("trained_state_dict_loads", out + ".trained.safetensors", out + ".tx.npy", out + ".tref.npy")):
        if p.returncode == 0:
            p = subprocess.run([exe, "--weights", wts, "--input", "x=" + x, "--output", "linear=" + out + ".y.npy",
                                "--device", "cpu"], capture_output=True, text=True)
        if p.returncode != 0:
            report(False, tag, p.stderr.strip())
            continue
        y, r = np.load(out + ".y.npy"), np.load(ref)
        err = float(np.abs(y - r).max() / np.abs(r).max())
        report(err <= 1e-5, tag, "relative error vs PyTorch %g (tolerance 1e-5)" % err)

    # a TorchScript file: exported with the TorchScript-based exporter (said so), its state_dict's keys
    p = subprocess.run([py, "-c", "import torch, mymods; torch.manual_seed(0); "
                        "torch.jit.script(mymods.Small().eval()).save('small.pt')"], capture_output=True, text=True, cwd=d)
    rc, so, se = run_tool(py, ["small.pt", "--input", "x=f32[batch,3,8,8]", "-o", "sp"], d)
    w = {}
    if rc == 0:
        sys.path.insert(0, os.path.join(ROOT, "tools"))
        import safetensors_np
        w = safetensors_np.read(os.path.join(d, "sp.safetensors"))
    report(rc == 0 and "TorchScript-based exporter" in so and "\x1b[" not in se and len(w) == 9
           and "bn.running_var" in w, "torchscript_file", "rc %d, keys %s: %s" % (rc, sorted(w), se.strip()[-800:]))

    # --check on a module returning a dict (as a Hugging Face ModelOutput): its tensors in order
    rc, so, se = run_tool(py, ["mymods:Pair", "--input", "x=f32[2,4]", "-o", "pair", "--check"], d)
    files = sorted(f for f in os.listdir(d) if f.startswith("pair.ref."))
    report(rc == 0 and len(files) == 2, "check_dict_outputs", "rc %d, refs %s: %s" % (rc, files, se.strip()[-800:]))


UMASK = os.umask(0o022)
os.umask(UMASK)


def main():
    tmp = tempfile.mkdtemp(prefix="torch2model-test.")
    try:
        no_torch_checks(tmp)
        py = find_torch_python()
        if py is None:
            print("SKIP: torch2model/torch: no Python with torch, onnx, onnxscript and safetensors "
                  "(set TORCH_PYTHON=/path/to/python to run these checks)")
        else:
            d = os.path.join(tmp, "t")
            os.mkdir(d)
            torch_checks(py, d)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 1 if FAILED else 0


if __name__ == "__main__":
    sys.exit(main())

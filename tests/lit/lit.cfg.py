# lit configuration for modelc: .model files with RUN/CHECK lines (LLVM lit + FileCheck).
import glob
import os
import re
import shlex
import shutil
import subprocess

import lit.formats

config.name = "modelc"
config.test_format = lit.formats.ShTest(execute_external=False)
config.suffixes = [".model", ".test"]
config.excludes = ["Inputs"]
config.test_source_root = os.path.dirname(__file__)
root = os.path.dirname(os.path.dirname(config.test_source_root))
build = os.environ.get("B", "build")
if not os.path.isabs(build):
    build = os.path.join(root, build)
config.test_exec_root = os.path.join(build, "lit")

modelc = os.environ.get("MODELC", os.path.join(build, "bin", "modelc"))
config.substitutions.append(("%modelc", modelc))
config.substitutions.append(("%root", root))
config.substitutions.append(("%python", os.environ.get("PYTHON", "python3")))
config.substitutions.append(("%build", build))


def _llvm_tool(name):
    """`name` on PATH, else in the newest /usr/lib/llvm-N/bin that has it (highest N)."""
    found = shutil.which(name)
    if found:
        return found
    def version(d):
        m = re.search(r"llvm-(\d+(?:\.\d+)*)", d)
        return tuple(int(x) for x in m.group(1).split(".")) if m else ()
    for d in sorted(glob.glob("/usr/lib/llvm-*/bin"), key=version, reverse=True):
        if os.access(os.path.join(d, name), os.X_OK):
            return os.path.join(d, name)
    dirs = sorted(glob.glob("/usr/lib/llvm-*/bin"), key=version) or ["none"]
    lit_config.fatal("%s not found on PATH or in /usr/lib/llvm-*/bin (looked in: %s); install "
                     "LLVM's test tools (Debian: llvm-N-tools) or put %s on PATH"
                     % (name, ", ".join(dirs), name))


config.substitutions.append(("FileCheck", _llvm_tool("FileCheck")))
config.substitutions.append(("%not", _llvm_tool("not")))
for var in ("MODELC_CFLAGS", "ASAN_OPTIONS", "UBSAN_OPTIONS", "CC", "PATH", "HOME", "PYTHONPATH"):
    if var in os.environ:
        config.environment[var] = os.environ[var]

# Compiling generated C against the runtime, as a user would: %cc (with $MODELC_CFLAGS) and the
# flags modelc prints for it.
config.substitutions.append(("%cc", " ".join([os.environ.get("CC", "cc")] + shlex.split(os.environ.get("MODELC_CFLAGS", "")))))
def _modelc_flags(flag):
    try:
        return subprocess.run([modelc, flag], capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "MODELC_NOT_BUILT"
config.substitutions.append(("%rtcflags", _modelc_flags("--print-cflags")))
config.substitutions.append(("%rtlibs", _modelc_flags("--print-libs")))

# "dnnl": modelc and its runtime were built with oneDNN (not make DNNL=0): the CPU's blocked
# convolution layout (compiler/layout.c) is on by default.
if "-ldnnl" in _modelc_flags("--print-libs").split():
    config.available_features.add("dnnl")

"""For every function of `modelc --list-ops` with an attribute that has no default, compile a call
that leaves it out and require `file:line:col: error: 'F' needs its attribute 'A'` (exit 1), never
an internal error. Found by make fuzz: `unsqueeze(r)` reached an internal error in the lowering.
Usage: python3 required_attrs.py MODELC TMPDIR"""
import os
import re
import subprocess
import sys

modelc, tmp = sys.argv[1], sys.argv[2]
listing = subprocess.run([modelc, "--list-ops"], capture_output=True, text=True, check=True).stdout
row = re.compile(r"^  (\w+)\s+tensors (\d+)(?:\.\.(\d+|\*))?\s+attrs (.*?)  op ")
checked, bad = 0, []
for line in listing.splitlines():
    m = row.match(line)
    if not m or m.group(4) == "-":
        continue
    name, ntensors, attrs = m.group(1), int(m.group(2)), m.group(4).split()
    required = [a.split(":")[0] for a in attrs if "=" not in a]
    if not required:
        continue
    args = ", ".join(["x"] * ntensors)
    path = os.path.join(tmp, name + ".model")
    with open(path, "w") as f:
        f.write("model m {\n  input x: f32[2, 3]\n  output y = %s(%s)\n}\n" % (name, args))
    p = subprocess.run([modelc, path, "--dump=graph"], capture_output=True, text=True)
    want = "%s:3:14: error: '%s' needs its attribute '%s'" % (path, name, required[0])
    checked += 1
    if p.returncode != 1 or want not in p.stderr:
        bad.append("%s: exit %d, stderr %r (want %r)" % (name, p.returncode, p.stderr[:300], want))
for b in bad:
    print("FAIL:", b)
print("required attributes: %d functions checked, %d wrong" % (checked, len(bad)))
sys.exit(1 if bad or checked < 5 else 0)

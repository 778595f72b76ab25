#!/usr/bin/env python3
"""tests/onnx/test_importer.py — tools/onnx2model.py on bad and odd input, and one model end to end.

Each check builds a small ONNX file with onnx.helper, runs the importer's command line on it and
checks the exit status, the message and that nothing was written (for errors). Prints one
PASS/FAIL line per check. MODELC (default build/bin/modelc) compiles the end-to-end cases.
"""
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
TOOL = os.path.join(ROOT, "tools", "onnx2model.py")
MODELC = os.environ.get("MODELC", os.path.join(ROOT, "build", "bin", "modelc"))
sys.path.insert(0, os.path.join(ROOT, "tools"))

import onnx  # noqa: E402
from onnx import TensorProto as P, helper as h, numpy_helper  # noqa: E402

import safetensors_np  # noqa: E402

FAILED = 0


def report(ok, name, why=""):
    global FAILED
    if ok:
        print("PASS: onnx2model/%s" % name)
    else:
        FAILED += 1
        print("FAIL: onnx2model/%s: %s" % (name, why))


def run_tool(args):
    p = subprocess.run([sys.executable, TOOL] + args, capture_output=True, text=True)
    return p.returncode, p.stdout, p.stderr


def model(nodes, inputs, outputs, inits=(), opset=17, name="g"):
    g = h.make_graph(nodes, name, inputs, outputs, initializer=list(inits))
    m = h.make_model(g, opset_imports=[h.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def vi(name, dt, shape):
    return h.make_tensor_value_info(name, dt, shape)


def expect_error(tmp, name, m_or_bytes, needles, extra=()):
    path = os.path.join(tmp, name + ".onnx")
    with open(path, "wb") as f:
        f.write(m_or_bytes if isinstance(m_or_bytes, bytes) else m_or_bytes.SerializeToString())
    out = os.path.join(tmp, "out_" + name)
    rc, so, se = run_tool([path, "-o", out] + list(extra))
    written = [f for f in os.listdir(tmp) if f.startswith("out_" + name) or f.startswith(".onnx2model")]
    missing = [n for n in needles if n not in se]
    if rc != 1:
        report(False, name, "exit status %d, expected 1 (stderr: %s)" % (rc, se.strip()))
    elif missing:
        report(False, name, "message lacks %s: %s" % (missing, se.strip()))
    elif not se.startswith("onnx2model: error: "):
        report(False, name, "message is not one 'onnx2model: error:' line: %s" % se.strip())
    elif written:
        report(False, name, "files written despite the error: %s" % written)
    else:
        report(True, name)


def mlp_layers(widths):
    """An ONNX model of MLP layers layers.N (MatMul by layers.N.fc.weight, Add layers.N.fc.bias,
    Relu, Add the layer's input: a residual MLP), an attention-mask-like extra input m added in
    every layer, and a head; widths[i] is layer i's hidden width. Returns (model, weights)."""
    rng = np.random.default_rng(3)
    nodes, inits, ws = [], [], {}
    x = "x"
    for i, w in enumerate(widths):
        p = "layers.%d." % i
        ws[p + "fc.weight"] = rng.standard_normal((8, w)).astype(np.float32)
        ws[p + "fc.bias"] = rng.standard_normal(w).astype(np.float32)
        ws[p + "out.weight"] = rng.standard_normal((w, 8)).astype(np.float32)
        nodes += [h.make_node("MatMul", [x, p + "fc.weight"], ["mm%d" % i], name="mm%d" % i),
                  h.make_node("Add", ["mm%d" % i, p + "fc.bias"], ["b%d" % i], name="bias%d" % i),
                  h.make_node("Relu", ["b%d" % i], ["r%d" % i], name="relu%d" % i),
                  h.make_node("MatMul", ["r%d" % i, p + "out.weight"], ["o%d" % i], name="out%d" % i),
                  h.make_node("Add", ["o%d" % i, "m"], ["om%d" % i], name="mask%d" % i),
                  h.make_node("Add", ["om%d" % i, x], ["h%d" % i], name="res%d" % i)]
        x = "h%d" % i
    ws["head.weight"] = rng.standard_normal((8, 3)).astype(np.float32)
    nodes.append(h.make_node("MatMul", [x, "head.weight"], ["y"], name="head"))
    inits = [numpy_helper.from_array(a, k) for k, a in ws.items()]
    m = model(nodes, [vi("x", P.FLOAT, [4, 8]), vi("m", P.FLOAT, [4, 8])], [vi("y", P.FLOAT, [4, 3])], inits)
    return m, ws


def mlp_reference(ws, x, mask, n):
    """NumPy: the model of mlp_layers, in float64."""
    hh = x.astype(np.float64)
    for i in range(n):
        p = "layers.%d." % i
        r = np.maximum(hh @ ws[p + "fc.weight"] + ws[p + "fc.bias"], 0)
        hh = r @ ws[p + "out.weight"] + mask + hh
    return hh @ ws["head.weight"]


def check_blocks(tmp):
    """Repeated layers become a block instantiated `as` each prefix; --no-blocks writes
    straight-line code; both compile to programs giving bit-identical outputs from the same
    .safetensors (the NumPy reference checks they are right at all)."""
    m, ws = mlp_layers([16, 16])
    path = os.path.join(tmp, "mlp2.onnx")
    onnx.save(m, path)
    rc, so, se = run_tool([path, "-o", os.path.join(tmp, "mlp_b")])
    rc2, so2, se2 = run_tool([path, "-o", os.path.join(tmp, "mlp_nb"), "--no-blocks"])
    src = open(os.path.join(tmp, "mlp_b.model")).read() if rc == 0 else ""
    src_nb = open(os.path.join(tmp, "mlp_nb.model")).read() if rc2 == 0 else ""
    blocks = [l for l in src.splitlines() if l.startswith("block ")]
    calls = [l.strip() for l in src.splitlines() if " as layers." in l]
    inner = [l.strip() for l in src.splitlines() if l.startswith("  param fc.") or l.startswith("  param out.")]
    report(rc == 0 and len(blocks) == 1 and blocks[0].startswith("block layers(x, m)") and
           calls == ["h0 = layers(x, m) as layers.0", "h1 = layers(h0, m) as layers.1"] and
           sorted(inner) == ["param fc.bias: f32[16]", "param fc.weight: f32[8, 16]", "param out.weight: f32[16, 8]"]
           and "block 2 instances" not in so and "block layers: 2 instances (layers.0, layers.1)" in so,
           "blocks_emitted", "rc %d %s; blocks %s, calls %s, params %s; stdout %s" % (rc, se.strip(), blocks, calls, inner, so))
    report(rc2 == 0 and "block" not in src_nb and "# MatMul mm0" in src_nb and "as " not in src_nb,
           "no_blocks_straight_line", "rc %d %s:\n%s" % (rc2, se2.strip(), src_nb))
    if rc == 0 and rc2 == 0:
        same = open(os.path.join(tmp, "mlp_b.safetensors"), "rb").read() == \
            open(os.path.join(tmp, "mlp_nb.safetensors"), "rb").read()
        report(same, "blocks_same_weights", "the .safetensors differ with and without blocks")
    if rc == 0 and rc2 == 0:
        run_both(tmp, "mlp", ws, 2, "blocks_bit_identical")
    # layers that differ only in their sizes (hidden widths 16 and 24) are one block taking the
    # width as an integer argument, and the program still computes the same
    m, ws = mlp_layers([16, 24])
    path = os.path.join(tmp, "mlp_mixed.onnx")
    onnx.save(m, path)
    rc, so, se = run_tool([path, "-o", os.path.join(tmp, "mixed_b")])
    rc2, so2, se2 = run_tool([path, "-o", os.path.join(tmp, "mixed_nb"), "--no-blocks"])
    src = open(os.path.join(tmp, "mixed_b.model")).read() if rc == 0 else ""
    blocks = [l for l in src.splitlines() if l.startswith("block ")]
    calls = [l.strip() for l in src.splitlines() if " as layers." in l]
    inner = sorted(l.strip() for l in src.splitlines() if l.startswith("  param fc.") or l.startswith("  param out."))
    report(rc == 0 and rc2 == 0 and blocks == ["block layers(x, m, n0) {"] and
           calls == ["h0 = layers(x, m, 16) as layers.0", "h1 = layers(h0, m, 24) as layers.1"] and
           inner == ["param fc.bias: f32[n0]", "param fc.weight: f32[8, n0]", "param out.weight: f32[n0, 8]"],
           "blocks_integer_arguments", "rc %d %s; blocks %s, calls %s, params %s" % (rc, se.strip(), blocks, calls, inner))
    if rc == 0 and rc2 == 0:
        run_both(tmp, "mixed", ws, 2, "blocks_integer_arguments_bit_identical")


def run_both(tmp, base, ws, n, name):
    """Compile BASE_b.model (blocks) and BASE_nb.model (--no-blocks), run both on one input with
    BASE_b.safetensors: bit-identical outputs, and within 1e-5 of NumPy (mlp_reference)."""
    if not os.path.exists(MODELC):
        report(False, name, "no modelc at %s" % MODELC)
        return
    rng = np.random.default_rng(4)
    x = rng.standard_normal((4, 8)).astype(np.float32)
    mask = rng.standard_normal((4, 8)).astype(np.float32)
    np.save(os.path.join(tmp, "mx.npy"), x)
    np.save(os.path.join(tmp, "mm.npy"), mask)
    ys, err = {}, ""
    for v in (base + "_b", base + "_nb"):
        exe = os.path.join(tmp, v + "_exe")
        p = subprocess.run([MODELC, os.path.join(tmp, v + ".model"), "-o", exe, "--no-cuda"],
                           capture_output=True, text=True)
        if p.returncode == 0:
            # both load the same file: the block's params keep their state_dict names
            p = subprocess.run([exe, "--weights", os.path.join(tmp, base + "_b.safetensors"),
                                "--input", "x=" + os.path.join(tmp, "mx.npy"), "--input", "m=" + os.path.join(tmp, "mm.npy"),
                                "--output", "y=" + os.path.join(tmp, v + "_y.npy"), "--device", "cpu"],
                               capture_output=True, text=True)
        if p.returncode != 0:
            err += "%s: %s " % (v, p.stderr.strip())
        else:
            ys[v] = np.load(os.path.join(tmp, v + "_y.npy"))
    if len(ys) < 2:
        report(False, name, err)
        return
    yb, ynb = ys[base + "_b"], ys[base + "_nb"]
    ref = mlp_reference(ws, x, mask, n)
    d = float(np.abs(yb - ref).max() / np.abs(ref).max())
    ident = yb.tobytes() == ynb.tobytes()
    report(ident and d <= 1e-5, name, "bit-identical %s (max |diff| %g); relative error vs NumPy %g (tolerance 1e-5)" % (
        ident, float(np.abs(yb - ynb).max()), d))
    print("      %s: blocks vs --no-blocks: bit-identical; vs NumPy: relative error %.1e (tolerance 1e-5)" % (base, d))


def size_only_mask_model(out_p=False):
    """Self-attention over x: f32[batch, seq, 4] with a causal mask computed from seq alone
    through a [seq + 1] intermediate (as transformers' packed-sequence check makes one):
    p = concat([-1], arange(seq)), rows = p[1:], mask = where(cols <= rows, 0, -1e9).
    With out_p, p itself is the output instead (a size modelc cannot express)."""
    c = lambda n, v, dt=np.int64: h.make_node("Constant", [], [n], value=numpy_helper.from_array(np.array(v, dt)))  # noqa: E731
    nodes = [h.make_node("Shape", ["x"], ["shp"], name="shape"), c("i1", 1), h.make_node("Gather", ["shp", "i1"], ["s"]),
             c("z", 0), c("one", 1), h.make_node("Range", ["z", "s", "one"], ["r"], name="range"),
             c("m1", [-1]), h.make_node("Concat", ["m1", "r"], ["p"], name="prepend", axis=0)]
    if out_p:
        return model(nodes, [vi("x", P.FLOAT, ["batch", "seq", 4])], [vi("p", P.INT64, None)])
    nodes += [c("st", [1]), c("en", [2 ** 62]), h.make_node("Slice", ["p", "st", "en"], ["rows0"], name="drop_first"),
              c("ax1", [1]), h.make_node("Unsqueeze", ["rows0", "ax1"], ["rows"]),
              c("ax0", [0]), h.make_node("Unsqueeze", ["r", "ax0"], ["cols"]),
              h.make_node("LessOrEqual", ["cols", "rows"], ["le"], name="causal"),
              c("zero", 0.0, np.float32), c("neg", -1e9, np.float32),
              h.make_node("Where", ["le", "zero", "neg"], ["mask"], name="mask"),
              h.make_node("Transpose", ["x"], ["xt"], perm=[0, 2, 1]),
              h.make_node("MatMul", ["x", "xt"], ["sc"], name="scores"),
              h.make_node("Add", ["sc", "mask"], ["scm"], name="add_mask"),
              h.make_node("Softmax", ["scm"], ["pr"], axis=-1),
              h.make_node("MatMul", ["pr", "x"], ["y"], name="attend")]
    return model(nodes, [vi("x", P.FLOAT, ["batch", "seq", 4])], [vi("y", P.FLOAT, ["batch", "seq", 4])])


def check_size_only(tmp):
    """A value computed from the sizes alone through a size modelc has no expression for
    (seq + 1) is written as the form it has at every size up to the bound (a causal mask);
    the compiled program runs at several sequence lengths and matches NumPy."""
    path = os.path.join(tmp, "causal.onnx")
    onnx.save(size_only_mask_model(), path)
    out = os.path.join(tmp, "causal")
    rc, so, se = run_tool([path, "-o", out, "--max-dim", "seq=16"])
    src = open(out + ".model").read() if rc == 0 else ""
    ok = rc == 0 and "computed from the sizes alone (checked at seq = 1..16, batch = 1, 2, 3)" in src \
        and "concat" not in src and "col - row <= 0" in src
    report(ok, "size_only_mask", "rc %d %s:\n%s" % (rc, se.strip(), src))
    # the bounds it was checked at are in the compile line, with a note not to compile above them
    report("# compile: modelc causal.model -o causal --max-dim seq=16\n# the values computed from the sizes alone "
           "were checked up to these bounds only" in src, "size_only_bound_recorded", src[:400])
    if not ok or not os.path.exists(MODELC):
        return
    exe = os.path.join(tmp, "causal_exe")
    p = subprocess.run([MODELC, out + ".model", "-o", exe, "--no-cuda", "--max-dim", "seq=16"],
                       capture_output=True, text=True)
    if p.returncode != 0:
        report(False, "size_only_mask_run", p.stderr.strip())
        return
    worst, err = 0.0, ""
    for b, n in ((2, 5), (1, 16), (3, 1)):     # one executable, three sequence lengths
        x = np.random.default_rng(n).standard_normal((b, n, 4)).astype(np.float32)
        np.save(os.path.join(tmp, "cx.npy"), x)
        p = subprocess.run([exe, "--weights", out + ".safetensors", "--input", "x=" + os.path.join(tmp, "cx.npy"),
                            "--output", "y=" + os.path.join(tmp, "cy.npy"), "--device", "cpu"],
                           capture_output=True, text=True)
        if p.returncode != 0:
            err += "[%d, %d]: %s " % (b, n, p.stderr.strip())
            continue
        x64 = x.astype(np.float64)
        sc = x64 @ x64.transpose(0, 2, 1) + np.where(np.tril(np.ones((n, n))) > 0, 0.0, -1e9)
        pr = np.exp(sc - sc.max(-1, keepdims=True))
        ref = (pr / pr.sum(-1, keepdims=True)) @ x64
        d = float(np.abs(np.load(os.path.join(tmp, "cy.npy")) - ref).max() / np.abs(ref).max())
        worst = max(worst, d)
    report(not err and worst <= 1e-5, "size_only_mask_run",
           "%s relative error vs NumPy %g (tolerance 1e-5)" % (err, worst))
    print("      size-only mask at seq 5, 16, 1: relative error vs NumPy %.1e (tolerance 1e-5)" % worst)
    # the [seq + 1] value itself as the output: an error naming the step and the size
    expect_error(tmp, "size_only_unwritable", size_only_mask_model(out_p=True),
                 ["Concat 'prepend'", "depends only on the sizes", "not one symbolic size"], ["--max-dim", "seq=16"])


def check_outputs(tmp, relu):
    """-o that cannot be written is an error before anything is written; files get the umask's mode."""
    os.mkdir(os.path.join(tmp, "isdir.model"))
    path = os.path.join(tmp, "relu.onnx")
    onnx.save(relu, path)
    for name, out, needles in (("output_is_directory", os.path.join(tmp, "isdir"), ["isdir.model is a directory"]),
                               ("output_unwritable", "/proc/foo", ["cannot write in /proc"]),
                               ("output_empty_base", os.path.join(tmp, "sub") + os.sep, ["base name"])):
        before = sorted(os.listdir(tmp))
        rc, so, se = run_tool([path, "-o", out])
        ok = rc == 1 and se.startswith("onnx2model: error: ") and all(n in se for n in needles) \
            and sorted(os.listdir(tmp)) == before
        report(ok, name, "rc %d: %s" % (rc, se.strip()))
    os.rmdir(os.path.join(tmp, "isdir.model"))
    expect_error(tmp, "max_batch_zero", relu, ["--max-batch 0", "at least 1"], ["--max-batch", "0"])
    um = os.umask(0o022)
    os.umask(um)
    out = os.path.join(tmp, "modes")
    rc, so, se = run_tool([path, "-o", out])
    modes = [os.stat(out + e).st_mode & 0o777 for e in (".model", ".safetensors")] if rc == 0 else []
    report(modes == [0o666 & ~um] * 2, "file_modes", "rc %d, modes %s, umask %o" % (rc, [oct(m) for m in modes], um))


def check_zero_conv_bias(tmp):
    """A zero conv bias an exporter made up (not named ...bias, as torch.onnx.export's val_6 for
    bias=False convs) is left out, so the weights are the state_dict's; a named one is kept."""
    w = numpy_helper.from_array(np.ones((2, 1, 1, 1), np.float32), "conv.weight")
    z = numpy_helper.from_array(np.zeros(2, np.float32), "val_6")
    zb = numpy_helper.from_array(np.zeros(2, np.float32), "conv2.bias")
    m = model([h.make_node("Conv", ["x", "conv.weight", "val_6"], ["y1"], name="c1"),
               h.make_node("Conv", ["y1", "conv.weight", "conv2.bias"], ["y"], name="c2", group=2)],
              [vi("x", P.FLOAT, [1, 1, 3, 3])], [vi("y", P.FLOAT, [1, 2, 3, 3])], inits=[w, z, zb])
    m.graph.node[1].input[1] = "conv2.weight"
    m.graph.initializer.append(numpy_helper.from_array(np.ones((2, 1, 1, 1), np.float32), "conv2.weight"))
    path = os.path.join(tmp, "zbias.onnx")
    onnx.save(m, path)
    rc, so, se = run_tool([path, "-o", os.path.join(tmp, "zbias")])
    wts = sorted(safetensors_np.read(os.path.join(tmp, "zbias.safetensors"))) if rc == 0 else None
    report(wts == ["conv.weight", "conv2.bias", "conv2.weight"], "zero_conv_bias_dropped",
           "rc %d, weights %s: %s" % (rc, wts, se.strip()))


def main():
    tmp = tempfile.mkdtemp(prefix="onnx2model-test.")
    try:
        relu = model([h.make_node("Relu", ["x"], ["y"], name="r0")], [vi("x", P.FLOAT, [2, 3])], [vi("y", P.FLOAT, [2, 3])])
        blob = relu.SerializeToString()

        expect_error(tmp, "truncated", blob[:len(blob) // 2], ["not a valid ONNX file", "truncated"])
        expect_error(tmp, "corrupt", b"\xff\xfe garbage \x00\x01" * 5, ["not a valid ONNX file"])
        expect_error(tmp, "empty", b"", ["holds no graph"])
        old = model([h.make_node("Relu", ["x"], ["y"])], [vi("x", P.FLOAT, [2])], [vi("y", P.FLOAT, [2])], opset=6)
        expect_error(tmp, "old_opset", old, ["opset 6 is older", "(7)"])

        # external data that is missing
        w = numpy_helper.from_array(np.ones((4, 4), np.float32), "fc.weight")
        ext = model([h.make_node("MatMul", ["x", "fc.weight"], ["y"])], [vi("x", P.FLOAT, [2, 4])],
                    [vi("y", P.FLOAT, [2, 4])], inits=[w])
        onnx.external_data_helper.convert_model_to_external_data(ext, location="weights.bin", size_threshold=0)
        expect_error(tmp, "missing_external_data", ext, ["fc.weight", "weights.bin", "missing"])

        cyc = model([h.make_node("Relu", ["x2"], ["x1"], name="a"), h.make_node("Add", ["x1", "x"], ["x2"], name="b")],
                    [vi("x", P.FLOAT, [2])], [vi("x2", P.FLOAT, [2])])
        expect_error(tmp, "cycle", cyc, ["cycle", "Relu 'a'", "Add 'b'"])

        unused = model([h.make_node("Relu", ["x"], ["y"])], [vi("x", P.FLOAT, [2]), vi("z", P.FLOAT, [2])],
                       [vi("y", P.FLOAT, [2])])
        expect_error(tmp, "unused_input", unused, ["input 'z' is not used", "--keep-unused-inputs"])

        uns = model([h.make_node("Det", ["x"], ["y"], name="hm")], [vi("x", P.FLOAT, [2, 3])], [vi("y", P.FLOAT, [2, 3])])
        expect_error(tmp, "unsupported_op", uns, ["Det", "'hm'", "not supported"])
        f64 = model([h.make_node("Relu", ["x"], ["y"], name="r64")], [vi("x", P.DOUBLE, [2])], [vi("y", P.DOUBLE, [2])])
        expect_error(tmp, "unsupported_dtype", f64, ["'x'", "DOUBLE"])
        attr = model([h.make_node("Conv", ["x", "w"], ["y"], name="c3", auto_pad="FOO")],
                     [vi("x", P.FLOAT, [1, 1, 4, 4]), vi("w", P.FLOAT, [1, 1, 3, 3])], [vi("y", P.FLOAT, None)])
        expect_error(tmp, "unsupported_attribute", attr, ["Conv", "'c3'", "auto_pad FOO"])
        dyn = model([h.make_node("Relu", ["x"], ["y"])], [vi("x", P.FLOAT, ["batch", "seq"])], [vi("y", P.FLOAT, None)])
        expect_error(tmp, "missing_bound", dyn, ["'seq' needs a bound", "--max-dim seq=N"])
        runtime_shape = model([h.make_node("Reshape", ["x", "s"], ["y"], name="rs")],
                              [vi("x", P.FLOAT, [2, 3]), vi("s", P.INT64, [2])], [vi("y", P.FLOAT, None)])
        expect_error(tmp, "runtime_shape", runtime_shape, ["Reshape", "'rs'", "computed at run time"])

        # unused input kept with --keep-unused-inputs (a warning)
        path = os.path.join(tmp, "unused_kept.onnx")
        onnx.save(unused, path)
        rc, so, se = run_tool([path, "-o", os.path.join(tmp, "kept")] + ["--keep-unused-inputs"])
        src = open(os.path.join(tmp, "kept.model")).read() if rc == 0 else ""
        report(rc == 0 and "warning: input 'z'" in se and "input z: f32[2]" in src, "unused_input_kept",
               "rc %d, stderr %s" % (rc, se.strip()))

        # sanitized names: printed mapping, a model that compiles and runs, weights under the new names
        wt = numpy_helper.from_array(np.arange(6, dtype=np.float32).reshape(2, 3), "onnx::MatMul_7")
        bias = numpy_helper.from_array(np.array([0.5, -1.0], np.float32), "layer.0/bias")
        names = model([h.make_node("Gemm", ["in put", "onnx::MatMul_7", "layer.0/bias"], ["out:0"], name="g0", transB=1),
                       h.make_node("Relu", ["out:0"], ["relu"], name="r")],
                      [vi("in put", P.FLOAT, ["N", 3])], [vi("relu", P.FLOAT, ["N", 2])], inits=[wt, bias])
        path = os.path.join(tmp, "names.onnx")
        onnx.save(names, path)
        out = os.path.join(tmp, "names")
        rc, so, se = run_tool([path, "-o", out])
        ok = rc == 0 and "input in put -> in_put" in so and "param onnx::MatMul_7 -> onnx__MatMul_7" in so \
            and "output relu" not in so
        report(ok, "sanitized_names", "rc %d: %s %s" % (rc, so, se))
        if ok and os.path.exists(MODELC):
            exe = os.path.join(tmp, "names_exe")
            p = subprocess.run([MODELC, out + ".model", "-o", exe, "--no-cuda", "-O0"], capture_output=True, text=True)
            x = np.array([[1, 2, 3], [-1, 0, 4]], np.float32)
            np.save(os.path.join(tmp, "x.npy"), x)
            if p.returncode == 0:
                p = subprocess.run([exe, "--weights", out + ".safetensors", "--input", "in_put=" + os.path.join(tmp, "x.npy"),
                                    "--output", "relu=" + os.path.join(tmp, "y.npy"), "--device", "cpu"],
                                   capture_output=True, text=True)
            if p.returncode != 0:
                report(False, "sanitized_names_run", p.stderr.strip())
            else:
                y = np.load(os.path.join(tmp, "y.npy"))
                ref = np.maximum(x @ np.arange(6, dtype=np.float32).reshape(2, 3).T + [0.5, -1.0], 0)
                d = float(np.abs(y - ref).max())
                report(d < 1e-5, "sanitized_names_run", "maxdiff %g > 1e-5" % d)
                wts = safetensors_np.read(out + ".safetensors")
                report(sorted(wts) == ["layer.0_bias", "onnx__MatMul_7"],
                       "weights_names", "weights %s" % sorted(wts))

        # a shape subgraph folded at import time: Shape -> Gather -> Unsqueeze -> Concat -> Reshape
        c = lambda n, v: h.make_node("Constant", [], [n], value=numpy_helper.from_array(np.array(v, np.int64)))  # noqa: E731
        fold = model([h.make_node("Shape", ["x"], ["s"]), c("i0", 0), h.make_node("Gather", ["s", "i0"], ["b"]),
                      c("ax", [0]), h.make_node("Unsqueeze", ["b", "ax"], ["b1"]), c("m1", [-1]),
                      h.make_node("Concat", ["b1", "m1"], ["shp"], axis=0), h.make_node("Reshape", ["x", "shp"], ["y"])],
                     [vi("x", P.FLOAT, ["batch", 3, 4])], [vi("y", P.FLOAT, ["batch", 12])])
        path = os.path.join(tmp, "fold.onnx")
        onnx.save(fold, path)
        rc, so, se = run_tool([path, "-o", os.path.join(tmp, "fold")])
        src = open(os.path.join(tmp, "fold.model")).read() if rc == 0 else ""
        body = [l for l in src.splitlines() if "=" in l and not l.strip().startswith("#")]
        report(rc == 0 and "reshape(x, [batch, 12])" in src and len(body) == 2, "shape_subgraph_folded",
               "rc %d %s; body: %s" % (rc, se.strip(), body))

        # --widen-ints: uint8 carried in i32, wrapping as uint8 does (200 + 100 = 44)
        u8 = model([h.make_node("Add", ["a", "b"], ["c"], name="add8")], [vi("a", P.UINT8, [3]), vi("b", P.UINT8, [3])],
                   [vi("c", P.UINT8, [3])])
        expect_error(tmp, "uint8_refused", u8, ["UINT8", "--widen-ints"])
        path = os.path.join(tmp, "u8.onnx")
        onnx.save(u8, path)
        out = os.path.join(tmp, "u8")
        rc, so, se = run_tool([path, "-o", out, "--widen-ints"])
        if rc != 0 or not os.path.exists(MODELC):
            report(False, "widen_ints", "rc %d: %s" % (rc, se.strip()))
        else:
            exe = os.path.join(tmp, "u8_exe")
            p = subprocess.run([MODELC, out + ".model", "-o", exe, "--no-cuda", "-O0"], capture_output=True, text=True)
            np.save(os.path.join(tmp, "a.npy"), np.array([200, 1, 255], np.int32))
            np.save(os.path.join(tmp, "b.npy"), np.array([100, 2, 255], np.int32))
            if p.returncode == 0:
                p = subprocess.run([exe, "--weights", out + ".safetensors", "--input", "a=" + os.path.join(tmp, "a.npy"),
                                    "--input", "b=" + os.path.join(tmp, "b.npy"), "--output", "c=" + os.path.join(tmp, "c.npy"),
                                    "--device", "cpu"], capture_output=True, text=True)
            got = np.load(os.path.join(tmp, "c.npy")).tolist() if p.returncode == 0 else None
            report(got == [44, 3, 254], "widen_ints", "got %s, expected [44, 3, 254] (%s)" % (got, p.stderr.strip()))

        # --widen-ints carries float8 in f32 for a Cast only: any other op on it is refused
        f8 = model([h.make_node("Relu", ["a"], ["c"], name="relu8")], [vi("a", P.FLOAT8E4M3FN, [3])],
                   [vi("c", P.FLOAT8E4M3FN, [3])])
        expect_error(tmp, "float8_arith_refused", f8, ["Relu", "relu8", "float8_e4m3fn", "only a Cast"], ["--widen-ints"])
        # a Cast of floats to int4 is refused (ONNX leaves out-of-range values undefined)
        c4 = model([h.make_node("Cast", ["a"], ["c"], name="cast4", to=P.INT4)], [vi("a", P.FLOAT, [4])],
                   [vi("c", P.INT4, [4])])
        expect_error(tmp, "cast_float_to_int4_refused", c4, ["Cast", "cast4", "INT4", "undefined"], ["--widen-ints"])
        # an empty input may only give a dtype (CastLike's like); read as data it is an error
        el = model([h.make_node("Add", ["a", "e"], ["c"], name="adde")], [vi("a", P.FLOAT, [1]), vi("e", P.FLOAT, [0])],
                   [vi("c", P.FLOAT, [0])])
        expect_error(tmp, "empty_input_refused", el, ["'e'", "size 0", "no empty tensors"])
        # a Resize modelc's interpolate lacks becomes a linear map, unless it is too large
        rz = model([h.make_node("Resize", ["x", "", "sc"], ["y"], name="cubic", mode="cubic")],
                   [vi("x", P.FLOAT, [1, 1, 100, 100])], [vi("y", P.FLOAT, [1, 1, 200, 200])],
                   [numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "sc")])
        expect_error(tmp, "resize_linear_map_too_large", rz, ["Resize", "cubic", "mode cubic", "too many for a linear map"])

        # a nearest Resize interpolate lacks (half_pixel, round_prefer_ceil) is a selection map,
        # lowered as a gather: compared with onnx.reference on distinct finite values, then with
        # one of them made infinite, which must appear exactly where that value was picked (a
        # matmul would make every output NaN; onnx.reference itself gives NaN next to it)
        rn = model([h.make_node("Resize", ["x", "", "sc"], ["y"], name="near", mode="nearest",
                                coordinate_transformation_mode="half_pixel", nearest_mode="round_prefer_ceil")],
                   [vi("x", P.FLOAT, [1, 1, 3, 3])], [vi("y", P.FLOAT, [1, 1, 5, 4])],
                   [numpy_helper.from_array(np.array([1, 1, 5 / 3, 4 / 3], np.float32), "sc")], opset=19)
        xs = np.arange(9, dtype=np.float32).reshape(1, 1, 3, 3) + 0.5
        from onnx.reference import ReferenceEvaluator
        want = ReferenceEvaluator(rn).run(None, {"x": xs})[0]
        want = np.where(want == xs[0, 0, 1, 1], np.float32(np.inf), want)
        xs[0, 0, 1, 1] = np.inf
        path = os.path.join(tmp, "near.onnx")
        onnx.save(rn, path)
        out = os.path.join(tmp, "near")
        rc, so, se = run_tool([path, "-o", out])
        src = open(out + ".model").read() if rc == 0 else ""
        if rc != 0 or "index_select" not in src or not os.path.exists(MODELC):
            report(False, "resize_selection_gather", "rc %d: %s; %s" % (rc, se.strip(), src[-300:]))
        else:
            exe = os.path.join(tmp, "near_exe")
            p = subprocess.run([MODELC, out + ".model", "-o", exe, "--no-cuda", "-O0"], capture_output=True, text=True)
            np.save(os.path.join(tmp, "x.npy"), xs)
            if p.returncode == 0:
                p = subprocess.run([exe, "--weights", out + ".safetensors", "--input", "x=" + os.path.join(tmp, "x.npy"),
                                    "--output", "y=" + os.path.join(tmp, "y.npy"), "--device", "cpu"],
                                   capture_output=True, text=True)
            got = np.load(os.path.join(tmp, "y.npy")) if p.returncode == 0 else None
            report(got is not None and np.array_equal(got, want) and np.isinf(want).sum() > 0, "resize_selection_gather",
                   "got %s, expected %s (%s)" % (None if got is None else got.tolist(), want.tolist(), p.stderr.strip()))

        # BitShift of uint8 by counts at and past the width gives 0, as onnx.reference does
        bs = model([h.make_node("BitShift", ["a", "b"], ["c"], name="shl", direction="LEFT")],
                   [vi("a", P.UINT8, [4]), vi("b", P.UINT8, [4])], [vi("c", P.UINT8, [4])])
        av, bv = np.array([1, 3, 255, 7], np.uint8), np.array([1, 7, 8, 200], np.uint8)
        want = ReferenceEvaluator(bs).run(None, {"a": av, "b": bv})[0].astype(np.int32).tolist()
        path = os.path.join(tmp, "bs.onnx")
        onnx.save(bs, path)
        out = os.path.join(tmp, "bs")
        rc, so, se = run_tool([path, "-o", out, "--widen-ints"])
        got, err = None, se.strip()
        if rc == 0 and os.path.exists(MODELC):
            exe = os.path.join(tmp, "bs_exe")
            p = subprocess.run([MODELC, out + ".model", "-o", exe, "--no-cuda", "-O0"], capture_output=True, text=True)
            np.save(os.path.join(tmp, "a.npy"), av.astype(np.int32))
            np.save(os.path.join(tmp, "b.npy"), bv.astype(np.int32))
            if p.returncode == 0:
                p = subprocess.run([exe, "--weights", out + ".safetensors", "--input", "a=" + os.path.join(tmp, "a.npy"),
                                    "--input", "b=" + os.path.join(tmp, "b.npy"), "--output", "c=" + os.path.join(tmp, "c.npy"),
                                    "--device", "cpu"], capture_output=True, text=True)
            err = p.stderr.strip()
            got = np.load(os.path.join(tmp, "c.npy")).tolist() if p.returncode == 0 else None
        report(got == want and want == [2, 128, 0, 0], "bitshift_out_of_width", "got %s, expected %s (%s)" % (got, want, err))

        check_blocks(tmp)
        check_size_only(tmp)
        check_outputs(tmp, relu)
        check_zero_conv_bias(tmp)

        rc, so, se = run_tool(["--help"])
        report(rc == 0 and "--max-dim" in so and "OUT.model" in so, "help", so[:200])
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 1 if FAILED else 0


if __name__ == "__main__":
    sys.exit(main())

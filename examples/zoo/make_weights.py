#!/usr/bin/env python3
"""Write the zoo models' random weights with NumPy only (seeded, reproducible).

    python3 make_weights.py OUTDIR [NAME...]     # default: every model in MODELS

Writes OUTDIR/NAME.safetensors for each model: every tensor of models.py's module's
state_dict (so of NAME.model's params) under its PyTorch name. BatchNorm's num_batches_tracked
is left out (a training counter inference does not read; modelc's loader rejects tensors the
model does not declare), and so are non-persistent buffers (BERT's position_ids, LLaMA's
inv_freq), which the graphs compute.

Each model's spec below lists (name, shape, kind) in the module's order, written from the
architecture without torch; reference.py loads the same arrays with load_state_dict(strict=True),
which fails if a name or a shape differs from the PyTorch module's. Values come from
np.random.default_rng(seed) per model: conv and linear weights N(0, 1/fan_in) (He-normal
scaled down so activations stay O(1)), biases N(0, 0.1^2), norm weights U(0.5, 1.5), norm
biases N(0, 0.1^2), running_mean N(0, 0.1^2), running_var U(0.5, 1.5), embeddings and
position/class tokens N(0, 0.5^2). make_inputs() makes the test inputs (reference.py saves
them as NAME_input_*.npy next to this script, which the test reads).
"""
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tools"))
import safetensors_np  # noqa: E402  (tools/safetensors_np.py)

MODELS = ["mobilenetv2", "efficientnet", "vit", "bert", "unet", "llama", "convnext", "swin", "gpt2",
          "distilbert", "whisper", "densenet", "squeezenet"]


def make_divisible(v, divisor=8):
    new_v = max(divisor, int(v + divisor / 2) // divisor * divisor)
    return new_v + divisor if new_v < 0.9 * v else new_v


class Spec:
    """An ordered list of (name, shape, kind) with helpers for the layers the models use."""

    def __init__(self):
        self.items = []

    def add(self, name, shape, kind):
        self.items.append((name, tuple(shape), kind))

    def conv(self, p, cout, cin_per_group, k, bias=False):
        self.add(p + ".weight", (cout, cin_per_group, k, k), "weight")
        if bias:
            self.add(p + ".bias", (cout,), "bias")

    def bn(self, p, c):
        self.add(p + ".weight", (c,), "norm_weight")
        self.add(p + ".bias", (c,), "bias")
        self.add(p + ".running_mean", (c,), "bias")
        self.add(p + ".running_var", (c,), "running_var")

    def linear(self, p, out, inp, bias=True):
        self.add(p + ".weight", (out, inp), "weight")
        if bias:
            self.add(p + ".bias", (out,), "bias")

    def ln(self, p, c):
        self.add(p + ".weight", (c,), "norm_weight")
        self.add(p + ".bias", (c,), "bias")


def spec_mobilenetv2():
    s = Spec()
    setting = [[1, 16, 1, 1], [6, 24, 2, 2], [6, 32, 2, 2]]  # models.MOBILENETV2_SETTING
    cin, i = 32, 0
    s.conv("features.0.0", cin, 3, 3); s.bn("features.0.1", cin)
    for t, c, n, _ in setting:
        for _ in range(n):
            i += 1
            p, hid = f"features.{i}.conv", cin * t
            j = 0
            if t != 1:
                s.conv(f"{p}.0.0", hid, cin, 1); s.bn(f"{p}.0.1", hid); j = 1
            s.conv(f"{p}.{j}.0", hid, 1, 3); s.bn(f"{p}.{j}.1", hid)
            s.conv(f"{p}.{j + 1}", c, hid, 1); s.bn(f"{p}.{j + 2}", c)
            cin = c
    i += 1
    s.conv(f"features.{i}.0", 64, cin, 1); s.bn(f"features.{i}.1", 64)
    s.linear("classifier.1", 10, 64)
    return s


def spec_efficientnet():
    s = Spec()
    setting = [(1, 3, 1, 16, 8, 1), (6, 3, 2, 8, 16, 2), (6, 5, 2, 16, 24, 1)]
    s.conv("features.0.0", 16, 3, 3); s.bn("features.0.1", 16)
    for si, (t, k, _, cin0, cout, n) in enumerate(setting, start=1):
        for li in range(n):
            cin = cin0 if li == 0 else cout
            p, exp, j = f"features.{si}.{li}.block", make_divisible(cin * t), 0
            if exp != cin:
                s.conv(f"{p}.0.0", exp, cin, 1); s.bn(f"{p}.0.1", exp); j = 1
            s.conv(f"{p}.{j}.0", exp, 1, k); s.bn(f"{p}.{j}.1", exp)
            sq = max(1, cin // 4)
            s.conv(f"{p}.{j + 1}.fc1", sq, exp, 1, bias=True)
            s.conv(f"{p}.{j + 1}.fc2", exp, sq, 1, bias=True)
            s.conv(f"{p}.{j + 2}.0", cout, exp, 1); s.bn(f"{p}.{j + 2}.1", cout)
    last = len(setting) + 1
    s.conv(f"features.{last}.0", 96, 24, 1); s.bn(f"features.{last}.1", 96)
    s.linear("classifier.1", 10, 96)
    return s


def spec_vit():
    s = Spec()
    D, M, L, P, seq = 32, 64, 2, 8, 17
    s.add("class_token", (1, 1, D), "embedding")
    s.conv("conv_proj", D, 3, P, bias=True)
    s.add("encoder.pos_embedding", (1, seq, D), "embedding")
    for i in range(L):
        p = f"encoder.layers.encoder_layer_{i}"
        s.ln(p + ".ln_1", D)
        s.add(p + ".self_attention.in_proj_weight", (3 * D, D), "weight")
        s.add(p + ".self_attention.in_proj_bias", (3 * D,), "bias")
        s.linear(p + ".self_attention.out_proj", D, D)
        s.ln(p + ".ln_2", D)
        s.linear(p + ".mlp.0", M, D)
        s.linear(p + ".mlp.3", D, M)
    s.ln("encoder.ln", D)
    s.linear("heads.head", 10, D)
    return s


def spec_bert():
    s = Spec()
    V, P, Tt, D, L, I = 100, 32, 2, 32, 2, 64
    s.add("embeddings.word_embeddings.weight", (V, D), "embedding")
    s.add("embeddings.position_embeddings.weight", (P, D), "embedding")
    s.add("embeddings.token_type_embeddings.weight", (Tt, D), "embedding")
    s.ln("embeddings.LayerNorm", D)
    for i in range(L):
        p = f"encoder.layer.{i}"
        s.linear(p + ".attention.self.query", D, D)
        s.linear(p + ".attention.self.key", D, D)
        s.linear(p + ".attention.self.value", D, D)
        s.linear(p + ".attention.output.dense", D, D)
        s.ln(p + ".attention.output.LayerNorm", D)
        s.linear(p + ".intermediate.dense", I, D)
        s.linear(p + ".output.dense", D, I)
        s.ln(p + ".output.LayerNorm", D)
    s.linear("pooler.dense", D, D)
    return s


def spec_unet():
    s = Spec()

    def double_conv(p, cin, cout, mid=None):
        mid = mid or cout
        s.conv(p + ".double_conv.0", mid, cin, 3); s.bn(p + ".double_conv.1", mid)
        s.conv(p + ".double_conv.3", cout, mid, 3); s.bn(p + ".double_conv.4", cout)

    double_conv("inc", 3, 8)
    double_conv("down1.maxpool_conv.1", 8, 16)
    double_conv("down2.maxpool_conv.1", 16, 16)
    double_conv("up1.conv", 32, 16, 16)                 # bilinear: no params in up1.up
    s.add("up2.up.weight", (16, 8, 2, 2), "weight")     # ConvTranspose2d(16, 8, 2, stride=2)
    s.add("up2.up.bias", (8,), "bias")
    double_conv("up2.conv", 16, 8)
    s.conv("outc.conv", 2, 8, 1, bias=True)
    return s


def spec_llama():
    s = Spec()
    D, H, KV, HD, I = 64, 4, 2, 16, 128
    s.linear("self_attn.q_proj", H * HD, D, bias=False)
    s.linear("self_attn.k_proj", KV * HD, D, bias=False)
    s.linear("self_attn.v_proj", KV * HD, D, bias=False)
    s.linear("self_attn.o_proj", D, H * HD, bias=False)
    s.linear("mlp.gate_proj", I, D, bias=False)
    s.linear("mlp.up_proj", I, D, bias=False)
    s.linear("mlp.down_proj", D, I, bias=False)
    s.add("input_layernorm.weight", (D,), "norm_weight")
    s.add("post_attention_layernorm.weight", (D,), "norm_weight")
    return s


def spec_convnext():
    s = Spec()
    s.conv("features.0.0", 16, 3, 4, bias=True); s.ln("features.0.1", 16)
    for si, c in ((1, 16), (3, 32)):
        for b in range(2):
            p = f"features.{si}.{b}"
            s.add(p + ".layer_scale", (c, 1, 1), "norm_weight")
            s.conv(p + ".block.0", c, 1, 7, bias=True)
            s.ln(p + ".block.2", c)
            s.linear(p + ".block.3", 4 * c, c)
            s.linear(p + ".block.5", c, 4 * c)
        if si == 1:
            s.ln("features.2.0", 16); s.conv("features.2.1", 32, 16, 2, bias=True)
    s.ln("classifier.0", 32)
    s.linear("classifier.2", 10, 32)
    return s


def spec_swin():
    s = Spec()
    C, heads, ws = 32, 4, 4
    for i in range(2):
        b = f"layers.{i}"
        s.ln(f"{b}.norm1", C)
        s.add(f"{b}.attn.relative_position_bias_table", ((2 * ws - 1) ** 2, heads), "embedding")
        # relative_position_index (an int64 buffer) is a tensor() constant in swin.model
        s.linear(f"{b}.attn.qkv", 3 * C, C)
        s.linear(f"{b}.attn.proj", C, C)
        s.ln(f"{b}.norm2", C)
        s.linear(f"{b}.mlp.0", 4 * C, C)
        s.linear(f"{b}.mlp.3", C, 4 * C)
    return s


def spec_gpt2():
    s = Spec()
    V, P, D = 100, 32, 32
    s.add("transformer.wte.weight", (V, D), "embedding")      # lm_head.weight is the same tensor
    s.add("transformer.wpe.weight", (P, D), "embedding")
    for i in range(2):
        p = f"transformer.h.{i}"
        s.ln(p + ".ln_1", D)
        s.add(p + ".attn.c_attn.weight", (D, 3 * D), "weight_t")   # Conv1D: [in, out]
        s.add(p + ".attn.c_attn.bias", (3 * D,), "bias")
        s.add(p + ".attn.c_proj.weight", (D, D), "weight_t")
        s.add(p + ".attn.c_proj.bias", (D,), "bias")
        s.ln(p + ".ln_2", D)
        s.add(p + ".mlp.c_fc.weight", (D, 4 * D), "weight_t")
        s.add(p + ".mlp.c_fc.bias", (4 * D,), "bias")
        s.add(p + ".mlp.c_proj.weight", (4 * D, D), "weight_t")
        s.add(p + ".mlp.c_proj.bias", (D,), "bias")
    s.ln("transformer.ln_f", D)
    return s


def spec_distilbert():
    s = Spec()
    V, P, D, I = 100, 32, 32, 64
    s.add("embeddings.word_embeddings.weight", (V, D), "embedding")
    s.add("embeddings.position_embeddings.weight", (P, D), "embedding")
    s.ln("embeddings.LayerNorm", D)
    for i in range(2):
        p = f"transformer.layer.{i}"
        for n in ("q_lin", "k_lin", "v_lin", "out_lin"):
            s.linear(f"{p}.attention.{n}", D, D)
        s.ln(p + ".sa_layer_norm", D)
        s.linear(p + ".ffn.lin1", I, D)
        s.linear(p + ".ffn.lin2", D, I)
        s.ln(p + ".output_layer_norm", D)
    return s


def spec_whisper():
    s = Spec()
    M, D, F, P = 16, 32, 64, 16
    s.add("conv1.weight", (D, M, 3), "weight"); s.add("conv1.bias", (D,), "bias")
    s.add("conv2.weight", (D, D, 3), "weight"); s.add("conv2.bias", (D,), "bias")
    s.add("embed_positions.weight", (P, D), "sinusoids")
    for i in range(2):
        p = f"layers.{i}"
        s.linear(p + ".self_attn.k_proj", D, D, bias=False)
        s.linear(p + ".self_attn.v_proj", D, D)
        s.linear(p + ".self_attn.q_proj", D, D)
        s.linear(p + ".self_attn.out_proj", D, D)
        s.ln(p + ".self_attn_layer_norm", D)
        s.linear(p + ".fc1", F, D)
        s.linear(p + ".fc2", D, F)
        s.ln(p + ".final_layer_norm", D)
    s.ln("layer_norm", D)
    return s


def spec_densenet():
    s = Spec()
    growth, bn_size, c = 8, 2, 16
    s.conv("features.conv0", c, 3, 7); s.bn("features.norm0", c)
    for b in (1, 2):
        for l in range(1, 4):
            p = f"features.denseblock{b}.denselayer{l}"
            s.bn(p + ".norm1", c); s.conv(p + ".conv1", bn_size * growth, c, 1)
            s.bn(p + ".norm2", bn_size * growth); s.conv(p + ".conv2", growth, bn_size * growth, 3)
            c += growth
        if b == 1:
            s.bn("features.transition1.norm", c); s.conv("features.transition1.conv", c // 2, c, 1)
            c //= 2
    s.bn("features.norm5", c)
    s.linear("classifier", 10, c)
    return s


def spec_squeezenet():
    s = Spec()
    s.conv("features.0", 16, 3, 3, bias=True)
    for i, (cin, sq, e) in ((3, (16, 4, 8)), (4, (16, 4, 8)), (6, (16, 8, 16))):
        s.conv(f"features.{i}.squeeze", sq, cin, 1, bias=True)
        s.conv(f"features.{i}.expand1x1", e, sq, 1, bias=True)
        s.conv(f"features.{i}.expand3x3", e, sq, 3, bias=True)
    s.conv("classifier.1", 10, 32, 1, bias=True)
    return s


def sinusoids(length, channels, max_timescale=10000):
    """Whisper's sinusoids(): [length, channels], sin then cos."""
    log_timescale_increment = np.log(max_timescale) / (channels // 2 - 1)
    inv_timescales = np.exp(-log_timescale_increment * np.arange(channels // 2))
    scaled_time = np.arange(length)[:, None] * inv_timescales[None, :]
    return np.concatenate([np.sin(scaled_time), np.cos(scaled_time)], axis=1)


SPECS = {"mobilenetv2": spec_mobilenetv2, "efficientnet": spec_efficientnet, "vit": spec_vit,
         "bert": spec_bert, "unet": spec_unet, "llama": spec_llama, "convnext": spec_convnext,
         "swin": spec_swin, "gpt2": spec_gpt2, "distilbert": spec_distilbert,
         "whisper": spec_whisper, "densenet": spec_densenet, "squeezenet": spec_squeezenet}


def make_weights(name):
    """The state_dict (name -> float32 array) of NAME.model, in the module's order."""
    rng = np.random.default_rng(MODELS.index(name) + 10)
    w = {}
    for key, shape, kind in SPECS[name]().items:
        if kind == "weight":
            fan_in = int(np.prod(shape[1:]))
            if key == "up2.up.weight":           # ConvTranspose2d: [in, out, kh, kw]
                fan_in = shape[0] * shape[2] * shape[3] // 4
            a = rng.standard_normal(shape) * np.sqrt(1.0 / fan_in)
        elif kind == "weight_t":                 # GPT-2's Conv1D: [in, out]
            a = rng.standard_normal(shape) * np.sqrt(1.0 / shape[0])
        elif kind == "sinusoids":                # Whisper's embed_positions
            a = sinusoids(*shape)
        elif kind == "bias":
            a = rng.standard_normal(shape) * 0.1
        elif kind == "norm_weight":
            a = rng.uniform(0.5, 1.5, shape)
        elif kind == "running_var":
            a = rng.uniform(0.5, 1.5, shape)
        elif kind == "embedding":
            a = rng.standard_normal(shape) * 0.5
        else:
            raise ValueError(kind)
        w[key] = a.astype(np.float32)
    return w


def make_inputs(name):
    """{input name: array} for NAME.model's test run (reference.py commits them)."""
    rng = np.random.default_rng((MODELS + ["distilbert11"]).index(name) + 100)
    if name in ("mobilenetv2", "efficientnet", "vit"):
        return {"x": rng.standard_normal((2, 3, 32, 32), dtype=np.float32)}
    if name == "unet":
        return {"x": rng.standard_normal((2, 3, 18, 18), dtype=np.float32)}
    if name == "bert":
        ids = rng.integers(1, 100, (2, 16)).astype(np.int64)
        mask = np.ones((2, 16), np.int64)
        mask[1, 11:] = 0                                   # sentence 1: 11 tokens, 5 padding
        ids[1, 11:] = 0
        types = np.zeros((2, 16), np.int64)
        types[:, 6:] = 1
        types[1, 11:] = 0
        return {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}
    if name == "llama":
        return {"hidden_states": rng.standard_normal((1, 16, 64), dtype=np.float32),
                "position_ids": np.arange(3, 19, dtype=np.int64)[None, :]}   # positions 3..18
    if name in ("convnext", "densenet", "squeezenet"):
        return {"x": rng.standard_normal((2, 3, 32, 32), dtype=np.float32)}
    if name == "swin":
        return {"x": rng.standard_normal((2, 8, 8, 32), dtype=np.float32)}
    if name == "gpt2":
        return {"input_ids": rng.integers(0, 100, (2, 16)).astype(np.int64)}
    if name in ("distilbert", "distilbert11"):
        T = 16 if name == "distilbert" else 11
        ids = rng.integers(1, 100, (2, T)).astype(np.int64)
        mask = np.ones((2, T), np.int64)
        pad = 11 if T == 16 else 7                         # sentence 1 is padded
        mask[1, pad:] = 0
        ids[1, pad:] = 0
        return {"input_ids": ids, "attention_mask": mask}
    if name == "whisper":
        return {"input_features": rng.standard_normal((2, 16, 32), dtype=np.float32)}
    raise ValueError(name)


def main(argv):
    if len(argv) < 2:
        print("usage: make_weights.py OUTDIR [NAME...]", file=sys.stderr)
        return 2
    out = argv[1]
    names = argv[2:] or MODELS
    os.makedirs(out, exist_ok=True)
    for name in names:
        if name not in SPECS:
            print(f"make_weights.py: error: unknown model '{name}'; models: {' '.join(MODELS)}",
                  file=sys.stderr)
            return 2
        safetensors_np.write(os.path.join(out, f"{name}.safetensors"), make_weights(name))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

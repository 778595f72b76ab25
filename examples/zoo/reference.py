#!/usr/bin/env python3
"""Run the zoo's PyTorch modules on make_weights.py's weights; write the committed test files.

    python3 reference.py [NAME...]      # needs torch; default: every model

For each model: builds models.py's module, loads make_weights.make_weights(NAME) with
load_state_dict(strict=True) (BatchNorm's num_batches_tracked, which the weights leave out, is
added as 0: eval mode does not read it), runs it in eval mode, float32, on the CPU, on
make_weights.make_inputs(NAME), and writes next to this script

  NAME_input_<input>.npy        each input, as the compiled model reads it
  NAME_expected_<output>.npy    each output (float32)

It also prints how far the float32 outputs are from a float64 run of the same module, the
scale the 1e-4 test tolerance must allow for. `make test` only reads these files, so the test
needs NumPy but not PyTorch.
"""
import os
import sys

import numpy as np
import torch

import make_weights
import models

HERE = os.path.dirname(os.path.abspath(__file__))

# name: (module constructor, input names in forward's order, output names)
ZOO = {
    "mobilenetv2": (models.MobileNetV2, ["x"], ["logits"]),
    "efficientnet": (models.EfficientNet, ["x"], ["logits"]),
    "vit": (models.VisionTransformer, ["x"], ["logits"]),
    "bert": (models.BertModel, ["input_ids", "attention_mask", "token_type_ids"],
             ["last_hidden_state", "pooler_output"]),
    "unet": (models.UNet, ["x"], ["logits"]),
    "llama": (models.LlamaDecoderLayer, ["hidden_states", "position_ids"], ["hidden_states_out"]),
    "convnext": (models.ConvNeXt, ["x"], ["logits"]),
    "swin": (models.SwinStage, ["x"], ["y"]),
    "gpt2": (models.GPT2LMHeadModel, ["input_ids"], ["logits"]),
    "distilbert": (models.DistilBertModel, ["input_ids", "attention_mask"], ["last_hidden_state"]),
    "whisper": (models.WhisperEncoder, ["input_features"], ["last_hidden_state"]),
    "densenet": (models.DenseNet, ["x"], ["logits"]),
    "squeezenet": (models.SqueezeNet, ["x"], ["logits"]),
}
# Runs of a model on other inputs (another sequence length): name: model it runs.
RUNS = {"distilbert11": "distilbert"}


def build(name):
    name = RUNS.get(name, name)
    ctor = ZOO[name][0]
    torch.manual_seed(0)
    model = ctor()
    state = {k: torch.from_numpy(v) for k, v in make_weights.make_weights(name).items()}
    own = model.state_dict()
    for k in own:
        if k.endswith("num_batches_tracked"):
            state[k] = torch.tensor(0, dtype=torch.long)
        elif k.endswith("relative_position_index"):    # Swin's int64 buffer: swin.model's tensor()
            state[k] = own[k]
        elif k == "lm_head.weight":                     # GPT-2: tied to transformer.wte.weight
            state[k] = state["transformer.wte.weight"]
    model.load_state_dict(state, strict=True)
    return model.eval()


def run(model, inputs, dtype):
    args = [torch.from_numpy(a) for a in inputs]
    args = [a.to(dtype) if a.is_floating_point() else a for a in args]
    with torch.no_grad():
        out = model.to(dtype)(*args)
    model.float()
    out = out if isinstance(out, tuple) else (out,)
    return [o.detach().numpy() for o in out]


def main(argv):
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    names = argv[1:] or make_weights.MODELS + list(RUNS)
    for name in names:
        model = build(name)
        _, in_names, out_names = ZOO[RUNS.get(name, name)]
        inputs = make_weights.make_inputs(name)
        arrays = [inputs[n] for n in in_names]
        ys = run(model, arrays, torch.float32)
        ys64 = run(model, arrays, torch.float64)
        for n, a in inputs.items():
            np.save(os.path.join(HERE, f"{name}_input_{n}.npy"), a)
        for n, y, y64 in zip(out_names, ys, ys64):
            err = np.max(np.abs(y - y64)) / np.max(np.abs(y64))
            print(f"{name}.{n}: {list(y.shape)}, max|y| {np.max(np.abs(y)):.3f}, std "
                  f"{y.std():.3f}; float32 vs float64 relative to max|ref| {err:.2e}")
            np.save(os.path.join(HERE, f"{name}_expected_{n}.npy"),
                    np.ascontiguousarray(y, dtype=np.float32))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

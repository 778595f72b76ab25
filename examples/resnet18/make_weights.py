#!/usr/bin/env python3
"""Write random ResNet-18 weights and the test images, with NumPy only (seeded, reproducible).

    python3 make_weights.py OUTDIR

Writes into OUTDIR:
  resnet18.safetensors  every parameter of resnet18.model under torchvision's state_dict names
                        (num_batches_tracked is left out: it is a training counter that
                        inference does not read, and modelc's loader rejects tensors the model
                        does not declare)
  x_b1.npy              [1, 3, 224, 224] float32 image
  x_b8.npy              [8, 3, 224, 224] float32 images

Weights come from np.random.default_rng(0): convolutions and fc He-normal
(std sqrt(2 / fan_in)), batch-norm weight U(0.5, 1.5) (times 0.3 for each block's bn2 and
0.5 for downsample.1, so the residual sums stay O(1) instead of doubling per block), bias
N(0, 0.1^2), running_mean N(0, 0.1^2), running_var U(0.5, 1.5) (positive), fc.bias
N(0, 0.01^2). The images come from np.random.default_rng(1): standard-normal 28x28 blocks
upsampled 8x plus N(0, 0.5^2) pixel noise, so that different images give visibly different
logits. The same bytes come out on every machine and NumPy version that keeps
default_rng's streams (PCG64, stable since NumPy 1.17). reference.py reads the same functions.
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools"))
import safetensors_np  # noqa: E402  (tools/safetensors_np.py)

STAGES = [(64, 64, 1), (64, 128, 2), (128, 256, 2), (256, 512, 2)]  # inplanes, planes, stride


def make_weights():
    """The state_dict (name -> float32 array) of resnet18.model, in a fixed order."""
    rng = np.random.default_rng(0)
    w = {}

    def conv(name, out_c, in_c, k):
        std = np.sqrt(2.0 / (in_c * k * k))
        w[name] = (rng.standard_normal((out_c, in_c, k, k)) * std).astype(np.float32)

    def bn(prefix, c, gamma=1.0):
        w[prefix + ".weight"] = (rng.uniform(0.5, 1.5, c) * gamma).astype(np.float32)
        w[prefix + ".bias"] = (rng.standard_normal(c) * 0.1).astype(np.float32)
        w[prefix + ".running_mean"] = (rng.standard_normal(c) * 0.1).astype(np.float32)
        w[prefix + ".running_var"] = rng.uniform(0.5, 1.5, c).astype(np.float32)

    conv("conv1.weight", 64, 3, 7)
    bn("bn1", 64)
    for li, (inplanes, planes, stride) in enumerate(STAGES, start=1):
        for bi in range(2):
            p = f"layer{li}.{bi}"
            cin = inplanes if bi == 0 else planes
            conv(p + ".conv1.weight", planes, cin, 3)
            bn(p + ".bn1", planes)
            conv(p + ".conv2.weight", planes, planes, 3)
            bn(p + ".bn2", planes, gamma=0.3)
            if bi == 0 and (stride != 1 or inplanes != planes):
                conv(p + ".downsample.0.weight", planes, cin, 1)
                bn(p + ".downsample.1", planes, gamma=0.5)
    w["fc.weight"] = (rng.standard_normal((1000, 512)) * np.sqrt(2.0 / 512)).astype(np.float32)
    w["fc.bias"] = (rng.standard_normal(1000) * 0.01).astype(np.float32)
    return w


def make_inputs():
    """{'b1': [1,3,224,224], 'b8': [8,3,224,224]} float32 images."""
    rng = np.random.default_rng(1)
    def images(n):
        coarse = rng.standard_normal((n, 3, 28, 28), dtype=np.float32)
        fine = rng.standard_normal((n, 3, 224, 224), dtype=np.float32)
        return np.repeat(np.repeat(coarse, 8, axis=2), 8, axis=3) + np.float32(0.5) * fine
    return {"b1": images(1), "b8": images(8)}


def main(argv):
    if len(argv) != 2:
        print("usage: make_weights.py OUTDIR", file=sys.stderr)
        return 2
    out = argv[1]
    os.makedirs(out, exist_ok=True)
    safetensors_np.write(os.path.join(out, "resnet18.safetensors"), make_weights())
    for name, x in make_inputs().items():
        np.save(os.path.join(out, f"x_{name}.npy"), x)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

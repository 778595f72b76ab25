#!/usr/bin/env python3
"""Run ResNet-18 in PyTorch on make_weights.py's weights and images; write the reference logits.

    python3 reference.py        # needs torch (torchvision is used when installed, not needed)

Writes ref_b1.npy [1, 1000] and ref_b8.npy [8, 1000] (float32, eval mode, CPU) next to this
script. It was run once to produce the committed files; `make test` only reads them, so the
test needs NumPy but not PyTorch. It also prints how far PyTorch's float32 logits are from a
float64 run of the same network, which is the scale the test tolerance must allow for.
"""
import os

import numpy as np
import torch
from torch import nn

import make_weights

HERE = os.path.dirname(os.path.abspath(__file__))


class BasicBlock(nn.Module):
    """torchvision.models.resnet.BasicBlock, with the same attribute (state_dict) names."""

    def __init__(self, inplanes, planes, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = None
        if stride != 1 or inplanes != planes:
            self.downsample = nn.Sequential(nn.Conv2d(inplanes, planes, 1, stride, bias=False),
                                            nn.BatchNorm2d(planes))

    def forward(self, x):
        idt = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + idt)


class ResNet18(nn.Module):
    """torchvision.models.resnet18's layout."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        for i, (inplanes, planes, stride) in enumerate(make_weights.STAGES, start=1):
            setattr(self, f"layer{i}", nn.Sequential(BasicBlock(inplanes, planes, stride),
                                                     BasicBlock(planes, planes, 1)))
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(512, 1000)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


def build():
    try:
        import torchvision
        model = torchvision.models.resnet18(weights=None)
        print("model: torchvision.models.resnet18")
    except ImportError:
        model = ResNet18()
        print("model: reference.py's ResNet18 (torchvision not installed)")
    state = {k: torch.from_numpy(v) for k, v in make_weights.make_weights().items()}
    missing, unexpected = model.load_state_dict(state, strict=False)
    assert not unexpected, unexpected
    assert all(k.endswith("num_batches_tracked") for k in missing), missing
    return model.eval()


def main():
    torch.manual_seed(0)
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    model = build()
    for name, x in make_weights.make_inputs().items():
        with torch.no_grad():
            y = model(torch.from_numpy(x)).numpy()
            y64 = model.double()(torch.from_numpy(x).double()).numpy()
            model.float()
        err = np.max(np.abs(y - y64)) / np.max(np.abs(y64))
        print(f"{name}: logits {list(y.shape)}, max|logit| {np.max(np.abs(y)):.3f}, "
              f"std {y.std():.3f}; float32 vs float64: max abs {np.max(np.abs(y - y64)):.2e}, "
              f"relative to max|ref| {err:.2e}")
        np.save(os.path.join(HERE, f"ref_{name}.npy"), np.ascontiguousarray(y, dtype=np.float32))
    print("wrote ref_b1.npy ref_b8.npy")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""PyTorch's DLRM dense half on seeded inputs and weights, for test_dlrm.

The model is torchrec.models.dlrm.DLRM's, its tables' pooled embeddings
given: DenseArch = MLP (Linear, ReLU after every layer), InteractionArch =
cat(dense, triu dots of [dense, pooled...]), OverArch = Linear+ReLU ... and a
last Linear to 1, loss BCEWithLogits (mean).  Writes OUT as raw little-endian
float32: dense [B][13], pooled [T][B][D], labels [B], the DenseArch's and
the OverArch's parameters (each layer's weight [out][in] then bias), then
PyTorch's logits [B], loss, both archs' gradients (the same layout) and the
pooled gradients [T][B][D].
"""
import sys

import torch

B, DENSE, T, D = 6, 13, 3, 4
DENSE_SIZES, OVER_SIZES = [8, 4], [6, 1]


def mlp(sizes, last_relu):
    layers = []
    for i in range(1, len(sizes)):
        layers.append(torch.nn.Linear(sizes[i - 1], sizes[i]))
        if last_relu or i + 1 < len(sizes):
            layers.append(torch.nn.ReLU())
    return torch.nn.Sequential(*layers)


def flat(module, grads=False):
    parts = []
    for layer in module:
        if isinstance(layer, torch.nn.Linear):
            for p in (layer.weight, layer.bias):
                parts.append((p.grad if grads else p.detach()).reshape(-1))
    return torch.cat(parts)


def main(out):
    torch.manual_seed(7)
    dense_arch = mlp([DENSE] + DENSE_SIZES, True)
    f = 1 + T
    over_arch = mlp([D + f * (f - 1) // 2] + OVER_SIZES, False)
    dense = torch.rand(B, DENSE) * 3
    pooled = torch.randn(T, B, D, requires_grad=True)
    labels = (torch.rand(B) < 0.5).float()
    dense_out = dense_arch(dense)
    combined = torch.cat([dense_out.unsqueeze(1), pooled.permute(1, 0, 2)], dim=1)
    dots = torch.bmm(combined, combined.transpose(1, 2))
    i, j = torch.triu_indices(f, f, offset=1)
    logits = over_arch(torch.cat([dense_out, dots[:, i, j]], dim=1)).squeeze(1)
    loss = torch.nn.functional.binary_cross_entropy_with_logits(logits, labels)
    loss.backward()
    tensors = (dense, pooled.detach(), labels, flat(dense_arch), flat(over_arch), logits.detach(),
               loss.detach().reshape(1), flat(dense_arch, True), flat(over_arch, True),
               pooled.grad)
    with open(out, "wb") as fh:
        for t in tensors:
            fh.write(t.contiguous().numpy().astype("<f4").tobytes())


if __name__ == "__main__":
    main(sys.argv[1])

#!/usr/bin/env python3
"""PyTorch's DLRM InteractionArch on seeded inputs, for test_interaction.

Writes OUT as raw little-endian float32, in this order: the vectors
[F][B][D], the output gradient [B][W], then PyTorch's output [B][W] and the
vectors' gradients [F][B][D], where W = D + F(F-1)/2.  The interaction is
torchrec.models.dlrm.InteractionArch's: cat(dense, bmm(combined,
combined^T)[:, triu_indices(F, F, 1)]).
"""
import sys

import torch

B, F, D = 5, 27, 8


def main(out):
    torch.manual_seed(21)
    vectors = torch.randn(F, B, D, dtype=torch.float32, requires_grad=True)
    combined = vectors.permute(1, 0, 2)  # [B, F, D]
    dots = torch.bmm(combined, combined.transpose(1, 2))
    i, j = torch.triu_indices(F, F, offset=1)
    result = torch.cat([combined[:, 0, :], dots[:, i, j]], dim=1)
    grad_out = torch.randn(result.shape, dtype=torch.float32)
    result.backward(grad_out)
    with open(out, "wb") as f:
        for t in (vectors.detach(), grad_out, result.detach(), vectors.grad):
            f.write(t.contiguous().numpy().astype("<f4").tobytes())


if __name__ == "__main__":
    main(sys.argv[1])

#!/usr/bin/env python3
"""PyTorch's DLRM-DCN interaction on seeded inputs, for test_crossnet.

TorchRec is not in Debian, so its two pieces are written here as TorchRec
writes them: InteractionDCNArch's concat (torch.cat of the dense output
and the pooled features, [B, (T+1) D]) and LowRankCrossNet's layers
(x_l = x_0 * (linear(linear(x_l, V_l), W_l) + bias_l) + x_l).  The
parameters are TorchRec's (xavier_normal_ W and V); the bias is seeded
random rather than TorchRec's zeros, so its gradient and its add are
tested too.

Writes OUT, little-endian: a uint32 count of cases, then per case five
uint32 (tables, batch, dim, layers, rank) and float32 arrays: dense [B][D],
pooled [T][B][D] (feature-major, as ember holds it), the parameters in
state_dict order (W_kernels.0.., V_kernels.0.., bias.0..), grad_out
[B][n], then PyTorch's out [B][n], the parameters' gradients (same order),
grad_dense [B][D] and grad_pooled [T][B][D].
"""
import struct
import sys

import torch

# (tables, batch, dim, layers, rank)
SHAPES = [
    (1, 4, 3, 1, 1),
    (5, 7, 4, 3, 2),
    (5, 1, 8, 3, 1),
    (1, 1, 2, 3, 4),
    (2, 3, 2, 2, 8),  # rank above n
    (26, 16, 8, 3, 16),
]


class LowRankCrossNet(torch.nn.Module):
    """torchrec.modules.crossnet.LowRankCrossNet, as TorchRec has it."""

    def __init__(self, in_features, num_layers, low_rank):
        super().__init__()
        self._num_layers = num_layers
        self.W_kernels = torch.nn.ParameterList([
            torch.nn.Parameter(torch.nn.init.xavier_normal_(torch.empty(in_features, low_rank)))
            for _ in range(num_layers)
        ])
        self.V_kernels = torch.nn.ParameterList([
            torch.nn.Parameter(torch.nn.init.xavier_normal_(torch.empty(low_rank, in_features)))
            for _ in range(num_layers)
        ])
        self.bias = torch.nn.ParameterList([
            torch.nn.Parameter(torch.nn.init.zeros_(torch.empty(in_features)))
            for _ in range(num_layers)
        ])

    def forward(self, input):
        x_0 = input
        x_l = x_0
        for layer in range(self._num_layers):
            x_l_v = torch.nn.functional.linear(x_l, self.V_kernels[layer])
            x_l_w = torch.nn.functional.linear(x_l_v, self.W_kernels[layer])
            x_l = x_0 * (x_l_w + self.bias[layer]) + x_l
        return x_l


def floats(t):
    return t.detach().contiguous().numpy().astype("<f4").tobytes()


def one_case(shape):
    tables, batch, dim, layers, rank = shape
    n = (tables + 1) * dim
    net = LowRankCrossNet(n, layers, rank)
    with torch.no_grad():
        for b in net.bias:
            b.copy_(0.1 * torch.randn(n))
    dense = torch.randn(batch, dim, requires_grad=True)
    pooled = torch.randn(tables, batch, dim, requires_grad=True)
    # InteractionDCNArch.forward, its sparse_features [B, T, D] taken from
    # ember's [T, B, D].
    sparse_features = pooled.permute(1, 0, 2)
    combined_values = torch.cat((dense.unsqueeze(1), sparse_features), dim=1)
    out = net(combined_values.reshape([batch, -1]))
    grad_out = torch.randn(out.shape)
    out.backward(grad_out)
    params = list(net.state_dict().keys())
    assert params == ([f"W_kernels.{i}" for i in range(layers)] +
                      [f"V_kernels.{i}" for i in range(layers)] +
                      [f"bias.{i}" for i in range(layers)]), params
    named = dict(net.named_parameters())
    blob = struct.pack("<5I", *shape) + floats(dense) + floats(pooled)
    blob += b"".join(floats(named[k]) for k in params) + floats(grad_out) + floats(out)
    blob += b"".join(floats(named[k].grad) for k in params)
    return blob + floats(dense.grad) + floats(pooled.grad)


def main(out):
    torch.manual_seed(35)
    blob = struct.pack("<I", len(SHAPES)) + b"".join(one_case(s) for s in SHAPES)
    with open(out, "wb") as f:
        f.write(blob)


if __name__ == "__main__":
    main(sys.argv[1])

#!/usr/bin/python3
"""PyTorch's own runs of the golden files with an fp16 table or fp16 replies:
what the fp16 oracle (tests/common/replay_local.c) must reproduce.

    fp16_ref.py GOLDEN_DIR OUT_DIR [NAME ...]

For each golden run NAME (seed_sum_2t, mean_3t_empty, sum_weighted_2t by
default) it replays the file's inputs (initial weights, batches, metadata;
never its expected.* values) as the synchronous job does (README.md in the
golden folder), in three ways, written as OUT_DIR/NAME.WHAT.safetensors with
the golden layout's expected.loss, expected.emb.weight, expected.fc.weight
and expected.fc.bias:

  rows     the table stored as torch.float16 (`--table-dtype fp16`): the
           initial rows rounded (`.half()`, round to nearest, ties to even),
           pooled from the widened rows, every step's update computed in
           fp32 (lr * grad, then the subtraction) and rounded back;
  replies  each bag's pooled value rounded to float16 before the dense layer
           (`--reply-dtype fp16`, one PS): a sum or max rounded, a mean's
           sum rounded and then divided by the bag's count; the gradient
           goes through the rounding as through the identity;
  both     the two together.

The same replay without fp16 must give the file's own expected values
(within 1e-5), or nothing is written.

Debian's python3-torch (1.13); nothing beyond the standard library else.
Every conversion to fp16 is PyTorch's: a rounding of ember's that differs
(truncation, say) drifts the table away from these runs.
"""
import json
import os
import struct
import sys

import torch
import torch.nn.functional as F

DTYPES = {"F32": torch.float32, "I64": torch.int64}
NAMES = ["seed_sum_2t", "mean_3t_empty", "sum_weighted_2t"]


def read_safetensors(path):
    with open(path, "rb") as f:
        raw = f.read()
    size = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + size])
    meta = header.pop("__metadata__", {})
    tensors = {}
    for name, info in header.items():
        begin, end = info["data_offsets"]
        tensors[name] = torch.frombuffer(bytearray(raw[8 + size + begin:8 + size + end]),
                                         dtype=DTYPES[info["dtype"]]).reshape(info["shape"])
    return meta, tensors


def write_safetensors(path, tensors, meta):
    header, blobs, offset = {"__metadata__": meta}, [], 0
    for name, tensor in tensors.items():
        data = tensor.contiguous().numpy().tobytes()
        header[name] = {"dtype": "F32", "shape": list(tensor.shape),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as out:
        out.write(struct.pack("<Q", len(text)))
        out.write(text)
        for blob in blobs:
            out.write(blob)
    os.replace(tmp, path)


def pool(table, indices, offsets, weights, mode, half_replies):
    """The bags' pooled values as the trainer receives them."""
    if not half_replies:
        return F.embedding_bag(indices, table, offsets, mode=mode, per_sample_weights=weights)
    pooled = F.embedding_bag(indices, table, offsets, mode="sum" if mode == "mean" else mode,
                             per_sample_weights=weights)
    pooled = pooled + (pooled.half().float() - pooled).detach()
    if mode == "mean":
        ends = torch.cat([offsets[1:], torch.tensor([indices.numel()])])
        counts = (ends - offsets).clamp(min=1).to(torch.float32)
        pooled = pooled / counts.unsqueeze(1)
    return pooled


def replay(golden, half_rows, half_replies):
    meta, t = read_safetensors(golden)
    trainers, steps, lr = int(meta["trainers"]), int(meta["steps"]), float(meta["lr"])
    mode, weighted = meta["mode"], meta.get("per_sample_weights", "0") == "1"
    if meta.get("optimizer", "sgd") != "sgd":
        raise SystemExit(f"{golden}: optimizer {meta['optimizer']}: only sgd is replayed")
    emb = t["emb.weight"].clone()
    emb16 = emb.half() if half_rows else None
    fc_w, fc_b = t["fc.weight"].clone(), t["fc.bias"].clone()
    losses = torch.zeros(steps, trainers)
    for s in range(steps):
        table = emb16.float() if half_rows else emb
        grads = []
        for tr in range(trainers):
            w = table.clone().requires_grad_()
            a = fc_w.clone().requires_grad_()
            b = fc_b.clone().requires_grad_()
            weights = t[f"t{tr}.s{s}.weights"] if weighted else None
            pooled = pool(w, t[f"t{tr}.s{s}.indices"], t[f"t{tr}.s{s}.offsets"], weights, mode,
                          half_replies)
            loss = F.cross_entropy(F.linear(pooled, a, b), t[f"t{tr}.s{s}.targets"])
            loss.backward()
            losses[s, tr] = loss.detach()
            grads.append((w.grad, a.grad, b.grad))
        with torch.no_grad():
            table_grad = torch.stack([g[0] for g in grads]).sum(0)
            if meta.get("sparse_reduce", "sum") == "mean":
                table_grad = table_grad / trainers
            if half_rows:
                emb16 = (emb16.float() - lr * table_grad).half()
            else:
                emb -= lr * table_grad
            fc_w -= lr * torch.stack([g[1] for g in grads]).mean(0)
            fc_b -= lr * torch.stack([g[2] for g in grads]).mean(0)
    return {"expected.loss": losses,
            "expected.emb.weight": emb16.float() if half_rows else emb,
            "expected.fc.weight": fc_w, "expected.fc.bias": fc_b}


def main():
    if len(sys.argv) < 3:
        raise SystemExit(__doc__)
    golden_dir, out_dir, names = sys.argv[1], sys.argv[2], sys.argv[3:] or NAMES
    torch.set_num_threads(1)  # one summation order
    os.makedirs(out_dir, exist_ok=True)
    for name in names:
        golden = os.path.join(golden_dir, name + ".safetensors")
        # The machinery first: without fp16 it is the golden run itself.
        _, stored = read_safetensors(golden)
        for key, value in replay(golden, 0, 0).items():
            diff = (value - stored[key]).abs().max().item()
            if not diff <= 1e-5:
                raise SystemExit(f"{golden}: the fp32 replay's {key} is {diff:.3g} from the "
                                 "file's: this script does not replay it as PyTorch did")
        for what, rows, replies in (("rows", 1, 0), ("replies", 0, 1), ("both", 1, 1)):
            path = os.path.join(out_dir, f"{name}.{what}.safetensors")
            write_safetensors(path, replay(golden, rows, replies),
                              {"golden": name, "fp16": what,
                               "generator": "PyTorch " + torch.__version__})
            print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""The two-tower example in PyTorch: the same model, data, split and
optimizers as two_tower on ember, from the initial weights two_tower wrote;
compares every step's loss of every trainer and every final weight.

    reference.py --data data.st --ember out.st [the flags two_tower ran with]

What it mirrors (two_tower.c says the same from ember's side):
  - trainer t of T takes, at step s, the examples s*T*B + j*T + t (j < B);
    each trainer's loss is the mean BCE with logits over its B examples;
  - the dense gradients are averaged over the trainers (DDP, ember_allreduce
    AVG), then stepped with torch.optim's SGD / Adagrad / Adam;
  - the tables' row gradients (sparse, nn.EmbeddingBag(sparse=True)) of the
    trainers are summed, or averaged with --sparse-reduce mean, as ember's PS
    does in sync mode, then stepped with torch.optim.SGD / Adagrad, whose
    sparse updates are what ember's PS applies (only the rows a step touched),
    or FBGEMM's row-wise Adagrad (RowWiseAdagrad below);
  - the item table is one nn.EmbeddingBag used by two features (history and
    item_id): its gradient is the sum of both, as on ember's PS.
Exit 0 when every value is within --tolerance (1e-4), else 1 naming the
worst ones.

--dtype float64 runs the reference in double precision: where ember and the
float32 reference differ, it tells rounding magnified by the run (Adagrad
divides each element's gradient by its own history: an element whose
gradients nearly cancel turns float32 rounding into whole steps) from a
real difference.
"""
import argparse
import json
import math
import struct
import sys

import numpy as np
import torch
from torch import nn
import torch.nn.functional as F

DTYPES = {"F32": np.float32, "I64": np.int64}


def read_safetensors(path):
    """(metadata, {name: ndarray}) of a safetensors file of F32 / I64 tensors."""
    with open(path, "rb") as fh:
        raw = fh.read()
    if len(raw) < 8 or struct.unpack("<Q", raw[:8])[0] > len(raw) - 8:
        sys.exit(f"reference: {path}: not a safetensors file (its header length)")
    size = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + size])
    meta, data, tensors = header.pop("__metadata__", {}), raw[8 + size:], {}
    for name, info in header.items():
        if info["dtype"] not in DTYPES:
            sys.exit(f"reference: {path}: tensor {name} is {info['dtype']}, not F32 or I64")
        begin, end = info["data_offsets"]
        dtype = np.dtype(DTYPES[info["dtype"]]).newbyteorder("<")
        if not 0 <= begin <= end <= len(data) or \
                end - begin != dtype.itemsize * math.prod(info["shape"]):
            sys.exit(f"reference: {path}: tensor {name}: data_offsets do not hold its shape")
        tensors[name] = np.frombuffer(data[begin:end], dtype=dtype).reshape(info["shape"])
    return meta, tensors


class TwoTower(nn.Module):
    """nn.Sequential's names are the ones two_tower writes (model.c)."""

    def __init__(self, users, items, categories, dim, hidden, out):
        super().__init__()
        self.embedding_bags = nn.ModuleDict({
            name: nn.EmbeddingBag(rows, dim, mode="mean", sparse=True)
            for name, rows in (("user", users), ("item", items), ("category", categories))})
        self.user_tower = nn.Sequential(nn.Linear(2 * dim, hidden), nn.ReLU(),
                                        nn.Linear(hidden, out))
        self.item_tower = nn.Sequential(nn.Linear(2 * dim, hidden), nn.ReLU(),
                                        nn.Linear(hidden, out))

    def forward(self, batch):
        bags = self.embedding_bags
        user = torch.cat([bags["user"](*batch["user_id"]), bags["item"](*batch["history"])], 1)
        item = torch.cat([bags["item"](*batch["item_id"]),
                          bags["category"](*batch["categories"])], 1)
        logit = (self.user_tower(user) * self.item_tower(item)).sum(1)
        return F.binary_cross_entropy_with_logits(logit, batch["label"])


def bags(lists):
    """(values, offsets) of a list of id lists, as nn.EmbeddingBag takes them."""
    offsets = torch.tensor([0] + [len(ids) for ids in lists[:-1]]).cumsum(0)
    values = torch.tensor([i for ids in lists for i in ids], dtype=torch.int64)
    return values, offsets


def make_batch(data, examples):
    def list_of(offsets, values, i):
        return values[offsets[i]:offsets[i + 1]].tolist()
    users, items = data["example_user"][examples], data["example_item"][examples]
    return {
        "user_id": bags([[u] for u in users.tolist()]),
        "history": bags([list_of(data["history_offsets"], data["history"], u) for u in users]),
        "item_id": bags([[i] for i in items.tolist()]),
        "categories": bags([list_of(data["category_offsets"], data["item_categories"], i)
                            for i in items]),
        "label": torch.from_numpy(data["example_label"][examples].copy()),
    }


class RowWiseAdagrad(torch.optim.Optimizer):
    """FBGEMM's EXACT_ROWWISE_ADAGRAD (TorchRec's usual table optimizer), as
    ember's PS applies it: one accumulator a row, acc_r += mean_d(g_rd^2),
    w_r -= lr / (sqrt(acc_r) + eps) * g_r, on the rows a step touched."""

    def __init__(self, params, lr, eps=1e-8):
        super().__init__(params, {"lr": lr, "eps": eps})

    @torch.no_grad()
    def step(self):
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                grad = p.grad.coalesce()
                rows, values = grad.indices()[0], grad.values()
                acc = self.state[p].setdefault("momentum1", p.new_zeros(p.shape[0]))
                acc[rows] += values.pow(2).mean(1)
                p[rows] -= group["lr"] / (acc[rows].sqrt() + group["eps"])[:, None] * values


def optimizer(kind, params, lr):
    # torch.optim's defaults are ember's (ember_opt_config_default).
    return {"sgd": torch.optim.SGD, "adagrad": torch.optim.Adagrad, "adam": torch.optim.Adam,
            "rowwise_adagrad": RowWiseAdagrad}[kind](params, lr=lr)


def train(args, data, initial):
    meta = data[0]
    model = TwoTower(int(meta["users"]), int(meta["items"]), int(meta["categories"]),
                     args.dim, args.hidden, args.tower_dim)
    model.load_state_dict({k: torch.from_numpy(v.copy()) for k, v in initial.items()},
                          strict=True)
    dense = list(model.user_tower.parameters()) + list(model.item_tower.parameters())
    tables = list(model.embedding_bags.parameters())
    dense_opt = optimizer(args.optimizer, dense, args.lr)
    sparse_opt = optimizer(args.sparse_optimizer, tables, args.sparse_lr)

    T, B = args.trainers, args.batch
    losses = np.zeros((args.steps, T))
    for step in range(args.steps):
        dense_opt.zero_grad(set_to_none=True)
        sparse_opt.zero_grad(set_to_none=True)
        total = 0
        for t in range(T):
            loss = model(make_batch(data[1], step * T * B + np.arange(B) * T + t))
            losses[step, t] = loss.item()
            total = total + loss
        total.backward()  # every gradient summed over the trainers
        for p in dense:
            p.grad.div_(T)  # DDP: the trainers' average
        if args.sparse_reduce == "mean":
            for p in tables:
                p.grad = p.grad / T
        dense_opt.step()
        sparse_opt.step()
    return losses, {k: v.detach().numpy() for k, v in model.state_dict().items()}


def compare(what, got, want, tolerance, failures):
    if got.shape != want.shape:
        failures.append(f"{what}: shape {list(got.shape)}, expected {list(want.shape)}")
        return 0.0
    diff = np.abs(got.astype(np.float64) - want.astype(np.float64))
    diff = np.where(np.isnan(diff), np.inf, diff)  # a NaN is the worst
    worst = float(diff.max()) if diff.size else 0.0
    if worst > tolerance:
        at = np.unravel_index(int(np.argmax(diff)), diff.shape)
        failures.append(f"{what}{list(at)}: ember {got[at]:.7g}, PyTorch {want[at]:.7g} "
                        f"(|diff| {worst:.3g} > {tolerance:g})")
    return worst


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", required=True, help="gen_data.py's file")
    parser.add_argument("--ember", required=True, help="two_tower's --out")
    parser.add_argument("--tolerance", type=float, default=1e-4)
    parser.add_argument("--dtype", choices=("float32", "float64"), default="float32",
                        help="the reference's precision")
    # two_tower's flags and defaults.
    parser.add_argument("--trainers", type=int, default=2)
    parser.add_argument("--ps", type=int, default=2, help="(ember's layout only)")
    parser.add_argument("--steps", type=int, default=0)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--dim", type=int, default=16)
    parser.add_argument("--hidden", type=int, default=32)
    parser.add_argument("--tower-dim", type=int, default=16)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--sparse-lr", type=float, default=0.1)
    parser.add_argument("--optimizer", choices=("sgd", "adagrad", "adam"), default="sgd")
    parser.add_argument("--sparse-optimizer", choices=("sgd", "adagrad", "rowwise_adagrad"),
                        default="rowwise_adagrad")
    parser.add_argument("--sparse-reduce", choices=("sum", "mean"), default="mean")
    parser.add_argument("--seed", type=int, default=1, help="(in ember's init. weights)")
    args = parser.parse_args()

    torch.set_num_threads(1)
    data = read_safetensors(args.data)
    _, ember = read_safetensors(args.ember)
    per_step = args.trainers * args.batch
    examples = len(data[1]["example_user"])
    if args.steps == 0:
        args.steps = examples // per_step
    if not 1 <= args.steps * per_step <= examples:
        sys.exit(f"reference: {args.data} holds {examples} examples, not {args.steps} steps "
                 f"of {per_step}")
    initial = {k[len("init."):]: v for k, v in ember.items() if k.startswith("init.")}
    if "loss" not in ember or not initial:
        sys.exit(f"reference: {args.ember}: no 'loss' or no 'init.*' tensors (two_tower --out?)")

    if args.dtype == "float64":
        torch.set_default_dtype(torch.float64)
        data = (data[0], {k: v.astype(np.float64) if v.dtype == np.float32 else v
                          for k, v in data[1].items()})
        initial = {k: v.astype(np.float64) for k, v in initial.items()}
    losses, final = train(args, data, initial)
    failures = []
    worst = compare("loss", ember["loss"], losses, args.tolerance, failures)
    print(f"reference: {args.steps} steps x {args.trainers} trainers: losses within {worst:.3g} "
          f"(first {losses[0].tolist()}, last {losses[-1].tolist()})")
    for name, want in final.items():
        if name not in ember:
            failures.append(f"{name}: not in {args.ember}")
            continue
        worst = compare(name, ember[name], want, args.tolerance, failures)
        moved = float(np.abs(want - initial[name]).max())
        print(f"reference: {name} {list(want.shape)}: within {worst:.3g} (moved {moved:.3g})")
        if not moved > args.tolerance:  # then a comparison of it could not fail
            failures.append(f"{name}: moved {moved:.3g} in PyTorch, not more than the tolerance")
    for failure in failures:
        print(f"reference: MISMATCH {failure}")
    print("reference: " + ("FAILED" if failures else f"ok: ember matches PyTorch within "
                                                    f"{args.tolerance:g}"))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/python3
"""Make (or check) the golden reference runs with PyTorch.

Each golden file is one complete, deterministic synchronous training run of
the hybrid model (EmbeddingBag -> Linear, cross entropy), computed by PyTorch
in one process; README.md in this folder gives the semantics and the layout.

    make_golden.py --out DIR [NAME ...]    write the runs (the stored ones,
                                           RUNS, by default)
    make_golden.py --check DIR [NAME ...]  recompute the runs and compare
                                           them with the files in DIR
    make_golden.py --list                  the runs this script knows

OPTIMIZER_RUNS are not stored here: the tests make them (the
train.optimizer.setup fixture) and replay them with each optimizer.

--check passes when the inputs (initial weights, batches, metadata) are
bit-identical to the stored ones and every expected value is within --tol
(1e-6) of what this machine's PyTorch computes; it prints the largest
difference of each tensor.  A run is added by adding an entry to RUNS.

Uses Debian's python3-torch (1.13); nothing else beyond the standard library.
"""
import argparse
import json
import os
import random
import struct
import sys
import tempfile

import torch

# name: sizes, optimizer and how its batches are drawn.  Batches are drawn
# step-major (step 0 of every trainer, then step 1, ...) with Python's random
# (sizes) and torch's generator (indices, targets, weights), both seeded with
# `seed` after the model is made, as the PyTorch tutorial draws them.
RUNS = {
    # The tutorial's sizes and optimizer.
    "seed_sum_2t": dict(rows=100, dim=16, classes=8, trainers=2, steps=100,
                        lr=0.05, mode="sum", sparse_reduce="sum", seed=0),
    # About 10% empty bags, mean pooling, three trainers.
    "mean_3t_empty": dict(rows=1000, dim=32, classes=4, trainers=3, steps=60,
                          lr=0.05, mode="mean", sparse_reduce="sum", seed=1,
                          empty_bags=0.1),
    # Per-sample weights; the trainers' row gradients averaged.
    "sum_weighted_2t": dict(rows=500, dim=8, classes=3, trainers=2, steps=50,
                            lr=0.05, mode="sum", sparse_reduce="mean", seed=2,
                            per_sample_weights=1),
    # Max pooling over a table of few distinct values (each element one of
    # -1, -0.5, 0, 0.5, 1), so a bag's maximum is often held by several
    # entries, on rows of different shards: the gradient goes to the first
    # of them, as PyTorch's kernel decides.
    "max_ties_2t": dict(rows=60, dim=8, classes=4, trainers=2, steps=40,
                        lr=0.05, mode="max", sparse_reduce="sum", seed=3,
                        table="quantized"),
    # Fewer rows than some jobs have parameter servers (3 rows, up to 4 PS):
    # a PS may own no row at all.
    "tiny_rows_2t": dict(rows=3, dim=4, classes=2, trainers=2, steps=20,
                         lr=0.05, mode="sum", sparse_reduce="sum", seed=4,
                         max_bag=3),
}

# One job with each optimizer ember-train has, on the same inputs (sizes,
# seed, batches): PyTorch's defaults for each (Adagrad eps 1e-10; row-wise
# Adagrad FBGEMM's, eps 1e-8; Adam betas 0.9, 0.999, eps 1e-8), the table's
# optimizer lazy (only the rows a step looks up move) and the dense layer's
# torch.optim's (README.md).  Made by the tests, not stored here.
OPTIMIZER_RUNS = {
    f"opt_{name}": dict(rows=100, dim=16, classes=8, trainers=2, steps=50, lr=lr, mode="sum",
                        sparse_reduce="sum", seed=5, optimizer=name)
    for name, lr in (("sgd", 0.05), ("adagrad", 0.05), ("rowwise_adagrad", 0.05),
                     ("adam", 0.01))
}
KNOWN = {**RUNS, **OPTIMIZER_RUNS}

DTYPES = {torch.float32: "F32", torch.int64: "I64"}
TORCH_OF = {"F32": torch.float32, "I64": torch.int64}


def draw_offsets(n, empty_bags, max_bag):
    """Bag starts over n indices: bags of 1..max_bag entries, and with
    probability empty_bags an empty bag before each."""
    offsets, start = [], 0
    while start < n:
        if empty_bags and random.random() < empty_bags:
            offsets.append(start)
        offsets.append(start)
        start += random.randint(1, max_bag)
    return offsets


def draw_batch(run):
    n = random.randint(20, 50)
    indices = torch.LongTensor(n).random_(0, run["rows"])
    offsets = torch.LongTensor(draw_offsets(n, run.get("empty_bags", 0),
                                            run.get("max_bag", 10)))
    targets = torch.LongTensor(len(offsets)).random_(0, run["classes"])
    weights = torch.rand(n) if run.get("per_sample_weights") else None
    return indices, offsets, targets, weights


def make_model(run):
    torch.manual_seed(run["seed"])
    emb = torch.nn.EmbeddingBag(run["rows"], run["dim"], mode=run["mode"])
    fc = torch.nn.Linear(run["dim"], run["classes"])
    if run.get("table") == "quantized":
        with torch.no_grad():
            emb.weight.copy_(torch.randint(-2, 3, emb.weight.shape).float() * 0.5)
    return emb, fc


class LazyTableOptimizer:
    """The table's optimizer as ember's PS steps it (engine/ops/optimizer.h):
    only the rows the step looked up (@touched) are updated, and only their
    state moves.  Adagrad: sum += g^2, w -= lr g / (sqrt(sum) + 1e-10);
    row-wise Adagrad (FBGEMM's EXACT_ROWWISE_ADAGRAD): acc += mean(g^2),
    w -= lr g / (sqrt(acc) + 1e-8); Adam as torch.optim.SparseAdam (eps on
    sqrt(v), step lr sqrt(1 - b2^t) / (1 - b1^t)) with t counted per row."""

    def __init__(self, kind, lr, weight):
        self.kind, self.lr = kind, lr
        rows = weight.shape[0]
        self.state0 = torch.zeros(rows if kind == "rowwise_adagrad" else weight.shape)
        self.state1 = torch.zeros(weight.shape)
        self.steps = torch.zeros(rows, dtype=torch.int64)

    def step(self, weight, grad, touched):
        w, g = weight[touched], grad[touched]
        if self.kind == "adagrad":
            self.state0[touched] += g * g
            w -= self.lr * (g / (self.state0[touched].sqrt() + 1e-10))
        elif self.kind == "rowwise_adagrad":
            self.state0[touched] += (g * g).mean(1)
            w -= (self.lr / (self.state0[touched].sqrt() + 1e-8)).unsqueeze(1) * g
        else:
            b1, b2 = 0.9, 0.999
            m, v = self.state0[touched], self.state1[touched]
            m += (g - m) * (1 - b1)
            v += (g * g - v) * (1 - b2)
            self.state0[touched], self.state1[touched] = m, v
            self.steps[touched] += 1
            t = self.steps[touched].to(torch.float64)
            size = (self.lr * (1 - b2 ** t).sqrt() / (1 - b1 ** t)).to(torch.float32)
            w -= size.unsqueeze(1) * (m / (v.sqrt() + 1e-8))
        weight[touched] = w


def dense_optimizer(kind, lr, params):
    """The trainers' optimizer of the dense layer (row-wise Adagrad is the
    table's: the dense layer takes Adagrad, as TorchRec's jobs do)."""
    if kind == "adam":
        return torch.optim.Adam(params, lr=lr)
    return torch.optim.Adagrad(params, lr=lr, eps=1e-10)


def train(run):
    """The synchronous run: every trainer's forward and backward against the
    same parameters, then the dense gradients averaged and the table's summed
    (or averaged) over trainers, one optimizer step each (SGD unless the run
    names another)."""
    emb, fc = make_model(run)
    kind = run.get("optimizer", "sgd")
    if kind != "sgd":
        table_opt = LazyTableOptimizer(kind, run["lr"], emb.weight)
        fc_opt = dense_optimizer(kind, run["lr"], [fc.weight, fc.bias])
    tensors = {"emb.weight": emb.weight.detach().clone(),
               "fc.weight": fc.weight.detach().clone(),
               "fc.bias": fc.bias.detach().clone()}
    random.seed(run["seed"])
    T, S, lr = run["trainers"], run["steps"], run["lr"]
    losses = torch.zeros(S, T)
    for s in range(S):
        batches = [draw_batch(run) for _ in range(T)]
        grads = []
        for t, (indices, offsets, targets, weights) in enumerate(batches):
            tensors[f"t{t}.s{s}.indices"] = indices
            tensors[f"t{t}.s{s}.offsets"] = offsets
            tensors[f"t{t}.s{s}.targets"] = targets
            if weights is not None:
                tensors[f"t{t}.s{s}.weights"] = weights
            emb.zero_grad()
            fc.zero_grad()
            pooled = emb(indices, offsets, per_sample_weights=weights)
            loss = torch.nn.functional.cross_entropy(fc(pooled), targets)
            loss.backward()
            losses[s, t] = loss.detach()
            grads.append((emb.weight.grad.clone(), fc.weight.grad.clone(),
                          fc.bias.grad.clone()))
        with torch.no_grad():
            table_grad = torch.stack([g[0] for g in grads]).sum(0)
            if run["sparse_reduce"] == "mean":
                table_grad = table_grad / T
            if kind == "sgd":
                emb.weight -= lr * table_grad
                fc.weight -= lr * torch.stack([g[1] for g in grads]).mean(0)
                fc.bias -= lr * torch.stack([g[2] for g in grads]).mean(0)
                continue
            touched = torch.unique(torch.cat([b[0] for b in batches]))
            table_opt.step(emb.weight, table_grad, touched)
        fc.weight.grad = torch.stack([g[1] for g in grads]).mean(0)
        fc.bias.grad = torch.stack([g[2] for g in grads]).mean(0)
        fc_opt.step()
    tensors["expected.loss"] = losses
    tensors["expected.emb.weight"] = emb.weight.detach().clone()
    tensors["expected.fc.weight"] = fc.weight.detach().clone()
    tensors["expected.fc.bias"] = fc.bias.detach().clone()
    return tensors


def metadata(run):
    return {"rows": str(run["rows"]), "dim": str(run["dim"]),
            "classes": str(run["classes"]), "trainers": str(run["trainers"]),
            "steps": str(run["steps"]), "lr": str(run["lr"]), "mode": run["mode"],
            "sparse_reduce": run["sparse_reduce"], "seed": str(run["seed"]),
            "per_sample_weights": str(run.get("per_sample_weights", 0)),
            "optimizer": run.get("optimizer", "sgd"), "loss": "cross_entropy_mean",
            "generator": "PyTorch " + torch.__version__}


def write_safetensors(path, tensors, meta):
    """safetensors: u64 header size, JSON header (padded to 8 bytes with
    spaces), then the tensors' bytes in header order."""
    header, blobs, offset = {"__metadata__": meta}, [], 0
    for name, tensor in tensors.items():
        data = tensor.contiguous().numpy().tobytes()
        header[name] = {"dtype": DTYPES[tensor.dtype], "shape": list(tensor.shape),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as out:
        out.write(struct.pack("<Q", len(text)))
        out.write(text)
        for blob in blobs:
            out.write(blob)


def read_safetensors(path):
    with open(path, "rb") as f:
        raw = f.read()
    size = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + size])
    base, tensors = 8 + size, {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        tensors[name] = torch.frombuffer(bytearray(raw[base + begin:base + end]),
                                         dtype=TORCH_OF[info["dtype"]]).reshape(
                                             info["shape"])
    return header.get("__metadata__", {}), tensors


def check(name, run, folder, tol):
    path = os.path.join(folder, name + ".safetensors")
    stored_meta, stored = read_safetensors(path)
    fresh, inputs_ok, values_ok = train(run), True, True
    want_meta = metadata(run)
    for key, value in want_meta.items():
        if key != "generator" and stored_meta.get(key) != value:
            print(f"{path}: metadata {key} is {stored_meta.get(key)!r}, "
                  f"the run says {value!r}")
            inputs_ok = False
    if set(stored) != set(fresh):
        print(f"{path}: tensors differ: only stored {sorted(set(stored) - set(fresh))}, "
              f"only made {sorted(set(fresh) - set(stored))}")
        return False
    worst = {}
    for key, tensor in fresh.items():
        mine = stored[key]
        if mine.shape != tensor.shape or mine.dtype != tensor.dtype:
            print(f"{path}: {key} is {mine.dtype} {list(mine.shape)}, "
                  f"made {tensor.dtype} {list(tensor.shape)}")
            inputs_ok = False
        elif not key.startswith("expected."):
            if not torch.equal(mine, tensor):
                print(f"{path}: input {key} differs from what the run draws")
                inputs_ok = False
        else:
            worst[key] = (mine - tensor).abs().max().item()
            values_ok = values_ok and worst[key] <= tol
    ok = inputs_ok and values_ok
    print(f"{name}: inputs {'identical' if inputs_ok else 'DIFFER'}; "
          + ", ".join(f"{k} max |diff| {v:.2e}" for k, v in worst.items())
          + f" (tolerance {tol:g}): {'ok' if ok else 'FAIL'}")
    return ok


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawTextHelpFormatter)
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--out", metavar="DIR")
    action.add_argument("--check", metavar="DIR")
    action.add_argument("--list", action="store_true")
    parser.add_argument("--tol", type=float, default=1e-6)
    parser.add_argument("names", nargs="*")
    args = parser.parse_args()
    if args.list:
        for name, run in KNOWN.items():
            print(name, json.dumps(run))
        return 0
    unknown = [n for n in args.names if n not in KNOWN]
    if unknown:
        parser.error(f"unknown run(s) {', '.join(unknown)}; known: {', '.join(KNOWN)}")
    names = args.names or list(RUNS)
    torch.set_num_threads(1)  # one summation order
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        for name in names:
            # Written under a temporary name and renamed: never half a file.
            fd, tmp = tempfile.mkstemp(dir=args.out, suffix=".tmp")
            os.close(fd)
            write_safetensors(tmp, train(KNOWN[name]), metadata(KNOWN[name]))
            os.chmod(tmp, 0o644)
            os.replace(tmp, os.path.join(args.out, name + ".safetensors"))
            print(f"wrote {os.path.join(args.out, name + '.safetensors')}")
        return 0
    results = [check(name, KNOWN[name], args.check, args.tol) for name in names]
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""The DLRM of ember-train --model dlrm (torchrec.models.dlrm.DLRM's layout)
in plain PyTorch on one device, the peer of bench/dlrm_gpu.sh.

No TorchRec (the GPU machine has none): one nn.EmbeddingBag(N_f, D, sum,
sparse gradients) per categorical feature on the device, DenseArch (ReLU
after every layer), InteractionArch (the dense vector and every pairwise dot
in torch.triu_indices(27, 27, 1) order), OverArch (ReLU after every layer
but the last), BCE with logits averaged over the batch, and one optimizer
(torch.optim.SGD or Adagrad, eps 1e-10 as ember's) over every parameter.
Tables start uniform(+-sqrt(1/N_f)) as TorchRec's default, Linear layers as
PyTorch's.

Data: a Criteo TSV file read as ember reads it (label, 13 integer fields,
dense value log(max(x, 0) + 1), 26 hex fields, id int(hex or "0", 16) mod
N_f), the first STEPS x B examples, step s taking examples s*B..(s+1)*B-1 as
one ember trainer does.  Parsed before the clock; each step's batch is copied
from (pinned) host memory to the device, as ember copies its dense features.

Timed as bench/dlrm_gpu.sh times ember-train (its second epoch's line):
--warmup-passes passes (1) over the S steps first, untimed, updates and all,
then one more pass over the same steps on the clock; every step, timed or
not, reads its loss back (as ember's trainer does), and the clock stops
after the last step's (a device synchronization).

    torch_dlrm_gpu.py --data criteo:PATH --steps S --batch-size B
        --embedding-dim D (--num-embeddings N | --num-embeddings-per-feature N0,..,N25)
        --dense-arch-layer-sizes ... --over-arch-layer-sizes ...
        [--optimizer sgd|adagrad] [--lr X] [--device cuda|cpu] [--seed S]
        [--warmup-passes W]

Prints "examples/s X" (the timed pass), "steps S batch B device DEV ...",
"timed pass W+1 of W+1", "loss first A last Z" (the timed pass's).
"""
import argparse
import math
import sys
import time

DENSE, SPARSE = 13, 26


def int_list(text):
    try:
        values = [int(x) for x in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a list of integers") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"'{text}': sizes must be positive")
    return values


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--data", required=True, help="criteo:PATH")
    p.add_argument("--steps", type=int, required=True)
    p.add_argument("--batch-size", type=int, required=True)
    p.add_argument("--embedding-dim", type=int, required=True)
    p.add_argument("--num-embeddings", type=int)
    p.add_argument("--num-embeddings-per-feature", type=int_list)
    p.add_argument("--dense-arch-layer-sizes", type=int_list, required=True)
    p.add_argument("--over-arch-layer-sizes", type=int_list, required=True)
    p.add_argument("--optimizer", choices=["sgd", "adagrad"], default="sgd")
    p.add_argument("--lr", type=float, default=1.0)
    p.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--warmup-passes", type=int, default=1,
                   help="untimed passes over the steps before the timed one (1)")
    a = p.parse_args(argv)
    if not a.data.startswith("criteo:"):
        p.error(f"--data '{a.data}': give criteo:PATH")
    if (a.num_embeddings is None) == (a.num_embeddings_per_feature is None):
        p.error("give one of --num-embeddings and --num-embeddings-per-feature")
    a.rows = a.num_embeddings_per_feature or [a.num_embeddings] * SPARSE
    if len(a.rows) != SPARSE:
        p.error(f"--num-embeddings-per-feature has {len(a.rows)} sizes, not {SPARSE}")
    if a.dense_arch_layer_sizes[-1] != a.embedding_dim:
        p.error("--dense-arch-layer-sizes must end in the embedding dimension")
    if a.over_arch_layer_sizes[-1] != 1 or len(a.over_arch_layer_sizes) < 2:
        p.error("--over-arch-layer-sizes: at least two layers, the last of width 1")
    if a.steps < 1 or a.batch_size < 1:
        p.error("--steps and --batch-size must be positive")
    if a.warmup_passes < 0:
        p.error("--warmup-passes must be 0 or more")
    return a


def read_criteo(path, count, rows):
    """Labels [n], dense [n, 13], ids [n, 26] of the first @count lines."""
    import numpy as np

    labels, ints, ids = [], [], []
    with open(path, "rb") as file:
        for number, line in enumerate(file, 1):
            if len(labels) == count:
                break
            fields = line.rstrip(b"\n").rstrip(b"\r").split(b"\t")
            if len(fields) != 1 + DENSE + SPARSE:
                raise SystemExit(f"{path}:{number}: {len(fields)} fields, not {1 + DENSE + SPARSE}")
            labels.append(fields[0] == b"1")
            ints.append([int(x) if x else 0 for x in fields[1 : 1 + DENSE]])
            ids.append([int(x, 16) if x else 0 for x in fields[1 + DENSE :]])
    if len(labels) < count:
        raise SystemExit(f"{path}: {len(labels)} examples, fewer than the {count} the steps need")
    dense = np.log(np.maximum(np.array(ints, dtype=np.int64), 0).astype(np.float64) + 1.0)
    ids = np.array(ids, dtype=np.uint64) % np.asarray(rows, dtype=np.uint64)
    return (np.array(labels, dtype=np.float32), dense.astype(np.float32), ids.astype(np.int64))


def mlp(torch, widths, relu_last):
    layers = []
    for i in range(len(widths) - 1):
        layers.append(torch.nn.Linear(widths[i], widths[i + 1]))
        if i + 2 < len(widths) or relu_last:
            layers.append(torch.nn.ReLU())
    return torch.nn.Sequential(*layers)


def build(torch, a):
    """The model: its tables, DenseArch, OverArch and the pairs' indices."""
    D, F = a.embedding_dim, SPARSE + 1
    tables = torch.nn.ModuleList()
    for n in a.rows:
        bag = torch.nn.EmbeddingBag(n, D, mode="sum", sparse=True)
        with torch.no_grad():
            bag.weight.uniform_(-math.sqrt(1.0 / n), math.sqrt(1.0 / n))
        tables.append(bag)
    dense_arch = mlp(torch, [DENSE] + a.dense_arch_layer_sizes, True)
    over_arch = mlp(torch, [D + F * (F - 1) // 2] + a.over_arch_layer_sizes, False)
    model = torch.nn.ModuleDict({"tables": tables, "dense": dense_arch, "over": over_arch})
    return model.to(a.device), torch.triu_indices(F, F, offset=1, device=a.device)


def forward(torch, model, triu, dense, ids, offsets):
    dense_out = model["dense"](dense)
    pooled = [bag(ids[t], offsets) for t, bag in enumerate(model["tables"])]
    combined = torch.stack([dense_out] + pooled, dim=1)  # [B, 27, D]
    dots = torch.bmm(combined, combined.transpose(1, 2))[:, triu[0], triu[1]]
    return model["over"](torch.cat([dense_out, dots], dim=1)).squeeze(1)


def host_batches(torch, a, data):
    labels, dense, ids = (torch.from_numpy(x) for x in data)
    pin = a.device == "cuda"
    out = []
    for s in range(a.steps):
        part = slice(s * a.batch_size, (s + 1) * a.batch_size)
        batch = (labels[part], dense[part], ids[part].t().contiguous())  # [26, B]
        out.append(tuple(x.pin_memory() if pin else x for x in batch))
    return out


def main(argv):
    a = parse_args(argv)
    import torch

    if a.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("torch_dlrm_gpu: --device cuda, but torch sees no CUDA GPU")
    torch.manual_seed(a.seed)
    data = read_criteo(a.data[len("criteo:") :], a.steps * a.batch_size, a.rows)
    batches = host_batches(torch, a, data)
    model, triu = build(torch, a)
    if a.optimizer == "adagrad":
        opt = torch.optim.Adagrad(model.parameters(), lr=a.lr, eps=1e-10)
    else:
        opt = torch.optim.SGD(model.parameters(), lr=a.lr)
    loss_fn = torch.nn.BCEWithLogitsLoss()
    offsets = torch.arange(a.batch_size, device=a.device)
    on = lambda x: x.to(a.device, non_blocking=True)  # noqa: E731

    def step(batch):
        labels, dense, ids = (on(x) for x in batch)
        loss = loss_fn(forward(torch, model, triu, dense, ids, offsets), labels)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss.item()

    for _ in range(a.warmup_passes):  # ember's first epoch: the same steps, off the clock
        for batch in batches:
            step(batch)
    if a.device == "cuda":
        torch.cuda.synchronize()
    losses = []
    start = time.perf_counter()
    for batch in batches:
        losses.append(step(batch))
    if a.device == "cuda":
        torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    print(f"examples/s {a.steps * a.batch_size / seconds:.1f}")
    print(f"steps {a.steps} batch {a.batch_size} device {a.device} torch {torch.__version__}")
    print(f"timed pass {a.warmup_passes + 1} of {a.warmup_passes + 1}")
    print(f"loss first {losses[0]:.6f} last {losses[-1]:.6f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

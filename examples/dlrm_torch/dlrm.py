#!/usr/bin/env python3
"""TorchRec's DLRM (torchrec.models.dlrm.DLRM: DenseArch, SparseArch,
InteractionArch, OverArch) in plain PyTorch over ember's
EmbeddingBagCollection: the tables on ember's parameter servers, the dense
half under PyTorch DDP (gloo) between the trainers.

    ember-run -n $((T + P)) python3 examples/dlrm_torch/dlrm.py --trainers T --ps P \\
        --data criteo:FILE --embedding-dim 16 --num-embeddings-per-feature N0,...,N25 \\
        --dense-arch-layer-sizes 64,16 --over-arch-layer-sizes 64,1 \\
        --batch-size 4096 --optimizer adagrad --lr 0.05 [--steps S] [--save FILE]

It trains as `ember-train --model dlrm` with the same flags does: the same
initial weights (--seed S: table F drawn by ember from seed S + F,
DenseArch and OverArch by PyTorch's default Linear draw from splitmix64
streams S and S + 1), the same batches (trainer t of T takes the examples
i % T == t of the files; step s of an epoch each trainer's next B; an
epoch's short remainder dropped), the same synchronous step (dense
gradients averaged over the trainers, each table's row gradients summed,
then SGD or Adagrad on both), so the two end within rounding of each
other.  --save writes the final state_dict under TorchRec's names as
safetensors (metadata "losses": [steps][trainers]), as ember-train's --save.

Checkpoints (--checkpoint-dir DIR [--checkpoint-every N], --resume DIR):
the library's, the tables on the PS and each trainer's dense weights and
optimizer state as its named tensors; a resumed job goes on from the step
after and ends with the weights of an uninterrupted one.

The dense all-reduce's TCP port: --dist-port, else EMBER_INIT's port + 1.
"""
import argparse
import json
import os
import struct
import sys
import time

import numpy as np
import torch

import ember.torch as et

DENSE, SPARSE = 13, 26


# ---- the data (ember's Criteo contract) -----------------------------------------


def read_criteo(spec, rows, trainer, trainers):
    """This trainer's examples (i % trainers == trainer, in file order):
    labels [n] float32, dense [n][13] float32, ids [26][n] int64, and the
    examples of every trainer."""
    if not spec.startswith("criteo:"):
        raise SystemExit(f"--data {spec}: criteo:PATH[,PATH...] is wanted")
    lines = []
    for path in spec[len("criteo:"):].split(","):
        with open(path, "r", encoding="utf-8") as fh:
            lines.extend(fh.read().splitlines())
    mine = lines[trainer::trainers]
    n = len(mine)
    labels = np.empty(n, dtype=np.float32)
    dense = np.empty((n, DENSE), dtype=np.float64)
    ids = np.empty((SPARSE, n), dtype=np.int64)
    mods = [int(r) for r in rows]
    for i, line in enumerate(mine):
        f = line.split("\t")
        if len(f) != 1 + DENSE + SPARSE:
            raise SystemExit(f"--data: example {i * trainers + trainer}: {len(f)} fields")
        labels[i] = float(f[0])
        dense[i] = [max(int(x), 0) if x else 0 for x in f[1:1 + DENSE]]
        for c in range(SPARSE):
            x = f[1 + DENSE + c]
            ids[c, i] = (int(x, 16) if x else 0) % mods[c]
    return labels, np.log(dense + 1.0).astype(np.float32), ids, len(lines)


def step_plan(n, trainers, batch, steps, epochs):
    """[(epoch, step within it)]: whole steps of every trainer only (as
    ember's Criteo stream: n // (batch x trainers) an epoch)."""
    per_epoch = n // (batch * trainers)
    if per_epoch == 0:
        raise SystemExit(f"--data holds fewer examples than one step of batch {batch}")
    total = per_epoch * epochs if steps is None else min(steps, per_epoch * epochs)
    return [divmod(k, per_epoch) for k in range(total)]


# ---- the model (TorchRec's names) -----------------------------------------------


class Perceptron(torch.nn.Module):
    def __init__(self, fan_in, fan_out):
        super().__init__()
        self._linear = torch.nn.Linear(fan_in, fan_out)

    def forward(self, x):
        return torch.relu(self._linear(x))


class MLP(torch.nn.Module):
    def __init__(self, fan_in, sizes):
        super().__init__()
        widths = [fan_in] + list(sizes)
        self._mlp = torch.nn.Sequential(*[Perceptron(widths[i], widths[i + 1])
                                          for i in range(len(sizes))])

    def forward(self, x):
        return self._mlp(x)


class DenseArch(torch.nn.Module):
    def __init__(self, in_features, layer_sizes):
        super().__init__()
        self.model = MLP(in_features, layer_sizes)

    def forward(self, x):
        return self.model(x)


class SparseArch(torch.nn.Module):
    """The collection's pooled features as [B, F, D]."""

    def __init__(self, embedding_bag_collection):
        super().__init__()
        self.embedding_bag_collection = embedding_bag_collection
        self.sparse_feature_names = embedding_bag_collection.feature_names()

    def forward(self, features):
        pooled = self.embedding_bag_collection(features).to_dict()
        values = [pooled[f] for f in self.sparse_feature_names]
        batch = values[0].shape[0]
        return torch.cat(values, dim=1).reshape(batch, len(values), -1)


class InteractionArch(torch.nn.Module):
    def __init__(self, num_sparse_features):
        super().__init__()
        f = num_sparse_features + 1
        self.register_buffer("triu_indices", torch.triu_indices(f, f, offset=1),
                             persistent=False)

    def forward(self, dense_features, sparse_features):
        combined = torch.cat((dense_features.unsqueeze(1), sparse_features), dim=1)
        interactions = torch.bmm(combined, torch.transpose(combined, 1, 2))
        flat = interactions[:, self.triu_indices[0], self.triu_indices[1]]
        return torch.cat((dense_features, flat), dim=1)


class OverArch(torch.nn.Module):
    def __init__(self, in_features, layer_sizes):
        super().__init__()
        self.model = torch.nn.Sequential(MLP(in_features, layer_sizes[:-1]),
                                         torch.nn.Linear(([in_features] + layer_sizes)[-2],
                                                         layer_sizes[-1]))

    def forward(self, x):
        return self.model(x)


class DLRM(torch.nn.Module):
    """torchrec.models.dlrm.DLRM: logits [B, 1] of (dense [B, 13], a KJT)."""

    def __init__(self, embedding_bag_collection, dense_in_features, dense_arch_layer_sizes,
                 over_arch_layer_sizes):
        super().__init__()
        dims = {c.embedding_dim for c in embedding_bag_collection.embedding_bag_configs()}
        if len(dims) != 1 or dense_arch_layer_sizes[-1] not in dims:
            raise ValueError("DLRM: every table's dim and DenseArch's last layer alike")
        d = dims.pop()
        f = len(embedding_bag_collection.feature_names())
        self.sparse_arch = SparseArch(embedding_bag_collection)
        self.dense_arch = DenseArch(dense_in_features, dense_arch_layer_sizes)
        self.inter_arch = InteractionArch(f)
        self.over_arch = OverArch(d + f * (f + 1) // 2, over_arch_layer_sizes)

    def forward(self, dense_features, sparse_features):
        embedded_dense = self.dense_arch(dense_features)
        embedded_sparse = self.sparse_arch(sparse_features)
        concatenated = self.inter_arch(embedded_dense, embedded_sparse)
        return self.over_arch(concatenated)


def splitmix_uniform(seed, n):
    """ember_rng_uniform's first @n draws of the stream at state @seed."""
    with np.errstate(over="ignore"):
        k = np.arange(1, n + 1, dtype=np.uint64)
        z = np.uint64(seed) + k * np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
    return (z >> np.uint64(11)).astype(np.float64) * 2.0 ** -53


def ember_linear_init(linears, seed):
    """PyTorch's default Linear draw as ember-train draws it: U(-1/sqrt(in),
    1/sqrt(in)), each layer's weight then bias, one splitmix64 stream."""
    n = sum(m.weight.numel() + m.bias.numel() for m in linears)
    u = splitmix_uniform(seed, n)
    at = 0
    with torch.no_grad():
        for m in linears:
            bound = np.float64(np.float32(1.0) / np.sqrt(np.float32(m.in_features)))
            for p in (m.weight, m.bias):
                vals = ((2.0 * u[at:at + p.numel()] - 1.0) * bound).astype(np.float32)
                p.copy_(torch.from_numpy(vals).view_as(p))
                at += p.numel()


def linears(module):
    return [m for m in module.modules() if isinstance(m, torch.nn.Linear)]


# ---- safetensors (ember-train's --save format) -------------------------------------


def write_safetensors(path, tensors, meta):
    header, blobs, offset = {"__metadata__": meta}, [], 0
    for name, value in tensors.items():
        blob = np.ascontiguousarray(value.detach().numpy(), dtype="<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(value.shape),
                        "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as fh:
        fh.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))
    os.replace(tmp, path)


# ---- the job ----------------------------------------------------------------------


def int_list(text):
    return [int(x) for x in text.split(",") if x]


def parse(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--trainers", type=int, default=2)
    p.add_argument("--ps", type=int, default=1)
    p.add_argument("--data", required=True)
    p.add_argument("--embedding-dim", type=int, default=16)
    p.add_argument("--num-embeddings", type=int)
    p.add_argument("--num-embeddings-per-feature", type=int_list)
    p.add_argument("--dense-arch-layer-sizes", type=int_list, default=[64, 16])
    p.add_argument("--over-arch-layer-sizes", type=int_list, default=[64, 1])
    p.add_argument("--batch-size", type=int, default=4096)
    p.add_argument("--steps", type=int)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--optimizer", choices=["sgd", "adagrad"], default="sgd")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--sharding", choices=["row", "table"], default="row")
    p.add_argument("--staleness", type=int, default=0)
    p.add_argument("--save")
    p.add_argument("--checkpoint-dir")
    p.add_argument("--checkpoint-every", type=int, default=0)
    p.add_argument("--resume")
    p.add_argument("--stop-after", type=int,
                   help="leave after this many steps of the run (a job cut short)")
    p.add_argument("--dist-port", type=int)
    p.add_argument("--dense-sync", choices=["ddp", "ember"], default="ddp",
                   help="the dense half's data parallelism: PyTorch's DDP (gloo) or "
                        "ember's allreduce (ember.torch.DenseSync, no process group)")
    args = p.parse_args(argv)
    if args.num_embeddings_per_feature is None:
        args.num_embeddings_per_feature = [args.num_embeddings or 100000] * SPARSE
    if len(args.num_embeddings_per_feature) != SPARSE:
        p.error(f"--num-embeddings-per-feature: {SPARSE} sizes")
    return args


def dense_optimizer(args, params):
    if args.optimizer == "sgd":
        return torch.optim.SGD(params, lr=args.lr)
    return torch.optim.Adagrad(params, lr=args.lr, lr_decay=0.0, initial_accumulator_value=0.0,
                               eps=1e-10)


def dist_url(args):
    if args.dist_port:
        return f"tcp://127.0.0.1:{args.dist_port}"
    init = os.environ.get("EMBER_INIT", "")
    host, _, port = init.rpartition(":")
    if not init.startswith("tcp://") or not port.isdigit():
        raise SystemExit("--dist-port: needed (no EMBER_INIT tcp://HOST:PORT to take PORT + 1 "
                         "from)")
    return f"{host}:{int(port) + 1}"


def main(argv):
    args = parse(argv)
    torch.set_num_threads(max(1, int(os.environ.get("EMBER_TORCH_THREADS", "1"))))
    et.init(trainers=args.trainers, num_ps=args.ps)
    if et.is_ps():
        et.serve()
        return 0
    trainer = et.role()[1]
    labels, dense, ids, total = read_criteo(args.data, args.num_embeddings_per_feature, trainer,
                                            args.trainers)
    plan = step_plan(total, args.trainers, args.batch_size, args.steps, args.epochs)
    use_ddp = args.dense_sync == "ddp"
    if use_ddp:
        torch.distributed.init_process_group("gloo", init_method=dist_url(args), rank=trainer,
                                             world_size=args.trainers)
    ckpt = None
    start = 0
    if args.resume:
        info = et.checkpoint.find(args.resume)
        start = info.step
    names = [f"t_cat_{f}" for f in range(SPARSE)]
    tables = [et.EmbeddingBagConfig(name=n, embedding_dim=args.embedding_dim,
                                    num_embeddings=rows, feature_names=[n],
                                    pooling=et.PoolingType.SUM)
              for n, rows in zip(names, args.num_embeddings_per_feature)]
    ebc = et.EmbeddingBagCollection(
        tables, optimizer={"kind": args.optimizer, "lr": args.lr},
        sharding="row_wise" if args.sharding == "row" else "table_wise",
        staleness=args.staleness, seed=args.seed, start_step=start)
    model = DLRM(ebc, DENSE, args.dense_arch_layer_sizes, args.over_arch_layer_sizes)
    ember_linear_init(linears(model.dense_arch), args.seed)
    ember_linear_init(linears(model.over_arch), args.seed + 1)
    if use_ddp:
        ddp, sync = torch.nn.parallel.DistributedDataParallel(model), None
    else:
        ddp, sync = model, et.DenseSync(model.parameters())
    opt = dense_optimizer(args, model.parameters())
    if args.resume:
        et.checkpoint.restore(info, ebc, model=model, optimizer=opt)
    if args.checkpoint_dir:
        ckpt = et.checkpoint.Checkpoint(args.checkpoint_dir, every=args.checkpoint_every,
                                        start_step=start)

    ones = torch.ones(SPARSE * args.batch_size, dtype=torch.int32)
    dense_t, labels_t, ids_t = (torch.from_numpy(a) for a in (dense, labels, ids))

    def batch_of(s):
        lo, hi = s * args.batch_size, (s + 1) * args.batch_size
        kjt = et.KeyedJaggedTensor(keys=names, values=ids_t[:, lo:hi].reshape(-1), lengths=ones)
        return dense_t[lo:hi], kjt, labels_t[lo:hi]

    losses = []
    end = len(plan) if args.stop_after is None else min(len(plan), start + args.stop_after)
    nxt = batch_of(plan[start][1]) if start < end else None
    began = time.perf_counter()
    for k in range(start, end):
        if ckpt is not None:
            ckpt.step_begin(k, last=k + 1 == end)
        x, kjt, y = nxt
        with ebc.step_context() as step:
            logits = ddp(x, kjt).squeeze(1)
            loss = torch.nn.functional.binary_cross_entropy_with_logits(logits, y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            if sync is not None:
                sync.average_gradients()
            if k + 1 < end:
                nxt = batch_of(plan[k + 1][1])
                step.prefetch(nxt[1])
            opt.step()
        losses.append(loss.item())
        if ckpt is not None and ckpt.due(k + 1):
            ckpt.save(k + 1, ebc, model=model, optimizer=opt)
    seconds = time.perf_counter() - began
    steps_run = end - start
    if ckpt is not None:
        ckpt.finish(end)
        ckpt.close()
    ebc.sync("dlrm.end")
    if use_ddp:
        gathered = [torch.zeros(steps_run) for _ in range(args.trainers)]
        torch.distributed.all_gather(gathered, torch.tensor(losses, dtype=torch.float32))
    else:
        gathered = list(sync.gather(torch.tensor(losses, dtype=torch.float32)))
    if trainer == 0:
        rate = steps_run * args.batch_size * args.trainers / seconds if seconds > 0 else 0.0
        print(f"dlrm_torch: {steps_run} steps of {args.trainers} x {args.batch_size} in "
              f"{seconds:.3f} s: {rate:.1f} examples/s, last loss {losses[-1] if losses else 0:.6f}",
              flush=True)
        if args.save:
            per_step = torch.stack(gathered, dim=1)  # [steps][trainers]
            meta = {"losses": ",".join(repr(float(v)) for v in per_step.reshape(-1).tolist()),
                    "losses_shape": f"{per_step.shape[0]},{per_step.shape[1]}"}
            write_safetensors(args.save, model.state_dict(), meta)
    if use_ddp:
        torch.distributed.barrier()
    else:
        et.barrier("dlrm.done")
        sync.close()
    ebc.close()
    if use_ddp:
        torch.distributed.destroy_process_group()
    et.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

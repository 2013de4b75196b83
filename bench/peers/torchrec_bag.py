#!/usr/bin/env python3
"""TorchRec on ember-train's tutorial model (one large table), as its peer.

The model ember-train trains without --model: EmbeddingBag(rows, dim, sum)
-> Linear(dim, classes) -> cross-entropy (mean over a trainer's bags), SGD.
Here T processes (torch.multiprocessing.spawn) form a gloo process group; the
table is one EmbeddingBagCollection table wrapped in DistributedModelParallel
with an explicit row-wise plan (TorchRec's planner offers row-wise only on
cuda/tpu), updated by TorchRec's fused SGD in the backward pass (FBGEMM's
EXACT_SGD through apply_optimizer_in_backward); the Linear layer is replicated
under DDP with torch.optim.SGD. The tables' gradients are summed over the
trainers, as ember's (sparse_reduce sum; TorchRec's own default is the mean).

The batches are ember's: --batches is the file bench/peers/tutorial_batches
writes (t{T}.s{S}.indices/offsets/targets, drawn by ember's own data source
for the same flags), rank t trains on trainer t's batch of every step. Every
step's tensors are built before anything is timed.

Prints (rank 0) `bags/s X` over the steps after --warmup-steps (each timed
interval starts and ends at a barrier: every rank's), and a RESULT line;
with --losses every trainer's loss at every step. --save-init FILE writes
the initial weights under ember-train's --save names, so that ember-train
--init FILE on the same batches trains the same model from the same start
(tests/bench/test_bench.sh train_vs_torchrec compares their losses).
"""

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torchrec_dlrm import (Clock, PeerError, free_port, positive_int, quiet,  # noqa: E402
                           write_safetensors)

TABLE, FEATURE = "t_bag", "bag"
MODULE = "ebc"
IGNORE = -100  # torch.nn.functional.cross_entropy's ignore_index: a padding bag


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--batches", required=True, help="tutorial_batches' file")
    p.add_argument("--dim", default="64", help="D (64)")
    p.add_argument("--lr", default="0.05", help="learning rate, table and dense (0.05)")
    p.add_argument("--steps", default=None, help="steps (default: all the file holds)")
    p.add_argument("--warmup-steps", default="10", help="first steps left out of the timing (10)")
    p.add_argument("--seed", default="0", help="torch.manual_seed on every rank (0)")
    p.add_argument("--threads", default=None, help="torch threads per process (cores / T)")
    p.add_argument("--port", default=None, help="rendezvous port (a free one)")
    p.add_argument("--pipeline", default="sparse-dist", choices=["sparse-dist", "none"],
                   help="the loop: TrainPipelineSparseDist (dlrm_main's) or plain")
    p.add_argument("--save-init", default=None,
                   help="write the initial weights under ember-train's --save names "
                        "(emb.weight, fc.weight, fc.bias), for its --init")
    p.add_argument("--losses", action="store_true",
                   help="print every trainer's loss at every step (rank 0)")
    a = p.parse_args(argv)
    a.dim = positive_int("--dim", a.dim, 65536)
    try:
        a.lr = float(a.lr)
    except ValueError:
        raise PeerError(f"--lr '{a.lr}' is not a number") from None
    if not 0 < a.lr < float("inf"):
        raise PeerError(f"--lr {a.lr} is not a positive finite number")
    a.warmup_steps = 0 if a.warmup_steps == "0" else positive_int("--warmup-steps", a.warmup_steps)
    a.seed = 0 if a.seed == "0" else positive_int("--seed", a.seed, 2**63 - 1)
    a.threads = None if a.threads is None else positive_int("--threads", a.threads, 1024)
    a.port = None if a.port is None else positive_int("--port", a.port, 65535)
    if a.save_init is not None and not os.access(os.path.dirname(os.path.abspath(a.save_init)),
                                                 os.W_OK):
        raise PeerError(f"--save-init: {a.save_init}: its folder is not writable")
    read_header(a)
    a.steps = a.file_steps if a.steps is None else positive_int("--steps", a.steps, a.file_steps)
    return a


def meta_int(path, meta, key, lo, hi):
    text = meta.get(key)
    if text is None or not text.isdigit() or not lo <= int(text) <= hi:
        raise PeerError(f"--batches {path}: metadata '{key}' is '{text}', not an integer from "
                        f"{lo} to {hi}")
    return int(text)


def read_header(a):
    """The file's sizes (rows, classes, trainers, steps) from its metadata,
    and every batch tensor's name, dtype and rank checked, before any process
    starts."""
    from safetensors import safe_open

    if not os.path.isfile(a.batches):
        raise PeerError(f"--batches: {a.batches}: no such file")
    try:
        with safe_open(a.batches, framework="pt") as f:
            meta = f.metadata() or {}
            have = {n: (f.get_slice(n).get_dtype(), f.get_slice(n).get_shape()) for n in f.keys()}
    except Exception as e:  # safetensors reports a bad file as a SafetensorError
        raise PeerError(f"--batches {a.batches}: not a safetensors file: {e}") from None
    if meta.get("producer") != "tutorial_batches":
        raise PeerError(f"--batches {a.batches}: not written by tutorial_batches")
    a.rows = meta_int(a.batches, meta, "rows", 1, 2**47)
    a.classes = meta_int(a.batches, meta, "classes", 2, 65536)
    a.trainers = meta_int(a.batches, meta, "trainers", 1, 64)
    a.file_steps = meta_int(a.batches, meta, "steps", 1, 2**20)
    for t in range(a.trainers):
        for s in range(a.file_steps):
            for part in ("indices", "offsets", "targets"):
                name = f"t{t}.s{s}.{part}"
                if name not in have:
                    raise PeerError(f"--batches {a.batches}: tensor {name} missing")
                dtype, shape = have[name]
                if dtype != "I64" or len(shape) != 1:
                    raise PeerError(f"--batches {a.batches}: tensor {name} is {dtype} {shape}, "
                                    "not I64 [n]")


def read_batches(a, rank):
    """This rank's batches [(indices, lengths, targets)] for steps [0, steps),
    each checked: offsets start at 0 and never fall or pass n, rows in
    [0, rows), targets in [0, classes)."""
    import torch
    from safetensors import safe_open

    batches = []
    with safe_open(a.batches, framework="pt") as f:
        for s in range(a.steps):
            name = f"t{rank}.s{s}."
            indices, offsets, targets = (f.get_tensor(name + p)
                                         for p in ("indices", "offsets", "targets"))
            n, bags = len(indices), len(offsets)
            ends = torch.cat([offsets[1:], torch.tensor([n])])
            lengths = ends - offsets
            problem = (
                "offsets and targets differ in length" if len(targets) != bags else
                "no bag" if bags == 0 else
                "offsets do not start at 0" if offsets[0] != 0 else
                "offsets fall or pass the indices" if (lengths < 0).any() else
                f"a row outside [0, {a.rows})" if n and (indices.min() < 0 or
                                                         indices.max() >= a.rows) else
                f"a target outside [0, {a.classes})" if (targets.min() < 0 or
                                                         targets.max() >= a.classes) else None)
            if problem:
                raise PeerError(f"--batches {a.batches}: trainer {rank} step {s}: {problem}")
            batches.append((indices, lengths, targets))
    return batches


def bag_counts(a):
    """Bags of each trainer at each step: [step][trainer]."""
    from safetensors import safe_open

    with safe_open(a.batches, framework="pt") as f:
        return [[f.get_slice(f"t{t}.s{s}.offsets").get_shape()[0] for t in range(a.trainers)]
                for s in range(a.steps)]


def make_model(a):
    """The tutorial model; its forward takes a torchrec Batch (sparse
    features: the bags; labels: their classes) and returns (loss, (loss,
    logits)): TrainPipelineSparseDist's progress returns the second half."""
    import torch
    from torchrec import EmbeddingBagCollection
    from torchrec.modules.embedding_configs import EmbeddingBagConfig, PoolingType

    class BagModel(torch.nn.Module):
        def __init__(self):
            super().__init__()
            config = EmbeddingBagConfig(name=TABLE, embedding_dim=a.dim, num_embeddings=a.rows,
                                        feature_names=[FEATURE], pooling=PoolingType.SUM)
            setattr(self, MODULE, EmbeddingBagCollection(tables=[config],
                                                         device=torch.device("meta")))
            self.fc = torch.nn.Linear(a.dim, a.classes)

        def forward(self, batch):
            pooled = getattr(self, MODULE)(batch.sparse_features)[FEATURE]
            logits = self.fc(pooled)
            loss = torch.nn.functional.cross_entropy(logits, batch.labels, ignore_index=IGNORE)
            return loss, (loss.detach(), logits.detach())

    return BagModel()


def wrap_model(a, rank):
    """The model under DMP with the table row-wise over the ranks (rank r
    holds rows [r*ceil(N/T), (r+1)*ceil(N/T))), fused SGD on the table, SGD
    on the rest."""
    import torch
    from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder
    from torchrec.distributed.model_parallel import DistributedModelParallel
    from torchrec.distributed.sharding_plan import construct_module_sharding_plan, row_wise
    from torchrec.distributed.types import ShardingPlan
    from torchrec.optim.apply_optimizer_in_backward import apply_optimizer_in_backward
    from torchrec.optim.keyed import CombinedOptimizer, KeyedOptimizerWrapper
    from torchrec.optim.optimizers import in_backward_optimizer_filter

    model = make_model(a)
    ebc = getattr(model, MODULE)
    apply_optimizer_in_backward(torch.optim.SGD, ebc.parameters(), {"lr": a.lr})
    sharder = EmbeddingBagCollectionSharder()
    module_plan = construct_module_sharding_plan(ebc, {TABLE: row_wise()}, sharder=sharder,
                                                 local_size=a.trainers, world_size=a.trainers,
                                                 device_type="cpu")
    plan = ShardingPlan({MODULE: module_plan})
    dmp = DistributedModelParallel(module=model, device=torch.device("cpu"), plan=plan,
                                   sharders=[sharder])
    dense = KeyedOptimizerWrapper(dict(in_backward_optimizer_filter(dmp.named_parameters())),
                                  lambda params: torch.optim.SGD(params, lr=a.lr))
    if rank == 0:
        kernels = sorted({p.compute_kernel for m in plan.plan.values() for p in m.values()})
        print(f"plan: table {a.rows} x {a.dim} (sum) row-wise over {a.trainers} ranks, kernel "
              f"{','.join(kernels)}, fused sgd lr {a.lr}, gradients summed over trainers; "
              f"Linear({a.dim}, {a.classes}) under DDP, sgd; loop: {a.pipeline}", flush=True)
    return dmp, CombinedOptimizer([dmp.fused_optimizer, dense])


def to_items(batches, counts):
    """Each step's Batch, its bags padded with empty ones, whose target is
    cross_entropy's ignore_index, to the most bags any rank has at that step:
    TorchRec's row-wise backward gathers the pooled gradients of every rank
    with all_gather, which gloo refuses for ranks of different batch sizes.
    An empty bag pools to zeros and is left out of the loss's mean, so the
    loss and every gradient are those of the bags alone."""
    import torch
    from torchrec.datasets.utils import Batch
    from torchrec.sparse.jagged_tensor import KeyedJaggedTensor

    items = []
    for (indices, lengths, targets), count in zip(batches, counts):
        pad = max(count) - len(targets)
        lengths = torch.cat([lengths, torch.zeros(pad, dtype=lengths.dtype)])
        targets = torch.cat([targets, torch.full((pad,), IGNORE, dtype=targets.dtype)])
        kjt = KeyedJaggedTensor.from_lengths_sync(keys=[FEATURE], values=indices,
                                                  lengths=lengths.to(torch.int32))
        items.append(Batch(dense_features=torch.empty(len(targets), 0), sparse_features=kjt,
                           labels=targets))
    return items


def save_init(a, dmp, rank):
    """The weights before the first step, the table gathered from its
    row-wise shards onto rank 0, written there under ember's names."""
    import torch
    import torch.distributed as dist

    state = dmp.state_dict()
    names = {"emb.weight": (f"{MODULE}.embedding_bags.{TABLE}.weight", (a.rows, a.dim)),
             "fc.weight": ("fc.weight", (a.classes, a.dim)), "fc.bias": ("fc.bias", (a.classes,))}
    missing = [theirs for theirs, _ in names.values() if theirs not in state]
    if missing:
        raise PeerError(f"--save-init: the model has no {missing} (it has {sorted(state)})")
    table = torch.empty(a.rows, a.dim) if rank == 0 else None
    state[names["emb.weight"][0]].gather(dst=0, out=table)
    if rank == 0:
        got = {"emb.weight": table, "fc.weight": state["fc.weight"].detach(),
               "fc.bias": state["fc.bias"].detach()}
        write_safetensors(a.save_init, [(ours, shape, lambda ours=ours: got[ours])
                                        for ours, (_, shape) in names.items()],
                          {"producer": "torchrec_bag.py"})
        print(f"saved the initial weights to {a.save_init}", flush=True)
    dist.barrier()


def print_losses(a, losses, rank):
    """Every trainer's loss at every step, gathered on rank 0: `loss step S:
    L0 L1 ...` (S from 1)."""
    import torch
    import torch.distributed as dist

    every = [torch.empty_like(losses) for _ in range(a.trainers)]
    dist.all_gather(every, losses)
    if rank == 0:
        for s in range(a.steps):
            print(f"loss step {s + 1}: " + " ".join(f"{every[t][s].item():.9g}"
                                                   for t in range(a.trainers)), flush=True)


def train(a, dmp, optimizer, items):
    """Every step, the seconds of those from --warmup-steps on, and each
    step's loss."""
    import torch
    from torchrec.distributed import TrainPipelineSparseDist

    clock = Clock(a.warmup_steps)
    pipe = TrainPipelineSparseDist(dmp, optimizer, torch.device("cpu")) \
        if a.pipeline == "sparse-dist" else None
    source, losses = iter(items), torch.zeros(a.steps)
    for step in range(a.steps):
        clock.begin(step)
        if pipe is not None:
            loss = pipe.progress(source)[0]
        else:
            optimizer.zero_grad()
            loss = dmp(items[step])[0]
            loss.backward()
            optimizer.step()
        losses[step] = loss.detach()
    clock.end()
    return clock.seconds, losses


def run(rank, a, port):
    import torch
    import torch.distributed as dist
    from torchrec.distributed.comm_ops import set_gradient_division

    torch.set_num_threads(a.threads or max(1, (os.cpu_count() or 1) // a.trainers))
    torch.manual_seed(a.seed)
    set_gradient_division(False)  # the table's gradients summed over trainers, as ember's
    start = time.perf_counter()
    counts = bag_counts(a)
    items = to_items(read_batches(a, rank), counts)
    bags = [sum(c) for c in counts]
    if rank == 0:
        print(f"data: {a.steps} steps of {a.trainers} trainers from {a.batches}, "
              f"{sum(bags) / a.steps:.1f} bags a step; tensors built in "
              f"{time.perf_counter() - start:.1f} s (not timed)", flush=True)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=a.trainers)
    dmp, optimizer = wrap_model(a, rank)
    if a.save_init is not None:
        save_init(a, dmp, rank)
    seconds, losses = train(a, dmp, optimizer, items)
    loss = losses[-1].item()
    timed = sum(bags[a.warmup_steps:])
    if rank == 0:
        if timed:
            print(f"bags/s {timed / seconds:.1f} (steps {a.warmup_steps + 1}-{a.steps} timed, "
                  f"{min(a.steps, a.warmup_steps)} warm-up steps not; {timed} bags of "
                  f"{a.trainers} trainers in {seconds:.3f} s); last loss {loss:.4f}", flush=True)
            print(f"RESULT bags_per_s={timed / seconds:.1f} bags={timed} seconds={seconds:.3f} "
                  f"steps={a.steps - a.warmup_steps} trainers={a.trainers} rows={a.rows} "
                  f"dim={a.dim}", flush=True)
        else:
            print(f"bags/s - ({a.steps} steps, none after {a.warmup_steps} warm-up steps)",
                  flush=True)
    if a.losses:
        print_losses(a, losses, rank)
    dist.destroy_process_group()


def worker(rank, a, port):
    quiet()
    try:
        run(rank, a, port)
    except PeerError as e:
        print(f"torchrec_bag: rank {rank}: {e}", file=sys.stderr, flush=True)
        sys.exit(2)


def main(argv):
    try:
        a = parse_args(argv)
    except PeerError as e:
        print(f"torchrec_bag: {e}", file=sys.stderr)
        return 2
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    import torch
    import torch.multiprocessing as mp
    import torchrec
    import fbgemm_gpu

    print(f"torchrec_bag: torch {torch.__version__}, torchrec {torchrec.__version__}, "
          f"fbgemm_gpu {fbgemm_gpu.__version__}, {a.trainers} processes on gloo (CPU)", flush=True)
    try:
        mp.spawn(worker, args=(a, a.port or free_port()), nprocs=a.trainers, join=True)
    except mp.ProcessExitedException as e:
        print(f"torchrec_bag: {e}", file=sys.stderr)
        return 2 if e.exit_code == 2 else 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

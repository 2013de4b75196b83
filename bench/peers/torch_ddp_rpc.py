#!/usr/bin/python3
"""PyTorch peer for ember's benchmark: hybrid DDP + distributed RPC on CPU.

Reproduces the behaviour of the PyTorch tutorial "Combining Distributed
DataParallel with Distributed RPC Framework" (an EmbeddingBag on a parameter
server reached through RemoteModule, an nn.Linear replicated over the trainers
with DistributedDataParallel, distributed autograd, DistributedOptimizer(SGD)),
on CPU only, with the sizes exposed as flags so that ember-train can be run
with the same shapes.

World layout for T trainers (default T=2, as the tutorial):
    ranks 0..T-1  trainer0..trainerT-1  (gloo process group among them, DDP)
    rank  T       master                (creates the table, drives training)
    rank  T+1     ps                    (holds the EmbeddingBag)

Timing: each trainer starts its clock after a gloo barrier among the trainers
(all setup done: model, DDP, parameter RRefs, optimizer) and stops it after its
last optimizer step. The master gathers (steps, seconds) from the futures and
prints one machine-readable line:

    RESULT steps_per_s=<sum steps / max seconds> steps=<N> seconds=<S> trainers=<T> rows=<R> dim=<D>

Run with Debian's interpreter (the one that has torch):
    /usr/bin/python3 bench/peers/torch_ddp_rpc.py --epochs 2
"""

import argparse
import os
import random
import sys
import time

import torch
import torch.distributed as dist
import torch.distributed.autograd as dist_autograd
import torch.distributed.rpc as rpc
import torch.multiprocessing as mp
import torch.nn as nn
import torch.optim as optim
from torch.distributed.nn import RemoteModule
from torch.distributed.optim import DistributedOptimizer
from torch.distributed.rpc import RRef, TensorPipeRpcBackendOptions
from torch.nn.parallel import DistributedDataParallel as DDP

LOOPBACK = "127.0.0.1"


def parse_args(argv=None):
    p = argparse.ArgumentParser(
        description="PyTorch RPC + DDP peer (CPU) for ember's benchmark; "
        "defaults are the tutorial's sizes.")
    p.add_argument("--rows", type=int, default=100, help="embedding rows (tutorial: 100)")
    p.add_argument("--dim", type=int, default=16, help="embedding dim (tutorial: 16)")
    p.add_argument("--classes", type=int, default=8, help="output classes (tutorial: 8)")
    p.add_argument("--trainers", type=int, default=2, help="number of trainers (tutorial: 2)")
    p.add_argument("--epochs", type=int, default=100, help="epochs (tutorial: 100)")
    p.add_argument("--batches", type=int, default=10, help="batches per epoch (tutorial: 10)")
    p.add_argument("--min-indices", type=int, default=20, help="min indices per batch (tutorial: 20)")
    p.add_argument("--max-indices", type=int, default=50, help="max indices per batch (tutorial: 50)")
    p.add_argument("--max-bag", type=int, default=10, help="max bag length (tutorial: 10)")
    p.add_argument("--mode", choices=["sum", "mean", "max"], default="sum",
                   help="EmbeddingBag mode (tutorial: sum)")
    p.add_argument("--lr", type=float, default=0.05, help="SGD learning rate (tutorial: 0.05)")
    p.add_argument("--port", type=int, default=29501,
                   help="RPC rendezvous port; the trainers' gloo group uses --pg-port")
    p.add_argument("--pg-port", type=int, default=None,
                   help="gloo process-group port (default: --port + 1)")
    p.add_argument("--seed", type=int, default=0, help="base RNG seed")
    p.add_argument("--rpc-timeout", type=float, default=600.0,
                   help="RPC timeout in seconds (large tables need more than the 60 s default)")
    p.add_argument("--rpc-threads", type=int, default=16,
                   help="TensorPipe worker threads per process (PyTorch default: 16)")
    p.add_argument("--verbose", action="store_true",
                   help="trainers print one line per epoch, as the tutorial does")
    a = p.parse_args(argv)
    if a.pg_port is None:
        a.pg_port = a.port + 1
    if a.trainers < 1:
        p.error("--trainers must be >= 1")
    if not (1 <= a.min_indices <= a.max_indices):
        p.error("need 1 <= --min-indices <= --max-indices")
    if a.rows < 1 or a.dim < 1 or a.classes < 1 or a.max_bag < 1:
        p.error("--rows, --dim, --classes, --max-bag must be >= 1")
    if a.pg_port == a.port:
        p.error("--pg-port must differ from --port")
    return a


def set_env():
    # Loopback only; must be set before RPC / gloo initialisation.
    os.environ["GLOO_SOCKET_IFNAME"] = "lo"
    os.environ["TP_SOCKET_IFNAME"] = "lo"


class HybridModel(nn.Module):
    """Sparse part: RemoteModule(EmbeddingBag) on the PS. Dense part: Linear under DDP."""

    def __init__(self, remote_emb, dim, classes):
        super().__init__()
        self.remote_emb = remote_emb
        # CPU DDP: no device_ids; gradients allreduced over the trainers' gloo group.
        self.fc = DDP(nn.Linear(dim, classes))

    def forward(self, indices, offsets):
        pooled = self.remote_emb.forward(indices, offsets)
        return self.fc(pooled)


def batches(cfg, rank, epoch):
    """Random batches drawn as the tutorial draws them, seeded per (seed, rank, epoch).

    indices count uniform in [min, max]; indices uniform over rows;
    bags of length uniform 1..max_bag (the last bag is cut at the end);
    one target per bag, uniform over classes.
    """
    rng = random.Random((cfg.seed * 1000003 + rank) * 1000003 + epoch)
    gen = torch.Generator()
    gen.manual_seed(rng.getrandbits(62))
    for _ in range(cfg.batches):
        n = rng.randint(cfg.min_indices, cfg.max_indices)
        indices = torch.randint(0, cfg.rows, (n,), dtype=torch.long, generator=gen)
        offsets = []
        start = 0
        while start < n:
            offsets.append(start)
            start += rng.randint(1, cfg.max_bag)
        offsets = torch.tensor(offsets, dtype=torch.long)
        target = torch.randint(0, cfg.classes, (len(offsets),), dtype=torch.long, generator=gen)
        yield indices, offsets, target


def run_trainer(remote_emb, rank, cfg):
    """Runs on trainer `rank` (called by the master over RPC). Returns (steps, seconds, loss)."""
    torch.manual_seed(cfg.seed * 7919 + rank)
    model = HybridModel(remote_emb, cfg.dim, cfg.classes)

    # RRefs of every parameter: the table's (on the PS) plus the local Linear's.
    # (model.parameters() would recurse into the RemoteModule, which refuses.)
    param_rrefs = model.remote_emb.remote_parameters()
    for p in model.fc.parameters():
        param_rrefs.append(RRef(p))
    opt = DistributedOptimizer(optim.SGD, param_rrefs, lr=cfg.lr)
    loss_fn = nn.CrossEntropyLoss()

    # Pre-generate nothing: the tutorial draws batches inside the loop, and so do we.
    dist.barrier()  # all trainers set up: start the clock together
    t0 = time.perf_counter()
    steps = 0
    last_loss = float("nan")
    for epoch in range(cfg.epochs):
        total = 0.0
        n = 0
        for indices, offsets, target in batches(cfg, rank, epoch):
            with dist_autograd.context() as ctx:
                out = model(indices, offsets)
                loss = loss_fn(out, target)
                dist_autograd.backward(ctx, [loss])
                opt.step(ctx)
                # No zero_grad: gradients live in the per-step autograd context.
            steps += 1
            total += loss.item()
            n += 1
        last_loss = total / max(n, 1)
        if cfg.verbose:
            print(f"trainer{rank}: epoch {epoch} done, mean loss {last_loss:.4f}", flush=True)
    seconds = time.perf_counter() - t0
    return steps, seconds, last_loss


def run_master(cfg):
    remote_emb = RemoteModule(
        "ps/cpu",
        nn.EmbeddingBag,
        args=(cfg.rows, cfg.dim),
        kwargs={"mode": cfg.mode},
    )
    futs = [
        rpc.rpc_async(f"trainer{r}", run_trainer, args=(remote_emb, r, cfg), timeout=0)
        for r in range(cfg.trainers)
    ]
    results = [f.wait() for f in futs]
    steps = sum(r[0] for r in results)
    seconds = max(r[1] for r in results)
    rate = steps / seconds if seconds > 0 else float("inf")
    losses = " ".join(f"trainer{i}={r[2]:.4f}" for i, r in enumerate(results))
    per = " ".join(f"trainer{i}={r[0]}/{r[1]:.3f}s" for i, r in enumerate(results))
    print(f"torch_ddp_rpc: {cfg.trainers} trainers, table {cfg.rows}x{cfg.dim} ({cfg.mode}), "
          f"{cfg.epochs} epochs x {cfg.batches} batches; {steps} steps in {seconds:.3f} s "
          f"= {rate:.2f} steps/s; per trainer {per}; last-epoch mean loss {losses}", flush=True)
    print(f"RESULT steps_per_s={rate:.4f} steps={steps} seconds={seconds:.4f} "
          f"trainers={cfg.trainers} rows={cfg.rows} dim={cfg.dim}", flush=True)


def run_worker(rank, cfg):
    set_env()
    torch.set_num_threads(1)
    world = cfg.trainers + 2
    master_rank = cfg.trainers
    opts = TensorPipeRpcBackendOptions(
        init_method=f"tcp://{LOOPBACK}:{cfg.port}",
        rpc_timeout=cfg.rpc_timeout,
        num_worker_threads=cfg.rpc_threads,
    )
    if rank < master_rank:
        # Trainers: gloo group for DDP (its own port), then RPC.
        dist.init_process_group(
            backend="gloo",
            init_method=f"tcp://{LOOPBACK}:{cfg.pg_port}",
            rank=rank,
            world_size=cfg.trainers,
        )
        rpc.init_rpc(f"trainer{rank}", rank=rank, world_size=world, rpc_backend_options=opts)
    elif rank == master_rank:
        rpc.init_rpc("master", rank=rank, world_size=world, rpc_backend_options=opts)
        run_master(cfg)
    else:
        torch.manual_seed(cfg.seed)  # the table is initialised here, on the PS
        rpc.init_rpc("ps", rank=rank, world_size=world, rpc_backend_options=opts)
    rpc.shutdown()  # waits for every outstanding RPC in the world
    if rank < master_rank:
        dist.destroy_process_group()


def main(argv=None):
    cfg = parse_args(argv)
    set_env()
    mp.spawn(run_worker, args=(cfg,), nprocs=cfg.trainers + 2, join=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

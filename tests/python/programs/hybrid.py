"""A hybrid-parallel job in the roles of PyTorch's DDP + RPC tutorial: an
nn.EmbeddingBag on a parameter server through RemoteModule, an nn.Linear
replicated by DDP on the trainers, distributed autograd and a
DistributedOptimizer; one master that starts the trainers by RPC.

The same program runs on PyTorch RPC (--backend torch) or on ember
(--backend ember): only the torch.distributed.{rpc, autograd, nn, optim}
imports differ.  Ranks 0..T-1 are the trainers, T the master, T+1 the PS.

    python3 hybrid.py --trainers 2 [--epochs 100] [--out weights.pt]
        (torch.multiprocessing.spawn, or one rank each under ember-run/srun)
"""
import argparse
import random
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel as DDP
import torch.optim as optim

parser = argparse.ArgumentParser()
parser.add_argument("--backend", choices=["ember", "torch", "local"], default="ember",
                    help="local: no RPC at all, each trainer its own table (a ceiling)")
parser.add_argument("--trainers", type=int, default=2)
parser.add_argument("--epochs", type=int, default=100)
parser.add_argument("--rpc-port", type=int, default=29501)
parser.add_argument("--ddp-port", type=int, default=29500)
parser.add_argument("--seed", type=int, default=0)
parser.add_argument("--out", default=None, help="trainer 0 saves the final weights here")
parser.add_argument("--optimizer", default="sgd", choices=["sgd", "adagrad", "adam"])
parser.add_argument("--progress", action="store_true", help="a line per trainer and epoch")
ARGS = parser.parse_args()

if ARGS.backend == "ember":
    import ember.torch.distributed.autograd as dist_autograd
    import ember.torch.distributed.rpc as rpc
    from ember.torch.distributed.nn import RemoteModule
    from ember.torch.distributed.optim import DistributedOptimizer
    from ember.torch.distributed.rpc import RRef, TensorPipeRpcBackendOptions
elif ARGS.backend == "torch":
    import torch.distributed.autograd as dist_autograd
    import torch.distributed.rpc as rpc
    from torch.distributed.nn import RemoteModule
    from torch.distributed.optim import DistributedOptimizer
    from torch.distributed.rpc import RRef, TensorPipeRpcBackendOptions

NUM_EMBEDDINGS, EMBEDDING_DIM, NUM_CLASSES = 100, 16, 8
BATCHES_PER_EPOCH = 10


class Hybrid(torch.nn.Module):
    """The sparse part on the PS, the dense part here under DDP."""

    def __init__(self, emb):
        super().__init__()
        self.emb = emb
        self.fc = DDP(torch.nn.Linear(EMBEDDING_DIM, NUM_CLASSES))

    def forward(self, indices, offsets):
        return self.fc(self.emb.forward(indices, offsets))


def batches(rank):
    """BATCHES_PER_EPOCH random bags of ids with their labels."""
    for _ in range(BATCHES_PER_EPOCH):
        n = random.randint(20, 50)
        indices = torch.LongTensor(n).random_(0, NUM_EMBEDDINGS)
        starts, at = [], 0
        while at < n:
            starts.append(at)
            at += random.randint(1, 10)
        yield indices, torch.LongTensor(starts), torch.LongTensor(len(starts)).random_(NUM_CLASSES)


def optimizer_args():
    if ARGS.optimizer == "sgd":
        return optim.SGD, {"lr": 0.05}
    if ARGS.optimizer == "adagrad":
        return optim.Adagrad, {"lr": 0.05}
    return optim.Adam, {"lr": 0.01}


def train(emb, rank):
    model = Hybrid(emb)
    rrefs = model.emb.remote_parameters()
    for p in model.fc.parameters():
        rrefs.append(RRef(p))
    cls, kwargs = optimizer_args()
    opt = DistributedOptimizer(cls, rrefs, **kwargs)
    loss_fn = torch.nn.CrossEntropyLoss()
    steps, start = 0, time.perf_counter()
    for epoch in range(ARGS.epochs):
        for indices, offsets, target in batches(rank):
            with dist_autograd.context() as context_id:
                loss = loss_fn(model(indices, offsets), target)
                dist_autograd.backward(context_id, [loss])
                opt.step(context_id)
            steps += 1
        if ARGS.progress:
            print(f"trainer{rank} epoch {epoch}", flush=True)
    elapsed = time.perf_counter() - start
    print(f"trainer{rank}: {steps} steps in {elapsed:.3f} s: {steps / elapsed:.1f} steps/s "
          f"(loss {loss.item():.6f})", flush=True)
    if rank == 0 and ARGS.out:
        torch.save({"emb": rrefs[0].to_here(), "fc.weight": model.fc.module.weight.detach(),
                    "fc.bias": model.fc.module.bias.detach(), "steps_per_s": steps / elapsed},
                   ARGS.out)
    return steps


def train_local(rank):
    """The same steps with the table in this process: what the trainers'
    own PyTorch work (DDP, loss, backward, optimizer) allows, no RPC."""
    model = Hybrid(torch.nn.EmbeddingBag(NUM_EMBEDDINGS, EMBEDDING_DIM, mode="sum"))
    cls, kwargs = optimizer_args()
    opt = cls(list(model.emb.parameters()) + list(model.fc.parameters()), **kwargs)
    loss_fn = torch.nn.CrossEntropyLoss()
    steps, start = 0, time.perf_counter()
    for epoch in range(ARGS.epochs):
        for indices, offsets, target in batches(rank):
            opt.zero_grad()
            loss = loss_fn(model(indices, offsets), target)
            loss.backward()
            opt.step()
            steps += 1
    elapsed = time.perf_counter() - start
    print(f"trainer{rank}: {steps} steps in {elapsed:.3f} s: {steps / elapsed:.1f} steps/s "
          f"(loss {loss.item():.6f})", flush=True)


def worker(rank, world_size):
    torch.manual_seed(ARGS.seed + rank)
    random.seed(ARGS.seed + rank)
    trainers = world_size - 2
    if ARGS.backend == "local":
        if rank < trainers:
            dist.init_process_group(backend="gloo", rank=rank, world_size=trainers,
                                    init_method=f"tcp://localhost:{ARGS.ddp_port}")
            train_local(rank)
        return
    options = TensorPipeRpcBackendOptions()
    options.init_method = f"tcp://localhost:{ARGS.rpc_port}"
    if rank == trainers:
        rpc.init_rpc("master", rank=rank, world_size=world_size, rpc_backend_options=options)
        emb = RemoteModule("ps", torch.nn.EmbeddingBag, args=(NUM_EMBEDDINGS, EMBEDDING_DIM),
                           kwargs={"mode": "sum"})
        futs = [rpc.rpc_async(f"trainer{t}", train, args=(emb, t)) for t in range(trainers)]
        for fut in futs:
            fut.wait()
    elif rank < trainers:
        dist.init_process_group(backend="gloo", rank=rank, world_size=trainers,
                                init_method=f"tcp://localhost:{ARGS.ddp_port}")
        rpc.init_rpc(f"trainer{rank}", rank=rank, world_size=world_size,
                     rpc_backend_options=options)
    else:
        rpc.init_rpc("ps", rank=rank, world_size=world_size, rpc_backend_options=options)
    rpc.shutdown()


if __name__ == "__main__":
    mp.spawn(worker, args=(ARGS.trainers + 2,), nprocs=ARGS.trainers + 2, join=True)

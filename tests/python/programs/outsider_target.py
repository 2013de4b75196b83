"""A 3-rank job (trainer0, master, ps) that an outsider attacks: trainer0
and the master write their worker addresses (in clear: what the store keeps
sealed) to DIR, keep answering calls until DIR/outsider.done appears, then
show the job went on (calls, and a training step through the PS).

    python3 outsider_target.py DIR PORT
"""
import operator
import os
import sys
import time

import torch
import torch.multiprocessing as mp

import ember.torch.distributed.autograd as dist_autograd
import ember.torch.distributed.rpc as rpc
from ember.torch.distributed.nn import RemoteModule
from ember.torch.distributed.optim import DistributedOptimizer
from ember.torch.distributed.rpc import TensorPipeRpcBackendOptions

DIR, PORT = sys.argv[1], int(sys.argv[2])


def publish(name):
    address = rpc.agent.current().job.worker_address()
    with open(os.path.join(DIR, name + ".tmp"), "wb") as f:
        f.write(address)
    os.rename(os.path.join(DIR, name + ".tmp"), os.path.join(DIR, name))


def step(emb):
    opt = DistributedOptimizer(torch.optim.SGD, emb.remote_parameters(), lr=0.5)
    before = emb.remote_parameters()[0].to_here()
    with dist_autograd.context() as ctx:
        loss = emb(torch.tensor([3, 4]), torch.tensor([0])).sum()
        dist_autograd.backward(ctx, [loss])
        opt.step(ctx)
    after = emb.remote_parameters()[0].to_here()
    return sorted((after - before).abs().sum(dim=1).nonzero().flatten().tolist())


def worker(rank, world_size):
    options = TensorPipeRpcBackendOptions(init_method=f"tcp://127.0.0.1:{PORT}")
    name = ["trainer0", "master", "ps"][rank]
    rpc.init_rpc(name, rank=rank, world_size=world_size, rpc_backend_options=options)
    if name != "ps":
        publish(name + ".addr")
    if name == "master":
        done = os.path.join(DIR, "outsider.done")
        while not os.path.exists(done):  # answering calls meanwhile
            assert rpc.rpc_sync("ps", operator.add, args=(1, 1)) == 2
            time.sleep(0.05)
        assert rpc.rpc_sync("trainer0", operator.add, args=(2, 3)) == 5
        emb = RemoteModule("ps", torch.nn.EmbeddingBag, args=(10, 4))
        assert rpc.rpc_sync("trainer0", step, args=(emb,)) == [3, 4]
        print("JOB WENT ON", flush=True)
    rpc.shutdown()


if __name__ == "__main__":
    mp.spawn(worker, args=(3,), nprocs=3, join=True)

"""PyTorch RPC's calls and every refusal of ember's front end, checked from
the master of a 3-rank job (trainer0, master, ps).  Prints `PASS name` per
check and `ALL PASSED` at the end; exits 1 at the first failure.

    python3 rpc_checks.py PORT
"""
import operator
import sys
import types

import numpy as np
import torch
import torch.multiprocessing as mp

import ember.torch.distributed.autograd as dist_autograd
import ember.torch.distributed.rpc as rpc
from ember.torch.distributed.nn import RemoteModule
from ember.torch.distributed.optim import DistributedOptimizer
from ember.torch.distributed.rpc import RRef, TensorPipeRpcBackendOptions

PORT = int(sys.argv[1])


def check(name, fn):
    try:
        fn()
    except Exception as exc:
        print(f"FAIL {name}: {type(exc).__name__}: {exc}", flush=True)
        raise SystemExit(1)
    print(f"PASS {name}", flush=True)


def raises(exc_type, *needles):
    """A context manager: the block raises @exc_type mentioning @needles."""
    class Raises:
        def __enter__(self):
            return self

        def __exit__(self, kind, exc, tb):
            if kind is None:
                raise AssertionError(f"no {exc_type.__name__} raised")
            if not issubclass(kind, exc_type):
                return False
            for needle in needles:
                assert needle in str(exc), f"{needle!r} not in {str(exc)!r}"
            return True
    return Raises()


def fail(message):
    raise ValueError(message)


def owned_sum(rref):
    return rref.local_value().sum().item()


def trainer_refusals(emb):
    """On trainer0: bad tensors raise naming the argument; nothing breaks."""
    with raises(TypeError, "input", "float32"):
        emb(torch.tensor([1.0, 2.0]), torch.tensor([0]))
    with raises(IndexError, "input", "id 100"):
        emb(torch.tensor([1, 100]), torch.tensor([0]))
    with raises(IndexError, "input", "id -1"):
        emb(torch.tensor([-1]), torch.tensor([0]))
    with raises(ValueError, "input", "3-D"):
        emb(torch.zeros(2, 2, 2, dtype=torch.long))
    with raises(ValueError, "offsets", "offsets[0]"):
        emb(torch.tensor([1, 2]), torch.tensor([1]))
    with raises(ValueError, "offsets", "non-decreasing"):
        emb(torch.tensor([1, 2, 3]), torch.tensor([0, 2, 1]))
    with raises(ValueError, "offsets", "required"):
        emb(torch.tensor([1, 2]))
    with raises(ValueError, "per_sample_weights"):
        emb(torch.tensor([1, 2]), torch.tensor([0]), torch.ones(3))
    with raises(RuntimeError, "context_id"):
        dist_autograd.backward(12345, [torch.ones((), requires_grad=True)])
    with dist_autograd.context() as ctx:
        with raises(ValueError, "roots[0]"):
            dist_autograd.backward(ctx, [torch.ones(3, requires_grad=True)])
    with dist_autograd.context() as ctx:  # left without a step: a zero push
        emb(torch.tensor([1, 2]), torch.tensor([0]))
        with raises(RuntimeError, "previous lookup was not stepped"):
            emb(torch.tensor([3]), torch.tensor([0]))
    # The C layer names the argument too, for a strided array.
    job = rpc.agent.current().job
    table = job.table_open(emb._state.table_name)
    ebc = job.ebc_create([("f", table, "sum", -1)])
    ids = np.arange(10, dtype=np.int64)[::2]
    with raises(TypeError, "values", "contiguous"):
        ebc.lookup(ids, 1, lengths=np.array([5], dtype=np.int32))
    with raises(TypeError, "lengths", "int32"):
        ebc.lookup(np.arange(5, dtype=np.int64), 1, lengths=np.array([5], dtype=np.int64))
    with raises(ValueError, "lengths, offsets"):
        ebc.lookup(np.arange(5, dtype=np.int64), 1)
    ebc.destroy()
    table.close()
    # After all that, a real step works: a non-contiguous input is copied,
    # as PyTorch's EmbeddingBag takes it.
    linear = torch.nn.Linear(16, 2)
    opt = DistributedOptimizer(torch.optim.SGD, emb.remote_parameters() +
                               [RRef(p) for p in linear.parameters()], lr=0.1)
    before = emb.remote_parameters()[0].to_here()
    ids = torch.arange(20).reshape(10, 2).t()[0]  # 0, 2, ..., 18: strided
    with dist_autograd.context() as ctx:
        loss = linear(emb(ids, torch.tensor([0, 5]))).sum()
        dist_autograd.backward(ctx, [loss])
        grads = dist_autograd.get_gradients(ctx)
        assert set(grads) == set(linear.parameters()), grads.keys()
        assert linear.weight.grad is None  # the context keeps them, as PyTorch's
        opt.step(ctx)
    after = emb.remote_parameters()[0].to_here()
    changed = (after - before).abs().sum(dim=1).nonzero().flatten().tolist()
    assert changed == list(range(0, 20, 2)), changed
    return "trained"


def forwards_match_pytorch(bag_sum, bag_mean, bag_max, bag_last, emb):
    """On trainer0: every kind of lookup equals PyTorch's own module over
    the same weight (fetched with to_here)."""
    import torch.nn.functional as F
    ids = torch.tensor([3, 1, 4, 1, 5, 9, 2, 6])
    offsets = torch.tensor([0, 3, 3, 7])  # an empty bag among them
    weights = torch.rand(8)
    for module, mode in ((bag_sum, "sum"), (bag_mean, "mean"), (bag_max, "max")):
        w = module.remote_parameters()[0].to_here()
        want = F.embedding_bag(ids, w, offsets, mode=mode)
        got = module(ids, offsets)
        assert torch.allclose(got, want, atol=1e-6), (mode, got, want)
    w = bag_sum.remote_parameters()[0].to_here()
    want = F.embedding_bag(ids, w, offsets, mode="sum", per_sample_weights=weights)
    assert torch.allclose(bag_sum(ids, offsets, weights), want, atol=1e-6)
    two_d = torch.tensor([[1, 2, 3], [4, 5, 6]])
    assert torch.allclose(bag_sum(two_d), F.embedding_bag(two_d, w, mode="sum"), atol=1e-6)
    w = bag_last.remote_parameters()[0].to_here()
    last = torch.tensor([0, 2, 5, 8])
    want = F.embedding_bag(ids, w, last, mode="sum", include_last_offset=True)
    assert torch.allclose(bag_last(ids, last), want, atol=1e-6)
    w = emb.remote_parameters()[0].to_here()
    grid = torch.tensor([[0, 2], [7, 9]])
    got = emb(grid)
    assert got.shape == (2, 2, 4) and torch.equal(got, F.embedding(grid, w)), got
    return "matched"


def master():
    check("rpc_sync by name, rank and WorkerInfo", lambda: (
        rpc.rpc_sync("trainer0", operator.add, args=(2, 3)) == 5 or fail("name"),
        rpc.rpc_sync(0, operator.add, args=(2, 3)) == 5 or fail("rank"),
        rpc.rpc_sync(rpc.get_worker_info("trainer0"), operator.add, (1, 1)) == 2 or fail("info")))
    check("a call to the PS runs there", lambda: (
        rpc.rpc_sync("ps", operator.mul, args=(3, 4)) == 12 or fail("ps")))
    check("rpc_async, wait, then", lambda: (
        rpc.rpc_async("trainer0", torch.add, args=(torch.ones(2), 1)).then(
            lambda f: f.wait() * 2).wait().tolist() == [4.0, 4.0] or fail("then")))

    def rrefs():
        r = rpc.remote("trainer0", torch.ones, args=(3,))
        assert r.owner().name == "trainer0" and r.owner_name() == "trainer0"
        assert r.to_here().tolist() == [1.0, 1.0, 1.0]
        assert rpc.rpc_sync("trainer0", owned_sum, args=(r,)) == 3.0
        with raises(RuntimeError, "local_value", "trainer0"):
            r.local_value()
        mine = RRef(torch.full((2,), 7.0))
        assert mine.is_owner() and mine.local_value().tolist() == [7.0, 7.0]
        assert rpc.rpc_sync("trainer0", torch.Tensor.sum, args=(mine.to_here(),)).item() == 14.0
    check("remote, RRef to_here/local_value/owner", rrefs)

    def remote_exception():
        with raises(ValueError, "boom", "On trainer0"):
            rpc.rpc_sync("trainer0", fail, args=("boom",))
    check("a remote exception comes back as itself", remote_exception)

    def missing_function():
        only_here = types.ModuleType("only_on_the_master")
        exec("def f():\n    return 1\n", only_here.__dict__)
        only_here.f.__module__ = "only_on_the_master"
        sys.modules["only_on_the_master"] = only_here
        with raises(ModuleNotFoundError, "only_on_the_master"):
            rpc.rpc_sync("trainer0", only_here.f)
    check("a function the callee does not have", missing_function)

    def unknown_worker():
        with raises(ValueError, "nobody", "trainer0, master, ps"):
            rpc.rpc_sync("nobody", operator.add, (1, 2))
        with raises(TypeError, "func"):
            rpc.rpc_sync("trainer0", 42)
    check("an unknown worker, a func that is not callable", unknown_worker)

    def module_refusals():
        with raises(ValueError, "module_cls", "Linear"):
            RemoteModule("ps", torch.nn.Linear, args=(4, 4))
        with raises(ValueError, "remote_device", "trainer0"):
            RemoteModule("trainer0", torch.nn.EmbeddingBag, args=(10, 4))
        with raises(ValueError, "remote_device", "cuda"):
            RemoteModule("ps/cuda:0", torch.nn.EmbeddingBag, args=(10, 4))
        with raises(ValueError, "max_norm"):
            RemoteModule("ps", torch.nn.EmbeddingBag, args=(10, 4), kwargs={"max_norm": 1.0})
        with raises(ValueError, "float64"):
            RemoteModule("ps", torch.nn.Embedding, args=(10, 4), kwargs={"dtype": torch.float64})
    check("RemoteModule refusals", module_refusals)

    emb = RemoteModule("ps", torch.nn.EmbeddingBag, args=(100, 16), kwargs={"mode": "sum"})

    def forwards():
        bags = [RemoteModule("ps", torch.nn.EmbeddingBag, args=(10, 4), kwargs={"mode": m})
                for m in ("sum", "mean", "max")]
        last = RemoteModule("ps", torch.nn.EmbeddingBag, args=(10, 4),
                            kwargs={"mode": "sum", "include_last_offset": True})
        plain = RemoteModule("ps", torch.nn.Embedding, args=(10, 4))
        assert rpc.rpc_sync("trainer0", forwards_match_pytorch,
                            args=(*bags, last, plain)) == "matched"
    check("EmbeddingBag (sum, mean, max, weights, 2-D, last offset) and Embedding "
          "lookups equal PyTorch's", forwards)

    def chunked():
        from ember.torch.distributed.nn import remote_module
        saved = remote_module._INLINE_WEIGHT_BYTES
        remote_module._INLINE_WEIGHT_BYTES = 1000  # 31 rows of 8 a chunk
        try:
            weight = torch.arange(1000 * 8, dtype=torch.float32).reshape(1000, 8)
            big = RemoteModule("ps", torch.nn.EmbeddingBag, args=(1000, 8),
                               kwargs={"_weight": weight})
        finally:
            remote_module._INLINE_WEIGHT_BYTES = saved
        assert torch.equal(big.remote_parameters()[0].to_here(), weight)
    check("a large weight comes from the PS in chunks", chunked)

    def optimizer_refusals():
        with raises(ValueError, "RMSprop"):
            DistributedOptimizer(torch.optim.RMSprop, emb.remote_parameters(), lr=0.1)
        with raises(ValueError, "weight_decay"):
            DistributedOptimizer(torch.optim.SGD, emb.remote_parameters(), lr=0.1,
                                 weight_decay=0.01)
        with raises(ValueError, "amsgrad"):
            DistributedOptimizer(torch.optim.Adam, emb.remote_parameters(), amsgrad=True)
        with raises(TypeError, "params_rref[0]"):
            DistributedOptimizer(torch.optim.SGD, [torch.ones(1)], lr=0.1)
        remote_tensor = rpc.remote("trainer0", torch.ones, args=(2,))
        with raises(ValueError, "params_rref[0]", "trainer0"):
            DistributedOptimizer(torch.optim.SGD, [remote_tensor], lr=0.1)
    check("DistributedOptimizer refusals", optimizer_refusals)

    def forward_on_master():
        with raises(RuntimeError, "only a trainer"):
            emb(torch.tensor([1]), torch.tensor([0]))
    check("a lookup on the master is refused", forward_on_master)
    check("bad tensors on a trainer, then a step", lambda: (
        rpc.rpc_sync("trainer0", trainer_refusals, args=(emb,)) == "trained" or fail("step")))
    print("ALL PASSED", flush=True)


def worker(rank, world_size):
    options = TensorPipeRpcBackendOptions(init_method=f"tcp://127.0.0.1:{PORT}")
    name = ["trainer0", "master", "ps"][rank]
    rpc.init_rpc(name, rank=rank, world_size=world_size, rpc_backend_options=options)
    if name == "master":
        master()
    rpc.shutdown()


if __name__ == "__main__":
    mp.spawn(worker, args=(3,), nprocs=3, join=True)

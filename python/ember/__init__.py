"""ember: a parameter-server engine for recommendation models, from Python.

`ember.torch.distributed.{rpc, autograd, nn, optim}` take the names and
signatures of `torch.distributed.{rpc, autograd, nn, optim}`, so a PyTorch
program that trains an embedding table on a parameter server with
RemoteModule, distributed autograd and DistributedOptimizer runs on ember
with its imports changed.  `ember._C` is libember's C API.
"""
from ember import _secret  # noqa: F401  (before libember reads its environment)
from ember._C import EmberError, abi_version

__all__ = ["EmberError", "abi_version"]

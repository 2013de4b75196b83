"""ember.torch.distributed.rpc: torch.distributed.rpc's API over ember.

    init_rpc(name, backend=None, rank=-1, world_size=None, rpc_backend_options=None)
    rpc_sync(to, func, args=None, kwargs=None, timeout=-1.0)
    rpc_async(to, func, args=None, kwargs=None, timeout=-1.0) -> Future
    remote(to, func, args=None, kwargs=None, timeout=-1.0) -> RRef
    shutdown(graceful=True, timeout=0)
    RRef, WorkerInfo, get_worker_info, TensorPipeRpcBackendOptions

Calls go over ember's transport (UCX), to ranks that proved the job secret
only.  Each rank's role in ember comes from its name: "ps", "ps1", "ps_..."
and "parameter_server..." serve tables (RemoteModule places them there),
"trainer..." and "worker..." are trainers (they look tables up), any other
name is a coordinator such as "master".  ember lays a job out as trainers
first, the others, then the PS: a program whose ranks are numbered
otherwise is refused at init_rpc, naming the rank out of place.
"""
import os

from ember.torch.distributed.rpc import agent as _agent_mod
from ember.torch.distributed.rpc.agent import Future, RemoteError, WorkerInfo
from ember.torch.distributed.rpc.options import (
    DEFAULT_RPC_TIMEOUT_SEC,
    TensorPipeRpcBackendOptions,
    init_url as _init_url,
)
from ember.torch.distributed.rpc.rref import RRef

__all__ = ["init_rpc", "rpc_sync", "rpc_async", "remote", "shutdown", "RRef", "WorkerInfo",
           "get_worker_info", "TensorPipeRpcBackendOptions", "BackendType", "Future",
           "RemoteError", "is_available"]


class BackendType:
    TENSORPIPE = "TENSORPIPE"


def is_available():
    return True


def init_rpc(name, backend=None, rank=-1, world_size=None, rpc_backend_options=None):
    """Join the job as @name (rank @rank of @world_size): every rank's
    init_rpc returns once all have joined."""
    if not isinstance(name, str) or not name:
        raise ValueError("name: a non-empty string")
    if world_size is None:
        world_size = int(os.environ.get("WORLD_SIZE", "-1"))
    if rank is None or rank < 0:
        rank = int(os.environ.get("RANK", "-1"))
    if not isinstance(rank, int) or not isinstance(world_size, int) or \
            not 0 <= rank < world_size:
        raise ValueError(f"rank, world_size: rank {rank} of {world_size} is not a rank")
    options = rpc_backend_options or TensorPipeRpcBackendOptions()
    timeout = getattr(options, "rpc_timeout", DEFAULT_RPC_TIMEOUT_SEC)
    role = getattr(options, "ember_role", None) or _agent_mod.role_of(name)
    _agent_mod.start(name, rank, world_size, _init_url(getattr(options, "init_method", None)),
                     role, timeout)


def _check_func(func, what):
    if not callable(func):
        raise TypeError(f"{what}: func must be callable, got {type(func).__name__}")


def rpc_async(to, func, args=None, kwargs=None, timeout=-1.0):
    """Run func(*args, **kwargs) on @to; a Future of its result."""
    agent = _agent_mod.current("rpc_async")
    _check_func(func, "rpc_async")
    return agent.call(to, ("call", func, tuple(args or ()), dict(kwargs or {})), timeout)


def rpc_sync(to, func, args=None, kwargs=None, timeout=-1.0):
    """rpc_async(...).wait()."""
    return rpc_async(to, func, args, kwargs, timeout).wait()


def remote(to, func, args=None, kwargs=None, timeout=-1.0):
    """Run func on @to and keep its result there: an RRef owned by @to."""
    agent = _agent_mod.current("remote")
    _check_func(func, "remote")
    owner = agent.rank_of(to, "to")
    rref_id = agent.new_id()
    created = agent.call(owner, ("remote", rref_id, func, tuple(args or ()), dict(kwargs or {})),
                         timeout)
    return RRef._remote(agent, owner, rref_id, getattr(func, "__name__", "value"), created)


def shutdown(graceful=True, timeout=0):
    """Leave the job.  graceful: first every rank's calls complete: this
    rank keeps answering others until every rank that is not a PS has
    called shutdown and nothing of its own is in flight; a PS serves until
    all of them left."""
    agent = _agent_mod.current("shutdown")
    agent.shutdown(graceful)


def get_worker_info(worker_name=None):
    agent = _agent_mod.current("get_worker_info")
    if worker_name is None:
        return WorkerInfo(agent.name, agent.rank)
    return WorkerInfo(worker_name, agent.rank_of(worker_name, "worker_name"))

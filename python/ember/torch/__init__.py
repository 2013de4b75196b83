"""ember for PyTorch users.

`ember.torch.distributed`: PyTorch RPC's names (rpc, autograd, nn, optim).

The recsys model API, in TorchRec's names:

    ember.torch.init(trainers=T, num_ps=P)   join the job (ember-run -n T+P ...)
    ember.torch.serve()                      a PS rank: serve until the trainers leave
    ember.torch.EmbeddingBagCollection(tables, optimizer=..., staleness=..., ...)
    ember.torch.EmbeddingBagConfig, PoolingType, KeyedJaggedTensor, KeyedTensor
    ember.torch.Checkpoint                   the library's checkpoints (tables + state)
    ember.torch.DenseSync(params)            the dense half over ember's allreduce (DDP's role)
"""
from ember.torch._job import (barrier, current_job, init, is_ps, is_trainer, role, serve,
                              shutdown)
from ember.torch.ebc import (EmbeddingBagCollection, EmbeddingBagConfig, PoolingType,
                             StepContext, optimizer_config)
from ember.torch.sparse import KeyedJaggedTensor, KeyedTensor
from ember.torch import checkpoint  # noqa: E402
from ember.torch.checkpoint import Checkpoint
from ember.torch.dense import DenseSync

__all__ = ["init", "serve", "shutdown", "barrier", "current_job", "role", "is_ps", "is_trainer",
           "EmbeddingBagCollection", "EmbeddingBagConfig", "PoolingType", "StepContext",
           "KeyedJaggedTensor", "KeyedTensor", "optimizer_config", "checkpoint", "Checkpoint",
           "DenseSync"]

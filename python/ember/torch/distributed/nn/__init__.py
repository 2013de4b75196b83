"""ember.torch.distributed.nn: RemoteModule."""
from ember.torch.distributed.nn.remote_module import RemoteModule

__all__ = ["RemoteModule"]

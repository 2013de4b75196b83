"""ember.torch.distributed: PyTorch's torch.distributed.{rpc, autograd, nn,
optim} names over ember's transport and parameter servers.

`torch.distributed` itself (init_process_group, DistributedDataParallel)
stays PyTorch's.  Under a launcher that starts every rank itself (ember-run:
EMBER_RANK / EMBER_WORLD_SIZE; srun: SLURM_PROCID / SLURM_NTASKS with more
than one task), a program written for torch.multiprocessing.spawn runs
unchanged: once this package is imported, `spawn(fn, args, nprocs)` runs
`fn(rank, *args)` for this process's launcher rank only (nprocs must be the
launcher's world size).
"""
from ember.torch.distributed import _launch

_launch.install()

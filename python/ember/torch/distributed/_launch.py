"""torch.multiprocessing.spawn under a launcher that started the ranks."""
import os


def launcher_rank():
    """(rank, world_size) the launcher gave this process, or None."""
    rank, world = os.environ.get("EMBER_RANK"), os.environ.get("EMBER_WORLD_SIZE")
    if rank is None or world is None:
        rank, world = os.environ.get("SLURM_PROCID"), os.environ.get("SLURM_NTASKS")
        if world is not None and world.isdigit() and int(world) <= 1:
            return None  # one task (an allocation's shell): spawn as usual
    if rank is None or world is None:
        return None
    try:
        return int(rank), int(world)
    except ValueError:
        raise ValueError(f"the launcher's rank {rank!r} / world size {world!r} are not integers")


def _spawn_as_launched(fn, args=(), nprocs=1, join=True, daemon=False, start_method="spawn"):
    rank, world = launcher_rank()
    if nprocs != world:
        raise ValueError(
            f"spawn: nprocs is {nprocs} but the launcher started {world} ranks "
            f"(run it with {nprocs} ranks: ember-run -n {nprocs}, srun -n {nprocs})")
    fn(rank, *args)
    return None


def install():
    if launcher_rank() is None:
        return
    import torch.multiprocessing as mp
    mp.spawn = _spawn_as_launched

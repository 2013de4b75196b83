"""The process's ember job for the recsys model API (ember.torch.init).

One job per process: the one ember.torch.init joined, else the RPC agent's
when rpc.init_rpc was called (ember.torch.distributed.rpc), so a program
that uses both shares one job.
"""
import os

from ember import _C

_job = None


def init(trainers=None, num_ps=None, *, rank=-1, world_size=-1, name=None, init_url=None):
    """Join the job as rank @rank of @world_size (-1: the launcher's,
    EMBER_RANK / EMBER_WORLD_SIZE under ember-run or srun): ranks 0 ..
    trainers - 1 are trainers, the last @num_ps the parameter servers (the
    ranks between, if any, others such as a "master").  @trainers None:
    EMBER_TRAINERS, else every rank but the PS; @num_ps None: EMBER_NUM_PS,
    else 1.  Returns the job (ember._C.Job).  A PS rank then calls serve().
    With rpc.init_rpc called first, its job is returned (the arguments must
    then be None)."""
    global _job
    if _job is not None and not _job.left:
        raise RuntimeError("ember.torch.init: this process joined a job already")
    agent = _rpc_agent()
    if agent is not None:
        if trainers is not None or num_ps is not None:
            raise ValueError("trainers, num_ps: rpc.init_rpc laid the job out already "
                             "(call ember.torch.init() without them)")
        _job = agent.job
        return _job
    if num_ps is None:
        num_ps = int(os.environ.get("EMBER_NUM_PS", "1"))
    if trainers is None:
        env = os.environ.get("EMBER_TRAINERS")
        if env is not None:
            trainers = int(env)
        else:
            world = world_size if world_size > 0 else int(os.environ.get("EMBER_WORLD_SIZE", "-1"))
            if world <= num_ps:
                raise ValueError("trainers: give it (no launcher world size to count it from)")
            trainers = world - num_ps
    for arg, value in (("trainers", trainers), ("num_ps", num_ps)):
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"{arg}: a positive int, got {value!r}")
    _job = _C.join(trainers=trainers, num_ps=num_ps, rank=rank, world_size=world_size,
                   name=name, init_url=init_url)
    return _job


def _rpc_agent():
    try:
        from ember.torch.distributed.rpc import agent
    except ImportError:
        return None
    return agent._agent


def current_job(what="this call"):
    """The job of ember.torch.init, or of rpc.init_rpc."""
    if _job is not None and not _job.left:
        return _job
    agent = _rpc_agent()
    if agent is not None and not agent.job.left:
        return agent.job
    raise RuntimeError(f"{what}: no ember job (call ember.torch.init first)")


def role(job=None):
    """("trainer" | "ps" | "other", index) of this rank."""
    job = job or current_job("ember.torch.role")
    return job.role(job.rank)


def is_trainer(job=None):
    return role(job)[0] == "trainer"


def is_ps(job=None):
    return role(job)[0] == "ps"


def serve():
    """A PS rank: serve the job's tables until every other rank left, then
    leave."""
    global _job
    job = current_job("ember.torch.serve")
    if not is_ps(job):
        raise RuntimeError(f"ember.torch.serve: rank {job.rank} is a {role(job)[0]}, not a PS")
    try:
        job.serve()
    finally:
        if job is _job:
            _job = None


def barrier(name="ember.torch"):
    """Every rank but the PS meets (ember_job_barrier)."""
    current_job("ember.torch.barrier").barrier(name)


def shutdown(ok=True):
    """Leave the job (a trainer's tables and collections closed first)."""
    global _job
    if _job is not None:
        job, _job = _job, None
        job.leave(ok)

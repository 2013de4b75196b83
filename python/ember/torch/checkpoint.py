"""The library's checkpoints (<ember/checkpoint.h>) for the recsys model API:
the tables on the PS (their rows and optimizer state, written by each PS)
and each trainer's model and optimizer state as its named tensors.

    ckpt = ember.torch.checkpoint.Checkpoint(root, every=N, start_step=K)
    for step in range(K, steps):
        ckpt.step_begin(step, last=step + 1 == steps)
        ... one training step ...
        if ckpt.due(step + 1):
            ckpt.save(step + 1, ebc, model=model, optimizer=opt)
    ckpt.finish(steps); ckpt.close()

    info = ember.torch.checkpoint.find(root)   # the newest complete one
    ebc = EmbeddingBagCollection(..., start_step=info.step)
    ember.torch.checkpoint.restore(info, ebc, model=model, optimizer=opt)

Every trainer calls each of these (the trainers meet every step, as a
dense all-reduce makes them).  A trainer's file holds "model.<name>" for
the model's state_dict without the collection's tables and
"optimizer.<param index>.<state>" for the optimizer's state, as float32.
"""
from collections import namedtuple

import torch

from ember import _C
from ember.torch import _job

CheckpointInfo = namedtuple("CheckpointInfo", "dir step trainers num_ps")


def _collections(model):
    from ember.torch.ebc import EmbeddingBagCollection
    if model is None:
        return []
    return [m for m in model.modules() if isinstance(m, EmbeddingBagCollection)]


def dense_state_dict(model):
    """@model's state_dict without its collections' tables (on the PS)."""
    ebcs = _collections(model)
    for e in ebcs:
        e._export_tables = False
    try:
        return model.state_dict()
    finally:
        for e in ebcs:
            e._export_tables = True


class Checkpoint:
    """The job's checkpoints under @root (every @every steps, the last
    step's, and on request; @keep complete ones kept); @start_step: a
    resumed run's first step."""

    def __init__(self, root, every=0, keep=1, start_step=0, job=None):
        self._job = job or _job.current_job("Checkpoint")
        self._ckpt = _C.checkpoint_open(self._job, root, every=every, keep=keep,
                                        start_step=start_step)

    def step_begin(self, step, last=False):
        """Before step @step (@last: the run's last).  Trainer 0 names the
        checkpoints here and waits for every rank to take them, which a
        trainer does only inside an ember call: the trainers then meet (an
        ember barrier), so none is inside another library's collective
        (DDP's all-reduce) meanwhile."""
        self._ckpt.step_begin(step, last=last)
        self._job.barrier("ember.ckpt.step")

    def due(self, steps):
        return self._ckpt.due(steps)

    def stops(self, steps):
        return self._ckpt.stops(steps)

    def save(self, steps, ebc=None, model=None, optimizer=None, tensors=None, meta=None):
        """This trainer's file of the checkpoint after @steps steps: @model's
        dense state, @optimizer's state and @tensors ({name: tensor}); the
        tables are the PS's part.  Once step @steps - 1 is done."""
        out = []

        def add(name, t):
            t = t.detach().to(torch.float32).contiguous()
            out.append((name, t.reshape(-1).numpy(), tuple(t.shape)))

        if model is not None:
            for k, v in dense_state_dict(model).items():
                add(f"model.{k}", v)
        if optimizer is not None:
            for idx, state in optimizer.state_dict()["state"].items():
                for k, v in state.items():
                    add(f"optimizer.{idx}.{k}", v if isinstance(v, torch.Tensor)
                        else torch.tensor(float(v)))
        for k, v in (tensors or {}).items():
            add(f"user.{k}", v)
        if ebc is not None:
            ebc.step()  # the step's push made before its file is written
        self._ckpt.save(steps, out, meta=meta or {})

    def finish(self, steps):
        """The coordinator waits for every checkpoint up to @steps."""
        self._ckpt.finish(steps)

    def close(self):
        self._ckpt.close()


def find(path):
    """The newest complete checkpoint under @path (a root or a step
    directory), every file checked: a CheckpointInfo."""
    return CheckpointInfo(*_C.checkpoint_find(path))


def read_trainer(info, trainer, meta_keys=()):
    """({name: float32 tensor}, {key: value}) of trainer @trainer's file."""
    raw, meta = _C.checkpoint_read_trainer(info.dir, info.step, trainer, meta_keys=meta_keys)
    tensors = {k: torch.frombuffer(bytearray(b), dtype=torch.float32).reshape(shape)
               for k, (shape, b) in raw.items()}
    return tensors, meta


def restore(info, ebc=None, model=None, optimizer=None, job=None):
    """Resume from @info: trainer 0 has every PS restore the tables (the
    collections created first), then each trainer loads its model's dense
    state and its optimizer's state from its file.  Collective over the
    trainers.  Returns the file's user tensors {name: tensor}."""
    job = job or _job.current_job("restore")
    kind, trainer = job.role(job.rank)
    if kind != "trainer":
        raise RuntimeError(f"restore: rank {job.rank} is a {kind}, not a trainer")
    if info.trainers and info.trainers != job.trainers:
        raise ValueError(f"info: the checkpoint has {info.trainers} trainers, the job "
                         f"{job.trainers}")
    if trainer == 0:
        _C.checkpoint_restore_tables(job, info.dir)
    job.barrier("ember.ckpt.restore")
    tensors, _ = read_trainer(info, trainer)
    if model is not None:
        state = {k[len("model."):]: v for k, v in tensors.items() if k.startswith("model.")}
        want = dense_state_dict(model)
        missing = sorted(set(want) - set(state))
        extra = sorted(set(state) - set(want))
        if missing or extra:
            raise ValueError(f"model: the checkpoint's state differs (missing {missing}, "
                             f"unexpected {extra})")
        ebcs = _collections(model)
        for e in ebcs:
            e._export_tables = False
        try:
            model.load_state_dict({k: v.to(want[k].dtype) for k, v in state.items()})
        finally:
            for e in ebcs:
                e._export_tables = True
    if optimizer is not None:
        sd = optimizer.state_dict()
        state = {}
        for k, v in tensors.items():
            if k.startswith("optimizer."):
                _, idx, name = k.split(".", 2)
                state.setdefault(int(idx), {})[name] = v
        sd["state"] = state
        optimizer.load_state_dict(sd)
    return {k[len("user."):]: v for k, v in tensors.items() if k.startswith("user.")}

"""ember.torch.DenseSync: data parallelism for a model's dense parameters
over ember's own allreduce (<ember/allreduce.h>), in DDP's role, without a
torch.distributed process group.

    sync = DenseSync(model.parameters())   # every trainer: trainer 0's values everywhere
    loss.backward()
    sync.average_gradients()               # each .grad: the trainers' mean
    optimizer.step()

Every trainer creates it, with the same parameters in the same order (a
collective).  The gradients travel as one flat float32 buffer, reduced in
place; the result is the same bits on every trainer.  A parameter without
a gradient counts as zeros.  `gather(values)` gives every trainer's values
(each trainer's own slot in a [T, ...] buffer of zeros, summed: exact).
"""
import torch

from ember.torch import _job


class DenseSync:
    def __init__(self, params, job=None):
        job = job or _job.current_job("DenseSync")
        self._params = [p for p in params]
        for i, p in enumerate(self._params):
            if not isinstance(p, torch.Tensor) or p.dtype != torch.float32 or \
                    p.device.type != "cpu":
                raise TypeError(f"params[{i}]: float32 CPU parameters, got "
                                f"{getattr(p, 'dtype', type(p).__name__)}")
        trainer, self._trainers = job.role(job.rank)[1], job.trainers
        if job.role(job.rank)[0] != "trainer":
            raise RuntimeError("DenseSync: only the trainers synchronise dense parameters")
        self._trainer = trainer
        self._ar = job.allreduce_create()
        self._flat = torch.zeros(sum(p.numel() for p in self._params), dtype=torch.float32)
        self._broadcast()

    def _broadcast(self):
        """Trainer 0's values on every trainer: the others add zeros."""
        flat = self._flat
        if self._trainer == 0:
            torch.cat([p.detach().reshape(-1) for p in self._params], out=flat)
        else:
            flat.zero_()
        self._ar.allreduce(flat.numpy(), "sum")
        self._scatter(flat, lambda p: p.data)

    def _scatter(self, flat, target):
        at = 0
        for p in self._params:
            n = p.numel()
            target(p).copy_(flat[at:at + n].view_as(p))
            at += n

    def average_gradients(self):
        """Each parameter's .grad becomes the trainers' mean (a missing one
        is created)."""
        flat, at = self._flat, 0
        for p in self._params:
            n = p.numel()
            if p.grad is None:
                flat[at:at + n].zero_()
            else:
                flat[at:at + n].copy_(p.grad.reshape(-1))
            at += n
        self._ar.allreduce(flat.numpy(), "avg")
        for p in self._params:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        self._scatter(flat, lambda p: p.grad)

    def gather(self, values):
        """[T, *values.shape]: every trainer's @values (float32)."""
        values = torch.as_tensor(values, dtype=torch.float32)
        out = torch.zeros((self._trainers,) + tuple(values.shape), dtype=torch.float32)
        out[self._trainer] = values
        self._ar.allreduce(out.reshape(-1).numpy(), "sum")
        return out

    def close(self):
        if self._ar is not None:
            self._ar.destroy()
            self._ar = None

"""ember.torch.distributed.autograd: torch.distributed.autograd's API.

    with autograd.context() as context_id:
        loss = model(...)
        autograd.backward(context_id, [loss])
        optimizer.step(context_id)

A context keeps the step's gradients: those of this rank's own parameters
(get_gradients) and those of the outputs of the RemoteModule lookups made
inside it, which DistributedOptimizer.step(context_id) pushes to the
parameter servers.  The parameters' .grad is left as it was, as PyTorch's
distributed autograd leaves it.  A lookup whose context ends without a step
pushes a zero gradient (the PS must close the lookup: SGD and Adagrad leave
the rows as they were; Adam's moments of those rows decay as for a step).
"""
import itertools
import threading

import torch

from ember.torch.distributed.rpc import agent as _agent_mod

__all__ = ["context", "backward", "get_gradients"]

_contexts = {}
_local = threading.local()
_ids = itertools.count(1)


class _Context:
    def __init__(self, context_id):
        self.id = context_id
        self.grads = {}  # leaf tensor -> its gradient
        self.lookups = []  # _LookupRecord, in the order made

    def finish(self):
        for record in self.lookups:
            record.close()
        self.lookups = []


def current_context():
    """The innermost context entered on this thread, or None."""
    stack = getattr(_local, "stack", None)
    return stack[-1] if stack else None


def get_context(context_id, what):
    if context_id not in _contexts:
        raise RuntimeError(f"{what}: context_id {context_id} is no live autograd context "
                           "(use the id `with autograd.context()` gave)")
    return _contexts[context_id]


class context:
    """with context() as context_id: a distributed autograd context."""

    def __enter__(self):
        agent = _agent_mod.current("autograd.context")
        self._ctx = _Context((agent.rank << 48) | next(_ids))
        _contexts[self._ctx.id] = self._ctx
        if not hasattr(_local, "stack"):
            _local.stack = []
        _local.stack.append(self._ctx)
        return self._ctx.id

    def __exit__(self, *exc):
        _local.stack.remove(self._ctx)
        _contexts.pop(self._ctx.id, None)
        self._ctx.finish()
        return False


def _leaves(roots):
    """Every leaf tensor that accumulates a gradient under @roots."""
    seen, leaves, todo = set(), [], [r.grad_fn for r in roots if r.grad_fn is not None]
    while todo:
        fn = todo.pop()
        if fn is None or fn in seen:
            continue
        seen.add(fn)
        variable = getattr(fn, "variable", None)
        if variable is not None:
            leaves.append(variable)
        todo.extend(next_fn for next_fn, _ in fn.next_functions)
    return leaves


def backward(context_id, roots, retain_graph=False):
    """Backward from @roots (scalars) into the context: this rank's
    parameters' gradients (DDP's allreduce included) and the lookups'."""
    ctx = get_context(context_id, "backward")
    if not isinstance(roots, (list, tuple)) or not roots:
        raise TypeError("roots: a non-empty list of scalar tensors")
    for i, r in enumerate(roots):
        if not isinstance(r, torch.Tensor) or r.numel() != 1:
            raise ValueError(f"roots[{i}]: a scalar tensor")
        if not r.requires_grad:
            raise RuntimeError(f"roots[{i}]: does not require grad (no graph to go back through)")
    leaves = _leaves(roots)
    saved = [(p, p.grad) for p in leaves]
    for p in leaves:
        p.grad = None
    _local.backward_ctx = ctx
    try:
        torch.autograd.backward(list(roots), retain_graph=retain_graph)
    finally:
        _local.backward_ctx = None
        for p, old in saved:
            if p.grad is not None:
                prev = ctx.grads.get(p)
                ctx.grads[p] = p.grad if prev is None else prev + p.grad
            p.grad = old


def backward_context():
    return getattr(_local, "backward_ctx", None)


def get_gradients(context_id):
    """{tensor: gradient} of this rank's parameters in the context."""
    return dict(get_context(context_id, "get_gradients").grads)

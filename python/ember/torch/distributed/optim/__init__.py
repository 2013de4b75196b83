"""ember.torch.distributed.optim: DistributedOptimizer.

DistributedOptimizer(optimizer_class, params_rref, *args, **kwargs): the
RRefs of RemoteModule.remote_parameters() name tables on ember's parameter
servers, whose optimizer becomes optimizer_class's (torch.optim.SGD,
Adagrad or Adam, with the options ember's optimizers have, applied by the PS
to the rows a step touched); RRefs of this rank's own parameters are
stepped by optimizer_class itself.  step(context_id) pushes the context's
lookup gradients to the PS and steps the local parameters with the
context's gradients.
"""
import inspect

import torch

from ember.torch.distributed import autograd as _autograd
from ember.torch.distributed.rpc import agent as _agent_mod
from ember.torch.distributed.rpc.rref import RRef

__all__ = ["DistributedOptimizer", "ps_optimizer"]


def _bound(optimizer_class, args, kwargs):
    """optimizer_class's arguments with its defaults, by name."""
    try:
        sig = inspect.signature(optimizer_class.__init__)
        bound = sig.bind(None, [], *args, **kwargs)
    except TypeError as exc:
        raise TypeError(f"{optimizer_class.__name__}: {exc}") from None
    bound.apply_defaults()
    values = dict(bound.arguments)
    values.pop("self", None)
    values.pop("params", None)
    extra = values.pop("kwargs", None) or {}
    values.update(extra)
    return values


def _must_be(name, values, option, allowed):
    if option in values and values[option] not in allowed:
        raise ValueError(f"DistributedOptimizer: {name}'s {option}={values[option]!r} has no "
                         f"equal on ember's parameter servers (only {allowed[0]!r})")


def _lr(name, values):
    lr = values.get("lr")
    if lr is None or isinstance(lr, torch.Tensor) or not isinstance(lr, (int, float)):
        raise ValueError(f"DistributedOptimizer: {name} needs a number lr, got {lr!r}")
    return float(lr)


def ps_optimizer(optimizer_class, args=(), kwargs=None):
    """ember's PS optimizer ({'kind': ..., ...}) for a torch.optim class and
    its arguments; ValueError naming what ember cannot honour."""
    name = getattr(optimizer_class, "__name__", repr(optimizer_class))
    values = _bound(optimizer_class, args, kwargs or {})
    for option in ("maximize", "differentiable", "capturable", "amsgrad", "fused"):
        _must_be(name, values, option, (False, None))
    _must_be(name, values, "weight_decay", (0, 0.0))
    _must_be(name, values, "foreach", (None, False, True))
    if optimizer_class is torch.optim.SGD:
        return {"kind": "sgd", "lr": _lr(name, values), "momentum": float(values["momentum"]),
                "dampening": float(values["dampening"]), "nesterov": bool(values["nesterov"])}
    if optimizer_class is torch.optim.Adagrad:
        return {"kind": "adagrad", "lr": _lr(name, values),
                "lr_decay": float(values["lr_decay"]),
                "initial_accumulator": float(values["initial_accumulator_value"]),
                "eps": float(values["eps"])}
    if optimizer_class is torch.optim.Adam:
        beta1, beta2 = values["betas"]
        return {"kind": "adam", "lr": _lr(name, values), "beta1": float(beta1),
                "beta2": float(beta2), "eps": float(values["eps"])}
    raise ValueError(f"DistributedOptimizer: ember's parameter servers have no {name} "
                     "(torch.optim.SGD, Adagrad or Adam)")


class DistributedOptimizer:
    def __init__(self, optimizer_class, params_rref, *args, **kwargs):
        from ember.torch.distributed.nn.remote_module import TableWeightRRef
        agent = _agent_mod.current("DistributedOptimizer")
        self._tables, local = [], []
        for i, rref in enumerate(params_rref):
            if isinstance(rref, TableWeightRRef):
                self._tables.append(rref)
            elif isinstance(rref, RRef) and rref._owner == agent.rank:
                value = rref.local_value()
                if not isinstance(value, torch.Tensor) or not value.requires_grad:
                    raise TypeError(f"params_rref[{i}]: a parameter (a tensor that requires "
                                    f"grad), got {type(value).__name__}")
                local.append(value)
            elif isinstance(rref, RRef):
                raise ValueError(f"params_rref[{i}]: {rref!r} is neither a table's weight "
                                 "(RemoteModule.remote_parameters()) nor this rank's own")
            else:
                raise TypeError(f"params_rref[{i}]: an RRef, got {type(rref).__name__}")
        if self._tables:
            config = ps_optimizer(optimizer_class, args, kwargs)
            for rref in self._tables:
                rref.module_state.set_optimizer(agent, config)
        self._local = local
        self._optimizer = optimizer_class(local, *args, **kwargs) if local else None

    def step(self, context_id):
        ctx = _autograd.get_context(context_id, "DistributedOptimizer.step")
        names = {rref.module_state.table_name for rref in self._tables}
        for record in list(ctx.lookups):
            if record.table_name in names:
                record.push()
        if self._optimizer is not None:
            saved = [(p, p.grad) for p in self._local]
            try:
                for p in self._local:
                    p.grad = ctx.grads.get(p)
                self._optimizer.step()
            finally:
                for p, old in saved:
                    p.grad = old

"""RemoteModule(remote_device, module_cls, args, kwargs), as
torch.distributed.nn.RemoteModule, for torch.nn.EmbeddingBag and
torch.nn.Embedding on a parameter-server rank.

The module is constructed on `remote_device` by PyTorch (its initial weight
is PyTorch's, drawn by that process; on a PS without Python, a plain
ember-ps, by the rank that creates the RemoteModule); its weight then becomes a table of
ember's C parameter server in that process (table-wise, asynchronous: each
trainer's step is applied as it comes, as each trainer's
DistributedOptimizer.step applies its own under PyTorch RPC).  forward()
on a trainer looks the table up with autograd: inside a distributed
autograd context the lookup's output gradient is kept in the context and
DistributedOptimizer.step(context_id) pushes it to the PS, whose optimizer
updates the rows the step touched.
"""
import itertools

import numpy as np
import torch

from ember.torch.distributed import autograd as _autograd
from ember.torch.distributed.rpc import agent as _agent_mod
from ember.torch.distributed.rpc import rpc_sync
from ember.torch.distributed.rpc.agent import Future
from ember.torch.distributed.rpc.rref import RRef

_SUPPORTED = (torch.nn.EmbeddingBag, torch.nn.Embedding)
_serial = itertools.count()
_runtimes = {}  # table name -> _Runtime, this process's
_anchor = None


# A weight larger than this comes back from the PS in chunks of this size
# (each its own call), not in one message.
_INLINE_WEIGHT_BYTES = 64 << 20


def _construct(module_cls, args, kwargs, inline_max=None):
    """On the PS: PyTorch builds the module; its weight (or, when larger
    than @inline_max bytes, the key it is kept under here) and settings."""
    module = module_cls(*args, **kwargs)
    name = module_cls.__name__
    if module.max_norm is not None:
        raise ValueError(f"{name}: max_norm renormalises rows on lookup: ember's PS does not")
    if module.scale_grad_by_freq:
        raise ValueError(f"{name}: scale_grad_by_freq has no equal on ember's PS")
    weight = module.weight.detach()
    if weight.dtype != torch.float32 or weight.device.type != "cpu":
        raise ValueError(f"{name}: ember's PS holds float32 CPU tables, not {weight.dtype} on "
                         f"{weight.device}")
    bag = isinstance(module, torch.nn.EmbeddingBag)
    padding = module.padding_idx
    weight, key = weight.contiguous(), None
    if inline_max is not None and weight.numel() * 4 > inline_max:
        agent = _agent_mod.current("RemoteModule")
        key = ("weight",) + agent.new_id()
        agent.owned[key] = weight
        weight = None
    return {"weight": weight, "key": key, "num_embeddings": module.num_embeddings,
            "embedding_dim": module.embedding_dim, "bag": bag,
            "mode": module.mode if bag else "sum",
            "include_last_offset": bool(module.include_last_offset) if bag else False,
            "padding_idx": -1 if padding is None else int(padding)}


def _weight_rows(key, first, count):
    """On the PS: rows [first, first + count) of a weight kept by _construct."""
    return _agent_mod.current("RemoteModule").owned[key][first:first + count].clone()


def _drop_weight(key):
    _agent_mod.current("RemoteModule").owned.pop(key, None)


def _load_in_chunks(on, table, info):
    """The table's rows from the PS's weight, a chunk per call."""
    rows = max(1, _INLINE_WEIGHT_BYTES // (4 * info["embedding_dim"]))
    try:
        for first in range(0, info["num_embeddings"], rows):
            chunk = rpc_sync(on, _weight_rows, args=(info["key"], first, rows))
            table.write_rows(first, chunk.numpy())
    finally:
        rpc_sync(on, _drop_weight, args=(info["key"],))


class _State:
    """What a RemoteModule is, wherever it travels: its table and settings."""

    def __init__(self, table_name, owner, owner_name, info):
        self.table_name, self.owner, self.owner_name = table_name, owner, owner_name
        self.num_embeddings, self.embedding_dim = info["num_embeddings"], info["embedding_dim"]
        self.bag, self.mode = info["bag"], info["mode"]
        self.include_last_offset, self.padding_idx = info["include_last_offset"], info["padding_idx"]

    def runtime(self, agent):
        rt = _runtimes.get(self.table_name)
        if rt is None or rt.agent is not agent:
            rt = _runtimes[self.table_name] = _Runtime(agent, self)
        return rt

    def set_optimizer(self, agent, config):
        return agent.table(self.table_name).set_optimizer(config)


class _Runtime:
    """This process's ebc over the table, and the lookup it has open."""

    def __init__(self, agent, state):
        self.agent, self.state = agent, state
        self.ebc, self.open = None, None

    def collection(self):
        if self.ebc is None:
            if self.agent.role != "trainer":
                raise RuntimeError(
                    f"RemoteModule.forward: only a trainer rank looks tables up on ember; "
                    f"{self.agent.name} is a {self.agent.role} (name it trainer<N> or worker<N>)")
            table = self.agent.table(self.state.table_name)
            self.ebc = self.agent.job.ebc_create(
                [(self.state.table_name, table, self.state.mode, self.state.padding_idx)])
        return self.ebc

    def destroy(self):
        if self.open is not None:
            self.open.close()
        if self.ebc is not None:
            try:
                self.ebc.flush()
            finally:
                self.ebc.destroy()
                self.ebc = None


def release_all(agent):
    for name, rt in list(_runtimes.items()):
        if rt.agent is agent:
            rt.destroy()
            del _runtimes[name]


class _LookupRecord:
    """A training lookup: its output's gradient, pushed at the step."""

    def __init__(self, runtime, lookup, batch_size, dim):
        self.runtime, self.lookup = runtime, lookup
        self.table_name = runtime.state.table_name
        self.shape = (batch_size, dim)
        self.grad = None
        self.done = False

    def add_grad(self, grad):
        grad = grad.detach().to(torch.float32).contiguous()
        self.grad = grad if self.grad is None else self.grad + grad

    def push(self):
        if self.done:
            return
        grad = self.grad if self.grad is not None else torch.zeros(self.shape)
        self.done = True
        try:
            self.lookup.backward(grad.reshape(-1).numpy())
        finally:
            self.lookup.release()
            self.runtime.open = None

    def close(self):
        self.push()


class _LookupFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, anchor, output, record):
        ctx.record = record
        return output.view_as(output)

    @staticmethod
    def backward(ctx, grad):
        ctx.record.add_grad(grad)
        return None, None, None


def _ids(tensor, arg, limit, padding):
    """The ids as a contiguous int64 array (numpy, sharing the tensor's
    memory when it is one already), each checked against the table."""
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"{arg}: a tensor of ids, got {type(tensor).__name__}")
    if tensor.device.type != "cpu":
        raise ValueError(f"{arg}: ember looks up ids from CPU tensors, got one on {tensor.device}")
    if tensor.dtype not in (torch.int64, torch.int32):
        raise TypeError(f"{arg}: int64 or int32 ids, got {tensor.dtype}")
    flat = np.ascontiguousarray(tensor.detach().reshape(-1).numpy(), dtype=np.int64)
    if flat.size and (flat.min() < 0 or flat.max() >= limit):
        bad = (flat < 0) | (flat >= limit)
        if padding >= 0:
            bad &= flat != padding
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise IndexError(f"{arg}: id {int(flat[i])} at position {i} is outside the table's "
                             f"{limit} rows")
    return flat


def _offsets(offsets, n, include_last):
    """ember's offsets (B + 1 of them, the last the end of the ids) and that end."""
    if not isinstance(offsets, torch.Tensor) or offsets.dim() != 1:
        raise ValueError("offsets: a 1-D tensor of bag starts")
    if offsets.dtype not in (torch.int64, torch.int32):
        raise TypeError(f"offsets: int64 or int32, got {offsets.dtype}")
    o = offsets.detach().numpy()
    if include_last:
        if o.size < 1:
            raise ValueError("offsets: include_last_offset needs at least one offset")
        end = int(o[-1])
        full = np.ascontiguousarray(o, dtype=np.int64)
    else:
        end = n
        full = np.empty(o.size + 1, dtype=np.int64)
        full[:-1] = o
        full[-1] = end
    if full.size > 1 and full[0] != 0:
        raise ValueError(f"offsets: offsets[0] must be 0, got {int(full[0])}")
    if end > n or (full.size > 1 and (full[1:] < full[:-1]).any()):
        raise ValueError(f"offsets: not non-decreasing bag starts within the {n} ids")
    return full, end


class RemoteModule(torch.nn.Module):
    """torch.distributed.nn.RemoteModule for nn.EmbeddingBag / nn.Embedding
    on a PS rank of ember (remote_device "ps" or "ps/cpu")."""

    def __init__(self, remote_device, module_cls, args=None, kwargs=None, _module_interface_cls=None):
        super().__init__()
        agent = _agent_mod.current("RemoteModule")
        if module_cls not in _SUPPORTED:
            raise ValueError(f"module_cls: ember's PS serves torch.nn.EmbeddingBag and "
                             f"torch.nn.Embedding, not {getattr(module_cls, '__name__', module_cls)}")
        if not isinstance(remote_device, str):
            raise TypeError("remote_device: a string \"<worker>\" or \"<worker>/cpu\"")
        on, _, device = remote_device.partition("/")
        if device not in ("", "cpu"):
            raise ValueError(f"remote_device: {remote_device!r}: ember's PS tables are on the CPU")
        owner = agent.rank_of(on, "remote_device")
        role, ps_index = agent.job.role(owner)
        if role != "ps":
            raise ValueError(f"remote_device: {on!r} is not a parameter server (ember serves "
                             "tables on ranks named ps, ps<N> or parameter_server...)")
        if agent.role == "ps":
            raise RuntimeError("RemoteModule: a PS cannot create tables (create it on the master)")
        construct_args = (module_cls, tuple(args or ()), dict(kwargs or {}))
        try:
            info = rpc_sync(on, _construct, args=construct_args + (_INLINE_WEIGHT_BYTES,))
        except RuntimeError as exc:
            # A PS without Python (ember-ps): PyTorch builds the module
            # here, so its initial weight is drawn by this rank.
            if "no handler for op" not in str(exc):
                raise
            info = _construct(*construct_args)
        kind = "bag" if info["bag"] else "emb"
        table_name = f"{on[:12]}.r{agent.rank}.{kind}{next(_serial)}"
        inline = info["weight"] is not None
        table = agent.job.table_create(
            table_name, info["num_embeddings"], info["embedding_dim"],
            rows=info["weight"].numpy() if inline else None,
            init="normal" if inline else "zeros", sharding="table_wise", first_ps=ps_index,
            consistency="async", optimizer={"kind": "sgd", "lr": 0.0})
        agent.tables[table_name] = table
        if not inline:
            _load_in_chunks(on, table, info)
        self._init_state(_State(table_name, owner, on, info))

    def _init_state(self, state):
        self._state = state
        self.on = state.owner_name
        self.is_scriptable = False

    @classmethod
    def _rebuild(cls, state):
        m = cls.__new__(cls)
        torch.nn.Module.__init__(m)
        m._init_state(state)
        return m

    def __reduce_ex__(self, protocol):
        return (RemoteModule._rebuild, (self._state,))

    def remote_parameters(self, recurse=True):
        """[RRef] of the table's weight (for DistributedOptimizer)."""
        return [TableWeightRRef(self._state)]

    def get_module_rref(self):
        return TableWeightRRef(self._state)

    def parameters(self, recurse=True):
        raise ValueError("RemoteModule.parameters: the weight is on the PS; use "
                         "remote_parameters()")

    def forward_async(self, *args, **kwargs):
        agent = _agent_mod.current("RemoteModule.forward_async")
        return Future.completed(agent, self.forward(*args, **kwargs))

    def forward(self, input, offsets=None, per_sample_weights=None):
        agent = _agent_mod.current("RemoteModule.forward")
        s = self._state
        rt = s.runtime(agent)
        values, batch, lengths, full, weights, shape = self._batch(input, offsets,
                                                                   per_sample_weights)
        ctx = _autograd.current_context()
        train = ctx is not None and torch.is_grad_enabled()
        if train and rt.open is not None and not rt.open.done:
            raise RuntimeError(
                f"RemoteModule({s.table_name}).forward: its previous lookup was not stepped yet "
                "(DistributedOptimizer.step pushes each lookup; ember keeps one open per module "
                "and trainer)")
        ebc = rt.collection()
        lookup = ebc.lookup(values, batch, lengths=lengths, offsets=full, weights=weights,
                            forward_only=not train)
        out = torch.empty((batch, s.embedding_dim), dtype=torch.float32)
        try:
            lookup.wait(out.reshape(-1).numpy())
        except BaseException:
            if train:
                lookup.backward(torch.zeros(batch * s.embedding_dim).numpy())
            lookup.release()
            raise
        if not train:
            lookup.release()
            return out.reshape(shape)
        record = _LookupRecord(rt, lookup, batch, s.embedding_dim)
        rt.open = record
        ctx.lookups.append(record)
        global _anchor
        if _anchor is None:
            _anchor = torch.zeros((), requires_grad=True)
        return _LookupFn.apply(_anchor, out, record).reshape(shape)

    def _batch(self, input, offsets, per_sample_weights):
        """values, B, lengths | offsets, weights and the output's shape."""
        s = self._state
        values = _ids(input, "input", s.num_embeddings, s.padding_idx)
        lengths = full = weights = None
        if not s.bag:
            if offsets is not None or per_sample_weights is not None:
                raise ValueError("offsets, per_sample_weights: nn.Embedding takes input only")
            batch = values.size
            lengths = np.ones(batch, dtype=np.int32)
            return values, batch, lengths, None, None, tuple(input.shape) + (s.embedding_dim,)
        if input.dim() == 2:
            if offsets is not None:
                raise ValueError("offsets: must be None when input is 2-D (bags of equal size)")
            batch = input.shape[0]
            lengths = np.full(batch, input.shape[1], dtype=np.int32)
        elif input.dim() == 1:
            if offsets is None:
                raise ValueError("offsets: required when input is 1-D")
            full, end = _offsets(offsets, values.size, s.include_last_offset)
            values = values[:end]
            batch = full.size - 1
        else:
            raise ValueError(f"input: 1-D (with offsets) or 2-D, got {input.dim()}-D")
        if per_sample_weights is not None:
            if s.mode != "sum":
                raise ValueError(f"per_sample_weights: only with mode 'sum', this bag is "
                                 f"'{s.mode}'")
            if not isinstance(per_sample_weights, torch.Tensor) or \
                    per_sample_weights.shape != input.shape:
                raise ValueError("per_sample_weights: a tensor of input's shape")
            if not per_sample_weights.is_floating_point():
                raise TypeError(f"per_sample_weights: floats, got {per_sample_weights.dtype}")
            weights = per_sample_weights.detach().reshape(-1)[:values.size].to(torch.float32)
            weights = np.ascontiguousarray(weights.numpy())
        return values, batch, lengths, full, weights, (batch, s.embedding_dim)


class TableWeightRRef(RRef):
    """The RRef of a RemoteModule's weight: a table on the PS."""

    def __init__(self, state):
        self.module_state = state
        self._owner, self._owner_name = state.owner, state.owner_name
        self._id, self._type_name, self._created = ("table", state.table_name), "Parameter", None

    def __reduce__(self):
        return (TableWeightRRef, (self.module_state,))

    def to_here(self, timeout=None):
        agent = _agent_mod.current("RRef.to_here")
        s = self.module_state
        out = torch.empty((s.num_embeddings, s.embedding_dim), dtype=torch.float32)
        agent.table(s.table_name).read_rows(0, s.num_embeddings, out.numpy())
        return out

    def local_value(self):
        raise RuntimeError(f"RRef.local_value: {self.module_state.table_name}'s weight is held "
                           "by ember's C parameter server; use to_here()")

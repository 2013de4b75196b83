"""ember.torch.EmbeddingBagCollection: TorchRec's EmbeddingBagCollection
with its tables on the job's parameter servers.

    tables = [EmbeddingBagConfig(name="t0", embedding_dim=16, num_embeddings=1000,
                                 feature_names=["f0"], pooling=PoolingType.SUM)]
    ebc = EmbeddingBagCollection(tables, optimizer={"kind": "sgd", "lr": 0.1})
    with ebc.step_context() as step:       # one training step
        pooled = ebc(kjt)                   # KeyedTensor: to_dict(), values() [B, sum dims]
        loss = model(pooled).mean()
        loss.backward()                     # the pooled outputs' gradient is kept
        step.prefetch(next_kjt)             # optional: the next step's lookup in flight
    # leaving the context pushed the gradients: the PS apply the tables' optimizer

Trainer 0 creates the tables (placed on every PS of the job, row-wise by
default), the other trainers open them by name.  The PS apply each
table's optimizer once every trainer pushed the step (sync, the trainers'
gradients summed in trainer order); a step's lookup sees the tables as
the previous steps left them, or up to `staleness` steps behind (then the
next step's lookup, prefetched, flies while this step computes).
"""
import enum
import math
from dataclasses import dataclass, field
from typing import Callable, List, Optional

import torch

from ember import _C
from ember.torch import _job
from ember.torch.sparse import KeyedTensor


class PoolingType(enum.Enum):
    """TorchRec's pooling names (and ember's max)."""
    SUM = "SUM"
    MEAN = "MEAN"
    MAX = "MAX"


_POOLING = {PoolingType.SUM: "sum", PoolingType.MEAN: "mean", PoolingType.MAX: "max"}


@dataclass
class EmbeddingBagConfig:
    """TorchRec's EmbeddingBagConfig (field names and order), plus ember's
    init ('uniform': TorchRec's default U(-sqrt(1/N), sqrt(1/N)); 'normal';
    'zeros'), seed (None: the collection's seed + the table's index) and
    padding_idx.  init_fn (a callable on the [N, D] weight, as TorchRec's)
    or weight_init_min/max draw the rows on the creating trainer instead."""
    num_embeddings: int
    embedding_dim: int
    name: str = ""
    data_type: object = None
    feature_names: List[str] = field(default_factory=list)
    weight_init_max: Optional[float] = None
    weight_init_min: Optional[float] = None
    pruning_indices_remapping: object = None
    init_fn: Optional[Callable[[torch.Tensor], Optional[torch.Tensor]]] = None
    need_pos: bool = False
    pooling: PoolingType = PoolingType.SUM
    init: str = "uniform"
    seed: Optional[int] = None
    padding_idx: int = -1


_TORCH_OPTIMIZERS = {"SGD": "sgd", "Adagrad": "adagrad", "Adam": "adam"}


def optimizer_config(optimizer):
    """ember's optimizer dict from a dict ({'kind': ..., 'lr': ...}) or a
    (torch.optim class, kwargs) pair (SGD, Adagrad, Adam)."""
    if isinstance(optimizer, dict):
        return dict(optimizer)
    if isinstance(optimizer, tuple) and len(optimizer) == 2 and isinstance(optimizer[1], dict):
        cls, kw = optimizer
        kind = _TORCH_OPTIMIZERS.get(getattr(cls, "__name__", ""))
        if kind is None:
            raise ValueError(f"optimizer: ember's PS run SGD, Adagrad and Adam, not {cls!r}")
        kw = dict(kw)
        out = {"kind": kind, "lr": kw.pop("lr", 0.01 if kind != "adam" else 0.001)}
        names = {"momentum": "momentum", "dampening": "dampening", "nesterov": "nesterov",
                 "lr_decay": "lr_decay", "initial_accumulator_value": "initial_accumulator",
                 "eps": "eps"}
        for k, v in kw.items():
            if k == "betas":
                out["beta1"], out["beta2"] = v
            elif k == "weight_decay" and v == 0:
                continue
            elif k in names:
                out[names[k]] = v
            else:
                raise ValueError(f"optimizer: ember's {kind} has no {k!r}")
        return out
    raise TypeError("optimizer: a dict {'kind': 'sgd', 'lr': 0.01} or (torch.optim.SGD, "
                    "{'lr': 0.01})")


def _initial_rows(config, seed):
    """[N, D] float32 rows drawn here, or None for the PS to draw."""
    n, d = config.num_embeddings, config.embedding_dim
    if config.init_fn is not None:
        w = torch.empty((n, d), dtype=torch.float32)
        got = config.init_fn(w)
        w = got if isinstance(got, torch.Tensor) else w
        return w.detach().to(torch.float32).contiguous()
    if config.weight_init_min is not None or config.weight_init_max is not None:
        lo = config.weight_init_min if config.weight_init_min is not None else -math.sqrt(1 / n)
        hi = config.weight_init_max if config.weight_init_max is not None else math.sqrt(1 / n)
        g = torch.Generator().manual_seed(seed)
        return torch.empty((n, d), dtype=torch.float32).uniform_(lo, hi, generator=g)
    return None


class _Lookup:
    """One lookup of the collection: its ember lookup, batch and output."""

    def __init__(self, lookup, batch, features_obj):
        self.lookup, self.batch, self.features = lookup, batch, features_obj
        self.out = None  # the pooled output (flat), once waited
        self.pushed = False


class StepContext:
    """A training step of one or more collections: leaving it pushes each
    one's gradients (the pooled outputs' .grad; zeros for an output that
    got none) and releases the step.  On an exception the step is pushed
    with zero gradients (the other trainers' step waits for it) and the
    exception goes on."""

    def __init__(self, *collections):
        self.collections = collections

    def __enter__(self):
        return self

    def prefetch(self, features, collection=None):
        """The next step's lookup now, before this step's gradients are
        pushed: it is sent once the tables may answer it (staleness 0:
        once this step is pushed; K >= 1: at once)."""
        (collection or self.collections[0]).prefetch(features)

    def __exit__(self, exc_type, exc, tb):
        first = None
        for c in self.collections:
            try:
                c.step(zero=exc_type is not None)
            except BaseException as e:  # push every collection, then raise the first
                first = first or e
        if first is not None and exc_type is None:
            raise first
        return False


class EmbeddingBagCollection(torch.nn.Module):
    """EmbeddingBagCollection(tables, device=None, *, optimizer=..., ...)
    over ember's PS.  forward(features) takes a KeyedJaggedTensor (TorchRec's
    or ember.torch's) whose keys are the collection's feature names (any
    order) and returns a KeyedTensor in the collection's feature order.

    Keywords: optimizer (a dict or (torch.optim class, kwargs); SGD lr 0.01),
    sharding 'row_wise' (every PS) | 'table_wise' (table i on PS i % P),
    consistency 'sync' | 'async', staleness (sync: 0..16), reduce 'sum' |
    'mean' (the trainers' row gradients), seed (table i draws from seed + i
    unless its config names one), dtype 'float32' | 'float16' (as stored),
    half_replies, start_step (a resumed job's), cache_rows (rows of this
    trainer's row cache, 0..2^30; 0: none; fp32 replies: see
    <ember/lookup.h>'s ember_ebc_set_cache_rows and cache_stats()), job
    (default: the process's, ember.torch.init)."""

    def __init__(self, tables, device=None, *, optimizer=None, sharding="row_wise",
                 consistency="sync", staleness=0, reduce="sum", seed=0, dtype="float32",
                 half_replies=False, start_step=0, cache_rows=0, job=None):
        super().__init__()
        if isinstance(cache_rows, bool) or not isinstance(cache_rows, int) or \
                not 0 <= cache_rows <= 1 << 30:
            raise ValueError(f"cache_rows: {cache_rows!r} is not a row count in [0, 2^30]")
        if device is not None and torch.device(device).type != "cpu":
            raise ValueError(f"device: ember's collection pools into CPU memory, not {device}")
        tables = list(tables)
        if not tables:
            raise ValueError("tables: at least one EmbeddingBagConfig")
        job = job or _job.current_job("EmbeddingBagCollection")
        kind, index = job.role(job.rank)
        if kind != "trainer":
            raise RuntimeError(f"EmbeddingBagCollection: rank {job.rank} is a {kind}; only "
                               "trainers look tables up (a PS calls ember.torch.serve())")
        self._job, self._configs = job, tables
        opt = optimizer_config(optimizer if optimizer is not None else {"kind": "sgd", "lr": 0.01})
        names, features, feature_names = set(), [], []
        self._tables = {}
        for i, cfg in enumerate(tables):
            if not isinstance(cfg.name, str) or not cfg.name:
                raise ValueError(f"tables: table {i} has no name")
            if cfg.name in names:
                raise ValueError(f"tables: two tables named {cfg.name!r}")
            names.add(cfg.name)
            if not cfg.feature_names:
                raise ValueError(f"tables: {cfg.name!r} has no feature_names")
            if cfg.pooling not in _POOLING:
                raise ValueError(f"tables: {cfg.name!r}: pooling {cfg.pooling!r} is not a "
                                 "PoolingType")
            if cfg.need_pos:
                raise ValueError(f"tables: {cfg.name!r}: need_pos has no equal on ember")
            table_seed = cfg.seed if cfg.seed is not None else seed + i
            if index == 0:
                rows = _initial_rows(cfg, table_seed)
                placement = ({"sharding": "row_wise"} if sharding == "row_wise" else
                             {"sharding": "table_wise", "first_ps": i % job.num_ps}
                             if sharding == "table_wise" else None)
                if placement is None:
                    raise ValueError(f"sharding: 'row_wise' or 'table_wise', not {sharding!r}")
                table = job.table_create(
                    cfg.name, cfg.num_embeddings, cfg.embedding_dim,
                    rows=None if rows is None else rows.numpy(), init=cfg.init, seed=table_seed,
                    dtype=dtype, optimizer=opt, consistency=consistency, staleness=staleness,
                    reduce=reduce, **placement)
            else:
                table = job.table_open(cfg.name)
                got = table.config
                if (got["num_embeddings"], got["embedding_dim"]) != (cfg.num_embeddings,
                                                                   cfg.embedding_dim):
                    raise ValueError(f"tables: {cfg.name!r} is {got['num_embeddings']} x "
                                     f"{got['embedding_dim']} in the job, this trainer's config "
                                     f"says {cfg.num_embeddings} x {cfg.embedding_dim}")
            self._tables[cfg.name] = table
            for f in cfg.feature_names:
                if f in feature_names:
                    raise ValueError(f"tables: feature {f!r} is named twice")
                feature_names.append(f)
                features.append((f, table, _POOLING[cfg.pooling], int(cfg.padding_idx)))
        self._feature_names = feature_names
        self._feature_index = {f: i for i, f in enumerate(feature_names)}
        self._feature_rows = [t.config["num_embeddings"] for _, t, _, _ in features]
        self._feature_pooling = [p for _, _, p, _ in features]
        # Collective over the trainers (as TorchRec's sharding): trainer 0,
        # the coordinator when the job has no master, answers the others'
        # table_open only while it is inside an ember call.
        job.barrier("ember.ebc.tables")
        self._ebc = job.ebc_create(features, half_replies=half_replies, start_step=start_step,
                                   cache_rows=cache_rows)
        self._dims = self._ebc.feature_dims()
        self._open = None       # this step's lookup
        self._prefetched = None  # the next step's
        self._steps = start_step
        self._export_tables = True  # state_dict holds the tables (read from the PS)

    # ---- TorchRec's accessors -------------------------------------------------

    def embedding_bag_configs(self):
        return list(self._configs)

    def feature_names(self):
        return list(self._feature_names)

    @property
    def tables(self):
        """{name: ember._C.Table}"""
        return dict(self._tables)

    @property
    def job(self):
        return self._job

    @property
    def steps(self):
        """Training steps pushed (from start_step)."""
        return self._steps

    # ---- the batch ----------------------------------------------------------

    def _batch(self, features):
        """values, B, lengths | offsets, weights in the collection's order."""
        for method in ("keys", "values"):
            if not callable(getattr(features, method, None)):
                raise TypeError(f"features: a KeyedJaggedTensor (keys(), values(), lengths() or "
                                f"offsets()), got {type(features).__name__}")
        keys = list(features.keys())
        values = features.values()
        if not isinstance(values, torch.Tensor) or values.dim() != 1:
            raise TypeError("features: values() must be a 1-D tensor of ids")
        if values.dtype not in (torch.int64, torch.int32):
            raise TypeError(f"features: values() must be int64 or int32 ids, got {values.dtype}")
        if values.device.type != "cpu":
            raise ValueError(f"features: ids on {values.device}; ember reads CPU tensors")
        for k in keys:
            if k not in self._feature_index:
                raise ValueError(f"features: key {k!r} is not a feature of this collection "
                                 f"({self._feature_names})")
        if len(keys) != len(self._feature_names):
            missing = [f for f in self._feature_names if f not in keys]
            raise ValueError(f"features: keys {missing} of this collection are missing")
        lengths = offsets = None
        lengths_of = getattr(features, "lengths_or_none", None)
        offsets_of = getattr(features, "offsets_or_none", None)
        if callable(lengths_of):
            lengths = lengths_of()
        if lengths is None and callable(offsets_of):
            offsets = offsets_of()
        if lengths is None and offsets is None:
            lengths = features.lengths() if callable(getattr(features, "lengths", None)) else None
            if lengths is None:
                offsets = features.offsets()
        n = values.numel()
        nk = len(keys)
        if lengths is not None:
            if not isinstance(lengths, torch.Tensor) or lengths.dtype not in (torch.int32,
                                                                               torch.int64):
                raise TypeError("features: lengths() must be an int32 or int64 tensor")
            if lengths.numel() % nk:
                raise ValueError(f"features: lengths() holds {lengths.numel()} bags, not a "
                                 f"whole batch for {nk} keys")
            batch = lengths.numel() // nk
            if lengths.numel() and bool((lengths < 0).any()):
                raise ValueError("features: lengths() holds a negative bag size")
            total = int(lengths.sum()) if lengths.numel() else 0
            if total != n:
                raise ValueError(f"features: lengths() sum to {total}, values() holds {n}")
            lengths = lengths.to(torch.int32).contiguous()
        else:
            if not isinstance(offsets, torch.Tensor) or offsets.dtype not in (torch.int32,
                                                                               torch.int64):
                raise TypeError("features: offsets() must be an int32 or int64 tensor")
            if (offsets.numel() - 1) % nk or offsets.numel() < 1:
                raise ValueError(f"features: offsets() holds {offsets.numel()}, not a whole "
                                 f"batch of bags + 1 for {nk} keys")
            batch = (offsets.numel() - 1) // nk
            offsets = offsets.to(torch.int64).contiguous()
            if int(offsets[0]) != 0 or int(offsets[-1]) != n or \
                    bool((offsets[1:] < offsets[:-1]).any()):
                raise ValueError(f"features: offsets() must rise from 0 to the {n} values")
        weights = features.weights_or_none() if callable(
            getattr(features, "weights_or_none", None)) else None
        if weights is not None:
            if not isinstance(weights, torch.Tensor) or not weights.is_floating_point():
                raise TypeError("features: weights_or_none() must be a float tensor")
            if weights.numel() != n:
                raise ValueError(f"features: {weights.numel()} weights for {n} values")
            if any(p != "sum" for p in self._feature_pooling):
                raise ValueError("features: weights need every feature sum-pooled")
            weights = weights.to(torch.float32).contiguous()
        values = values.to(torch.int64).contiguous()
        if keys != self._feature_names:
            values, lengths, weights = self._permute(keys, values, lengths, offsets, weights,
                                                     batch)
            offsets = None
        return values, batch, lengths, offsets, weights

    def _permute(self, keys, values, lengths, offsets, weights, batch):
        """The batch with its keys in the collection's order."""
        if lengths is None:
            lengths = (offsets[1:] - offsets[:-1]).to(torch.int32)
        per_key = lengths.view(len(keys), batch).to(torch.int64).sum(1).tolist()
        vparts = torch.split(values, per_key)
        lparts = lengths.view(len(keys), batch)
        wparts = torch.split(weights, per_key) if weights is not None else None
        order = [keys.index(f) for f in self._feature_names]
        values = torch.cat([vparts[i] for i in order])
        lengths = lparts[order].reshape(-1).contiguous()
        if weights is not None:
            weights = torch.cat([wparts[i] for i in order])
        return values, lengths, weights

    def _start(self, features, forward_only):
        values, batch, lengths, offsets, weights = self._batch(features)
        try:
            lookup = self._ebc.lookup(
                values.numpy(), batch, lengths=None if lengths is None else lengths.numpy(),
                offsets=None if offsets is None else offsets.numpy(),
                weights=None if weights is None else weights.numpy(), forward_only=forward_only)
        except _C.EmberError as e:
            if getattr(e, "status", "") == "value out of range":
                raise IndexError(f"features: {e}") from None
            raise
        return _Lookup(lookup, batch, features)

    # ---- the steps ----------------------------------------------------------

    def prefetch(self, features):
        """Look up the next training step's batch now (its lookup flies
        while this step computes); the next forward must take the same
        object."""
        if self._prefetched is not None:
            raise RuntimeError("prefetch: a prefetched batch is not consumed yet")
        self._prefetched = self._start(features, False)

    def forward(self, features):
        train = torch.is_grad_enabled() and self.training
        if not train:
            if self._prefetched is not None or (self._open is not None and
                                                not self._open.pushed):
                raise RuntimeError("forward: an evaluation (no_grad or eval()) while a training "
                                   "step is open: push it first (step())")
            rec = self._start(features, True)
        else:
            if self._open is not None and not self._open.pushed:
                raise RuntimeError("forward: this step's gradients were not pushed yet "
                                   "(step() or a step_context around each step)")
            if self._prefetched is not None:
                if self._prefetched.features is not features:
                    raise ValueError("features: not the batch prefetched for this step")
                rec, self._prefetched = self._prefetched, None
            else:
                rec = self._start(features, False)
        out = torch.empty(self._ebc.output_size(rec.batch), dtype=torch.float32)
        try:
            rec.lookup.wait(out.numpy())
        except BaseException:
            if train:
                rec.lookup.backward(torch.zeros_like(out).numpy())
                self._steps += 1
            rec.lookup.release()
            raise
        if not train:
            rec.lookup.release()
        else:
            out.requires_grad_(True)
            rec.out = out
            self._open = rec
        return self._keyed(out, rec.batch)

    def _keyed(self, out, batch):
        parts, at = [], 0
        for d in self._dims:
            parts.append(out[at:at + batch * d].view(batch, d))
            at += batch * d
        return KeyedTensor(self._feature_names, self._dims, _parts=parts)

    def step(self, zero=False, wait=False):
        """Push this step's gradients (the pooled output's .grad; zeros for
        none, or with @zero) and release it.  @wait: until every PS took
        them.  Nothing open: nothing."""
        rec = self._open
        if rec is None or rec.pushed:
            return
        rec.pushed = True
        grad = None if zero else rec.out.grad
        if grad is None:
            grad = torch.zeros_like(rec.out)
        try:
            rec.lookup.backward(grad.detach().contiguous().numpy(), wait=wait)
        finally:
            rec.lookup.release()
            rec.out.grad = None
            self._steps += 1

    def step_context(self):
        """with ebc.step_context() as step: one training step (StepContext)."""
        return StepContext(self)

    def cache_stats(self):
        """The row cache's counters (a dict: capacity, rows, lookups, hits,
        stale_hits, oldest, inserted, evicted; all 0 without a cache)."""
        return self._ebc.cache_stats()

    def flush(self):
        """Every push made has reached the PS (ember_ebc_flush)."""
        self.step()
        self._ebc.flush()

    def sync(self, name="ember.ebc.sync"):
        """flush on every trainer, then meet: reads now see every step
        pushed.  Collective over the job's ranks but the PS."""
        self.flush()
        self._job.barrier(name)

    def close(self):
        """Flush and destroy the collection (its tables stay on the PS).  A
        prefetched batch never taken is pushed as a step of zero gradients
        (the PS wait for every lookup's push)."""
        if self._ebc is not None:
            try:
                if self._prefetched is not None:
                    rec, self._prefetched = self._prefetched, None
                    out = torch.empty(self._ebc.output_size(rec.batch), dtype=torch.float32)
                    try:
                        rec.lookup.wait(out.numpy())
                    finally:
                        rec.lookup.backward(torch.zeros_like(out).numpy())
                        rec.lookup.release()
                        self._steps += 1
                self.flush()
            finally:
                self._ebc.destroy()
                self._ebc = None

    # ---- weights ----------------------------------------------------------

    def read_table(self, name):
        """Table @name's rows as a [N, D] float32 tensor (after sync():
        every step pushed)."""
        t = self._tables[name]
        c = t.config
        out = torch.empty((c["num_embeddings"], c["embedding_dim"]), dtype=torch.float32)
        t.read_rows(0, c["num_embeddings"], out.numpy())
        return out

    def _save_to_state_dict(self, destination, prefix, keep_vars):
        if not self._export_tables:
            return
        if self._ebc is not None:
            self.flush()
        for name in self._tables:
            destination[f"{prefix}embedding_bags.{name}.weight"] = self.read_table(name)

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing_keys,
                              unexpected_keys, error_msgs):
        if not self._export_tables:
            return
        for name, t in self._tables.items():
            key = f"{prefix}embedding_bags.{name}.weight"
            if key not in state_dict:
                missing_keys.append(key)
                continue
            w = state_dict[key]
            c = t.config
            if tuple(w.shape) != (c["num_embeddings"], c["embedding_dim"]):
                error_msgs.append(f"{key}: shape {tuple(w.shape)}, the table is "
                                  f"{c['num_embeddings']} x {c['embedding_dim']}")
                continue
            t.write_rows(0, w.detach().to(torch.float32).contiguous().numpy())
        for key in state_dict:
            if key.startswith(prefix + "embedding_bags.") and \
                    key[len(prefix) + 15:-7] not in self._tables:
                unexpected_keys.append(key)

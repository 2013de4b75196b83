#!/usr/bin/python3
"""A PyTorch reference of `ember-train --model dlrm`'s synchronous job.

    dlrm_sync_ref.py write-init MODEL --seed S --out FILE
    dlrm_sync_ref.py train MODEL --init FILE --data criteo:PATH[,PATH...] --trainers T
                     --batch-size B [--steps S] [--epochs E] --optimizer sgd|adagrad --lr LR
                     [--sparse-reduce sum|mean] --out FILE
    dlrm_sync_ref.py eval MODEL --model FILE --data criteo:PATH
    dlrm_sync_ref.py strict-load MODEL --model FILE [--steps S --trainers T]
    dlrm_sync_ref.py selftest DLRM_REF_PY

MODEL is ember-train's flags for it: --embedding-dim D, --num-embeddings N or
--num-embeddings-per-feature N0,...,N25, --dense-arch-layer-sizes (last D)
and --over-arch-layer-sizes (last 1); for DLRM_DCN --interaction-type dcn
--dcn-num-layers L --dcn-low-rank-dim R (dcn_ref.py's LowRankCrossNet under
TorchRec's names); for MLPerf's synthetic multi-hot --multi-hot-sizes
S0,...,S25 [--multi-hot-distribution-type uniform|pareto] --multi-hot-seed
SEED (ember-train's --seed): feature f's row r becomes the bag
dcn_ref.multi_hot_rows(...) of S_f rows, as <ember/data.h> defines it.

The model is torchrec.models.dlrm.DLRM built of plain PyTorch modules named
as TorchRec names them, so its state_dict() has TorchRec's keys and shapes:
an nn.EmbeddingBag(N_f, D, mode="sum") per feature (one index per bag),
DenseArch (Linear + ReLU per layer), InteractionArch (dense_out, then the
dots of [dense_out, emb_0..emb_25] in triu_indices(27, 27, 1) order),
OverArch (Linear + ReLU per layer but the last), BCEWithLogits mean over a
trainer's batch.  Everything in float32.

The data (dlrm-contract.md): a Criteo TSV line is a label (0 or 1), 13
integers (empty = 0; dense = log(max(x, 0) + 1) in float64, then float32)
and 26 hex ids (empty = 0; int(hex, 16) % N_f).  Trainer t of T takes
examples i % T == t in file order (the files concatenated); step s of an
epoch takes each trainer's next B, and exists only if the data has
(s + 1) * B * T examples; epochs repeat the data; --steps caps the steps in
all.

`train` simulates T synchronous trainers: each step every trainer's loss on
its own batch from the same parameters; dense gradients averaged over the
trainers, each table's row gradients summed (--sparse-reduce mean: averaged);
then one step of torch.optim.SGD or torch.optim.Adagrad (eps 1e-10, initial
accumulator 0, lr_decay 0) over them all; a row no trainer touched has a zero
gradient, which neither optimizer moves it by.  It writes the final
state_dict as safetensors with metadata "losses" ([steps][trainers], each
trainer's loss before the step's update, step-major) and "losses_shape".

`eval` prints "auc A logloss L examples N" for a saved model over every
example of a file: the exact ROC AUC (ties half, numpy) of its logits and
their mean BCE.  `strict-load` checks that a saved file loads with
load_state_dict(strict=True) and holds TorchRec's names and shapes.
`selftest` checks this reference against tests/engine/dlrm_ref.py's
forward/backward and its optimizers against PyTorch's sparse ones.
"""
import argparse
import math
import os
import re
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dcn_ref  # noqa: E402
import st_io  # noqa: E402

DENSE, SPARSE = 13, 26
FIELDS = 1 + DENSE + SPARSE
INT_RE = re.compile(r"-?[0-9]{1,19}")
HEX_RE = re.compile(r"[0-9a-fA-F]{1,16}")

torch = None  # imported on first use: numpy-only commands start fast


def need_torch():
    global torch
    if torch is None:
        import torch as module
        torch = module
    return torch


# ---- the data ----------------------------------------------------------


class DataError(Exception):
    pass


def field_name(f):
    return "label" if f == 0 else f"I{f}" if f <= DENSE else f"C{f - DENSE}"


def parse_line(text, rows):
    """(label, dense[13] float64 before the cast, ids[26]) of one line."""
    if text.endswith("\r"):
        text = text[:-1]
    fields = text.split("\t")
    if len(fields) != FIELDS:
        raise DataError(f"{len(fields)} tab-separated fields, not {FIELDS}")
    if fields[0] not in ("0", "1"):
        raise DataError(f"field label is '{fields[0][:40]}', not 0 or 1")
    dense = []
    for f in range(1, DENSE + 1):
        x = fields[f]
        if x and (not INT_RE.fullmatch(x) or not -2**63 <= int(x) < 2**63):
            raise DataError(f"field {field_name(f)} is '{x[:40]}', not a 64-bit integer")
        dense.append(math.log(float(max(int(x) if x else 0, 0)) + 1.0))
    ids = []
    for c in range(SPARSE):
        x = fields[1 + DENSE + c]
        if x and not HEX_RE.fullmatch(x):
            raise DataError(f"field {field_name(1 + DENSE + c)} is '{x[:40]}', "
                            "not 1-16 hexadecimal digits")
        ids.append(int(x or "0", 16) % rows[c])
    return int(fields[0]), dense, ids


def read_criteo(spec, rows):
    """Every example of criteo:PATH[,PATH...] in order: labels [n] float32,
    dense [n][13] float32, ids [n][26] int64."""
    if not spec.startswith("criteo:"):
        raise DataError(f"--data {spec}: not criteo:PATH[,PATH...]")
    labels, dense, ids = [], [], []
    for path in spec[len("criteo:"):].split(","):
        with open(path, "r", encoding="utf-8", newline="\n") as fh:
            for number, line in enumerate(fh, 1):
                try:
                    y, x, c = parse_line(line[:-1] if line.endswith("\n") else line, rows)
                except DataError as error:
                    raise DataError(f"{path}:{number}: {error}") from None
                labels.append(y)
                dense.append(x)
                ids.append(c)
    return (np.array(labels, dtype=np.float32),
            np.array(dense, dtype=np.float64).astype(np.float32).reshape(-1, DENSE),
            np.array(ids, dtype=np.int64).reshape(-1, SPARSE))


def expand_bags(ids, rows, args):
    """Each feature's bags [n][m_f]: its one id, or MLPerf's synthetic bag of
    m_f rows (--multi-hot-sizes)."""
    sizes = args.multi_hot_sizes or [1] * SPARSE
    if len(sizes) != SPARSE or min(sizes) < 1:
        raise DataError(f"--multi-hot-sizes: {len(sizes)} sizes, need {SPARSE} >= 1")
    return [dcn_ref.multi_hot_rows(args.multi_hot_seed, f, ids[:, f], sizes[f], rows[f],
                                   args.multi_hot_distribution_type) for f in range(SPARSE)]


# ---- ember's general text format (<ember/schema.h>), read without ember ----

NAME_RE = re.compile(r"[A-Za-z0-9_.-]{1,63}")


def fnv1a64(data):
    h = 0xcbf29ce484222325
    for byte in data:
        h = ((h ^ byte) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return h


class Schema:
    """A schema file: the label, dense [(name, transform, empty_refused)],
    sparse [dict] in the batches' order (a table's features moved next to
    its first), tables [(name, rows)] in order of first use, the columns."""

    def __init__(self, text):
        self.fmt, self.header, self.label = "tsv", False, None
        self.dense, sparse, self.columns = [], [], []
        for raw in re.split(r"[;\n]", text):
            words = raw.split("#", 1)[0].split()
            if words:
                self.statement(words, sparse)
        if self.label is None or not sparse:
            raise DataError("a schema needs a label and a sparse feature")
        firsts = {}
        for f in sparse:
            firsts.setdefault(f["table"], len(firsts))
        self.sparse = sorted(sparse, key=lambda f: firsts[f["table"]])  # stable
        self.tables = []
        for f in self.sparse:
            if f["table"] not in [name for name, _ in self.tables]:
                self.tables.append((f["table"], f["rows"]))
            f["table_index"] = [name for name, _ in self.tables].index(f["table"])

    def statement(self, words, sparse):
        kind = words[0]
        if kind in ("format", "header", "hash"):
            value = words[1]
            if kind == "format":
                self.fmt = value
            elif kind == "header":
                self.header = value == "yes"
            elif value != "fnv1a64":
                raise DataError(f"hash {value}: the reference knows fnv1a64")
            return
        name = words[1]
        if not NAME_RE.fullmatch(name):
            raise DataError(f"bad name {name}")
        self.columns.append((kind, name))
        if kind == "label":
            self.label = name
        elif kind == "dense":
            transform = next((w for w in words[2:] if w in ("log", "none")), "log")
            self.dense.append((name, transform, "empty=refuse" in words[2:]))
        elif kind == "sparse":
            keys = dict(w.split("=", 1) for w in words[3:])
            sparse.append({"name": name, "ids": words[2], "rows": int(keys["rows"]),
                           "table": keys.get("table", name), "pooling": keys.get("pooling", "sum"),
                           "list": keys.get("list"), "bag": int(keys.get("bag", "1")),
                           "empty": keys.get("empty", "refuse")})
        elif kind != "skip":
            raise DataError(f"unknown statement {kind}")


def sparse_row(text, feature):
    rows = feature["rows"]
    if feature["ids"] == "int":
        return int(text) % rows
    if feature["ids"] == "hex":
        return int(text, 16) % rows
    return fnv1a64(text.encode()) % rows


def parse_fields(schema, fields, where):
    """(label, dense [N] float64, bags [K] lists) of one line's fields."""
    label = fields[where[schema.label]]
    if label not in ("0", "1"):
        raise DataError(f"label '{label}' is not 0 or 1")
    dense = []
    for name, transform, refused in schema.dense:
        text = fields[where[name]]
        if not text and refused:
            raise DataError(f"column {name} is empty")
        x = float(text) if text else 0.0
        dense.append(math.log(max(x, 0.0) + 1.0) if transform == "log" else x)
    bags = []
    for f in schema.sparse:
        text = fields[where[f["name"]]]
        if not text:
            if f["empty"] == "refuse":
                raise DataError(f"column {f['name']} is empty")
            bags.append([] if f["empty"] == "bag" else [0])
            continue
        parts = text.split(f["list"]) if f["list"] else [text]
        if len(parts) > f["bag"]:
            raise DataError(f"column {f['name']}: {len(parts)} values, at most {f['bag']}")
        bags.append([sparse_row(x, f) for x in parts])
    return int(label), dense, bags


def read_text(schema, spec):
    """Every example of text:PATH[,PATH...]: labels [n] float32, dense [n][N]
    float32, bags [K][n] lists of rows."""
    if not spec.startswith("text:"):
        raise DataError(f"--data {spec}: not text:PATH[,PATH...] (with --schema)")
    sep = "\t" if schema.fmt == "tsv" else ","
    labels, dense, bags = [], [], [[] for _ in schema.sparse]
    for path in spec[len("text:"):].split(","):
        with open(path, "r", encoding="utf-8", newline="\n") as fh:
            lines = (line.rstrip("\n").rstrip("\r") for line in fh)
            names = next(lines).split(sep) if schema.header else [n for _, n in schema.columns]
            where = {name: i for i, name in enumerate(names)}
            for number, line in enumerate(lines, 2 if schema.header else 1):
                fields = line.split(sep)
                if len(fields) != len(names):
                    raise DataError(f"{path}:{number}: {len(fields)} fields, not {len(names)}")
                try:
                    y, x, b = parse_fields(schema, fields, where)
                except (DataError, ValueError) as error:
                    raise DataError(f"{path}:{number}: {error}") from None
                labels.append(y)
                dense.append(x)
                for f, bag in enumerate(b):
                    bags[f].append(bag)
    return (np.array(labels, dtype=np.float32),
            np.array(dense, dtype=np.float64).astype(np.float32).reshape(-1, len(schema.dense)),
            bags)


def ragged(bags, at):
    """The bags of positions @at as EmbeddingBag's (values, offsets)."""
    values, offsets = [], []
    for i in at:
        offsets.append(len(values))
        values.extend(bags[int(i)])
    return (torch.tensor(values, dtype=torch.int64), torch.tensor(offsets, dtype=torch.int64))


def step_plan(n, trainers, batch, steps, epochs):
    """[(epoch, step within it)] of the job over @n examples."""
    per_epoch = n // (batch * trainers)
    if per_epoch == 0:
        raise DataError(f"{n} examples make no step of {trainers} x {batch}")
    total = per_epoch * epochs if steps is None else min(steps, per_epoch * epochs)
    return [divmod(k, per_epoch) for k in range(total)]


def trainer_batch(s, t, trainers, batch):
    """File positions of trainer @t's batch at step @s of an epoch: its
    examples are i % trainers == t, its step s their s*B .. s*B+B-1th."""
    return np.array([(s * batch + k) * trainers + t for k in range(batch)], dtype=np.int64)


# ---- the model ---------------------------------------------------------


def build_model(dim, rows, dense_sizes, over_sizes, dcn=None):
    """Criteo's DLRM of plain modules under TorchRec's names (a table a
    feature, sum pooled); with @dcn (layers, rank) DLRM_DCN."""
    tables = [(f"t_cat_{f}", n) for f, n in enumerate(rows)]
    features = [(f, "sum") for f in range(len(rows))]
    return build(dim, DENSE, tables, features, dense_sizes, over_sizes, dcn)


def build(dim, num_dense, tables, features, dense_sizes, over_sizes, dcn=None):
    """DLRM (DLRM_DCN with @dcn) over @tables [(name, rows)] and @features
    [(table index, pooling)], in the batches' order."""
    nn = need_torch().nn

    class Perceptron(nn.Module):
        def __init__(self, fan_in, fan_out):
            super().__init__()
            self._linear = nn.Linear(fan_in, fan_out)

        def forward(self, x):
            return torch.relu(self._linear(x))

    class MLP(nn.Module):
        def __init__(self, fan_in, sizes):
            super().__init__()
            widths = [fan_in] + list(sizes)
            self._mlp = nn.Sequential(*[Perceptron(widths[i], widths[i + 1])
                                        for i in range(len(sizes))])

        def forward(self, x):
            return self._mlp(x)

    class DenseArch(nn.Module):
        def __init__(self):
            super().__init__()
            self.model = MLP(num_dense, dense_sizes)

        def forward(self, x):
            return self.model(x)

    class OverArch(nn.Module):
        def __init__(self, fan_in):
            super().__init__()
            self.model = nn.Sequential(
                MLP(fan_in, over_sizes[:-1]),
                nn.Linear(([fan_in] + list(over_sizes))[-2], over_sizes[-1]))

        def forward(self, x):
            return self.model(x)

    pooling = {t: mode for t, mode in features}

    class EmbeddingBagCollection(nn.Module):
        def __init__(self):
            super().__init__()
            self.embedding_bags = nn.ModuleDict({
                name: nn.EmbeddingBag(n, dim, mode=pooling.get(t, "sum"))
                for t, (name, n) in enumerate(tables)})

        def forward(self, bags):
            # bags[f]: [n][m_f] (each row a bag of m_f ids) or (values,
            # offsets) of n bags; a tensor [n][F]: one id a bag.
            if torch.is_tensor(bags):
                bags = [bags[:, f:f + 1] for f in range(len(features))]
            out = []
            for (t, _), bag in zip(features, bags):
                table = self.embedding_bags[tables[t][0]]
                out.append(table(*bag) if isinstance(bag, tuple) else table(bag))
            return out

    class SparseArch(nn.Module):
        def __init__(self):
            super().__init__()
            self.embedding_bag_collection = EmbeddingBagCollection()

        def forward(self, ids):
            return self.embedding_bag_collection(ids)

    class DLRM(nn.Module):
        def __init__(self):
            super().__init__()
            vectors = len(features) + 1
            self.sparse_arch = SparseArch()
            self.dense_arch = DenseArch()
            if dcn:
                self.inter_arch = dcn_ref.InteractionDCNArch(
                    len(features), dcn_ref.LowRankCrossNet(vectors * dim, dcn[0], dcn[1]))
                self.over_arch = OverArch(vectors * dim)
            else:
                self.over_arch = OverArch(dim + vectors * (vectors - 1) // 2)
            self.table_names = set(weight_names(name for name, _ in tables))
            self.register_buffer("triu", torch.triu_indices(vectors, vectors, offset=1),
                                 persistent=False)

        def forward(self, dense, bags):
            dense_out = self.dense_arch(dense)
            pooled = self.sparse_arch(bags)
            if dcn:
                return self.over_arch(
                    self.inter_arch(dense_out, torch.stack(pooled, dim=1))).squeeze(1)
            combined = torch.stack([dense_out] + pooled, dim=1)
            dots = torch.bmm(combined, combined.transpose(1, 2))
            inter = dots[:, self.triu[0], self.triu[1]]
            return self.over_arch(torch.cat([dense_out, inter], dim=1)).squeeze(1)

    return DLRM()


def weight_names(tables):
    return [f"sparse_arch.embedding_bag_collection.embedding_bags.{t}.weight" for t in tables]


def table_names(rows):
    return weight_names(f"t_cat_{f}" for f in range(len(rows)))


def torchrec_shapes(dim, rows, dense_sizes, over_sizes, dcn=None):
    """{name: shape} of TorchRec's DLRM (DLRM_DCN) state_dict, spelled out
    from TorchRec's layout rather than taken from build_model."""
    shapes = {name: (n, dim) for name, n in zip(table_names(rows), rows)}
    widths = [DENSE] + dense_sizes
    for i in range(len(dense_sizes)):
        shapes[f"dense_arch.model._mlp.{i}._linear.weight"] = (widths[i + 1], widths[i])
        shapes[f"dense_arch.model._mlp.{i}._linear.bias"] = (widths[i + 1],)
    features = len(rows) + 1
    if dcn:
        n = features * dim
        for layer in range(dcn[0]):
            shapes[f"inter_arch.crossnet.W_kernels.{layer}"] = (n, dcn[1])
            shapes[f"inter_arch.crossnet.V_kernels.{layer}"] = (dcn[1], n)
            shapes[f"inter_arch.crossnet.bias.{layer}"] = (n,)
    widths = [features * dim if dcn else dim + features * (features - 1) // 2] + over_sizes
    for i in range(len(over_sizes) - 1):
        shapes[f"over_arch.model.0._mlp.{i}._linear.weight"] = (widths[i + 1], widths[i])
        shapes[f"over_arch.model.0._mlp.{i}._linear.bias"] = (widths[i + 1],)
    shapes["over_arch.model.1.weight"] = (widths[-1], widths[-2])
    shapes["over_arch.model.1.bias"] = (widths[-1],)
    return shapes


def state_arrays(model):
    return {k: v.detach().cpu().numpy() for k, v in model.state_dict().items()}


def load_file(model, path):
    meta, tensors = st_io.read(path)
    model.load_state_dict({k: torch.from_numpy(v) for k, v in tensors.items()}, strict=True)
    return meta


# ---- training ----------------------------------------------------------


def make_optimizer(params, name, lr):
    if name == "sgd":
        return torch.optim.SGD(params, lr=lr)
    if name == "adagrad":
        return torch.optim.Adagrad(params, lr=lr, lr_decay=0.0, initial_accumulator_value=0.0,
                                   eps=1e-10)
    raise DataError(f"--optimizer {name}: the reference has sgd and adagrad")


def sync_grads(model, batches, sparse_reduce):
    """Every trainer's (dense, ids, labels) through the same parameters:
    sets each parameter's .grad as the synchronous job reduces them (dense:
    the trainers' mean; a table: their sum, or with "mean" the sum times
    1/T) and returns the trainers' losses."""
    named = list(model.named_parameters())
    sums = [torch.zeros_like(p) for _, p in named]
    losses = []
    for dense, bags, labels in batches:  # trainer order, as the PS sums them
        logits = model(dense, bags)
        loss = torch.nn.functional.binary_cross_entropy_with_logits(logits, labels)
        for acc, g in zip(sums, torch.autograd.grad(loss, [p for _, p in named])):
            acc += g
        losses.append(loss.item())
    trainers = torch.tensor(len(batches), dtype=torch.float32)
    for (name, p), acc in zip(named, sums):
        if name not in model.table_names:
            p.grad = acc / trainers  # the dense allreduce's mean
        elif sparse_reduce == "mean":
            p.grad = acc * (1.0 / trainers)  # the PS's sum times 1/T in float32
        else:
            p.grad = acc
    return losses


def sync_step(model, opt, batches, sparse_reduce):
    """One synchronous step: the trainers' losses before its update."""
    losses = sync_grads(model, batches, sparse_reduce)
    opt.step()
    opt.zero_grad(set_to_none=True)
    return losses


def bag_picker(data, rows, args):
    """The bags of a batch's positions: ragged text bags, or Criteo's ids
    (MLPerf's multi-hot expanded) as fixed-size bags."""
    if isinstance(data[2], list):
        return lambda at: [ragged(b, at) for b in data[2]]
    bags = [torch.from_numpy(b) for b in expand_bags(data[2], rows, args)]
    return lambda at: [b[at] for b in bags]


def train(model, data, rows, args):
    labels, dense = (torch.from_numpy(a) for a in data[:2])
    pick = bag_picker(data, rows, args)
    opt = make_optimizer(model.parameters(), args.optimizer, args.lr)
    history = []
    for _, s in step_plan(len(labels), args.trainers, args.batch_size, args.steps, args.epochs):
        batches = []
        for t in range(args.trainers):
            at = torch.from_numpy(trainer_batch(s, t, args.trainers, args.batch_size))
            batches.append((dense[at], pick(at), labels[at]))
        history.append(sync_step(model, opt, batches, args.sparse_reduce))
    return history


# ---- metrics -----------------------------------------------------------


def roc_auc(scores, labels):
    """Exact ROC AUC: the fraction of (positive, negative) pairs ordered
    right, a tie half (the Mann-Whitney U over mid-ranks), in float64."""
    scores = np.asarray(scores, dtype=np.float64)
    labels = np.asarray(labels)
    pos = int((labels == 1).sum())
    neg = len(labels) - pos
    if pos == 0 or neg == 0:
        raise DataError("the AUC needs positive and negative examples")
    order = np.argsort(scores, kind="mergesort")
    sorted_scores = scores[order]
    _, first, counts = np.unique(sorted_scores, return_index=True, return_counts=True)
    mid = first + (counts + 1) / 2.0  # 1-based mid-rank of each tie group
    ranks = np.empty(len(scores))
    ranks[order] = np.repeat(mid, counts)
    return (ranks[labels == 1].sum() - pos * (pos + 1) / 2.0) / (pos * neg)


def log_loss(logits, labels):
    x = np.asarray(logits, dtype=np.float64)
    y = np.asarray(labels, dtype=np.float64)
    return float(np.mean(np.maximum(x, 0) - x * y + np.log1p(np.exp(-np.abs(x)))))


# ---- the commands ------------------------------------------------------


def int_list(text):
    try:
        return [int(x) for x in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a comma-separated list of integers")


def model_args(parser):
    parser.add_argument("--embedding-dim", type=int, required=True)
    parser.add_argument("--num-embeddings", type=int)
    parser.add_argument("--num-embeddings-per-feature", type=int_list)
    parser.add_argument("--dense-arch-layer-sizes", type=int_list, required=True)
    parser.add_argument("--over-arch-layer-sizes", type=int_list, required=True)
    parser.add_argument("--interaction-type", choices=["original", "dcn"], default="original")
    parser.add_argument("--dcn-num-layers", type=int, default=3)
    parser.add_argument("--dcn-low-rank-dim", type=int, default=512)
    parser.add_argument("--multi-hot-sizes", type=int_list)
    parser.add_argument("--multi-hot-distribution-type", choices=["uniform", "pareto"],
                        default="uniform")
    parser.add_argument("--multi-hot-seed", type=int, default=0)
    parser.add_argument("--schema", help="ember's schema file: --data text:PATH")


def model_shape(args):
    """(dim, rows[26], dense sizes, over sizes), checked as ember checks them."""
    if args.schema:
        rows = []
    elif (args.num_embeddings is None) == (args.num_embeddings_per_feature is None):
        raise DataError("give one of --num-embeddings and --num-embeddings-per-feature")
    else:
        rows = args.num_embeddings_per_feature or [args.num_embeddings] * SPARSE
    if not args.schema and (len(rows) != SPARSE or min(rows) < 1):
        raise DataError(f"--num-embeddings-per-feature: {len(rows)} values, need {SPARSE} >= 1")
    if args.dense_arch_layer_sizes[-1] != args.embedding_dim:
        raise DataError("--dense-arch-layer-sizes must end in --embedding-dim")
    if args.over_arch_layer_sizes[-1] != 1 or len(args.over_arch_layer_sizes) < 2:
        raise DataError("--over-arch-layer-sizes must have two layers or more and end in 1")
    return args.embedding_dim, rows, args.dense_arch_layer_sizes, args.over_arch_layer_sizes


def dcn_shape(args):
    """(layers, rank) of DLRM_DCN's cross layers, or None."""
    if args.interaction_type != "dcn":
        return None
    if args.dcn_num_layers < 1 or args.dcn_low_rank_dim < 1:
        raise DataError("--dcn-num-layers and --dcn-low-rank-dim must be >= 1")
    return args.dcn_num_layers, args.dcn_low_rank_dim


def job_model(args):
    """(model, tables [(name, rows)], read(spec) -> data) of MODEL's flags:
    Criteo's layout, or --schema's features."""
    dim, rows, dense_sizes, over_sizes = model_shape(args)
    need_torch()
    if args.schema:
        with open(args.schema, encoding="utf-8") as fh:
            schema = Schema(fh.read())
        features = [(f["table_index"], f["pooling"]) for f in schema.sparse]
        model = build(dim, len(schema.dense), schema.tables, features, dense_sizes, over_sizes,
                      dcn_shape(args))
        return model, schema.tables, lambda spec: read_text(schema, spec)
    model = build_model(dim, rows, dense_sizes, over_sizes, dcn_shape(args))
    return model, [(f"t_cat_{f}", n) for f, n in enumerate(rows)], lambda spec: read_criteo(
        spec, rows)


def cmd_write_init(args):
    need_torch().manual_seed(args.seed)
    model, tables, _ = job_model(args)
    with torch.no_grad():  # TorchRec's table init; the Linears keep PyTorch's default
        for name, (_, n) in zip(weight_names(t for t, _ in tables), tables):
            model.get_parameter(name).uniform_(-math.sqrt(1.0 / n), math.sqrt(1.0 / n))
    st_io.write(args.out, state_arrays(model), {"producer": "dlrm_sync_ref.py write-init"})
    return 0


def cmd_train(args):
    model, tables, read = job_model(args)
    load_file(model, args.init)
    history = train(model, read(args.data), [n for _, n in tables], args)
    meta = {"producer": "dlrm_sync_ref.py train",
            "losses_shape": f"{len(history)},{args.trainers}",
            "losses": ",".join(f"{x:.9g}" for step in history for x in step)}
    st_io.write(args.out, state_arrays(model), meta)
    print(f"{len(history)} steps of {args.trainers} trainers; last losses "
          + " ".join(f"{x:.6f}" for x in history[-1]))
    return 0


def cmd_eval(args):
    model, tables, read = job_model(args)
    load_file(model, args.model)
    data = read(args.data)
    labels = data[0]
    bags = bag_picker(data, [n for _, n in tables], args)(np.arange(len(labels)))
    with torch.no_grad():
        logits = model(torch.from_numpy(data[1]), bags).numpy()
    print(f"auc {roc_auc(logits, labels):.9f} logloss {log_loss(logits, labels):.9f} "
          f"examples {len(labels)}")
    return 0


def cmd_strict_load(args):
    dim, rows, dense_sizes, over_sizes = model_shape(args)
    need_torch()
    model = build_model(dim, rows, dense_sizes, over_sizes, dcn_shape(args))
    meta, tensors = st_io.read(args.model)
    want = torchrec_shapes(dim, rows, dense_sizes, over_sizes, dcn_shape(args))
    got = {k: tuple(v.shape) for k, v in tensors.items()}
    if got != want:
        for name in sorted(set(got) | set(want)):
            if got.get(name) != want.get(name):
                print(f"FAIL: {name}: file {got.get(name)}, TorchRec's {want.get(name)}")
        return 1
    try:
        model.load_state_dict({k: torch.from_numpy(v) for k, v in tensors.items()}, strict=True)
    except RuntimeError as error:
        print(f"FAIL: load_state_dict(strict=True) refused {args.model}: {error}")
        return 1
    for name, value in model.state_dict().items():
        if not np.array_equal(value.numpy(), tensors[name]):
            print(f"FAIL: {name} did not load as the file holds it")
            return 1
    if args.steps is not None:
        history = st_io.losses(args.model, meta)
        if history.shape != (args.steps, args.trainers) or not np.isfinite(history).all():
            print(f"FAIL: losses {history.shape}, want {args.steps} x {args.trainers} finite")
            return 1
    print(f"ok: {args.model}: {len(tensors)} tensors load strictly under TorchRec's names")
    return 0


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("write-init")
    model_args(p)
    p.add_argument("--seed", type=int, required=True)
    p.add_argument("--out", required=True)
    p = sub.add_parser("train")
    model_args(p)
    p.add_argument("--init", required=True)
    p.add_argument("--data", required=True)
    p.add_argument("--trainers", type=int, required=True)
    p.add_argument("--batch-size", type=int, required=True)
    p.add_argument("--steps", type=int)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--optimizer", choices=["sgd", "adagrad"], required=True)
    p.add_argument("--lr", type=float, required=True)
    p.add_argument("--sparse-reduce", choices=["sum", "mean"], default="sum")
    p.add_argument("--out", required=True)
    p = sub.add_parser("eval")
    model_args(p)
    p.add_argument("--model", required=True)
    p.add_argument("--data", required=True)
    p = sub.add_parser("strict-load")
    model_args(p)
    p.add_argument("--model", required=True)
    p.add_argument("--steps", type=int)
    p.add_argument("--trainers", type=int)
    p = sub.add_parser("selftest")
    p.add_argument("dlrm_ref")
    args = parser.parse_args(argv)
    if args.command == "selftest":
        import dlrm_ref_selftest
        return dlrm_ref_selftest.run(sys.modules[__name__], args.dlrm_ref)
    commands = {"write-init": cmd_write_init, "train": cmd_train, "eval": cmd_eval,
                "strict-load": cmd_strict_load}
    try:
        return commands[args.command](args)
    except (DataError, st_io.StFormatError, OSError) as error:
        print(f"dlrm_sync_ref.py: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

#!/usr/bin/env python3
"""TorchRec's own DLRM (torchrec.models.dlrm.DLRM, or DLRM_DCN) on CPU, as ember-train --model dlrm's peer.

T processes (torch.multiprocessing.spawn) form a gloo process group; the model
is wrapped in DistributedModelParallel with an explicit row-wise plan for every
table (TorchRec's planner offers row-wise only on cuda/tpu), the embeddings
updated by TorchRec's fused optimizer in the backward pass (FBGEMM's EXACT_SGD
or EXACT_ADAGRAD, through apply_optimizer_in_backward, as dlrm_main does) and
the dense part replicated under DDP.

Data and semantics are ember's (../../notes: the DLRM contract): every rank
reads the same Criteo TSV file(s); rank t takes the examples i with
i % T == t in file order, B of them per step; a step exists only if the data
holds (s+1)*B*T examples. Dense value log(max(x,0)+1) (empty 0), categorical
int(hex or "0", 16) % N_f. Each rank parses its examples into numpy arrays,
and builds every step's tensors, before anything is timed.

--interaction-type dcn trains TorchRec's DLRM_DCN (LowRankCrossNet of
--dcn-num-layers layers of rank --dcn-low-rank-dim over the dense output and
every pooled feature) instead; --multi-hot-sizes expands each one-hot id into
ember's synthetic multi-hot bag (include/ember/data.h, the numpy of
tests/train/dcn_ref.py), keyed by --multi-hot-seed (default --seed).

Prints (rank 0) `examples/s X` over the steps after --warmup-steps, then
`eval step S: auc A logloss L examples N` for --eval, and a RESULT line.
"""

import argparse
import json
import math
import os
import re
import socket
import struct
import sys
import time

DENSE = 13
SPARSE = 26
CAT_NAMES = [f"cat_{f}" for f in range(SPARSE)]
TABLE_NAMES = [f"t_{name}" for name in CAT_NAMES]
EBC_PREFIX = "sparse_arch.embedding_bag_collection.embedding_bags."
# DLRMTrain (the DLRM and its BCE loss, what dlrm_main trains) holds the DLRM
# as .model; the contract's names are the DLRM's own.
TRAIN_PREFIX = "model."
TESTS_TRAIN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "train")
LINE_MAX = 4096  # ember's EMBER_CRITEO_LINE_MAX
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
# A whole Criteo line as ember's parser accepts it: the label, 13 optional
# decimal integers of at most 19 digits, 26 optional 1-16 digit hex ids.
LINE_RE = re.compile(rb"[01](?:\t(?:-?[0-9]{1,19})?){13}(?:\t[0-9a-fA-F]{0,16}){26}\r?")


class PeerError(Exception):
    """A bad flag, file or line: printed as one line, exit status 2."""


# ---------------------------------------------------------------- flags


def positive_int(flag, text, hi=2**40):
    if not re.fullmatch(r"[0-9]{1,13}", text) or not 1 <= int(text) <= hi:
        raise PeerError(f"{flag} '{text}' is not an integer from 1 to {hi}")
    return int(text)


def int_list(flag, text, hi=2**40):
    return [positive_int(flag, item, hi) for item in text.split(",")]


def criteo_paths(flag, spec):
    if not spec.startswith("criteo:") or not spec[len("criteo:"):]:
        raise PeerError(f"{flag} '{spec}' is not criteo:PATH[,PATH...]")
    paths = spec[len("criteo:"):].split(",")
    for path in paths:
        if not os.path.isfile(path):
            raise PeerError(f"{flag}: {path}: no such file")
    return paths


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--trainers", default="2", help="processes T (2)")
    p.add_argument("--embedding-dim", default="64", help="D (64)")
    p.add_argument("--num-embeddings", default=None, help="rows of every table")
    p.add_argument("--num-embeddings-per-feature", default=None, help="26 rows, comma-separated")
    p.add_argument("--dense-arch-layer-sizes", default="512,256,64", help="last == D")
    p.add_argument("--over-arch-layer-sizes", default="512,512,256,1", help="last == 1")
    p.add_argument("--interaction-type", default="original", choices=["original", "dcn"],
                   help="DLRM's dot interaction (original) or DLRM_DCN's LowRankCrossNet (dcn)")
    p.add_argument("--dcn-num-layers", default="3", help="crossnet layers (3, dlrm_main's)")
    p.add_argument("--dcn-low-rank-dim", default="512", help="crossnet rank (512, dlrm_main's)")
    p.add_argument("--multi-hot-sizes", default=None,
                   help="26 bag sizes, comma-separated: each one-hot id expanded (default: none)")
    p.add_argument("--multi-hot-distribution-type", default="uniform",
                   choices=["uniform", "pareto"], help="the bags' other rows (uniform)")
    p.add_argument("--multi-hot-seed", default=None, help="the bags' key (default --seed)")
    p.add_argument("--batch-size", default="2048", help="B per trainer (2048)")
    p.add_argument("--steps", default=None, help="steps in all (default: --epochs epochs)")
    p.add_argument("--epochs", default="1", help="passes over the data (1)")
    p.add_argument("--optimizer", default="sgd", choices=["sgd", "adagrad"])
    p.add_argument("--sparse-reduce", default="sum", choices=["sum", "mean"],
                   help="tables' gradients over the trainers (sum, as ember; TorchRec's own: mean)")
    p.add_argument("--lr", default="0.05", help="learning rate, tables and dense (0.05)")
    p.add_argument("--data", required=True, help="criteo:PATH[,PATH...]")
    p.add_argument("--eval", default=None, help="criteo:PATH[,PATH...]")
    p.add_argument("--eval-every", default=None, help="also evaluate after every N steps")
    p.add_argument("--init", default=None, help="safetensors, TorchRec state_dict names")
    p.add_argument("--save", default=None, help="safetensors of the trained state_dict")
    p.add_argument("--seed", default="0", help="torch.manual_seed on every rank (0)")
    p.add_argument("--warmup-steps", default="2", help="first steps left out of the timing (2)")
    p.add_argument("--threads", default=None, help="torch threads per process (cores / T)")
    p.add_argument("--port", default=None, help="rendezvous port (a free one)")
    p.add_argument("--pipeline", default="sparse-dist", choices=["sparse-dist", "none"],
                   help="the training loop: TrainPipelineSparseDist (dlrm_main's) or plain")
    p.add_argument("--verbose", action="store_true", help="rank 0's loss at every step")
    args = p.parse_args(argv)
    check_args(args)
    return args


def check_args(a):
    a.trainers = positive_int("--trainers", a.trainers, 64)
    a.embedding_dim = positive_int("--embedding-dim", a.embedding_dim, 4096)
    if (a.num_embeddings is None) == (a.num_embeddings_per_feature is None):
        raise PeerError("give one of --num-embeddings and --num-embeddings-per-feature")
    if a.num_embeddings is not None:
        a.rows = [positive_int("--num-embeddings", a.num_embeddings)] * SPARSE
    else:
        a.rows = int_list("--num-embeddings-per-feature", a.num_embeddings_per_feature)
        if len(a.rows) != SPARSE:
            raise PeerError(f"--num-embeddings-per-feature has {len(a.rows)} values, not {SPARSE}")
    a.dense_sizes = int_list("--dense-arch-layer-sizes", a.dense_arch_layer_sizes, 65536)
    a.over_sizes = int_list("--over-arch-layer-sizes", a.over_arch_layer_sizes, 65536)
    if a.dense_sizes[-1] != a.embedding_dim:
        raise PeerError(f"--dense-arch-layer-sizes ends in {a.dense_sizes[-1]}, "
                        f"not --embedding-dim {a.embedding_dim}")
    if len(a.over_sizes) < 2 or a.over_sizes[-1] != 1:
        raise PeerError("--over-arch-layer-sizes needs two or more layers, the last of width 1")
    a.dcn = a.interaction_type == "dcn"
    a.dcn_num_layers = positive_int("--dcn-num-layers", a.dcn_num_layers, 1024)
    a.dcn_low_rank_dim = positive_int("--dcn-low-rank-dim", a.dcn_low_rank_dim, 65536)
    a.multi_hot = None
    if a.multi_hot_sizes is not None:
        a.multi_hot = int_list("--multi-hot-sizes", a.multi_hot_sizes, 1 << 20)
        if len(a.multi_hot) != SPARSE:
            raise PeerError(f"--multi-hot-sizes has {len(a.multi_hot)} values, not {SPARSE}")
    a.batch_size = positive_int("--batch-size", a.batch_size, 2**24)
    a.steps = None if a.steps is None else int(a.steps) if a.steps == "0" else \
        positive_int("--steps", a.steps)
    a.epochs = positive_int("--epochs", a.epochs, 2**20)
    a.eval_every = None if a.eval_every is None else positive_int("--eval-every", a.eval_every)
    a.warmup_steps = 0 if a.warmup_steps == "0" else positive_int("--warmup-steps", a.warmup_steps)
    a.seed = 0 if a.seed == "0" else positive_int("--seed", a.seed, 2**63 - 1)
    a.multi_hot_seed = a.seed if a.multi_hot_seed is None else 0 if a.multi_hot_seed == "0" \
        else positive_int("--multi-hot-seed", a.multi_hot_seed, 2**63 - 1)
    a.threads = None if a.threads is None else positive_int("--threads", a.threads, 1024)
    a.port = None if a.port is None else positive_int("--port", a.port, 65535)
    try:
        a.lr = float(a.lr)
    except ValueError:
        raise PeerError(f"--lr '{a.lr}' is not a number") from None
    if not (a.lr > 0 and math.isfinite(a.lr)):
        raise PeerError(f"--lr {a.lr} is not a positive finite number")
    a.data_paths = criteo_paths("--data", a.data)
    a.eval_paths = None if a.eval is None else criteo_paths("--eval", a.eval)
    if a.init is not None:
        check_init_header(a)
    if a.save is not None:
        folder = os.path.dirname(os.path.abspath(a.save))
        if not os.access(folder, os.W_OK):
            raise PeerError(f"--save: {a.save}: its folder is not writable")


# ---------------------------------------------------------------- Criteo


def field_name(f):
    return "label" if f == 0 else f"I{f}" if f <= DENSE else f"C{f - DENSE}"


def line_error(line):
    """Why ember's parser refuses @line (bytes, no newline), in its words."""
    if len(line) > LINE_MAX:
        return f"longer than {LINE_MAX} bytes"
    if b"\0" in line:
        return "a NUL byte"
    if line.endswith(b"\r"):
        line = line[:-1]
    fields = line.split(b"\t")
    for f, text in enumerate(fields[: 1 + DENSE + SPARSE]):
        shown = text[:40].decode("utf-8", "replace")
        if f == 0 and text not in (b"0", b"1"):
            return f"field label is '{shown}', not 0 or 1"
        if 1 <= f <= DENSE and text and not re.fullmatch(rb"-?[0-9]{1,19}", text):
            return f"field {field_name(f)} is '{shown}', not a 64-bit integer"
        if f > DENSE and text and not re.fullmatch(rb"[0-9a-fA-F]{1,16}", text):
            return f"field {field_name(f)} is '{shown}', not 1-16 hexadecimal digits"
    if len(fields) > 1 + DENSE + SPARSE:
        return f"more than {1 + DENSE + SPARSE} tab-separated fields"
    return f"{len(fields)} tab-separated fields, not {1 + DENSE + SPARSE} (label, I1-I13, C1-C26)"


def own_lines(paths, rank, trainers, limit):
    """The lines (file, line number, bytes) of examples i % trainers == rank
    among the first @limit (None: all) of @paths read in order, and how many
    examples those first ones were."""
    mine, i = [], 0
    for path in paths:
        with open(path, "rb") as file:
            for number, line in enumerate(file, 1):
                if limit is not None and i == limit:
                    return mine, i
                if i % trainers == rank:
                    mine.append((path, number, line.rstrip(b"\n")))
                i += 1
    return mine, i


def parse_lines(lines, rows):
    """Labels [n], dense [n, 13] and ids [n, 26] as ember's reader makes them."""
    import numpy as np

    labels, ints, ids = [], [], []
    for path, number, line in lines:
        if not LINE_RE.fullmatch(line):
            raise PeerError(f"{path}:{number}: {line_error(line)}")
        fields = line.rstrip(b"\r").split(b"\t")
        labels.append(fields[0] == b"1")
        ints.append([int(x) if x else 0 for x in fields[1 : 1 + DENSE]])
        ids.append([int(x, 16) if x else 0 for x in fields[1 + DENSE :]])
    try:
        ints = np.array(ints, dtype=np.int64).reshape(len(lines), DENSE)
    except OverflowError:
        raise PeerError(out_of_range(lines, ints)) from None
    dense = np.log(np.maximum(ints, 0).astype(np.float64) + 1.0).astype(np.float32)
    ids = np.array(ids, dtype=np.uint64).reshape(len(lines), SPARSE)
    sparse = (ids % np.asarray(rows, dtype=np.uint64)).astype(np.int64)
    return np.array(labels, dtype=np.float32), dense, sparse


def out_of_range(lines, ints):
    """The first dense value of @ints beyond 64 bits, as ember names it."""
    for (path, number, line), values in zip(lines, ints):
        for f, x in enumerate(values):
            if not INT64_MIN <= x <= INT64_MAX:
                shown = line.split(b"\t")[1 + f].decode()
                return f"{path}:{number}: field I{f + 1} is '{shown}', not a 64-bit integer"
    return "a dense value beyond 64 bits"


def read_criteo(paths, rows, rank, trainers, limit=None, multi_hot=None):
    """(labels, dense, sparse, examples of the files read); sparse [n, 26]
    one id a feature, or with @multi_hot (multi_hot_spec) 26 arrays [n, m_f]."""
    lines, examples = own_lines(paths, rank, trainers, limit)
    labels, dense, sparse = parse_lines(lines, rows)
    if multi_hot is not None:
        sys.path.insert(0, TESTS_TRAIN)
        import dcn_ref

        sizes, seed, dist = multi_hot
        sparse = dcn_ref.expand_ids(sparse, sizes, rows, seed, dist)
    return labels, dense, sparse, examples


def multi_hot_spec(args):
    """read_criteo's multi_hot for @args: None, or (sizes, seed, distribution)."""
    if args.multi_hot is None:
        return None
    return args.multi_hot, args.multi_hot_seed, args.multi_hot_distribution_type


# ---------------------------------------------------------------- metrics


def roc_auc(scores, labels):
    """Exact ROC AUC, a tie counted half (ember_roc_auc's definition)."""
    import numpy as np

    if np.isnan(scores).any():
        raise PeerError("eval: a NaN logit")
    positives = int(labels.sum())
    if positives in (0, len(labels)):
        raise PeerError("eval: the AUC needs positive and negative examples")
    _, group = np.unique(scores, return_inverse=True)
    pos = np.bincount(group, weights=labels.astype(np.float64))
    neg = np.bincount(group).astype(np.float64) - pos
    below = np.cumsum(neg) - neg
    return float((pos * below + 0.5 * pos * neg).sum() / (positives * (len(labels) - positives)))


def log_loss(logits, labels):
    """Mean BCE with logits, in double (ember_log_loss's formula)."""
    import numpy as np

    x, y = logits.astype(np.float64), labels.astype(np.float64)
    return float(np.mean(np.maximum(x, 0) - x * y + np.log1p(np.exp(-np.abs(x)))))


# ---------------------------------------------------------------- safetensors


def read_safetensors(path):
    """Every tensor of @path (F32 only, as the contract says) and its metadata."""
    from safetensors import safe_open

    try:
        with safe_open(path, framework="pt") as f:
            meta = f.metadata() or {}
            tensors = {}
            for name in f.keys():
                dtype = f.get_slice(name).get_dtype()
                if dtype != "F32":
                    raise PeerError(f"{path}: tensor {name} is {dtype}, not F32")
                tensors[name] = f.get_tensor(name)
    except PeerError:
        raise
    except Exception as e:  # safetensors reports a bad file as a SafetensorError
        raise PeerError(f"{path}: not a safetensors file: {e}") from None
    return tensors, meta


def write_safetensors(path, entries, metadata):
    """Write F32 tensors one at a time: @entries is [(name, shape, get)], get()
    returning the tensor (contiguous F32 of that shape) when its turn comes, so
    a gathered table need not stay in memory beside the next one."""
    header, offset = {}, 0
    for name, shape, _ in entries:
        size = 4 * math.prod(shape)
        header[name] = {"dtype": "F32", "shape": list(shape), "data_offsets": [offset, offset + size]}
        offset += size
    header["__metadata__"] = metadata
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "wb") as out:
        out.write(struct.pack("<Q", len(text)) + text)
        for name, shape, get in entries:
            tensor = get()
            if tuple(tensor.shape) != tuple(shape) or str(tensor.dtype) != "torch.float32":
                raise PeerError(f"{path}: {name} is {tuple(tensor.shape)} {tensor.dtype}")
            out.write(tensor.contiguous().numpy().tobytes())
    os.replace(tmp, path)


# ---------------------------------------------------------------- model


def build_dlrm(args, table_device):
    import torch
    from torchrec import EmbeddingBagCollection
    from torchrec.models.dlrm import DLRM, DLRM_DCN
    from torchrec.modules.embedding_configs import EmbeddingBagConfig

    tables = [
        EmbeddingBagConfig(name=TABLE_NAMES[f], embedding_dim=args.embedding_dim,
                           num_embeddings=args.rows[f], feature_names=[CAT_NAMES[f]])
        for f in range(SPARSE)
    ]
    ebc = EmbeddingBagCollection(tables=tables, device=table_device)
    if getattr(args, "dcn", False):
        return DLRM_DCN(embedding_bag_collection=ebc, dense_in_features=DENSE,
                        dense_arch_layer_sizes=args.dense_sizes,
                        over_arch_layer_sizes=args.over_sizes,
                        dcn_num_layers=args.dcn_num_layers,
                        dcn_low_rank_dim=args.dcn_low_rank_dim, dense_device=torch.device("cpu"))
    return DLRM(
        embedding_bag_collection=ebc,
        dense_in_features=DENSE,
        dense_arch_layer_sizes=args.dense_sizes,
        over_arch_layer_sizes=args.over_sizes,
        dense_device=torch.device("cpu"),
    )


def optimizer_class(name):
    import torch

    return {"sgd": torch.optim.SGD, "adagrad": torch.optim.Adagrad}[name]


def optimizer_kwargs(args):
    # torch.optim.Adagrad's eps (ember's too); FBGEMM's own default is 1e-8.
    return {"lr": args.lr, "eps": 1e-10} if args.optimizer == "adagrad" else {"lr": args.lr}


def row_wise_plan(ebc, trainers):
    """Every table row-wise over the ranks: rank r holds rows [r*ceil(N/T),
    (r+1)*ceil(N/T)) of a table of N rows."""
    from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder
    from torchrec.distributed.sharding_plan import construct_module_sharding_plan, row_wise
    from torchrec.distributed.types import ShardingPlan

    sharder = EmbeddingBagCollectionSharder()
    module_plan = construct_module_sharding_plan(
        ebc, {name: row_wise() for name in TABLE_NAMES}, sharder=sharder, local_size=trainers,
        world_size=trainers, device_type="cpu")
    return ShardingPlan({TRAIN_PREFIX + "sparse_arch.embedding_bag_collection": module_plan}), \
        sharder


def expected_names(args):
    """The contract's state_dict: name -> shape, tables first."""
    names = {EBC_PREFIX + TABLE_NAMES[f] + ".weight": (args.rows[f], args.embedding_dim)
             for f in range(SPARSE)}
    sizes = [DENSE] + args.dense_sizes
    for i in range(len(args.dense_sizes)):
        names[f"dense_arch.model._mlp.{i}._linear.weight"] = (sizes[i + 1], sizes[i])
        names[f"dense_arch.model._mlp.{i}._linear.bias"] = (sizes[i + 1],)
    over_in = args.embedding_dim + SPARSE + SPARSE * (SPARSE - 1) // 2
    if getattr(args, "dcn", False):  # DLRM_DCN: crossnet of (F+1) D in and out
        over_in = (SPARSE + 1) * args.embedding_dim
        for kind, shape in (("W_kernels", (over_in, args.dcn_low_rank_dim)),
                            ("V_kernels", (args.dcn_low_rank_dim, over_in)),
                            ("bias", (over_in,))):
            for i in range(args.dcn_num_layers):
                names[f"inter_arch.crossnet.{kind}.{i}"] = shape
    sizes = [over_in] + args.over_sizes
    last = len(args.over_sizes) - 1
    for i in range(last):
        names[f"over_arch.model.0._mlp.{i}._linear.weight"] = (sizes[i + 1], sizes[i])
        names[f"over_arch.model.0._mlp.{i}._linear.bias"] = (sizes[i + 1],)
    names["over_arch.model.1.weight"] = (1, sizes[last])
    names["over_arch.model.1.bias"] = (1,)
    return names


def check_init_header(args):
    """--init's names, shapes and dtypes from its header alone, before any
    process starts: every name of the contract's, no other."""
    from safetensors import safe_open

    if not os.path.isfile(args.init):
        raise PeerError(f"--init: {args.init}: no such file")
    want = expected_names(args)
    try:
        with safe_open(args.init, framework="pt") as f:
            have = {name: f.get_slice(name) for name in f.keys()}
            have = {name: (tuple(s.get_shape()), s.get_dtype()) for name, s in have.items()}
    except Exception as e:  # safetensors reports a bad file as a SafetensorError
        raise PeerError(f"--init {args.init}: not a safetensors file: {e}") from None
    problems = [f"{n} missing" for n in want if n not in have]
    problems += [f"{n} unexpected" for n in have if n not in want]
    problems += [f"{n} is {list(have[n][0])} {have[n][1]}, not {list(want[n])} F32"
                 for n in want if n in have and have[n] != (tuple(want[n]), "F32")]
    if problems:
        more = f" (and {len(problems) - 3} more)" if len(problems) > 3 else ""
        raise PeerError(f"--init {args.init}: {'; '.join(problems[:3])}{more}")


def check_init(args, tensors):
    """@tensors against an unsharded DLRM (meta tables) with strict=True:
    every name, no other, every shape."""
    import warnings

    model = build_dlrm(args, "meta")
    try:
        with warnings.catch_warnings():  # copying into meta tables does nothing, as meant
            warnings.simplefilter("ignore", UserWarning)
            model.load_state_dict(tensors, strict=True)
    except RuntimeError as e:
        raise PeerError(f"--init {args.init}: {e}".replace("\n", " ")) from None


def load_sharded(dmp, tensors, path):
    """The sharded equivalent of load_state_dict(strict=True): each rank
    copies its rows of every table; DMP does not raise on its own."""
    result = dmp.load_state_dict({TRAIN_PREFIX + n: t for n, t in tensors.items()}, strict=True)
    if result.missing_keys or result.unexpected_keys:
        raise PeerError(f"--init {path}: missing {result.missing_keys}, "
                        f"unexpected {result.unexpected_keys}")
    state = dmp.state_dict()
    for name, want in tensors.items():
        have = state[TRAIN_PREFIX + name]
        if hasattr(have, "local_shards"):
            for shard in have.local_shards():
                lo = shard.metadata.shard_offsets[0]
                rows = shard.tensor.shape[0]
                if not torch_equal(shard.tensor, want[lo : lo + rows]):
                    raise PeerError(f"--init {path}: {name} rows {lo}.. did not load")
        elif not torch_equal(have, want):
            raise PeerError(f"--init {path}: {name} did not load")


def torch_equal(a, b):
    import torch

    return torch.equal(a.detach(), b)


# ---------------------------------------------------------------- training


class Batches:
    """Every step's Batch (dense, KeyedJaggedTensor of one id per table per
    example, or of each feature's multi-hot bags, labels) for one rank, or
    the eval batches.  @sparse: [n, 26] ids, or 26 arrays [n, m_f] of bags."""

    def __init__(self, labels, dense, sparse, batch_size, count):
        import numpy as np
        import torch
        from torchrec.datasets.utils import Batch
        from torchrec.sparse.jagged_tensor import KeyedJaggedTensor

        self.items = []
        bags = isinstance(sparse, list)
        sizes = [b.shape[1] for b in sparse] if bags else [1] * SPARSE
        lengths = torch.from_numpy(np.repeat(np.array(sizes, dtype=np.int32), batch_size))
        for k in range(count):
            lo, hi = k * batch_size, (k + 1) * batch_size
            if bags:  # feature-major: feature f's B bags of m_f rows, in order
                ids = torch.from_numpy(np.concatenate([b[lo:hi].reshape(-1) for b in sparse]))
            else:
                ids = torch.from_numpy(sparse[lo:hi].T.copy()).reshape(-1)
            kjt = KeyedJaggedTensor.from_lengths_sync(keys=CAT_NAMES, values=ids, lengths=lengths)
            self.items.append(Batch(dense_features=torch.from_numpy(dense[lo:hi].copy()),
                                    sparse_features=kjt,
                                    labels=torch.from_numpy(labels[lo:hi].copy())))


def pad_to(labels, dense, sparse, n):
    import numpy as np

    extra = n - len(labels)
    if isinstance(sparse, list):
        sparse = [np.concatenate([b, np.zeros((extra, b.shape[1]), np.int64)]) for b in sparse]
    else:
        sparse = np.concatenate([sparse, np.zeros((extra, SPARSE), np.int64)])
    return (np.concatenate([labels, np.zeros(extra, np.float32)]),
            np.concatenate([dense, np.zeros((extra, DENSE), np.float32)]), sparse)


def evaluate(args, dmp, batches, count, step, rank):
    """Logits of every eval example gathered on rank 0, which prints their
    AUC and log loss; every rank runs the (padded) batches."""
    import numpy as np
    import torch
    import torch.distributed as dist

    dmp.eval()
    with torch.no_grad():
        logits = torch.cat([dmp(batch)[1][1] for batch in batches.items])
    labels = torch.cat([batch.labels for batch in batches.items])
    every = [torch.empty_like(logits) for _ in range(args.trainers)]
    every_labels = [torch.empty_like(labels) for _ in range(args.trainers)]
    dist.all_gather(every, logits)
    dist.all_gather(every_labels, labels)
    dmp.train()
    if rank != 0:
        return
    z = np.concatenate([every[t][: count[t]].numpy() for t in range(args.trainers)])
    y = np.concatenate([every_labels[t][: count[t]].numpy() for t in range(args.trainers)])
    print(f"eval step {step}: auc {roc_auc(z, y):.6f} logloss {log_loss(z, y):.6f} "
          f"examples {len(y)}", flush=True)


def train_data(args, rank):
    """This rank's step tensors and the number of steps (from the data)."""
    per_step = args.batch_size * args.trainers
    limit = None if args.steps is None else args.steps * per_step
    start = time.perf_counter()
    labels, dense, sparse, examples = read_criteo(args.data_paths, args.rows, rank, args.trainers,
                                                  limit, multi_hot_spec(args))
    per_epoch = examples // per_step
    if per_epoch == 0 and args.steps != 0:
        raise PeerError(f"--data {args.data}: {examples} examples, fewer than one step's "
                        f"{per_step} (--batch-size {args.batch_size} x {args.trainers} trainers)")
    steps = per_epoch * args.epochs if args.steps is None else min(args.steps,
                                                                   per_epoch * args.epochs)
    batches = Batches(labels, dense, sparse, args.batch_size, min(per_epoch, steps))
    if rank == 0:
        cut = "" if args.steps is None or steps == args.steps else \
            f" (--steps {args.steps}: the data holds {steps} in {args.epochs} epoch(s))"
        print(f"data: {examples} examples read from {args.data}, {per_epoch} steps an epoch, "
              f"{steps} steps{cut}; parsed into tensors in {time.perf_counter() - start:.1f} s "
              "(not timed)", flush=True)
    return batches, per_epoch, steps


def eval_data(args, rank):
    if args.eval_paths is None:
        return None, None
    labels, dense, sparse, examples = read_criteo(args.eval_paths, args.rows, rank, args.trainers,
                                                  multi_hot=multi_hot_spec(args))
    count = [len(range(t, examples, args.trainers)) for t in range(args.trainers)]
    if examples == 0:
        raise PeerError(f"--eval {args.eval}: no examples")
    batches = -(-count[0] // args.batch_size)
    labels, dense, sparse = pad_to(labels, dense, sparse, batches * args.batch_size)
    return Batches(labels, dense, sparse, args.batch_size, batches), count


def wrap_model(args, rank):
    """DLRMTrain(DLRM) under DistributedModelParallel, as dlrm_main builds
    it but with the row-wise plan, and the optimizer over both halves."""
    import torch
    from torchrec.distributed.model_parallel import DistributedModelParallel
    from torchrec.models.dlrm import DLRMTrain
    from torchrec.optim.apply_optimizer_in_backward import apply_optimizer_in_backward
    from torchrec.optim.keyed import CombinedOptimizer, KeyedOptimizerWrapper
    from torchrec.optim.optimizers import in_backward_optimizer_filter

    tensors = None
    if args.init is not None:
        tensors, _ = read_safetensors(args.init)
        check_init(args, tensors)
    model = DLRMTrain(build_dlrm(args, torch.device("meta")))
    cls = optimizer_class(args.optimizer)
    apply_optimizer_in_backward(cls, model.model.sparse_arch.parameters(), optimizer_kwargs(args))
    plan, sharder = row_wise_plan(model.model.sparse_arch.embedding_bag_collection, args.trainers)
    dmp = DistributedModelParallel(module=model, device=torch.device("cpu"), plan=plan,
                                   sharders=[sharder])
    if tensors is not None:
        load_sharded(dmp, tensors, args.init)
        del tensors
    dense = KeyedOptimizerWrapper(dict(in_backward_optimizer_filter(dmp.named_parameters())),
                                  lambda params: cls(params, lr=args.lr))
    if rank == 0:
        kernels = sorted({p.compute_kernel for m in plan.plan.values() for p in m.values()})
        model_name = f"DLRM_DCN ({args.dcn_num_layers} layers, rank {args.dcn_low_rank_dim})" \
            if args.dcn else "DLRM"
        bags = "one id a feature" if args.multi_hot is None else \
            (f"multi-hot {args.multi_hot_distribution_type} bags of {sum(args.multi_hot)} ids an "
             f"example, seed {args.multi_hot_seed}")
        print(f"model: {model_name}; {bags}", flush=True)
        print(f"plan: {SPARSE} tables row-wise over {args.trainers} ranks ({sum(args.rows)} rows "
              f"x {args.embedding_dim}, kernel {','.join(kernels)}), fused {args.optimizer} "
              f"lr {args.lr}, gradients {args.sparse_reduce} over trainers; dense under DDP, "
              f"{args.optimizer}; loop: {args.pipeline}", flush=True)
    return dmp, CombinedOptimizer([dmp.fused_optimizer, dense])


class Clock:
    """Seconds of the steps from --warmup-steps on, eval left out: each
    interval starts and ends at a barrier, so it is every rank's."""

    def __init__(self, warmup):
        self.warmup, self.seconds, self.start = warmup, 0.0, None

    def begin(self, step):
        import torch.distributed as dist

        if step >= self.warmup and self.start is None:
            dist.barrier()
            self.start = time.perf_counter()

    def end(self):
        import torch.distributed as dist

        if self.start is not None:
            dist.barrier()
            self.seconds += time.perf_counter() - self.start
            self.start = None


def segments(steps, every):
    """[first, last) step ranges between evaluations."""
    cuts = list(range(every, steps, every)) if every else []
    return list(zip([0] + cuts, cuts + [steps]))


def train(args, rank, dmp, optimizer, data, evals):
    """Run every step; the seconds timed, and each step's loss. The steps
    between two evaluations run in one TrainPipelineSparseDist (dlrm_main's
    loop: the next batch's input all-to-all overlaps this one's forward and
    backward), or, with --pipeline none, one forward/backward/step each."""
    import torch
    from torchrec.distributed import TrainPipelineSparseDist

    batches, per_epoch, steps = data
    losses, clock = torch.zeros(steps), Clock(args.warmup_steps)
    for first, last in segments(steps, args.eval_every if evals[0] is not None else None):
        items = [batches.items[s % per_epoch] for s in range(first, last)]
        pipe = TrainPipelineSparseDist(dmp, optimizer, torch.device("cpu")) \
            if args.pipeline == "sparse-dist" else None
        source = iter(items)
        for step in range(first, last):
            clock.begin(step)
            if pipe is not None:
                loss = pipe.progress(source)[0]
            else:
                optimizer.zero_grad()
                loss = dmp(items[step - first])[0]
                loss.backward()
                optimizer.step()
            losses[step] = loss.detach()
            if args.verbose and rank == 0:
                print(f"step {step + 1} loss {loss.item():.6f}", flush=True)
        clock.end()
        if pipe is not None:
            pipe.detach()
        if last < steps:
            evaluate(args, dmp, evals[0], evals[1], last, rank)
    return clock.seconds, losses


def save(args, dmp, losses, rank):
    """Gather the row-wise shards table by table onto rank 0 and write them
    there, with the losses [steps][trainers] as the contract's metadata."""
    import torch
    import torch.distributed as dist
    from torch.distributed._shard.sharded_tensor import ShardedTensor

    every = [torch.empty_like(losses) for _ in range(args.trainers)]
    dist.all_gather(every, losses)
    state = {n[len(TRAIN_PREFIX):]: t for n, t in dmp.state_dict().items()}
    names = expected_names(args)
    if set(state) != set(names):
        raise PeerError(f"--save: the model's names {sorted(set(state) ^ set(names))} "
                        "are not the contract's")

    def get(name):
        value = state[name]
        if not isinstance(value, ShardedTensor):
            return value.detach()
        full = torch.empty(names[name]) if rank == 0 else None
        value.gather(dst=0, out=full)
        return full

    entries = [(name, shape, lambda name=name: get(name)) for name, shape in names.items()]
    if rank != 0:
        for _, _, fetch in entries:
            fetch()
        dist.barrier()
        return
    table = torch.stack(every, dim=1) if len(losses) else torch.zeros(0, args.trainers)
    import torchrec

    metadata = {
        "producer": f"torchrec_dlrm.py (torchrec {torchrec.__version__})",
        "losses_shape": f"{table.shape[0]},{args.trainers}",
        "losses": ",".join(f"{v:.9g}" for v in table.reshape(-1).tolist()),
    }
    write_safetensors(args.save, entries, metadata)
    dist.barrier()
    print(f"saved {args.save}", flush=True)


def quiet():
    """TorchRec 1.9's own deprecation warnings (DDP's broadcast_buffers, gloo's
    collectives' names) and torch.fx's notice, once per process: not ours."""
    import logging
    import warnings

    warnings.filterwarnings("ignore", category=FutureWarning)
    # A rank holding no rows of a small table (fewer rows than ranks).
    warnings.filterwarnings("ignore", message="Gathering a tensor with zero elements")
    logging.getLogger("torch.fx._symbolic_trace").setLevel(logging.ERROR)


def worker(rank, args, port):
    quiet()
    try:
        run(rank, args, port)
    except PeerError as e:
        print(f"torchrec_dlrm: rank {rank}: {e}", file=sys.stderr, flush=True)
        sys.exit(2)


def run(rank, args, port):
    import torch
    import torch.distributed as dist
    from torchrec.distributed.comm_ops import set_gradient_division

    torch.set_num_threads(args.threads or max(1, (os.cpu_count() or 1) // args.trainers))
    torch.manual_seed(args.seed)
    # TorchRec divides the pooled embeddings' gradients by the world size in
    # its collectives' backward (a mean over trainers, like DDP's for the
    # dense part); ember sums them unless --sparse-reduce mean.
    set_gradient_division(args.sparse_reduce == "mean")
    data = train_data(args, rank)
    steps = data[2]
    evals = eval_data(args, rank)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=args.trainers)
    dmp, optimizer = wrap_model(args, rank)
    timed, losses = train(args, rank, dmp, optimizer, data, evals)
    timed_steps = max(0, steps - args.warmup_steps)
    examples = timed_steps * args.batch_size * args.trainers
    if rank == 0:
        if timed_steps:
            print(f"examples/s {examples / timed:.1f} (steps {args.warmup_steps + 1}-{steps} "
                  f"timed, {min(steps, args.warmup_steps)} warm-up steps not; {args.trainers} "
                  f"trainers x batch {args.batch_size}; {timed:.3f} s)", flush=True)
        else:
            print(f"examples/s - ({steps} steps, none after {args.warmup_steps} warm-up steps)",
                  flush=True)
    if evals[0] is not None:
        evaluate(args, dmp, evals[0], evals[1], steps, rank)
    if args.save is not None:
        save(args, dmp, losses, rank)
    if rank == 0 and timed_steps:
        print(f"RESULT steps_per_s={timed_steps * args.trainers / timed:.1f} "
              f"steps={timed_steps * args.trainers} seconds={timed:.3f} trainers={args.trainers} "
              f"rows={sum(args.rows)} dim={args.embedding_dim} "
              f"examples_per_s={examples / timed:.1f} batch={args.batch_size}", flush=True)
    dist.destroy_process_group()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main(argv):
    try:
        args = parse_args(argv)
    except PeerError as e:
        print(f"torchrec_dlrm: {e}", file=sys.stderr)
        return 2
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    import torch
    import torch.multiprocessing as mp
    import torchrec
    import fbgemm_gpu

    print(f"torchrec_dlrm: torch {torch.__version__}, torchrec {torchrec.__version__}, "
          f"fbgemm_gpu {fbgemm_gpu.__version__}, {args.trainers} processes on gloo (CPU)",
          flush=True)
    try:
        mp.spawn(worker, args=(args, args.port or free_port()), nprocs=args.trainers, join=True)
    except mp.ProcessExitedException as e:
        print(f"torchrec_dlrm: {e}", file=sys.stderr)
        return 2 if e.exit_code == 2 else 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

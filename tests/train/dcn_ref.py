#!/usr/bin/python3
"""A plain-PyTorch reference of TorchRec's DLRM_DCN, and ember's synthetic multi-hot.

    dcn_ref.py selftest      the checks below; exit 1 at the first failure

Works on torch 1.13 (Debian's) and 2.x; needs no TorchRec.  Importing it
does not import torch: the numpy half (multi_hot_*) loads fast, the torch
half on first use of a torch name (PEP 562).

The multi-hot (include/ember/data.h, ember_data_multi_hot_row; MLPerf's
DLRM-dcnv2 reference's synthetic multi-hot): with a bag size m for one-id
feature f, row r becomes the bag [r, g(1), ..., g(m-1)] of rows of a table
of n rows, g(j) keyed by (seed, f, r, j) in uint64 wrapping arithmetic:

    mix(x)   = splitmix64's step: x += 0x9e3779b97f4a7c15;
               x = (x ^ x >> 30) * 0xbf58476d1ce4e5b9;
               x = (x ^ x >> 27) * 0x94d049bb133111eb; x ^ x >> 31
    h        = mix(mix(mix(mix(seed) ^ f) ^ r) ^ j)
    uniform: h % n
    pareto:  t = 1 - (h >> 11) 2^-53 (double, in (0, 1]);
             v = 1 / ((t t)(t t)) - 1   (numpy's pareto(0.25) from 1 - t)
             k = 2^63 - 1 if v >= 2^63 else (uint64) v;  k % n

    multi_hot_row(seed, f, r, j, n, dist)    one value, in Python integers
    multi_hot_rows(seed, f, rows, m, n, dist) numpy int64 [len(rows)][m]:
                                             column 0 = rows, column j = g(j)
    expand_ids(ids, sizes, n_rows, seed, dist)
                                             ids [B][F] (one id a feature) ->
                                             F arrays [B][sizes[f]]

The model (torchrec/modules/crossnet.py and torchrec/models/dlrm.py,
TorchRec 1.9):

    LowRankCrossNet(in_features, num_layers, low_rank)
        W_kernels.l [in][r], V_kernels.l [r][in] (xavier_normal_),
        bias.l [in] (zeros); per layer
        x_l = x_0 * (F.linear(F.linear(x_l, V_l), W_l) + bias_l) + x_l
    InteractionDCNArch(num_sparse_features, crossnet)
        (dense_out [B][D], pooled [B][F][D]) ->
        crossnet(cat(dense_out, pooled_0, ..., pooled_F-1) as [B][(F+1) D])
    build_dlrm_dcn(dim, rows, dense_sizes, over_sizes, num_layers, low_rank)
        DLRM_DCN of plain modules under TorchRec's names: sparse_arch
        (nn.EmbeddingBag(n_f, D, mode="sum") per feature, t_cat_f), dense_arch
        (Linear + ReLU per layer), inter_arch (InteractionDCNArch over a
        LowRankCrossNet of (F+1) D inputs), over_arch (Linear + ReLU per
        layer but the last; (F+1) D inputs).  forward(dense [B][13], bags)
        -> logits [B]; bags either one LongTensor [B][F] (one id a feature)
        or a list of F LongTensors [B][m_f] (feature f's bag of m_f rows
        per example, expand_ids's output).  .table_names: the tables'
        state_dict names (as dlrm_sync_ref's model).  Tables keep
        nn.EmbeddingBag's init; the caller sets TorchRec's (uniform
        +-sqrt(1/n)) or loads a file.
    dlrm_dcn_shapes(dim, rows, dense_sizes, over_sizes, num_layers, low_rank)
        {name: shape} of TorchRec's DLRM_DCN state_dict, spelled out.
    crossnet_shapes(in_features, num_layers, low_rank, prefix)
        the same for the crossnet alone.
"""
import sys

import numpy as np

DENSE = 13
MASK = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15
M1, M2 = 0xBF58476D1CE4E5B9, 0x94D049BB133111EB
DISTS = ("uniform", "pareto")
TABLE_PREFIX = "sparse_arch.embedding_bag_collection.embedding_bags."


# ---- the multi-hot (numpy) ---------------------------------------------


def _mix_int(x):
    x = (x + GOLDEN) & MASK
    x = ((x ^ (x >> 30)) * M1) & MASK
    x = ((x ^ (x >> 27)) * M2) & MASK
    return x ^ (x >> 31)


def _check(m, n_rows, dist):
    if dist not in DISTS:
        raise ValueError(f"multi-hot distribution '{dist}' is not one of {DISTS}")
    if n_rows < 1 or m < 1:
        raise ValueError(f"multi-hot: bag size {m} and rows {n_rows} must be >= 1")


def multi_hot_row(seed, feature, row, j, n_rows, dist):
    """Value @j (>= 1) of row @row's bag in feature @feature (a table of
    @n_rows rows): ember_data_multi_hot_row, in Python integers."""
    _check(1, n_rows, dist)
    h = _mix_int(_mix_int(_mix_int(_mix_int(seed & MASK) ^ feature) ^ (row & MASK)) ^ j)
    if dist == "uniform":
        return h % n_rows
    t = 1.0 - float(h >> 11) * 2.0 ** -53
    tt = t * t
    v = 1.0 / (tt * tt) - 1.0
    k = (1 << 63) - 1 if v >= 2.0 ** 63 else int(v)
    return k % n_rows


def _mix(x):
    """splitmix64's step on a uint64 array (numpy's uint64 arithmetic wraps)."""
    x = x + np.uint64(GOLDEN)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(M1)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(M2)
    return x ^ (x >> np.uint64(31))


def multi_hot_rows(seed, feature, rows, m, n_rows, dist):
    """The bags of @rows (ints in [0, n_rows)) of feature @feature with bag
    size @m: int64 [len(rows)][m], column 0 the rows themselves, column j
    multi_hot_row(seed, feature, row, j, n_rows, dist)."""
    _check(m, n_rows, dist)
    rows = np.asarray(rows, dtype=np.int64).reshape(-1)
    out = np.empty((len(rows), m), dtype=np.int64)
    out[:, 0] = rows
    if m == 1:
        return out
    with np.errstate(over="ignore"):
        key = np.uint64(_mix_int(_mix_int(seed & MASK) ^ feature))
        per_row = _mix(np.bitwise_xor(rows.astype(np.uint64), key))
        for j in range(1, m):
            h = _mix(per_row ^ np.uint64(j))
            if dist == "uniform":
                out[:, j] = (h % np.uint64(n_rows)).astype(np.int64)
                continue
            t = 1.0 - (h >> np.uint64(11)).astype(np.float64) * 2.0 ** -53
            tt = t * t
            v = 1.0 / (tt * tt) - 1.0
            big = v >= 2.0 ** 63
            k = np.where(big, 0.0, v).astype(np.uint64)
            k[big] = np.uint64((1 << 63) - 1)
            out[:, j] = (k % np.uint64(n_rows)).astype(np.int64)
    return out


def expand_ids(ids, sizes, n_rows, seed, dist):
    """One-id features @ids [B][F] (int, each < n_rows[f]) -> F int64 arrays
    [B][sizes[f]]: feature f's multi-hot bags."""
    ids = np.asarray(ids)
    if ids.ndim != 2 or ids.shape[1] != len(sizes) or len(n_rows) != len(sizes):
        raise ValueError(f"expand_ids: ids {ids.shape}, {len(sizes)} sizes, {len(n_rows)} tables")
    return [multi_hot_rows(seed, f, ids[:, f], sizes[f], n_rows[f], dist)
            for f in range(len(sizes))]


# ---- shapes --------------------------------------------------------------


def crossnet_shapes(in_features, num_layers, low_rank, prefix="inter_arch.crossnet."):
    shapes = {}
    for kind, shape in (("W_kernels", (in_features, low_rank)),
                        ("V_kernels", (low_rank, in_features)), ("bias", (in_features,))):
        for i in range(num_layers):
            shapes[f"{prefix}{kind}.{i}"] = shape
    return shapes


def dlrm_dcn_shapes(dim, rows, dense_sizes, over_sizes, num_layers, low_rank):
    """{name: shape} of TorchRec's DLRM_DCN state_dict."""
    shapes = {f"{TABLE_PREFIX}t_cat_{f}.weight": (n, dim) for f, n in enumerate(rows)}
    widths = [DENSE] + list(dense_sizes)
    for i in range(len(dense_sizes)):
        shapes[f"dense_arch.model._mlp.{i}._linear.weight"] = (widths[i + 1], widths[i])
        shapes[f"dense_arch.model._mlp.{i}._linear.bias"] = (widths[i + 1],)
    inter = (len(rows) + 1) * dim
    shapes.update(crossnet_shapes(inter, num_layers, low_rank))
    widths = [inter] + list(over_sizes)
    for i in range(len(over_sizes) - 1):
        shapes[f"over_arch.model.0._mlp.{i}._linear.weight"] = (widths[i + 1], widths[i])
        shapes[f"over_arch.model.0._mlp.{i}._linear.bias"] = (widths[i + 1],)
    shapes["over_arch.model.1.weight"] = (widths[-1], widths[-2])
    shapes["over_arch.model.1.bias"] = (widths[-1],)
    return shapes


# ---- the model (torch, loaded on first use) ------------------------------

_TORCH_NAMES = ("LowRankCrossNet", "InteractionDCNArch", "build_dlrm_dcn")
_torch_half = {}


def __getattr__(name):
    if name in _TORCH_NAMES:
        if not _torch_half:
            _torch_half.update(_define())
        return _torch_half[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _define():
    import torch
    from torch import nn
    from torch.nn import functional as F

    class LowRankCrossNet(nn.Module):
        """torchrec.modules.crossnet.LowRankCrossNet."""

        def __init__(self, in_features, num_layers, low_rank=1):
            super().__init__()
            assert low_rank >= 1, "Low rank must be larger or equal to 1"
            self._num_layers, self._low_rank = num_layers, low_rank
            self.W_kernels = nn.ParameterList([
                nn.Parameter(nn.init.xavier_normal_(torch.empty(in_features, low_rank)))
                for _ in range(num_layers)])
            self.V_kernels = nn.ParameterList([
                nn.Parameter(nn.init.xavier_normal_(torch.empty(low_rank, in_features)))
                for _ in range(num_layers)])
            self.bias = nn.ParameterList([
                nn.Parameter(nn.init.zeros_(torch.empty(in_features)))
                for _ in range(num_layers)])

        def forward(self, x_0):
            x_l = x_0
            for layer in range(self._num_layers):
                x_l_v = F.linear(x_l, self.V_kernels[layer])
                x_l_w = F.linear(x_l_v, self.W_kernels[layer])
                x_l = x_0 * (x_l_w + self.bias[layer]) + x_l
            return x_l

    class InteractionDCNArch(nn.Module):
        """torchrec.models.dlrm.InteractionDCNArch."""

        def __init__(self, num_sparse_features, crossnet):
            super().__init__()
            self.F = num_sparse_features
            self.crossnet = crossnet

        def forward(self, dense_features, sparse_features):
            if self.F <= 0:
                return dense_features
            batch = dense_features.shape[0]
            combined = torch.cat((dense_features.unsqueeze(1), sparse_features), dim=1)
            return self.crossnet(combined.reshape([batch, -1]))

    def build_dlrm_dcn(dim, rows, dense_sizes, over_sizes, num_layers, low_rank):
        """DLRM_DCN of plain modules with TorchRec's state_dict names: the
        synchronous reference's model (dlrm_sync_ref.build_model, whose
        interaction is these two classes), imported here on first use."""
        if dense_sizes[-1] != dim:
            raise ValueError(f"dense sizes end in {dense_sizes[-1]}, not D {dim}")
        import dlrm_sync_ref
        return dlrm_sync_ref.build_model(dim, list(rows), list(dense_sizes), list(over_sizes),
                                         (num_layers, low_rank))

    return {"LowRankCrossNet": LowRankCrossNet, "InteractionDCNArch": InteractionDCNArch,
            "build_dlrm_dcn": build_dlrm_dcn}


# ---- selftest --------------------------------------------------------------


def selftest():
    """Checks that need nothing but this file: the mix against splitmix64's
    published first outputs, numpy against the Python-integer definition,
    the pareto's bounds, the model's names and shapes, and its forward
    against the formula written out."""
    def check(what, ok):
        print(f"{'ok' if ok else 'FAIL'}: {what}")
        if not ok:
            raise SystemExit(1)

    # splitmix64 seeded 0: state GOLDEN, 2 GOLDEN, ... -> these outputs.
    check("mix(0) is splitmix64(0)'s first output 0xe220a8397b1dcdaf",
          _mix_int(0) == 0xE220A8397B1DCDAF)
    check("mix(GOLDEN) is its second, 0x6e789e6aa1b965f4",
          _mix_int(GOLDEN) == 0x6E789E6AA1B965F4)
    gen = np.random.default_rng(7)
    for dist in DISTS:
        for seed, n_rows, m in ((0, 1, 3), (1, 1000000, 100), (2**64 - 1, 3, 7), (12345, 97, 27)):
            rows = gen.integers(0, n_rows, 300)
            rows[:2] = (0, n_rows - 1)
            got = multi_hot_rows(seed, 5, rows, m, n_rows, dist)
            want = np.array([[r] + [multi_hot_row(seed, 5, int(r), j, n_rows, dist)
                                    for j in range(1, m)] for r in rows], dtype=np.int64)
            check(f"{dist} seed {seed} rows {n_rows} m {m}: numpy = the definition, in range",
                  np.array_equal(got, want) and got.min() >= 0 and got.max() < n_rows)
    bags = multi_hot_rows(1, 0, np.arange(20000), 30, 10**6, "pareto")[:, 1:]
    check(f"pareto(0.25) concentrates on low rows: {np.mean(bags < 1000):.2f} below 1000, "
          "median " + str(int(np.median(bags))), np.mean(bags < 1000) > 0.6)
    a = multi_hot_rows(3, 2, [5, 5, 6], 4, 100, "uniform")
    b = multi_hot_rows(3, 3, [5], 4, 100, "uniform")
    check("a row's bag is the same each time, another row's or feature's differs",
          np.array_equal(a[0], a[1]) and not np.array_equal(a[0], a[2])
          and not np.array_equal(a[0], b[0]))

    import torch
    this = sys.modules[__name__]
    torch.manual_seed(0)
    rows, dim = [11, 7, 5], 4
    model = this.build_dlrm_dcn(dim, rows, [8, dim], [6, 1], 2, 3)
    have = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    check("state_dict names and shapes are TorchRec's DLRM_DCN's",
          have == dlrm_dcn_shapes(dim, rows, [8, dim], [6, 1], 2, 3))
    net = model.inter_arch.crossnet
    with torch.no_grad():
        for b in net.bias:
            b.normal_()
        x0 = torch.randn(5, (len(rows) + 1) * dim, dtype=torch.float64)
        x = x0
        for l in range(2):
            w, v, b = (p.double() for p in (net.W_kernels[l], net.V_kernels[l], net.bias[l]))
            x = x0 * ((x @ v.T) @ w.T + b) + x
        got = net.double()(x0)
    check("LowRankCrossNet = x0 * (W (V x) + b) + x per layer", torch.allclose(got, x, atol=1e-12))
    model = this.build_dlrm_dcn(dim, rows, [8, dim], [6, 1], 2, 3)
    ids = np.array([[1, 2, 3], [10, 6, 4]])
    bags = expand_ids(ids, [3, 1, 2], rows, 9, "pareto")
    dense = torch.randn(2, DENSE)
    out = model(dense, [torch.from_numpy(x) for x in bags])
    tables = model.sparse_arch.embedding_bag_collection.embedding_bags
    pooled = torch.stack([tables[f"t_cat_{f}"].weight[torch.from_numpy(bags[f])].sum(1)
                          for f in range(3)], dim=1)
    want = model.over_arch(model.inter_arch(model.dense_arch(dense), pooled)).squeeze(1)
    one = model(dense, torch.from_numpy(ids))
    check("multi-hot bags pool as sums; one-id [B][F] input as bags of one",
          torch.allclose(out, want, atol=1e-6) and one.shape == (2,))
    print("dcn_ref selftest: all passed")
    return 0


if __name__ == "__main__":
    if sys.argv[1:] != ["selftest"]:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        sys.exit(2)
    sys.exit(selftest())

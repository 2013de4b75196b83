#!/usr/bin/python3
"""numpy checks of DLRM safetensors files (ember's --save, the reference's).

    dlrm_check.py compare GOT WANT [--tol X] [--dense-only]
        Same tensor names and shapes; every value and every step's loss of
        every trainer ("losses" metadata, [steps][trainers]) within
        |got - want| <= X + X |want| (absolute plus relative, X = 1e-4).
        --dense-only: the tables (sparse_arch's embedding bags) left out
        (a dynamic table's save is its keys 0 .. rows-1, the reference's
        its remapped rows): the dense tensors and the losses.
    dlrm_check.py moved A B [--by X]
        Every tensor of A differs from B's somewhere by more than X, and so
        do the steps' losses of B from one another: a run B that trained
        from A (a comparison against it can fail).
    dlrm_check.py same A B [B2 ...]
        Every tensor bit for bit the same in all the files.
    dlrm_check.py differ A B
        Every table differs between the files (another seed, other values).
    dlrm_check.py default-init FILE
        Each table t_cat_F [N_F, D] lies within +-sqrt(1/N_F) and looks
        uniform there (a table of 100 rows or more: mean and variance of
        x / sqrt(1/N_F) within 6 sigma of U(-1, 1)'s 0 and 1/3; all tables
        together: the same and a Kolmogorov-Smirnov distance to U(-1, 1)
        under 1.95 / sqrt(n), its 0.1% point); no two tables and no two rows
        of a table alike; each Linear's weight and bias within +-1/sqrt(in)
        and reaching past half of it.
    dlrm_check.py losses FILE STEPS TRAINERS
        The "losses" metadata holds STEPS x TRAINERS finite losses.
    dlrm_check.py evals STDOUT METRICS --steps S1,S2,... --examples N
                  [--reference REF_EVAL --min-auc X] [--like METRICS2]
        ember's evaluations: "eval step S: auc A logloss L examples N" lines
        printed and {"eval_step": S, "auc", "logloss", "examples"} JSON lines
        in METRICS, at exactly the steps given, alike (within 1e-6, what the
        printed digits hold), each of N examples; with --reference (the
        reference's "auc A logloss L examples N" from the saved model) the
        last one's AUC above X and AUC and log loss within 1e-4 of it; with
        --like every step that METRICS2 also has within 1e-6 of it.
Exit 0 when all holds, 1 saying what does not.
"""
import json
import re
import argparse
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import st_io  # noqa: E402

TABLE_PREFIX = "sparse_arch.embedding_bag_collection.embedding_bags.t_cat_"
TABLES = "sparse_arch.embedding_bag_collection.embedding_bags."


class Failed(Exception):
    pass


def compare(args):
    got_meta, got = st_io.read(args.got)
    want_meta, want = st_io.read(args.want)
    if set(got) != set(want):
        raise Failed(f"names: {args.got} lacks {sorted(set(want) - set(got))}, "
                     f"has extra {sorted(set(got) - set(want))}")
    worst = {}  # kind -> (ratio to the bound, name, |diff|)
    pairs = [(n, got[n], want[n]) for n in sorted(want)
             if not (args.dense_only and n.startswith(TABLES))]
    got_l, want_l = st_io.losses(args.got, got_meta), st_io.losses(args.want, want_meta)
    pairs.append(("losses", got_l, want_l))
    bad = []
    for name, g, w in pairs:
        if g.shape != w.shape:
            raise Failed(f"{name}: shape {list(g.shape)}, want {list(w.shape)}")
        g, w = g.astype(np.float64), w.astype(np.float64)
        diff = np.abs(g - w)
        ratio = diff / (args.tol + args.tol * np.abs(w))
        ratio[np.isnan(diff)] = np.inf
        at = np.unravel_index(int(np.argmax(ratio)), ratio.shape) if ratio.size else None
        kind = "losses" if name == "losses" else "tables" if name.startswith(TABLE_PREFIX) \
            else "dense"
        if at is not None and (kind not in worst or ratio[at] > worst[kind][0]):
            worst[kind] = (float(ratio[at]), name, float(diff[at]))
        if at is not None and not ratio[at] <= 1.0:
            where = "step %d trainer %d" % at if name == "losses" else f"at {list(at)}"
            bad.append(f"{name} {where}: {g[at]:.9g}, want {w[at]:.9g}")
    for kind, (ratio, name, diff) in sorted(worst.items()):
        print(f"{kind}: max |diff| / ({args.tol:g} + {args.tol:g} |want|) = {ratio:.3g} "
              f"({name}, |diff| {diff:.3g})")
    if bad:
        raise Failed(f"{len(bad)} tensors beyond |diff| <= {args.tol:g} + {args.tol:g} |want|:\n  "
                     + "\n  ".join(bad))
    steps, trainers = want_l.shape
    print(f"ok: {len(pairs) - 1} tensors and {steps} x {trainers} losses within "
          f"{args.tol:g} + {args.tol:g} |want|")


def moved(args):
    _, a = st_io.read(args.a)
    meta, b = st_io.read(args.b)
    for name in sorted(a):
        diff = float(np.max(np.abs(a[name].astype(np.float64) - b[name])))
        if not diff > args.by:
            raise Failed(f"{name} moved by at most {diff:.3g}, not more than {args.by:g}")
    history = st_io.losses(args.b, meta)
    spread = float(np.max(np.abs(history - history[0:1])))
    if not spread > args.by:
        raise Failed(f"the steps' losses differ by at most {spread:.3g}")
    print(f"ok: every tensor of {args.b} is more than {args.by:g} from {args.a}'s")


def same(args):
    _, first = st_io.read(args.files[0])
    for path in args.files[1:]:
        _, other = st_io.read(path)
        if set(other) != set(first):
            raise Failed(f"{path} and {args.files[0]} hold different names")
        for name in sorted(first):
            if other[name].shape != first[name].shape or \
                    other[name].tobytes() != first[name].tobytes():
                raise Failed(f"{name}: {path} differs from {args.files[0]}")
    print(f"ok: {len(args.files)} files hold the same {len(first)} tensors bit for bit")


def differ(args):
    _, a = st_io.read(args.a)
    _, b = st_io.read(args.b)
    for name in sorted(n for n in a if n.startswith(TABLE_PREFIX)):
        if np.array_equal(a[name], b[name]):
            raise Failed(f"{name}: the same in {args.a} and {args.b}")
    print(f"ok: every table differs between {args.a} and {args.b}")


def uniform_stats(u, what):
    """u should be U(-1, 1): its mean and variance within 6 sigma."""
    n = u.size
    mean, var = float(u.mean()), float(u.var())
    if abs(mean) > 6 * math.sqrt(1 / 3 / n):
        raise Failed(f"{what}: mean {mean:.4g} of x/bound, U(-1,1)'s 0 +- {math.sqrt(1/3/n):.3g}")
    if abs(var - 1 / 3) > 6 * math.sqrt(4 / 45 / n):
        raise Failed(f"{what}: variance {var:.4g} of x/bound, U(-1,1)'s 1/3 +- "
                     f"{math.sqrt(4 / 45 / n):.3g}")
    return mean, var


def default_init(args):
    _, tensors = st_io.read(args.file)
    tables = sorted((int(n[len(TABLE_PREFIX):-len(".weight")]), n)
                    for n in tensors if n.startswith(TABLE_PREFIX))
    if [f for f, _ in tables] != list(range(26)):
        raise Failed(f"tables {[f for f, _ in tables]}, not t_cat_0 .. t_cat_25")
    pooled, seen = [], {}
    for f, name in tables:
        x = tensors[name].astype(np.float64)
        rows = x.shape[0]
        bound = math.sqrt(1.0 / rows)
        if np.abs(x).max() > bound * (1 + 1e-6):
            raise Failed(f"{name}: |value| up to {np.abs(x).max():.4g} beyond sqrt(1/{rows}) "
                         f"= {bound:.4g}")
        if len(np.unique(x, axis=0)) != rows:
            raise Failed(f"{name}: two rows alike")
        key = x[:2].tobytes()
        if key in seen:
            raise Failed(f"{name} starts as {seen[key]} does")
        seen[key] = name
        if rows >= 100:
            uniform_stats(x / bound, name)
        pooled.append((x / bound).ravel())
    u = np.sort(np.concatenate(pooled))
    n = u.size
    mean, var = uniform_stats(u, "all tables")
    cdf = (u + 1) / 2
    ks = max(float(np.max(np.arange(1, n + 1) / n - cdf)), float(np.max(cdf - np.arange(n) / n)))
    if ks > 1.95 / math.sqrt(n):
        raise Failed(f"all tables: Kolmogorov-Smirnov distance {ks:.4g} to U(-1, 1) over "
                     f"{1.95 / math.sqrt(n):.4g} ({n} values)")
    for name in sorted(n for n in tensors if not n.startswith(TABLE_PREFIX)):
        weight = name[:-len(".bias")] + ".weight" if name.endswith(".bias") else name
        bound = 1 / math.sqrt(tensors[weight].shape[1])
        x = np.abs(tensors[name])
        if x.max() > bound * (1 + 1e-6) or (x.size >= 8 and x.max() < bound / 2):
            raise Failed(f"{name}: |values| up to {x.max():.4g}, PyTorch's default is "
                         f"U(-{bound:.4g}, {bound:.4g})")
    print(f"ok: 26 tables within +-sqrt(1/N), uniform ({n} values: mean {mean:.4f}, variance "
          f"{var:.4f} of x/bound, KS {ks:.4f}); Linears within +-1/sqrt(in)")


def losses(args):
    meta, _ = st_io.read(args.file)
    history = st_io.losses(args.file, meta)
    if history.shape != (args.steps, args.trainers) or not np.isfinite(history).all():
        raise Failed(f"{args.file}: losses {list(history.shape)}, want {args.steps} x "
                     f"{args.trainers} finite")
    print(f"ok: {args.file} holds {args.steps} x {args.trainers} finite losses")


EVAL_LINE = r"eval step (\d+): auc (\S+) logloss (\S+) examples (\d+)"


def metrics_evals(path):
    """{step: (auc, logloss, examples)} of a --metrics file's eval lines, in
    order (a step twice is an error)."""
    evals = {}
    with open(path) as fh:
        for number, line in enumerate(fh, 1):
            if '"eval_step"' not in line:
                continue
            try:
                d = json.loads(line)
                step, value = d["eval_step"], (d["auc"], d["logloss"], d["examples"])
            except (ValueError, KeyError) as error:
                raise Failed(f"{path}:{number}: not an eval line: {error}") from None
            if step in evals:
                raise Failed(f"{path}:{number}: step {step} evaluated twice")
            evals[step] = value
    return evals


def evals(args):
    with open(args.stdout) as fh:
        printed = [(int(s), float(a), float(lo), int(n))
                   for s, a, lo, n in re.findall(EVAL_LINE, fh.read())]
    written = metrics_evals(args.metrics)
    want = [int(x) for x in args.steps.split(",")]
    print("ember: " + ", ".join(f"step {s} auc {a:.6f} logloss {lo:.6f} examples {n}"
                                for s, a, lo, n in printed))
    if [p[0] for p in printed] != want or list(written) != want:
        raise Failed(f"eval steps printed {[p[0] for p in printed]}, in {args.metrics} "
                     f"{list(written)}, want {want}")
    for step, auc, logloss, n in printed:
        w = written[step]
        if n != args.examples or w[2] != args.examples or abs(auc - w[0]) > 1e-6 or \
                abs(logloss - w[1]) > 1e-6:
            raise Failed(f"step {step}: printed auc {auc} logloss {logloss} examples {n}, "
                         f"{args.metrics} {w} (want {args.examples} examples)")
    if args.like:
        other = metrics_evals(args.like)
        for step in sorted(set(other) & set(written)):
            if max(abs(a - b) for a, b in zip(other[step], written[step])) > 1e-6:
                raise Failed(f"step {step}: {args.metrics} has {written[step]}, {args.like} "
                             f"{other[step]}")
        print(f"ok: steps {sorted(set(other) & set(written))} evaluate as in {args.like}")
    if args.reference:
        with open(args.reference) as fh:
            m = re.fullmatch(r"auc (\S+) logloss (\S+) examples (\d+)\n", fh.read())
        if not m:
            raise Failed(f"{args.reference}: not the reference's eval line")
        ref = (float(m[1]), float(m[2]), int(m[3]))
        auc, logloss, n = written[want[-1]]
        print(f"reference on the saved model: auc {ref[0]:.6f} logloss {ref[1]:.6f} "
              f"examples {ref[2]}")
        if not auc > args.min_auc:
            raise Failed(f"the final AUC {auc} is not above {args.min_auc}")
        if n != ref[2] or abs(auc - ref[0]) > 1e-4 or abs(logloss - ref[1]) > 1e-4:
            raise Failed(f"ember's final auc {auc} logloss {logloss}, the reference's "
                         f"{ref[0]} {ref[1]} (within 1e-4)")
        print(f"ok: final AUC {auc:.4f} > {args.min_auc}; AUC and log loss the reference's "
              f"within 1e-4 (|diff| {abs(auc - ref[0]):.2g} and {abs(logloss - ref[1]):.2g})")


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("compare")
    p.add_argument("got")
    p.add_argument("want")
    p.add_argument("--tol", type=float, default=1e-4)
    p.add_argument("--dense-only", action="store_true")
    p = sub.add_parser("moved")
    p.add_argument("a")
    p.add_argument("b")
    p.add_argument("--by", type=float, default=1e-3)
    p = sub.add_parser("same")
    p.add_argument("files", nargs="+")
    p = sub.add_parser("differ")
    p.add_argument("a")
    p.add_argument("b")
    p = sub.add_parser("default-init")
    p.add_argument("file")
    p = sub.add_parser("losses")
    p.add_argument("file")
    p.add_argument("steps", type=int)
    p.add_argument("trainers", type=int)
    p = sub.add_parser("evals")
    p.add_argument("stdout")
    p.add_argument("metrics")
    p.add_argument("--steps", required=True)
    p.add_argument("--examples", type=int, required=True)
    p.add_argument("--reference")
    p.add_argument("--min-auc", type=float, default=0.75)
    p.add_argument("--like")
    args = parser.parse_args(argv)
    commands = {"compare": compare, "moved": moved, "same": same, "differ": differ,
                "default-init": default_init, "losses": losses, "evals": evals}
    try:
        commands[args.command](args)
    except (Failed, st_io.StFormatError, OSError) as error:
        print(f"FAIL: {error}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

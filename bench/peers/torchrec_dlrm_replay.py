#!/usr/bin/env python3
"""What torchrec_dlrm.py's T ranks compute, replayed in one process without
sharding: the same torchrec.models.dlrm.DLRM unsharded (EmbeddingBagCollection
on CPU), the same data split (trainer t takes examples i % T == t), and the
contract's sync semantics written out by hand: each step, every trainer's
mean BCE over its batch; dense gradients averaged over the trainers, each
table's gradient summed (--sparse-reduce mean: averaged); then plain torch.optim SGD or Adagrad (eps 1e-10)
over every parameter. Adagrad over a whole table equals FBGEMM's exact sparse
Adagrad: a row no trainer touched has a zero gradient, so neither its
accumulator nor its weight moves.

    torchrec_dlrm_replay.py --init FILE [torchrec_dlrm.py's flags] --save OUT
        [--check PEER_SAVE --tolerance X]
    torchrec_dlrm_replay.py --compare A B [--tolerance X] [--tensors-only]

--check compares every tensor and the losses of OUT with the peer's save and
exits 1 naming each tensor that differs by more than --tolerance (1e-4);
--compare does only that, for two saves (--tensors-only: not their losses).
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torchrec_dlrm as peer  # noqa: E402


def replay(args):
    import torch
    import torch.nn.functional as F

    if args.init is None:
        raise peer.PeerError("the replay needs --init (the peer's starting weights)")
    tensors, _ = peer.read_safetensors(args.init)
    model = peer.build_dlrm(args, torch.device("cpu"))
    model.load_state_dict(tensors, strict=True)
    per_step = args.batch_size * args.trainers
    limit = None if args.steps is None else args.steps * per_step
    data = [peer.read_criteo(args.data_paths, args.rows, t, args.trainers, limit,
                             peer.multi_hot_spec(args))
            for t in range(args.trainers)]
    per_epoch = data[0][3] // per_step
    steps = per_epoch * args.epochs if args.steps is None else min(args.steps,
                                                                   per_epoch * args.epochs)
    batches = [peer.Batches(*data[t][:3], args.batch_size, min(per_epoch, steps))
               for t in range(args.trainers)]
    cls = peer.optimizer_class(args.optimizer)
    tables = [p for n, p in model.named_parameters() if n.startswith(peer.EBC_PREFIX)]
    dense = [p for n, p in model.named_parameters() if not n.startswith(peer.EBC_PREFIX)]
    optimizers = [cls(tables, **peer.optimizer_kwargs(args)), cls(dense, lr=args.lr)]
    losses = torch.zeros(steps, args.trainers)
    for step in range(steps):
        for o in optimizers:
            o.zero_grad()
        for t in range(args.trainers):
            b = batches[t].items[step % per_epoch]
            logits = model(b.dense_features, b.sparse_features).squeeze(-1)
            loss = F.binary_cross_entropy_with_logits(logits, b.labels)
            loss.backward()
            losses[step, t] = loss.detach()
        for p in dense + (tables if args.sparse_reduce == "mean" else []):
            p.grad /= args.trainers
        for o in optimizers:
            o.step()
    if args.eval_paths is not None:
        evaluate(args, model, steps)
    state = model.state_dict()
    entries = [(name, shape, lambda name=name: state[name].detach())
               for name, shape in peer.expected_names(args).items()]
    metadata = {"producer": "torchrec_dlrm_replay.py", "losses_shape": f"{steps},{args.trainers}",
                "losses": ",".join(f"{v:.9g}" for v in losses.reshape(-1).tolist())}
    peer.write_safetensors(args.save, entries, metadata)
    print(f"replayed {steps} steps of {args.trainers} trainers; saved {args.save}")


def evaluate(args, model, steps):
    import torch

    labels, dense, sparse, _ = peer.read_criteo(args.eval_paths, args.rows, 0, 1,
                                                multi_hot=peer.multi_hot_spec(args))
    batch = peer.Batches(labels, dense, sparse, len(labels), 1).items[0]
    model.eval()
    with torch.no_grad():
        z = model(batch.dense_features, batch.sparse_features).squeeze(-1).numpy()
    model.train()
    print(f"eval step {steps}: auc {peer.roc_auc(z, labels):.6f} "
          f"logloss {peer.log_loss(z, labels):.6f} examples {len(labels)}")


def losses_of(meta, path):
    rows, cols = (int(x) for x in meta["losses_shape"].split(","))
    values = [float(x) for x in meta["losses"].split(",")] if rows * cols else []
    if len(values) != rows * cols:
        raise peer.PeerError(f"{path}: {len(values)} losses, not {rows}x{cols}")
    return values, (rows, cols)


def check(mine_path, theirs_path, tolerance, tensors_only=False):
    """Largest |difference| of each tensor and of the losses; 1 if any is
    beyond @tolerance, or a name or shape differs."""
    mine, mine_meta = peer.read_safetensors(mine_path)
    theirs, theirs_meta = peer.read_safetensors(theirs_path)
    if set(mine) != set(theirs):
        print(f"check: names differ: {sorted(set(mine) ^ set(theirs))}")
        return 1
    worst = []
    for name in sorted(mine):
        if mine[name].shape != theirs[name].shape:
            print(f"check: {name} is {tuple(theirs[name].shape)}, not {tuple(mine[name].shape)}")
            return 1
        worst.append(((mine[name] - theirs[name]).abs().max().item(), name))
    if not tensors_only:
        a, shape_a = losses_of(mine_meta, mine_path)
        b, shape_b = losses_of(theirs_meta, theirs_path)
        if shape_a != shape_b:
            print(f"check: losses {shape_b}, not {shape_a}")
            return 1
        worst.append((max((abs(x - y) for x, y in zip(a, b)), default=0.0), "losses"))
    bad = [w for w in worst if not w[0] <= tolerance]
    top = max(worst)
    print(f"check: {len(worst)} values compared, largest |diff| {top[0]:.3g} ({top[1]}); "
          f"{len(bad)} beyond {tolerance}")
    for diff, name in bad:
        print(f"check: {name}: {diff:.3g}")
    return 1 if bad else 0


def main(argv):
    extra = argparse.ArgumentParser(add_help=False)
    extra.add_argument("--check", default=None)
    extra.add_argument("--tolerance", type=float, default=1e-4)
    extra.add_argument("--compare", nargs=2, default=None)
    extra.add_argument("--tensors-only", action="store_true")
    ours, rest = extra.parse_known_args(argv)
    try:
        if ours.compare:
            if rest:
                raise peer.PeerError(f"--compare takes no other flags: {' '.join(rest)}")
            return check(*ours.compare, ours.tolerance, ours.tensors_only)
        args = peer.parse_args(rest)
        if args.save is None:
            raise peer.PeerError("the replay needs --save")
        peer.quiet()
        replay(args)
        return check(args.save, ours.check, ours.tolerance) if ours.check else 0
    except peer.PeerError as e:
        print(f"torchrec_dlrm_replay: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

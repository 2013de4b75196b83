"""Checks of dlrm_sync_ref.py against independent computations.

    dlrm_sync_ref.py selftest tests/engine/dlrm_ref.py

1. one trainer: the reference's logits, loss and every gradient as
   tests/engine/dlrm_ref.py's (the model ember's dense half is tested
   against), its pooled embeddings given as one-row bags of tables;
2. T synchronous trainers: the dense gradients are those of the mean loss
   over all T*B examples, the tables' T times them (sum) or the same (mean);
3. the optimizers: a table's update from its dense (zero where untouched)
   gradient as torch.optim's on a sparse=True EmbeddingBag's sparse
   gradient, and as Adagrad's and SGD's formulas by hand in numpy; rows no
   bag touched keep their bits;
4. the data rules: a line's fields parsed as the contract says, bad lines
   refused naming the field, the steps' examples partitioning an epoch;
5. the AUC against counting every pair.
Prints each check; exits 1 at the first that fails.
"""
import importlib.util
import math
import os
import tempfile

import numpy as np


class Failed(Exception):
    pass


def close(name, got, want, tol):
    got, want = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
    if got.shape != want.shape:
        raise Failed(f"{name}: shape {got.shape}, want {want.shape}")
    worst = float(np.max(np.abs(got - want))) if got.size else 0.0
    if not worst <= tol:
        raise Failed(f"{name}: max |diff| {worst:.3g} > {tol:g}")
    return worst


def check_dlrm_ref(ref, dlrm_ref_path):
    """tests/engine/dlrm_ref.py's tensors, recomputed by the reference."""
    torch = ref.need_torch()
    spec = importlib.util.spec_from_file_location("dlrm_ref", dlrm_ref_path)
    base = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(base)
    B, T, D = base.B, base.T, base.D
    with tempfile.TemporaryDirectory() as tmp:
        base.main(os.path.join(tmp, "ref.bin"))
        flat = np.fromfile(os.path.join(tmp, "ref.bin"), dtype="<f4")
    model = ref.build_model(D, [B] * T, base.DENSE_SIZES, base.OVER_SIZES)
    dense_p = [p for n, p in model.named_parameters() if n.startswith("dense_arch.")]
    over_p = [p for n, p in model.named_parameters() if n.startswith("over_arch.")]
    tables = [model.get_parameter(n) for n in ref.table_names(range(T))]
    n_dense, n_over = sum(p.numel() for p in dense_p), sum(p.numel() for p in over_p)
    sizes = [B * base.DENSE, T * B * D, B, n_dense, n_over, B, 1, n_dense, n_over, T * B * D]
    if flat.size != sum(sizes):
        raise Failed(f"dlrm_ref.py wrote {flat.size} floats, want {sum(sizes)}")
    parts = np.split(flat, np.cumsum(sizes)[:-1])
    dense, pooled, labels = parts[0].reshape(B, base.DENSE), parts[1].reshape(T, B, D), parts[2]
    with torch.no_grad():
        for params, values in ((dense_p, parts[3]), (over_p, parts[4])):
            at = 0
            for p in params:  # weight then bias per layer, as dlrm_ref.py flattens them
                p.copy_(torch.from_numpy(values[at:at + p.numel()]).reshape(p.shape))
                at += p.numel()
        for f in range(T):
            tables[f].copy_(torch.from_numpy(pooled[f]))
    ids = torch.arange(B).repeat(T, 1).t().contiguous()  # bag b of table f: row b
    dense_t, labels_t = torch.from_numpy(dense), torch.from_numpy(labels)
    with torch.no_grad():
        logits = model(dense_t, ids).numpy()
    losses = ref.sync_grads(model, [(dense_t, ids, labels_t)], "sum")
    close("logits", logits, parts[5], 1e-6)
    close("loss", losses, parts[6], 1e-6)
    close("DenseArch gradients", torch.cat([p.grad.reshape(-1) for p in dense_p]), parts[7], 1e-6)
    close("OverArch gradients", torch.cat([p.grad.reshape(-1) for p in over_p]), parts[8], 1e-6)
    close("pooled gradients", torch.stack([t.grad for t in tables]), parts[9].reshape(T, B, D),
          1e-6)
    print(f"ok: one trainer's logits, loss and gradients are dlrm_ref.py's "
          f"({B} examples, {T} tables)")


def toy_model(ref, seed, rows=(5, 7, 3) + (4,) * 23, dim=3):
    torch = ref.need_torch()
    torch.manual_seed(seed)
    model = ref.build_model(dim, list(rows), [6, dim], [5, 4, 1])
    with torch.no_grad():
        for name in ref.table_names(rows):
            model.get_parameter(name).uniform_(-0.5, 0.5)
    return model


def toy_batch(ref, gen, rows, n):
    torch = ref.need_torch()
    dense = torch.rand(n, ref.DENSE, generator=gen) * 3
    ids = torch.stack([torch.randint(0, r, (n,), generator=gen) for r in rows], dim=1)
    labels = (torch.rand(n, generator=gen) < 0.5).float()
    return dense, ids, labels


def check_sync_reduce(ref):
    """T trainers' reduced gradients against one pass over all T*B examples."""
    torch = ref.need_torch()
    rows = (5, 7, 3) + (4,) * 23
    gen = torch.Generator().manual_seed(3)
    batches = [toy_batch(ref, gen, rows, 8) for _ in range(3)]
    whole = tuple(torch.cat(parts) for parts in zip(*batches))
    for reduce, factor in (("sum", 3.0), ("mean", 1.0)):
        model = toy_model(ref, 1, rows)
        ref.sync_grads(model, batches, reduce)
        sync = {n: p.grad.clone() for n, p in model.named_parameters()}
        model = toy_model(ref, 1, rows)
        ref.sync_grads(model, [whole], "sum")
        for n, p in model.named_parameters():
            want = p.grad * (factor if n in model.table_names else 1.0)
            close(f"{reduce}: {n}", sync[n], want, 1e-6)
    print("ok: 3 trainers' dense gradients are the mean loss's, tables' 3x it (sum) or 1x (mean)")


def adagrad_by_hand(w, g, acc, lr):
    acc += g * g
    return w - np.float32(lr) * (g / (np.sqrt(acc) + np.float32(1e-10))), acc


def check_optimizers(ref):
    """A table trained on dense gradients (the reference's way) as on torch's
    sparse ones, as the formulas by hand; untouched rows keep their bits."""
    torch = ref.need_torch()
    gen = torch.Generator().manual_seed(5)
    init = torch.rand(10, 3, generator=gen) - 0.5
    steps = [(torch.randint(0, 6, (7,), generator=gen), torch.randn(7, 3, generator=gen))
             for _ in range(4)]  # rows 6..9 never touched
    # Adagrad's first step moves a row by about lr whatever its gradient's
    # size: a tiny one is where its eps tells.
    tiny = [(steps[0][0], steps[0][1] * 1e-8)] + steps[1:]
    for name, lr in (("sgd", 0.3), ("adagrad", 0.05)):
        dense_bag = torch.nn.EmbeddingBag(10, 3, mode="sum")
        sparse_bag = torch.nn.EmbeddingBag(10, 3, mode="sum", sparse=True)
        with torch.no_grad():
            dense_bag.weight.copy_(init)
            sparse_bag.weight.copy_(init)
        dense_opt = ref.make_optimizer(dense_bag.parameters(), name, lr)
        sparse_opt = ref.make_optimizer(sparse_bag.parameters(), name, lr)
        w, acc = init.numpy().copy(), np.zeros((10, 3), dtype=np.float32)
        for ids, upstream in steps if name == "sgd" else tiny:
            for bag, opt in ((dense_bag, dense_opt), (sparse_bag, sparse_opt)):
                opt.zero_grad()
                (bag(ids.unsqueeze(1)) * upstream).sum().backward()
                opt.step()
            g = np.zeros((10, 3), dtype=np.float32)
            np.add.at(g, ids.numpy(), upstream.numpy())
            if name == "sgd":
                w = w - np.float32(lr) * g
            else:
                w, acc = adagrad_by_hand(w, g, acc, lr)
        got = dense_bag.weight.detach().numpy()
        close(f"{name}: dense vs sparse gradients", got, sparse_bag.weight.detach().numpy(), 1e-6)
        close(f"{name}: vs the formula", got, w, 1e-6)
        if not np.array_equal(got[6:], init.numpy()[6:]):
            raise Failed(f"{name}: a row no bag touched moved")
        if not (np.abs(got[:6] - init.numpy()[:6]) > 1e-4).any(axis=1).all():
            raise Failed(f"{name}: a touched row did not move")
    print("ok: SGD and Adagrad on a table: dense = sparse gradients = the formulas; "
          "untouched rows unchanged")


def expect_refused(ref, line, rows, words):
    try:
        ref.parse_line(line, rows)
    except ref.DataError as error:
        if words not in str(error):
            raise Failed(f"line {line!r} refused as '{error}', not naming '{words}'")
        return
    raise Failed(f"line {line!r} was accepted")


def check_data(ref):
    rows = [7] * 26
    dense = ["5", "", "-3", "0", "1", "9223372036854775807"] + ["2"] * 7
    cats = ["", "0", "A1", "ffffffffffffffff", "00000010"] + ["1b"] * 21
    y, x, c = ref.parse_line("\t".join(["1"] + dense + cats) + "\r", rows)
    want_x = [math.log(6.0), 0.0, 0.0, 0.0, math.log(2.0), math.log(9223372036854775807.0 + 1)]
    if y != 1 or x[:6] != want_x or c[:5] != [0, 0, 0xA1 % 7, (2**64 - 1) % 7, 16 % 7]:
        raise Failed(f"parsed {y} {x[:6]} {c[:5]}")
    good = ["0"] + ["1"] * 13 + ["a"] * 26
    for f, bad, words in ((0, "2", "field label"), (3, "1.5", "field I3"),
                          (3, "9223372036854775808", "field I3"), (14, "xyz", "field C1"),
                          (39, "1" * 17, "field C26"), (5, " 1", "field I5")):
        fields = list(good)
        fields[f] = bad
        expect_refused(ref, "\t".join(fields), rows, words)
    expect_refused(ref, "\t".join(good[:-1]), rows, "39 tab-separated fields")
    expect_refused(ref, "\t".join(good + ["a"]), rows, "41 tab-separated fields")
    plan = ref.step_plan(200, 2, 16, None, 2)
    if len(plan) != 12 or plan[6] != (1, 0) or ref.step_plan(200, 2, 16, 9, 5)[-1] != (1, 2):
        raise Failed(f"step plan {plan}")
    seen = np.concatenate([ref.trainer_batch(s, t, 2, 16) for s in range(6) for t in range(2)])
    if sorted(seen.tolist()) != list(range(192)):
        raise Failed("an epoch's steps do not take examples 0..191 once each")
    if not all(i % 2 == 1 for i in ref.trainer_batch(3, 1, 2, 16)):
        raise Failed("trainer 1 takes an example i % 2 != 1")
    print("ok: the line rules, bad lines refused by field, steps partition an epoch")


def check_auc(ref):
    rng = np.random.default_rng(9)
    scores = rng.integers(0, 12, 300).astype(np.float32)  # many ties
    labels = (rng.random(300) < 0.4).astype(np.float32)
    pos, neg = scores[labels == 1], scores[labels == 0]
    pairs = (pos[:, None] > neg[None, :]).sum() + 0.5 * (pos[:, None] == neg[None, :]).sum()
    close("AUC with ties", ref.roc_auc(scores, labels), pairs / (len(pos) * len(neg)), 1e-12)
    x = rng.normal(size=50) * 5
    y = (rng.random(50) < 0.5).astype(np.float64)
    p = 1 / (1 + np.exp(-x))
    close("log loss", ref.log_loss(x, y), -np.mean(y * np.log(p) + (1 - y) * np.log(1 - p)), 1e-9)
    print("ok: the AUC counts every pair (ties half); the log loss is BCE's")


def run(ref, dlrm_ref_path):
    try:
        check_dlrm_ref(ref, dlrm_ref_path)
        check_sync_reduce(ref)
        check_optimizers(ref)
        check_data(ref)
        check_auc(ref)
    except Failed as error:
        print(f"FAIL: {error}")
        return 1
    return 0

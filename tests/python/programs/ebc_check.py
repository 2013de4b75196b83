"""ember.torch.EmbeddingBagCollection on a real job (2 trainers + 1 PS under
ember-run): pooled outputs against a PyTorch EmbeddingBag over the rows
the PS hold, a TorchRec-shaped KJT by duck typing, keys in another order,
weights, the synchronous SGD update of every trainer's gradients, a
prefetched step at staleness 1, and the bad inputs each refused naming
the argument.  Exits non-zero (an AssertionError) on any difference."""
import sys

import torch

import ember.torch as et


class DuckKJT:
    """TorchRec's KeyedJaggedTensor's methods, offsets only (no torchrec)."""

    def __init__(self, keys, values, offsets, weights=None):
        self._k, self._v, self._o, self._w = keys, values, offsets, weights

    def keys(self):
        return self._k

    def values(self):
        return self._v

    def offsets(self):
        return self._o

    def lengths(self):
        return (self._o[1:] - self._o[:-1]).to(torch.int32)

    def weights_or_none(self):
        return self._w


def expect(exc_type, words, fn):
    try:
        fn()
    except exc_type as e:
        for w in words:
            assert w in str(e), f"{exc_type.__name__} without {w!r}: {e}"
        return
    raise AssertionError(f"no {exc_type.__name__} ({words})")


def main():
    et.init(trainers=2, num_ps=1)
    if et.is_ps():
        et.serve()
        return 0
    t = et.role()[1]
    lr = 0.5
    tables = [et.EmbeddingBagConfig(name="ta", embedding_dim=4, num_embeddings=50,
                                    feature_names=["f0", "f1"]),
              et.EmbeddingBagConfig(name="tb", embedding_dim=3, num_embeddings=20,
                                    feature_names=["g"], pooling=et.PoolingType.MEAN,
                                    init="normal")]
    ebc = et.EmbeddingBagCollection(tables, optimizer=(torch.optim.SGD, {"lr": lr}), seed=3)
    assert ebc.feature_names() == ["f0", "f1", "g"]
    gen = torch.Generator().manual_seed(100 + t)
    B = 5

    def batch():
        lengths = torch.randint(0, 4, (3 * B,), generator=gen, dtype=torch.int32)
        n = int(lengths.sum())
        cut = int(lengths[:2 * B].sum())
        values = torch.cat([torch.randint(0, 50, (cut,), generator=gen),
                            torch.randint(0, 20, (n - cut,), generator=gen)])
        return values, lengths

    def reference(values, lengths, wa, wb, weights=None):
        offsets = torch.zeros(lengths.numel() + 1, dtype=torch.int64)
        offsets[1:] = torch.cumsum(lengths.to(torch.int64), 0)
        out = {}
        for i, (f, w, mode) in enumerate([("f0", wa, "sum"), ("f1", wa, "sum"),
                                          ("g", wb, "mean")]):
            o = offsets[i * B:(i + 1) * B + 1]
            v = values[int(o[0]):int(o[-1])]
            pw = None if weights is None else weights[int(o[0]):int(o[-1])]
            out[f] = torch.nn.functional.embedding_bag(v, w, o[:-1] - o[0], mode=mode,
                                                       per_sample_weights=pw)
        return out

    # 1. Pooled outputs and the synchronous update, over 3 steps.
    for step in range(3):
        wa0, wb0 = ebc.read_table("ta"), ebc.read_table("tb")
        values, lengths = batch()
        kjt = et.KeyedJaggedTensor(keys=["f0", "f1", "g"], values=values, lengths=lengths)
        with ebc.step_context():
            out = ebc(kjt)
            ref = reference(values, lengths, wa0, wb0)
            for f in ref:
                assert torch.allclose(out[f], ref[f], atol=1e-6), (step, f, out[f], ref[f])
            assert out.values().shape == (B, 11)
            coef = torch.arange(1, 12, dtype=torch.float32) * (t + 1)
            (out.values() * coef).sum().backward()
        # Every trainer's batch and gradient, for the expected update.
        got = [None, None]
        got[t] = (values, lengths)
        ebc.sync(f"ebc_check.{step}")
        wa1, wb1 = ebc.read_table("ta"), ebc.read_table("tb")
        # d/dw of sum(coef_f * pooled_f) per trainer (each trainer's
        # own), summed by the PS: check ours is a part of the move by
        # recomputing both trainers' batches (the generators are known).
        g2 = torch.Generator().manual_seed(100 + (1 - t))
        for _ in range(step + 1):
            lengths_o = torch.randint(0, 4, (3 * B,), generator=g2, dtype=torch.int32)
            n = int(lengths_o.sum())
            cut = int(lengths_o[:2 * B].sum())
            values_o = torch.cat([torch.randint(0, 50, (cut,), generator=g2),
                                  torch.randint(0, 20, (n - cut,), generator=g2)])
        got[1 - t] = (values_o, lengths_o)
        wa = wa0.clone().requires_grad_(True)
        wb = wb0.clone().requires_grad_(True)
        for tr in (0, 1):
            r = reference(got[tr][0], got[tr][1], wa, wb)
            vals = torch.cat([r["f0"], r["f1"], r["g"]], dim=1)
            (vals * torch.arange(1, 12, dtype=torch.float32) * (tr + 1)).sum().backward()
        with torch.no_grad():
            assert torch.allclose(wa1, wa0 - lr * wa.grad, atol=1e-5), (wa1 - (wa0 - lr * wa.grad)).abs().max()
            assert torch.allclose(wb1, wb0 - lr * wb.grad, atol=1e-5)
    # 2. TorchRec's KJT by duck typing, keys in another order, weights
    #    (every feature sum-pooled is needed: refused here, mean pools g).
    values, lengths = batch()
    cut = [int(x) for x in lengths.view(3, B).sum(1)]
    vf0, vf1, vg = torch.split(values, cut)
    order_values = torch.cat([vg, vf0, vf1])
    order_lengths = torch.cat([lengths[2 * B:], lengths[:2 * B]])
    offsets = torch.zeros(3 * B + 1, dtype=torch.int64)
    offsets[1:] = torch.cumsum(order_lengths.to(torch.int64), 0)
    with torch.no_grad():
        a = ebc(DuckKJT(["g", "f0", "f1"], order_values, offsets)).to_dict()
        b = ebc(et.KeyedJaggedTensor(keys=["f0", "f1", "g"], values=values,
                                     lengths=lengths)).to_dict()
    for f in a:
        assert torch.equal(a[f], b[f]), f
    expect(ValueError, ["features", "sum"], lambda: ebc(DuckKJT(
        ["g", "f0", "f1"], order_values, offsets, torch.ones(order_values.numel()))))
    # 3. Bad input, each naming the argument.
    good = dict(keys=["f0", "f1", "g"], values=values, lengths=lengths)
    with torch.no_grad():
        expect(ValueError, ["features", "'zz'"], lambda: ebc(et.KeyedJaggedTensor(
            keys=["f0", "zz", "g"], values=values, lengths=lengths)))
        expect(ValueError, ["features", "missing"], lambda: ebc(et.KeyedJaggedTensor(
            keys=["f0", "f1"], values=values[:sum(cut[:2])], lengths=lengths[:2 * B])))
        bad = values.clone()
        bad[0] = 50
        expect(IndexError, ["features", "out of range"], lambda: ebc(et.KeyedJaggedTensor(
            keys=["f0", "f1", "g"], values=bad, lengths=lengths)))
        expect(TypeError, ["values"], lambda: et.KeyedJaggedTensor(
            keys=good["keys"], values=values.float(), lengths=lengths))
        expect(TypeError, ["features", "int64"], lambda: ebc(DuckKJT(
            ["f0", "f1", "g"], values.float(), offsets)))
        expect(ValueError, ["features", "lengths", "sum"], lambda: ebc(et.KeyedJaggedTensor(
            keys=good["keys"], values=values[:-1], lengths=lengths)))
        expect(ValueError, ["lengths, offsets"], lambda: et.KeyedJaggedTensor(
            keys=good["keys"], values=values))
        expect(TypeError, ["features"], lambda: ebc(values))
    expect(ValueError, ["tables", "feature_names"], lambda: et.EmbeddingBagCollection(
        [et.EmbeddingBagConfig(name="tc", embedding_dim=2, num_embeddings=3)]))
    # 4. Staleness 1 with prefetch: the next step's lookup made before this
    #    one's push; the steps all apply (the PS counts them), the pooled
    #    rows at most one step old.
    tab = [et.EmbeddingBagConfig(name="ts", embedding_dim=2, num_embeddings=8,
                                 feature_names=["s"])]
    ebs = et.EmbeddingBagCollection(tab, optimizer={"kind": "sgd", "lr": 1.0}, staleness=1)
    ids = [torch.tensor([k % 8, (k + 1) % 8]) for k in range(6)]
    kj = [et.KeyedJaggedTensor(keys=["s"], values=v, lengths=torch.ones(2, dtype=torch.int32))
          for v in ids]
    w0 = ebs.read_table("ts")
    for k in range(6):
        with ebs.step_context() as st:
            out = ebs(kj[k])
            out.values().sum().backward()
            if k + 1 < 6:
                st.prefetch(kj[k + 1])
    ebs.prefetch(kj[0])  # between steps too
    expect(RuntimeError, ["prefetch", "not consumed"], lambda: ebs.prefetch(kj[1]))
    expect(ValueError, ["features", "prefetched"], lambda: ebs(kj[1]))
    with ebs.step_context():
        ebs(kj[0]).values().sum().backward()
    ebs.sync("ebc_check.stale")
    w1 = ebs.read_table("ts")
    moved = torch.zeros(8)
    for v in ids + ids[:1]:
        for i in v.tolist():
            moved[i] += 2.0  # two trainers, gradient 1 each, lr 1
    assert torch.allclose(w0 - w1, moved[:, None].expand(8, 2), atol=1e-5), (w0 - w1)
    # 5. TorchRec's state_dict names.
    sd = ebc.state_dict()
    assert sorted(sd) == ["embedding_bags.ta.weight", "embedding_bags.tb.weight"], sorted(sd)
    assert sd["embedding_bags.ta.weight"].shape == (50, 4)
    ebs.close()
    ebc.close()
    et.barrier("ebc_check.end")
    et.shutdown()
    print(f"trainer {t}: ok", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

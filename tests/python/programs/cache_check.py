"""ember.torch.EmbeddingBagCollection's row cache (cache_rows=) on a real
job (2 trainers + 2 PS under ember-run): twin collections over twin tables
(the same seed: the same initial rows), one with a cache of 16 rows, the
same batches and gradients for 8 steps with a no-grad forward between
them: every output and, at the end, every row the same bits; the cache hit
(the no-grad forwards' rows stand at the next step); bad cache_rows
refused naming the argument.  Exits non-zero (an AssertionError) on any
difference."""
import sys

import torch

import ember.torch as et


def expect(exc_type, words, fn):
    try:
        fn()
    except exc_type as e:
        for w in words:
            assert w in str(e), f"{exc_type.__name__} without {w!r}: {e}"
        return
    raise AssertionError(f"no {exc_type.__name__} ({words})")


def configs(prefix):
    return [et.EmbeddingBagConfig(name=f"{prefix}a", embedding_dim=4, num_embeddings=40,
                                  feature_names=[f"{prefix}f0", f"{prefix}f1"]),
            et.EmbeddingBagConfig(name=f"{prefix}b", embedding_dim=3, num_embeddings=20,
                                  feature_names=[f"{prefix}g"], pooling=et.PoolingType.MEAN,
                                  init="normal")]


def main():
    et.init(trainers=2, num_ps=2)
    if et.is_ps():
        et.serve()
        return 0
    t = et.role()[1]
    opt = (torch.optim.Adagrad, {"lr": 0.1})
    for bad in (-1, 1.5, True, (1 << 30) + 1):
        expect(ValueError, ["cache_rows"], lambda: et.EmbeddingBagCollection(
            configs("x"), optimizer=opt, seed=3, cache_rows=bad))
    plain = et.EmbeddingBagCollection(configs("p"), optimizer=opt, seed=3)
    cached = et.EmbeddingBagCollection(configs("c"), optimizer=opt, seed=3, cache_rows=16)
    assert plain.cache_stats()["capacity"] == 0 and cached.cache_stats()["capacity"] == 16
    gen = torch.Generator().manual_seed(7 + t)
    B = 6
    for step in range(8):
        lengths = torch.randint(0, 4, (3 * B,), generator=gen, dtype=torch.int32)
        n = int(lengths.sum())
        cut = int(lengths[:2 * B].sum())
        # skewed: most ids among the first 6 rows
        values = torch.cat([torch.randint(0, 6, (cut,), generator=gen) * (1 + step % 2),
                            torch.randint(0, 20, (n - cut,), generator=gen)])
        outs = []
        for ebc, p in ((plain, "p"), (cached, "c")):
            kjt = et.KeyedJaggedTensor(keys=[f"{p}f0", f"{p}f1", f"{p}g"], values=values,
                                       lengths=lengths)
            with torch.no_grad():
                ebc(kjt)  # a forward with no step: its rows stand at the next one
            with ebc.step_context():
                out = ebc(kjt)
                outs.append(out.values().detach().clone())
                (out.values() * torch.arange(1, 12, dtype=torch.float32)).sum().backward()
        assert torch.equal(outs[0], outs[1]), (step, (outs[0] - outs[1]).abs().max())
    plain.sync("cache_check.plain")
    cached.sync("cache_check.cached")
    for a, c in (("pa", "ca"), ("pb", "cb")):
        assert torch.equal(plain.read_table(a), cached.read_table(c)), (a, c)
    s = cached.cache_stats()
    assert s["hits"] > 0 and s["lookups"] > s["hits"] and s["rows"] <= 16, s
    print(f"trainer {t}: cache {s['hits']} of {s['lookups']} rows hit", flush=True)
    plain.close()
    cached.close()
    et.barrier("cache_check.end")
    et.shutdown()
    print(f"trainer {t}: ok", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

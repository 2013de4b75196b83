#!/usr/bin/env python3
"""tests/train/dcn_ref.py's DLRM_DCN against TorchRec's own torchrec.models.dlrm.DLRM_DCN.

Run once, in the venv of scripts/torchrec-venv.sh:

    $PY bench/peers/dcn_ref_vs_torchrec.py [--seed S] [--tolerance 1e-5]

Builds TorchRec's DLRM_DCN (an EmbeddingBagCollection of a few small tables
t_cat_f for features cat_f, DenseArch, InteractionDCNArch over
LowRankCrossNet, OverArch) and the reference (dcn_ref.build_dlrm_dcn) of the
same shape, loads TorchRec's initial state_dict into the reference with
strict=True (so the names are TorchRec's), and feeds both the same seeded
batch: dense features, and per feature a multi-hot bag of the feature's size
(dcn_ref.expand_ids over random one-id rows, pareto; one feature one-hot) -
a KeyedJaggedTensor for TorchRec, [B][m_f] index arrays for the reference.
Checks that the logits, the BCE-with-logits loss and every parameter's
gradient agree within --tolerance (absolute, float32), then that three SGD
steps later the losses and parameters still do.  Prints each comparison and
a verdict; exit 0 when all agree, 1 otherwise.
"""
import argparse
import os
import sys

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "..", "tests", "train"))
import dcn_ref  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402

DENSE = 13


def build_torchrec(dim, rows, dense_sizes, over_sizes, layers, rank):
    from torchrec import EmbeddingBagCollection
    from torchrec.models.dlrm import DLRM_DCN
    from torchrec.modules.embedding_configs import EmbeddingBagConfig

    tables = [EmbeddingBagConfig(name=f"t_cat_{f}", embedding_dim=dim, num_embeddings=n,
                                 feature_names=[f"cat_{f}"]) for f, n in enumerate(rows)]
    return DLRM_DCN(embedding_bag_collection=EmbeddingBagCollection(tables=tables),
                    dense_in_features=DENSE, dense_arch_layer_sizes=dense_sizes,
                    over_arch_layer_sizes=over_sizes, dcn_num_layers=layers,
                    dcn_low_rank_dim=rank, dense_device=torch.device("cpu"))


def kjt_of(bags):
    """F arrays [B][m_f] -> the KeyedJaggedTensor (feature-major, lengths m_f)."""
    from torchrec.sparse.jagged_tensor import KeyedJaggedTensor

    values = torch.from_numpy(np.concatenate([b.reshape(-1) for b in bags]))
    lengths = torch.from_numpy(np.concatenate([np.full(len(b), b.shape[1]) for b in bags]))
    return KeyedJaggedTensor.from_lengths_sync(keys=[f"cat_{f}" for f in range(len(bags))],
                                               values=values, lengths=lengths.to(torch.int32))


class Report:
    def __init__(self, tolerance):
        self.tolerance, self.worst, self.failed = tolerance, 0.0, []

    def compare(self, name, got, want, quiet=False):
        got, want = got.detach().double(), want.detach().double()
        if got.shape != want.shape:
            self.failed.append(name)
            print(f"FAIL {name}: shape {tuple(got.shape)}, TorchRec's {tuple(want.shape)}")
            return
        diff = float((got - want).abs().max()) if got.numel() else 0.0
        self.worst = max(self.worst, diff)
        ok = diff <= self.tolerance
        if not ok:
            self.failed.append(name)
        if not ok or not quiet:
            print(f"{'ok  ' if ok else 'FAIL'} {name:58s} max |diff| {diff:.3g} "
                  f"(scale {float(want.abs().max()):.3g})")


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--tolerance", type=float, default=1e-5)
    p.add_argument("--batch-size", type=int, default=64)
    args = p.parse_args(argv)
    import logging

    import torchrec

    logging.getLogger("torch.fx._symbolic_trace").setLevel(logging.ERROR)  # not ours

    dim, rows = 8, [40, 25, 1000, 7, 300]
    sizes = [3, 1, 100, 2, 27]  # MLPerf-like bag sizes, one one-hot feature
    dense_sizes, over_sizes, layers, rank = [16, dim], [32, 16, 1], 3, 4
    torch.manual_seed(args.seed)
    trec = build_torchrec(dim, rows, dense_sizes, over_sizes, layers, rank)
    ref = dcn_ref.build_dlrm_dcn(dim, rows, dense_sizes, over_sizes, layers, rank)
    state = trec.state_dict()
    with torch.no_grad():  # a bias of zeros would hide a bias misplaced
        for name, value in state.items():
            if ".bias." in name:
                value.normal_(0.0, 0.1)
    want_shapes = dcn_ref.dlrm_dcn_shapes(dim, rows, dense_sizes, over_sizes, layers, rank)
    have_shapes = {k: tuple(v.shape) for k, v in state.items()}
    print(f"dcn_ref_vs_torchrec: torch {torch.__version__}, torchrec {torchrec.__version__}; "
          f"{len(rows)} tables {rows} x D {dim}, bag sizes {sizes}, dense {dense_sizes}, "
          f"over {over_sizes}, DCN {layers} layers rank {rank}, B {args.batch_size}")
    report = Report(args.tolerance)
    if have_shapes != want_shapes:
        print(f"FAIL TorchRec's state_dict is not dcn_ref.dlrm_dcn_shapes: "
              f"{sorted(set(have_shapes.items()) ^ set(want_shapes.items()))}")
        report.failed.append("shapes")
    ref.load_state_dict({k: v.clone() for k, v in state.items()}, strict=True)
    print(f"ok   the reference loads TorchRec's {len(state)} tensors with strict=True "
          f"(inter_arch.crossnet.{{W,V}}_kernels.L, bias.L among them)")

    gen = np.random.default_rng(args.seed)
    batch = args.batch_size
    ids = np.stack([gen.integers(0, n, batch) for n in rows], axis=1)
    bags = dcn_ref.expand_ids(ids, sizes, rows, args.seed, "pareto")
    dense = torch.from_numpy(np.log1p(gen.integers(0, 1000, (batch, DENSE))).astype(np.float32))
    labels = torch.from_numpy(gen.integers(0, 2, batch).astype(np.float32))
    kjt = kjt_of(bags)
    ref_bags = [torch.from_numpy(b) for b in bags]

    def step(model, run):
        model.zero_grad(set_to_none=True)
        logits = run().reshape(-1)
        loss = torch.nn.functional.binary_cross_entropy_with_logits(logits, labels)
        loss.backward()
        return logits, loss

    t_logits, t_loss = step(trec, lambda: trec(dense_features=dense, sparse_features=kjt))
    r_logits, r_loss = step(ref, lambda: ref(dense, ref_bags))
    report.compare("logits [B]", r_logits, t_logits)
    report.compare("loss (BCE with logits, mean)", r_loss, t_loss)
    t_params, r_params = dict(trec.named_parameters()), dict(ref.named_parameters())
    if set(t_params) != set(r_params):
        print(f"FAIL parameter names differ: {sorted(set(t_params) ^ set(r_params))}")
        report.failed.append("names")
    for name in t_params:
        if name in r_params:
            report.compare(f"grad {name}", r_params[name].grad, t_params[name].grad)

    # Three SGD steps on both, the same batch: still the same model.
    t_opt = torch.optim.SGD(trec.parameters(), lr=0.1)
    r_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    for s in range(3):
        t_opt.step()
        r_opt.step()
        _, t_loss = step(trec, lambda: trec(dense_features=dense, sparse_features=kjt))
        _, r_loss = step(ref, lambda: ref(dense, ref_bags))
        report.compare(f"loss after SGD step {s + 1}", r_loss, t_loss)
    t_state = trec.state_dict()
    for name, value in ref.state_dict().items():
        report.compare(f"after 3 steps: {name}", value, t_state[name], quiet=True)
    print("ok   after 3 steps: every parameter" if not any("after 3" in f for f in report.failed)
          else "FAIL after 3 steps: parameters differ")

    if report.failed:
        print(f"VERDICT: MISMATCH in {len(report.failed)} comparison(s): "
              f"{', '.join(report.failed[:5])}")
        return 1
    print(f"VERDICT: dcn_ref.py's DLRM_DCN = TorchRec's DLRM_DCN (logits, loss, "
          f"{len(t_params)} gradients, 3 SGD steps), max |diff| {report.worst:.3g} "
          f"<= {args.tolerance:g}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

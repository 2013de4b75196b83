#!/usr/bin/env python3
"""PyTorch's nn.EmbeddingBag on the sizes of ember-bench-gpu, as its peer.

    torch_bag_gpu.py [--device cuda|cpu] [--quick] [--bags B] [--len L]
                     [--dims 32,64,128,256] [--table-bytes N] [--iters K]

For each dim, pooling mode (sum, mean, max) and optimizer (SGD, Adagrad,
Adam) it times, over the same batch shape as ember-bench-gpu (B bags of L
uniform random rows of a table of N bytes, 2 GiB by default):
  - the forward, nn.EmbeddingBag(idx, offsets);
  - backward + optimizer step: out.backward(grad_out), opt.step(),
    opt.zero_grad().
Timed as ember-bench-gpu times its own (bench/gpu/bench_gpu.c): one
untimed call first, then K calls back to back between two device
synchronizations (none per call), the time divided by K.  The update's K
forwards (each backward needs its own graph) are made before its clock
starts, as ember's fused op takes a forward's output made beforehand.
Sparse gradients (sparse=True) with torch.optim.SGD, torch.optim.Adagrad and
torch.optim.SparseAdam where PyTorch has them; max mode does not support
sparse weights in PyTorch, so it runs dense (a whole-table gradient, and
torch.optim.Adam), marked "dense".  PyTorch has no row-wise Adagrad.

GB/s with ember-bench-gpu's byte counts (bench/gpu/bench_gpu.c), so both
columns measure the same work:
  forward: n*dim*4 rows + bags*dim*4 output (x3 in max mode: argmax) + n*8;
  backward + optimizer (UPDATE_BYTES): n*dim*4 grad_out (+ n*dim*8 argmax for
  max) + n*8 + bags*8 indices/offsets + 2*unique*(dim*4 + state bytes per
  row: sgd 0, adagrad dim*4, adam 2*dim*4+4).
One table row per case, then "PEER ..." lines to parse.  Exit 77 when
--device cuda and no GPU is visible.
"""
import argparse
import sys
import time

import torch

UPDATE_BYTES = ("bytes = n*dim*4 grad_out (+ n*dim*8 argmax for max) + n*8 + bags*8 "
                "indices/offsets + 2*unique*(dim*4 + state/row: sgd 0, adagrad dim*4, "
                "adam 2*dim*4+4)")
STATE_ROW = {"sgd": lambda d: 0.0, "adagrad": lambda d: d * 4.0, "adam": lambda d: 2.0 * d * 4 + 4}


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    p.add_argument("--quick", action="store_true", help="ember-bench-gpu --quick's sizes")
    p.add_argument("--bags", type=int, help="bags per batch (65536; --quick 16384)")
    p.add_argument("--len", type=int, default=32, help="entries per bag")
    p.add_argument("--dims", default="32,64,128,256", help="comma-separated dims")
    p.add_argument("--table-bytes", type=int, default=2 << 30, help="table size in bytes")
    p.add_argument("--iters", type=int, help="timed iterations (10; --quick 3)")
    a = p.parse_args(argv)
    a.bags = a.bags if a.bags is not None else (16384 if a.quick else 65536)
    a.iters = a.iters if a.iters is not None else (3 if a.quick else 10)
    try:
        a.dims = [int(d) for d in a.dims.split(",")]
    except ValueError:
        p.error(f"--dims {a.dims!r}: not a comma-separated list of integers")
    for name, value in (("--bags", a.bags), ("--len", a.len), ("--iters", a.iters)):
        if value < 1:
            p.error(f"{name} {value}: must be >= 1")
    if any(d < 1 for d in a.dims):
        p.error(f"--dims: every dim must be >= 1")
    if any(a.table_bytes < d * 4 for d in a.dims):
        p.error(f"--table-bytes {a.table_bytes}: less than one row")
    return a


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def make_opt(name, params, sparse):
    if name == "sgd":
        return torch.optim.SGD(params, lr=0.01)
    if name == "adagrad":
        return torch.optim.Adagrad(params, lr=0.01)
    return torch.optim.SparseAdam(params, lr=0.01) if sparse else torch.optim.Adam(params, lr=0.01)


def bench_case(a, device, dim, rows, idx, off, unique, mode, opt_name):
    """One (dim, mode, optimizer): forward ms, backward + step ms."""
    n, bags = idx.numel(), off.numel()
    sparse = mode != "max"
    bag = torch.nn.EmbeddingBag(rows, dim, mode=mode, sparse=sparse).to(device)
    with torch.no_grad():
        bag.weight.zero_()
    opt = make_opt(opt_name, list(bag.parameters()), sparse)
    go = torch.zeros(bags, dim, device=device)

    def update(out):
        out.backward(go)
        opt.step()
        opt.zero_grad(set_to_none=True)

    # The forward: one call untimed, then K back to back.
    bag(idx, off)
    sync(device)
    t0 = time.perf_counter()
    for _ in range(a.iters):
        bag(idx, off)
    sync(device)
    fwd = time.perf_counter() - t0
    # Backward + optimizer: one untimed, then K on the K graphs made first.
    update(bag(idx, off))
    outs = [bag(idx, off) for _ in range(a.iters)]
    sync(device)
    t0 = time.perf_counter()
    for out in outs:
        update(out)
    sync(device)
    upd = time.perf_counter() - t0
    fwd_ms, upd_ms = fwd * 1e3 / a.iters, upd * 1e3 / a.iters
    fwd_bytes = n * dim * 4.0 + bags * dim * 4.0 * (3 if mode == "max" else 1) + n * 8.0
    upd_bytes = (n * dim * (12.0 if mode == "max" else 4.0) + n * 8.0 + bags * 8.0 +
                 2.0 * unique * (dim * 4.0 + STATE_ROW[opt_name](dim)))
    return fwd_ms, fwd_bytes / (fwd_ms * 1e-3) / 1e9, upd_ms, upd_bytes / (upd_ms * 1e-3) / 1e9, \
        sparse


def main(argv):
    a = parse_args(argv)
    if a.device == "cuda" and not torch.cuda.is_available():
        print("torch_bag_gpu: no CUDA GPU visible, skipping", file=sys.stderr)
        return 77
    device = torch.device(a.device)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    n = a.bags * a.len
    print(f"# torch_bag_gpu on {name}, torch {torch.__version__}, {a.bags} bags x {a.len}")
    print(f"# forward bytes = n*dim*4 + bags*dim*4 (x3 max) + n*8; {UPDATE_BYTES}")
    print(f"{'dim':<6} {'mode':<5} {'optim':<14} {'fwd ms':>10} {'fwd GB/s':>10} "
          f"{'upd ms':>10} {'upd GB/s':>10}")
    gen = torch.Generator().manual_seed(0x1234)
    results = []
    for dim in a.dims:
        rows = a.table_bytes // (dim * 4)
        idx_h = torch.randint(0, rows, (n,), generator=gen, dtype=torch.int64)
        unique = torch.unique(idx_h).numel()
        idx = idx_h.to(device)
        off = torch.arange(0, n, a.len, dtype=torch.int64, device=device)
        for mode in ("sum", "mean", "max"):
            for opt_name in ("sgd", "adagrad", "adam"):
                fms, fgbs, ums, ugbs, sparse = bench_case(a, device, dim, rows, idx, off, unique,
                                                          mode, opt_name)
                label = opt_name + ("" if sparse else "(dense)")
                print(f"{dim:<6} {mode:<5} {label:<14} {fms:10.3f} {fgbs:10.1f} "
                      f"{ums:10.3f} {ugbs:10.1f}")
                results.append((dim, mode, label, fms, fgbs, ums, ugbs))
    for dim, mode, label, fms, fgbs, ums, ugbs in results:
        print(f"PEER dim={dim} mode={mode} optim={label} fwd_ms={fms:.4f} fwd_gbs={fgbs:.2f} "
              f"upd_ms={ums:.4f} upd_gbs={ugbs:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

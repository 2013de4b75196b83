#!/usr/bin/env python3
"""torch.distributed gloo allreduce in the nccl-tests format, the peer of
`ember-bench allreduce` (same flags, sizes, pattern, check and columns).

    python3 bench/peers/gloo_allreduce.py -N 4 -b 8 -e 64M -f 2 -n 20 -w 5 -c 1

-N ranks are spawned on this host (torch.multiprocessing), rendezvous on
127.0.0.1, gloo over the loopback device (GLOO_SOCKET_IFNAME=lo).  gloo's
allreduce is in place; out-of-place = copy into the receive tensor + allreduce
(the same as ember-bench does).  time = average per call, averaged over ranks.
"""
import argparse
import os
import socket
import time


def parse_size(text):
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    if text[-1:].upper() in mult:
        return int(text[:-1]) * mult[text[-1:].upper()]
    return int(text)


def pattern(torch, count, rank):
    i = torch.arange(count, dtype=torch.int64)
    return ((i * 7 + rank * 13) % 31 - 15).to(torch.float32)


def worker(rank, args, port):
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}",
                            rank=rank, world_size=args.N)
    n = args.N
    max_count = args.e // 4
    send = torch.zeros(max_count, dtype=torch.float32)
    recv = torch.zeros(max_count, dtype=torch.float32)
    # As ember-bench's: untimed reductions of min(8000 B, maxBytes) before the sweep.
    for _ in range(128 if max_count else 0):
        dist.all_reduce(recv[:min(max_count, 2000)])
    if rank == 0:
        print(f"# gloo_allreduce: torch {torch.__version__} torch.distributed gloo "
              f"all_reduce SUM float32, GLOO_SOCKET_IFNAME="
              f"{os.environ.get('GLOO_SOCKET_IFNAME', '')}")
        print(f"# nThread 1 nGpus 0 nRanks {n} minBytes {args.b} maxBytes {args.e} "
              f"step: {args.f}(factor) warmup iters: {args.w} iters: {args.n} "
              f"agg iters: 1 validation: {args.c} graph: 0")
        print("# connection warm-up: 128 untimed reductions of min(8000 B, maxBytes) "
              "before the sweep\n#")
        print("#%75s%41s" % ("out-of-place", "in-place"))
        fmt = "#%11s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s"
        print(fmt % ("size", "count", "type", "redop", "root", "time", "algbw", "busbw",
                     "#wrong", "time", "algbw", "busbw", "#wrong"))
        print(fmt % ("(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "",
                     "(us)", "(GB/s)", "(GB/s)", ""), flush=True)
    busbw_sum, busbw_count, wrong_total = 0.0, 0, 0
    size = args.b
    while size <= args.e:
        count = size // 4
        s, r = send[:count], recv[:count]
        stats = torch.zeros(4, dtype=torch.float64)
        for in_place in (0, 1):
            s.zero_()
            for it in range(args.w + args.n):
                if it == args.w:
                    start = time.perf_counter()
                if in_place:
                    dist.all_reduce(s)
                else:
                    r.copy_(s)
                    dist.all_reduce(r)
            stats[in_place] = (time.perf_counter() - start) / args.n * 1e6
            if args.c:
                s.copy_(pattern(torch, count, rank))
                data = s if in_place else r
                if not in_place:
                    r.copy_(s)
                dist.all_reduce(data)
                expect = sum(pattern(torch, count, q) for q in range(n))
                stats[2 + in_place] = float((data != expect).sum())
        dist.all_reduce(stats)
        if rank == 0:
            line = "%12d  %12d  %8s  %6s  %6d" % (count * 4, count, "float", "sum", -1)
            for p in (0, 1):
                us = float(stats[p]) / n
                algbw = count * 4 / (us * 1e-6) / 1e9 if us > 0 else 0.0
                busbw = algbw * 2 * (n - 1) / n
                busbw_sum += busbw
                busbw_count += 1
                line += "  %7.2f  %6.2f  %6.2f  %6.0f" % (us, algbw, busbw, stats[2 + p])
            print(line, flush=True)
        wrong_total += int(stats[2] + stats[3])
        size *= args.f
    if rank == 0:
        print(f"# Out of bounds values : {wrong_total} {'FAILED' if wrong_total else 'OK'}")
        print(f"# Avg bus bandwidth    : {busbw_sum / max(busbw_count, 1):g} \n#",
              flush=True)
    dist.destroy_process_group()
    if wrong_total:
        raise SystemExit(1)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-N", type=int, default=2, help="ranks")
    ap.add_argument("-b", type=parse_size, default=8)
    ap.add_argument("-e", type=parse_size, default=64 << 20)
    ap.add_argument("-f", type=int, default=2)
    ap.add_argument("-n", type=int, default=20)
    ap.add_argument("-w", type=int, default=5)
    ap.add_argument("-c", type=int, default=1)
    ap.add_argument("-d", default="float", choices=["float"])
    ap.add_argument("-o", default="sum", choices=["sum"])
    args = ap.parse_args()
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    import torch.multiprocessing as mp
    mp.spawn(worker, args=(args, port), nprocs=args.N, join=True)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Two runs of the two-tower example on different PS counts (two_tower's
--out files A and B): the same initial weights bit for bit (the tables are
drawn by global row and column, whatever the shards), and every loss and
final weight within --tolerance (1e-5).  Not bit for bit: a multi-hot bag
whose rows sit on several PS is pooled as the sum of each PS's part, which
rounds otherwise than one PS's sum in bag order.

    compare_runs.py EXAMPLE_DIR A B
"""
import argparse
import sys

import numpy as np


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("example", help="examples/two_tower (its reference.py reads the files)")
    parser.add_argument("a")
    parser.add_argument("b")
    parser.add_argument("--tolerance", type=float, default=1e-5)
    args = parser.parse_args()
    sys.path.insert(0, args.example)
    from reference import read_safetensors

    _, a = read_safetensors(args.a)
    _, b = read_safetensors(args.b)
    if sorted(a) != sorted(b):
        sys.exit(f"compare_runs: {args.a} and {args.b} hold different tensors")
    failures = 0
    for name in sorted(a):
        if a[name].shape != b[name].shape:
            print(f"compare_runs: {name}: shapes {a[name].shape} and {b[name].shape}")
            failures += 1
            continue
        diff = float(np.abs(a[name].astype(np.float64) - b[name]).max()) if a[name].size else 0.0
        if name.startswith("init."):
            ok = np.array_equal(a[name].view(np.uint32), b[name].view(np.uint32))
            want = "the same bits"
        else:
            ok = diff <= args.tolerance
            want = f"within {args.tolerance:g}"
        print(f"compare_runs: {name}: {'ok' if ok else 'DIFFERS'} (|diff| {diff:.3g}, {want})")
        failures += not ok
    print("compare_runs: " + ("FAILED" if failures else "ok"))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

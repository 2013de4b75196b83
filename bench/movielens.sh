#!/usr/bin/env bash
# ember's AUC beside the plain-PyTorch model's on MovieLens-100k (issue 35):
# the same split (scripts/movielens_data.sh), the same architecture and
# flags, the same initial weights (torch_dlrm.py --write-init, then
# ember-train --init), for DLRM (the original interaction) and DLRM-DCN.
# Prints each side's AUC and log loss after the last step and the AUC
# difference; the target is |ember - PyTorch| <= 0.005 (TOLERANCE).
# Then ember's DLRM on fixed tables beside the same on dynamic tables
# (movielens_dynamic.schema: user_id, movie_id and zip_code as raw ids, no
# mod rows, so no two zip codes share a row), both from ember's own init
# (the same seed: the same dense layers and, for the ids below rows, the
# same rows); the dynamic run must not fall more than DYN_MARGIN (0.01)
# below the fixed one.
#
#   bench/movielens.sh                 both sides (needs ember-train --schema)
#   TORCH_ONLY=1 bench/movielens.sh    the PyTorch side alone
#
# Exit 0: every difference within the tolerance (or TORCH_ONLY); 1: one
# over it; 2: ember's side cannot run (no build, no --schema yet); 3: no
# data (PyPI unreachable).
# Environment: OUT (default <repo>/build/movielens), BUILD (<repo>/build),
# TRAINERS (1), PS (1), SEED (1), EPOCHS (3), TOLERANCE (0.005), DYN_MARGIN
# (0.01), PYTHON (/usr/bin/python3).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
out=${OUT:-$repo/build/movielens}
build=${BUILD:-$repo/build}
trainers=${TRAINERS:-1} ps=${PS:-1} seed=${SEED:-1} epochs=${EPOCHS:-3}
tolerance=${TOLERANCE:-0.005} dyn_margin=${DYN_MARGIN:-0.01}
python=${PYTHON:-/usr/bin/python3}
torch_only=${TORCH_ONLY:-0}
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
logs=$(mktemp -d /tmp/ember-movielens.XXXXXX)
trap 'rm -rf "$logs"' EXIT

bash "$repo/scripts/movielens_data.sh" "$out" >"$logs/data.log" 2>&1 ||
    { rc=$?; cat "$logs/data.log" >&2; exit "$rc"; }

train=$build/tools/ember-train
ember_ok=1 why=""
if [[ $torch_only == 1 ]]; then
    ember_ok=0 why="TORCH_ONLY=1"
elif [[ ! -x $train ]]; then
    ember_ok=0 why="$train missing: build ember first"
elif ! grep -q -- --schema <<<"$("$train" --help 2>&1)"; then # whole: grep -q would cut the pipe
    ember_ok=0 why="$train has no --schema yet (issue 35's trainer)"
fi

model=(--embedding-dim 16 --dense-arch-layer-sizes 64,16 --over-arch-layer-sizes 64,32,1
       --batch-size 256 --epochs "$epochs" --optimizer adagrad --lr 0.02
       --trainers "$trainers" --seed "$seed")
data=(--schema "$out/movielens.schema" --data "text:$out/train.tsv" --eval "text:$out/test.tsv")

# The last "eval step S: auc A logloss L examples N" of a log: "A L".
last_eval() {
    grep -o 'eval step [0-9]*: auc [0-9.]* logloss [0-9.]* examples [0-9]*' "$1" | tail -1 |
        awk '{print $5, $7}'
}

n_train=$(($(wc -l <"$out/train.tsv") - 1)) n_test=$(($(wc -l <"$out/test.tsv") - 1))
echo "# MovieLens-100k: train $n_train, test $n_test examples; D 16, dense 64,16," \
     "over 64,32,1, batch 256, adagrad 0.02, $epochs epochs, $trainers trainer(s), seed $seed"
row='%-10s %10s %10s %10s %10s %10s  %s\n'
printf "$row" model torch_auc ember_auc diff torch_ll ember_ll verdict
status=0
for kind in original dcn; do
    extra=()
    [[ $kind == dcn ]] && extra=(--interaction-type dcn --dcn-num-layers 3 --dcn-low-rank-dim 16)
    init=$logs/init-$kind.safetensors
    nice "$python" "$repo/examples/movielens/torch_dlrm.py" "${data[@]}" "${model[@]}" \
        "${extra[@]}" --write-init "$init" >"$logs/torch-$kind.log" 2>&1 ||
        { cat "$logs/torch-$kind.log" >&2; exit 1; }
    read -r t_auc t_ll < <(last_eval "$logs/torch-$kind.log")
    if [[ $ember_ok == 1 ]]; then
        nice "$build/tools/ember-run" -n $((trainers + 1 + ps)) "$train" --model dlrm --ps "$ps" \
            --consistency sync "${data[@]}" "${model[@]}" "${extra[@]}" --init "$init" \
            >"$logs/ember-$kind.log" 2>&1 || { cat "$logs/ember-$kind.log" >&2; exit 1; }
        read -r e_auc e_ll < <(last_eval "$logs/ember-$kind.log") ||
            { echo "no eval line in ember's log:" >&2; tail -20 "$logs/ember-$kind.log" >&2
              exit 1; }
        verdict=$(awk -v a="$e_auc" -v b="$t_auc" -v t="$tolerance" \
            'BEGIN { d = a - b; if (d < 0) d = -d; print (d <= t ? "ok" : "OVER") }')
        [[ $verdict == ok ]] || status=1
        printf '%-10s %10s %10s %+10.6f %10s %10s  %s\n' "$kind" "$t_auc" "$e_auc" \
            "$(awk -v a="$e_auc" -v b="$t_auc" 'BEGIN { print a - b }')" "$t_ll" "$e_ll" \
            "$verdict (|diff| <= $tolerance)"
    else
        printf "$row" "$kind" "$t_auc" - - "$t_ll" - "ember skipped"
    fi
done
if [[ $ember_ok == 1 ]]; then
    echo "# ember DLRM, fixed tables vs dynamic (user_id, movie_id, zip_code raw ids), own init"
    printf "$row" tables auc - diff logloss - verdict
    for tables in fixed dynamic; do
        schema=$out/movielens.schema
        [[ $tables == dynamic ]] && schema=$out/movielens_dynamic.schema
        nice "$build/tools/ember-run" -n $((trainers + 1 + ps)) "$train" --model dlrm --ps "$ps" \
            --consistency sync --schema "$schema" --data "text:$out/train.tsv" \
            --eval "text:$out/test.tsv" "${model[@]}" >"$logs/ember-$tables.log" 2>&1 ||
            { cat "$logs/ember-$tables.log" >&2; exit 1; }
        read -r auc ll < <(last_eval "$logs/ember-$tables.log") ||
            { echo "no eval line in ember's log:" >&2; tail -20 "$logs/ember-$tables.log" >&2
              exit 1; }
        if [[ $tables == fixed ]]; then
            fixed_auc=$auc
            printf "$row" fixed "$auc" - - "$ll" - ""
            continue
        fi
        verdict=$(awk -v a="$auc" -v b="$fixed_auc" -v m="$dyn_margin" \
            'BEGIN { print (a >= b - m ? "ok" : "UNDER") }')
        [[ $verdict == ok ]] || status=1
        printf '%-10s %10s %10s %+10.6f %10s %10s  %s\n' dynamic "$auc" - \
            "$(awk -v a="$auc" -v b="$fixed_auc" 'BEGIN { print a - b }')" "$ll" - \
            "$verdict (>= fixed - $dyn_margin)"
        grep -E "table (user_id|movie_id|zip_code) on ps[0-9]+: " "$logs/ember-$tables.log" |
            sed 's/^\[[0-9]*\] /  /'
    done
fi
if [[ $ember_ok == 0 ]]; then
    echo "ember's side skipped: $why"
    [[ $torch_only == 1 ]] || exit 2
fi
exit $status

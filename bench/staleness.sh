#!/usr/bin/env bash
# ember-train --model dlrm with --staleness K = 0, 1, 2 (issue 24, part 2):
# the sparse-heavy configuration of bench/dlrm_vs_torchrec.sh (b: D 16,
# DenseArch 64,16, OverArch 64,1, 26 tables of 1,000,000 rows, B 4096,
# Adagrad lr 0.05) on the same generated Criteo-format file for each K,
# rounds interleaved (K 0, 1, 2, then again), and prints per K: examples/s
# (mean over rounds), its ratio to K 0's, the ROC AUC on a held-out file
# after the last step (ember's own evaluation) and its difference from
# K 0's, and the largest staleness the trainers' lookups saw.
#
#   bench/staleness.sh
#   STEPS=40 ROUNDS=3 bench/staleness.sh
#
# Environment: BUILD (<repo>/build: ember-train, ember-run, ember-criteo-gen),
# KS ("0 1 2"), ROUNDS (2), STEPS (20), TRAINERS (2), PS (1), ROWS (1000000:
# each table's), BATCH (4096), EXAMPLES (STEPS x BATCH x TRAINERS),
# EVAL_EXAMPLES (20000), SEED (1), EMBER_DATA (npy: the file in TorchRec's
# npy layout, written by bench/criteo_npy.py with PYTHON (/usr/bin/python3,
# numpy), read without parsing; tsv: streamed and parsed while it trains),
# KEEP (0: 1 keeps the logs, whose folder is printed).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
build=${BUILD:-$repo/build}
ks=${KS:-0 1 2}
rounds=${ROUNDS:-2}
steps=${STEPS:-20}
trainers=${TRAINERS:-2}
ps=${PS:-1}
rows=${ROWS:-1000000}
batch=${BATCH:-4096}
eval_examples=${EVAL_EXAMPLES:-20000}
seed=${SEED:-1}
python=${PYTHON:-/usr/bin/python3}
data_kind=${EMBER_DATA:-npy}

die() { echo "staleness: $*" >&2; exit 2; }
positive() {
    for n in "$@"; do
        [[ $n =~ ^[1-9][0-9]{0,8}$ ]] || die "ROUNDS, STEPS, TRAINERS, PS, ROWS, BATCH, EXAMPLES, EVAL_EXAMPLES: '$n' is not a positive integer"
    done
}
positive "$rounds" "$steps" "$trainers" "$ps" "$rows" "$batch" "$eval_examples"
examples=${EXAMPLES:-$((steps * batch * trainers))}
positive "$examples"
[[ $seed =~ ^[0-9]{1,9}$ ]] || die "SEED '$seed' is not an integer"
for k in $ks; do
    [[ $k =~ ^[0-9]{1,2}$ ]] && ((k <= 16)) || die "KS: '$k' is not a staleness 0 .. 16"
done
[[ " $ks " == *" 0 "* ]] || die "KS '$ks' must hold 0 (the ratios are to it)"
for tool in ember-criteo-gen ember-train ember-run; do
    [ -x "$build/tools/$tool" ] || die "$build/tools/$tool missing: build ember first (or set BUILD)"
done
out=$(mktemp -d /tmp/ember-staleness-bench.XXXXXX)
if [ "${KEEP:-0}" = 1 ]; then
    echo "# logs and files in $out"
else
    trap 'rm -rf "$out"' EXIT
fi
export UCX_NET_DEVICES=${UCX_NET_DEVICES:-lo}

"$build/tools/ember-criteo-gen" --examples "$examples" --out "$out/train.tsv" --seed "$seed" >/dev/null
"$build/tools/ember-criteo-gen" --examples "$eval_examples" --out "$out/eval.tsv" \
    --seed $((seed + 1)) >/dev/null
case $data_kind in
    npy) "$python" "$here/criteo_npy.py" "$out/train.tsv" "$out/train" ||
             die "cannot write the npy layout (PYTHON=$python needs numpy; or EMBER_DATA=tsv)"
         data=(--data "criteo-npy:$out/train") ;;
    tsv) data=(--data "criteo:$out/train.tsv") ;;
    *) die "EMBER_DATA: '$data_kind' is not npy or tsv" ;;
esac
flags=(--model dlrm --trainers "$trainers" --ps "$ps" --seed "$seed" --embedding-dim 16
    --num-embeddings "$rows" --dense-arch-layer-sizes 64,16 --over-arch-layer-sizes 64,1
    --batch-size "$batch" --optimizer adagrad --lr 0.05 --steps "$steps"
    --eval "criteo:$out/eval.tsv" "${data[@]}")

# "RATE AUC STEP SEEN" of one run's --metrics: examples over the epochs'
# seconds, the last evaluation's AUC and step, the largest staleness seen.
result() {
    awk '
        /"epoch"/ {
            match($0, /"seconds": [0-9.e+-]+/); s = substr($0, RSTART + 11, RLENGTH - 11)
            match($0, /"examples": [0-9]+/); e = substr($0, RSTART + 12, RLENGTH - 12)
            seconds += s; ex += e
            if (match($0, /"staleness": [0-9]+/)) {
                v = substr($0, RSTART + 13, RLENGTH - 13) + 0; if (v > seen) seen = v
            }
        }
        /"eval_step"/ {
            match($0, /"auc": [0-9.]+/); auc = substr($0, RSTART + 7, RLENGTH - 7)
            match($0, /"eval_step": [0-9]+/); step = substr($0, RSTART + 13, RLENGTH - 13)
        }
        END {
            if (seconds > 0 && auc != "") printf "%.1f %s %s %d\n", ex / seconds, auc, step, seen
            else print "- - - -"
        }' "$1"
}

echo "# machine: $(nproc) cores, $(lscpu | sed -n 's/^Model name: *//p')"
echo "# DLRM b (sparse-heavy): 26 tables of $rows x 16, DenseArch 13-64-16, OverArch 64,1, B $batch, Adagrad lr 0.05; $trainers trainers, $ps PS; $steps steps; data $data_kind"
echo "# $examples training examples, $eval_examples eval examples (ember-criteo-gen --seed $seed, $((seed + 1))); $rounds rounds of K = $ks, interleaved"
echo "# examples/s from --metrics (all steps); AUC: ember's evaluation after the last step"
declare -A rate_sum auc_sum seen_max
for ((r = 1; r <= rounds; r++)); do
    for k in $ks; do
        name=k$k-r$r
        "$build/tools/ember-run" -n $((trainers + ps + 1)) "$build/tools/ember-train" \
            "${flags[@]}" --staleness "$k" --metrics "$out/$name.json" >"$out/$name.log" 2>&1 || {
            tail -20 "$out/$name.log" >&2; die "ember-train --staleness $k failed (round $r)"; }
        read -r rate auc step seen <<<"$(result "$out/$name.json")"
        [ "$rate" != - ] || die "round $r K $k: no epoch or evaluation in $out/$name.json"
        [ "$step" = "$steps" ] || die "round $r K $k: the last evaluation is at step $step, not $steps"
        printf 'round %d  K %-2s %12s ex/s  AUC %s  staleness seen %s\n' "$r" "$k" "$rate" "$auc" "$seen"
        rate_sum[$k]=$(awk -v a="${rate_sum[$k]:-0}" -v b="$rate" 'BEGIN { printf "%.3f", a + b }')
        auc_sum[$k]=$(awk -v a="${auc_sum[$k]:-0}" -v b="$auc" 'BEGIN { printf "%.6f", a + b }')
        ((seen > ${seen_max[$k]:-0})) && seen_max[$k]=$seen
        : "${seen_max[$k]:=0}"
    done
done
echo
printf '%-9s %12s %7s %10s %9s %5s\n' staleness "ex/s" ratio AUC "AUC diff" seen
rate0=$(awk -v s="${rate_sum[0]}" -v n="$rounds" 'BEGIN { printf "%.1f", s / n }')
auc0=$(awk -v s="${auc_sum[0]}" -v n="$rounds" 'BEGIN { printf "%.6f", s / n }')
for k in $ks; do
    awk -v s="${rate_sum[$k]}" -v a="${auc_sum[$k]}" -v n="$rounds" -v r0="$rate0" -v a0="$auc0" \
        -v k="$k" -v seen="${seen_max[$k]}" 'BEGIN {
            rate = s / n; auc = a / n
            printf "%-9s %12.1f %7.2f %10.6f %+9.4f %5d\n", k, rate, rate / r0, auc, auc - a0, seen
        }'
done

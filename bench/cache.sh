#!/usr/bin/env bash
# The trainer's row cache (ember-train --cache-rows N) against no cache, at
# --staleness K = 0, 1, 2, in one run: for each K and each side, the
# examples/s (mean over rounds), the cached side's ratio to the uncached
# one's, the ROC AUC after the last step (ember's own evaluation) beside
# the uncached run's, and the cached side's hit rate (the master's
# "cache:" summary).  Two workloads:
#   dlrm       DLRM, the sparse-heavy configuration of bench/staleness.sh
#              (D 16, DenseArch 64,16, OverArch 64,1, 26 tables of ROWS
#              rows, Adagrad lr 0.05) on one generated Criteo-format file
#              (ember-criteo-gen: its ids are skewed, so hot rows recur)
#   movielens  DLRM on MovieLens-100k as bench/movielens.sh runs it
#              (scripts/movielens_data.sh; skipped, saying so, without
#              the data)
# Rounds interleave the runs (K 0 uncached, K 0 cached, K 1 ...).
#
#   bench/cache.sh
#   WORKLOADS=dlrm STEPS=40 ROUNDS=3 CACHE_ROWS=200000 bench/cache.sh
#
# Environment: BUILD (<repo>/build), WORKLOADS ("dlrm movielens"), KS
# ("0 1 2"), ROUNDS (2), CACHE_ROWS (100000: each trainer's), and for dlrm
# STEPS (20), TRAINERS (2), PS (1), ROWS (100000: each table's), BATCH
# (2048), EVAL_EXAMPLES (20000), SEED (1); for movielens EPOCHS (2),
# ML_OUT (<repo>/build/movielens); KEEP (0: 1 keeps the logs).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
build=${BUILD:-$repo/build}
workloads=${WORKLOADS:-dlrm movielens}
ks=${KS:-0 1 2}
rounds=${ROUNDS:-2}
cache_rows=${CACHE_ROWS:-100000}
steps=${STEPS:-20}
trainers=${TRAINERS:-2}
ps=${PS:-1}
rows=${ROWS:-100000}
batch=${BATCH:-2048}
eval_examples=${EVAL_EXAMPLES:-20000}
seed=${SEED:-1}
ml_epochs=${EPOCHS:-2}
ml_out=${ML_OUT:-$repo/build/movielens}

die() { echo "cache: $*" >&2; exit 2; }
for n in "$rounds" "$cache_rows" "$steps" "$trainers" "$ps" "$rows" "$batch" "$eval_examples" \
    "$ml_epochs"; do
    [[ $n =~ ^[1-9][0-9]{0,8}$ ]] ||
        die "ROUNDS, CACHE_ROWS, STEPS, TRAINERS, PS, ROWS, BATCH, EVAL_EXAMPLES, EPOCHS: '$n' is not a positive integer"
done
[[ $seed =~ ^[0-9]{1,9}$ ]] || die "SEED '$seed' is not an integer"
for k in $ks; do
    [[ $k =~ ^[0-9]{1,2}$ ]] && ((k <= 16)) || die "KS: '$k' is not a staleness 0 .. 16"
done
for w in $workloads; do
    [[ $w == dlrm || $w == movielens ]] || die "WORKLOADS: '$w' is not dlrm or movielens"
done
for tool in ember-criteo-gen ember-train ember-run; do
    [ -x "$build/tools/$tool" ] || die "$build/tools/$tool missing: build ember first (or set BUILD)"
done
out=$(mktemp -d /tmp/ember-cache-bench.XXXXXX)
if [ "${KEEP:-0}" = 1 ]; then
    echo "# logs and files in $out"
else
    trap 'rm -rf "$out"' EXIT
fi
export UCX_NET_DEVICES=${UCX_NET_DEVICES:-lo}
blas_threads=$(($(nproc) / trainers > 0 ? $(nproc) / trainers : 1))

# "RATE AUC HITRATE" of one run: examples (or bags) a second over the
# epochs' seconds of --metrics, the last evaluation's AUC, the cache's hit
# rate in % ("-" without a cache).
result() { # METRICS LOG
    local rate auc hit
    rate=$(awk '/"epoch"/ {
            match($0, /"seconds": [0-9.e+-]+/); s += substr($0, RSTART + 11, RLENGTH - 11)
            match($0, /"(examples|bags)": [0-9]+/); t = substr($0, RSTART, RLENGTH)
            sub(/.*: /, "", t); e += t }
        END { if (s > 0) printf "%.1f", e / s; else print "-" }' "$1")
    auc=$(grep -o 'eval step [0-9]*: auc [0-9.]*' "$2" | tail -1 | awk '{print $5}')
    hit=$(sed -nE 's/.*cache: hit rate ([0-9.]+)%.*/\1/p' "$2" | tail -1)
    echo "$rate ${auc:--} ${hit:--}"
}

# One workload: its flags in the array named FLAGS, its processes NP.
run_workload() { # NAME NP FLAGS...
    local name=$1 np=$2
    shift 2
    local -A rate_sum auc_sum hit_sum
    for ((r = 1; r <= rounds; r++)); do
        for k in $ks; do
            for c in 0 "$cache_rows"; do
                local tag=$name-k$k-c$c-r$r
                OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-$blas_threads} \
                    "$build/tools/ember-run" -n "$np" "$build/tools/ember-train" "$@" \
                    --staleness "$k" --cache-rows "$c" --metrics "$out/$tag.json" \
                    >"$out/$tag.log" 2>&1 || {
                    tail -20 "$out/$tag.log" >&2; die "$name --staleness $k --cache-rows $c failed"; }
                read -r rate auc hit <<<"$(result "$out/$tag.json" "$out/$tag.log")"
                [[ $rate != - && $auc != - ]] || die "$tag: no epoch or evaluation"
                printf '%-9s round %d  K %-2s cache %-7s %12s /s  AUC %s  hit rate %s%%\n' \
                    "$name" "$r" "$k" "$c" "$rate" "$auc" "$hit"
                rate_sum[$k.$c]=$(awk -v a="${rate_sum[$k.$c]:-0}" -v b="$rate" 'BEGIN { printf "%.3f", a + b }')
                auc_sum[$k.$c]=$(awk -v a="${auc_sum[$k.$c]:-0}" -v b="$auc" 'BEGIN { printf "%.6f", a + b }')
                [[ $hit == - ]] || hit_sum[$k.$c]=$(awk -v a="${hit_sum[$k.$c]:-0}" -v b="$hit" 'BEGIN { printf "%.3f", a + b }')
            done
        done
    done
    echo
    printf '%-9s %-9s %12s %12s %7s %10s %10s %9s\n' "$name" staleness "uncached/s" "cached/s" \
        ratio "AUC" "AUC cached" "hit rate"
    for k in $ks; do
        awk -v u="${rate_sum[$k.0]}" -v c="${rate_sum[$k.$cache_rows]}" \
            -v au="${auc_sum[$k.0]}" -v ac="${auc_sum[$k.$cache_rows]}" \
            -v h="${hit_sum[$k.$cache_rows]:-0}" -v n="$rounds" -v k="$k" -v name="$name" 'BEGIN {
                printf "%-9s %-9s %12.1f %12.1f %7.2f %10.6f %10.6f %8.1f%%\n", name, k, u / n,
                       c / n, c / u, au / n, ac / n, h / n }'
    done
    echo
}

echo "# machine: $(nproc) cores, $(lscpu | sed -n 's/^Model name: *//p')"
echo "# --cache-rows $cache_rows (each trainer) against none; K = $ks; $rounds rounds, interleaved"
for w in $workloads; do
    case $w in
    dlrm)
        examples=$((steps * batch * trainers))
        "$build/tools/ember-criteo-gen" --examples "$examples" --out "$out/train.tsv" \
            --seed "$seed" >/dev/null
        "$build/tools/ember-criteo-gen" --examples "$eval_examples" --out "$out/eval.tsv" \
            --seed $((seed + 1)) >/dev/null
        echo "# dlrm: 26 tables of $rows x 16, DenseArch 13-64-16, OverArch 64,1, B $batch," \
            "Adagrad lr 0.05; $trainers trainers, $ps PS, $steps steps; $examples examples"
        run_workload dlrm $((trainers + ps + 1)) --model dlrm --trainers "$trainers" --ps "$ps" \
            --seed "$seed" --embedding-dim 16 --num-embeddings "$rows" \
            --dense-arch-layer-sizes 64,16 --over-arch-layer-sizes 64,1 --batch-size "$batch" \
            --optimizer adagrad --lr 0.05 --steps "$steps" --data "criteo:$out/train.tsv" \
            --eval "criteo:$out/eval.tsv"
        ;;
    movielens)
        if ! bash "$repo/scripts/movielens_data.sh" "$ml_out" >"$out/ml-data.log" 2>&1; then
            echo "# movielens: skipped, no data (scripts/movielens_data.sh: $(tail -1 "$out/ml-data.log"))"
            continue
        fi
        echo "# movielens: DLRM D 16, dense 64,16, over 64,32,1, B 256, Adagrad lr 0.02," \
            "$ml_epochs epochs, 1 trainer, 1 PS"
        run_workload movielens 3 --model dlrm --ps 1 --trainers 1 --seed "$seed" \
            --schema "$ml_out/movielens.schema" --data "text:$ml_out/train.tsv" \
            --eval "text:$ml_out/test.tsv" --embedding-dim 16 --dense-arch-layer-sizes 64,16 \
            --over-arch-layer-sizes 64,32,1 --batch-size 256 --epochs "$ml_epochs" \
            --optimizer adagrad --lr 0.02
        ;;
    esac
done

#!/usr/bin/env bash
# ember-train's large job with the trainers' dense model and the PS's table
# on the CPU or the GPU (--device, --ps-device), the four placements side by
# side in one run, rounds alternating their order; prints steps/s of each
# round, the median and its ratio to the all-CPU placement.  Needs a GPU
# and the full build (not EMBER_GPU_ONLY).
#
#   bench/gpu_train.sh                 EmbeddingBag(1000000, 64), 2000-4000
#                                      indices a batch, 2 trainers, 1 PS
#   ROUNDS=3 EPOCHS=5 bench/gpu_train.sh
#
# Environment: BUILD (default <repo>/build), UCX_TLS (default sm,self).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${BUILD:-$here/../build}
rounds=${ROUNDS:-2} epochs=${EPOCHS:-5}
run=$build/tools/ember-run
train=$build/tools/ember-train
out=$(mktemp -d /tmp/ember-gpu-train.XXXXXX)
trap 'rm -rf "$out"' EXIT
export UCX_TLS=${UCX_TLS:-sm,self}

[ -x "$train" ] || { echo "build ember first: $train missing" >&2; exit 2; }
info=$("$build/tools/ember-info" 2>/dev/null)
grep -qE '^cuda: [1-9]' <<<"$info" || { echo "no CUDA GPU visible: nothing to measure" >&2; exit 77; }

large=(--rows 1000000 --dim 64 --min-indices 2000 --max-indices 4000 --hidden 256,128
       --epochs "$epochs" --batches 10)
placements=("cpu cpu" "cuda cpu" "cpu cuda" "cuda cuda")

one() { # trainer-device ps-device round -> steps/s
    local name="$1-$2-$3"
    EMBER_LOG_LEVEL=info "$run" -n 4 "$train" --device "$1" --ps-device "$2" "${large[@]}" \
        >"$out/$name.log" 2>&1 || { tail -20 "$out/$name.log" >&2; exit 1; }
    grep -o 'in [0-9.]* s: [0-9]* steps/s' "$out/$name.log" | awk '{print $4}'
}

echo "# GPU: $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1); $(nproc) cores; UCX_TLS=$UCX_TLS"
echo "# ember-train ${large[*]}"
declare -A results
for ((r = 0; r < rounds; r++)); do
    order=("${placements[@]}")
    ((r % 2)) && order=("${placements[3]}" "${placements[2]}" "${placements[1]}" "${placements[0]}")
    for p in "${order[@]}"; do
        read -r dev ps <<<"$p"
        results[$p]="${results[$p]:-} $(one "$dev" "$ps" "$r")"
    done
done
median() { tr ' ' '\n' | grep . | sort -n | awk '{v[NR]=$1} END {print (NR % 2) ? v[(NR+1)/2] : (v[NR/2] + v[NR/2+1]) / 2}'; }
base=$(median <<<"${results[cpu cpu]}")
printf '%-30s %-24s %8s %8s\n' "trainers / PS table" "steps/s per round" "median" "vs cpu"
for p in "${placements[@]}"; do
    read -r dev ps <<<"$p"
    m=$(median <<<"${results[$p]}")
    printf '%-30s %-24s %8s %7.2fx\n' "--device $dev --ps-device $ps" "${results[$p]# }" "$m" \
        "$(awk -v a="$m" -v b="$base" 'BEGIN { print a / b }')"
done

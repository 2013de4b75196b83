#!/usr/bin/env bash
# ember-train --model dlrm --interaction-type dcn beside TorchRec's own
# DLRM_DCN (bench/peers/torchrec_dlrm.py --interaction-type dcn, under
# DistributedModelParallel on CPU) on MLPerf's DLRM-DCNv2 shape scaled to
# this machine:
#   D 64, dense 512,256,64, over 512,512,256,1, DCN 3 layers of low rank 64,
#   MLPerf's 26 multi-hot sizes (3,2,1,2,6,1,1,1,1,7,3,8,1,6,9,5,1,1,1,12,100,
#   27,10,3,1,1; pareto, ember's synthetic multi-hot: include/ember/data.h),
#   MLPerf's Criteo 1TB tables capped at ROWS_CAP rows, B 2048
#   per trainer
# on the same generated file, from the same initial weights (TorchRec writes
# its state_dict, both --init from it), in ROUNDS alternating rounds (ember,
# then TorchRec); prints each round, then the medians of examples/s, their
# ratio (target >= 1.5) and both ROC AUCs on a held-out file after the same
# step, with their difference (target within 0.002).
#
#   bench/dlrm_dcn_vs_torchrec.sh
#   SKIP_EMBER=1 STEPS=10 ROUNDS=1 bench/dlrm_dcn_vs_torchrec.sh    TorchRec alone
#   ROWS_CAP=100000 bench/dlrm_dcn_vs_torchrec.sh                   smaller tables
#
# Environment: BUILD (<repo>/build: ember-train, ember-run, ember-criteo-gen),
# EMBER_TORCHREC_VENV (<repo>/.venv-torchrec, made by scripts/torchrec-venv.sh),
# STEPS (20), ROUNDS (3), TRAINERS (2), PS (1), ROWS_CAP (1000000),
# MULTI_HOT_DIST (pareto), OPTIMIZER and LR (sgd 1.0, as dlrm_vs_torchrec.sh's
# config a and for its reason: Adagrad's first step turns rounding noise in
# near-zero gradients into steps of +-lr), SEED (1: data, weights and the
# multi-hot key), EXAMPLES (STEPS x 2048 x TRAINERS), EVAL_EXAMPLES (20000),
# WARMUP (0: TorchRec's clock covers every step, as ember's rate does),
# SKIP_EMBER (0), KEEP (0: 1 keeps the logs and files, whose folder is
# printed), EMBER_DATA (npy: ember reads the file in TorchRec's npy layout,
# written by bench/criteo_npy.py, since the peer parses and expands its
# examples before its clock starts; tsv: ember streams the TSV), EMBER_FLAGS
# (more ember-train flags, given to every ember run).
#
# The multi-hot key: both sides get --seed SEED and key their bags by it
# (ember-train: the job's seed, models/dlrm/dlrm_trainer.c; the peer:
# --multi-hot-seed, default --seed), so both expand every id alike.
#
# Memory (measured with the 1,000,000 cap, 7.1M rows x 64: 1.8 GB of tables):
# the TorchRec side peaks near 7.2 GB in all with SGD (two ranks each read the
# 1.8 GB --init file whole beside their half of the tables), about 9 GB with
# Adagrad (its state); writing the initial weights peaks near 4.6 GB.  The
# sides run one after the other, so the default fits 24 GiB.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
build=${BUILD:-$repo/build}
venv=${EMBER_TORCHREC_VENV:-$repo/.venv-torchrec}
python=$venv/bin/python
unset EMBER_TORCHREC_VENV  # ours, not ember's: ember-train warns of EMBER_* names it does not know
peer=$here/peers/torchrec_dlrm.py
steps=${STEPS:-20}
rounds=${ROUNDS:-3}
trainers=${TRAINERS:-2}
ps=${PS:-1}
cap=${ROWS_CAP:-1000000}
dist=${MULTI_HOT_DIST:-pareto}
optimizer=${OPTIMIZER:-sgd}
lr=${LR:-1.0}
seed=${SEED:-1}
warmup=${WARMUP:-0}
skip_ember=${SKIP_EMBER:-0}
read -r -a ember_flags <<<"${EMBER_FLAGS:-}"
batch=2048
examples=${EXAMPLES:-$((steps * batch * trainers))}
eval_examples=${EVAL_EXAMPLES:-20000}
out=$(mktemp -d /tmp/ember-dlrm-dcn-bench.XXXXXX)
if [ "${KEEP:-0}" = 1 ]; then
    echo "# logs and files in $out"
else
    trap 'rm -rf "$out"' EXIT
fi
export UCX_NET_DEVICES=lo GLOO_SOCKET_IFNAME=lo

die() { echo "dlrm_dcn_vs_torchrec: $*" >&2; exit 2; }
tools=(ember-criteo-gen)
[ "$skip_ember" = 1 ] || tools+=(ember-train ember-run)
for tool in "${tools[@]}"; do
    [ -x "$build/tools/$tool" ] || die "$build/tools/$tool missing: build ember first (or set BUILD)"
done
[ -x "$python" ] || die "$python missing: run scripts/torchrec-venv.sh first"
for n in "$steps" "$rounds" "$trainers" "$ps" "$cap" "$examples" "$eval_examples"; do
    [[ $n =~ ^[1-9][0-9]{0,8}$ ]] || die "STEPS, ROUNDS, TRAINERS, PS, ROWS_CAP, EXAMPLES, EVAL_EXAMPLES: '$n' is not a positive integer"
done
[[ $warmup =~ ^[0-9]{1,9}$ ]] || die "WARMUP '$warmup' is not an integer"
case $dist in uniform|pareto) ;; *) die "MULTI_HOT_DIST '$dist' is not uniform or pareto" ;; esac
train=$build/tools/ember-train
if [ "$skip_ember" != 1 ]; then
    "$train" --model dlrm --help >"$out/probe.log" 2>&1 || true
    if ! grep -q -- "--interaction-type" "$out/probe.log" || ! grep -q -- "--multi-hot-sizes" "$out/probe.log"; then
        echo "dlrm_dcn_vs_torchrec: ember-train --model dlrm has no --interaction-type / --multi-hot-sizes in this build:" >&2
        head -n 5 "$out/probe.log" | sed 's/^/    /' >&2
        echo "    (SKIP_EMBER=1 runs TorchRec alone)" >&2
        exit 3
    fi
fi

# MLPerf DLRM-DCNv2's rows (Criteo 1TB, ids hashed to 40M), each capped at
# ROWS_CAP (at 1,000,000: bench/dlrm_vs_torchrec.sh's config a's tables).
criteo_rows=(40000000 39060 17295 7424 20265 3 7122 1543 63 40000000 3067956 405282 10 2209
             11938 155 4 976 14 40000000 40000000 40000000 590152 12973 108 36)
rows=$(for n in "${criteo_rows[@]}"; do echo $((n < cap ? n : cap)); done | paste -sd,)
total_rows=$(tr , '\n' <<<"$rows" | awk '{s += $1} END {print s}')
multi_hot=3,2,1,2,6,1,1,1,1,7,3,8,1,6,9,5,1,1,1,12,100,27,10,3,1,1
# shellcheck disable=SC2054  # the commas are the flags' values
flags=(--embedding-dim 64 --num-embeddings-per-feature "$rows"
    --dense-arch-layer-sizes 512,256,64 --over-arch-layer-sizes 512,512,256,1
    --interaction-type dcn --dcn-num-layers 3 --dcn-low-rank-dim 64
    --multi-hot-sizes "$multi_hot" --multi-hot-distribution-type "$dist"
    --batch-size "$batch" --optimizer "$optimizer" --lr "$lr"
    --trainers "$trainers" --seed "$seed")

"$build/tools/ember-criteo-gen" --examples "$examples" --out "$out/train.tsv" --seed "$seed" >/dev/null
"$build/tools/ember-criteo-gen" --examples "$eval_examples" --out "$out/eval.tsv" --seed $((seed + 1)) >/dev/null
case ${EMBER_DATA:-npy} in
    npy) [ "$skip_ember" = 1 ] || "$python" "$here/criteo_npy.py" "$out/train.tsv" "$out/train" ||
             die "cannot write the npy layout"
         ember_data=(--data "criteo-npy:$out/train") ;;
    tsv) ember_data=(--data "criteo:$out/train.tsv") ;;
    *) die "EMBER_DATA: '$EMBER_DATA' is not npy or tsv" ;;
esac
run=(--steps "$steps" --eval "criteo:$out/eval.tsv" --init "$out/init.safetensors")

# shellcheck source=bench/dlrm_bench_lib.sh
source "$here/dlrm_bench_lib.sh"
median() { # the median of a file's numbers, "-" when none
    grep -v '^-$' "$1" 2>/dev/null | sort -g | awk '{v[NR] = $1} END {if (!NR) print "-"; else print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'
}

echo "# machine: $(nproc) cores, $(lscpu | sed -n 's/^Model name: *//p'); $("$python" -c 'import torch, torchrec; print(f"torch {torch.__version__}, torchrec {torchrec.__version__}")')"
echo "# DLRM-DCN: D 64, dense 512,256,64, over 512,512,256,1, DCN 3 layers rank 64, multi-hot $dist ($multi_hot), Criteo tables capped at $cap ($total_rows rows), B $batch x $trainers trainers, $ps PS (ember); $optimizer lr $lr; $steps steps, $rounds rounds"
echo "# $examples training examples, $eval_examples eval examples (ember-criteo-gen --seed $seed, $((seed + 1))); both start from TorchRec's initial weights"
echo "# TorchRec: DLRM_DCN, row-wise DMP over gloo, its fused optimizer, TrainPipelineSparseDist; examples/s over steps $((warmup + 1))-$steps"
echo "# ember: examples/s from its --metrics epoch lines (all steps), data ${EMBER_DATA:-npy}${EMBER_FLAGS:+, EMBER_FLAGS $EMBER_FLAGS}; AUCs after the last step"

torchrec_run init "${flags[@]}" --data "criteo:$out/train.tsv" --steps 0 --save "$out/init.safetensors"
: >"$out/ember.rates"; : >"$out/trec.rates"
e_auc=- e_step=- t_auc=- t_step=-
for r in $(seq "$rounds"); do
    e_rate=-
    if [ "$skip_ember" != 1 ]; then
        ember_run "ember-$r" "${flags[@]}" "${ember_data[@]}" "${run[@]}"
        read -r e_rate e_auc e_step <<<"$(ember_result "ember-$r")"
    fi
    torchrec_run "torchrec-$r" "${flags[@]}" --data "criteo:$out/train.tsv" "${run[@]}" --warmup-steps "$warmup"
    read -r t_rate t_auc t_step <<<"$(torchrec_result "torchrec-$r")"
    echo "$e_rate" >>"$out/ember.rates"; echo "$t_rate" >>"$out/trec.rates"
    echo "# round $r: ember $e_rate ex/s (AUC $e_auc at step $e_step), torchrec $t_rate ex/s (AUC $t_auc at step $t_step)"
done
if [ "$skip_ember" != 1 ] && [ "$e_step" != "$t_step" ]; then
    echo "# ember's last eval is at step $e_step, TorchRec's at $t_step: no AUC difference" >&2
    e_auc=-
fi
rm -f "$out/init.safetensors"
e_rate=$(median "$out/ember.rates") t_rate=$(median "$out/trec.rates")
echo
printf '%-9s %14s %14s %7s %10s %10s %9s %5s\n' config "ember ex/s" "torchrec ex/s" ratio \
    "ember AUC" "trec AUC" "AUC diff" step
printf '%-9s %14s %14s %7s %10s %10s %9s %5s\n' dcn "$e_rate" "$t_rate" "$(ratio "$e_rate" "$t_rate")" \
    "$e_auc" "$t_auc" "$(diff_of "$e_auc" "$t_auc")" "$t_step"
echo "# examples/s: medians of $rounds rounds; targets: ratio >= 1.5, |AUC diff| <= 0.002"

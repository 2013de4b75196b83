#!/usr/bin/env bash
# ember-train --model dlrm beside TorchRec's own DLRM (bench/peers/torchrec_dlrm.py)
# on the same Criteo-format file, batch size, trainer count, steps, optimizer and
# learning rate, on two configurations:
#   a  TorchRec dlrm_main's Criteo defaults: D 64, dense 512,256,64, over
#      512,512,256,1, the Criteo 1TB tables (dlrm_main's README) capped at
#      1,000,000 rows, B 2048
#   b  sparse-heavy: D 16, dense 13 -> 64 -> 16, over 64,1, 26 tables of
#      1,000,000 rows, B 4096
# and prints, per configuration, both examples/s, their ratio, and both ROC
# AUCs on a held-out file after the same steps.
#
#   bench/dlrm_vs_torchrec.sh                 both configurations
#   CONFIGS=b STEPS=40 bench/dlrm_vs_torchrec.sh
#   SKIP_EMBER=1 bench/dlrm_vs_torchrec.sh    TorchRec alone
#
# Environment: BUILD (<repo>/build: ember-train, ember-run, ember-criteo-gen),
# EMBER_TORCHREC_VENV (<repo>/.venv-torchrec, made by scripts/torchrec-venv.sh),
# CONFIGS ("a b"), STEPS (20), EXAMPLES (STEPS x 4096 x TRAINERS: enough for
# every step of both), EVAL_EXAMPLES (20000), TRAINERS (2), PS (1), OPTIMIZER
# and LR (per configuration: a sgd 1.0, b adagrad 0.05), SEED (1), WARMUP (0: TorchRec's first steps left out of its timing; 0 times all, as ember's rate does),
# SAME_INIT (1: TorchRec writes its initial weights and both start from them,
# so the AUCs differ only by what each computes), KEEP (0: 1 keeps the logs and
# files, whose folder is printed), EMBER_DATA (npy: ember reads the file in
# TorchRec's npy layout, written by bench/criteo_npy.py before the runs; tsv:
# it streams and parses the TSV while it trains), EMBER_FLAGS (more ember-train
# flags, e.g. "--ps-threads 2", given to every ember run).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
build=${BUILD:-$repo/build}
venv=${EMBER_TORCHREC_VENV:-$repo/.venv-torchrec}
python=$venv/bin/python
peer=$here/peers/torchrec_dlrm.py
configs=${CONFIGS:-a b}
steps=${STEPS:-20}
trainers=${TRAINERS:-2}
ps=${PS:-1}
optimizer=${OPTIMIZER:-}
lr=${LR:-}
seed=${SEED:-1}
warmup=${WARMUP:-0}
same_init=${SAME_INIT:-1}
skip_ember=${SKIP_EMBER:-0}
read -r -a ember_flags <<<"${EMBER_FLAGS:-}"
examples=${EXAMPLES:-$((steps * 4096 * trainers))}
eval_examples=${EVAL_EXAMPLES:-20000}
out=$(mktemp -d /tmp/ember-dlrm-bench.XXXXXX)
if [ "${KEEP:-0}" = 1 ]; then
    echo "# logs and files in $out"
else
    trap 'rm -rf "$out"' EXIT
fi
export UCX_NET_DEVICES=lo GLOO_SOCKET_IFNAME=lo

die() { echo "dlrm_vs_torchrec: $*" >&2; exit 2; }
for tool in ember-criteo-gen ember-train ember-run; do
    [ -x "$build/tools/$tool" ] || die "$build/tools/$tool missing: build ember first (or set BUILD)"
done
[ -x "$python" ] || die "$python missing: run scripts/torchrec-venv.sh first"
for n in "$steps" "$trainers" "$ps" "$examples" "$eval_examples"; do
    [[ $n =~ ^[1-9][0-9]{0,8}$ ]] || die "STEPS, TRAINERS, PS, EXAMPLES, EVAL_EXAMPLES: '$n' is not a positive integer"
done
[[ $warmup =~ ^[0-9]{1,9}$ ]] || die "WARMUP '$warmup' is not an integer"
train=$build/tools/ember-train
if [ "$skip_ember" != 1 ] && ! "$train" --model dlrm --help >"$out/probe.log" 2>&1; then
    echo "dlrm_vs_torchrec: ember-train refuses --model dlrm (its DLRM path is not in this build):" >&2
    sed 's/^/    /' "$out/probe.log" | head -5 >&2
    echo "    (SKIP_EMBER=1 runs TorchRec alone)" >&2
    exit 3
fi

# dlrm_main's README's Criteo 1TB rows, capped at 1,000,000.
criteo_rows=1000000,39060,17295,7424,20265,3,7122,1543,63,1000000,1000000,405282,10,2209,11938,155,4,976,14,1000000,1000000,1000000,590152,12973,108,36
config_flags() {
    case $1 in
        a) echo "--embedding-dim 64 --num-embeddings-per-feature $criteo_rows" \
                "--dense-arch-layer-sizes 512,256,64 --over-arch-layer-sizes 512,512,256,1 --batch-size 2048" ;;
        b) echo "--embedding-dim 16 --num-embeddings 1000000" \
                "--dense-arch-layer-sizes 64,16 --over-arch-layer-sizes 64,1 --batch-size 4096" ;;
        *) die "CONFIGS: '$1' is not a or b" ;;
    esac
}
for c in $configs; do config_flags "$c" >/dev/null; done

"$build/tools/ember-criteo-gen" --examples "$examples" --out "$out/train.tsv" --seed "$seed"
"$build/tools/ember-criteo-gen" --examples "$eval_examples" --out "$out/eval.tsv" --seed $((seed + 1))
# Each configuration's optimizer (OPTIMIZER and LR set both): a trains with
# SGD, since Adagrad's first step moves every parameter by +-lr whatever its
# gradient's size, so on a's 0.7M dense parameters gradients that are
# rounding noise get full steps of their sign, and two correct programs part
# within a few steps (from the same weights ember and TorchRec agree to 1e-7
# in loss over 30 SGD steps there, and differ by 0.04 with Adagrad lr 0.005).
config_optimizer() {
    case $1 in
        a) echo "--optimizer ${optimizer:-sgd} --lr ${lr:-1.0}" ;;
        b) echo "--optimizer ${optimizer:-adagrad} --lr ${lr:-0.05}" ;;
    esac
}
common=(--trainers "$trainers" --seed "$seed")
trec_data=(--data "criteo:$out/train.tsv")
# ember's training examples: the same file, in TorchRec's npy layout (raw
# counts; bench/criteo_npy.py) by default, since the peer parses its text
# before its clock starts and ember reads npy without parsing;
# EMBER_DATA=tsv streams the TSV itself, parsing it while it trains.
case ${EMBER_DATA:-npy} in
    npy) "$python" "$here/criteo_npy.py" "$out/train.tsv" "$out/train" ||
             die "cannot write the npy layout"
         ember_data=(--data "criteo-npy:$out/train") ;;
    tsv) ember_data=(--data "criteo:$out/train.tsv") ;;
    *) die "EMBER_DATA: '$EMBER_DATA' is not npy or tsv" ;;
esac
run=(--steps "$steps" --eval "criteo:$out/eval.tsv")

# shellcheck source=bench/dlrm_bench_lib.sh
source "$here/dlrm_bench_lib.sh"

echo "# machine: $(nproc) cores, $(lscpu | sed -n 's/^Model name: *//p'); $("$python" -c 'import torch, torchrec; print(f"torch {torch.__version__}, torchrec {torchrec.__version__}")')"
echo "# $examples training examples, $eval_examples eval examples (ember-criteo-gen --seed $seed, $((seed + 1))); $trainers trainers, $ps PS (ember); $steps steps; $(for c in $configs; do printf '%s: %s; ' "$c" "$(config_optimizer "$c")"; done)"
echo "# TorchRec: row-wise DMP over gloo, its fused optimizer, TrainPipelineSparseDist; examples/s over steps $((warmup + 1))-$steps"
echo "# ember: examples/s from its --metrics epoch lines (all steps), data ${EMBER_DATA:-npy}${EMBER_FLAGS:+, EMBER_FLAGS $EMBER_FLAGS}; both AUCs after the last step"
[ "$same_init" = 1 ] && echo "# both start from TorchRec's initial weights (SAME_INIT=1)"
rows=()
for c in $configs; do
    read -r -a flags <<<"$(config_flags "$c") $(config_optimizer "$c")"
    init=()
    if [ "$same_init" = 1 ]; then
        torchrec_run "init-$c" "${flags[@]}" "${common[@]}" "${trec_data[@]}" --steps 0 --save "$out/init-$c.safetensors"
        init=(--init "$out/init-$c.safetensors")
    fi
    e_rate=- e_auc=- e_step=-
    if [ "$skip_ember" != 1 ]; then
        ember_run "ember-$c" "${flags[@]}" "${common[@]}" "${ember_data[@]}" "${run[@]}" "${init[@]}"
        read -r e_rate e_auc e_step <<<"$(ember_result "ember-$c")"
    fi
    torchrec_run "torchrec-$c" "${flags[@]}" "${common[@]}" "${trec_data[@]}" "${run[@]}" "${init[@]}" --warmup-steps "$warmup"
    read -r t_rate t_auc t_step <<<"$(torchrec_result "torchrec-$c")"
    if [ "$skip_ember" != 1 ] && [ "$e_step" != "$t_step" ]; then
        echo "# config $c: ember's last eval is at step $e_step, TorchRec's at $t_step: no AUC difference" >&2
        e_auc=-
    fi
    rm -f "$out/init-$c.safetensors"
    rows+=("$(printf '%-7s %14s %14s %7s %10s %10s %9s %5s' "$c" "$e_rate" "$t_rate" \
        "$(ratio "$e_rate" "$t_rate")" "$e_auc" "$t_auc" "$(diff_of "$e_auc" "$t_auc")" "$t_step")")
done
echo
printf '%-7s %14s %14s %7s %10s %10s %9s %5s\n' config "ember ex/s" "torchrec ex/s" ratio \
    "ember AUC" "trec AUC" "AUC diff" step
printf '%s\n' "${rows[@]}"

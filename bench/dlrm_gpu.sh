#!/usr/bin/env bash
# ember-train --model dlrm with its dense half on the GPU (--device cuda),
# beside the same DLRM in plain PyTorch on that GPU
# (bench/peers/torch_dlrm_gpu.py: the same layer sizes, tables, batch size,
# optimizer, learning rate, steps and Criteo-format file), in one run;
# prints examples/s of both and their ratio.  For bench/gpu-check.sh.
#
#   bench/dlrm_gpu.sh BUILD_DIR
#   DEVICE=cpu CONFIG=tiny bench/dlrm_gpu.sh build     both on the CPU, small
#
# Configurations (CONFIG):
#   a     TorchRec dlrm_main's Criteo defaults: D 64, dense 512,256,64, over
#         512,512,256,1, the Criteo 1TB tables capped at 1,000,000 rows,
#         B 2048 (default)
#   b     sparse-heavy: D 16, dense 64,16, over 64,1, 26 x 1,000,000 rows,
#         B 4096
#   tiny  D 8, dense 16,8, over 16,1, 26 x 1000 rows, B 64 (the script's own
#         test)
# Environment: DEVICE (cuda: ember's --device and the peer's device; cpu
# for both), PS_DEVICE (cpu: where ember's PS keeps the tables; cuda),
# STEPS (50), OPTIMIZER (sgd), LR (1.0 sgd, 0.05 adagrad), SEED (1),
# PYTHON (python3 with torch and numpy), EMBER_DATA (npy: ember reads the file
# in TorchRec's npy layout, bench/criteo_npy.py, as bench/dlrm_vs_torchrec.sh;
# tsv: it parses the TSV as it trains), UCX_TLS (sm,self), KEEP (1: keep the
# logs, whose folder is printed).
# ember runs one trainer and one PS (ember-run -n 3) and the peer one process:
# one GPU is one trainer.  Both are timed alike: the file holds STEPS
# batches, each side passes over them twice (ember: --epochs 2), the first
# pass untimed (kernels loaded, memory allocated, updates applied), the
# second on the clock (ember: its second --metrics epoch line; the peer:
# --warmup-passes 1), every step reading its loss back on both.  The tables:
# on ember's PS (host or GPU memory, looked up over UCX), the peer's on its
# GPU.
# Exit: 0, 2 (bad input or a failed run), 77 (no GPU for DEVICE=cuda, or a
# build without ember-train: a GPU-only build).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
[ $# -eq 1 ] || { echo "usage: bench/dlrm_gpu.sh BUILD_DIR" >&2; exit 2; }
build=$(cd "$1" 2>/dev/null && pwd) || { echo "dlrm_gpu: no build folder '$1'" >&2; exit 2; }
device=${DEVICE:-cuda} ps_device=${PS_DEVICE:-cpu} config=${CONFIG:-a}
steps=${STEPS:-50} optimizer=${OPTIMIZER:-sgd} seed=${SEED:-1}
python=${PYTHON:-python3}
export UCX_TLS=${UCX_TLS:-sm,self} UCX_NET_DEVICES=${UCX_NET_DEVICES:-lo}
export EMBER_LOG_LEVEL=${EMBER_LOG_LEVEL:-warn}

die() { echo "dlrm_gpu: $*" >&2; exit 2; }
[[ $steps =~ ^[1-9][0-9]{0,6}$ ]] || die "STEPS '$steps' is not a positive integer"
[[ $seed =~ ^[0-9]{1,9}$ ]] || die "SEED '$seed' is not an integer"
case $device in cuda | cpu) ;; *) die "DEVICE '$device' is not cuda or cpu" ;; esac
case $ps_device in cuda | cpu) ;; *) die "PS_DEVICE '$ps_device' is not cuda or cpu" ;; esac
case $optimizer in sgd) lr=${LR:-1.0} ;; adagrad) lr=${LR:-0.05} ;;
    *) die "OPTIMIZER '$optimizer' is not sgd or adagrad" ;; esac
criteo_rows=1000000,39060,17295,7424,20265,3,7122,1543,63,1000000,1000000,405282,10,2209,11938,155,4,976,14,1000000,1000000,1000000,590152,12973,108,36
case $config in
    a) model="--embedding-dim 64 --num-embeddings-per-feature $criteo_rows --dense-arch-layer-sizes 512,256,64 --over-arch-layer-sizes 512,512,256,1"
       batch=2048 ;;
    b) model="--embedding-dim 16 --num-embeddings 1000000 --dense-arch-layer-sizes 64,16 --over-arch-layer-sizes 64,1"
       batch=4096 ;;
    tiny) model="--embedding-dim 8 --num-embeddings 1000 --dense-arch-layer-sizes 16,8 --over-arch-layer-sizes 16,1"
       batch=64 ;;
    *) die "CONFIG '$config' is not a, b or tiny" ;;
esac
for tool in ember-train ember-run ember-criteo-gen ember-info; do
    [ -x "$build/tools/$tool" ] || { echo "dlrm_gpu: $build/tools/$tool missing (a GPU-only build has no ember-train): skipped" >&2; exit 77; }
done
"$python" -c 'import torch, numpy' 2>/dev/null || die "$python has no torch or numpy (set PYTHON)"
if [ "$device" = cuda ] || [ "$ps_device" = cuda ]; then
    info=$("$build/tools/ember-info" 2>/dev/null || true) # whole: grep -q would cut the pipe
    grep -qE '^cuda: [1-9]' <<<"$info" || { echo "dlrm_gpu: no CUDA GPU visible to ember: skipped" >&2; exit 77; }
fi

read -r -a flags <<<"$model --batch-size $batch --optimizer $optimizer --lr $lr --seed $seed"

out=$(mktemp -d /tmp/ember-dlrm-gpu.XXXXXX)
if [ "${KEEP:-0}" = 1 ]; then echo "# logs in $out"; else trap 'rm -rf "$out"' EXIT; fi
# STEPS batches exactly: an epoch of ember's is STEPS steps.
examples=$((steps * batch))
"$build/tools/ember-criteo-gen" --examples "$examples" --out "$out/train.tsv" --seed "$seed" \
    >"$out/gen.log" 2>&1 || { cat "$out/gen.log" >&2; die "ember-criteo-gen failed"; }
case ${EMBER_DATA:-npy} in
    npy) "$python" "$here/criteo_npy.py" "$out/train.tsv" "$out/train" >"$out/npy.log" 2>&1 ||
             { cat "$out/npy.log" >&2; die "cannot write the npy layout"; }
         ember_data=criteo-npy:$out/train ;;
    tsv) ember_data=criteo:$out/train.tsv ;;
    *) die "EMBER_DATA '$EMBER_DATA' is not npy or tsv" ;;
esac

timeout 900 "$build/tools/ember-run" -n 3 "$build/tools/ember-train" --model dlrm --trainers 1 --ps 1 \
    --device "$device" --ps-device "$ps_device" --epochs 2 "${flags[@]}" --data "$ember_data" \
    --metrics "$out/ember.json" >"$out/ember.log" 2>&1 ||
    { tail -20 "$out/ember.log" >&2; die "ember-train failed"; }
# The second epoch: the timed pass.
ember_rate=$("$python" - "$out/ember.json" "$steps" <<'PY'
import json, sys
epochs = [l for l in (json.loads(x) for x in open(sys.argv[1]) if x.strip()) if "epoch" in l]
steps = int(sys.argv[2])
if [e["epoch"] for e in epochs] != [1, 2] or any(e["steps"] != steps for e in epochs):
    sys.exit(f"ember's --metrics: epochs {[(e['epoch'], e['steps']) for e in epochs]}, "
             f"not 2 of {steps} steps")
timed = epochs[1]
print(f"{timed['examples'] / timed['seconds']:.1f}" if timed["seconds"] > 0 else "-")
PY
) || die "ember did not run two epochs of $steps steps"
timeout 900 "$python" "$here/peers/torch_dlrm_gpu.py" "${flags[@]}" --steps "$steps" \
    --warmup-passes 1 --device "$device" --data "criteo:$out/train.tsv" >"$out/torch.log" 2>&1 ||
    { tail -20 "$out/torch.log" >&2; die "the PyTorch peer failed"; }
grep -q '^timed pass 2 of 2$' "$out/torch.log" || die "the peer did not time its second pass"
torch_rate=$(sed -n 's/^examples\/s \([0-9.]*\)$/\1/p' "$out/torch.log")
[ -n "$torch_rate" ] || die "the peer printed no examples/s"
ratio=$(awk -v a="$ember_rate" -v b="$torch_rate" 'BEGIN { if (a == "-" || b == 0) print "-"; else printf "%.2f", a / b }')

gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 || true)
echo "# DLRM config $config: ${model}; B $batch, $steps steps, $optimizer lr $lr; ${gpu:-no GPU name}, $(nproc) cores"
echo "# ember: 1 trainer --device $device, 1 PS --ps-device $ps_device, data $ember_data; peer: $(sed -n 's/^steps .* \(torch .*\)$/\1/p' "$out/torch.log") on $device"
echo "# timed alike: the second of two passes over the same $steps batches on each side (the first, updates and all, off the clock), every step's loss read back"
echo "# last step's loss (from different initial weights): ember $(sed -n "s/.*last step's loss \([0-9.]*\).*/\1/p" "$out/ember.log"), peer $(sed -n 's/^loss first .* last //p' "$out/torch.log")"
printf '%-14s %14s %14s %7s\n' "dlrm $config" "ember ex/s" "torch ex/s" ratio
printf '%-14s %14s %14s %7s\n' "$device/$ps_device" "$ember_rate" "$torch_rate" "$ratio"

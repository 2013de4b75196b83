#!/usr/bin/env bash
# The state_dict interchange between TorchRec's DLRM and ember-train --model
# dlrm (safetensors, F32, TorchRec's names; see the DLRM contract), checked
# with TorchRec itself. Not a CTest: it needs the venv of
# scripts/torchrec-venv.sh and takes a few minutes.
#
#   bench/peers/torchrec_interchange.sh
#
# TorchRec's side, always:
#   1. torchrec_dlrm.py writes a DLRM's initial state_dict (--steps 0 --save:
#      the row-wise shards gathered) over tables of uneven sizes, some with
#      fewer rows than ranks;
#   2. it loads that file (strict) and saves it again after 0 steps: every
#      tensor bit for bit the same;
#   3. it trains from it (SGD, then Adagrad) and the one-process replay
#      (torchrec_dlrm_replay.py: the unsharded DLRM, the contract's sync
#      semantics by hand) ends at the same weights and losses.
# ember's side, once ember-train takes --model dlrm:
#   4. ember-train --init the TorchRec file, the same steps, --save: the
#      same weights and losses as TorchRec's within the tolerance;
#   5. torchrec_dlrm.py loads ember's save with strict=True and writes it back
#      unchanged.
# Exit 0: everything checked; 1: a check failed; 77: TorchRec's side passed
# but this ember-train refuses --model dlrm (ember's side not checked).
#
# Environment: BUILD (<repo>/build), EMBER_TORCHREC_VENV (<repo>/.venv-torchrec),
# TRAINERS (2), PS (1), STEPS (6), KEEP (0: 1 keeps the files, printed).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
build=${BUILD:-$repo/build}
python=${EMBER_TORCHREC_VENV:-$repo/.venv-torchrec}/bin/python
trainers=${TRAINERS:-2}
ps=${PS:-1}
steps=${STEPS:-6}
out=$(mktemp -d /tmp/ember-torchrec-interchange.XXXXXX)
if [ "${KEEP:-0}" = 1 ]; then echo "# files in $out"; else trap 'rm -rf "$out"' EXIT; fi
export UCX_NET_DEVICES=lo GLOO_SOCKET_IFNAME=lo

die() { echo "torchrec_interchange: $*" >&2; exit 1; }
[ -x "$python" ] || die "$python missing: run scripts/torchrec-venv.sh first"
[ -x "$build/tools/ember-criteo-gen" ] || die "$build/tools/ember-criteo-gen missing: build ember first (or set BUILD)"

"$build/tools/ember-criteo-gen" --examples 4000 --out "$out/train.tsv" --seed 7
"$build/tools/ember-criteo-gen" --examples 1000 --out "$out/eval.tsv" --seed 8
# Tables of 1 to 997 rows: fewer rows than ranks, rows not a multiple of T.
rows=1,2,3,5,7,11,13,17,19,23,29,31,37,41,43,47,53,59,61,67,71,73,79,83,89,997
model=(--embedding-dim 8 --num-embeddings-per-feature "$rows" --dense-arch-layer-sizes 16,8
       --over-arch-layer-sizes 16,4,1 --batch-size 64 --trainers "$trainers" --lr 0.1
       --data "criteo:$out/train.tsv" --seed 3)

peer() { # log args...
    local log=$1; shift
    "$python" "$here/torchrec_dlrm.py" "$@" >"$out/$log.log" 2>&1 || {
        cat "$out/$log.log" >&2; die "torchrec_dlrm.py failed ($log)"; }
}
compare() { # what a b args...
    local what=$1; shift
    if "$python" "$here/torchrec_dlrm_replay.py" --compare "$@" >"$out/compare.log" 2>&1; then
        echo "ok   $what: $(head -n 1 "$out/compare.log" | sed 's/^check: //')"
    else
        cat "$out/compare.log" >&2; die "$what"
    fi
}

peer init "${model[@]}" --steps 0 --save "$out/init.safetensors"
echo "ok   torchrec wrote its initial state_dict (init.safetensors)"
peer again "${model[@]}" --steps 0 --init "$out/init.safetensors" --save "$out/again.safetensors"
compare "torchrec loads its own file (strict) and saves it unchanged" \
    "$out/init.safetensors" "$out/again.safetensors" --tolerance 0
for opt in sgd adagrad; do
    peer "train-$opt" "${model[@]}" --steps "$steps" --optimizer "$opt" --init "$out/init.safetensors" \
        --eval "criteo:$out/eval.tsv" --save "$out/torchrec-$opt.safetensors"
    "$python" "$here/torchrec_dlrm_replay.py" "${model[@]}" --steps "$steps" --optimizer "$opt" \
        --init "$out/init.safetensors" --save "$out/replay-$opt.safetensors" >"$out/replay-$opt.log" 2>&1 ||
        { cat "$out/replay-$opt.log" >&2; die "the replay failed ($opt)"; }
    compare "$steps $opt steps of $trainers ranks = the one-process replay" \
        "$out/replay-$opt.safetensors" "$out/torchrec-$opt.safetensors" --tolerance 1e-4
done

train=$build/tools/ember-train
if ! "$train" --model dlrm --help >"$out/probe.log" 2>&1; then
    echo "skip ember's side: ember-train refuses --model dlrm: $(head -n 1 "$out/probe.log")"
    exit 77
fi
"$build/tools/ember-run" -n $((trainers + ps + 1)) "$train" --model dlrm --ps "$ps" "${model[@]}" \
    --steps "$steps" --optimizer sgd --init "$out/init.safetensors" --save "$out/ember-sgd.safetensors" \
    >"$out/ember.log" 2>&1 || { cat "$out/ember.log" >&2; die "ember-train --init the TorchRec file failed"; }
compare "ember from TorchRec's initial weights = TorchRec after $steps sgd steps" \
    "$out/torchrec-sgd.safetensors" "$out/ember-sgd.safetensors" --tolerance 1e-4
peer back "${model[@]}" --steps 0 --init "$out/ember-sgd.safetensors" --save "$out/back.safetensors"
compare "torchrec loads ember's save (strict) and saves it unchanged" \
    "$out/ember-sgd.safetensors" "$out/back.safetensors" --tolerance 0 --tensors-only

#!/usr/bin/env bash
# bench/train_ab.sh: ember-train's two reference jobs on two revisions, side
# by side (bench/ab.sh: each revision built alike, the rounds alternating
# which side goes first): the median rate of each, and the median of the
# rounds' B / A.
#
#     bench/train_ab.sh [-n ROUNDS] REV_A REV_B
#
# The jobs (2 trainers, 1 PS, shared memory):
#   tutorial      the PyTorch tutorial's job (ember-train's defaults),
#                 --epochs $TUTORIAL_EPOCHS (5000): its steps/s
#   dlrm-sparse   DLRM sparse-heavy: 26 tables of 1,000,000 x 16, DenseArch
#                 64,16, OverArch 64,1, B 4096, Adagrad 0.05, $DLRM_STEPS (30)
#                 steps over TorchRec's npy layout of a generated Criteo file
#                 (bench/criteo_npy.py, made once with REV_A's tools): its
#                 examples/s over every step (the master's "done:" line)
# Environment: ROUNDS (5, or -n), TUTORIAL_EPOCHS, DLRM_STEPS, PYTHON (one with
# numpy: /usr/bin/python3, Debian's), DATA (a folder
# kept between runs for the generated data; default a temporary one).
# Exit 0 when every run succeeded, 1 when one failed, 2 on bad usage.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
rounds=${ROUNDS:-5}
if [[ ${1:-} == -n ]]; then
    rounds=$2
    shift 2
fi
if [[ $# -ne 2 ]]; then
    sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
fi
export TUTORIAL_EPOCHS=${TUTORIAL_EPOCHS:-5000} DLRM_STEPS=${DLRM_STEPS:-30}
data=${DATA:-}
if [[ -z $data ]]; then
    data=$(mktemp -d /tmp/ember-train-ab.XXXXXX)
    trap 'rm -rf "$data"' EXIT
fi
export TRAIN_AB_DATA=$data
log=$data/ab.log

# One round of one side: both jobs, each reporting one "rate" line.
job='
set -euo pipefail
d=$TRAIN_AB_DATA
export UCX_TLS=sm,self
if [[ ! -f $d/train_labels.npy ]]; then
    $BUILD/tools/ember-criteo-gen --examples $((DLRM_STEPS * 4096 * 2)) --seed 1 \
        --out $d/train.txt >/dev/null
    ${PYTHON:-/usr/bin/python3} bench/criteo_npy.py $d/train.txt $d/train >/dev/null
fi
line=$($BUILD/tools/ember-run -n 4 $BUILD/tools/ember-train --epochs $TUTORIAL_EPOCHS \
       2>>$d/stderr.log | grep "done:")
echo "rate tutorial steps/s $(sed -E "s/.* ([0-9]+) steps\/s.*/\1/" <<<"$line")"
line=$($BUILD/tools/ember-run -n 4 $BUILD/tools/ember-train --model dlrm \
       --embedding-dim 16 --num-embeddings 1000000 --dense-arch-layer-sizes 64,16 \
       --over-arch-layer-sizes 64,1 --batch-size 4096 --optimizer adagrad --lr 0.05 \
       --steps $DLRM_STEPS --data criteo-npy:$d/train 2>>$d/stderr.log | grep "done:")
echo "rate dlrm-sparse examples/s $(sed -E "s/.* ([0-9]+) examples\/s.*/\1/" <<<"$line")"
'
status=0
bash "$here/ab.sh" -n "$rounds" "$1" "$2" -- "$job" | tee "$log" || status=1

# The medians, per job and side, and the median of the rounds' B / A (the
# sides of one round ran back to back, so their ratio is the steadier).
awk -v a="$1" -v b="$2" '
/^== round/ { round = $3 + 0; side = $4 }
/^rate / {
    key = $2 " " $3; n[key, side]++; v[key, side, n[key, side]] = $4; keys[key] = 1
    r[key, side, round] = $4; rounds[round] = 1
}
function median(x, m,    i, j, t) {
    for (i = 1; i <= m; i++) for (j = i + 1; j <= m; j++) if (x[j] < x[i]) { t = x[i]; x[i] = x[j]; x[j] = t }
    return m % 2 ? x[(m + 1) / 2] : (x[m / 2] + x[m / 2 + 1]) / 2
}
function side_median(key, side,    i, x) {
    for (i = 1; i <= n[key, side]; i++) x[i] = v[key, side, i]
    return median(x, n[key, side])
}
function ratio_median(key,    q, m, x) {
    m = 0
    for (q in rounds)
        if ((key, "A", q) in r && (key, "B", q) in r && r[key, "A", q] > 0)
            x[++m] = r[key, "B", q] / r[key, "A", q]
    return m ? median(x, m) : 0
}
END {
    printf "\n| job | rate | A %s | B %s | B / A (per round, median) |\n|---|---|---:|---:|---:|\n", a, b
    for (key in keys) {
        split(key, k, " ")
        printf "| %s | %s (median of %d) | %.0f | %.0f | %.2f |\n", k[1], k[2], n[key, "A"],
               side_median(key, "A"), side_median(key, "B"), ratio_median(key)
    }
}' "$log"
exit $status

#!/usr/bin/env bash
# ember-train --model dlrm against a PyTorch reference of the synchronous
# job (dlrm_sync_ref.py): real processes under ember-run, real UCX, real
# Criteo files from ember-criteo-gen.
# usage: test_dlrm.sh CASE BUILD_DIR FIXTURE_DIR [PYTHON]
#   (PYTHON: one with torch, /usr/bin/python3 by default)
#   setup                the shared inputs into FIXTURE_DIR: a 200-example
#                        file, an initial model written by the reference, and
#                        the reference's 10 steps (2 trainers, batch 16, two
#                        epochs: 6 steps each, 8 examples dropped) with SGD,
#                        SGD --sparse-reduce mean and Adagrad, and SGD on 3
#                        trainers (batch 8: 8 steps an epoch), each checked
#                        to have moved every tensor (so a comparison can fail)
#   ref:RUN:SHARD:PS[:split]
#                        ember-train from the same init as reference run RUN
#                        (sgd, sgd_mean, adagrad; sgd_t3: 3 trainers of 8,
#                        12 steps over 3 epochs), --sharding SHARD and PS
#                        parameter servers: every step's loss of every trainer
#                        and every final parameter within 1e-4 + 1e-4 |ref|;
#                        split: the data given as two files (77 lines, then
#                        123: the files are one stream, trainer t still takes
#                        i % 2 == t over both)
#   dyn:MODE:SHARD:PS    dynamic tables on raw ids (dlrm_dyn_ref.py: int ids
#                        over all 64 bits, 16-digit hex ids, strings),
#                        MODE schema (kind=dynamic on three tables, a fixed
#                        one beside) or all (--table-kind dynamic: every
#                        table, the lists' ids raw too): ember from
#                        dlrm_dyn_ref.py's init (the keys' rows) against
#                        the reference on the ids remapped densely, every
#                        step's loss and every dense parameter within
#                        1e-4 + 1e-4 |ref| (the tables through them)
#   cuda_ref:RUN:SHARD:PS:PSDEV
#                        ref:RUN:SHARD:PS with the dense half on the GPU
#                        (--device cuda) and the tables on PSDEV (cpu, cuda):
#                        the same comparison within 1e-4, each trainer
#                        saying its GPU data path; exit 77 without a GPU
#   cuda_flags           --device cuda for DLRM: without a GPU refused
#                        naming why (no GPU, no backend), with an unloadable
#                        plugin refused as one; with a GPU a short job with
#                        --ps-device cuda runs
#   strict_load          ember's --save (its own init) loads into the
#                        reference module with load_state_dict(strict=True),
#                        under TorchRec's names and shapes
#   default_init         without --init, after --lr 0 --steps 1: each table
#                        within +-sqrt(1/N_f) and uniform; the same seed the
#                        same model on 1 PS, 3 PS and 3 PS by table; another
#                        seed other tables
#   staleness:K          --staleness K: runs, the epoch line names the largest
#                        staleness seen (1..K), the eval log loss falls, AUC
#                        > 0.75;
#                        K 0: the same bits, losses and evaluations as no flag
#   auc                  20000 examples, --eval on 4999 others (shares of 2500
#                        and 2499, last batches short): AUC > 0.75 at
#                        the end, stdout's and --metrics' eval lines alike,
#                        and the AUC and log loss the reference computes from
#                        the saved model within 1e-4; a job of 100 steps
#                        evaluates steps 50 and 100 as the longer one did
#   refused              bad flags and files refused, naming what is wrong,
#                        nothing saved
#   refused_one_layer    an OverArch of one layer refused (TorchRec's is)
#   npy                  the fixture's data in TorchRec's npy layout (raw
#                        integer dense counts, tests/engine/criteo_npy_ref.py)
#                        trains to the same bytes as the TSV (criteo-npy:)
#   ps_memory            26 tables of 100000 x 16 with Adagrad on 1 PS and on
#                        2 PS by rows: each PS's resident memory (its own
#                        PS_STATS, printed by the master) within 1.2x of its
#                        rows plus optimizer state
# shellcheck disable=SC2054,SC2015 # flag values hold commas; A && B || fail is meant
set -uo pipefail
case_name=$1
build=$(cd "$2" && pwd)
fixture=$3
here=$(cd "$(dirname "$0")" && pwd)
python=${4:-/usr/bin/python3}
ref=("$python" "$here/dlrm_sync_ref.py")
check=("$python" "$here/dlrm_check.py")
gen=$build/tools/ember-criteo-gen
run=$build/tools/ember-run
work=$(mktemp -d /tmp/ember-dlrm-test.XXXXXX)
trap 'rm -rf "$work"' EXIT
ln -s "$build/tools/ember-train" "$work/ember-train" # a path of this test's own
train=$work/ember-train
fail() { echo "FAIL: $*"; echo "--- output:"; tail -40 "$work/out" 2>/dev/null; exit 1; }

# The small model of the comparisons: tables of 10 to 500 rows (a 10-row
# table sees every row many times a batch), D = 4.
rows=10,37,100,500,23,250,10,61,120,500,11,300,17,45,90,200,10,400,29,77,150,500,13,33,64,128
model=(--embedding-dim 4 --num-embeddings-per-feature "$rows"
    --dense-arch-layer-sizes 8,4 --over-arch-layer-sizes 8,1)
# run_flags RUN: a reference run's flags (the job's course and optimizer),
# the same for ember and the reference; trainers_of RUN: its trainers.
run_flags() {
    case $1 in
    sgd) echo --batch-size 16 --steps 10 --epochs 2 --optimizer sgd --lr 3 ;;
    sgd_mean) echo --batch-size 16 --steps 10 --epochs 2 --optimizer sgd --lr 3 \
        --sparse-reduce mean ;;
    adagrad) echo --batch-size 16 --steps 10 --epochs 2 --optimizer adagrad --lr 0.05 ;;
    sgd_t3) echo --batch-size 8 --steps 12 --epochs 3 --optimizer sgd --lr 3 ;;
    dcn_sgd_*) echo --batch-size 16 --steps 10 --epochs 2 --optimizer sgd --lr 0.5 ;;
    mh_adagrad_*) echo --batch-size 16 --steps 10 --epochs 2 --optimizer adagrad --lr 0.05 ;;
    # Adagrad's early steps are about lr * sign(g): on a row whose gradient
    # nearly cancels, float rounding (ember's GEMM kernels against torch's)
    # moves it by up to lr, so the cross layers' runs take a smaller lr.
    dcn_adagrad_* | text_dcn_adagrad) echo --batch-size 16 --steps 10 --epochs 2 \
        --optimizer adagrad --lr 0.01 ;;
    text_sgd) echo --batch-size 16 --steps 12 --epochs 2 --optimizer sgd --lr 1 ;;
    *) echo "unknown run $1" >&2; exit 2 ;;
    esac
}
trainers_of() { [[ $1 == *_t3 ]] && echo 3 || echo 2; }
# shape_of RUN: its model's own flags beyond $model, the same for ember and
# the reference (DLRM_DCN's cross layers, MLPerf's synthetic multi-hot,
# drawn from the job's seed); init_of RUN: the initial model it starts from.
hots=3,2,1,2,6,1,1,1,1,7,3,8,1,6,9,5,1,1,1,12,10,4,10,3,1,1
# text_*: make_text_data.py's schema (multi-hot lists, empty bags, a shared
# table, string ids) over its data in the general format.
shape_of() {
    case $1 in
    dcn_*) echo --interaction-type dcn --dcn-num-layers 2 --dcn-low-rank-dim 3 \
        --multi-hot-sizes $hots --multi-hot-distribution-type "${1##*_}" ;;
    mh_*) echo --multi-hot-sizes $hots --multi-hot-distribution-type "${1##*_}" ;;
    text_dcn_*) echo --schema "$fixture/text/features.schema" --interaction-type dcn \
        --dcn-num-layers 2 --dcn-low-rank-dim 3 ;;
    text_*) echo --schema "$fixture/text/features.schema" ;;
    esac
}
# the model's flags: the small Criteo model's, or the schema's (its rows its own)
model_of() {
    if [[ $1 == text_* ]]; then
        echo --embedding-dim 4 --dense-arch-layer-sizes 8,4 --over-arch-layer-sizes 8,1
    else
        echo "${model[@]}"
    fi
}
init_of() {
    case $1 in
    dcn_*) echo "$fixture/init_dcn.safetensors" ;;
    text_dcn_*) echo "$fixture/init_text_dcn.safetensors" ;;
    text_*) echo "$fixture/init_text.safetensors" ;;
    *) echo "$fixture/init.safetensors" ;;
    esac
}
data_of() { [[ $1 == text_* ]] && echo "text:$fixture/text/data.tsv" || echo "criteo:$fixture/data.tsv"; }
# the job's seed, which draws the multi-hot bags: ember's --seed, the reference's --multi-hot-seed
seed=7

# ember_dlrm PS OUT_LOG ARGS...: the job on PS parameter servers and
# $trainers trainers (2 unless set).
ember_dlrm() {
    local ps=$1 log=$2 t=${trainers:-2}
    shift 2
    timeout 120 "$run" -n $((t + 1 + ps)) "$train" --model dlrm --trainers "$t" --ps "$ps" "$@" \
        >"$log" 2>&1
}

case "$case_name" in
setup)
    rm -rf "$fixture" && mkdir -p "$fixture" || exit 1
    "$gen" --examples 200 --out "$fixture/data.tsv" --seed 11 >"$work/out" 2>&1 ||
        fail "ember-criteo-gen exited $?"
    head -n 77 "$fixture/data.tsv" >"$fixture/part1.tsv"
    tail -n +78 "$fixture/data.tsv" >"$fixture/part2.tsv"
    "${ref[@]}" write-init "${model[@]}" --seed 5 --out "$fixture/init.safetensors" \
        >>"$work/out" 2>&1 || fail "the reference cannot write the init"
    "$python" "$here/make_text_data.py" --examples 300 --seed 12 --out "$fixture/text" \
        >>"$work/out" 2>&1 || fail "make_text_data.py exited $?"
    for opt in dcn_sgd_uniform text_sgd text_dcn_adagrad; do
        # shellcheck disable=SC2046 # the flags split on purpose
        "${ref[@]}" write-init $(model_of $opt) $(shape_of $opt) --seed 6 \
            --out "$(init_of $opt)" >>"$work/out" 2>&1 ||
            fail "the reference cannot write $opt's init"
    done
    for opt in sgd sgd_mean adagrad sgd_t3 dcn_sgd_uniform dcn_sgd_pareto dcn_adagrad_uniform \
        dcn_adagrad_pareto mh_adagrad_pareto text_sgd text_dcn_adagrad; do
        # shellcheck disable=SC2046 # the flags split on purpose
        "${ref[@]}" train $(model_of $opt) $(shape_of $opt) --multi-hot-seed $seed \
            --trainers "$(trainers_of $opt)" $(run_flags $opt) \
            --init "$(init_of $opt)" --data "$(data_of $opt)" \
            --out "$fixture/ref_$opt.safetensors" >>"$work/out" 2>&1 ||
            fail "the reference's $opt run exited $?"
        "${check[@]}" moved "$(init_of $opt)" "$fixture/ref_$opt.safetensors" \
            >>"$work/out" 2>&1 || fail "the reference's $opt run does not move every tensor"
    done
    # SGD tells --sparse-reduce sum from mean (Adagrad's step is blind to a
    # gradient's scale): a comparison of the one to the other must fail.
    "${check[@]}" compare "$fixture/ref_sgd.safetensors" "$fixture/ref_sgd_mean.safetensors" \
        >>"$work/out" 2>&1 && fail "sum and mean sparse reductions compare as equal"
    tail -4 "$work/out"
    ;;
ref:*)
    IFS=: read -r _ opt sharding ps split <<<"$case_name"
    [ -f "$fixture/ref_$opt.safetensors" ] || { echo "no fixture: run train.dlrm_ref.setup"; exit 2; }
    data=$(data_of "$opt")
    [ -z "$split" ] || data=criteo:$fixture/part1.tsv,$fixture/part2.tsv
    trainers=$(trainers_of "$opt")
    # shellcheck disable=SC2046
    ember_dlrm "$ps" "$work/out" --sharding "$sharding" $(model_of "$opt") $(shape_of "$opt") \
        --seed $seed $(run_flags "$opt") --data "$data" --init "$(init_of "$opt")" \
        --save "$work/ember.safetensors" --metrics "$work/metrics.json" ||
        fail "ember-train exited $?"
    "${check[@]}" compare "$work/ember.safetensors" "$fixture/ref_$opt.safetensors" \
        >>"$work/out" 2>&1 || fail "ember differs from the reference"
    grep -E "^(dense|tables|losses):|^ok:" "$work/out"
    ;;
dyn:*)
    IFS=: read -r _ mode sharding ps <<<"$case_name"
    small=(--embedding-dim 4 --dense-arch-layer-sizes 8,4 --over-arch-layer-sizes 8,1)
    course=(--batch-size 16 --steps 12 --epochs 2 --optimizer sgd --lr 1)
    all=() kind=()
    [ "$mode" = all ] && all=(--all-dynamic) kind=(--table-kind dynamic)
    "$python" "$here/dlrm_dyn_ref.py" make --examples 300 --seed 12 --init-seed 6 \
        --out "$work/d" "${all[@]}" "${small[@]}" >"$work/ref_out" 2>&1 ||
        { cat "$work/ref_out"; fail "dlrm_dyn_ref.py exited $?"; }
    "${ref[@]}" train "${small[@]}" --schema "$work/d/ref.schema" --trainers 2 "${course[@]}" \
        --init "$work/d/ref_init.safetensors" --data "text:$work/d/ref.tsv" \
        --out "$work/ref.safetensors" >>"$work/ref_out" 2>&1 ||
        { cat "$work/ref_out"; fail "the reference exited $?"; }
    ember_dlrm "$ps" "$work/out" --sharding "$sharding" "${small[@]}" --schema "$work/d/dyn.schema" \
        "${kind[@]}" --seed $seed "${course[@]}" --data "text:$work/d/dyn.tsv" \
        --init "$work/d/ember_init.safetensors" --save "$work/ember.safetensors" ||
        fail "ember-train exited $?"
    "${check[@]}" compare --dense-only "$work/ember.safetensors" "$work/ref.safetensors" \
        >>"$work/out" 2>&1 || fail "ember on dynamic tables differs from the reference"
    grep -E "^dynamic tables:" "$work/ref_out"
    grep -E "^(dense|losses):|^ok:" "$work/out"
    ;;
cuda_ref:*)
    IFS=: read -r _ opt sharding ps psdev <<<"$case_name"
    info=$("$build/tools/ember-info" 2>/dev/null) # whole: grep -q would cut the pipe
    grep -qE '^cuda: [1-9]' <<<"$info" || { echo "no CUDA GPU: skipped"; exit 77; }
    [ -f "$fixture/ref_$opt.safetensors" ] || { echo "no fixture: run train.dlrm_ref.setup"; exit 2; }
    trainers=$(trainers_of "$opt")
    # shellcheck disable=SC2046
    EMBER_LOG_LEVEL=info ember_dlrm "$ps" "$work/out" --device cuda --ps-device "$psdev" \
        --sharding "$sharding" "${model[@]}" $(run_flags "$opt") --data "criteo:$fixture/data.tsv" \
        --init "$fixture/init.safetensors" --save "$work/ember.safetensors" ||
        fail "ember-train exited $?"
    n=$(grep -c "GPU data path: " "$work/out")
    [ "$n" -eq "$trainers" ] || fail "$n lines 'GPU data path' for $trainers trainers"
    "${check[@]}" compare "$work/ember.safetensors" "$fixture/ref_$opt.safetensors" \
        >>"$work/out" 2>&1 || fail "ember on the GPU differs from the reference"
    grep -E "^(dense|tables|losses):|^ok:" "$work/out"
    ;;
cuda_flags)
    "$gen" --examples 100 --out "$work/data.tsv" --seed 16 >"$work/out" 2>&1 ||
        fail "ember-criteo-gen exited $?"
    short=("${model[@]}" --batch-size 16 --steps 2 --epochs 1 --optimizer sgd --lr 0.1
        --data "criteo:$work/data.tsv")
    info=$("$build/tools/ember-info" 2>/dev/null)
    if grep -qE '^cuda: [1-9]' <<<"$info"; then
        ember_dlrm 1 "$work/out" --device cuda --ps-device cuda "${short[@]}" ||
            fail "--device cuda --ps-device cuda exited $?"
        echo "a GPU: --device cuda --ps-device cuda ran"
    else
        ember_dlrm 1 "$work/out" --device cuda "${short[@]}" && fail "--device cuda ran without a GPU"
        grep -qE "ember-train: --device cuda: (no CUDA GPU is visible|this build has no CUDA backend)" \
            "$work/out" || fail "--device cuda refused without saying why"
        echo "no GPU: $(grep -m1 -E "ember-train: --device cuda" "$work/out")"
    fi
    # A plugin that cannot be loaded is said to be one, not a missing GPU.
    EMBER_CUDA_PLUGIN=$work/none.so ember_dlrm 1 "$work/out" --device cuda "${short[@]}" &&
        fail "--device cuda ran with no plugin"
    grep -q "this build has no CUDA backend" "$work/out" ||
        { grep -q "the CUDA backend cannot be loaded" "$work/out" &&
            ! grep -q "no CUDA GPU is visible" "$work/out"; } ||
        fail "an unloadable plugin is not said to be one"
    echo "$case_name: passed"
    ;;
strict_load)
    "$gen" --examples 200 --out "$work/data.tsv" --seed 12 >"$work/out" 2>&1 ||
        fail "ember-criteo-gen exited $?"
    ember_dlrm 1 "$work/out" "${model[@]}" --batch-size 16 --steps 4 --epochs 1 \
        --optimizer sgd --lr 0.5 --seed 9 --data "criteo:$work/data.tsv" \
        --save "$work/ember.safetensors" || fail "ember-train exited $?"
    "${ref[@]}" strict-load "${model[@]}" --model "$work/ember.safetensors" --steps 4 \
        --trainers 2 >>"$work/out" 2>&1 || fail "the reference module refused ember's save"
    tail -1 "$work/out"
    ;;
default_init)
    "$gen" --examples 100 --out "$work/data.tsv" --seed 13 >"$work/out" 2>&1 ||
        fail "ember-criteo-gen exited $?"
    init_run() { # NAME PS SHARDING SEED
        ember_dlrm "$2" "$work/out" --sharding "$3" --seed "$4" "${model[@]}" --batch-size 16 \
            --steps 1 --epochs 1 --optimizer sgd --lr 0 --data "criteo:$work/data.tsv" \
            --save "$work/$1.safetensors" || fail "ember-train ($1) exited $?"
    }
    init_run ps1 1 row 3
    init_run ps3 3 row 3
    init_run ps3_table 3 table 3
    init_run seed4 1 row 4
    {
        "${check[@]}" default-init "$work/ps1.safetensors" &&
            "${check[@]}" same "$work/ps1.safetensors" "$work/ps3.safetensors" \
                "$work/ps3_table.safetensors" &&
            "${check[@]}" differ "$work/ps1.safetensors" "$work/seed4.safetensors"
    } >"$work/check" 2>&1 || { cat "$work/check"; fail "ember's own init"; }
    cat "$work/check"
    ;;
auc)
    "$gen" --examples 20000 --out "$work/train.tsv" --seed 21 >"$work/out" 2>&1 &&
        "$gen" --examples 4999 --out "$work/eval.tsv" --seed 22 >>"$work/out" 2>&1 ||
        fail "ember-criteo-gen exited $?"
    big=(--embedding-dim 8 --num-embeddings 1000 --dense-arch-layer-sizes 16,8
        --over-arch-layer-sizes 16,1)
    # 156 steps of 2 x 64: evaluated at 50, 100, 150 and at the end.
    ember_dlrm 2 "$work/out" "${big[@]}" --batch-size 64 --epochs 1 --optimizer adagrad \
        --lr 0.05 --seed 3 --data "criteo:$work/train.tsv" --eval "criteo:$work/eval.tsv" \
        --eval-every 50 --save "$work/ember.safetensors" --metrics "$work/metrics.json" ||
        fail "ember-train exited $?"
    "${ref[@]}" eval "${big[@]}" --model "$work/ember.safetensors" \
        --data "criteo:$work/eval.tsv" >"$work/ref_eval" 2>&1 ||
        { cat "$work/ref_eval"; fail "the reference cannot evaluate ember's save"; }
    "${check[@]}" losses "$work/ember.safetensors" 156 2 >"$work/check" 2>&1 &&
        "${check[@]}" evals "$work/out" "$work/metrics.json" --steps 50,100,150,156 \
            --examples 4999 --reference "$work/ref_eval" --min-auc 0.75 >>"$work/check" 2>&1 ||
        { cat "$work/check"; fail "ember's evaluations"; }
    # The evaluation of step 100 while training goes on sees the tables of
    # step 100, as one after a job of 100 steps does.
    ember_dlrm 2 "$work/out" "${big[@]}" --batch-size 64 --steps 100 --optimizer adagrad \
        --lr 0.05 --seed 3 --data "criteo:$work/train.tsv" --eval "criteo:$work/eval.tsv" \
        --eval-every 50 --metrics "$work/metrics100.json" || fail "ember-train exited $?"
    "${check[@]}" evals "$work/out" "$work/metrics100.json" --steps 50,100 --examples 4999 \
        --like "$work/metrics.json" >>"$work/check" 2>&1 ||
        { cat "$work/check"; fail "ember's evaluations"; }
    cat "$work/check"
    ;;
staleness:*)
    # --staleness K on 20000 examples, 156 steps, evaluated every 50 (no
    # lookup of the next step is open then) and at the end: the epoch line
    # names the largest staleness seen (1 .. K), the evaluation's log loss
    # falls from step 50 to the end, the final AUC is a learned one; K 0 saves the same bits and
    # prints the same evaluations and losses as a run without the flag.
    k=${case_name#staleness:}
    "$gen" --examples 20000 --out "$work/train.tsv" --seed 21 >"$work/out" 2>&1 &&
        "$gen" --examples 4999 --out "$work/eval.tsv" --seed 22 >>"$work/out" 2>&1 ||
        fail "ember-criteo-gen exited $?"
    job=(--embedding-dim 8 --num-embeddings 1000 --dense-arch-layer-sizes 16,8
        --over-arch-layer-sizes 16,1 --batch-size 64 --epochs 1 --optimizer adagrad --lr 0.05
        --seed 3 --data "criteo:$work/train.tsv" --eval "criteo:$work/eval.tsv" --eval-every 50)
    ember_dlrm 2 "$work/out" "${job[@]}" --staleness "$k" --save "$work/k.safetensors" \
        --metrics "$work/k.json" || fail "ember-train --staleness $k exited $?"
    losses() { grep -oE "mean loss [0-9.]+|eval step [0-9]+: auc [0-9.]+ logloss [0-9.]+" "$1"; }
    if [ "$k" = 0 ]; then
        grep -q "staleness" "$work/out" "$work/k.json" && fail "--staleness 0 prints a staleness"
        cp "$work/out" "$work/k.out"
        ember_dlrm 2 "$work/out" "${job[@]}" --save "$work/plain.safetensors" ||
            fail "ember-train without --staleness exited $?"
        cmp "$work/k.safetensors" "$work/plain.safetensors" ||
            fail "--staleness 0 saved other bits than no flag"
        [ "$(losses "$work/k.out")" = "$(losses "$work/out")" ] ||
            fail "--staleness 0 has other losses or evaluations than no flag"
    else
        grep -q "sync, staleness $k" "$work/out" || fail "the job line does not say staleness $k"
        n=$(grep -c "mean loss.*  staleness [0-9]" "$work/out")
        [ "$n" -eq 1 ] || fail "$n epoch lines name a staleness, not 1"
        seen=$(grep -o '"staleness": [0-9]*' "$work/k.json" | grep -o '[0-9]*$' | sort -n | tail -1)
        [ -n "$seen" ] && [ "$seen" -ge 1 ] && [ "$seen" -le "$k" ] ||
            fail "largest staleness seen '$seen', not in 1 .. $k"
    fi
    first=$(grep -m1 -o "logloss [0-9.]*" "$work/out" | grep -o '[0-9.]*$')
    last=$(grep -o "logloss [0-9.]*" "$work/out" | tail -1 | grep -o '[0-9.]*$')
    auc=$(grep -o "eval step [0-9]*: auc [0-9.]*" "$work/out" | tail -1 | grep -o '[0-9.]*$')
    n=$(grep -c "eval step [0-9]*: auc" "$work/out")
    [ "$n" -eq 4 ] || fail "$n evaluations, not 4 (steps 50, 100, 150, 156)"
    awk -v a="$first" -v b="$last" -v auc="$auc" 'BEGIN { exit !(b < a && auc > 0.75) }' ||
        fail "did not learn: eval log loss $first -> $last, final AUC $auc"
    echo "staleness $k: eval log loss $first -> $last, final AUC $auc"
    ;;
refused | refused_one_layer)
    "$gen" --examples 100 --out "$work/data.tsv" --seed 14 >"$work/out" 2>&1 &&
        "$gen" --examples 100 --out "$work/second.tsv" --seed 15 >>"$work/out" 2>&1 ||
        fail "ember-criteo-gen exited $?"
    # Line 5 of a copy: field I3 not an integer; line 3 of the second file
    # of two: 39 fields.
    awk -F'\t' -v OFS='\t' 'NR == 5 { $4 = "1.5" } 1' "$work/data.tsv" >"$work/bad.tsv"
    awk -F'\t' -v OFS='\t' 'NR == 3 { NF = 39 } 1' "$work/second.tsv" >"$work/bad2.tsv"
    good=(--batch-size 16 --steps 6 --epochs 1 --optimizer sgd --lr 0.1)
    # refuse WANT_REGEX ARGS...: ember-train ends non-zero, promptly, saying
    # WANT_REGEX, and writes no --save file.
    refuse() {
        local want=$1
        shift
        rm -f "$work/never.safetensors"
        ember_dlrm 1 "$work/out" "$@" --save "$work/never.safetensors"
        local rc=$?
        [ $rc -ne 0 ] || fail "accepted: $*"
        [ $rc -ne 124 ] || fail "hung: $*"
        grep -qE -- "$want" "$work/out" || fail "refused without saying '$want': $*"
        [ ! -e "$work/never.safetensors" ] || fail "saved a model though refused: $*"
        echo "refused ($want): $(grep -m1 -E -- "$want" "$work/out")"
    }
    sizes=(--embedding-dim 4 --num-embeddings-per-feature "$rows")
    if [ "$case_name" = refused_one_layer ]; then
        # TorchRec's OverArch refuses fewer than two layers ("OverArch must
        # have multiple layers."): a save of one could not load into its DLRM.
        refuse "--over-arch-layer-sizes" "${sizes[@]}" --dense-arch-layer-sizes 8,4 \
            --over-arch-layer-sizes 1 "${good[@]}" --data "criteo:$work/data.tsv"
        echo "$case_name: passed"
        exit 0
    fi
    refuse "--over-arch-layer-sizes" "${sizes[@]}" --dense-arch-layer-sizes 8,4 \
        --over-arch-layer-sizes 8,2 "${good[@]}" --data "criteo:$work/data.tsv"
    refuse "--dense-arch-layer-sizes" "${sizes[@]}" --dense-arch-layer-sizes 8,5 \
        --over-arch-layer-sizes 8,1 "${good[@]}" --data "criteo:$work/data.tsv"
    refuse "--num-embeddings-per-feature.*26|26.*--num-embeddings-per-feature" \
        --embedding-dim 4 --num-embeddings-per-feature "${rows%,*}" \
        --dense-arch-layer-sizes 8,4 --over-arch-layer-sizes 8,1 "${good[@]}" \
        --data "criteo:$work/data.tsv"
    refuse "--num-embeddings-per-feature.*26|26.*--num-embeddings-per-feature" \
        --embedding-dim 4 --num-embeddings-per-feature "$rows,5" \
        --dense-arch-layer-sizes 8,4 --over-arch-layer-sizes 8,1 "${good[@]}" \
        --data "criteo:$work/data.tsv"
    refuse "$work/bad.tsv:5: .*I3" "${model[@]}" "${good[@]}" --data "criteo:$work/bad.tsv"
    refuse "$work/bad2.tsv:3: " "${model[@]}" "${good[@]}" \
        --data "criteo:$work/data.tsv,$work/bad2.tsv"
    refuse "$work/missing.tsv: No such file" "${model[@]}" "${good[@]}" \
        --data "criteo:$work/missing.tsv"
    refuse "$work/missing.tsv: No such file" "${model[@]}" "${good[@]}" \
        --data "criteo:$work/data.tsv" --eval "criteo:$work/missing.tsv"
    # An --init of other shapes names the tensor.
    "$python" "$here/dlrm_sync_ref.py" write-init --embedding-dim 4 --num-embeddings 10 \
        --dense-arch-layer-sizes 8,4 --over-arch-layer-sizes 8,1 --seed 1 \
        --out "$work/other.safetensors" >"$work/out" 2>&1 || fail "cannot write the other init"
    refuse "$work/other.safetensors: .*t_cat_1\.weight" "${model[@]}" "${good[@]}" \
        --data "criteo:$work/data.tsv" --init "$work/other.safetensors"
    ;;
npy)
    [ -f "$fixture/init.safetensors" ] || { echo "no fixture: run train.dlrm_ref.setup"; exit 2; }
    mkdir -p "$work/npy" &&
        "$python" "$here/../engine/criteo_npy_ref.py" "$work/npy" "$fixture/data.tsv" \
        >"$work/out" 2>&1 || fail "criteo_npy_ref.py exited $?"
    for source in "criteo:$fixture/data.tsv" "criteo-npy:$work/npy/raw_0"; do
        name=${source%%:*}
        ember_dlrm 2 "$work/out" "${model[@]}" $(run_flags sgd) --data "$source" \
            --init "$fixture/init.safetensors" --save "$work/$name.safetensors" ||
            fail "ember-train on $source exited $?"
    done
    cmp "$work/criteo.safetensors" "$work/criteo-npy.safetensors" ||
        fail "the npy layout trains otherwise than the TSV"
    ;;
ps_memory)
    "$gen" --examples 400 --out "$work/data.tsv" --seed 13 >"$work/out" 2>&1 ||
        fail "ember-criteo-gen exited $?"
    for ps in 1 2; do
        # the master prints each PS's PS_STATS at info
        EMBER_LOG_LEVEL=info ember_dlrm "$ps" "$work/out" --embedding-dim 16 --num-embeddings 100000 \
            --dense-arch-layer-sizes 8,16 --over-arch-layer-sizes 8,1 --batch-size 64 \
            --optimizer adagrad --data "criteo:$work/data.tsv" || fail "ember-train exited $?"
        # "ps0: table T MiB, optimizer state O MiB, other X MiB, resident R MiB; ..."
        awk -v want="$ps" '/ps[0-9]+: table [0-9.]+ MiB, optimizer state/ {
                for (i = 1; i <= NF; i++) {
                    if ($i == "table") t = $(i + 1)
                    if ($i == "state") o = $(i + 1)
                    if ($i == "resident") r = $(i + 1)
                }
                seen++
                printf "ps: rows %.1f MiB + optimizer %.1f MiB, resident %.1f MiB (%.3fx)\n",
                       t, o, r, r / (t + o)
                if (r > 1.2 * (t + o)) bad++
            }
            END { exit !(seen == want && !bad) }' "$work/out" ||
            fail "a PS over 1.2x of its rows and optimizer state (or its stats missing)"
    done
    ;;
*)
    echo "unknown case $case_name"; exit 2 ;;
esac
echo "$case_name: passed"

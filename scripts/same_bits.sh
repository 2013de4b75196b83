#!/usr/bin/env bash
# scripts/same_bits.sh: does a change leave ember-train's results alone?
#
#     scripts/same_bits.sh REV_A REV_B
#
# Builds both revisions (git worktrees under a temporary directory, Release,
# no CUDA, no tests) and runs the same jobs with each, saving the model
# (--save), then compares the saved files byte for byte (weights, dense
# layers and every step's losses; --metrics without its timings where a job
# evaluates).  Prints "same" or "DIFF" per comparison, exits 1 unless every
# one is byte-identical, 2 on bad usage or a failed build.  For a refactor:
# the numerics must not move by one bit.
#   golden.*     every golden replay of tests/data/golden (this checkout's)
#                on 1 and 3 PS
#   synthetic.*, tutorial.*  the tutorial's model: each optimizer, pooling
#                mode, an MLP, fp16 rows and replies, 3 trainers, momentum
#   dlrm.ref.*   the train.dlrm_ref.* matrix (tests/train/test_dlrm.sh): sgd,
#                adagrad (x row and table sharding x 1-3 PS x tcp and shm),
#                --sparse-reduce mean, the data as two files, 3 trainers;
#                every run from one --init (A's save of the model at lr 0)
#   dlrm.*       the other DLRM cases of test_dlrm.sh (ember's own init,
#                strict_load's job, the AUC job's evaluations, --staleness 0,
#                criteo-npy) and adam, rowwise_adagrad, momentum, fp16 rows,
#                fp16 replies, --ps-threads, 3 trainers with evaluations
#   ckpt.*       the jobs of test_checkpoint.sh: resume:* (a run writing a
#                checkpoint every 4 steps; step 8's resumed, on the same or
#                another layout), torn:*, signal (SIGTERM mid-run), killed:*
#                (kill -9 of a rank under --max-restarts 1), export:*
#                (--init of a checkpoint), before_api:* (--init of
#                tests/data/checkpoint-main); ckpt.stop.*: jobs stopped
#                part-way (by --epochs or --steps) and resumed to the end.
#                Each revision resumes its own checkpoints (their formats
#                may differ); NAME.whole compares the uninterrupted runs,
#                NAME.resumed the resumed ones, and NAME.resumed=whole B's
#                resumed run against A's uninterrupted one (where the
#                layout is the same, so that A's own resume is exact)
# Not run: --staleness K > 0 and async mode (their bits depend on timing),
# the CUDA cases (no CUDA build), jobs that save nothing (refusals,
# killwrite).  Data: ember-criteo-gen of REV_A, the same files for both.
# shellcheck disable=SC2054,SC2015 # flag values hold commas; A && B || fail is meant
set -uo pipefail

if [[ $# -ne 2 ]]; then
    sed -n '2,39p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
fi
root=$(git -C "$(dirname "$0")" rev-parse --show-toplevel)
golden=$root/tests/data/golden
work=$(mktemp -d /tmp/ember-same-bits.XXXXXX)
cleanup() {
    git -C "$root" worktree remove --force "$work/a" >/dev/null 2>&1 || true
    git -C "$root" worktree remove --force "$work/b" >/dev/null 2>&1 || true
    rm -rf "$work"
}
trap cleanup EXIT

build_rev() { # side rev
    git -C "$root" worktree add --detach "$work/$1" "$2" >/dev/null 2>&1 ||
        { echo "same_bits.sh: cannot check out $2" >&2; exit 2; }
    cmake -S "$work/$1" -B "$work/$1/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
        -DEMBER_ENABLE_CUDA=OFF -DBUILD_TESTING=OFF >"$work/$1.cmake.log" 2>&1 &&
        cmake --build "$work/$1/build" --target ember-train ember-run ember-criteo-gen \
            >"$work/$1.build.log" 2>&1 ||
        { tail -30 "$work/$1.build.log" "$work/$1.cmake.log" >&2; exit 2; }
}
build_rev a "$1"
build_rev b "$2"

trainers_of() { # a golden file's trainer count, from its metadata
    head -c 8 "$1" | od -An -tu8 | { read -r n; head -c $((8 + n)) "$1" | tail -c "$n"; } |
        grep -o '"trainers": *"[0-9]*"' | grep -o '[0-9]*'
}

jobs=0 differ=0
# compare NAME FILE_A FILE_B: one line, "same" or "DIFF" (and where).
compare() {
    jobs=$((jobs + 1))
    if cmp -s "$2" "$3"; then
        echo "same  $1"
        return
    fi
    local why
    if [[ ! -e $2 || ! -e $3 ]]; then
        why="missing: $([[ -e $2 ]] || echo "A ")$([[ -e $3 ]] || echo B)"
    else
        why=$(cmp "$2" "$3" 2>&1 | sed "s|$work/||g")
    fi
    echo "DIFF  $1  ($why)"
    differ=$((differ + 1))
}

# train SIDE LOG RANKS ARGS...: ember-train of SIDE under ember-run, over
# UCX_TLS=$tls (sm,self unless set), its output appended to LOG.
train() {
    local side=$1 log=$2 ranks=$3 rc from
    shift 3
    from=$(($(cat "$log" 2>/dev/null | wc -l) + 1))
    UCX_TLS=${tls:-sm,self} timeout 300 "$work/$side/build/tools/ember-run" -n "$ranks" \
        "$work/$side/build/tools/ember-train" "$@" >>"$log" 2>&1
    rc=$?
    if ((rc != 0)); then # this run's first errors (the cause), then its end
        echo "$(basename "$log" .log): ${side^^} exited $rc:"
        tail -n +"$from" "$log" | grep -m 6 -E "ERROR|FATAL|ember-train:"
        echo "..."
        tail -4 "$log"
    fi
    return $rc
}

# run NAME RANKS ARGS...: the job on both sides, its --save compared (and
# with metrics=1 its --metrics, less the timings).
run() {
    local name=$1 ranks=$2 side m=()
    shift 2
    for side in a b; do
        [[ -n ${metrics:-} ]] && m=(--metrics "$work/$name.$side.json")
        train "$side" "$work/$name.$side.log" "$ranks" "$@" "${m[@]}" \
            --save "$work/$name.$side.safetensors"
    done
    compare "$name" "$work/$name.a.safetensors" "$work/$name.b.safetensors"
    if [[ -n ${metrics:-} ]]; then
        for side in a b; do
            sed -E 's/, "(seconds|steps_per_s|examples_per_s)": [-+.0-9eE]+//g' \
                "$work/$name.$side.json" >"$work/$name.$side.metrics" 2>/dev/null
        done
        [[ -s $work/$name.a.metrics ]] || rm -f "$work/$name.a.metrics"
        compare "$name.metrics" "$work/$name.a.metrics" "$work/$name.b.metrics"
    fi
}

# ---- the tutorial's model -------------------------------------------------
for file in "$golden"/*.safetensors; do
    t=$(trainers_of "$file")
    for ps in 1 3; do
        run "golden.$(basename "$file" .safetensors).ps$ps" $((t + 1 + ps)) --ps $ps --replay "$file"
    done
done
run synthetic.adam.mlp 5 --ps 2 --data synthetic --hidden 32,16 --optimizer adam --epochs 3 \
    --rows 5000 --dim 32
run synthetic.rowwise.max 5 --ps 2 --data synthetic --mode max --optimizer rowwise_adagrad \
    --epochs 3 --rows 5000 --dim 32
run synthetic.adagrad.mean.fp16_rows 5 --ps 2 --data synthetic --mode mean --optimizer adagrad \
    --table-dtype fp16 --epochs 3
run synthetic.sgdm.t3.padding_idx 7 --trainers 3 --ps 3 --data synthetic --optimizer sgd \
    --momentum 0.9 --padding-idx 0 --hidden 16 --epochs 5 --ps-threads 3
run tutorial.weights.fp16_replies 4 --ps 1 --weights --reply-dtype fp16 --epochs 3
run tutorial 4

# ---- DLRM: the train.dlrm_ref.* matrix and the other cases of test_dlrm.sh
gen=$work/a/build/tools/ember-criteo-gen
mkdir -p "$work/data"
gen() { # NAME EXAMPLES SEED
    "$gen" --examples "$2" --out "$work/data/$1.tsv" --seed "$3" >/dev/null ||
        { echo "same_bits.sh: ember-criteo-gen failed" >&2; exit 2; }
}
gen ref 200 11
head -n 77 "$work/data/ref.tsv" >"$work/data/part1.tsv"
tail -n +78 "$work/data/ref.tsv" >"$work/data/part2.tsv"
gen strict 200 12
gen init 100 13
gen auc_train 20000 21
gen auc_eval 4999 22
gen ckpt 700 11
gen ckpt_small 40 11

rows=10,37,100,500,23,250,10,61,120,500,11,300,17,45,90,200,10,400,29,77,150,500,13,33,64,128
model=(--model dlrm --embedding-dim 4 --num-embeddings-per-feature "$rows"
    --dense-arch-layer-sizes 8,4 --over-arch-layer-sizes 8,1)
ref_flags() { # test_dlrm.sh's run_flags
    case $1 in
    sgd) echo --batch-size 16 --steps 10 --epochs 2 --optimizer sgd --lr 3 ;;
    sgd_mean) echo --batch-size 16 --steps 10 --epochs 2 --optimizer sgd --lr 3 \
        --sparse-reduce mean ;;
    adagrad) echo --batch-size 16 --steps 10 --epochs 2 --optimizer adagrad --lr 0.05 ;;
    sgd_t3) echo --batch-size 8 --steps 12 --epochs 3 --optimizer sgd --lr 3 --trainers 3 ;;
    adam) echo --batch-size 16 --steps 10 --epochs 2 --optimizer adam --lr 0.01 ;;
    rowwise) echo --batch-size 16 --steps 10 --epochs 2 --optimizer rowwise_adagrad --lr 0.05 ;;
    rowwise_t3) echo --batch-size 8 --steps 12 --epochs 3 --optimizer rowwise_adagrad \
        --lr 0.05 --trainers 3 ;;
    sgdm) echo --batch-size 16 --steps 10 --epochs 2 --optimizer sgd --lr 0.5 --momentum 0.9 ;;
    esac
}
# One initial model for every run of the matrix, as the tests' fixture has
# (theirs the reference's, this one ember's own at --lr 0, written by A).
train a "$work/data/init.log" 4 "${model[@]}" --seed 5 --batch-size 16 --steps 1 --epochs 1 \
    --optimizer sgd --lr 0 --data "criteo:$work/data/ref.tsv" \
    --save "$work/data/init.safetensors" || exit 2
# dlrm_ref NAME RUN SHARDING PS [split] [FLAGS...]
dlrm_ref() {
    local name=$1 opt=$2 sharding=$3 ps=$4 data=criteo:$work/data/ref.tsv t=2
    shift 4
    if [[ ${1:-} == split ]]; then
        data=criteo:$work/data/part1.tsv,$work/data/part2.tsv
        shift
    fi
    [[ $opt == *_t3 ]] && t=3
    # shellcheck disable=SC2046 # the flags split on purpose
    run "dlrm.ref.$name" $((t + 1 + ps)) "${model[@]}" --ps "$ps" --sharding "$sharding" \
        $(ref_flags "$opt") --data "$data" --init "$work/data/init.safetensors" "$@"
}
for opt in sgd adagrad; do
    for sharding in row table; do
        for ps in 1 2 3; do
            tls=tcp,self dlrm_ref "$opt.$sharding.ps$ps.tcp" $opt $sharding $ps
            tls=sm,self dlrm_ref "$opt.$sharding.ps$ps.shm" $opt $sharding $ps
        done
    done
done
tls=tcp,self dlrm_ref sgd_mean.row.ps2.tcp sgd_mean row 2
tls=sm,self dlrm_ref sgd_mean.table.ps3.shm sgd_mean table 3
tls=tcp,self dlrm_ref sgd.row.ps2.tcp.split sgd row 2 split
tls=sm,self dlrm_ref sgd_t3.row.ps2.shm sgd_t3 row 2
tls=tcp,self dlrm_ref sgd_t3.table.ps3.tcp sgd_t3 table 3
# Beyond the reference's runs: the other optimizers, fp16, --ps-threads.
dlrm_ref adam.row.ps2 adam row 2
dlrm_ref adam.table.ps3.mean adam table 3 --sparse-reduce mean
dlrm_ref rowwise.row.ps3 rowwise row 3
dlrm_ref rowwise_t3.table.ps2 rowwise_t3 table 2
dlrm_ref sgdm.row.ps2 sgdm row 2
dlrm_ref adagrad.row.ps2.fp16_rows adagrad row 2 --table-dtype fp16
dlrm_ref sgd.table.ps2.fp16_replies sgd table 2 --reply-dtype fp16
dlrm_ref rowwise.row.ps3.fp16_both rowwise row 3 --table-dtype fp16 --reply-dtype fp16
dlrm_ref adam.row.ps1.fp16_rows adam row 1 --table-dtype fp16
dlrm_ref adagrad.row.ps2.ps_threads4 adagrad row 2 --ps-threads 4
dlrm_ref sgd_mean.table.ps3.ps_threads2 sgd_mean table 3 --ps-threads 2
dlrm_ref sgd_t3.row.ps1.split sgd_t3 row 1 split

# default_init: ember's own init, on 1 and 3 PS, by rows and tables, 2 seeds.
for c in ps1:1:row:3 ps3:3:row:3 ps3_table:3:table:3 seed4:1:row:4; do
    IFS=: read -r name ps sharding seed <<<"$c"
    run "dlrm.default_init.$name" $((3 + ps)) "${model[@]}" --ps "$ps" --sharding "$sharding" \
        --seed "$seed" --batch-size 16 --steps 1 --epochs 1 --optimizer sgd --lr 0 \
        --data "criteo:$work/data/init.tsv"
done
run dlrm.strict_load 4 "${model[@]}" --ps 1 --batch-size 16 --steps 4 --epochs 1 \
    --optimizer sgd --lr 0.5 --seed 9 --data "criteo:$work/data/strict.tsv"
# auc: 156 steps of 2 x 64, evaluated at 50, 100, 150 and the end; then 100
# steps; --staleness 0 (the same bits as no flag).
big=(--model dlrm --embedding-dim 8 --num-embeddings 1000 --dense-arch-layer-sizes 16,8
    --over-arch-layer-sizes 16,1 --seed 3
    --data "criteo:$work/data/auc_train.tsv" --eval "criteo:$work/data/auc_eval.tsv"
    --eval-every 50)
adagrad=(--optimizer adagrad --lr 0.05)
metrics=1 run dlrm.auc 5 "${big[@]}" "${adagrad[@]}" --ps 2 --batch-size 64 --epochs 1
metrics=1 run dlrm.auc.steps100 5 "${big[@]}" "${adagrad[@]}" --ps 2 --batch-size 64 --steps 100
metrics=1 run dlrm.staleness0 5 "${big[@]}" "${adagrad[@]}" --ps 2 --batch-size 64 --epochs 1 \
    --staleness 0
metrics=1 run dlrm.auc.t3.adam.table.ps3.fp16 7 "${big[@]}" --optimizer adam --lr 0.01 \
    --trainers 3 --ps 3 --sharding table --batch-size 32 --epochs 1 --table-dtype fp16 \
    --reply-dtype fp16
# npy: ref.tsv in TorchRec's npy layout, the dense counts raw (int32), as
# tests/engine/criteo_npy_ref.py's raw_0 (written here without numpy).
python3 - "$work/data/ref.tsv" "$work/data/npy" <<'EOF' || { echo "same_bits.sh: npy" >&2; exit 2; }
import csv, struct, sys
dense, sparse, labels = [], [], []
with open(sys.argv[1], newline="") as f:
    for row in csv.reader(f, delimiter="\t"):
        labels.append(int(row[0] or "0"))
        dense += [int(row[i] or "0") for i in range(1, 14)]
        sparse += [int(row[i] or "0", 16) for i in range(14, 40)]
def npy(part, descr, fmt, values, width):
    header = "{'descr': '%s', 'fortran_order': False, 'shape': (%d, %d), }" % (
        descr, len(values) // width, width)
    header += " " * ((-(10 + len(header) + 1)) % 64) + "\n"
    with open(f"{sys.argv[2]}_{part}.npy", "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode())
        f.write(struct.pack("<%d%s" % (len(values), fmt), *values))
npy("dense", "<i4", "i", dense, 13)
npy("sparse", "<i8", "q", sparse, 26)
npy("labels", "<i4", "i", labels, 1)
EOF
# shellcheck disable=SC2046
run dlrm.npy 4 "${model[@]}" --ps 1 $(ref_flags sgd) --data "criteo-npy:$work/data/npy" \
    --init "$work/data/init.safetensors"

# ---- checkpoints and resumes (test_checkpoint.sh) ---------------------------
opt_flags() {
    case $1 in
    sgd) echo --optimizer sgd --lr 0.1 ;;
    sgdm) echo --optimizer sgd --lr 0.05 --momentum 0.9 ;;
    adagrad) echo --optimizer adagrad --lr 0.1 ;;
    adam) echo --optimizer adam --lr 0.01 ;;
    rowwise) echo --optimizer rowwise_adagrad --lr 0.1 ;;
    esac
}
ckpt_model=("${model[@]}" --batch-size 16)
ckpt_data=criteo:$work/data/ckpt.tsv
job_flags() { # KIND OPT: 20 steps
    case $1 in
    tutorial) echo --hidden 8 --epochs 4 --batches 5 --seed 5 "$(opt_flags "$2")" ;;
    replay) echo --replay "$golden/seed_sum_2t.safetensors" ;;
    dlrm) echo "${ckpt_model[@]}" --steps 20 --epochs 3 --seed 7 --data "$ckpt_data" \
        "$(opt_flags "$2")" ;;
    esac
}
layout_flags() { # PS SHARDING KIND
    if [[ $3 == dlrm ]]; then echo --ps "$1" --sharding "$2"; else echo --ps "$1"; fi
}
# resumed NAME SIDE LOG WHAT: did LOG's run say it resumed from WHAT?  If
# not, its --save is no resumed run's: removed, so that it compares DIFF.
resumed() {
    grep -qE "resuming from $4" "$3" && return 0
    echo "$1: ${2^^} did not resume from $4"
    rm -f "$work/$1.resumed.$2.safetensors"
    return 1
}
# compare_resumes NAME [exact]: both sides' uninterrupted and resumed runs;
# exact: B's resumed run against A's uninterrupted one too.
compare_resumes() {
    compare "$1.whole" "$work/$1.whole.a.safetensors" "$work/$1.whole.b.safetensors"
    compare "$1.resumed" "$work/$1.resumed.a.safetensors" "$work/$1.resumed.b.safetensors"
    if [[ ${2:-} == exact ]]; then
        compare "$1.resumed=whole" "$work/$1.whole.a.safetensors" "$work/$1.resumed.b.safetensors"
    fi
}

# resume:MODEL:OPT:P1:S1:P2:S2: checkpoints every 4 steps, step 8's resumed.
ckpt_resume() {
    local kind=$1 opt=$2 p1=$3 s1=$4 p2=$5 s2=$6 name=ckpt.$7 side d
    for side in a b; do
        d=$work/$name.$side
        # shellcheck disable=SC2046
        train "$side" "$d.log" $((3 + p1)) $(job_flags "$kind" "$opt") \
            $(layout_flags "$p1" "$s1" "$kind") --checkpoint-dir "$d/ckpt" \
            --checkpoint-every 4 --checkpoint-keep 30 --save "$work/$name.whole.$side.safetensors"
        mkdir -p "$d/from8" && cp -r "$d/ckpt/step-000000000008" "$d/from8/" 2>/dev/null
        # shellcheck disable=SC2046
        train "$side" "$d.log" $((3 + p2)) $(job_flags "$kind" "$opt") \
            $(layout_flags "$p2" "$s2" "$kind") --resume "$d/from8/step-000000000008" \
            --checkpoint-dir "$d/from8" --save "$work/$name.resumed.$side.safetensors"
        resumed "$name" "$side" "$d.log" "$d/from8/step-000000000008 \(step 8\)"
    done
    if [[ $p1:$s1 == "$p2:$s2" ]]; then
        compare_resumes "$name" exact
    else
        compare_resumes "$name"
    fi
}
for opt in sgdm adagrad adam; do
    ckpt_resume tutorial $opt 1 row 1 row "tutorial.$opt.same"
    ckpt_resume dlrm $opt 2 row 2 row "dlrm.$opt.same"
done
tls=tcp,self ckpt_resume tutorial adam 1 row 3 row tutorial.adam.ps1_to_3
ckpt_resume tutorial sgdm 3 row 2 row tutorial.sgdm.ps3_to_2
ckpt_resume replay sgd 2 row 2 row replay.same
ckpt_resume replay sgd 1 row 3 row replay.ps1_to_3
ckpt_resume dlrm adagrad 1 row 3 row dlrm.adagrad.ps1_to_3
tls=tcp,self ckpt_resume dlrm adam 3 row 2 row dlrm.adam.ps3_to_2
ckpt_resume dlrm sgdm 2 row 2 table dlrm.sgdm.row_to_table

# ckpt.stop.NAME: the job ended early (STOP) with checkpoints, resumed to
# its end (END) on the same layout.
# stop_resume NAME RANKS STOP END -- ARGS...
stop_resume() {
    local name=ckpt.stop.$1 ranks=$2 stop=$3 end=$4 side d
    shift 5
    for side in a b; do
        d=$work/$name.$side
        # shellcheck disable=SC2086 # STOP and END split on purpose
        train "$side" "$d.log" "$ranks" "$@" $end --save "$work/$name.whole.$side.safetensors"
        # shellcheck disable=SC2086
        train "$side" "$d.log" "$ranks" "$@" $stop --checkpoint-dir "$d/ckpt"
        # shellcheck disable=SC2086
        train "$side" "$d.log" "$ranks" "$@" $end --resume "$d/ckpt" --checkpoint-dir "$d/ckpt" \
            --save "$work/$name.resumed.$side.safetensors"
        resumed "$name" "$side" "$d.log" "$d/ckpt/step-"
    done
    compare_resumes "$name" exact
}
stop_resume tutorial.adam.epochs 5 "--epochs 2" "--epochs 4" -- --ps 2 --hidden 8 --batches 5 \
    --seed 5 --optimizer adam --lr 0.01
stop_resume tutorial.rowwise.fp16.epochs 4 "--epochs 3" "--epochs 7" -- --ps 1 --batches 3 \
    --seed 2 --optimizer rowwise_adagrad --lr 0.1 --table-dtype fp16 --mode mean
# more_steps: 21 steps an epoch; 12, then 20 of them.
stop_resume dlrm.adagrad.more_steps 4 "--steps 12" "--steps 20" -- "${ckpt_model[@]}" --ps 1 \
    --seed 7 --data "$ckpt_data" --optimizer adagrad --lr 0.1
stop_resume dlrm.sgdm.table.epochs 5 "--epochs 1" "--epochs 2" -- "${ckpt_model[@]}" --ps 2 \
    --sharding table --seed 7 --data "$ckpt_data" --optimizer sgd --lr 0.05 --momentum 0.9
stop_resume dlrm.adam.fp16.t3.steps 7 "--steps 9" "--steps 30" -- "${ckpt_model[@]}" --ps 3 \
    --trainers 3 --epochs 3 --seed 7 --data "$ckpt_data" --optimizer adam --lr 0.01 --table-dtype fp16 \
    --reply-dtype fp16

# torn:KIND: the newest of two checkpoints spoiled; the one before resumed.
for kind in truncated checksum nomanifest; do
    name=ckpt.torn.$kind
    flags=(--ps 2 --hidden 8 --batches 5 --seed 5 --optimizer adagrad --lr 0.1)
    for side in a b; do
        d=$work/$name.$side
        train "$side" "$d.log" 5 "${flags[@]}" --epochs 6 --save "$work/$name.whole.$side.safetensors"
        train "$side" "$d.log" 5 "${flags[@]}" --epochs 4 --checkpoint-dir "$d/ckpt" \
            --checkpoint-every 10
        newest=$d/ckpt/step-000000000020
        case $kind in
        truncated) truncate -s -100 "$newest/ps1.safetensors" ;;
        checksum) printf '\x55' | dd of="$newest/ps0.safetensors" bs=1 seek=900 conv=notrunc 2>/dev/null ;;
        nomanifest) rm -f "$newest/manifest" ;;
        esac
        train "$side" "$d.log" 5 "${flags[@]}" --epochs 6 --resume "$d/ckpt" \
            --checkpoint-dir "$d/ckpt" --save "$work/$name.resumed.$side.safetensors"
        resumed "$name" "$side" "$d.log" "$d/ckpt/step-000000000010 \(step 10\)"
    done
    compare_resumes "$name" exact
done

# signal: SIGTERM to every rank mid-run, once each (as srun delivers it;
# ember-run's own forwarding sends a rank 2 or 3 of them, and a second one
# means "now"): a checkpoint, "stopped after step K"; resumed to the end.  killed:RANK:
# kill -9 of rank RANK mid-run under --max-restarts 1: the job restarts from
# its latest checkpoint.  K is whatever step the signal met, on each side.
# background SIDE LOG RANKS ARGS...: ember-run started in the background
# (its pid in $bg).
background() {
    local side=$1 log=$2 ranks=$3
    shift 3
    UCX_TLS=sm,self "$work/$side/build/tools/ember-run" --timeout 300 -n "$ranks" "$@" \
        >>"$log" 2>&1 &
    bg=$!
}
wait_for() { # PATTERN LOG: 20 s at most
    local _
    for _ in $(seq 400); do grep -qE "$1" "$2" && return 0; sleep 0.05; done
    return 1
}
long=(--hidden 8 --epochs 3000 --batches 10 --seed 3 --optimizer adam --lr 0.001)
name=ckpt.signal
for side in a b; do
    d=$work/$name.$side
    train "$side" "$d.log" 4 "${long[@]}" --save "$work/$name.whole.$side.safetensors"
    background "$side" "$d.stop.log" 4 "$work/$side/build/tools/ember-train" "${long[@]}" \
        --checkpoint-dir "$d/ckpt" --checkpoint-keep 5
    wait_for "epoch  100 " "$d.stop.log"
    for p in $(pgrep -P "$bg"); do kill -TERM "$p"; done
    wait "$bg"
    cat "$d.stop.log" >>"$d.log"
    stopped=$(grep -o "stopped after step [0-9]*" "$d.stop.log" | grep -o "[0-9]*$")
    [[ -n $stopped ]] || echo "$name: ${side^^} did not stop at a checkpoint on SIGTERM"
    train "$side" "$d.log" 4 "${long[@]}" --resume "$d/ckpt" --checkpoint-dir "$d/ckpt" \
        --save "$work/$name.resumed.$side.safetensors"
    resumed "$name" "$side" "$d.log" ".*\(step ${stopped:-none}\)"
done
compare_resumes "$name" exact
long=(--hidden 8 --epochs 3000 --batches 10 --seed 3 --optimizer sgd --lr 0.05 --momentum 0.9)
for rank in 1 3; do
    name=ckpt.killed.$([[ $rank == 1 ]] && echo trainer1 || echo ps)
    for side in a b; do
        d=$work/$name.$side
        train "$side" "$d.log" 4 "${long[@]}" --save "$work/$name.whole.$side.safetensors"
        background "$side" "$d.kill.log" 4 --max-restarts 1 "$work/$side/build/tools/ember-train" \
            "${long[@]}" --checkpoint-dir "$d/ckpt" --checkpoint-every 5000 \
            --save "$work/$name.resumed.$side.safetensors"
        wait_for "^\[2\] checkpoint after step" "$d.kill.log"
        for p in $(pgrep -P "$bg"); do
            tr '\0' '\n' 2>/dev/null <"/proc/$p/environ" | grep -qx "EMBER_RANK=$rank" &&
                kill -KILL "$p"
        done
        wait "$bg" || echo "$name: ${side^^} did not survive the loss of rank $rank"
        cat "$d.kill.log" >>"$d.log"
        grep -q "rank $rank was killed by SIGKILL; restart 1 of 1" "$d.log" ||
            echo "$name: ${side^^}: rank $rank was not killed mid-run"
        resumed "$name" "$side" "$d.log" "$d/ckpt/step-"
    done
    compare_resumes "$name" exact
done

# export:MODEL: a job's checkpoint taken by --init at lr 0 (each side its
# own); before_api:MODEL: tests/data/checkpoint-main (written by 8338093)
# taken by --init on both.
name=ckpt.export.tutorial
export_job=(--ps 2 --hidden 8,4 --epochs 2 --batches 5 --optimizer adam --lr 0.01)
still=(--hidden 8,4 --epochs 1 --batches 1 --optimizer sgd --lr 0)
for side in a b; do
    d=$work/$name.$side
    train "$side" "$d.log" 5 "${export_job[@]}" --checkpoint-dir "$d/ckpt" \
        --save "$work/$name.$side.safetensors"
    train "$side" "$d.log" 4 "${still[@]}" --init "$d/ckpt" \
        --save "$work/$name.init_ckpt.$side.safetensors"
    train "$side" "$d.log" 4 "${still[@]}" --init "$work/$name.$side.safetensors" \
        --save "$work/$name.init_save.$side.safetensors"
done
compare "$name" "$work/$name.a.safetensors" "$work/$name.b.safetensors"
compare "$name.init_ckpt" "$work/$name.init_ckpt.a.safetensors" "$work/$name.init_ckpt.b.safetensors"
compare "$name.init_save" "$work/$name.init_save.a.safetensors" "$work/$name.init_save.b.safetensors"
name=ckpt.export.dlrm
for side in a b; do
    d=$work/$name.$side
    # shellcheck disable=SC2046
    train "$side" "$d.log" 5 --ps 2 $(job_flags dlrm adam) --checkpoint-dir "$d/ckpt" \
        --save "$work/$name.$side.safetensors"
    train "$side" "$d.log" 4 "${ckpt_model[@]}" --steps 1 --epochs 1 --data "$ckpt_data" \
        --optimizer sgd --lr 0 --init "$d/ckpt" --save "$work/$name.init_ckpt.$side.safetensors"
done
compare "$name" "$work/$name.a.safetensors" "$work/$name.b.safetensors"
compare "$name.init_ckpt" "$work/$name.init_ckpt.a.safetensors" "$work/$name.init_ckpt.b.safetensors"
run ckpt.before_api.tutorial 4 --rows 20 --dim 4 --classes 3 --hidden 4 --seed 5 --epochs 1 \
    --batches 1 --optimizer sgd --lr 0 --init "$root/tests/data/checkpoint-main/tutorial"
run ckpt.before_api.dlrm 4 --model dlrm --embedding-dim 2 --num-embeddings 5 \
    --dense-arch-layer-sizes 2 --over-arch-layer-sizes 2,1 --batch-size 4 --seed 7 \
    --data "criteo:$work/data/ckpt_small.tsv" --steps 1 --optimizer sgd --lr 0 \
    --init "$root/tests/data/checkpoint-main/dlrm"

echo "same_bits: $((jobs - differ)) of $jobs comparisons byte-identical ($1 vs $2)"
((differ == 0))

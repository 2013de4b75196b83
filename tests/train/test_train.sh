#!/usr/bin/env bash
# End-to-end tests of ember-train: real processes under ember-run, real UCX.
# usage: test_train.sh CASE BUILD_DIR GOLDEN_DIR
#   golden:FILE:PS      replay FILE with PS parameter servers; compare to PyTorch
#   fp16:WHAT:FILE:PS   the same with the table's rows stored as fp16 (WHAT
#                       rows), the lookups answered in fp16 (replies) or both:
#                       compare to the fp16 oracle (one PS; with more, each
#                       shard's reply is rounded apart: to PyTorch within 1e-2),
#                       and the oracle to PyTorch's own fp16 run of FILE
#                       (fp16_ref.py, made by the fp16_ref fixture in
#                       BUILD_DIR/tests/train/fp16_ref) within 5e-5
#   threads:FILE:PS:LIST[:fp16]  replay FILE with each --ps-threads of LIST
#                       (fp16: fp16 rows), requests split as far as they go:
#                       each matches PyTorch, the saved files byte-identical
#   same_bits:FILE:P,Q  replay FILE with P and with Q parameter servers: the
#                       saved files are byte-identical (max pooling combines
#                       the shards' parts exactly)
#   cli                 flags: unknown, missing or repeated ones, values out
#                       of range, combinations that mean nothing: each refused
#                       by name before anything runs; --help and --version
#   env                 EMBER_* values outside what their entry accepts are
#                       refused by every program, naming variable, value and
#                       the accepted ones; good ones (any case) are taken
#   outputs             --save/--metrics/EMBER_METRICS paths that cannot be
#                       written end the job before any training
#   replay_refuses      each flag --replay cannot honour is refused by name
#   replay_check        --replay says how far the run is from the file's
#                       expected values, fails beyond --replay-tolerance, and
#                       says when the file holds nothing to check
#   rank_lost:R:SIG     four ranks by hand (no launcher), rank R killed (KILL)
#                       or stopped (STOP) mid-run: every survivor ends promptly
#                       with an error naming R and its role
#   weights_drawn       --weights with generated data trains on drawn weights:
#                       the same seed without them ends elsewhere
#   save_names:HIDDEN   --save (with --hidden HIDDEN, or none: -) loads into
#                       the equivalent PyTorch module with strict=True, each
#                       parameter the file's bytes, and the module computes
#                       the next step's losses of the job run one step longer
#   dtype_flag          --table-dtype: an unknown type is refused by name
#   async4              4 trainers, async consistency on the learnable data:
#                       the job and its PS say async, the PS applies each
#                       trainer's gradient on its own (800 steps applied for
#                       800 gradients; sync: 200), the loss falls, and the
#                       weights end within 2e-2 of the same job in sync
#   bad:KIND            a broken batch: error names table/trainer/step, exit != 0
#   bad_file:KIND:SRC   SRC with one metadata value or tensor shape broken
#                       (make_bad_replay KIND): refused by every rank before
#                       training, exit 2, naming what make_bad_replay broke
#   nonfinite           a diverging run: error names trainer and step
#   optimizer:NAME      PyTorch's run of one job with optimizer NAME
#                       (make_golden.py's opt_NAME, made by the
#                       train.optimizer.setup fixture in
#                       BUILD_DIR/tests/train/golden_opt) replayed over 2 PS
#                       with --optimizer NAME: the job says NAME, matches
#                       that run within 1e-4 and none of the others
#   synthetic           the learnable data: the loss falls
#   progress:steps      --log-every 5 over 3 epochs of 10 steps: a progress
#                       line after steps 5, 10, ... 30, each naming its epoch
#                       and fraction, bags/s > 0, the time left, at an
#                       epoch's end the epoch line's mean loss; --metrics
#                       the same figures (progress_check.py)
#   progress:off        --log-every 0: no progress line, nor in --metrics
#   progress:seconds    --log-every-seconds 0.05 over a run of seconds: lines
#                       at growing steps, each whole and as --metrics has it
#   progress:unknown    DLRM, its epoch's size not known: the lines without
#                       a fraction or time left (right ones once it is)
#   progress:tty        the master on a terminal (script's pseudo-terminal,
#                       ranks by hand): the line redrawn in place ("\r" and
#                       clear to its end), every epoch line whole
#   dynamic:FILE:PS     FILE replayed with --table-kind dynamic (ids as raw
#                       keys, each its own row in the PS's hash map):
#                       matches PyTorch (golden_compare), and with one PS
#                       saves the fixed table's bytes (with more, a key's PS
#                       is its hash's, so a bag's partial sums split apart
#                       differently and only rounding may differ)
#   dynamic_opt:NAME[:fp16]  the learnable job, --optimizer NAME (fp16
#                       rows), 1 PS: the dynamic table saves exactly the fixed
#                       one's bytes
#   dynamic_budget:EVICT  2 PS, --table-budget 40 --admit-count 2 --evict
#                       EVICT --evict-after 20: each PS's summary holds at
#                       most 40 rows, admits, evicts and drops gradients,
#                       --metrics has the same counters, the loss is finite
#   dynamic_resume      2 PS, a budget, admission, LFU and expiry: a run with
#                       checkpoints every 10 steps, resumed from step 40 on 2
#                       PS, saves the uninterrupted run's bytes; on 3 PS it
#                       resumes (keys re-placed by their hash); on 1 PS the
#                       budget cannot hold the rows and the refusal says so;
#                       ember-checkpoint.py exports the last checkpoint's keys
#                       (increasing, I64) and rows, each the saved row
#   dynamic_resume_other  max pooling (its shards' parts combine exactly, so
#                       the number of PS changes no bit), admission 2, no
#                       budget: a 2-PS run's checkpoint at step 40 resumed on
#                       1 and on 3 PS saves the uninterrupted 2-PS run's bytes
#   dynamic_mode:MODE   async, or sync with --staleness 2, on 2 PS: the
#                       dynamic table's job runs and ends within 2e-2 of the
#                       fixed table's (the arrival order varies the rounding)
#   dynamic_flags       the dynamic flags refused without --table-kind
#                       dynamic, or out of range
#   cache_bits:FILE:LIST  --cache-rows 16 against no cache on each PS count
#                       of LIST (FILE a golden replay, or synthetic_fixed /
#                       synthetic_dynamic / synthetic_fp16: the learnable job,
#                       fp16 rows for the last):
#                       the same saved bits and losses; the summary and
#                       --metrics say the hit rate
#   cache_stale:K       --staleness K --cache-rows 40: hits, none more than K
#                       behind, the loss falls as without the cache
#   cache_flags         bad --cache-rows values, fp16 replies, a PS on a GPU refused
#   staleness:K         --staleness K on it: runs, epoch lines name the largest
#                       staleness seen (1..K), the loss falls; K 0: the same
#                       bits, losses and lines as no flag
set -uo pipefail
source "$(dirname "$0")/../common/by_hand.sh"
here=$(cd "$(dirname "$0")" && pwd)
case_name=$1 golden=$3
build=$(cd "$2" && pwd) # absolute: a link to its ember-train is made below
run=$build/tools/ember-run
work=$(mktemp -d /tmp/ember-train-test.XXXXXX)
trap 'rm -rf "$work"' EXIT
# A path of this test's own, so leftover checks see only this job's ranks.
ln -s "$build/tools/ember-train" "$work/ember-train"
train=$work/ember-train
fail() { echo "FAIL: $*"; echo "--- output:"; cat "$work/out" 2>/dev/null | tail -40; exit 1; }
trainers_of() { # read the trainer count from a golden file's metadata
    head -c 8 "$1" | od -An -tu8 | { read -r n; head -c $((8 + n)) "$1" | tail -c "$n"; } |
        grep -o '"trainers": *"[0-9]*"' | grep -o '[0-9]*'
}
no_leftovers() {
    if pgrep -f "$train" >/dev/null; then
        sleep 1
        pgrep -af "$train" | grep -v pgrep && fail "processes left behind"
    fi
    return 0
}

case "$case_name" in
cuda:*)
    # GPU trainers (--device cuda) reproduce the golden run; skip without a GPU.
    file=${case_name#cuda:}
    # Read the whole output first: grep -q would stop reading, and the
    # SIGPIPE ember-info then gets fails the pipe under pipefail.
    info=$("$build/tools/ember-info" 2>/dev/null)
    grep -qE '^cuda: [1-9]' <<<"$info" || { echo "no CUDA GPU: skipped"; exit 77; }
    t=$(trainers_of "$golden/$file.safetensors")
    EMBER_LOG_LEVEL=info timeout 120 "$run" -n $((t + 2)) "$train" --device cuda \
        --replay "$golden/$file.safetensors" --save "$work/out.safetensors" >"$work/out" 2>&1 ||
        fail "ember-train exited $?"
    "$build/tests/train/golden_compare" "$golden/$file.safetensors" "$work/out.safetensors" ||
        fail "differs from PyTorch"
    # Each trainer says once how its data meets the network and which dense
    # allreduce it takes (one GPU here: shared, so the staged host ring).
    # TEST_GPU_PATH=staged|rdma: the path the trainers must have taken
    # (which one depends on whether UCX supports CUDA memory).
    case ${TEST_GPU_PATH:-any} in
    staged) want="GPU data path: lookup replies and gradient pushes staged through pinned" ;;
    rdma) want="GPU data path: lookup replies land in and gradient pushes leave from GPU memory" ;;
    *) want="GPU data path: " ;;
    esac
    n=$(grep -c "$want" "$work/out")
    [ "$n" -eq "$t" ] || fail "$n lines '$want' for $t trainers"
    n=$(grep -c "dense allreduce: " "$work/out")
    [ "$n" -eq "$t" ] || fail "$n dense allreduce lines for $t trainers"
    grep -E "GPU data path|dense allreduce" "$work/out" | sort -u | head -4
    ;;
dynamic:*)
    IFS=: read -r _ file ps <<<"$case_name"
    t=$(trainers_of "$golden/$file.safetensors")
    for kind in fixed dynamic; do
        timeout 120 "$run" -n $((t + 1 + ps)) "$train" --ps "$ps" --table-kind "$kind" \
            --replay "$golden/$file.safetensors" --save "$work/$kind.safetensors" \
            >"$work/out" 2>&1 || fail "ember-train --table-kind $kind exited $?"
    done
    grep -qE "^(\[[0-9]+\] )?table emb on ps0: [0-9]+ rows held" "$work/out" || fail "no dynamic table line"
    "$build/tests/train/golden_compare" "$golden/$file.safetensors" "$work/dynamic.safetensors" ||
        fail "the dynamic table differs from PyTorch"
    if [ "$ps" -eq 1 ]; then
        cmp "$work/fixed.safetensors" "$work/dynamic.safetensors" ||
            fail "one PS: the dynamic table saved other bits than the fixed one"
    fi
    ;;
dynamic_opt:*)
    IFS=: read -r _ opt dtype <<<"$case_name"
    for kind in fixed dynamic; do
        timeout 120 "$run" -n 4 "$train" --ps 1 --optimizer "$opt" --epochs 3 --table-kind "$kind" \
            --table-dtype "${dtype:-fp32}" \
            --save "$work/$kind.safetensors" >"$work/out" 2>&1 ||
            fail "ember-train --optimizer $opt --table-kind $kind exited $?"
    done
    cmp "$work/fixed.safetensors" "$work/dynamic.safetensors" ||
        fail "--optimizer $opt: the dynamic table saved other bits than the fixed one"
    ;;
dynamic_budget:*)
    evict=${case_name#dynamic_budget:}
    timeout 120 "$run" -n 5 "$train" --ps 2 --epochs 4 --table-kind dynamic --table-budget 40 \
        --admit-count 2 --evict "$evict" --evict-after 20 --metrics "$work/metrics" \
        >"$work/out" 2>&1 || fail "ember-train exited $?"
    for p in 0 1; do
        line=$(grep -E "^(\[[0-9]+\] )?table emb on ps$p: " "$work/out") || fail "no line for ps$p"
        read -r rows admitted evicted dropped < <(sed -E 's/.*: ([0-9]+) rows held .*, ([0-9]+) admitted, ([0-9]+) evicted, ([0-9]+) gradient rows dropped.*/\1 \2 \3 \4/' <<<"$line")
        [ "$rows" -le 40 ] || fail "ps$p holds $rows rows, budget 40: $line"
        [ "$admitted" -gt "$rows" ] && [ "$evicted" -gt 0 ] && [ "$dropped" -gt 0 ] ||
            fail "ps$p: nothing admitted, evicted or dropped: $line"
        [ $((admitted - evicted)) -eq "$rows" ] || fail "ps$p: admitted - evicted != rows: $line"
        grep -q "\"dynamic_table\": \"emb\", \"ps\": $p, \"rows\": $rows, .*\"admitted\": $admitted, \"evicted\": $evicted, \"dropped_grads\": $dropped" \
            "$work/metrics" || fail "ps$p: --metrics does not hold the summary's counters"
    done
    grep -qE "last epoch's mean loss [0-9]" "$work/out" || fail "no finite loss"
    ;;
dynamic_resume)
    job=(--trainers 2 --epochs 6 --optimizer adagrad --table-kind dynamic --table-budget 40
        --admit-count 2 --evict lfu --evict-after 15)
    timeout 120 "$run" -n 5 "$train" --ps 2 "${job[@]}" --save "$work/ref.safetensors" \
        >"$work/out" 2>&1 || fail "the uninterrupted run exited $?"
    timeout 120 "$run" -n 5 "$train" --ps 2 "${job[@]}" --checkpoint-dir "$work/ck" \
        --checkpoint-every 10 --save "$work/whole.safetensors" >"$work/out" 2>&1 ||
        fail "the run with checkpoints exited $?"
    last=$(ls -d "$work"/ck/step-* | tail -1)
    /usr/bin/python3 "$here/../../tools/ember-checkpoint.py" export "$last" "$work/export.safetensors" \
        >"$work/out" 2>&1 || fail "ember-checkpoint.py export exited $?"
    rm -rf "$work/ck/step-000000000050" "$work/ck/step-000000000060"
    timeout 120 "$run" -n 5 "$train" --ps 2 "${job[@]}" --resume "$work/ck" \
        --save "$work/resumed.safetensors" >"$work/out" 2>&1 || fail "the resume exited $?"
    grep -q "resuming from .*step-000000000040 (step 40)" "$work/out" || fail "not resumed at 40"
    /usr/bin/python3 - "$work" "$here" <<'EOPY' || fail "the resumed run or the export differs"
import sys
import numpy as np
sys.path.insert(0, sys.argv[2])
import st_io
def load(path):
    meta, tensors = st_io.read(path)
    return tensors, meta
work = sys.argv[1]
ref, ref_meta = load(work + "/ref.safetensors")
got, got_meta = load(work + "/resumed.safetensors")
bad = [k for k in ref if ref[k].tobytes() != got[k].tobytes()]
if ref_meta.get("losses") != got_meta.get("losses"):
    bad.append("losses")
print("resumed at 40 on 2 PS:", "the same bytes" if not bad else "differs in %s" % bad)
whole, _ = load(work + "/whole.safetensors")
export, _ = load(work + "/export.safetensors")
keys, rows = export["emb.keys"], export["emb.weight"]
ok = keys.dtype == np.int64 and (np.diff(keys) > 0).all() and 0 < len(keys) <= 80
ok = ok and all(rows[i].tobytes() == whole["emb.weight"][k].tobytes() for i, k in enumerate(keys))
print("export: %d keys, %s" % (len(keys), "each row the saved one" if ok else "WRONG"))
sys.exit(1 if bad or not ok else 0)
EOPY
    timeout 120 "$run" -n 6 "$train" --ps 3 "${job[@]}" --resume "$work/ck" >"$work/out" 2>&1 ||
        fail "the resume on 3 PS exited $?"
    n=$(grep -cE "^(\[[0-9]+\] )?table emb on ps[012]: " "$work/out")
    [ "$n" -eq 3 ] || fail "$n table lines for 3 PS"
    timeout 120 "$run" -n 4 "$train" --ps 1 "${job[@]}" --resume "$work/ck" >"$work/out" 2>&1 &&
        fail "1 PS of budget 40 took 80 rows"
    grep -q "table emb: the checkpoint holds 80 rows of this shard, its budget is 40" "$work/out" ||
        fail "the refusal does not name the rows and the budget"
    ;;
dynamic_resume_other)
    job=(--trainers 2 --epochs 6 --mode max --optimizer adagrad --table-kind dynamic
        --admit-count 2)
    timeout 120 "$run" -n 5 "$train" --ps 2 "${job[@]}" --save "$work/ref.safetensors" \
        >"$work/out" 2>&1 || fail "the uninterrupted run exited $?"
    timeout 120 "$run" -n 5 "$train" --ps 2 "${job[@]}" --checkpoint-dir "$work/ck" \
        --checkpoint-every 10 >"$work/out" 2>&1 || fail "the run with checkpoints exited $?"
    rm -rf "$work/ck/step-000000000050" "$work/ck/step-000000000060"
    for ps in 1 3; do
        timeout 120 "$run" -n $((3 + ps)) "$train" --ps "$ps" "${job[@]}" --resume "$work/ck" \
            --save "$work/ps$ps.safetensors" >"$work/out" 2>&1 || fail "the resume on $ps PS exited $?"
        grep -q "resuming from .*step-000000000040 (step 40)" "$work/out" || fail "not resumed at 40"
        cmp "$work/ref.safetensors" "$work/ps$ps.safetensors" ||
            fail "resumed on $ps PS: not the uninterrupted run's bytes"
    done
    ;;
dynamic_mode:*)
    mode=()
    case ${case_name#dynamic_mode:} in
    async) mode=(--consistency async) ;;
    staleness2) mode=(--staleness 2) ;;
    *) fail "unknown mode ${case_name#dynamic_mode:}" ;;
    esac
    for kind in fixed dynamic; do
        timeout 120 "$run" -n 5 "$train" --ps 2 --epochs 5 "${mode[@]}" --table-kind "$kind" \
            --save "$work/$kind.safetensors" >"$work/out" 2>&1 || fail "--table-kind $kind exited $?"
    done
    /usr/bin/python3 - "$work/fixed.safetensors" "$work/dynamic.safetensors" "$here" <<'EOPY' ||
import sys
import numpy as np
sys.path.insert(0, sys.argv[3])
import st_io
a, b = st_io.read(sys.argv[1])[1], st_io.read(sys.argv[2])[1]
worst = max(float(np.abs(a[k] - b[k]).max()) for k in a)
print("largest difference from the fixed table's run: %.3g" % worst)
sys.exit(0 if worst < 2e-2 else 1)
EOPY
        fail "the dynamic table's run is not the fixed one's"
    ;;
dynamic_flags)
    expect_refusal() { # WHAT FLAGS...: refused before training, naming WHAT
        local what=$1
        shift
        timeout 60 "$run" -n 3 "$train" --trainers 1 "$@" >"$work/out" 2>&1 && fail "$* ran"
        grep -qF -- "$what" "$work/out" || fail "$*: the refusal does not name $what"
    }
    expect_refusal "--admit-count" --admit-count 2
    expect_refusal "--table-budget" --table-budget 10
    expect_refusal "--evict" --evict lfu
    expect_refusal "--table-budget" --table-kind dynamic --table-budget -5
    expect_refusal "--table-budget" --table-kind dynamic --table-budget 10XB
    expect_refusal "--lfu-decay" --table-kind dynamic --lfu-decay 2
    expect_refusal "--admit-count" --table-kind dynamic --admit-count 0
    expect_refusal "--table-kind" --table-kind bogus
    ;;
cache_bits:*)
    # The replay (FILE, or the learnable synthetic job with a fixed or a
    # dynamic table) with --cache-rows 16 on each PS count of LIST: the
    # same saved bits and the same losses as without, and the summary and
    # --metrics say the hit rate.
    IFS=: read -r _ file list <<<"$case_name"
    IFS=, read -r -a counts <<<"$list"
    case $file in
    synthetic_fixed | synthetic_dynamic)
        kind=${file#synthetic_} t=3
        job=(--trainers 3 --data synthetic --epochs 6 --lr 0.2 --table-kind "$kind")
        ;;
    synthetic_fp16) # fp16 rows: the PS sends them widened, as it pools them
        t=3 job=(--trainers 3 --data synthetic --epochs 6 --lr 0.2 --table-dtype fp16)
        ;;
    *)
        t=$(trainers_of "$golden/$file.safetensors")
        job=(--replay "$golden/$file.safetensors")
        ;;
    esac
    for ps in "${counts[@]}"; do
        for rows in 0 16; do
            timeout 120 "$run" -n $((t + 1 + ps)) "$train" --ps "$ps" "${job[@]}" \
                --cache-rows "$rows" --metrics "$work/m$rows.jsonl" \
                --save "$work/out$rows.safetensors" >"$work/out$rows" 2>&1 ||
                { cp "$work/out$rows" "$work/out"; fail "--ps $ps --cache-rows $rows exited $?"; }
        done
        cmp "$work/out0.safetensors" "$work/out16.safetensors" ||
            fail "--ps $ps: --cache-rows 16 saved other bits than no cache"
        losses() { grep -oE '"(loss|auc|logloss)": [0-9.e+-]*' "$1"; }
        [ -n "$(losses "$work/m0.jsonl")" ] &&
            [ "$(losses "$work/m0.jsonl")" = "$(losses "$work/m16.jsonl")" ] ||
            fail "--ps $ps: --cache-rows 16 has other losses than no cache"
        cp "$work/out16" "$work/out"
        grep -qE "cache: hit rate [0-9.]+% \([0-9]+ of [0-9]+ rows\)" "$work/out16" ||
            fail "--ps $ps: no cache summary"
        grep -q '"cache": 16, "lookups": [1-9]' "$work/m16.jsonl" || fail "--ps $ps: no cache metrics"
        grep -q "cache:" "$work/out0" && fail "--cache-rows 0 prints a cache summary"
    done
    ;;
cache_stale:*)
    # --staleness K with --cache-rows: copies stand (hits), none more than
    # K behind (the master fails the job otherwise), and the job trains as
    # the uncached one does (the loss falls, the last epoch's within 0.02
    # of it).
    k=${case_name#cache_stale:}
    for rows in 0 40; do
        timeout 120 "$run" -n 5 "$train" --trainers 3 --data synthetic --epochs 30 --lr 0.2 \
            --staleness "$k" --cache-rows "$rows" --metrics "$work/m$rows.jsonl" \
            >"$work/out" 2>&1 || fail "--cache-rows $rows exited $?"
    done
    line=$(grep -E "cache: hit rate" "$work/out") || fail "no cache summary"
    read -r hits stale oldest < <(sed -E 's/.*\(([0-9]+) of [0-9]+ rows\), ([0-9]+) by staleness \(oldest ([0-9]+) steps.*/\1 \2 \3/' <<<"$line")
    # (Pipelined, a step's lookups are served as far behind as the bound
    # lets them, so a copy made at step s is K + 1 behind step s + 1: hits
    # by staleness alone come when the PS got ahead, which timing decides;
    # tests/api/test_cache's lockstep case makes them.)
    [ "$hits" -gt 0 ] || fail "no hits: $line"
    [ "$oldest" -le "$k" ] || fail "a copy $oldest steps behind, beyond --staleness $k: $line"
    last() { grep '^{"epoch"' "$1" | tail -1 | grep -o '"loss": [0-9.]*' | grep -o '[0-9.]*$'; }
    first=$(grep '^{"epoch"' "$work/m40.jsonl" | head -1 | grep -o '"loss": [0-9.]*' | grep -o '[0-9.]*$')
    awk -v a="$first" -v b="$(last "$work/m40.jsonl")" -v c="$(last "$work/m0.jsonl")" \
        'BEGIN { exit !(b < a && b - c < 0.02 && c - b < 0.02) }' ||
        fail "loss: first epoch $first, last $(last "$work/m40.jsonl"), uncached $(last "$work/m0.jsonl")"
    ;;
cache_flags)
    expect_refusal() { # WHAT FLAGS...: refused, naming WHAT
        local what=$1
        shift
        timeout 60 "$run" -n 3 "$train" --trainers 1 "$@" >"$work/out" 2>&1 && fail "$* ran"
        grep -qF -- "$what" "$work/out" || fail "$*: the refusal does not name $what"
    }
    expect_refusal "--cache-rows" --cache-rows -1
    expect_refusal "--cache-rows" --cache-rows 12x
    expect_refusal "--cache-rows" --cache-rows 1073741825
    expect_refusal "--reply-dtype fp16" --cache-rows 8 --reply-dtype fp16
    expect_refusal "--ps-device cuda" --cache-rows 8 --ps-device cuda
    ;;
same_bits:*)
    IFS=: read -r _ file list <<<"$case_name"
    t=$(trainers_of "$golden/$file.safetensors")
    IFS=, read -r -a counts <<<"$list"
    for ps in "${counts[@]}"; do
        timeout 120 "$run" -n $((t + 1 + ps)) "$train" --ps "$ps" \
            --replay "$golden/$file.safetensors" --save "$work/out$ps.safetensors" \
            >"$work/out" 2>&1 || fail "ember-train --ps $ps exited $?"
    done
    for ps in "${counts[@]:1}"; do
        cmp "$work/out${counts[0]}.safetensors" "$work/out$ps.safetensors" ||
            fail "--ps ${counts[0]} and --ps $ps saved different bits"
    done
    ;;
threads:*)
    # threads:FILE:PS:LIST[:fp16]: the replay with each --ps-threads of
    # LIST, every request split as far as it goes (EMBER_PS_GRAIN=1): each
    # matches PyTorch and saves the bits of the first.
    IFS=: read -r _ file ps list rows <<<"$case_name"
    t=$(trainers_of "$golden/$file.safetensors")
    flags=() compare=()
    [[ $rows == fp16 ]] && flags=(--table-dtype fp16 --replay-tolerance 0.05) compare=(--fp16
        --fp16-ref "$build/tests/train/fp16_ref/$file.rows.safetensors")
    IFS=, read -r -a counts <<<"$list"
    for n in "${counts[@]}"; do
        EMBER_PS_GRAIN=1 EMBER_LOG_LEVEL=info timeout 120 "$run" -n $((t + 1 + ps)) "$train" \
            --ps "$ps" --ps-threads "$n" "${flags[@]}" --replay "$golden/$file.safetensors" \
            --save "$work/out$n.safetensors" >"$work/out" 2>&1 || fail "--ps-threads $n exited $?"
        [ "$(grep -c "serving with $n compute threads (--ps-threads)" "$work/out")" -eq "$ps" ] ||
            fail "--ps-threads $n: not every PS says it serves with $n threads"
        "$build/tests/train/golden_compare" "${compare[@]}" "$golden/$file.safetensors" \
            "$work/out$n.safetensors" || fail "--ps-threads $n differs from PyTorch"
        cmp "$work/out${counts[0]}.safetensors" "$work/out$n.safetensors" ||
            fail "--ps-threads ${counts[0]} and $n saved different bits"
    done
    ;;
golden:*)
    IFS=: read -r _ file ps <<<"$case_name"
    t=$(trainers_of "$golden/$file.safetensors")
    np=$((t + 1 + ps))
    timeout 120 "$run" -n "$np" "$train" --ps "$ps" \
        --replay "$golden/$file.safetensors" --save "$work/out.safetensors" >"$work/out" 2>&1 ||
        fail "ember-train exited $?"
    "$build/tests/train/golden_compare" "$golden/$file.safetensors" "$work/out.safetensors" ||
        fail "differs from PyTorch"
    grep -q "replay check against $golden/$file.safetensors: loss max |diff| .*: all within 0.0001" \
        "$work/out" || fail "the replay does not say it matched"
    ;;
dense_staged:*)
    # The dense allreduce on staged copies (EMBER_DENSE_ALLREDUCE=staged, what
    # trainers sharing a GPU take): every trainer says it took it, and the
    # run still reproduces PyTorch's.
    IFS=: read -r _ file ps <<<"$case_name"
    t=$(trainers_of "$golden/$file.safetensors")
    EMBER_DENSE_ALLREDUCE=staged EMBER_LOG_LEVEL=info timeout 120 "$run" -n $((t + 1 + ps)) \
        "$train" --ps "$ps" --replay "$golden/$file.safetensors" \
        --save "$work/out.safetensors" >"$work/out" 2>&1 || fail "ember-train exited $?"
    "$build/tests/train/golden_compare" "$golden/$file.safetensors" "$work/out.safetensors" ||
        fail "differs from PyTorch"
    n=$(grep -c "dense allreduce: the host ring over the transport, on a copy of the gradients" \
        "$work/out")
    [ "$n" -eq "$t" ] || fail "$n of $t trainers took the staged allreduce"
    ;;
fp16:*)
    IFS=: read -r _ what file ps <<<"$case_name"
    t=$(trainers_of "$golden/$file.safetensors")
    flags=() compare=()
    [[ $what == rows || $what == both ]] && flags+=(--table-dtype fp16) compare+=(--fp16)
    [[ $what == replies || $what == both ]] && flags+=(--reply-dtype fp16) compare+=(--fp16-replies)
    flags+=(--replay-tolerance 0.05) # fp16's drift from PyTorch's fp32 run
    compare+=(--fp16-ref "$build/tests/train/fp16_ref/$file.$what.safetensors")
    timeout 120 "$run" -n $((t + 1 + ps)) "$train" --ps "$ps" "${flags[@]}" \
        --replay "$golden/$file.safetensors" --save "$work/out.safetensors" >"$work/out" 2>&1 ||
        fail "ember-train exited $?"
    [[ $what == replies ]] || grep -q "fp16 rows" "$work/out" || fail "the job does not say its rows are fp16"
    [[ $what == rows ]] || grep -q "fp16 replies" "$work/out" || fail "the job does not say its replies are fp16"
    if [[ $what != rows && $ps != 1 ]]; then
        "$build/tests/train/golden_compare" "$golden/$file.safetensors" "$work/out.safetensors" \
            0.01 >>"$work/out" || fail "further than 1e-2 from PyTorch"
    else
        "$build/tests/train/golden_compare" "${compare[@]}" "$golden/$file.safetensors" \
            "$work/out.safetensors" >>"$work/out" || fail "differs from the fp16 oracle"
    fi
    ;;
dtype_flag)
    "$run" -n 4 "$train" --table-dtype bf16 >"$work/out" 2>&1 && fail "bf16 was accepted"
    grep -q "invalid value 'bf16' for --table-dtype" "$work/out" || fail "no message naming it"
    "$run" -n 4 "$train" --reply-dtype int8 >"$work/out" 2>&1 && fail "int8 replies were accepted"
    grep -q "invalid value 'int8' for --reply-dtype" "$work/out" || fail "no message naming it"
    "$run" -n 4 "$train" --ps-device tpu >"$work/out" 2>&1 && fail "--ps-device tpu was accepted"
    grep -q "invalid value 'tpu' for --ps-device" "$work/out" || fail "no message naming it"
    info=$("$build/tools/ember-info" 2>/dev/null)
    if ! grep -qE '^cuda: [1-9]' <<<"$info"; then # no GPU: refused before joining
        "$run" -n 4 "$train" --ps-device cuda >"$work/out" 2>&1 && fail "--ps-device cuda ran"
        grep -qE "ember-train: --ps-device cuda: (no CUDA GPU is visible|this build has no CUDA backend)" \
            "$work/out" || fail "no message naming --ps-device"
    fi
    ;;
cuda_ps:*)
    # The PS's shard on the GPU (--ps-device cuda), trainers on DEVICE:
    # reproduces the golden run; skipped without a GPU.
    IFS=: read -r _ file ps device <<<"$case_name"
    info=$("$build/tools/ember-info" 2>/dev/null)
    grep -qE '^cuda: [1-9]' <<<"$info" || { echo "no CUDA GPU: skipped"; exit 77; }
    t=$(trainers_of "$golden/$file.safetensors")
    EMBER_LOG_LEVEL=info timeout 120 "$run" -n $((t + 1 + ps)) "$train" --ps "$ps" \
        --ps-device cuda --device "$device" --replay "$golden/$file.safetensors" \
        --save "$work/out.safetensors" >"$work/out" 2>&1 || fail "ember-train exited $?"
    "$build/tests/train/golden_compare" "$golden/$file.safetensors" "$work/out.safetensors" ||
        fail "differs from PyTorch"
    n=$(grep -cE "rows x [0-9]+ fp32 \([0-9.]+ MiB on the GPU\)" "$work/out")
    [ "$n" -eq "$ps" ] || fail "$n of $ps shards on the GPU"
    ;;
async4)
    # The same job in sync is the reference (sync is what the golden replays
    # check against PyTorch).  Async lookups may read the table before other
    # trainers' pushes of the step before are in: no further, as the dense
    # allreduce keeps the trainers in step.  Reads that stale moved these
    # weights by 1e-4 (3e-3 at most) in runs here, and by 6e-3 in the sync
    # job with --staleness 1 or 2 (every read a step behind); a quarter of the
    # gradients lost or applied twice moves them by 0.15 and more.
    job=(--trainers 4 --data synthetic --epochs 20 --lr 0.2)
    for mode in async sync; do
        EMBER_LOG_LEVEL=info timeout 120 "$run" -n 6 "$train" "${job[@]}" --consistency "$mode" \
            --metrics "$work/$mode.jsonl" --save "$work/$mode.safetensors" >"$work/out" 2>&1 ||
            fail "--consistency $mode exited $?"
        cp "$work/out" "$work/$mode.out"
        grep -q "done: 800 steps" "$work/out" || fail "$mode: not every step ran"
        [ "$(grep -c '^{"epoch"' "$work/$mode.jsonl")" -eq 20 ] || fail "$mode metrics: want 20 epochs"
        grep -E '"loss": (nan|inf|-nan|-inf)' "$work/$mode.jsonl" && fail "$mode: non-finite loss"
        first=$(grep '^{"epoch"' "$work/$mode.jsonl" | head -1 | grep -o '"loss": [0-9.]*' | grep -o '[0-9.]*$')
        last=$(grep '^{"epoch"' "$work/$mode.jsonl" | tail -1 | grep -o '"loss": [0-9.]*' | grep -o '[0-9.]*$')
        awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < 0.5 * a) }' ||
            fail "$mode: the loss did not fall by half: $first -> $last"
        # What the job and its PS say they did.
        grep -q "training: 4 trainers, 1 ps, .*, $mode, synthetic data" "$work/out" ||
            fail "the job line does not say $mode"
        grep -q "table emb: shard 0 of 1, .*, $mode, " "$work/out" ||
            fail "the PS does not say its table is $mode"
        applied=$([ "$mode" = async ] && echo 800 || echo 200)
        grep -q "ps0: .* 800 lookups, 800 gradients, $applied steps applied" "$work/out" ||
            fail "$mode: the PS did not apply 800 gradients in $applied steps"
    done
    cp "$work/async.out" "$work/out"
    ${EMBER_TORCH_PYTHON:-/usr/bin/python3} - "$(dirname "$0")" "$work/async.safetensors" \
        "$work/sync.safetensors" >>"$work/out" 2>&1 <<'EOF' || fail "async ended further than 2e-2 from sync"
import sys
sys.path.insert(0, sys.argv[1])
import numpy as np
import st_io
_, got = st_io.read(sys.argv[2])
_, want = st_io.read(sys.argv[3])
assert set(got) == set(want), (sorted(got), sorted(want))
worst = max(float(np.abs(got[k] - want[k]).max()) for k in want)
moved = max(float(np.abs(want[k]).max()) for k in want)
print(f"async vs sync: max |diff| {worst:.3g} over {', '.join(want)} (largest value {moved:.3g})")
sys.exit(not worst <= 2e-2)
EOF
    tail -1 "$work/out"
    ;;
bad_file:*)
    IFS=: read -r _ kind src <<<"$case_name"
    want=$("$build/tests/train/make_bad_replay" "$golden/$src.safetensors" \
        "$work/bad.safetensors" "$kind" 1 5) || fail "cannot make the bad file"
    start=$(date +%s)
    timeout 30 "$run" -n 4 "$train" --replay "$work/bad.safetensors" >"$work/out" 2>&1
    rc=$?
    [ $rc -ne 124 ] || fail "the job hung"
    [ $rc -eq 2 ] || fail "exit $rc, not 2 (refused before training)"
    [ $(($(date +%s) - start)) -lt 10 ] || fail "took too long to refuse"
    grep -qF "ember-train: $work/bad.safetensors: $want" "$work/out" ||
        fail "no refusal naming the file and saying: $want"
    grep -q "^training:" "$work/out" && fail "the job began training"
    no_leftovers
    ;;
bad:*)
    kind=${case_name#bad:}
    src=seed_sum_2t
    "$build/tests/train/make_bad_replay" "$golden/$src.safetensors" "$work/bad.safetensors" \
        "$kind" 1 5 || fail "cannot make the bad file"
    start=$(date +%s)
    timeout 60 "$run" -n 4 "$train" --replay "$work/bad.safetensors" >"$work/out" 2>&1
    rc=$?
    [ $rc -ne 0 ] || fail "a broken batch was accepted"
    [ $rc -ne 124 ] || fail "the job hung"
    [ $(($(date +%s) - start)) -lt 30 ] || fail "took too long to fail"
    grep -q "table emb: trainer 1 step 5" "$work/out" || fail "error does not name table/trainer/step"
    grep -q "job failed" "$work/out" || fail "the master did not report the failure"
    case $kind in
    index_high) grep -q "index 130 .*out of range \[0, 100)" "$work/out" || fail "index not named" ;;
    index_negative) grep -q "index -2" "$work/out" || fail "index not named" ;;
    offsets_*) grep -qi "offset" "$work/out" || fail "offsets not named" ;;
    esac
    # Nothing of step 5 was applied: steps 0-4 ran, step 5 never did.
    grep -q "steps applied" "$work/out" && fail "the job went on to the end"
    no_leftovers
    ;;
nonfinite)
    timeout 60 "$run" -n 4 "$train" --lr 1e30 --epochs 50 >"$work/out" 2>&1
    rc=$?
    [ $rc -ne 0 ] && [ $rc -ne 124 ] || fail "exit $rc"
    grep -qE "trainer [01] step [0-9]+: the loss is not finite" "$work/out" ||
        grep -qE "trainer [01] step [0-9]+: .*non-finite" "$work/out" || fail "no named error"
    no_leftovers
    ;;
optimizer:*)
    # The four runs share their inputs and differ by their optimizer (by 0.05
    # and more in the loss or the weights): ember's result must be its own
    # optimizer's run within 1e-4 and none of the others'.  --optimizer NAME
    # is given as well: a replay takes it only when it says what the file
    # says, so a flag that did not reach the job would be refused.
    opt=${case_name#optimizer:}
    refs=$build/tests/train/golden_opt
    file=$refs/opt_$opt.safetensors
    [ -r "$file" ] || fail "no $file (the train.optimizer.setup fixture makes it)"
    timeout 120 "$run" -n 5 "$train" --ps 2 --optimizer "$opt" --replay "$file" \
        --save "$work/out.safetensors" >"$work/out" 2>&1 || fail "ember-train exited $?"
    grep -qE "training: 2 trainers, 2 ps, .*, $opt lr [0-9.e-]+, sync, " "$work/out" ||
        fail "the job does not say it trains with $opt"
    grep -q "replay check against $file: loss max |diff| .*: all within 0.0001" "$work/out" ||
        fail "the replay does not say it matched"
    "$build/tests/train/golden_compare" "$file" "$work/out.safetensors" >>"$work/out" ||
        fail "differs from PyTorch's run with $opt"
    for other in sgd adagrad rowwise_adagrad adam; do
        [ "$other" = "$opt" ] && continue
        "$build/tests/train/golden_compare" "$refs/opt_$other.safetensors" \
            "$work/out.safetensors" >/dev/null &&
            fail "the result is PyTorch's run with $other too: the runs do not tell them apart"
    done
    ;;
synthetic)
    timeout 120 "$run" -n 4 "$train" --data synthetic --epochs 30 --lr 0.2 \
        --metrics "$work/m.jsonl" >"$work/out" 2>&1 || fail "exit $?"
    first=$(grep '^{"epoch"' "$work/m.jsonl" | head -1 | grep -o '"loss": [0-9.]*' | grep -o '[0-9.]*$')
    last=$(grep '^{"epoch"' "$work/m.jsonl" | tail -1 | grep -o '"loss": [0-9.]*' | grep -o '[0-9.]*$')
    awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < 0.5 * a) }' ||
        fail "loss did not fall by half: $first -> $last"
    ;;
staleness:*)
    # --staleness K: the job runs, every epoch line names the largest
    # staleness its lookups saw (1 .. K: the next step's lookups leave
    # before this step's pushes), the loss falls; K 0 saves the same bits
    # and prints the same losses as a run without the flag.
    k=${case_name#staleness:}
    timeout 120 "$run" -n 5 "$train" --trainers 3 --data synthetic --epochs 30 --lr 0.2 \
        --staleness "$k" --metrics "$work/m.jsonl" --save "$work/k.safetensors" \
        >"$work/out" 2>&1 || fail "exit $?"
    if [ "$k" = 0 ]; then
        grep -q "staleness" "$work/out" "$work/m.jsonl" && fail "--staleness 0 prints a staleness"
        timeout 120 "$run" -n 5 "$train" --trainers 3 --data synthetic --epochs 30 --lr 0.2 \
            --metrics "$work/plain.jsonl" --save "$work/plain.safetensors" \
            >"$work/plain.out" 2>&1 || fail "the run without the flag exited $?"
        cmp "$work/k.safetensors" "$work/plain.safetensors" ||
            fail "--staleness 0 saved other bits than no flag"
        losses() { grep -o '"loss": [0-9.]*' "$1"; }
        [ "$(losses "$work/m.jsonl")" = "$(losses "$work/plain.jsonl")" ] ||
            fail "--staleness 0 has other losses than no flag"
        lines() { grep -oE "training: .*|mean loss [0-9.]+|last step's loss [0-9.]+.*" "$1"; }
        [ "$(lines "$work/out")" = "$(lines "$work/plain.out")" ] ||
            fail "--staleness 0 prints other lines than no flag"
    else
        grep -q "sync, staleness $k" "$work/out" || fail "the job line does not say staleness $k"
        n=$(grep -c "mean loss.*  staleness [0-9]" "$work/out")
        [ "$n" -eq 30 ] || fail "$n epoch lines name a staleness, not 30"
        seen=$(grep -o '"staleness": [0-9]*' "$work/m.jsonl" | grep -o '[0-9]*$' | sort -n | tail -1)
        [ -n "$seen" ] && [ "$seen" -ge 1 ] && [ "$seen" -le "$k" ] ||
            fail "largest staleness seen '$seen', not in 1 .. $k"
    fi
    first=$(grep '^{"epoch"' "$work/m.jsonl" | head -1 | grep -o '"loss": [0-9.]*' | grep -o '[0-9.]*$')
    last=$(grep '^{"epoch"' "$work/m.jsonl" | tail -1 | grep -o '"loss": [0-9.]*' | grep -o '[0-9.]*$')
    awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < 0.5 * a) }' ||
        fail "loss did not fall by half: $first -> $last"
    ;;
mlp)
    # A dense MLP (--hidden): it learns the synthetic target, sync training
    # is bit-for-bit reproducible, and every trainer ends with the same
    # dense parameters (the master warns otherwise).
    timeout 120 "$run" -n 5 "$train" --ps 2 --hidden 64,32 --data synthetic --epochs 30 \
        --lr 0.2 --metrics "$work/m.jsonl" --save "$work/a.safetensors" >"$work/out" 2>&1 ||
        fail "exit $?"
    grep -q "Linear(16, 64) ReLU Linear(64, 32) ReLU Linear(32, 8)" "$work/out" ||
        fail "the model is not the MLP asked for"
    first=$(grep '^{"epoch"' "$work/m.jsonl" | head -1 | grep -o '"loss": [0-9.]*' | grep -o '[0-9.]*$')
    last=$(grep '^{"epoch"' "$work/m.jsonl" | tail -1 | grep -o '"loss": [0-9.]*' | grep -o '[0-9.]*$')
    awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < 0.5 * a) }' ||
        fail "loss did not fall by half: $first -> $last"
    grep -q "differ from trainer0" "$work/out" && fail "trainers' dense parameters differ"
    timeout 120 "$run" -n 5 "$train" --ps 2 --hidden 64,32 --data synthetic --epochs 30 \
        --lr 0.2 --save "$work/b.safetensors" >"$work/out2" 2>&1 || fail "second run: exit $?"
    cmp -s "$work/a.safetensors" "$work/b.safetensors" || fail "sync training is not reproducible"
    ;;
progress:steps)
    timeout 120 "$run" -n 4 "$train" --epochs 3 --log-every 5 --metrics "$work/m.jsonl" \
        >"$work/out" 2>&1 || fail "exit $?"
    python3 "$here/progress_check.py" "$work/out" "$work/m.jsonl" --per 10 --epochs 3 \
        --every 5 || fail "progress lines"
    ;;
progress:off)
    timeout 120 "$run" -n 4 "$train" --epochs 3 --log-every 0 --metrics "$work/m.jsonl" \
        >"$work/out" 2>&1 || fail "exit $?"
    grep -q "\] step " "$work/out" && fail "--log-every 0 printed a progress line"
    grep -q '"progress"' "$work/m.jsonl" && fail "--log-every 0 wrote a progress line"
    [ "$(grep -c '^{"epoch"' "$work/m.jsonl")" -eq 3 ] || fail "not 3 epoch lines"
    ;;
progress:seconds)
    # 20000 steps: some seconds, every 0.05 s a line
    timeout 120 "$run" -n 4 "$train" --epochs 2000 --log-every-seconds 0.05 \
        --metrics "$work/m.jsonl" >"$work/out" 2>&1 || fail "exit $?"
    python3 "$here/progress_check.py" "$work/out" "$work/m.jsonl" --per 10 --epochs 2000 ||
        fail "progress lines"
    ;;
progress:unknown)
    # DLRM (its epoch's size unknown until its stream says it): 4000 examples,
    # 62 steps of 32 x 2 an epoch; a line after steps 31 and 62 without a
    # fraction or time left (or, once DLRM knows the size, with the right ones)
    "$build/tools/ember-criteo-gen" --examples 4000 --out "$work/c.tsv" >/dev/null ||
        fail "ember-criteo-gen"
    timeout 120 "$run" -n 4 "$train" --model dlrm --data "criteo:$work/c.tsv" --log-every 31 \
        --metrics "$work/m.jsonl" >"$work/out" 2>&1 || fail "exit $?"
    python3 "$here/progress_check.py" "$work/out" "$work/m.jsonl" --per 62 --epochs 1 \
        --every 31 --maybe-unknown || fail "progress lines"
    ;;
progress:tty)
    # The master (rank 2) on script's pseudo-terminal, the others by hand.
    command -v script >/dev/null || { echo "no script (util-linux): skipped"; exit 77; }
    port=$(by_hand_free_port)
    head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$work/secret"
    chmod 600 "$work/secret"
    job=(EMBER_WORLD_SIZE=4 EMBER_INIT=tcp://127.0.0.1:$port EMBER_SECRET_FILE="$work/secret"
        UCX_NET_DEVICES=lo)
    args=(--epochs 3 --log-every 3 --metrics "$work/m.jsonl")
    pids=()
    for rank in 0 1 3; do
        env "${job[@]}" EMBER_RANK=$rank "$train" "${args[@]}" >"$work/rank$rank.log" 2>&1 &
        pids+=($!)
    done
    env "${job[@]}" EMBER_RANK=2 timeout 120 script -qec "$(printf '%q ' "$train" "${args[@]}")" \
        /dev/null >"$work/out" 2>&1 </dev/null
    rc=$?
    for pid in "${pids[@]}"; do wait "$pid" || rc=$?; done
    [ $rc -eq 0 ] || fail "exit $rc"
    python3 "$here/progress_check.py" "$work/out" "$work/m.jsonl" --per 10 --epochs 3 \
        --every 3 --tty || fail "progress lines on a terminal"
    ;;
rank_lost:*)
    # No launcher: four ranks started by hand (trainers 0-1, master 2, ps0 3),
    # one of them killed (KILL) or stopped (STOP) once training runs.  Every
    # survivor ends, with an error naming the lost rank and its role, within
    # 2 s of a death, or of the RPC deadline (3 s here) for a stopped rank.
    IFS=: read -r _ victim sig <<<"$case_name"
    by_hand_start "$train" "$work" EMBER_RPC_TIMEOUT=3 -- --epochs 100000
    pids=("${BY_HAND_PIDS[@]}")
    by_hand_training "$work" ||
        { cat "$work"/rank*.log >"$work/out"; kill -9 "${pids[@]}"; fail "training did not start"; }
    kill -"$sig" "${pids[$victim]}"
    start=$(date +%s%N)
    limit=$([ "$sig" = STOP ] && echo 5000 || echo 2000) # ms: 3 s deadline + 2 s
    for rank in 0 1 2 3; do
        [ "$rank" = "$victim" ] && continue
        while kill -0 "${pids[$rank]}" 2>/dev/null; do
            [ $(( ($(date +%s%N) - start) / 1000000 )) -lt 30000 ] || break
            sleep 0.02
        done
        took=$(( ($(date +%s%N) - start) / 1000000 ))
        wait "${pids[$rank]}" && { cat "$work"/rank*.log >"$work/out"; fail "rank $rank exited 0"; }
        [ "$took" -le "$limit" ] ||
            { cat "$work"/rank*.log >"$work/out"; kill -9 "${pids[@]}"; fail "rank $rank ended after $took ms (limit $limit)"; }
        echo "rank $rank ended $took ms after the $sig"
    done
    kill -9 "${pids[$victim]}" 2>/dev/null
    wait "${pids[$victim]}" 2>/dev/null
    cat "$work"/rank*.log >"$work/out"
    names=(trainer0 trainer1 master ps0)
    want="${names[$victim]} (rank $victim)"
    [ "$victim" = 2 ] && want="the master (rank 2) was lost"
    for rank in 0 1 2 3; do
        [ "$rank" = "$victim" ] && continue
        grep -q "ERROR.*$want\|job failed.*$want\|job aborted.*$want" "$work/rank$rank.log" ||
            fail "rank $rank's error does not name $want"
    done
    no_leftovers
    ;;
cli)
    # refused CODE TEXT -- ARGS: ember-train ARGS exits CODE saying TEXT, at
    # once (no rank joins: nothing else is started).
    refused() {
        local want=$1 text=$2
        shift 3
        timeout 10 "$train" "$@" >"$work/out" 2>&1
        local rc=$?
        [ $rc -eq "$want" ] || fail "ember-train $* exited $rc, not $want"
        grep -qF -- "$text" "$work/out" || fail "ember-train $*: no '$text'"
    }
    for bad in 0 -1 1025 4x "" 99999999999999999999; do
        refused 2 "invalid value '$bad' for --ps-threads (an integer in [1, 1024])" -- \
            --ps-threads "$bad"
    done
    refused 2 "unknown flag '--bogus'" -- --bogus
    grep -q "invalid value" "$work/out" && fail "--bogus is called an invalid value"
    refused 2 "unknown flag '--bogus'" -- --epochs 3 --bogus 1
    refused 2 "--rows needs a value (R)" -- --rows
    refused 2 "--ps is given twice" -- --ps 1 --ps 2
    refused 2 "invalid value '4294967298' for --trainers" -- --trainers 4294967298
    refused 2 "invalid value '1e39' for --lr" -- --lr 1e39
    refused 2 "invalid value 'nan' for --momentum" -- --momentum nan
    refused 2 "invalid value '' for --hidden" -- --hidden ""
    refused 2 "--momentum is SGD's: --optimizer adam has none" -- --optimizer adam --momentum 0.9
    refused 2 "--sparse-reduce is how sync steps combine" -- --consistency async --sparse-reduce mean
    refused 2 "--table-dtype fp16: a PS on a GPU keeps fp32 rows" -- --table-dtype fp16 --ps-device cuda
    refused 2 "--replay-tolerance checks a replay: it needs --replay FILE" -- --replay-tolerance 1
    for bad in -1 x "" 1099511627777 99999999999999999999; do
        refused 2 "invalid value '$bad' for --log-every (an integer in [0, 1099511627776])" -- \
            --log-every "$bad"
    done
    for bad in 0 -1 nan x 86401; do
        refused 2 "invalid value '$bad' for --log-every-seconds" -- --log-every-seconds "$bad"
    done
    refused 2 "--log-every and --log-every-seconds both say when" -- \
        --log-every 5 --log-every-seconds 2
    refused 2 "invalid value '17' for --staleness (an integer in [0, 16])" -- --staleness 17
    refused 2 "invalid value '-1' for --staleness (an integer in [0, 16])" -- --staleness -1
    refused 2 "invalid value 'one' for --staleness" -- --staleness one
    refused 2 "--staleness bounds how far a sync lookup may be behind" -- --staleness 1 --consistency async
    refused 2 "--checkpoint-dir with --staleness 2: a checkpoint is the tables at a step boundary" -- --staleness 2 --checkpoint-dir "$work/ck"
    refused 2 "--resume with --staleness 1" -- --staleness 1 --resume "$work/ck"
    refused 2 "--staleness 1 with --replay" -- --staleness 1 --replay "$golden/seed_sum_2t.safetensors"
    # A plugin that cannot be loaded is not called a missing GPU.
    EMBER_CUDA_PLUGIN=$work/none.so timeout 10 "$train" --device cuda >"$work/out" 2>&1
    [ $? -eq 2 ] || fail "--device cuda with no plugin exited $?"
    if ! grep -q "this build has no CUDA backend" "$work/out"; then
        grep -q "the CUDA backend cannot be loaded" "$work/out" &&
            grep -q "EMBER_CUDA_PLUGIN=$work/none.so" "$work/out" &&
            ! grep -q "no CUDA GPU is visible" "$work/out" ||
            fail "an unloadable plugin is not said to be one"
    fi
    "$train" --help >"$work/out" 2>&1 || fail "--help exited $?"
    grep -q "%%" "$work/out" && fail "--help prints a literal %%"
    for flag in --trainers --ps --rows --hidden --replay --replay-tolerance --save --metrics \
                --device --bind --version; do
        grep -q -- "^  $flag " "$work/out" || fail "--help does not list $flag"
    done
    "$train" --version >"$work/out" 2>&1 || fail "--version exited $?"
    grep -qE '^ember-train [0-9]+\.[0-9]+\.[0-9]+ \(libember [0-9]+\.[0-9]+\.[0-9]+\)$' "$work/out" ||
        fail "--version does not print the version"
    ;;
env)
    # Every program refuses a bad value the same way, before doing anything.
    check_env() { # VAR VALUE ACCEPTED
        local var=$1 value=$2 accepted=$3 prog
        for prog in "$train --epochs 1" "$run -n 4 $train" "$build/tools/ember-info" \
                    "$build/bench/ember-bench rpc"; do
            env "$var=$value" timeout 10 $prog >"$work/out" 2>&1
            local rc=$?
            [ $rc -eq 2 ] || fail "$var=$value: $prog exited $rc, not 2"
            grep -qF "$var='$value' is not valid: $var is $accepted" "$work/out" ||
                fail "$var=$value: $prog does not name variable, value and '$accepted'"
        done
    }
    check_env EMBER_LOG_LEVEL bogus "one of fatal, error, warn, info, debug, trace"
    check_env EMBER_CONSISTENCY foo "one of sync, async"
    check_env EMBER_BIND foo "one of numa, core, none"
    check_env EMBER_GPUDIRECT on "one of auto, staged, rdma"
    check_env EMBER_RANK 2147483648 "an integer from 0 to 2147483647"
    check_env EMBER_RPC_TIMEOUT nan "a number from 0.001 to 1e+06"
    check_env EMBER_MAX_MSG_SIZE 1Q "a size in bytes, such as 4096, 64K, 1M or 2G"
    # Good values, in any case, are taken.
    EMBER_LOG_LEVEL=WARN EMBER_CONSISTENCY=Async timeout 60 "$run" -n 4 "$train" --epochs 2 \
        >"$work/out" 2>&1 || fail "good values were refused: exit $?"
    grep -q "async" "$work/out" || fail "EMBER_CONSISTENCY=Async was not taken"
    ;;
outputs)
    # The master refuses a path it cannot write before any training.
    cannot() { # TEXT -- ENV... ARGS...
        local text=$1
        shift 2
        local start=$(date +%s)
        env "$@" >"$work/out" 2>&1
        local rc=$?
        [ $rc -eq 2 ] || fail "$* exited $rc, not 2"
        grep -qF -- "$text" "$work/out" || fail "$*: no '$text'"
        grep -q "^\[.*training:" "$work/out" && fail "$*: it trained first"
        [ $(($(date +%s) - start)) -lt 20 ] || fail "$*: took too long to refuse"
    }
    cannot "--save /no/such/dir/x.safetensors: cannot write there (/no/such/dir: No such file" -- \
        "$run" -n 4 "$train" --save /no/such/dir/x.safetensors
    cannot "--metrics /no/such/dir/m.jsonl: cannot write there" -- \
        "$run" -n 4 "$train" --metrics /no/such/dir/m.jsonl
    cannot "EMBER_METRICS /no/such/dir/m.jsonl: cannot write there" -- \
        EMBER_METRICS=/no/such/dir/m.jsonl "$run" -n 4 "$train"
    mkdir "$work/folder"
    cannot "--save $work/folder: cannot write there" -- "$run" -n 4 "$train" --save "$work/folder"
    no_leftovers
    ;;
replay_refuses)
    file=$golden/seed_sum_2t.safetensors
    while read -r -a args; do
        timeout 10 "$train" --replay "$file" "${args[@]}" >"$work/out" 2>&1
        rc=$?
        [ $rc -eq 2 ] || fail "--replay with ${args[*]} exited $rc, not 2"
        grep -qF -- "${args[*]} cannot be honoured with --replay" "$work/out" ||
            fail "--replay with ${args[*]}: no refusal naming it"
    done <<'FLAGS'
--optimizer adam
--optimizer adagrad
--optimizer rowwise_adagrad
--momentum 0.9
--padding-idx 3
--consistency async
--mode max
--lr 0.1
--rows 10
--dim 8
--classes 3
--trainers 3
--hidden 8
--epochs 3
--batches 3
--min-indices 1
--max-indices 9
--data synthetic
--seed 5
--weights
--sparse-reduce mean
FLAGS
    for setting in EMBER_CONSISTENCY=async EMBER_SEED=3; do
        env "$setting" timeout 10 "$train" --replay "$file" >"$work/out" 2>&1
        [ $? -eq 2 ] || fail "--replay with $setting was not refused"
        grep -q "${setting%=*}.* cannot be honoured with --replay" "$work/out" ||
            fail "--replay with $setting: no refusal naming it"
    done
    grep -q "the file trains with 2 trainers" <(timeout 10 "$train" --replay "$file" \
        --trainers 3 2>&1) || fail "--trainers 3 is not told the file's 2"
    # What a replay can honour, it does: sync consistency, more PS, and flags
    # that say what the file says (slurm/hybrid.sbatch passes --trainers).
    timeout 120 "$run" -n 5 "$train" --replay "$file" --consistency sync --ps 2 \
        --trainers 2 --rows 100 --dim 16 --classes 8 --mode sum --optimizer sgd \
        --lr 0.05 --momentum 0 --sparse-reduce sum >"$work/out" 2>&1 ||
        fail "--replay with the file's own settings exited $?"
    grep -q "all within" "$work/out" || fail "that replay did not match"
    ;;
replay_check)
    file=$golden/seed_sum_2t.safetensors
    "$build/tests/train/make_bad_replay" "$file" "$work/off.safetensors" expected_off 0 0 ||
        fail "cannot make the shifted file"
    "$build/tests/train/make_bad_replay" "$file" "$work/none.safetensors" no_expected 0 0 ||
        fail "cannot make the file without expected values"
    timeout 120 "$run" -n 4 "$train" --replay "$work/off.safetensors" >"$work/out" 2>&1
    rc=$?
    [ $rc -eq 1 ] || fail "a run 0.01 off its expected values exited $rc, not 1"
    grep -q "fc.bias max |diff| 0.01 .*BEYOND the tolerance 0.0001" "$work/out" ||
        fail "the shifted run does not say what is off"
    timeout 120 "$run" -n 4 "$train" --replay "$work/off.safetensors" --replay-tolerance 0.02 \
        >"$work/out" 2>&1 || fail "within --replay-tolerance 0.02 exited $?"
    grep -q "all within 0.02" "$work/out" || fail "no verdict within 0.02"
    timeout 120 "$run" -n 4 "$train" --replay "$work/none.safetensors" >"$work/out" 2>&1 ||
        fail "a file without expected values exited $?"
    grep -q "holds no expected values; nothing was checked" "$work/out" ||
        fail "the run claims a check it did not make"
    grep -q "all within\|BEYOND" "$work/out" && fail "a verdict without expected values"
    ;;
weights_drawn)
    for w in with without; do
        flag=()
        [ $w = with ] && flag=(--weights)
        timeout 60 "$run" -n 4 "$train" --epochs 2 --seed 7 "${flag[@]}" >"$work/$w" 2>&1 ||
            { cp "$work/$w" "$work/out"; fail "--epochs 2 $w --weights exited $?"; }
    done
    a=$(grep -o "last step's loss [0-9.]*" "$work/with") b=$(grep -o "last step's loss [0-9.]*" "$work/without")
    [ -n "$a" ] && [ -n "$b" ] || fail "no last loss"
    [ "$a" != "$b" ] || fail "--weights changed nothing ($a)"
    ;;
save_names:*)
    # The file's names, shapes and bytes as PyTorch's module takes them, and
    # what they mean: the module holding them computes, on each trainer's
    # next batch (ember's own, bench/peers/tutorial_batches), the loss the
    # same job one step longer records there.
    hidden=${case_name#save_names:}
    job=(--rows 50 --dim 8 --classes 4 --mode mean --min-indices 20 --max-indices 50 --seed 5)
    [ "$hidden" = - ] || job+=(--hidden "$hidden")
    timeout 120 "$run" -n 4 "$train" "${job[@]}" --epochs 2 --batches 3 \
        --save "$work/out.safetensors" >"$work/out" 2>&1 || fail "ember-train exited $?"
    timeout 120 "$run" -n 4 "$train" "${job[@]}" --epochs 1 --batches 7 \
        --save "$work/longer.safetensors" >"$work/out" 2>&1 || fail "the longer job exited $?"
    "$build/bench/peers/tutorial_batches" --rows 50 --classes 4 --min-indices 20 \
        --max-indices 50 --seed 5 --trainers 2 --steps 7 --out "$work/batches.safetensors" \
        >"$work/out" 2>&1 || fail "tutorial_batches exited $?"
    ${EMBER_TORCH_PYTHON:-/usr/bin/python3} "$(dirname "$0")/load_strict.py" \
        "$work/out.safetensors" 50 8 4 mean ${hidden/#-/} \
        --next "$work/batches.safetensors" "$work/longer.safetensors" >>"$work/out" 2>&1 ||
        fail "the saved file is not the PyTorch module's, or does not mean what it says"
    tail -2 "$work/out"
    ;;
*)
    echo "unknown case $case_name"; exit 2 ;;
esac
echo "$case_name: passed"

#!/usr/bin/env bash
# tests/bench/test_bench.sh CASE BUILD_DIR: run one small ember-bench mode and
# check its output format and that nothing came back wrong.  Never timings.
# Exit 0 pass, 1 fail, 77 skip.
set -uo pipefail
case_name=$1
build=$2
run=$build/tools/ember-run
bench=$build/bench/ember-bench
out=$(mktemp)
trap 'rm -f "$out"' EXIT
fail() { echo "FAIL ($case_name): $*" >&2; echo "--- output:" >&2; cat "$out" >&2; exit 1; }
skip() { echo "SKIP ($case_name): $*"; exit 77; } # CTest shows the reason with the skip
export UCX_NET_DEVICES=lo EMBER_LOG_LEVEL=${EMBER_LOG_LEVEL:-warn}

# Data rows of an nccl-tests table: 13 columns, numbers, #wrong (9, 13) == 0.
check_nccl_format() { # expected_rows
    grep -q '^# nThread 1 nGpus 0 nRanks' "$out" || fail "no nccl-tests header"
    grep -Eq '^# +size +count +type +redop +root +time +algbw +busbw +#wrong +time +algbw +busbw +#wrong$' "$out" ||
        fail "no column header"
    grep -q 'out-of-place.*in-place' "$out" || fail "no out-of-place/in-place header"
    rows=$(awk '!/^#/ && NF' "$out" | awk 'NF == 13 && $3 == "float" && ($4 == "sum" || $4 == "avg") && $5 == -1 &&
        $1 == $2 * 4 && $6 > 0 && $10 > 0 && $9 == 0 && $13 == 0 { ok++ } END { print ok + 0 }')
    all=$(awk '!/^#/ && NF' "$out" | wc -l)
    [[ $rows == "$1" && $all == "$1" ]] || fail "expected $1 well-formed rows with #wrong 0, got $rows of $all"
    # busbw = algbw x 2(n-1)/n (to the printed precision)
    n=$(sed -n 's/^# nThread 1 nGpus 0 nRanks \([0-9]*\).*/\1/p' "$out")
    awk -v n="$n" '!/^#/ && NF == 13 { want = $7 * 2 * (n - 1) / n
        if ($8 - want > 0.011 || want - $8 > 0.011) exit 1 }' "$out" || fail "busbw != algbw x 2(n-1)/n"
    grep -q '^# Out of bounds values : 0 OK$' "$out" || fail "out of bounds values not 0 OK"
    grep -Eq '^# Avg bus bandwidth    : [0-9.e+-]+ ?$' "$out" || fail "no avg bus bandwidth"
}

# ember-bench lookup: N data rows of 23 columns with #wrong 0 and a PS service
# time (ps_us) above 0, csv of 26 fields (the rows' and the replies' dtypes
# last).
check_lookup_format() { # expected_rows
    grep -Eq '^mode +ps +cli +dist +bags +idx +dim +dtype +reply +req_B +resp_B +rows/s +GB/s +req/s +p50_us +p90_us +p99_us +p99.9_us +max_us +ps_us +grad_rows/s +%pf +#wrong +thr +cmp_us$' "$out" ||
        fail "no column header"
    rows=$(awk '($1 == "closed" || $1 == "open") && NF == 25 && $23 == 0 && $20 > 0 && $24 >= 1 && $25 <= $20 && ($8 == "fp32" || $8 == "fp16") && ($9 == "fp32" || $9 == "fp16") && $11 == $2 * $5 * $7 * ($9 == "fp16" ? 2 : 4) { ok++ } END { print ok + 0 }' "$out")
    [[ $rows == "$1" ]] || fail "expected $1 rows with #wrong 0, ps_us > 0 and resp_B = ps x bags x dim x 4 (2 for fp16 replies), got $rows"
    csv=$(awk -F, '/^csv,lookup,/ && NF == 28 && $22 == 0 && $24 > 0 && $27 >= 1 && ($25 == "fp32" || $25 == "fp16") && ($26 == "fp32" || $26 == "fp16") { ok++ } END { print ok + 0 }' "$out")
    [[ $csv == "$1" ]] || fail "expected $1 csv lines, got $csv"
    grep -q '^# wrong replies: 0 OK$' "$out" || fail "wrong replies not 0 OK"
}

case $case_name in
rpc)
    # Sizes 8 to 64 KiB (eager and rendezvous): every reply checked by the
    # benchmark itself, each echo byte for byte; what it counted is what
    # it sent: an untimed echo per size and 55 timed ones (-w 5 -n 50) of
    # 64 B, 55 acks per size, and 64 + 5 windowed calls (and their warm-up)
    # per size, each with an empty reply.
    "$run" -n 2 --no-prefix "$bench" rpc -e 64K -n 50 -w 5 --csv >"$out" 2>&1 || fail "exit status $?"
    grep -Eq '^ +size +iters +p50_us +p99_us +avg_us +bw_iters +MB/s +msgs/s$' "$out" || fail "no column header"
    sizes=$(grep -c '^csv,rpc,' "$out")
    [[ $sizes == 9 ]] || fail "$sizes csv,rpc lines, not 9 (8 B to 64 KiB by 4, 64 B and 64 KiB)"
    grep -q '^csv,pingpong,' "$out" || fail "no csv,pingpong line"
    grep -q '^# wrong replies: 0 OK$' "$out" || fail "wrong replies not 0 OK"
    grep -q "^# replies checked: $((sizes + 55)) echoes byte for byte, $((sizes * 55)) acks, $((sizes * 69)) empty\$" "$out" ||
        fail "not every reply was checked"
    ;;
lookup)
    "$run" -n 3 --no-prefix "$bench" lookup --ps 2 --bags 1,8 --pool 4 --dim 8 \
        --dist uniform,zipf:1.1 --rows 1000 -n 60 -w 10 --slots 16 --window 4 --csv >"$out" 2>&1 ||
        fail "exit status $?"
    check_lookup_format 4
    grep -q '^# closed loop' "$out" || fail "not the closed loop"
    grep -q '^# requests batched: up to 2 lookups' "$out" || fail "not batched by half the window"
    # Each request alone, and batches of 3 (not a divisor of the window).
    for batch in 0 3; do
        "$run" -n 3 --no-prefix "$bench" lookup --ps 2 --bags 1,8 --pool 4 --dim 8 --dist uniform \
            --rows 1000 -n 60 -w 10 --slots 16 --window 4 --batch $batch --csv >"$out" 2>&1 ||
            fail "exit status $? (--batch $batch)"
        check_lookup_format 2
        if [[ $batch == 0 ]]; then
            grep -q '^# requests not batched' "$out" || fail "--batch 0 not said"
        fi
    done
    grep -q '^# requests batched: up to 3 lookups' "$out" || fail "--batch 3 not said"
    # --ps-threads: the sweep once per value, against PS started afresh.
    "$run" -n 2 --no-prefix "$bench" lookup --ps 1 --bags 1,8 --pool 4 --dim 8 --dist uniform \
        --rows 1000 -n 40 -w 5 --slots 8 --window 4 --ps-threads 1,3 --csv >"$out" 2>&1 ||
        fail "--ps-threads 1,3: exit status $?"
    [[ $(awk '$1 == "closed" && $24 == 1' "$out" | wc -l) == 2 &&
        $(awk '$1 == "closed" && $24 == 3' "$out" | wc -l) == 2 ]] ||
        fail "--ps-threads 1,3: not 2 rows of each"
    [[ $(grep -c '^mode ' "$out") == 1 ]] || fail "--ps-threads 1,3: the header twice"
    "$run" -n 2 --no-prefix "$bench" lookup --ps-threads 1025 >"$out" 2>&1 &&
        fail "--ps-threads 1025 was accepted"
    grep -q -- "--ps-threads 1025 is above 1024" "$out" || fail "--ps-threads 1025 is not named"
    ;;
lookup_fp16)
    # The PS's rows stored as fp16, beside fp32 in one sweep: every reply
    # checked against the pooling of the rows read back (-c 1, the default),
    # with sum pooling of several rows, across two shards.
    # Replies in fp16 too: checked against the same pooling, rounded.
    "$run" -n 3 --no-prefix "$bench" lookup --ps 2 --bags 1,8 --pool 3 --dim 24 --dtype fp32,fp16 \
        --reply-dtype fp32,fp16 --dist uniform --rows 1000 -n 60 -w 10 --slots 16 --window 4 \
        --csv >"$out" 2>&1 || fail "exit status $?"
    check_lookup_format 8
    [[ $(awk -F, '/^csv,lookup,/ && $25 == "fp16"' "$out" | wc -l) == 4 ]] || fail "not 4 rows of fp16 rows"
    [[ $(awk -F, '/^csv,lookup,/ && $26 == "fp16" && $11 == 2 * $7 * $9 * 2' "$out" | wc -l) == 4 ]] ||
        fail "not 4 rows of fp16 replies of half the bytes"
    grep -Eq '^# fp16 rows converted (with F16C|by portable code)' "$out" || fail "no word on the conversions"
    "$run" -n 2 --no-prefix "$bench" lookup --dtype fp8 >"$out" 2>&1 && fail "--dtype fp8 was accepted"
    grep -q "bad dtype list 'fp8'" "$out" || fail "no message naming the dtype"
    ;;
fp16_compare)
    # bench/fp16_compare.sh (the docs' fp16 tables): one tiny round, both
    # dtypes at every point, rows (with the table's two sizes) and replies.
    # Never timings.
    for what in rows replies; do
        BUILD=$build ROUNDS=1 ROWS=2000 BAGS=4,16 POOL=1,3 ITERS=200 WHAT=$what \
            bash "$(dirname "$0")/../../bench/fp16_compare.sh" >"$out" 2>&1 || fail "exit status $? ($what)"
        rows=$(awk '$1 ~ /^[0-9]+$/ && $3 == "|" && NF == 14 && $4 > 0 && $5 > 0 && $7 > 0 && $8 > 0 { ok++ } END { print ok + 0 }' "$out")
        [[ $rows == 4 ]] || fail "expected 4 rows of figures ($what), got $rows"
        grep -q "^# $what\$" "$out" || fail "not the $what comparison"
    done
    grep -q '^# table on the PS' "$out" && fail "a table size with replies"
    BUILD=$build ROUNDS=1 ROWS=2000 BAGS=4 POOL=1 ITERS=200 \
        bash "$(dirname "$0")/../../bench/fp16_compare.sh" >"$out" 2>&1 || fail "exit status $?"
    grep -q '^# table on the PS: 0.5 MiB fp32, 0.2 MiB fp16$' "$out" || fail "no table sizes"
    ;;
staleness)
    # bench/staleness.sh (the docs' staleness table) on a tiny DLRM: a line
    # per round and K, then a row per K (K 0's ratio 1.00 and AUC diff
    # +0.0000, no staleness seen; K 1, 2 one of 1 .. K); bad settings are
    # refused before anything runs.  Never timings.
    bench=$(dirname "$0")/../../bench/staleness.sh
    BUILD=$build STEPS=3 ROUNDS=2 ROWS=1000 BATCH=64 EVAL_EXAMPLES=500 EMBER_DATA=tsv \
        bash "$bench" >"$out" 2>&1 || fail "exit status $?"
    [[ $(grep -cE '^round [12]  K [012] +[0-9]+\.[0-9] ex/s  AUC 0\.[0-9]+  staleness seen [0-2]$' "$out") == 6 ]] ||
        fail "not 6 round lines (2 rounds x K 0, 1, 2)"
    grep -qE '^staleness +ex/s +ratio +AUC +AUC diff +seen$' "$out" || fail "no table header"
    grep -qE '^0 +[0-9]+\.[0-9] +1\.00 +0\.[0-9]{6} +\+0\.0000 +0$' "$out" || fail "no K 0 row"
    grep -qE '^1 +[0-9]+\.[0-9] +[0-9]+\.[0-9]{2} +0\.[0-9]{6} +[+-][0-9]\.[0-9]{4} +1$' "$out" ||
        fail "no K 1 row (staleness seen 1)"
    grep -qE '^2 +[0-9]+\.[0-9] +[0-9]+\.[0-9]{2} +0\.[0-9]{6} +[+-][0-9]\.[0-9]{4} +[12]$' "$out" ||
        fail "no K 2 row (staleness seen 1 or 2)"
    KS="1 2" BUILD=$build bash "$bench" >"$out" 2>&1
    [[ $? == 2 ]] && grep -q "must hold 0" "$out" || fail "KS without 0 was accepted"
    STEPS=3x BUILD=$build bash "$bench" >"$out" 2>&1
    [[ $? == 2 ]] && grep -q "'3x' is not a positive integer" "$out" || fail "STEPS=3x was accepted"
    KS="0 17" BUILD=$build bash "$bench" >"$out" 2>&1
    [[ $? == 2 ]] && grep -q "'17' is not a staleness" "$out" || fail "KS 17 was accepted"
    ;;
profile)
    # bench/profile.sh tiny: each job's phase table (both trainers, 8
    # percentages), each process's CPU seconds; bad settings refused.
    prof=$(dirname "$0")/../../bench/profile.sh
    BUILD=$build ROWS=2000 BATCH=64 STEPS=4 bash "$prof" >"$out" 2>&1 || fail "exit status $?"
    for job in table dlrm; do
        grep -q "^## $job: done: " "$out" || fail "no $job line"
    done
    [[ $(grep -Ec '^trainer[01] +[0-9.]+( +[0-9.]+%){8}$' "$out") == 4 ]] ||
        fail "not 2 jobs x 2 trainers' phase rows"
    [[ $(grep -Ec '^(trainer[01]|master|ps0) +[0-9.]+ +[0-9.]+ +[0-9.]+$' "$out") == 8 ]] ||
        fail "not 2 jobs x 4 processes' CPU rows"
    for bad in "STEPS=0" "JOBS=gpu" "PERF=2" "ROWS=-1"; do
        # shellcheck disable=SC2086 # one setting
        env $bad BUILD=$build bash "$prof" >"$out" 2>&1 && fail "$bad accepted"
        grep -q "^profile: " "$out" || fail "$bad: no error line"
    done
    ;;
dynamic_vs_fixed)
    # bench/dynamic_vs_fixed.sh (the docs' dynamic tables section) tiny, one
    # round of each part: a row per round with both rates and their ratio,
    # the memory lines, the churn rows (the table full, rows evicted), the
    # summary's 8 lines each with its figure and verdict; bad settings
    # refused before anything runs.  Never timings.
    dyn=$(dirname "$0")/../../bench/dynamic_vs_fixed.sh
    BUILD=$build ROUNDS=1 ROWS=5000 DIM=16 EPOCHS=2 BATCHES=5 MIN_INDICES=100 MAX_INDICES=200 \
        DLRM_ROWS=1000 DLRM_STEPS=2 BATCH=128 EMBER_DATA=tsv BUDGET=3000 CHURN_STEPS=40 LOG_EVERY=2 \
        bash "$dyn" >"$out" 2>&1 || fail "exit status $?"
    # round, fixed, dynamic, ratio = dynamic / fixed to 3 decimals, ...
    [[ $(awk '$1 == 1 && (NF == 6 || NF == 9 && $7 == "M" && $9 == "M") && $2 > 0 && $3 > 0 &&
        sprintf("%.3f", $3 / $2) == $4 && $5 > 0' "$out" | wc -l) == 2 ]] ||
        fail "not two throughput rows (tutorial, dlrm) of two rates, their ratio and the rows held"
    awk '$1 == 1 && NF == 4 && $2 > 0 && $3 > 0 && sprintf("%.3f", $3 / $2) == $4' "$out" |
        grep -q . || fail "no warm throughput row (both rates and their ratio)"
    grep -Eq '^rows held N [1-9][0-9]*: N x 128 B = [0-9.]+ MiB$' "$out" || fail "no rows held line"
    grep -Eq '^table bytes \(dynamic_table\): [0-9.]+ MiB, [0-9.]+ B a row: [0-9.]+x$' "$out" ||
        fail "no table bytes line"
    grep -Eq '^PS resident: [0-9.]+ MiB, [0-9.]+ MiB with [0-9]+ rows \(an empty table\): growth -?[0-9.]+ MiB: -?[0-9.]+x$' "$out" ||
        fail "no PS resident line"
    # churn: before, after, ratio, RSS min/max (or - when too short), flat, admitted > evicted > 0
    awk '$1 == 1 && (NF == 9 && $5 == "-" || NF == 11 && $6 == "M" && $8 == "M") && $2 > 0 && $3 > 0 &&
        sprintf("%.3f", $3 / $2) == $4 && $(NF - 1) > $NF && $NF > 0' "$out" | grep -q . ||
        fail "no churn row"
    grep -q '^== summary: dynamic tables (medians of 1 rounds' "$out" || fail "no summary"
    [[ $(sed -n '/^== summary/,$p' "$out" | grep -Ec '(-?[0-9]+\.[0-9]+%?|-) +(target (>=|<=) [0-9.]+%?: (PASS|MISS|-)|\(no target)') == 8 ]] ||
        fail "not 8 summary lines each with a figure and a verdict"
    for bad in "ROUNDS=0" "PARTS=speed" "EVICT=fifo" "EMBER_DATA=csv" "MIN_INDICES=9 MAX_INDICES=3" \
        "BUDGET=100 CHURN_ROWS=100"; do
        # shellcheck disable=SC2086 # one or two settings
        env BUILD="$build" $bad bash "$dyn" >"$out" 2>&1
        [[ $? == 2 ]] && grep -q '^dynamic_vs_fixed: ' "$out" || fail "$bad was not refused"
    done
    ;;
checkpoint)
    # bench/checkpoint.sh (the docs' checkpoint table) on a tiny table: its
    # table is whole, the file holds the rows, the checkpointing run writes
    # one every EVERY steps, and bad sizes are refused before anything runs.
    # Never timings.
    ckpt=$(dirname "$0")/../../bench/checkpoint.sh
    BUILD=$build DIR=$build ROWS=20000 DIM=16 WRITE_BATCHES=4 EPOCHS=2 BATCHES=10 EVERY=5 \
        ROUNDS=1 MIN_INDICES=20 MAX_INDICES=50 DROP_CACHES=0 bash "$ckpt" >"$out" 2>&1 ||
        fail "exit status $?"
    [[ $(grep -c '^|' "$out") == 13 ]] || fail "not a table of a header, a rule and 11 rows"
    # 20,000 x 16 fp32 rows and the trainers' two small files
    grep -q '^| checkpoint write: 1\.2 MiB in [0-9.]* s | \([0-9]* MB/s | dd write | [0-9]*% | >= 70%: \(PASS\|MISS\)\|- MB/s | dd write | -% | >= 70%: -\) |$' "$out" ||
        fail "no checkpoint write row of 1.2 MiB"
    [[ $(grep -c '^    checkpoint after step \(5\|10\|15\|20\): ' "$out") == 4 ]] ||
        fail "not 4 checkpoints (steps 5, 10, 15, 20) in the checkpointing run"
    grep -q '^resuming from .*/step-000000000004 (step 4)$' "$out" || fail "the load did not resume step 4"
    grep -q 'page cache left (DROP_CACHES=0)' "$out" || fail "the page cache left is not said"
    grep -q '^| training, a checkpoint every 5 steps (keep 2) | [0-9]* steps/s | .* | >= 95%: \(PASS\|MISS\) |$' "$out" ||
        fail "no training row"
    [[ -z $(find "$build" -maxdepth 1 -name '.ember-ckptbench.*') ]] || fail "its folder was left"
    ROWS=12x bash "$ckpt" >"$out" 2>&1
    [[ $? == 2 ]] || fail "ROWS=12x was accepted"
    grep -q "'12x' is not a positive integer" "$out" || fail "ROWS=12x is not named"
    BUILD=$build MIN_INDICES=9 MAX_INDICES=3 bash "$ckpt" >"$out" 2>&1
    [[ $? == 2 ]] || fail "MIN_INDICES above MAX_INDICES was accepted"
    ;;
lookup_threads)
    # bench/lookup_threads.sh (the docs' --ps-threads table) on two small
    # sizes and 1, 2 threads over shared memory: one row per size and
    # thread count, each with both verdicts; bad settings refused by name.
    # Never timings.
    script=$(dirname "$0")/../../bench/lookup_threads.sh
    BUILD=$build SIZES="4 16" THREADS="1 2" TLS_LIST=sm LK_ITERS=200 GATHER_ITERS=50 \
        bash "$script" >"$out" 2>&1
    rc=$?
    [[ $rc == 0 || $rc == 1 ]] || fail "exit status $rc"
    grep -q '^=== UCX_TLS=sm,self: 1 client + 1 PS' "$out" || fail "no shared-memory table"
    grep -q -- '--ps-threads 1,2 --csv$' "$out" || fail "the command is not shown"
    num='[0-9.e+]*'
    rows=$(grep -c "^ *\(4096\|16384\)   [12] | *$num *$num | *$num *[0-9]*% \(PASS\|MISS\) *| *$num *$num *[0-9]*% \(PASS\|MISS\) *| *-\?[0-9]*% *-\?[0-9]*% *-\?[0-9]*%$" "$out")
    [[ $rows == 4 ]] || fail "$rows rows of 2 sizes x 2 thread counts, not 4"
    grep -q '^targets missed: [0-9]*$' "$out" || fail "no count of targets missed"
    THREADS="1 0" BUILD=$build bash "$script" >"$out" 2>&1
    [[ $? == 2 ]] || fail "THREADS=0 was accepted"
    grep -q "THREADS '0' is not a positive integer" "$out" || fail "THREADS=0 is not named"
    ;;

dlrm_gpu)
    # bench/dlrm_gpu.sh (the GPU check's DLRM row) tiny, both on the CPU
    # (DEVICE=cpu): its header, both sides timed alike (the script refuses
    # otherwise), its row of two rates and their ratio; bad settings
    # refused.  PYTHON (argv 3): one with torch and numpy.
    script=$(cd "$(dirname "$0")/../.." && pwd)/bench/dlrm_gpu.sh
    export PYTHON=${3:-python3}
    "$PYTHON" -c 'import torch, numpy' 2>/dev/null || skip "no torch or numpy in $PYTHON"
    DEVICE=cpu CONFIG=tiny STEPS=4 bash "$script" "$build" >"$out" 2>&1 || fail "exit status $?"
    grep -q '^# ember: 1 trainer --device cpu, 1 PS --ps-device cpu' "$out" || fail "no line saying what ran"
    grep -q '^# timed alike: the second of two passes over the same 4 batches on each side' "$out" ||
        fail "no line saying both sides are timed alike"
    grep -Eq '^dlrm tiny +ember ex/s +torch ex/s +ratio$' "$out" || fail "no column header"
    awk '$1 == "cpu/cpu" && NF == 4 && $2 > 0 && $3 > 0 && $4 > 0 && ($2 / $3 - $4) ^ 2 < 0.0001 + 0.0001 * $4 { ok = 1 }
        END { exit !ok }' "$out" || fail "no row of two rates and their ratio"
    for bad in "DEVICE=tpu" "CONFIG=c" "STEPS=0" "OPTIMIZER=adam" "PS_DEVICE=gpu"; do
        env DEVICE=cpu "$bad" bash "$script" "$build" >"$out" 2>&1
        [ $? -eq 2 ] || fail "$bad was not refused with exit 2"
    done
    bash "$script" "$build/none" >"$out" 2>&1
    [ $? -eq 2 ] || fail "a missing build folder was not refused"
    ;;
train_vs_torchrec)
    # bench/train_vs_torchrec.sh (the docs' TorchRec table) at a few steps of
    # a small table: its rows, medians and target lines, both jobs timing the
    # same bags (the script refuses otherwise), EMBER_FLAGS reaching
    # ember-train, bad settings refused. Never timings. Skipped without the
    # TorchRec venv (scripts/torchrec-venv.sh).
    repo=$(cd "$(dirname "$0")/../.." && pwd)
    venv=${EMBER_TORCHREC_VENV:-$repo/.venv-torchrec}
    [[ -x $venv/bin/python ]] || skip "no TorchRec venv at $venv (scripts/torchrec-venv.sh makes it)"
    script=$repo/bench/train_vs_torchrec.sh
    export EMBER_TORCHREC_VENV=$venv
    BUILD=$build ROUNDS=1 ROWS=10000 STEPS=2 WARMUP=1 DLRM_STEPS=2 bash "$script" >"$out" 2>&1 ||
        fail "exit status $?"
    grep -q '^# the same bags on both sides .*steps 2-3 timed, the first 1 left out on both' "$out" ||
        fail "no line saying what is timed"
    grep -Eq '^round +ember bags/s +torchrec bags/s +ratio +timed bags +load$' "$out" ||
        fail "no large-table header"
    grep -Eq '^round +ember ex/s +torchrec ex/s +ratio +load$' "$out" || fail "no DLRM header"
    # round, both rates, ratio = ember / torchrec to 2 decimals, bags, load
    awk '$1 == 1 && NF == 6 && $2 > 0 && $3 > 0 && $5 ~ /^[1-9][0-9]*$/ && $6 ~ /^[0-9]+\.[0-9]+$/ &&
         sprintf("%.2f", $2 / $3) == $4 { ok = 1 } END { exit !ok }' "$out" ||
        fail "no large-table row of two rates, their ratio, the bags and the load"
    awk '$1 == 1 && NF == 5 && $2 > 0 && $3 > 0 && (sprintf("%.2f", $2 / $3) - $4)^2 < 0.0001 &&
         $5 ~ /^[0-9]+\.[0-9]+$/ { ok = 1 } END { exit !ok }' "$out" ||
        fail "no DLRM row of two rates, their ratio and the load"
    [[ $(grep -Ec '^median ratio: [0-9]+\.[0-9]{2}x$' "$out") == 2 ]] || fail "not two medians"
    # each target line's verdict is its median's (one round: the row's ratio)
    awk '/^median ratio:/ { m = substr($3, 1, length($3) - 1) }
         /^target: >= [34]x TorchRec.s examples\/s, sync mode: (PASS|MISS) / {
             t = substr($3, 1, 1) + 0
             n++; if (($8 == "PASS") != (m >= t) || $9 != "(" m "x)") bad = 1 }
         END { exit bad || n != 2 }' "$out" || fail "target lines not two, or not their medians'"
    # The peer trains ember's model: from the peer's initial weights
    # (--save-init, ember-train --init) on the same batches, every trainer's
    # loss at every step agrees within 1e-5 (ember with --sparse-reduce mean,
    # the wrong semantics, parts from it by more than that within 6 steps).
    dir=$(mktemp -d)
    trap 'rm -f "$out"; rm -rf "$dir"' EXIT
    job=(--rows 1000 --classes 8 --min-indices 200 --max-indices 400 --seed 3)
    "$build/bench/peers/tutorial_batches" "${job[@]}" --trainers 2 --steps 6 \
        --out "$dir/batches.st" >"$out" 2>&1 || fail "tutorial_batches: exit status $?"
    "$venv/bin/python" "$repo/bench/peers/torchrec_bag.py" --batches "$dir/batches.st" --dim 16 \
        --warmup-steps 1 --losses --save-init "$dir/init.st" >"$out" 2>&1 || fail "peer: exit status $?"
    cp "$out" "$dir/peer.log"
    "$run" -n 4 "$build/tools/ember-train" "${job[@]}" --dim 16 --trainers 2 --ps 1 \
        --epochs 2 --batches 3 --init "$dir/init.st" --save "$dir/ember.st" >"$out" 2>&1 ||
        fail "ember-train --init: exit status $?"
    /usr/bin/python3 - "$dir/ember.st" "$dir/peer.log" >"$out" 2>&1 <<'EOF' || fail "losses differ"
import json, struct, sys
with open(sys.argv[1], "rb") as f:
    meta = json.loads(f.read(struct.unpack("<Q", f.read(8))[0]))["__metadata__"]
ember = [float(x) for x in meta["losses"].split(",")]
peer = [float(x) for line in open(sys.argv[2]) if line.startswith("loss step ")
        for x in line.split(":")[1].split()]
assert meta["losses_shape"] == "6,2" and len(peer) == 12, (meta["losses_shape"], len(peer))
worst = max(abs(a - b) for a, b in zip(ember, peer))
print(f"largest loss difference {worst:.3g}")
sys.exit(worst > 1e-5)
EOF
    BUILD=$build ROUNDS=1 ROWS=1000 STEPS=2 WARMUP=1 DLRM=0 EMBER_FLAGS="--no-such-flag" \
        bash "$script" >"$out" 2>&1
    [[ $? == 2 ]] || fail "an EMBER_FLAGS flag ember-train refuses did not fail the run"
    grep -q 'no-such-flag' "$out" || fail "ember-train's refusal of EMBER_FLAGS not shown"
    BUILD=$build EMBER_FLAGS="--rows 5" bash "$script" >"$out" 2>&1
    [[ $? == 2 ]] && grep -q "EMBER_FLAGS: --rows is the benchmark's own" "$out" ||
        fail "EMBER_FLAGS --rows was accepted"
    BUILD=$build STEPS=15 WARMUP=10 bash "$script" >"$out" 2>&1
    [[ $? == 2 ]] && grep -q 'STEPS 15 is not a multiple of WARMUP 10' "$out" ||
        fail "STEPS not a multiple of WARMUP was accepted"
    BUILD=$build ROUNDS=0 bash "$script" >"$out" 2>&1
    [[ $? == 2 ]] && grep -q "ROUNDS '0' is not a positive integer" "$out" || fail "ROUNDS=0 was accepted"
    ;;
lookup_clients)
    "$run" -n 4 --no-prefix "$bench" lookup --ps 2 --bags 3 --pool 5 --dim 4 --rows 97 \
        --dist uniform -n 40 -w 5 --slots 8 --window 8 --csv >"$out" 2>&1 || fail "exit status $?"
    check_lookup_format 1
    awk '$1 == "closed" && $3 == 2' "$out" | grep -q . || fail "not 2 clients"
    ;;
lookup_open)
    "$run" -n 2 --no-prefix "$bench" lookup --ps 1 --bags 2 --pool 2 --dim 16 --rows 500 \
        --dist zipf:0.9 -n 100 -w 10 --rate 2000 --csv >"$out" 2>&1 || fail "exit status $?"
    check_lookup_format 1
    grep -q '^# open loop' "$out" || fail "not the open loop"
    grep -q '^# requests batched: the lookups and pushes due together' "$out" || fail "batching not said"
    ;;
row_gather)
    # The PS's reference: one line per bag count, resp_B = bags x dim x 4,
    # a positive rate; with --beside-copy too.  Never timings.
    gather=$build/bench/peers/row_gather
    for extra in "" "--beside-copy 0"; do
        # shellcheck disable=SC2086
        "$gather" --rows 1000 --dim 16 --bags 1,8,64 -n 50 --window 4 $extra >"$out" 2>&1 ||
            fail "exit status $? ($extra)"
        rows=$(awk '!/^#/ && NF == 4 && $2 == $1 * 16 * 4 && $3 > 0 && $4 > 0 { ok++ } END { print ok + 0 }' "$out")
        [[ $rows == 3 ]] || fail "expected 3 well-formed rows ($extra), got $rows"
    done
    "$gather" --bags 0 >"$out" 2>&1
    [[ $? == 2 ]] || fail "0 bags was accepted"
    ;;
ab_usage)
    # bench/ab.sh refuses what it cannot run before building anything.
    ab=$(dirname "$0")/../../bench/ab.sh
    bash "$ab" >"$out" 2>&1
    [[ $? == 2 ]] || fail "no arguments: exit status not 2"
    grep -q 'bench/ab.sh \[-n ROUNDS\] REV_A REV_B -- COMMAND' "$out" || fail "no usage text"
    bash "$ab" HEAD HEAD true >"$out" 2>&1
    [[ $? == 2 ]] || fail "a command without -- was accepted"
    bash "$ab" ember-no-such-revision HEAD -- true >"$out" 2>&1
    [[ $? == 2 ]] || fail "an unknown revision was accepted"
    grep -q 'cannot check out ember-no-such-revision' "$out" || fail "the unknown revision is not named"
    ;;
lookup_usage)
    "$run" -n 1 --no-prefix "$bench" lookup --ps 1 >"$out" 2>&1 && fail "1 rank with 1 PS was accepted"
    grep -q 'cannot hold 1 PS and a client' "$out" || fail "no usage message"
    ;;
allreduce2 | allreduce3)
    n=${case_name#allreduce}
    "$run" -n "$n" --no-prefix "$bench" allreduce -b 8 -e 256K -f 4 -n 3 -w 1 -c 1 >"$out" 2>&1 ||
        fail "exit status $?"
    check_nccl_format 8
    ;;
allreduce_avg)
    "$run" -n 2 --no-prefix "$bench" allreduce -b 1K -e 64K -f 8 -n 2 -w 0 -o avg >"$out" 2>&1 ||
        fail "exit status $?"
    check_nccl_format 3
    ;;
allreduce_device)
    # The device-interface path (as the trainer reduces) on its CPU backend.
    "$run" -n 3 --no-prefix "$bench" allreduce -b 8 -e 256K -f 4 -n 3 -w 1 -c 1 \
        --backend cpu-device >"$out" 2>&1 || fail "exit status $?"
    check_nccl_format 8
    grep -q 'backend cpu-device' "$out" || fail "not the cpu-device backend"
    ;;
allreduce_nccl)
    # One rank: NCCL needs a GPU per rank, and one is the most a test can ask.
    "$run" -n 1 --no-prefix "$bench" allreduce --backend nccl -b 8 -e 256K -f 4 -n 3 \
        -w 1 -c 1 >"$out" 2>&1
    rc=$?
    if [[ $rc == 77 ]]; then
        grep -q 'skipped' "$out" || fail "no skip message"
        skip "$(grep -m1 'skipped' "$out")"
    fi
    [[ $rc == 0 ]] || fail "exit status $rc"
    check_nccl_format 8
    ;;
mpi_allreduce)
    [[ -x $build/bench/peers/mpi_allreduce ]] || skip "$build/bench/peers/mpi_allreduce was not built"
    command -v mpirun >/dev/null || skip "no mpirun on PATH (Open MPI's mpirun runs the MPI peer)"
    mpirun --allow-run-as-root --oversubscribe -n 2 --mca btl self,vader,tcp \
        --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo \
        "$build/bench/peers/mpi_allreduce" -b 8 -e 256K -f 4 -n 3 -w 1 -c 1 >"$out" 2>&1 ||
        fail "exit status $?"
    check_nccl_format 8
    ;;
torch_bag_gpu)
    # The PyTorch peer of ember-bench-gpu on the CPU at tiny sizes: every
    # dim x mode x optimizer row, in both formats, positive times and rates.
    py=${EMBER_TORCH_PYTHON:-python3}
    "$py" -c 'import torch' 2>/dev/null || skip "no torch in $py (EMBER_TORCH_PYTHON)"
    repo=$(cd "$(dirname "$0")/../.." && pwd)
    "$py" "$repo/bench/peers/torch_bag_gpu.py" --device cpu --bags 64 --len 4 --dims 3,16 \
        --table-bytes 65536 --iters 2 >"$out" 2>&1 || fail "exit status $?"
    grep -Eq '^dim +mode +optim +fwd ms +fwd GB/s +upd ms +upd GB/s$' "$out" || fail "no header"
    grep -q '^# forward bytes = .*2\*unique\*(dim\*4 + state/row' "$out" || fail "no byte counts"
    rows=$(awk '/^(3|16) +(sum|mean|max) +(sgd|adagrad|adam)/ && NF == 7 && $4 > 0 && $6 > 0 {
        ok++ } END { print ok + 0 }' "$out")
    [[ $rows == 18 ]] || fail "expected 18 table rows, got $rows"
    peers=$(grep -cE '^PEER dim=(3|16) mode=(sum|mean|max) optim=[a-z()]+ fwd_ms=[0-9.]+ '\
'fwd_gbs=[0-9.]+ upd_ms=[0-9.]+ upd_gbs=[0-9.]+$' "$out")
    [[ $peers == 18 ]] || fail "expected 18 PEER lines, got $peers"
    grep -q '^PEER dim=16 mode=max optim=sgd(dense)' "$out" || fail "max mode not marked dense"
    ;;
*)
    echo "unknown case $case_name" >&2
    exit 2
    ;;
esac
echo "ok: $case_name"

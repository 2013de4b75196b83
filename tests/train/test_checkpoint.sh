#!/usr/bin/env bash
# Checkpoints and resuming, end to end: real ember-train processes under
# ember-run (or by hand), real files.
# usage: test_checkpoint.sh CASE BUILD_DIR GOLDEN_DIR [PYTHON]
#   resume:MODEL:OPT:P1:S1:P2:S2
#       MODEL (tutorial: --hidden 8 on tutorial data; replay: the golden run
#       seed_sum_2t; dlrm: a small DLRM on generated Criteo data) with OPT
#       (sgd, sgdm: momentum 0.9, adagrad, adam) on P1 PS placed S1 (row or
#       table) writes a checkpoint every few steps and saves its end; the
#       checkpoint of a middle step, resumed alone on P2 PS placed S2, must
#       end where the uninterrupted run ended: bit for bit (tensors and every
#       step's loss) when the layout is the same, within 1e-6 otherwise.
#   signal       SIGUSR1 to a trainer mid-run: a checkpoint and the job goes
#                on; SIGTERM to every rank: a checkpoint, "stopped after step
#                K"; resumed, the job ends bit for bit where the
#                uninterrupted run does
#   signal_run   SIGTERM to ember-run: it forwards it to each rank once, the
#                job stops at a checkpoint, which resumes bit for bit
#   torn:KIND    the newest checkpoint spoiled (truncated: a file cut short;
#                checksum: one byte changed; nomanifest: its files but no
#                manifest, as a kill during the write leaves it): resume
#                takes the one before and says why, and ends bit for bit
#   killwrite    kill -9 of the whole job while a large checkpoint is being
#                written: the next run resumes from the complete one before
#   cow          copy-on-write: a job whose PS writes its checkpoints slowly
#                (EMBER_PS_CKPT_WRITE_RATE, a test-only knob) trains on
#                while each is written, changing rows and Adam's state the
#                write still owes (the PS's log says how many chunks it
#                copied aside: more than 0); its PS file of step 20 equals
#                byte for byte that of a job stopped at step 20 (nothing
#                changes during that write), and its step 10's the same
#                job's step 10
#   killed:RANK  kill -9 of rank RANK (1: trainer1, 3: the PS) mid-run under
#                ember-run --max-restarts 1: the job restarts from its latest
#                checkpoint, says what was lost and from where it goes on, and
#                ends bit for bit where the uninterrupted run does
#   export:MODEL tools/ember-checkpoint.py export of a checkpoint loads into
#                the PyTorch module with load_state_dict(strict=True) and
#                equals the job's --save; --init takes a checkpoint
#   before_api:MODEL  tests/data/checkpoint-main/MODEL, written by ember-train
#                before its models moved onto the library API (its trainer
#                files format 1, the settings a raw struct): --resume is
#                refused saying why and what to do (--init), and --init
#                takes its weights: with lr 0 the job saves them as they are
#                (tools/ember-checkpoint.py's export of the checkpoint)
#   more_steps   a DLRM job stopped by --steps part-way through its epoch,
#                resumed with more steps: the epoch goes on (its line counts
#                every step of it, as the uninterrupted job's does) and the
#                job ends bit for bit where the uninterrupted one does
#   schema       DLRM-DCN on a schema's general format (make_text_data.py:
#                lists, empty bags, a shared table): the checkpoint of a
#                middle step resumes bit for bit and carries the schema; a
#                resume under another schema (one feature's bag bound
#                changed) is refused naming that feature, before training
#   refused      resuming another job (trainers, optimizer, dims), a
#                --checkpoint-dir holding a newer complete checkpoint, the
#                flags without --checkpoint-dir, async mode: each refused
#                naming what, before training
# shellcheck disable=SC2054,SC2015
set -uo pipefail
case_name=$1
build=$(cd "$2" && pwd)
golden=$3
python=${4:-/usr/bin/python3}
here=$(cd "$(dirname "$0")" && pwd)
check=("$python" "$here/dlrm_check.py")
gen=$build/tools/ember-criteo-gen
run=$build/tools/ember-run
tool=("$python" "$here/../../tools/ember-checkpoint.py")
work=$(mktemp -d /tmp/ember-ckpt-test.XXXXXX)
trap 'pkill -KILL -f "$work/ember-train" 2>/dev/null; rm -rf "$work"' EXIT
ln -s "$build/tools/ember-train" "$work/ember-train"
train=$work/ember-train
fail() { echo "FAIL: $*"; echo "--- output:"; tail -40 "$work/out" 2>/dev/null; exit 1; }

rows=10,37,100,500,23,250,10,61,120,500,11,300,17,45,90,200,10,400,29,77,150,500,13,33,64,128
dlrm_model=(--model dlrm --embedding-dim 4 --num-embeddings-per-feature "$rows"
    --dense-arch-layer-sizes 8,4 --over-arch-layer-sizes 8,1 --batch-size 16)

opt_flags() {
    case $1 in
    sgd) echo --optimizer sgd --lr 0.1 ;;
    sgdm) echo --optimizer sgd --lr 0.05 --momentum 0.9 ;;
    adagrad) echo --optimizer adagrad --lr 0.1 ;;
    adam) echo --optimizer adam --lr 0.01 ;;
    esac
}

# job_flags MODEL OPT: the job's course (20 steps), without its layout.
job_flags() {
    case $1 in
    tutorial) echo --hidden 8 --epochs 4 --batches 5 --seed 5 "$(opt_flags "$2")" ;;
    replay) echo --replay "$golden/seed_sum_2t.safetensors" ;;
    dlrm) echo "${dlrm_model[@]}" --steps 20 --epochs 3 --seed 7 \
        --data "criteo:$work/data.tsv" "$(opt_flags "$2")" ;;
    esac
}

layout_flags() { # PS SHARDING MODEL
    if [ "$3" = dlrm ]; then echo --ps "$1" --sharding "$2"; else echo --ps "$1"; fi
}

# ember OUT PS ARGS...: ember-train under ember-run (2 trainers), output to OUT.
ember() {
    local out=$1 ps=$2
    shift 2
    timeout 120 "$run" -n $((3 + ps)) "$train" "$@" >>"$out" 2>&1
}

# Bit for bit: every tensor, and every loss within 1e-30 (none but equal).
same_bits() {
    "${check[@]}" same "$1" "$2" >>"$work/out" 2>&1 &&
        "${check[@]}" compare "$1" "$2" --tol 1e-30 >>"$work/out" 2>&1
}
close_to() { "${check[@]}" compare "$1" "$2" --tol 1e-6 >>"$work/out" 2>&1; }

# The signal cases' job stopped at a checkpoint after step $1 (of ${long[@]},
# whose uninterrupted run saved whole.safetensors): before its end, and it
# resumes bit for bit.
resumes_bit_for_bit() {
    local stopped=$1
    [ "$stopped" -lt 30000 ] || fail "stopped only at the end"
    [ -s "$work/ckpt/step-$(printf %012d "$stopped")/manifest" ] || fail "no manifest of step $stopped"
    ember "$work/out" 1 "${long[@]}" --resume "$work/ckpt" --checkpoint-dir "$work/ckpt" \
        --save "$work/resumed.safetensors" || fail "the resumed run exited $?"
    grep -q "resuming from .*(step $stopped)" "$work/out" || fail "did not resume from step $stopped"
    same_bits "$work/resumed.safetensors" "$work/whole.safetensors" ||
        fail "the resumed run is not bit-identical to the uninterrupted one"
}

case "$case_name" in
resume:*)
    IFS=: read -r _ model opt p1 s1 p2 s2 <<<"$case_name"
    [ "$model" = dlrm ] && { "$gen" --examples 700 --out "$work/data.tsv" --seed 11 \
        >"$work/out" 2>&1 || fail "ember-criteo-gen exited $?"; }
    # shellcheck disable=SC2046
    ember "$work/out" "$p1" $(job_flags "$model" "$opt") $(layout_flags "$p1" "$s1" "$model") \
        --checkpoint-dir "$work/ckpt" --checkpoint-every 4 --checkpoint-keep 30 \
        --save "$work/whole.safetensors" || fail "the uninterrupted run exited $?"
    grep -q "checkpoint after step 8: " "$work/out" || fail "no checkpoint after step 8"
    mkdir "$work/from8" && cp -r "$work/ckpt/step-000000000008" "$work/from8/" ||
        fail "no step-000000000008"
    # shellcheck disable=SC2046
    ember "$work/out" "$p2" $(job_flags "$model" "$opt") $(layout_flags "$p2" "$s2" "$model") \
        --resume "$work/from8/step-000000000008" --checkpoint-dir "$work/from8" \
        --save "$work/resumed.safetensors" || fail "the resumed run exited $?"
    grep -q "resuming from $work/from8/step-000000000008 (step 8)" "$work/out" ||
        fail "the resumed run did not say where it went on from"
    if [ "$p1:$s1" = "$p2:$s2" ]; then
        same_bits "$work/resumed.safetensors" "$work/whole.safetensors" ||
            fail "the resumed run is not bit-identical to the uninterrupted one"
    else
        close_to "$work/resumed.safetensors" "$work/whole.safetensors" ||
            fail "the resumed run differs from the uninterrupted one beyond 1e-6"
    fi
    grep -E "^ok|max" "$work/out" | tail -3
    ;;
signal)
    # The uninterrupted run, then the same job signalled: 4 ranks by hand so
    # that each gets the signal itself, as srun delivers it (signal_run: through
    # ember-run).
    long=(--hidden 8 --epochs 3000 --batches 10 --seed 3 --optimizer adam --lr 0.001)
    ember "$work/out" 1 "${long[@]}" --save "$work/whole.safetensors" ||
        fail "the uninterrupted run exited $?"
    source "$here/../common/by_hand.sh"
    by_hand_start "$train" "$work" EMBER_LOG_LEVEL=info -- "${long[@]}" \
        --checkpoint-dir "$work/ckpt" --checkpoint-keep 5
    for _ in $(seq 100); do grep -q "epoch  100 " "$work/rank2.log" && break; sleep 0.1; done
    kill -USR1 "${BY_HAND_PIDS[1]}"
    for _ in $(seq 100); do grep -q "^checkpoint after step" "$work/rank2.log" && break; sleep 0.1; done
    grep -q "^checkpoint after step" "$work/rank2.log" || { cat "$work"/rank*.log >"$work/out"; fail "SIGUSR1 made no checkpoint"; }
    kill -TERM "${BY_HAND_PIDS[@]}"
    codes=()
    for pid in "${BY_HAND_PIDS[@]}"; do wait "$pid"; codes+=($?); done
    cat "$work"/rank*.log >"$work/out"
    stopped=$(grep -o "stopped after step [0-9]*" "$work/rank2.log" | grep -o "[0-9]*$")
    [ -n "$stopped" ] || fail "SIGTERM did not stop the job at a checkpoint (exit codes ${codes[*]})"
    resumes_bit_for_bit "$stopped"
    echo "stopped after step $stopped; resumed bit for bit"
    ;;
signal_run)
    # SIGTERM to ember-run: it forwards the signal to every rank once (a
    # second SIGTERM would mean "stop now"), so the job checkpoints and stops
    # there, and the checkpoint resumes bit for bit.
    long=(--hidden 8 --epochs 3000 --batches 10 --seed 3 --optimizer adam --lr 0.001)
    ember "$work/out" 1 "${long[@]}" --save "$work/whole.safetensors" ||
        fail "the uninterrupted run exited $?"
    timeout 120 "$run" -n 4 "$train" "${long[@]}" --checkpoint-dir "$work/ckpt" \
        >"$work/run.log" 2>&1 &
    launcher=$!
    for _ in $(seq 100); do grep -q "epoch  100 " "$work/run.log" && break; sleep 0.1; done
    grep -q "epoch  100 " "$work/run.log" || { cp "$work/run.log" "$work/out"; fail "training did not start"; }
    # To ember-run itself: timeout(1) would pass a signal on to its whole
    # process group, ember-run included, a second time.
    kill -TERM "$(pgrep -P "$launcher" -x ember-run)"
    wait "$launcher"
    code=$?
    cp "$work/run.log" "$work/out"
    stopped=$(grep -o "stopped after step [0-9]*" "$work/run.log" | grep -o "[0-9]*$")
    [ -n "$stopped" ] || fail "SIGTERM to ember-run did not stop the job at a checkpoint (exit $code)"
    resumes_bit_for_bit "$stopped"
    echo "stopped by ember-run's SIGTERM after step $stopped (exit $code); resumed bit for bit"
    ;;
torn:*)
    kind=${case_name#torn:}
    flags=(--hidden 8 --epochs 6 --batches 5 --seed 5 --optimizer adagrad --lr 0.1)
    ember "$work/out" 2 --ps 2 "${flags[@]}" --save "$work/whole.safetensors" ||
        fail "the uninterrupted run exited $?"
    # A job of 20 steps leaves checkpoints after 10 and 20; the newest is spoiled.
    short=(--hidden 8 --epochs 4 --batches 5 --seed 5 --optimizer adagrad --lr 0.1)
    ember "$work/out" 2 --ps 2 "${short[@]}" --checkpoint-dir "$work/ckpt" --checkpoint-every 10 ||
        fail "the first run exited $?"
    newest=$work/ckpt/step-000000000020
    [ -s "$newest/manifest" ] || fail "no checkpoint after step 20"
    case $kind in
    truncated) truncate -s -100 "$newest/ps1.safetensors" ;;
    checksum) printf '\x55' | dd of="$newest/ps0.safetensors" bs=1 seek=900 conv=notrunc 2>/dev/null ;;
    nomanifest) rm "$newest/manifest" ;;
    esac
    ember "$work/out" 2 --ps 2 "${flags[@]}" --resume "$work/ckpt" --checkpoint-dir "$work/ckpt" \
        --save "$work/resumed.safetensors" || fail "the resumed run exited $?"
    grep -q "resuming from $work/ckpt/step-000000000010 (step 10)" "$work/out" ||
        fail "did not take the checkpoint before the spoiled one"
    [ "$kind" = nomanifest ] || grep -q "skipping $newest" "$work/out" ||
        fail "did not say why it skipped $newest"
    same_bits "$work/resumed.safetensors" "$work/whole.safetensors" ||
        fail "the resumed run is not bit-identical to the uninterrupted one"
    grep "skipping\|resuming" "$work/out" | head -3
    ;;
killwrite)
    # A table of 256 MiB: its checkpoint takes a while to write.
    big=(--rows 1000000 --dim 64 --batches 10 --seed 2 --optimizer sgd --lr 0.1)
    timeout 120 "$run" -n 4 "$train" "${big[@]}" --epochs 100 --checkpoint-dir "$work/ckpt" \
        --checkpoint-every 50 --checkpoint-keep 10 >"$work/out" 2>&1 &
    job=$!
    # Until step 50's checkpoint is whole and a later one is being written
    # (within the job's own timeout: a loaded machine writes slowly).
    for _ in $(seq 2300); do
        ls "$work"/ckpt/step-000000000050/manifest >/dev/null 2>&1 &&
            ls "$work"/ckpt/step-0000000001[05]0/ps0.safetensors.tmp >/dev/null 2>&1 && break
        kill -0 "$job" 2>/dev/null || break
        sleep 0.05
    done
    [ -s "$work/ckpt/step-000000000050/manifest" ] ||
        fail "no whole checkpoint of step 50 before the kill (the job: $(tail -1 "$work/out"))"
    pkill -KILL -f "$work/ember-train"
    wait "$job"
    torn=$(ls -d "$work"/ckpt/step-* | while read -r d; do [ -e "$d/manifest" ] || echo "$d"; done)
    [ -n "$torn" ] || fail "the kill came after the write (no torn checkpoint left)"
    ember "$work/out" 1 "${big[@]}" --epochs 12 --resume "$work/ckpt" --checkpoint-dir "$work/ckpt" ||
        fail "the resumed run exited $?"
    grep -q "resuming from $work/ckpt/step-0000000000[0-9]0 (step" "$work/out" ||
        fail "did not resume from a complete checkpoint"
    grep "removed\|resuming" "$work/out" | head -3
    ;;
cow)
    # 40,000 x 16 rows with Adam's two arrays and its per-row steps: a
    # 7.8 MB file, written at 4 MB/s, while training goes on at hundreds
    # of steps a second.
    job=(--rows 40000 --dim 16 --batches 10 --seed 4 --optimizer adam --lr 0.01
        --checkpoint-every 10 --checkpoint-keep 20)
    ember "$work/out" 1 "${job[@]}" --epochs 2 --checkpoint-dir "$work/stopped" ||
        fail "the job stopped at step 20 exited $?"
    EMBER_PS_CKPT_WRITE_RATE=4M EMBER_LOG_LEVEL=info \
        ember "$work/cow.log" 1 "${job[@]}" --epochs 6 --checkpoint-dir "$work/ckpt" ||
        { cat "$work/cow.log" >>"$work/out"; fail "the job trained during its writes exited $?"; }
    grep 'written while training changed\|checkpoint after step' "$work/cow.log" >>"$work/out"
    for k in 10 20; do
        dir=step-$(printf %012d "$k")
        [ -s "$work/ckpt/$dir/manifest" ] || fail "no complete checkpoint of step $k"
        cmp "$work/stopped/$dir/ps0.safetensors" "$work/ckpt/$dir/ps0.safetensors" >>"$work/out" 2>&1 ||
            fail "step $k's PS file, written while training went on, is not the stopped job's"
    done
    grep -q "checkpoint after step 60: " "$work/cow.log" || fail "no checkpoint after step 60"
    changed=$(sed -n 's/.*the checkpoint of step 20 was written while training changed \([0-9]*\) chunks.*/\1/p' "$work/cow.log")
    [ -n "$changed" ] || fail "the PS did not say what training changed during step 20's write"
    [ "$changed" -gt 0 ] || fail "nothing changed during step 20's write: training did not overlap it"
    echo "step 20 written while training changed $changed chunks; steps 10 and 20 byte for byte"
    ;;
killed:*)
    rank=${case_name#killed:}
    long=(--hidden 8 --epochs 1500 --batches 10 --seed 3 --optimizer sgd --lr 0.05 --momentum 0.9)
    ember "$work/out" 1 "${long[@]}" --save "$work/whole.safetensors" ||
        fail "the uninterrupted run exited $?"
    timeout 200 "$run" -n 4 --max-restarts 1 "$train" "${long[@]}" --checkpoint-dir "$work/ckpt" \
        --checkpoint-every 500 --save "$work/resumed.safetensors" >"$work/out" 2>&1 &
    job=$!
    for _ in $(seq 200); do grep -q "^\[2\] checkpoint after step" "$work/out" && break; sleep 0.05; done
    victim=$(for p in $(pgrep -f "$work/ember-train"); do
        tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "EMBER_RANK=$rank" && echo "$p"
    done | head -1)
    [ -n "$victim" ] || fail "rank $rank not found"
    kill -KILL "$victim"
    wait "$job" || fail "the job did not survive the loss of rank $rank (exit $?)"
    grep -q "rank $rank was killed by SIGKILL; restart 1 of 1" "$work/out" ||
        fail "the launcher did not say what was lost"
    grep -q "resuming from $work/ckpt/step-" "$work/out" || fail "did not resume from a checkpoint"
    same_bits "$work/resumed.safetensors" "$work/whole.safetensors" ||
        fail "the restarted job is not bit-identical to the uninterrupted one"
    grep "restart\|resuming" "$work/out" | head -3
    ;;
export:*)
    model=${case_name#export:}
    if [ "$model" = dlrm ]; then
        "$gen" --examples 700 --out "$work/data.tsv" --seed 11 >"$work/out" 2>&1
        # shellcheck disable=SC2046
        ember "$work/out" 2 --ps 2 $(job_flags dlrm adam) --checkpoint-dir "$work/ckpt" \
            --save "$work/saved.safetensors" || fail "ember-train exited $?"
    else
        ember "$work/out" 2 --ps 2 --hidden 8,4 --epochs 2 --batches 5 --optimizer adam --lr 0.01 \
            --checkpoint-dir "$work/ckpt" --save "$work/saved.safetensors" ||
            fail "ember-train exited $?"
    fi
    "${tool[@]}" export "$work/ckpt" "$work/export.safetensors" >>"$work/out" 2>&1 ||
        fail "ember-checkpoint.py export failed"
    "${check[@]}" same "$work/export.safetensors" "$work/saved.safetensors" >>"$work/out" 2>&1 ||
        fail "the export is not the job's --save"
    if [ "$model" = dlrm ]; then
        "$python" "$here/dlrm_sync_ref.py" strict-load --embedding-dim 4 \
            --num-embeddings-per-feature "$rows" --dense-arch-layer-sizes 8,4 \
            --over-arch-layer-sizes 8,1 --model "$work/export.safetensors" --steps 20 \
            --trainers 2 >>"$work/out" 2>&1 || fail "TorchRec's DLRM refused the export"
    else
        "$python" "$here/load_strict.py" "$work/export.safetensors" 100 16 8 sum 8,4 \
            >>"$work/out" 2>&1 || fail "the PyTorch module refused the export"
    fi
    # --init takes the checkpoint (and, the tutorial's, the --save file):
    # with lr 0 the weights a job saves are the ones it started from.
    if [ "$model" = dlrm ]; then
        inits=("$work/ckpt")
        still=("${dlrm_model[@]}" --steps 1 --epochs 1 --data "criteo:$work/data.tsv")
    else
        inits=("$work/ckpt" "$work/saved.safetensors")
        still=(--hidden 8,4 --epochs 1 --batches 1)
    fi
    for init in "${inits[@]}"; do
        ember "$work/out" 1 "${still[@]}" --optimizer sgd --lr 0 --init "$init" \
            --save "$work/init.safetensors" || fail "--init $init: ember-train exited $?"
        "${check[@]}" same "$work/init.safetensors" "$work/saved.safetensors" >>"$work/out" 2>&1 ||
            fail "--init $init did not start from its weights"
    done
    tail -2 "$work/out"
    ;;
before_api:*)
    model=${case_name#before_api:}
    old=$golden/../checkpoint-main/$model
    if [ "$model" = dlrm ]; then
        "$gen" --examples 40 --out "$work/data.tsv" --seed 11 >"$work/out" 2>&1 ||
            fail "ember-criteo-gen exited $?"
        flags=(--model dlrm --embedding-dim 2 --num-embeddings 5 --dense-arch-layer-sizes 2
            --over-arch-layer-sizes 2,1 --batch-size 4 --seed 7 --data "criteo:$work/data.tsv")
        resume=(--steps 4 --optimizer adagrad --lr 0.1)
        init=(--steps 1 --optimizer sgd --lr 0)
    else
        flags=(--rows 20 --dim 4 --classes 3 --hidden 4 --seed 5)
        resume=(--epochs 2 --batches 2 --optimizer adam --lr 0.01)
        init=(--epochs 1 --batches 1 --optimizer sgd --lr 0)
    fi
    timeout 30 "$run" -n 4 "$train" "${flags[@]}" "${resume[@]}" --resume "$old" \
        >>"$work/out" 2>&1 && fail "a checkpoint of ember-train before the API was resumed"
    grep -q "$old/step-000000000002/trainer0.safetensors: written by an ember-train from before its models moved onto the library API (format ember-trainer-checkpoint-1" "$work/out" ||
        fail "the refusal does not say why"
    grep -q "resume it with the ember-train that wrote it, or start from its weights with --init $old/step-000000000002" "$work/out" ||
        fail "the refusal does not say what to do"
    ember "$work/out" 1 "${flags[@]}" "${init[@]}" --init "$old" --save "$work/init.safetensors" ||
        fail "--init of the checkpoint exited $?"
    "${tool[@]}" export "$old" "$work/export.safetensors" >>"$work/out" 2>&1 ||
        fail "ember-checkpoint.py export failed"
    "${check[@]}" same "$work/init.safetensors" "$work/export.safetensors" >>"$work/out" 2>&1 ||
        fail "--init did not start from the checkpoint's weights"
    grep "written by\|^ok" "$work/out" | head -2
    ;;
more_steps)
    "$gen" --examples 700 --out "$work/data.tsv" --seed 11 >"$work/out" 2>&1 ||
        fail "ember-criteo-gen exited $?"
    # 700 examples, 2 trainers x 16: 21 steps an epoch; 12, then 20 of them.
    flags=("${dlrm_model[@]}" --seed 7 --data "criteo:$work/data.tsv" --optimizer adagrad --lr 0.1)
    ember "$work/whole.log" 1 "${flags[@]}" --steps 20 --save "$work/whole.safetensors" ||
        { cat "$work/whole.log" >>"$work/out"; fail "the uninterrupted run exited $?"; }
    ember "$work/out" 1 "${flags[@]}" --steps 12 --checkpoint-dir "$work/ckpt" ||
        fail "the run of 12 steps exited $?"
    ember "$work/resumed.log" 1 "${flags[@]}" --steps 20 --resume "$work/ckpt" \
        --checkpoint-dir "$work/ckpt" --save "$work/resumed.safetensors" ||
        { cat "$work/resumed.log" >>"$work/out"; fail "the resumed run exited $?"; }
    cat "$work/resumed.log" >>"$work/out"
    grep -q "resuming from .*(step 12)" "$work/out" || fail "did not resume from step 12"
    whole=$(grep -o "\] epoch    1  mean loss [0-9.]*" "$work/whole.log")
    [ -n "$whole" ] || fail "the uninterrupted run printed no epoch line"
    grep -qF "$whole " "$work/resumed.log" ||
        fail "the resumed run's epoch line is not the uninterrupted run's ($whole)"
    same_bits "$work/resumed.safetensors" "$work/whole.safetensors" ||
        fail "the resumed run is not bit-identical to the uninterrupted one"
    echo "${whole#] } in both; resumed bit for bit"
    ;;
every_step)
    # A checkpoint after every one of 100 fast steps on 2 PS: each PS's
    # writer ends a write while the next is due, so a report must not be
    # replaced by the next write's (the job then waited for it until a rank
    # left).  Three runs: the race needed about one in three.
    for n in 1 2 3; do
        rm -rf "$work/ckpt"
        ember "$work/out" 2 --ps 2 --replay "$golden/seed_sum_2t.safetensors" --checkpoint-dir \
            "$work/ckpt" --checkpoint-every 1 --checkpoint-keep 100 ||
            fail "run $n exited $?"
        for s in $(seq 1 100); do
            m=$work/ckpt/step-$(printf %012d "$s")/manifest
            [ "$(grep -c '^file ' "$m" 2>/dev/null)" = 4 ] ||
                fail "run $n: step $s's checkpoint is not complete ($m: 2 trainers' and 2 PS' files)"
        done
    done
    grep -q "refused" "$work/out" && fail "a checkpoint report was refused"
    echo "3 runs: 100 complete checkpoints each"
    ;;
ps_silent)
    # ps0 stopped (SIGSTOP) while it writes the last checkpoint's file: the
    # master's wait for that file must end, naming ps0, not hang.  A
    # 1,000,000 x 64 table takes its writer a second or more.
    export EMBER_RPC_TIMEOUT=8
    start=$(date +%s)
    timeout 120 "$run" -n 4 "$train" --data synthetic --rows 1000000 --dim 64 --epochs 1 \
        --batches 5 --checkpoint-dir "$work/ckpt" --checkpoint-every 5 >"$work/out" 2>&1 &
    bg=$!
    step5=$work/ckpt/step-000000000005
    for _ in $(seq 1 2400); do # its writer has begun the file (durable.c's temporary)
        [ -f "$step5/ps0.safetensors.tmp" ] || [ -f "$step5/ps0.safetensors" ] && break
        sleep 0.02
    done
    ps0=
    for p in $(pgrep -f "$work/ember-train"); do
        tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "EMBER_RANK=3" && ps0=$p
    done
    [ -n "$ps0" ] || fail "no ps0 to stop"
    kill -STOP "$ps0"
    wait "$bg"
    rc=$?
    kill -KILL "$ps0" 2>/dev/null
    if [ -f "$step5/ps0.safetensors" ]; then
        echo "SKIP: ps0 had written its file before it was stopped (nothing to check)"
        exit 77
    fi
    [ $rc -ne 124 ] || fail "the job hung"
    [ $rc -ne 0 ] || fail "the job succeeded without ps0's file"
    # Usually the master's wait for the file names ps0; when the stop came
    # before ps0 answered the last push, the trainers name it first.
    if grep -q "the checkpoint after step 5: ps0, whose file it awaits, does not answer" \
        "$work/out"; then
        by="the master's wait for its file"
    elif grep -q "the last step's gradient push to ps0 failed: .*timed out" "$work/out"; then
        by="the trainers' last push"
    else
        fail "no rank named ps0 as silent"
    fi
    echo "ended in $(($(date +%s) - start)) s, ps0 named by $by"
    ;;
schema)
    "$python" "$here/make_text_data.py" --examples 400 --seed 5 --out "$work/text" \
        >"$work/out" 2>&1 || fail "make_text_data.py exited $?"
    job=(--model dlrm --schema "$work/text/features.schema" --data "text:$work/text/data.tsv"
        --embedding-dim 4 --dense-arch-layer-sizes 8,4 --over-arch-layer-sizes 8,1
        --interaction-type dcn --dcn-num-layers 2 --dcn-low-rank-dim 3 --batch-size 16
        --steps 20 --epochs 3 --seed 7 --optimizer adagrad --lr 0.1)
    ember "$work/out" 2 "${job[@]}" --ps 2 --checkpoint-dir "$work/ckpt" --checkpoint-every 4 \
        --checkpoint-keep 30 --save "$work/whole.safetensors" || fail "the uninterrupted run exited $?"
    grep -q "checkpoint after step 8: " "$work/out" || fail "no checkpoint after step 8"
    ember "$work/out" 2 "${job[@]}" --ps 2 --resume "$work/ckpt/step-000000000008" \
        --save "$work/resumed.safetensors" || fail "the resumed run exited $?"
    same_bits "$work/resumed.safetensors" "$work/whole.safetensors" ||
        fail "the resumed run is not bit-identical to the uninterrupted one"
    sed 's/bag=4/bag=5/' "$work/text/features.schema" >"$work/other.schema"
    other=()
    for arg in "${job[@]}"; do
        [ "$arg" = "$work/text/features.schema" ] && arg=$work/other.schema
        other+=("$arg")
    done
    : >"$work/refused"
    ember "$work/refused" 2 "${other[@]}" --ps 2 --resume "$work/ckpt/step-000000000008" &&
        fail "a resume under another schema was accepted"
    grep -q -- "--schema (sparse feature 'genres'" "$work/refused" ||
        { cat "$work/refused" >>"$work/out"; fail "the refusal does not name the feature"; }
    grep -m1 -- "--schema" "$work/refused"
    ;;
refused)
    base=(--hidden 8 --epochs 2 --batches 5 --optimizer adam --lr 0.01)
    ember "$work/out" 1 "${base[@]}" --checkpoint-dir "$work/ckpt" || fail "the first run exited $?"
    # refuse WANT ARGS...: ember-train ends non-zero within 30 s saying WANT.
    refuse() {
        local want=$1 ps=1
        shift
        : >"$work/refused"
        timeout 30 "$run" -n $((3 + ps)) "$train" "$@" >"$work/refused" 2>&1 &&
            { cat "$work/refused" >"$work/out"; fail "accepted: $*"; }
        grep -q -- "$want" "$work/refused" ||
            { cat "$work/refused" >"$work/out"; fail "refused without saying '$want': $*"; }
        echo "refused: $want"
    }
    refuse "--optimizer, --lr or --momentum" "${base[@]/adam/adagrad}" --resume "$work/ckpt"
    refuse "--hidden" --hidden 4 --epochs 2 --batches 5 --optimizer adam --lr 0.01 \
        --resume "$work/ckpt"
    refuse "holds a complete checkpoint after step 10" "${base[@]}" --checkpoint-dir "$work/ckpt"
    refuse "--checkpoint-every needs --checkpoint-dir" "${base[@]}" --checkpoint-every 5
    refuse "--consistency async" "${base[@]}" --consistency async --checkpoint-dir "$work/c2"
    refuse "no checkpoint in $work/nothing" "${base[@]}" --resume "$work/nothing"
    timeout 30 "$run" -n 5 "$train" "${base[@]}" --trainers 3 --resume "$work/ckpt" \
        >"$work/refused" 2>&1 && fail "3 trainers resumed 2 trainers' checkpoint"
    grep -q "was taken with 2 trainers, this job has 3" "$work/refused" ||
        { cat "$work/refused" >"$work/out"; fail "the trainer count's refusal does not say why"; }
    echo "refused: another trainer count"
    ;;
*)
    echo "unknown case $case_name"
    exit 2
    ;;
esac
echo "ok: $case_name"

#!/usr/bin/env bash
# slurm/hybrid.sbatch on the private test cluster (cluster.sh, a CTest fixture).
# usage: test_slurm.sh CASE BUILD_DIR SOURCE_DIR GOLDEN_DIR
#   train4         sbatch --wait -n4: trains to completion, 4 binding lines
#   golden         --replay GOLDEN --save OUT matches PyTorch (golden_compare)
#   golden_2nodes  the same with -N2 (two slurmd "nodes"): ranks on both
#   multiprog      --multi-prog slurm/multi-prog.conf: one role per line
#   rank_fails     one rank gets a bad flag: the job ends non-zero, fast,
#                  with no process left behind
#   dlrm_2nodes    --model dlrm on generated Criteo data, 2 trainers and 2 PS
#                  (whole tables) over two nodes: evaluated at steps 50, 100
#                  and 150, the log loss falls and the last AUC is above
#                  0.75 (test_dlrm.sh's bar for a model that learned)
#   bench_allreduce  srun -N2 ember-bench allreduce: the nccl-tests table,
#                  one rank per node, #wrong 0
#   restart        --max-restarts: a rank killed on the first attempt, the job
#                  run again (port + 1, --resume DIR for a complete
#                  checkpoint in its --checkpoint-dir) and done; none without
# Needs SLURM_CONF (set by CTest to the fixture's cluster).  77 = skipped.
set -uo pipefail
case_name=$1 build=$2 src=$3 golden=$4
command -v sbatch >/dev/null || { echo "SKIP: no sbatch"; exit 77; }
[ -r "${SLURM_CONF:-}" ] || { echo "FAIL: no test cluster at SLURM_CONF=${SLURM_CONF:-}"; exit 1; }
export UCX_NET_DEVICES=lo EMBER_LOG_LEVEL=warn # loopback only, on this host
work=$(mktemp -d /tmp/ember-slurm-test.XXXXXX)
trap 'rm -rf "$work"' EXIT
# A path of this test's own, so leftover checks see only this job's ranks.
ln -s "$build/tools/ember-train" "$work/ember-train"
fail() { echo "FAIL: $*"; echo "--- job output:"; tail -40 "$work/out" 2>/dev/null; exit 1; }
need() { grep -qE "$1" "$work/out" || fail "no line matching: $1"; }
free_port() { # another build's test cluster may run jobs with the same ids
    local p
    for _ in $(seq 50); do
        p=$((20000 + RANDOM % 12000)) # below the ephemeral range (32768+)
        ss -Htln "sport = :$p" | grep -q . || { echo $p; return; }
    done
    echo 0
}
submit() { # sbatch --wait SBATCH-OPTIONS -- SCRIPT-ARGS; sets rc, took
    local opts=() start=$SECONDS
    while [ "$1" != -- ]; do opts+=("$1"); shift; done
    shift
    timeout 90 sbatch --wait --quiet -D "$src" -o "$work/out" -J "ember-test-$case_name" \
        "${opts[@]}" "$src/slurm/hybrid.sbatch" --program "$work/ember-train" --port "$(free_port)" "$@"
    rc=$? took=$((SECONDS - start))
    echo "sbatch exited $rc after ${took}s"
}
no_leftovers() {
    local i
    for i in $(seq 50); do
        pgrep -f "$work/ember-train" >/dev/null || return 0
        sleep 0.1
    done
    pgrep -af "$work/ember-train"
    fail "processes left behind"
}
bind_lines() { [ "$(grep -cE "^[0-9]+: ember-bind: rank [0-9]+ local [0-9]+/[0-9]+ host $1 pid [0-9]+: numa [0-9]+ cpus [0-9]" "$work/out")" -eq "$2" ] || fail "want $2 binding lines on $1"; }

case "$case_name" in
train4)
    submit -n 4 -- --epochs 5
    [ $rc -eq 0 ] || fail "exit $rc"
    need '^ember: job [0-9]+: 4 ranks on 1 node\(s\) \(node1\): trainers 0-1, master 2, ps 3-3; store tcp://127\.0\.0\.1:[0-9]+$'
    need '^2: done: 100 steps'
    need '^2: roles: trainer0=rank0 trainer1=rank1 master=rank2 ps0=rank3'
    bind_lines node1 4
    ;;
golden | golden_2nodes)
    nodes=(-n 4)
    [ "$case_name" = golden_2nodes ] && nodes=(-N 2 -n 4 --ntasks-per-node=2)
    submit "${nodes[@]}" -- --replay "$golden/seed_sum_2t.safetensors" --save "$work/out.safetensors"
    [ $rc -eq 0 ] || fail "exit $rc"
    "$build/tests/train/golden_compare" "$golden/seed_sum_2t.safetensors" "$work/out.safetensors" ||
        fail "differs from PyTorch"
    if [ "$case_name" = golden_2nodes ]; then
        need '4 ranks on 2 node\(s\) \(node\[1-2\]\)'
        bind_lines node1 2
        bind_lines node2 2
        need '^[0-9]: ember-bind: rank 3 local 1/2 host node2 '
    fi
    ;;
dlrm_2nodes)
    # test_dlrm.sh's data (its auc case): learnable within an epoch.  Without
    # the tables' updates the AUC stays near 0.67; with them it passes 0.8.
    "$build/tools/ember-criteo-gen" --examples 20000 --seed 21 --out "$work/train.txt" &&
        "$build/tools/ember-criteo-gen" --examples 2000 --seed 22 --out "$work/eval.txt" ||
        fail "ember-criteo-gen"
    submit -N 2 -n 5 -- --ps 2 --model dlrm --sharding table --embedding-dim 8 \
        --num-embeddings 5000 --dense-arch-layer-sizes 16,8 --over-arch-layer-sizes 16,1 \
        --batch-size 64 --optimizer adagrad --lr 0.05 --data "criteo:$work/train.txt" \
        --eval "criteo:$work/eval.txt" --eval-every 50 --steps 150
    [ $rc -eq 0 ] || fail "exit $rc"
    need '5 ranks on 2 node\(s\) \(node\[1-2\]\)'
    need '^2: tables on ps1: t_cat_'
    for step in 50 100 150; do
        need "^2: eval step $step: auc 0\.[0-9]+ logloss [0-9.]+ examples 2000\$"
    done
    need '^2: done: 300 steps \(19200 examples\)'
    first=$(grep -m1 -o "eval step 50: auc [0-9.]* logloss [0-9.]*" "$work/out" | grep -o '[0-9.]*$')
    last=$(grep -o "eval step 150: auc [0-9.]* logloss [0-9.]*" "$work/out" | tail -1)
    auc=$(awk '{ print $5 }' <<<"$last") last=$(awk '{ print $7 }' <<<"$last")
    awk -v a="$first" -v b="$last" -v auc="$auc" 'BEGIN { exit !(b < a && auc > 0.75) }' ||
        fail "did not learn: eval log loss $first -> $last, final AUC $auc (want > 0.75)"
    echo "eval log loss $first -> $last, final AUC $auc"
    ;;
multiprog)
    submit -n 4 -- --multi-prog "$src/slurm/multi-prog.conf"
    [ $rc -eq 0 ] || fail "exit $rc"
    need '^2: done: 400 steps'
    bind_lines node1 4
    ;;
bench_allreduce)
    # Straight srun (no sbatch script): ranks and size from Slurm's
    # environment, the store where EMBER_INIT says, a job secret of our own.
    head -c 32 /dev/urandom >"$work/secret" && chmod 600 "$work/secret"
    EMBER_SECRET_FILE=$work/secret EMBER_INIT=tcp://127.0.0.1:$(free_port) \
        timeout 60 srun -J ember-test-bench -N 2 -n 2 \
        --ntasks-per-node=1 -K1 "$build/bench/ember-bench" allreduce -b 8 -e 1M -f 8 -n 3 \
        -w 1 -c 1 >"$work/out" 2>&1
    rc=$?
    [ $rc -eq 0 ] || fail "exit $rc"
    need '^# nThread 1 nGpus 0 nRanks 2 '
    need '^# Out of bounds values : 0 OK$'
    rows=$(awk '!/^#/ && NF == 13 && $3 == "float" && $9 == 0 && $13 == 0' "$work/out" | wc -l)
    [ "$rows" -eq 6 ] || fail "want 6 rows with #wrong 0, got $rows"
    need 'ember-bind: rank 1 local 0/1 host node2 '
    grep -q 'no job secret' "$work/out" && fail "ran without the job secret"
    ;;
rank_fails)
    # Rank 1 gets a flag ember-train refuses; the other ranks wait for it at
    # the rendezvous until srun -K1 ends them.
    cat >"$work/one-bad-rank" <<EOF
#!/usr/bin/env bash
if [ "\$SLURM_PROCID" = 1 ]; then exec "$work/ember-train" --no-such-flag "\$@"; fi
exec "$work/ember-train" "\$@"
EOF
    chmod +x "$work/one-bad-rank"
    start=$SECONDS
    timeout 90 sbatch --wait --quiet -D "$src" -o "$work/out" -J ember-test-fail -n 4 \
        "$src/slurm/hybrid.sbatch" --program "$work/one-bad-rank" --port "$(free_port)" --epochs 50
    rc=$?
    echo "sbatch exited $rc after $((SECONDS - start))s"
    [ $rc -ne 0 ] || fail "the job succeeded"
    [ $rc -ne 124 ] || fail "the job hung"
    [ $((SECONDS - start)) -lt 30 ] || fail "took too long to fail"
    need '^1: .*no-such-flag'
    need 'srun exited [1-9]'
    [ -z "$(squeue -h -n ember-test-fail -o %i)" ] || fail "the job is still in the queue"
    no_leftovers
    ;;
restart)
    # hybrid.sbatch --max-restarts: rank 1 dies of SIGKILL on the first
    # attempt only (a marker file); each start prints its arguments and
    # EMBER_INIT.  The wrapper passes ember-train everything but
    # --checkpoint-dir/--resume, which this test only hands the script to
    # see what it makes of them (DIR holds a complete checkpoint already).
    mkdir -p "$work/ck/step-000000000040" "$work/ck/step-000000000050"
    : >"$work/ck/step-000000000040/manifest" # step 50 is torn (no manifest)
    cat >"$work/flaky" <<EOF
#!/usr/bin/env bash
echo "ARGS \$(cat "$work/attempt" 2>/dev/null || echo 1) init=\$EMBER_INIT: \$*"
if [ "\$SLURM_PROCID" = 1 ] && [ ! -e "$work/attempt" ]; then
    echo 2 >"$work/attempt"
    kill -KILL \$\$
fi
args=()
while ((\$#)); do
    case \$1 in --checkpoint-dir | --resume) shift 2 ;; *) args+=("\$1"); shift ;; esac
done
exec "$work/ember-train" "\${args[@]}"
EOF
    chmod +x "$work/flaky"
    port=$(free_port)
    timeout 90 sbatch --wait --quiet -D "$src" -o "$work/out" -J ember-test-restart -n 4 \
        "$src/slurm/hybrid.sbatch" --program "$work/flaky" --port "$port" --max-restarts 2 \
        --restart-delay 1 --epochs 5 --checkpoint-dir "$work/ck" --resume old
    rc=$?
    [ $rc -eq 0 ] || fail "exit $rc"
    need "^hybrid.sbatch: rank 1 \(on node1\) was killed by SIGKILL; restart 1 of 2 from the latest checkpoint in $work/ck\$"
    [ "$(grep -c '^hybrid.sbatch: .*restart' "$work/out")" -eq 1 ] || fail "want one restart"
    need "^1: ARGS 1 init=tcp://127\.0\.0\.1:$port: --trainers 2 --ps 1 --epochs 5 --checkpoint-dir $work/ck --resume old\$"
    need "^1: ARGS 2 init=tcp://127\.0\.0\.1:$((port + 1)): --trainers 2 --ps 1 --epochs 5 --checkpoint-dir $work/ck --resume $work/ck\$"
    need '^2: done: 100 steps'
    need 'srun exited [1-9]'
    need 'srun exited 0'
    # Without --max-restarts the same failure ends the job.
    rm -f "$work/attempt"
    timeout 90 sbatch --wait --quiet -D "$src" -o "$work/out" -J ember-test-restart -n 4 \
        "$src/slurm/hybrid.sbatch" --program "$work/flaky" --port "$(free_port)" --epochs 5
    rc=$?
    [ $rc -ne 0 ] || fail "the job succeeded without --max-restarts"
    grep -q '^hybrid.sbatch: .*restart' "$work/out" && fail "restarted without --max-restarts"
    ;;
*)
    echo "unknown case $case_name"; exit 2 ;;
esac
no_leftovers
echo "$case_name: ok"

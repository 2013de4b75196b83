#!/usr/bin/env bash
# ember-train beside TorchRec on one large table: the tutorial model
# (EmbeddingBag 1,000,000 x 64 sum -> Linear(64, 8), cross-entropy, SGD lr
# 0.05), 2 trainers, 8,192 indices per trainer step in bags of 1-10 (about
# 1,490 bags); ember with 1 PS and the master over UCX (UCX_TLS, shared memory
# by default), sync; TorchRec's peer (bench/peers/torchrec_bag.py) as 2 gloo
# processes, DistributedModelParallel with the table row-wise, fused SGD, the
# Linear under DDP. Both train on the same bags: ember draws its tutorial
# data, and bench/peers/tutorial_batches writes those very batches (ember's
# own data source, same flags) into the file the peer reads; the script checks
# that both timed the same number of bags. Both leave out the first WARMUP
# steps: ember's first epoch (--batches WARMUP), the peer's --warmup-steps.
# Rounds alternate which side goes first. Then the DLRM sparse-heavy
# configuration (bench/dlrm_vs_torchrec.sh, config b) in each round. Prints
# each round's bags/s (= examples/s) and ratio, the machine's load average
# as the round began (the cores are shared: a round under load says little),
# the median ratio of each job, and the targets: >= 4x TorchRec's examples/s
# on the large table and >= 3x on DLRM, in sync mode.
#
#   bench/train_vs_torchrec.sh
#   ROUNDS=5 EMBER_FLAGS="--ps-threads 2" bench/train_vs_torchrec.sh
#
# Environment: BUILD (<repo>/build: ember-run, ember-train,
# bench/peers/tutorial_batches), EMBER_TORCHREC_VENV (<repo>/.venv-torchrec,
# made by scripts/torchrec-venv.sh), ROUNDS (3), STEPS (200: timed steps, a
# multiple of WARMUP), WARMUP (10), ROWS (1000000), DIM (64), INDICES (8192
# per trainer step), SEED (1), UCX_TLS (sm,self), EMBER_FLAGS (more
# ember-train flags for both jobs, e.g. "--ps-threads 2"; not those that set
# the job itself), PIPELINE (sparse-dist: the peer's loop, or none), DLRM (1;
# 0 leaves the DLRM job out), DLRM_STEPS (20: bench/dlrm_vs_torchrec.sh's
# STEPS), KEEP (0; 1 keeps the logs, whose folder is printed).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
build=${BUILD:-$repo/build}
venv=${EMBER_TORCHREC_VENV:-$repo/.venv-torchrec}
python=$venv/bin/python
rounds=${ROUNDS:-3}
steps=${STEPS:-200}
warmup=${WARMUP:-10}
rows=${ROWS:-1000000}
dim=${DIM:-64}
indices=${INDICES:-8192}
seed=${SEED:-1}
pipeline=${PIPELINE:-sparse-dist}
dlrm=${DLRM:-1}
dlrm_steps=${DLRM_STEPS:-20}
ember_flags_text=${EMBER_FLAGS:-}
read -r -a ember_flags <<<"$ember_flags_text"
trainers=2 classes=8
export UCX_TLS=${UCX_TLS:-sm,self} UCX_NET_DEVICES=lo GLOO_SOCKET_IFNAME=lo
out=$(mktemp -d /tmp/ember-torchrec-bench.XXXXXX)
if [ "${KEEP:-0}" = 1 ]; then
    echo "# logs and files in $out"
else
    trap 'rm -rf "$out"' EXIT
fi

die() { echo "train_vs_torchrec: $*" >&2; exit 2; }
for tool in tools/ember-run tools/ember-train bench/peers/tutorial_batches; do
    [ -x "$build/$tool" ] || die "$build/$tool missing: build ember first (or set BUILD)"
done
[ -x "$python" ] || die "$python missing: run scripts/torchrec-venv.sh first"
for pair in "ROUNDS $rounds" "STEPS $steps" "WARMUP $warmup" "ROWS $rows" "DIM $dim" \
    "INDICES $indices" "DLRM_STEPS $dlrm_steps"; do
    read -r name value <<<"$pair"
    [[ $value =~ ^[1-9][0-9]{0,8}$ ]] || die "$name '$value' is not a positive integer"
done
[[ $seed =~ ^[0-9]{1,18}$ ]] || die "SEED '$seed' is not an integer from 0"
((steps % warmup == 0)) || die "STEPS $steps is not a multiple of WARMUP $warmup (ember's epochs)"
[[ $dlrm =~ ^[01]$ ]] || die "DLRM '$dlrm' is not 0 or 1"
[[ $pipeline =~ ^(sparse-dist|none)$ ]] || die "PIPELINE '$pipeline' is not sparse-dist or none"
# The flags that say what is measured are this script's; EMBER_FLAGS may
# only add to how ember runs it.
for flag in "${ember_flags[@]+"${ember_flags[@]}"}"; do
    case $flag in
        --trainers | --ps | --rows | --dim | --classes | --hidden | --mode | --weights | \
            --optimizer | --lr | --momentum | --epochs | --batches | --min-indices | \
            --max-indices | --data | --seed | --consistency | --replay | --metrics | --model | \
            --steps | --batch-size)
            die "EMBER_FLAGS: $flag is the benchmark's own (see the environment above)" ;;
    esac
done

run_ember=$build/tools/ember-run
train=$build/tools/ember-train
batches=$out/batches.safetensors
total=$((warmup + steps))

# "RATE BAGS": ember's bags/s over its epochs after the first, and those bags.
ember_round() { # name
    "$run_ember" -n $((trainers + 2)) \
        "$train" --trainers "$trainers" --ps 1 --rows "$rows" --dim "$dim" --classes "$classes" \
        --min-indices "$indices" --max-indices "$indices" --seed "$seed" --batches "$warmup" \
        --epochs $((total / warmup)) --consistency sync --metrics "$out/$1.json" \
        ${ember_flags[@]+"${ember_flags[@]}"} >"$out/$1.log" 2>&1 || {
        cat "$out/$1.log" >&2; die "ember-train failed ($1)"; }
    "$python" - "$out/$1.json" $((total / warmup)) <<'EOF'
import json, sys
epochs = [l for l in (json.loads(t) for t in open(sys.argv[1]) if t.strip()) if "epoch" in l]
if len(epochs) != int(sys.argv[2]):
    sys.exit(f"{sys.argv[1]}: {len(epochs)} epoch lines, not {sys.argv[2]}")
timed = epochs[1:]
bags, seconds = sum(e["bags"] for e in timed), sum(e["seconds"] for e in timed)
print(f"{bags / seconds:.1f} {bags}")
EOF
}
# "RATE BAGS": the peer's bags/s over its steps after the warm-up, and those bags.
torchrec_round() { # name
    "$python" "$here/peers/torchrec_bag.py" --batches "$batches" --dim "$dim" \
        --warmup-steps "$warmup" --seed "$seed" --pipeline "$pipeline" >"$out/$1.log" 2>&1 || {
        cat "$out/$1.log" >&2; die "the TorchRec peer failed ($1)"; }
    sed -n 's/^RESULT bags_per_s=\([0-9.]*\) bags=\([0-9]*\) .*/\1 \2/p' "$out/$1.log"
}
# "EMBER TORCHREC RATIO": config b's row of bench/dlrm_vs_torchrec.sh.
dlrm_round() { # name
    CONFIGS=b STEPS=$dlrm_steps SAME_INIT=0 BUILD=$build EMBER_TORCHREC_VENV=$venv \
        EMBER_FLAGS=$ember_flags_text bash "$here/dlrm_vs_torchrec.sh" >"$out/$1.log" 2>&1 || {
        cat "$out/$1.log" >&2; die "bench/dlrm_vs_torchrec.sh failed ($1)"; }
    local row
    row=$(awk '$1 == "b" && NF == 8 { print $2, $3, $4 }' "$out/$1.log")
    case $row in
        *-*) { echo "# $1: a rate missing, its output:"; cat "$out/$1.log"; } >&2 ;;
    esac
    echo "$row"
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "-" || b == "-" || b == 0) print "-"; else printf "%.2f", a / b }'; }
median() { printf '%s\n' "$@" | { grep -v '^-$' || true; } | sort -g |
    awk '{ v[NR] = $1 } END { if (!NR) print "-"; else if (NR % 2) printf "%.2f", v[(NR + 1) / 2];
                              else printf "%.2f", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
verdict() { awk -v r="$1" -v t="$2" 'BEGIN { print (r != "-" && r >= t) ? "PASS" : "MISS" }'; }

"$build/bench/peers/tutorial_batches" --rows "$rows" --classes "$classes" \
    --min-indices "$indices" --max-indices "$indices" --seed "$seed" --trainers "$trainers" \
    --steps "$total" --out "$batches" >"$out/batches.log" 2>&1 || {
    cat "$out/batches.log" >&2; die "tutorial_batches failed"; }

echo "# machine: $(nproc) cores, $(lscpu | sed -n 's/^Model name: *//p'); UCX $(ucx_info -v | sed -n 's/^# Version //p'); $("$python" -c 'import torch, torchrec; print(f"torch {torch.__version__}, torchrec {torchrec.__version__}")')"
echo "# job: table $rows x $dim (sum) -> Linear($dim, $classes), cross-entropy, SGD lr 0.05; $trainers trainers; $indices indices a trainer step in bags of 1-10"
echo "# ember: 1 PS + master, UCX_TLS=$UCX_TLS, sync${ember_flags_text:+, EMBER_FLAGS $ember_flags_text}; TorchRec: $trainers gloo processes, DMP row-wise, fused SGD, DDP, loop $pipeline"
echo "# the same bags on both sides (ember's tutorial draw, --seed $seed, written by tutorial_batches for TorchRec); steps $((warmup + 1))-$total timed, the first $warmup left out on both (ember's first epoch of --batches $warmup, TorchRec's --warmup-steps $warmup); $rounds rounds, alternating which goes first"
large=() large_ratios=() dlrm_rows=() dlrm_ratios=()
load() { cut -d' ' -f1 /proc/loadavg; }
for r in $(seq 1 "$rounds"); do
    round_load=$(load)
    # Each side's result in a file: a side that fails stops the script.
    if ((r % 2)); then
        ember_round "ember-$r" >"$out/ember-$r.result"
        torchrec_round "torchrec-$r" >"$out/torchrec-$r.result"
    else
        torchrec_round "torchrec-$r" >"$out/torchrec-$r.result"
        ember_round "ember-$r" >"$out/ember-$r.result"
    fi
    e_rate= e_bags= t_rate= t_bags=
    read -r e_rate e_bags <"$out/ember-$r.result" || true
    read -r t_rate t_bags <"$out/torchrec-$r.result" || true
    [ -n "$e_bags" ] || die "no rate from ember's metrics (round $r)"
    [ -n "$t_bags" ] || { cat "$out/torchrec-$r.log" >&2; die "no RESULT line from the TorchRec peer (round $r)"; }
    [ "$e_bags" = "$t_bags" ] ||
        die "round $r: ember timed $e_bags bags, TorchRec $t_bags: not the same batches"
    large_ratios+=("$(ratio "$e_rate" "$t_rate")")
    large+=("$(printf '%-6s %14s %16s %7s %11s %5s' "$r" "$e_rate" "$t_rate" "${large_ratios[-1]}" \
        "$e_bags" "$round_load")")
    echo "# round $r: large table ${large_ratios[-1]}x" >&2
    if [ "$dlrm" = 1 ]; then
        round_load=$(load)
        dlrm_round "dlrm-$r" >"$out/dlrm-$r.result"
        d_ember= d_trec= d_ratio=
        read -r d_ember d_trec d_ratio <"$out/dlrm-$r.result" || true
        [ -n "$d_ratio" ] || { cat "$out/dlrm-$r.log" >&2; die "no config b row from bench/dlrm_vs_torchrec.sh (round $r)"; }
        dlrm_ratios+=("$d_ratio")
        dlrm_rows+=("$(printf '%-6s %14s %16s %7s %5s' "$r" "$d_ember" "$d_trec" "$d_ratio" "$round_load")")
        echo "# round $r: DLRM b ${d_ratio}x" >&2
    fi
done

large_median=$(median "${large_ratios[@]}")
echo
echo "## one table $rows x $dim, $indices indices a trainer step"
printf '%-6s %14s %16s %7s %11s %5s\n' round "ember bags/s" "torchrec bags/s" ratio "timed bags" load
printf '%s\n' "${large[@]}"
echo "median ratio: ${large_median}x"
echo "target: >= 4x TorchRec's examples/s, sync mode: $(verdict "$large_median" 4) (${large_median}x)"
if [ "$dlrm" = 1 ]; then
    dlrm_median=$(median "${dlrm_ratios[@]}")
    echo
    echo "## DLRM sparse-heavy (bench/dlrm_vs_torchrec.sh config b, $dlrm_steps steps, its own timing)"
    printf '%-6s %14s %16s %7s %5s\n' round "ember ex/s" "torchrec ex/s" ratio load
    printf '%s\n' "${dlrm_rows[@]}"
    echo "median ratio: ${dlrm_median}x"
    echo "target: >= 3x TorchRec's examples/s, sync mode: $(verdict "$dlrm_median" 3) (${dlrm_median}x)"
fi

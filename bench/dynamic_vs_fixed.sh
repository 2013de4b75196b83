#!/usr/bin/env bash
# Dynamic tables (--table-kind dynamic) beside fixed ones, in one run:
#
#   1. throughput, rounds alternating which kind goes first, the median of
#      the rounds' dynamic / fixed:
#      tutorial  the 1,000,000 x 64 job (bench/train_vs_torch.sh's large
#                table: EmbeddingBag(ROWS, DIM, sum) -> Linear(DIM, 8), SGD
#                lr 0.05, 2,000-4,000 uniform ids a trainer step), steps/s
#                over every epoch
#      dlrm      DLRM sparse-heavy (bench/dlrm_vs_torchrec.sh config b: 26
#                tables of DLRM_ROWS x 16, DenseArch 64,16, OverArch 64,1,
#                B 4096, Adagrad lr 0.05) on ember-criteo-gen's power-law
#                ids (a feature's id = vocab x u^3, hashed, mod the rows:
#                with a dynamic table the ids stay in [0, rows)),
#                examples/s over every step
#   2. memory: the tutorial job's dynamic table with Adagrad after
#      EPOCHS x BATCHES steps holds N rows; its bytes (the --metrics
#      dynamic_table line's) and the PS's resident growth over a run that
#      admits 2 rows, each over N x (row + Adagrad state) = N x 8 x DIM bytes
#   3. churn: the tutorial job with CHURN_ROWS (10 x BUDGET) uniform ids
#      and --table-budget BUDGET --admit-count 1 (LRU): the PS's VmRSS,
#      sampled every 0.1 s, after the table is full (max / min - 1), and
#      the bags/s (examples/s) after the fill over those before it (--metrics
#      progress records every LOG_EVERY steps); the fill's step is where
#      the expected distinct ids reach BUDGET per PS; "before" is the
#      records from step 2 x LOG_EVERY to 3/4 of it, "after" from 5/4 of it
#
# then one summary block of ratios and targets (throughput >= 0.80 of
# fixed, memory <= 1.30x, RSS flat within 5% after the fill, rate after
# the fill >= 0.80 of before).
#
#   bench/dynamic_vs_fixed.sh                       about 2 minutes on 2 cores
#   ROUNDS=5 EPOCHS=50 CHURN_STEPS=1000 bench/dynamic_vs_fixed.sh
#   PARTS="tutorial churn" bench/dynamic_vs_fixed.sh
#
# Environment: BUILD (<repo>/build: ember-run, ember-train,
# ember-criteo-gen), PARTS ("tutorial dlrm memory churn"), ROUNDS (3),
# TRAINERS (2), PS (1), UCX_TLS (sm,self; loopback only), SEED (1);
# tutorial, memory: ROWS (1000000), DIM (64), EPOCHS (20), BATCHES (10),
# MIN_INDICES (2000), MAX_INDICES (4000); dlrm: DLRM_ROWS (1000000),
# DLRM_STEPS (20), BATCH (4096), EMBER_DATA (npy: TorchRec's npy layout,
# written by bench/criteo_npy.py with PYTHON (/usr/bin/python3, numpy);
# tsv: streamed and parsed while it trains); churn: BUDGET (500000),
# CHURN_ROWS (10 x BUDGET), CHURN_STEPS (400), LOG_EVERY (5), EVICT (lru);
# KEEP (0: 1 keeps the logs, whose folder is printed).
# Exit 0 when every run succeeded (targets missed or not), 2 on bad
# settings or a failed run.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
build=${BUILD:-$repo/build}
parts=${PARTS:-tutorial dlrm memory churn}
rounds=${ROUNDS:-3}
trainers=${TRAINERS:-2}
ps=${PS:-1}
seed=${SEED:-1}
rows=${ROWS:-1000000}
dim=${DIM:-64}
epochs=${EPOCHS:-20}
batches=${BATCHES:-10}
min_indices=${MIN_INDICES:-2000}
max_indices=${MAX_INDICES:-4000}
dlrm_rows=${DLRM_ROWS:-1000000}
dlrm_steps=${DLRM_STEPS:-20}
batch=${BATCH:-4096}
data_kind=${EMBER_DATA:-npy}
unset EMBER_DATA # not ember's own (it would warn of it)
python=${PYTHON:-/usr/bin/python3}
budget=${BUDGET:-500000}
churn_rows=${CHURN_ROWS:-$((10 * budget))}
churn_steps=${CHURN_STEPS:-400}
log_every=${LOG_EVERY:-5}
evict=${EVICT:-lru}

die() { echo "dynamic_vs_fixed: $*" >&2; exit 2; }
positive() {
    for v in "$@"; do
        [[ ${!v} =~ ^[1-9][0-9]{0,9}$ ]] || die "${v^^}: '${!v}' is not a positive integer"
    done
}
positive rounds trainers ps rows dim epochs batches min_indices max_indices dlrm_rows \
    dlrm_steps batch budget churn_rows churn_steps log_every
[[ $seed =~ ^[0-9]{1,9}$ ]] || die "SEED: '$seed' is not an integer"
((min_indices <= max_indices)) || die "MIN_INDICES $min_indices is above MAX_INDICES $max_indices"
for p in $parts; do
    [[ $p =~ ^(tutorial|dlrm|memory|churn)$ ]] || die "PARTS: '$p' is not tutorial, dlrm, memory or churn"
done
[[ -n ${parts// /} ]] || die "PARTS is empty"
[[ $evict =~ ^(lru|lfu)$ ]] || die "EVICT: '$evict' is not lru or lfu"
[[ $data_kind =~ ^(npy|tsv)$ ]] || die "EMBER_DATA: '$data_kind' is not npy or tsv"
((budget * ps < churn_rows)) || die "CHURN_ROWS $churn_rows does not exceed BUDGET $budget x PS $ps: nothing to evict"
for tool in ember-train ember-run ember-criteo-gen; do
    [ -x "$build/tools/$tool" ] || die "$build/tools/$tool missing: build ember first (or set BUILD)"
done
has() { [[ " $parts " == *" $1 "* ]]; }

out=$(mktemp -d /tmp/ember-dynamic-bench.XXXXXX)
if [ "${KEEP:-0}" = 1 ]; then
    echo "# logs and files in $out"
else
    trap 'rm -rf "$out"' EXIT
fi
export UCX_TLS=${UCX_TLS:-sm,self} UCX_NET_DEVICES=${UCX_NET_DEVICES:-lo}
# The PS's memory line is an INFO line of the master's.
export EMBER_LOG_LEVEL=info
world=$((trainers + 1 + ps))
base=(--trainers "$trainers" --ps "$ps" --seed "$seed" --rows "$rows" --dim "$dim")
tutorial=("${base[@]}" --min-indices "$min_indices" --max-indices "$max_indices" --batches "$batches")

# train NAME ARGS...: one ember-train job, its log and --metrics in $out.
train() {
    local name=$1; shift
    "$build/tools/ember-run" -n "$world" "$build/tools/ember-train" "$@" \
        --metrics "$out/$name.json" >"$out/$name.log" 2>&1 || {
        tail -20 "$out/$name.log" >&2; die "ember-train failed ($name): $*"; }
}
# field FILE KEY: KEY's number in each --metrics line of FILE that has it.
field() { sed -n "s/.*\"$2\": \([0-9.e+-]*\).*/\1/p" "$1"; }
# rate NAME KEY: KEY (steps or examples) over the epochs' seconds.
rate() {
    awk -v key="\"$2\": " '/^\{"epoch"/ {
        match($0, /"seconds": [0-9.e+-]+/); s += substr($0, RSTART + 11, RLENGTH - 11)
        match($0, key "[0-9]+"); n += substr($0, RSTART + length(key), RLENGTH - length(key)) }
        END { if (s > 0) printf "%.1f\n", n / s; else print "-" }' "$out/$1.json"
}
# dyn NAME: "ROWS BYTES ADMITTED EVICTED" summed over the dynamic_table lines.
dyn() {
    awk '/"dynamic_table"/ {
        for (i = 1; i <= NF; i++) { k = $i; gsub(/[":,{}]/, "", k); v = $(i + 1); gsub(/[,}]/, "", v)
            if (k == "rows") r += v; else if (k == "bytes") b += v
            else if (k == "admitted") a += v; else if (k == "evicted") e += v } }
        END { printf "%d %d %d %d\n", r, b, a, e }' "$out/$1.json"
}
# resident NAME: the PS's resident MiB summed over the PS (the master's line).
resident() {
    sed -n 's/.*\] INFO ps[0-9]*: table .* resident \([0-9.]*\) MiB;.*/\1/p' "$out/$1.log" |
        awk '{ s += $1 } END { if (NR) printf "%.1f\n", s; else print "-" }'
}
fmt() { awk -v v="$1" 'BEGIN { if (v == "-") print "-"; else printf "%.2f", v }'; }
median() { tr ' ' '\n' | awk 'NF && $1 != "-"' | sort -g | awk '{ v[NR] = $1 } END {
    if (!NR) print "-"; else if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
div() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "-" || b == "-" || b == 0) print "-"; else printf "%.3f\n", a / b }'; }
verdict() { # VALUE OP LIMIT
    awk -v v="$1" -v op="$2" -v l="$3" 'BEGIN {
        if (v == "-") print "-"; else if ((op == ">=" && v >= l) || (op == "<=" && v <= l)) print "PASS"; else print "MISS" }'
}

echo "# machine: $(nproc) cores, $(lscpu | sed -n 's/^Model name: *//p'), load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# $trainers trainers, master, $ps PS (ember-run -n $world), UCX_TLS=$UCX_TLS; $rounds rounds, fixed and dynamic alternating which goes first"
declare -A ratios
summary=()

# ---- 1. throughput ---------------------------------------------------------
if has tutorial; then
    echo
    echo "## tutorial: EmbeddingBag($rows, $dim, sum) -> Linear($dim, 8), SGD lr 0.05, $min_indices-$max_indices ids a trainer step, $epochs x $batches steps; steps/s over every epoch"
    printf '%-6s %14s %14s %7s %12s %12s\n' round "fixed st/s" "dynamic st/s" ratio "dyn rows" "dyn MiB"
    for ((r = 1; r <= rounds; r++)); do
        order=(fixed dynamic); ((r % 2)) || order=(dynamic fixed)
        for kind in "${order[@]}"; do
            train "tut-$kind-$r" "${tutorial[@]}" --epochs "$epochs" --table-kind "$kind"
        done
        f=$(rate "tut-fixed-$r" steps) d=$(rate "tut-dynamic-$r" steps)
        read -r drows dbytes _ _ <<<"$(dyn "tut-dynamic-$r")"
        ratios[tutorial]+=" $(div "$d" "$f")"
        printf '%-6s %14s %14s %7s %12s %12.1f\n' "$r" "$f" "$d" "$(div "$d" "$f")" "$drows" \
            "$(awk -v b="$dbytes" 'BEGIN { print b / 1048576 }')"
        sgd_bytes+=" $(awk -v b="$dbytes" -v n="$drows" -v d="$dim" 'BEGIN { if (n) printf "%.3f", b / (n * 4 * d) }')"
    done
    m=$(median <<<"${ratios[tutorial]}")
    summary+=("$(printf '%-44s %7s  target >= 0.80: %s' "1a. tutorial $rows x $dim, steps/s dyn/fixed" "$(fmt "$m")" "$(verdict "$m" '>=' 0.80)")")
    # Warm: both tables start from one --init file (a fixed run's --save),
    # the dynamic table's rows written as keys at set-up, as the fixed
    # table's are drawn at its creation: only the steps are timed, and no
    # key is new in them (the cold rounds above admit ~all ids as they come).
    echo
    echo "## tutorial, warm: both from the same --init rows (every key holds a row before the first step)"
    printf '%-6s %14s %14s %7s
' round "fixed st/s" "dynamic st/s" ratio
    train tut-init "${tutorial[@]}" --epochs 1 --save "$out/init.safetensors"
    for ((r = 1; r <= rounds; r++)); do
        order=(fixed dynamic); ((r % 2)) || order=(dynamic fixed)
        for kind in "${order[@]}"; do
            train "warm-$kind-$r" "${tutorial[@]}" --epochs "$epochs" --table-kind "$kind" \
                --init "$out/init.safetensors"
        done
        f=$(rate "warm-fixed-$r" steps) d=$(rate "warm-dynamic-$r" steps)
        ratios[warm]+=" $(div "$d" "$f")"
        printf '%-6s %14s %14s %7s
' "$r" "$f" "$d" "$(div "$d" "$f")"
    done
    m=$(median <<<"${ratios[warm]}")
    summary+=("$(printf '%-44s %7s  target >= 0.80: %s' "    warm (every key a row before the steps)" "$(fmt "$m")" "$(verdict "$m" '>=' 0.80)")")
    summary+=("$(printf '%-44s %7s  (no target: SGD holds no state)' "    its table bytes / (N x $((4 * dim)) B), SGD" "$(fmt "$(median <<<"$sgd_bytes")")")")
fi

if has dlrm; then
    echo
    examples=$((dlrm_steps * batch * trainers))
    "$build/tools/ember-criteo-gen" --examples "$examples" --out "$out/train.tsv" --seed "$seed" >/dev/null
    case $data_kind in
        npy) "$python" "$here/criteo_npy.py" "$out/train.tsv" "$out/train" >/dev/null ||
                 die "cannot write the npy layout (PYTHON=$python needs numpy; or EMBER_DATA=tsv)"
             data=(--data "criteo-npy:$out/train") ;;
        tsv) data=(--data "criteo:$out/train.tsv") ;;
    esac
    # shellcheck disable=SC2054 # the layer sizes are one flag's value
    dlrm=(--model dlrm --trainers "$trainers" --ps "$ps" --seed "$seed" --embedding-dim 16
        --num-embeddings "$dlrm_rows" --dense-arch-layer-sizes 64,16 --over-arch-layer-sizes 64,1
        --batch-size "$batch" --optimizer adagrad --lr 0.05 --steps "$dlrm_steps" "${data[@]}")
    echo "## dlrm sparse-heavy: 26 tables of $dlrm_rows x 16, B $batch, Adagrad lr 0.05, $dlrm_steps steps, ember-criteo-gen's power-law ids ($data_kind); examples/s over every step"
    printf '%-6s %14s %14s %7s %12s %12s %12s\n' round "fixed ex/s" "dynamic ex/s" ratio "dyn rows" "fixed RSS" "dyn RSS"
    for ((r = 1; r <= rounds; r++)); do
        order=(fixed dynamic); ((r % 2)) || order=(dynamic fixed)
        for kind in "${order[@]}"; do
            train "dlrm-$kind-$r" "${dlrm[@]}" --table-kind "$kind"
        done
        f=$(rate "dlrm-fixed-$r" examples) d=$(rate "dlrm-dynamic-$r" examples)
        read -r drows _ _ _ <<<"$(dyn "dlrm-dynamic-$r")"
        ratios[dlrm]+=" $(div "$d" "$f")"
        printf '%-6s %14s %14s %7s %12s %10s M %10s M\n' "$r" "$f" "$d" "$(div "$d" "$f")" "$drows" \
            "$(resident "dlrm-fixed-$r")" "$(resident "dlrm-dynamic-$r")"
    done
    m=$(median <<<"${ratios[dlrm]}")
    summary+=("$(printf '%-44s %7s  target >= 0.80: %s' "1b. DLRM sparse-heavy, examples/s dyn/fixed" "$(fmt "$m")" "$(verdict "$m" '>=' 0.80)")")
fi

# ---- 2. memory ---------------------------------------------------------------
if has memory; then
    echo
    row_bytes=$((8 * dim))
    echo "## memory: the tutorial job's dynamic table, Adagrad lr 0.05, $epochs x $batches steps; against N x $row_bytes B (dim $dim fp32 rows + Adagrad state)"
    train mem-empty "${base[@]}" --optimizer adagrad --epochs 1 --batches 1 --min-indices 1 \
        --max-indices 1 --table-kind dynamic
    train mem-full "${tutorial[@]}" --optimizer adagrad --epochs "$epochs" --table-kind dynamic
    read -r n bytes _ _ <<<"$(dyn mem-full)"
    read -r n0 _ _ _ <<<"$(dyn mem-empty)"
    rss=$(resident mem-full) rss0=$(resident mem-empty)
    want=$(awk -v n="$n" -v b="$row_bytes" 'BEGIN { printf "%.1f", n * b / 1048576 }')
    table_ratio=$(awk -v x="$bytes" -v n="$n" -v b="$row_bytes" 'BEGIN { printf "%.3f", x / (n * b) }')
    rss_ratio=$(awk -v r="$rss" -v r0="$rss0" -v n="$n" -v b="$row_bytes" 'BEGIN { printf "%.3f", (r - r0) * 1048576 / (n * b) }')
    echo "rows held N $n: N x $row_bytes B = $want MiB"
    echo "table bytes (dynamic_table): $(awk -v x="$bytes" 'BEGIN { printf "%.1f", x / 1048576 }') MiB, $(awk -v x="$bytes" -v n="$n" 'BEGIN { printf "%.1f", x / n }') B a row: ${table_ratio}x"
    echo "PS resident: $rss MiB, $rss0 MiB with $n0 rows (an empty table): growth $(awk -v a="$rss" -v b="$rss0" 'BEGIN { printf "%.1f", a - b }') MiB: ${rss_ratio}x"
    summary+=("$(printf '%-44s %7s  target <= 1.30: %s' "2.  memory: table bytes / (N x $row_bytes B)" "$(fmt "$table_ratio")" "$(verdict "$table_ratio" '<=' 1.30)")")
    summary+=("$(printf '%-44s %7s  target <= 1.30: %s' "    PS resident growth / (N x $row_bytes B)" "$(fmt "$rss_ratio")" "$(verdict "$rss_ratio" '<=' 1.30)")")
fi

# ---- 3. churn ----------------------------------------------------------------
# sample NAME RUNPID: "SECONDS STEP VMRSS_KB" lines of the last PS (the last
# rank) every 0.1 s until the job ends; STEP the last progress record's.
sample() {
    local name=$1 runpid=$2 pid="" p t0
    while [[ -z $pid ]] && kill -0 "$runpid" 2>/dev/null; do
        for p in $(pgrep -x ember-train -P "$runpid" || true); do
            tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "EMBER_RANK=$((world - 1))" && pid=$p
        done
        [[ -n $pid ]] || sleep 0.05
    done
    [[ -n $pid ]] || return 0
    echo "# ps pid $pid" >"$out/$name.rss"
    t0=$(date +%s.%N)
    while [[ -r /proc/$pid/status ]]; do
        local rss="" key value _ step
        while read -r key value _; do [[ $key == VmRSS: ]] && rss=$value && break; done <"/proc/$pid/status" 2>/dev/null || true
        step=$(tail -n 1 "$out/$name.json" 2>/dev/null | sed -n 's/^{"progress": \([0-9]*\),.*/\1/p' || true)
        [[ -n $rss ]] && echo "$(date +%s.%N) ${step:-0} $rss" >>"$out/$name.rss"
        sleep 0.1
    done
    awk -v t0="$t0" '!/^#/ { $1 = sprintf("%.2f", $1 - t0) } 1' "$out/$name.rss" >"$out/$name.rss.tmp" &&
        mv "$out/$name.rss.tmp" "$out/$name.rss"
}
if has churn; then
    echo
    ids=$((trainers * (min_indices + max_indices) / 2))
    # The expected distinct ids of a PS reach BUDGET: R/P (1 - e^(-ids s / R)) = B.
    fill=$(awk -v R="$churn_rows" -v B="$budget" -v P="$ps" -v n="$ids" \
        'BEGIN { s = -log(1 - B * P / R) * R / n; printf "%d", s == int(s) ? s : int(s) + 1 }')
    before_lo=$((2 * log_every)) before_hi=$((fill * 3 / 4)) after_lo=$(((fill * 5 + 3) / 4))
    ((before_hi >= before_lo + log_every)) ||
        echo "# warning: the fill (step $fill) comes too soon for a rate before it: raise BUDGET or lower LOG_EVERY"
    ((churn_steps >= after_lo + 2 * log_every)) || die "CHURN_STEPS $churn_steps ends before the fill (step $fill) is well past"
    echo "## churn: the tutorial job, ids uniform over $churn_rows, --table-budget $budget --admit-count 1 --evict $evict, $churn_steps steps (~$ids ids a step): the table fills near step $fill"
    echo "# rate before the fill: progress records of steps $before_lo-$before_hi; after: $after_lo-$churn_steps; VmRSS of the last PS every 0.1 s, after: from step $after_lo"
    printf '%-6s %12s %12s %7s %11s %11s %7s %10s %10s\n' round "before bag/s" "after bag/s" ratio "RSS min" "RSS max" "flat" admitted evicted
    for ((r = 1; r <= rounds; r++)); do
        name=churn-$r
        "$build/tools/ember-run" -n "$world" "$build/tools/ember-train" --trainers "$trainers" \
            --ps "$ps" --seed "$seed" --rows "$churn_rows" --dim "$dim" --min-indices "$min_indices" \
            --max-indices "$max_indices" --epochs 1 --batches "$churn_steps" --table-kind dynamic \
            --table-budget "$budget" --admit-count 1 --evict "$evict" --log-every "$log_every" \
            --metrics "$out/$name.json" >"$out/$name.log" 2>&1 &
        runpid=$!
        sample "$name" "$runpid"
        wait "$runpid" || { tail -20 "$out/$name.log" >&2; die "ember-train failed ($name)"; }
        [[ -s $out/$name.rss ]] || die "no VmRSS samples of the PS ($name)"
        read -r held _ admitted evicted <<<"$(dyn "$name")"
        ((held == budget * ps && evicted > 0)) ||
            die "round $r: the table holds $held rows ($((budget * ps)) wanted) and evicted $evicted: not full"
        # Each record's rate is over its LOG_EVERY steps: a window's rate is
        # their harmonic mean (about the same bags a step).
        read -r before after <<<"$(awk -v a="$before_lo" -v b="$before_hi" -v c="$after_lo" '
            /^\{"progress"/ { match($0, /"progress": [0-9]+/); s = substr($0, RSTART + 12, RLENGTH - 12) + 0
                match($0, /"[a-z]+_per_s": [0-9.]+/); v = substr($0, RSTART, RLENGTH); sub(/.*: /, "", v)
                if (v <= 0) next
                if (s > a && s <= b) { nb++; ib += 1 / v } else if (s > c) { na++; ia += 1 / v } }
            END { if (nb) printf "%.1f ", nb / ib; else printf "- "; if (na) printf "%.1f\n", na / ia; else print "-" }' "$out/$name.json")"
        read -r lo hi <<<"$(awk -v c="$after_lo" '!/^#/ && $2 >= c { if (!n++ || $3 < lo) lo = $3; if ($3 > hi) hi = $3 }
            END { if (n) print lo, hi; else print "- -" }' "$out/$name.rss")"
        flat=$(awk -v lo="$lo" -v hi="$hi" 'BEGIN { if (lo == "-") print "-"; else printf "%.4f", hi / lo - 1 }')
        ratios[churn]+=" $(div "$after" "$before")"
        [[ $flat == - ]] || ratios[flat]+=" $flat"
        mib() { awk -v k="$1" 'BEGIN { if (k == "-") print "-"; else printf "%.1f M", k / 1024 }'; }
        pct() { awk -v f="$1" 'BEGIN { if (f == "-") print "-"; else printf "%.1f%%", f * 100 }'; }
        printf '%-6s %12s %12s %7s %11s %11s %7s %10s %10s\n' "$r" "$before" "$after" "$(div "$after" "$before")" \
            "$(mib "$lo")" "$(mib "$hi")" "$(pct "$flat")" "$admitted" "$evicted"
    done
    m=$(median <<<"${ratios[flat]:-}")
    summary+=("$(printf '%-44s %7s  target <= 5%%: %s' "3.  churn: PS VmRSS after the fill, max/min-1" "$(pct "$m")" "$(verdict "$m" '<=' 0.05)")")
    m=$(median <<<"${ratios[churn]}")
    summary+=("$(printf '%-44s %7s  target >= 0.80: %s' "    bags/s after the fill / before it" "$(fmt "$m")" "$(verdict "$m" '>=' 0.80)")")
fi

echo
echo "== summary: dynamic tables (medians of $rounds rounds' ratios; UCX_TLS=$UCX_TLS)"
printf '%s\n' "${summary[@]}"

#!/usr/bin/env bash
# bench/compare.sh: ember beside its peers, in one run, on this machine, over
# the same transport and rank counts, loopback only.  For each figure it prints
# ember's, the peer's and the ratio, then PASS/MISS for the targets:
#
#   lookup    response GB/s >= 80% of ucx_perftest ucp_am_bw at the same
#             message size (one shard's response), tcp and shared memory;
#             one-bag lookup p50 <= 2x ucx_perftest's round trip (ucp_am_lat
#             at the response size; it reports half a round trip); beside
#             them, what one core gathers of the same rows with nothing else
#             to do (bench/peers/row_gather, on the PS's core): a reference
#   allreduce host busbw >= Open MPI MPI_Allreduce busbw for sizes >= 1 MiB,
#             2 and 4 ranks; >= 10x gloo (torch.distributed) at every size
#   training  bench/train_vs_torch.sh (QUICK=1), the PyTorch tutorial program
#
#   bench/compare.sh                  everything (minutes: docs/PERFORMANCE.md)
#   OUT=dir bench/compare.sh          keep the raw outputs and .dat files in dir
#   bench/plot.gp (gnuplot) turns OUT's .dat files into docs/performance.png
#
# Environment: BUILD (default <repo>/build), PYTHON (/usr/bin/python3),
# TLS_LIST ("tcp sm": ember UCX_TLS tcp,self / sm,self; Open MPI btl
# self,tcp / self,vader; gloo is TCP only), RANKS ("2 4"), AR_MAX (32M),
# AR_ITERS (20), AR_WARMUP (50), LK_ITERS (100000: lookups per size, at most 1 GiB of
# responses, and as many ucx_perftest messages), REPEAT (3: rounds per figure, the median
# is reported; a ratio is the median of the per-round ratios), SKIP_TRAIN=1
# to leave the tutorial out.
# Exit status: 0 all targets PASS, 1 some MISS, 2 an error.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
build=${BUILD:-$here/../build}
python=${PYTHON:-/usr/bin/python3}
bench=$build/bench/ember-bench
launcher=$build/tools/ember-run
mpi_peer=$build/bench/peers/mpi_allreduce
row_gather=$build/bench/peers/row_gather
tls_list=${TLS_LIST:-"tcp sm"}
ranks_list=${RANKS:-"2 4"}
ar_max=${AR_MAX:-32M}
ar_iters=${AR_ITERS:-20}
# 50 untimed rounds per size for every tool: UCX touches its shared-memory
# descriptors for the first time in the first few dozen messages after a
# protocol change (8 B goes "short", 32 B "bcopy"), and nccl-tests' -w 5
# left those first touches in the timed part of the small sizes (the same
# holds for ucx_perftest's own first round trips).
ar_warmup=${AR_WARMUP:-50}
# Lookups per size: LK_ITERS, at most 1 GiB of responses (ember-bench's
# --max-bytes), at least 50; ucx_perftest gets the same count at each size.
lk_iters=${LK_ITERS:-100000}
lk_bytes=$((1 << 30))
gather_iters=2000 # row_gather: a reference, not a peer
repeat=${REPEAT:-3}
lk_window=16
lk_bags="1,16,256,1024,4096" # x dim 64 x 4 B: 256 B .. 1 MiB responses
out=${OUT:-}
if [[ -z $out ]]; then
    out=$(mktemp -d /tmp/ember-compare.XXXXXX)
    trap 'rm -rf "$out"' EXIT
fi
mkdir -p "$out"
rm -f "$out"/ar-*.out "$out"/lookup-*.out # gloo's is reused within this run only
export UCX_NET_DEVICES=lo EMBER_LOG_LEVEL=warn

for tool in "$bench" "$launcher" "$mpi_peer" "$row_gather"; do
    [[ -x $tool ]] || { echo "$0: $tool not built (MPI peer: apt-get install libopenmpi-dev)" >&2; exit 2; }
done
for cmd in ucx_perftest mpirun; do
    command -v $cmd >/dev/null || { echo "$0: $cmd not found (scripts/setup.sh --bench)" >&2; exit 2; }
done
"$python" -c 'import torch.distributed' 2>/dev/null ||
    { echo "$0: torch not found for $python (apt-get install python3-torch)" >&2; exit 2; }

misses=0
verdict() { # OK(0/1): PASS or MISS (the caller counts the MISSes)
    if (($1)); then echo "PASS"; else echo "MISS"; fi
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", (b > 0 ? a / b : 0) }'; }
ucx_tls() { case $1 in tcp) echo tcp,self ;; sm) echo sm,self ;; esac; }
mpi_btl() { case $1 in tcp) echo self,tcp ;; sm) echo self,vader ;; esac; }
free_port() {
    "$python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# perftest DIR TEST SIZE ITERS WARMUP [OUTSTANDING]
# shellcheck source=perftest.sh
source "$(dirname "$0")/perftest.sh"
trap '[[ -n $server_pid ]] && kill $server_pid 2>/dev/null; true' ERR
mpi_bind=

echo "# bench/compare.sh: $(nproc) CPUs, $(lscpu | sed -n 's/^Model name: *//p'), $(uname -sr)"
echo "# $(ucx_info -v | head -n 1 | sed 's/^# //'); $(mpirun --version | head -n 1);" \
    "torch $("$python" -c 'import torch; print(torch.__version__)')"

# rounds A B: the two tools' figures (one per line, in round order) side by
# side, for paired_ratio (perftest.sh).
rounds() { paste -d ' ' <(printf '%s\n' "$1") <(printf '%s\n' "$2"); }

# ---- lookup ---------------------------------------------------------------
# Each round runs ember's sweep, then ucx_perftest at every response size; a
# figure is the median over the rounds and a ratio the median of the rounds'
# ratios (a shared or virtual machine moves single runs, and whole rounds
# together: alternating the tools and pairing them per round keeps that
# noise out of the ratios; docs/PERFORMANCE.md gives the spread).
bench_bind 2 # 1 client + 1 PS, and ucx_perftest's client and server
echo "# binding: EMBER_BIND and mpirun --bind-to as Open MPI's default for the rank" \
    "count (core when there is a core per rank), ucx_perftest pinned as ember's ranks"
echo "# every figure: the median of $repeat rounds, the tools alternating (REPEAT=$repeat);" \
    "every ratio: the median of the per-round ratios"
# The PS's pooling beside a bare gather of the same rows on the same core
# (no transport: once per round, for both transports' tables).
gather_cmd=("$row_gather" --bags "$lk_bags" -n "$gather_iters" --window "$lk_window")
gather_pin=()
(($(nproc) >= 2)) && gather_pin=(taskset -c 1) # the PS's core under EMBER_BIND=core
# Beside it, the same gather while the other core reads every output buffer
# into one of its own, as a same-host client reads each reply.
gather_beside=()
(($(nproc) >= 2)) && gather_beside=(--beside-copy 0)
echo
echo "=== one-core row gather (reference: no message, no checks, no transport) ==="
echo "\$ ${gather_pin[*]} ${gather_cmd[*]#"$build"/} [${gather_beside[*]}]"
for ((round = 1; round <= repeat; round++)); do
    "${gather_pin[@]}" "${gather_cmd[@]}" >"$out/gather-$round.out" 2>&1 ||
        { cat "$out/gather-$round.out" >&2; exit 2; }
    "${gather_pin[@]}" "${gather_cmd[@]}" "${gather_beside[@]}" >"$out/gather-beside-$round.out" 2>&1 ||
        { cat "$out/gather-beside-$round.out" >&2; exit 2; }
done
gather_gbs() { # NAME RESP_B: the median GB/s over the rounds of NAME (gather, gather-beside)
    for ((round = 1; round <= repeat; round++)); do
        awk -v r="$2" '!/^#/ && $2 == r { print $3 }' "$out/$1-$round.out"
    done | median
}

for tls_name in $tls_list; do
    tls=$(ucx_tls "$tls_name")
    export UCX_TLS=$tls
    echo
    echo "=== lookup, UCX_TLS=$tls, 1 client + 1 PS, dim 64, 1 index per bag, uniform, window $lk_window ==="
    cmd=("$launcher" -n 2 --no-prefix "$bench" lookup --ps 1 --bags "$lk_bags" --pool 1
        --dim 64 --dist uniform -n "$lk_iters" --max-bytes "$lk_bytes" --window "$lk_window" --csv)
    # The same sweep with each request its own message, as before request
    # batches (ember-bench batches half its window by default): shown beside.
    alone_cmd=("${cmd[@]}" --batch 0)
    lat_cmd=("$launcher" -n 2 --no-prefix "$bench" lookup --ps 1 --bags 1 --pool 1 --dim 64
        --dist uniform -n 5000 -w 500 --window 1 --csv)
    echo "\$ UCX_TLS=$tls ${cmd[*]#"$build"/}   # requests batched: up to half the window per message"
    echo "\$ UCX_TLS=$tls ${alone_cmd[*]#"$build"/}   # each request alone"
    echo "\$ UCX_TLS=$tls ${lat_cmd[*]#"$build"/}   # one-bag latency"
    : >"$out/lookup-$tls_name.pf"
    : >"$out/lookup-lat-$tls_name.pf"
    for ((round = 1; round <= repeat; round++)); do
        run_out=$out/lookup-$tls_name-$round.out
        "${cmd[@]}" >"$run_out" 2>&1 || { cat "$run_out" >&2; exit 2; }
        ((round == 1)) && grep -v -e '^csv,' -e ' UCX  ' "$run_out" | sed 's/^/  /'
        alone_out=$out/lookup-alone-$tls_name-$round.out
        "${alone_cmd[@]}" >"$alone_out" 2>&1 || { cat "$alone_out" >&2; exit 2; }
        while IFS=, read -r _ _ _ _ _ _ _ _ _ _ resp _; do
            # perftest gets as many messages as ember got lookups at this size.
            pn=$((lk_bytes / resp)); pn=$((pn > lk_iters ? lk_iters : pn))
            pn=$((pn < 50 ? 50 : pn))
            pf=$(perftest "$out" ucp_am_bw "$resp" "$pn" 100 "$lk_window") || exit 2
            awk -v r="$(cut -d, -f8 <<<"$pf")" -v s="$resp" \
                'BEGIN { printf "%s %.6f\n", s, r * s / 1e9 }' >>"$out/lookup-$tls_name.pf"
        done < <(grep '^csv,lookup,' "$run_out")

        # One-bag latency: window 1, 1 bag of 1 index (48 B request, 256 B reply).
        lat_out=$out/lookup-lat-$tls_name-$round.out
        "${lat_cmd[@]}" >"$lat_out" 2>&1 || { cat "$lat_out" >&2; exit 2; }
        pf=$(perftest "$out" ucp_am_lat 256 5000 500) || exit 2
        awk -v l="$(cut -d, -f2 <<<"$pf")" 'BEGIN { printf "%.4f\n", 2 * l }' \
            >>"$out/lookup-lat-$tls_name.pf"
    done
    printf '%10s | %10s %10s %6s %-12s | %10s %6s | %8s %10s | %10s %10s\n' resp_B "ember_GB/s" "pf_GB/s" \
        "%pf" "target >=80%" "alone_GB/s" "%pf" "ps_us" "ps_GB/s" "gather_GB/s" "beside_GB/s"
    : >"$out/lookup-$tls_name.dat"
    for resp in $(grep -h '^csv,lookup,' "$out/lookup-$tls_name-1.out" | cut -d, -f11); do
        gbs_rounds=$(for ((round = 1; round <= repeat; round++)); do
            awk -F, -v r="$resp" '/^csv,lookup,/ && $11 == r { print $14 }' \
                "$out/lookup-$tls_name-$round.out"; done)
        gbs=$(median <<<"$gbs_rounds")
        ps_us=$(grep -h '^csv,lookup,' "$out"/lookup-"$tls_name"-*.out |
            awk -F, -v r="$resp" '$11 == r { print $24 }' | median)
        pf_rounds=$(awk -v r="$resp" '$1 == r { print $2 }' "$out/lookup-$tls_name.pf")
        pf_gbs=$(median <<<"$pf_rounds")
        pct=$(awk -v r="$(rounds "$gbs_rounds" "$pf_rounds" | paired_ratio)" 'BEGIN { printf "%.0f", 100 * r }')
        ceiling=$(awk -v r="$resp" -v u="$ps_us" 'BEGIN { printf "%.3f", (u > 0 ? r / (u * 1e3) : 0) }')
        v=$(verdict "$(awk -v p="$pct" 'BEGIN { print (p >= 80) }')")
        [[ $v == MISS ]] && misses=$((misses + 1))
        alone_rounds=$(for ((round = 1; round <= repeat; round++)); do
            awk -F, -v r="$resp" '/^csv,lookup,/ && $11 == r { print $14 }' \
                "$out/lookup-alone-$tls_name-$round.out"; done)
        alone=$(median <<<"$alone_rounds")
        alone_pct=$(awk -v r="$(rounds "$alone_rounds" "$pf_rounds" | paired_ratio)" 'BEGIN { printf "%.0f", 100 * r }')
        gather=$(gather_gbs gather "$resp")
        beside=$(gather_gbs gather-beside "$resp")
        printf '%10s | %10.3f %10.3f %5s%% %-12s | %10.3f %5s%% | %8.2f %10.3f | %10.3f %10.3f\n' "$resp" "$gbs" \
            "$pf_gbs" "$pct" "$v" "$alone" "$alone_pct" "$ps_us" "$ceiling" "$gather" "$beside"
        echo "$resp $gbs $pf_gbs $ceiling $gather $beside $alone" >>"$out/lookup-$tls_name.dat"
    done
    echo "alone_GB/s: the same sweep with --batch 0, each request its own message (replies are batched either way);" \
        "ember_GB/s: requests of up to 2 KiB (8 KiB over tcp) posted together leave as one message, up to $((lk_window / 2)) (half the window)"
    echo "ps_us: the PS's own time per lookup (pooling, checks, reply handed to the transport; replies" \
        "<= 2 KiB, 8 KiB over tcp, leave batched after it); ps_GB/s = resp_B / ps_us, the most one PS core can serve whatever the network;" \
        "gather_GB/s: one core copying the same random rows with nothing else to do (row_gather);" \
        "beside_GB/s: the same while the other core reads each output buffer into its own, as the client reads each reply"
    p50_rounds=$(for ((round = 1; round <= repeat; round++)); do
        grep -h '^csv,lookup,' "$out/lookup-lat-$tls_name-$round.out" | cut -d, -f16; done)
    p50=$(median <<<"$p50_rounds")
    pf_rtt=$(median <"$out/lookup-lat-$tls_name.pf")
    r=$(awk -v r="$(rounds "$p50_rounds" "$(cat "$out/lookup-lat-$tls_name.pf")" | paired_ratio)" \
        'BEGIN { printf "%.2f", r }')
    v=$(verdict "$(awk -v r="$r" 'BEGIN { print (r <= 2.0) }')")
    [[ $v == MISS ]] && misses=$((misses + 1))
    echo "one-bag lookup p50 (window 1): ember $p50 us, ucx_perftest ucp_am_lat -s 256 RTT" \
        "$pf_rtt us, ratio $r (target <= 2.00): $v"
done
unset UCX_TLS

# ---- allreduce --------------------------------------------------------------
# busbw N FILE...: bench/perftest.sh.
for tls_name in $tls_list; do
    for n in $ranks_list; do
        tls=$(ucx_tls "$tls_name")
        bench_bind "$n"
        echo
        echo "=== allreduce, $n ranks: ember UCX_TLS=$tls, Open MPI btl $(mpi_btl "$tls_name"), gloo (TCP);" \
            "binding $EMBER_BIND ==="
        flags=(-b 8 -e "$ar_max" -f 4 -n "$ar_iters" -w "$ar_warmup" -c 1)
        echo "\$ UCX_TLS=$tls EMBER_BIND=$EMBER_BIND ember-run -n $n ember-bench allreduce ${flags[*]}"
        echo "\$ mpirun -n $n --bind-to $mpi_bind --mca pml ob1 --mca btl $(mpi_btl "$tls_name") ... mpi_allreduce ${flags[*]}"
        for ((round = 1; round <= repeat; round++)); do
            e_out=$out/ar-ember-$tls_name-$n-$round.out
            m_out=$out/ar-mpi-$tls_name-$n-$round.out
            UCX_TLS=$tls "$launcher" -n "$n" --no-prefix "$bench" allreduce "${flags[@]}" \
                >"$e_out" 2>&1 || { cat "$e_out" >&2; exit 2; }
            mpirun --allow-run-as-root --oversubscribe -n "$n" --bind-to "$mpi_bind" --mca pml ob1 \
                --mca btl "$(mpi_btl "$tls_name")" --mca btl_tcp_if_include lo \
                --mca oob_tcp_if_include lo "$mpi_peer" "${flags[@]}" \
                >"$m_out" 2>&1 || { cat "$m_out" >&2; exit 2; }
        done
        if [[ ! -f $out/ar-gloo-$n.out ]]; then
            echo "\$ python3 bench/peers/gloo_allreduce.py -N $n ${flags[*]}   # once: far behind"
            "$python" "$here/peers/gloo_allreduce.py" -N "$n" "${flags[@]}" \
                >"$out/ar-gloo-$n.out" 2>&1 || { cat "$out/ar-gloo-$n.out" >&2; exit 2; }
        fi
        for f in "$out"/ar-ember-"$tls_name"-"$n"-*.out "$out"/ar-mpi-"$tls_name"-"$n"-*.out \
            "$out/ar-gloo-$n.out"; do
            grep -q '# Out of bounds values : 0 OK' "$f" ||
                { echo "$0: $f: #wrong is not 0" >&2; cat "$f" >&2; exit 2; }
        done
        # ember/MPI per size: the median of the per-round ratios.
        for ((round = 1; round <= repeat; round++)); do
            join <(busbw "$n" "$out/ar-ember-$tls_name-$n-$round.out") \
                <(busbw "$n" "$out/ar-mpi-$tls_name-$n-$round.out") |
                awk '$4 > 0 { print $1, $2 / $4 }'
        done >"$out/ar-$tls_name-$n.ratios"
        echo "busbw GB/s (out-of-place; in-place in the raw outputs); ratios ember/peer"
        printf '%10s | %8s %8s %6s %-5s | %8s %7s %-5s\n' size ember mpi ratio ">=1M" gloo ratio ">=10x"
        : >"$out/ar-$tls_name-$n.dat"
        join <(busbw "$n" "$out"/ar-ember-"$tls_name"-"$n"-*.out) \
            <(busbw "$n" "$out"/ar-mpi-"$tls_name"-"$n"-*.out) |
            join - <(busbw "$n" "$out/ar-gloo-$n.out") |
            while read -r size e _ m _ g _; do
                rm_=$(awk -v s="$size" '$1 == s { print $2 }' "$out/ar-$tls_name-$n.ratios" |
                    median | awk '{ printf "%.2f", $1 }')
                rg=$(ratio "$e" "$g")
                vm=""
                if ((size >= 1048576)); then
                    vm=$(awk -v r="$rm_" 'BEGIN { print (r >= 1.0) ? "PASS" : "MISS" }')
                fi
                vg=$(awk -v r="$rg" 'BEGIN { print (r >= 10.0) ? "PASS" : "MISS" }')
                printf '%10s | %8.4f %8.4f %6s %-5s | %8.4f %7s %-5s\n' "$size" "$e" "$m" "$rm_" "$vm" "$g" "$rg" "$vg"
                echo "$size $e $m $g" >>"$out/ar-$tls_name-$n.dat"
            done | tee "$out/ar-$tls_name-$n.table"
        misses=$((misses + $(grep -c MISS "$out/ar-$tls_name-$n.table" || true)))
    done
done

# ---- the PyTorch tutorial program ----------------------------------------------
if [[ ${SKIP_TRAIN:-0} != 1 ]]; then
    echo
    echo "=== training: bench/train_vs_torch.sh (QUICK=1) ==="
    QUICK=1 BUILD=$build PYTHON=$python EMBER_TLS_LIST="sm,self" "$here/train_vs_torch.sh" 2>&1 |
        sed 's/^/  /'
fi

echo
echo "outputs: $out"
if ((misses)); then
    echo "targets: $misses MISS"
    exit 1
fi
echo "targets: all PASS"

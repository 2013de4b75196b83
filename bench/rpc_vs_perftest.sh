#!/usr/bin/env bash
# bench/rpc_vs_perftest.sh [tcp|shm|both]
#
# ember-bench rpc beside ucx_perftest (ucp_am_lat, ucp_am_bw) in the same run,
# same transports, same sizes and iteration counts, loopback only.  Prints per
# size: ember, perftest, ratio; then PASS/MISS for the targets:
#   bandwidth at >= 64 KiB  >= 80% of ucx_perftest ucp_am_bw
#   64 B round trip (p50)   <= 2x ucx_perftest's round trip; ucp_am_lat
#                           reports half a round trip (libperf divides
#                           ping-pong times by 2), so its RTT = 2 x figure.
#
# Environment: BUILD (build dir, default <repo>/build), ITERS (10000),
# WARMUP (1000), WINDOW (32), REPEAT (3: rounds, the tools alternating; a
# figure is the median over them, a ratio the median of the per-round
# ratios), SHM_TLS (sm,self: posix/sysv plus cma for zero-copy rendezvous;
# posix,self also works with both tools).
# Exit status: 0 when every target passes, 1 when one is missed, 2 on error.
set -euo pipefail

mode=${1:-both}
case $mode in
    tcp | shm | both) ;;
    -h | --help)
        sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'
        exit 0
        ;;
    *)
        echo "usage: $0 [tcp|shm|both]" >&2
        exit 2
        ;;
esac

here=$(cd "$(dirname "$0")" && pwd)
build=${BUILD:-$here/../build}
bench=$build/bench/ember-bench
launcher=$build/tools/ember-run
iters=${ITERS:-10000}
warmup=${WARMUP:-1000}
window=${WINDOW:-32}
repeat=${REPEAT:-3}
shm_tls=${SHM_TLS:-sm,self}

for tool in "$bench" "$launcher"; do
    [[ -x $tool ]] || { echo "$0: $tool not built" >&2; exit 2; }
done
command -v ucx_perftest >/dev/null || { echo "$0: ucx_perftest not found" >&2; exit 2; }

tmp=$(mktemp -d)
server_pid=
cleanup() {
    if [[ -n $server_pid ]]; then kill "$server_pid" 2>/dev/null || true; fi
    rm -rf "$tmp"
}
trap cleanup EXIT

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# perftest DIR TEST SIZE ITERS WARMUP [OUTSTANDING]
# shellcheck source=perftest.sh
source "$(dirname "$0")/perftest.sh"
bench_bind 2 # client and server pinned alike for both tools (perftest.sh)

misses=0

# run_one LABEL TLS: REPEAT rounds of ember's sweep then ucx_perftest's at the
# same sizes; figures are medians over the rounds, ratios the median of the
# per-round ratios (a slow phase of the machine hits both tools of a round).
run_one() {
    local label=$1 tls=$2 size n p50 bw_n mbps ucx_lines round w
    local pf pf_lat pf_rtt pf_mbps lat_ratio bw_ratio verdict

    # Both tools read the same UCX settings.
    export UCX_TLS=$tls UCX_NET_DEVICES=lo
    echo
    echo "=== $label: UCX_TLS=$tls UCX_NET_DEVICES=lo (loopback), $repeat round(s) ==="
    echo "\$ UCX_TLS=$tls $launcher -n 2 $bench rpc -n $iters -w $warmup --window $window --csv"
    rm -f "$tmp"/lat-* "$tmp"/bw-* "$tmp/pingpong"
    for ((round = 1; round <= repeat; round++)); do
        "$launcher" -n 2 --no-prefix "$bench" rpc \
            -n "$iters" -w "$warmup" --window "$window" --csv >"$tmp/ember.out" 2>"$tmp/ember.err" || {
            echo "$0: ember-bench failed:" >&2
            cat "$tmp/ember.out" "$tmp/ember.err" >&2
            exit 2
        }
        if ((round == 1)); then
            # UCX logs to stdout; its one-off endpoint-creation errors (see
            # docs/PERFORMANCE.md) are counted, not mixed into the table.
            grep -v -e '^csv,' -e ' UCX  ' "$tmp/ember.out" || true
            ucx_lines=$(grep -c ' UCX  ' "$tmp/ember.out" || true)
            if ((ucx_lines)); then
                echo "($ucx_lines UCX log line(s) from ember-bench omitted; e.g.:" \
                    "$(grep -m 1 ' UCX  ' "$tmp/ember.out" | sed 's/.*UCX  //'))"
            fi
        fi
        # Per size, one line per round: "ember perftest" for latency and bandwidth.
        while IFS=, read -r _ _ size n p50 _ _ bw_n mbps _; do
            w=$((warmup < n ? warmup : n))
            pf=$(perftest "$tmp" ucp_am_lat "$size" "$n" "$w") || exit 2
            pf_rtt=$(awk -v l="$(cut -d, -f2 <<<"$pf")" 'BEGIN { printf "%.4f", 2 * l }')
            pf=$(perftest "$tmp" ucp_am_bw "$size" "$bw_n" "$w" "$window") || exit 2
            pf_mbps=$(awk -v r="$(cut -d, -f8 <<<"$pf")" -v s="$size" \
                'BEGIN { printf "%.1f", r * s / 1e6 }')
            echo "$p50 $pf_rtt" >>"$tmp/lat-$size"
            echo "$mbps $pf_mbps" >>"$tmp/bw-$size"
        done < <(grep '^csv,rpc,' "$tmp/ember.out")
        # The latency target: 64 B both ways on both sides.
        IFS=, read -r _ _ size n p50 _ _ < <(grep '^csv,pingpong,' "$tmp/ember.out")
        pf=$(perftest "$tmp" ucp_am_lat "$size" "$n" "$((warmup < n ? warmup : n))") || exit 2
        echo "$p50 $(awk -v l="$(cut -d, -f2 <<<"$pf")" 'BEGIN { printf "%.4f", 2 * l }')" \
            >>"$tmp/pingpong"
    done
    echo
    echo "ucx_perftest: ucp_am_lat -s SIZE -n ITERS -w WARMUP (SIZE both ways; RTT = 2 x its"
    echo "figure), ucp_am_bw -s SIZE -n BW_ITERS -w WARMUP -O $window; MB = 10^6 B"
    echo "(perftest prints MiB/s; converted from its message rate x size)."
    echo "ember latency: request SIZE, reply 8 B.  lat ratio = ember/perftest (lower is"
    echo "better), bw ratio = ember/perftest (higher is better); medians of $repeat round(s),"
    echo "ratios the median of the per-round ratios."
    printf '%10s | %10s %10s %6s | %10s %10s %6s %s\n' size "ember_us" "pf_rtt_us" \
        ratio "ember_MB/s" "pf_MB/s" ratio target
    for size in $(grep '^csv,rpc,' "$tmp/ember.out" | cut -d, -f3); do
        p50=$(cut -d' ' -f1 "$tmp/lat-$size" | median)
        pf_rtt=$(cut -d' ' -f2 "$tmp/lat-$size" | median)
        mbps=$(cut -d' ' -f1 "$tmp/bw-$size" | median)
        pf_mbps=$(cut -d' ' -f2 "$tmp/bw-$size" | median)
        lat_ratio=$(paired_ratio <"$tmp/lat-$size")
        bw_ratio=$(paired_ratio <"$tmp/bw-$size")
        verdict=
        if ((size >= 65536)); then
            if awk -v r="$bw_ratio" 'BEGIN { exit !(r >= 0.80) }'; then
                verdict="bw>=80%: PASS"
            else
                verdict="bw>=80%: MISS"
                misses=$((misses + 1))
            fi
        fi
        printf '%10s | %10.2f %10.2f %6.2f | %10.1f %10.1f %6.2f %s\n' "$size" "$p50" \
            "$pf_rtt" "$lat_ratio" "$mbps" "$pf_mbps" "$bw_ratio" "$verdict"
    done

    p50=$(cut -d' ' -f1 "$tmp/pingpong" | median)
    pf_rtt=$(cut -d' ' -f2 "$tmp/pingpong" | median)
    lat_ratio=$(awk -v r="$(paired_ratio <"$tmp/pingpong")" 'BEGIN { printf "%.2f", r }')
    if awk -v r="$lat_ratio" 'BEGIN { exit !(r <= 2.0) }'; then
        verdict=PASS
    else
        verdict=MISS
        misses=$((misses + 1))
    fi
    echo "64 B round trip (p50): ember $p50 us, ucx_perftest $pf_rtt us (2 x its figure)," \
        "ratio $lat_ratio (target <= 2.00): $verdict"
}

echo "ember-bench rpc vs ucx_perftest; $(nproc) CPUs; $(ucx_info -v | head -n 1 | sed 's/^# //')"
case $mode in
    tcp) run_one tcp tcp,self ;;
    shm) run_one shm "$shm_tls" ;;
    both)
        run_one tcp tcp,self
        run_one shm "$shm_tls"
        ;;
esac
echo
if ((misses)); then
    echo "targets: $misses MISS"
    exit 1
fi
echo "targets: all PASS"

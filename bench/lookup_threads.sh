#!/usr/bin/env bash
# bench/lookup_threads.sh: a PS's lookup rate with 1, 2, 4, ... compute
# threads (--ps-threads) against ucx_perftest and against the machine's own
# parallel random-row gather, in one run, loopback, for each transport.
#
# One table per transport (tcp,self and sm,self): for each response size
# (4 KiB up to 4 MiB: bags of one index, dim 64, 256 B a bag) and each
# thread count T, ember's rows/s and response GB/s (1 client + 1 PS), the
# ratio to ucx_perftest ucp_am_bw at that size (target >= 80%), the PS's
# own ceiling (resp_B / ps_us) beside row_gather --threads T's rate (the
# parallel gather limit, target >= 80%), and how the PS's wall time per
# request splits: the tables' compute on the pool (cmp), the rest of its
# handler (unpacking, the reply's hand-off to UCX: hdl) and everything
# outside its handlers (UCX progress, receiving, sending, idle: ucx).
#
#   bench/lookup_threads.sh                 (minutes: docs/PERFORMANCE.md)
#
# Environment: BUILD (<repo>/build), THREADS ("1 2 4 ... up to the CPUs"),
# TLS_LIST ("tcp sm"), SIZES (response KiB: "4 16 64 256 1024 4096"),
# LK_ITERS (20000 lookups per size, at most LK_BYTES (1G) of responses),
# WINDOW (16), GATHER_ITERS (2000), OUT (keep the raw outputs there).
# The ranks are not pinned to one core each (EMBER_BIND=none): a PS of T
# threads needs T cores; on a machine with fewer than T + 1 CPUs the client
# and the PS's threads share them, and the figures say so.
# Exit status: 0 all targets PASS, 1 some MISS, 2 an error.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
build=${BUILD:-$here/../build}
bench=$build/bench/ember-bench
launcher=$build/tools/ember-run
row_gather=$build/bench/peers/row_gather
python=${PYTHON:-/usr/bin/python3}
cpus=$(nproc)
default_threads=$(t=1; while ((t < cpus)); do printf '%d ' "$t"; t=$((t * 2)); done; echo "$cpus")
threads_list=${THREADS:-$default_threads}
tls_list=${TLS_LIST:-tcp sm}
sizes=${SIZES:-4 16 64 256 1024 4096}
lk_iters=${LK_ITERS:-20000}
lk_bytes=${LK_BYTES:-1G}
window=${WINDOW:-16}
gather_iters=${GATHER_ITERS:-2000}

positive() { [[ $2 =~ ^[1-9][0-9]*$ ]] || { echo "$0: $1 '$2' is not a positive integer" >&2; exit 2; }; }
for t in $threads_list; do positive THREADS "$t"; done
for s in $sizes; do positive SIZES "$s"; done
positive LK_ITERS "$lk_iters"
positive WINDOW "$window"
positive GATHER_ITERS "$gather_iters"
for tool in "$bench" "$launcher" "$row_gather"; do
    [[ -x $tool ]] || { echo "$0: $tool not built" >&2; exit 2; }
done
command -v ucx_perftest >/dev/null || { echo "$0: ucx_perftest not found (scripts/setup.sh --bench)" >&2; exit 2; }

out=${OUT:-}
if [[ -z $out ]]; then
    out=$(mktemp -d)
    trap 'rm -rf "$out"' EXIT
fi
mkdir -p "$out"
free_port() {
    "$python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
# perftest DIR TEST SIZE ITERS WARMUP [OUTSTANDING]
# shellcheck source=perftest.sh
source "$here/perftest.sh"
trap '[[ -n $server_pid ]] && kill $server_pid 2>/dev/null; true' ERR
export EMBER_BIND=none
misses=0
verdict() { if (($1)); then echo PASS; else echo MISS; fi; }

bags=$(for s in $sizes; do printf '%d,' $((s * 1024 / 256)); done)
bags=${bags%,}
threads_csv=$(tr ' ' ',' <<<"$threads_list" | sed 's/,*$//')
echo "# bench/lookup_threads.sh: $cpus CPUs, $(lscpu | sed -n 's/^Model name: *//p'), $(uname -sr)"
echo "# UCX $(ucx_info -v | head -n 1 | sed "s/^# //"); ranks unpinned (EMBER_BIND=none)"
((cpus < $(tr ' ' '\n' <<<"$threads_list" | sort -n | tail -n 1) + 1)) &&
    echo "# fewer CPUs than the PS's threads + the client: they share the CPUs"

# The parallel gather limit: T threads gathering the same rows at once.
gather_gbs() { # THREADS RESP_B
    awk -v r="$2" '!/^#/ && $2 == r { print $3 }' "$out/gather-$1.out"
}
echo
echo "=== parallel row gather (reference: no message, no checks, no transport) ==="
for t in $threads_list; do
    cmd=("$row_gather" --bags "$bags" -n "$gather_iters" --window "$window" --threads "$t")
    echo "\$ ${cmd[*]#"$build"/}"
    "${cmd[@]}" >"$out/gather-$t.out" 2>&1 || { cat "$out/gather-$t.out" >&2; exit 2; }
done

for tls_name in $tls_list; do
    case $tls_name in tcp) tls=tcp,self ;; sm) tls=sm,self ;; *) echo "$0: TLS_LIST: '$tls_name' is not tcp or sm" >&2; exit 2 ;; esac
    export UCX_TLS=$tls
    run_out=$out/lookup-$tls_name.out
    cmd=("$launcher" -n 2 --no-prefix "$bench" lookup --ps 1 --bags "$bags" --pool 1 --dim 64
        --dist uniform -n "$lk_iters" --max-bytes "$lk_bytes" --window "$window"
        --ps-threads "$threads_csv" --csv)
    echo
    echo "=== UCX_TLS=$tls: 1 client + 1 PS, dim 64, 1 index per bag, uniform, window $window ==="
    echo "\$ UCX_TLS=$tls ${cmd[*]#"$build"/}"
    "${cmd[@]}" >"$run_out" 2>&1 || { cat "$run_out" >&2; exit 2; }
    : >"$out/pf-$tls_name.txt"
    for s in $sizes; do
        resp=$((s * 1024))
        pn=$((1073741824 / resp)); pn=$((pn > lk_iters ? lk_iters : pn)); pn=$((pn < 50 ? 50 : pn))
        pf=$(perftest "$out" ucp_am_bw "$resp" "$pn" 100 "$window") || exit 2
        awk -v r="$(cut -d, -f8 <<<"$pf")" -v s="$resp" 'BEGIN { printf "%s %.6f\n", s, r * s / 1e9 }' \
            >>"$out/pf-$tls_name.txt"
    done
    printf '%9s %3s | %11s %8s | %8s %5s %-10s | %8s %9s %5s %-10s | %5s %5s %5s\n' resp_B thr rows/s GB/s \
        pf_GB/s %pf "(>=80%)" ps_us ps_GB/s %gth "(>=80%)" cmp% hdl% ucx%
    for s in $sizes; do
        resp=$((s * 1024))
        pf_gbs=$(awk -v r="$resp" '$1 == r { print $2 }' "$out/pf-$tls_name.txt")
        for t in $threads_list; do
            line=$(awk -F, -v r="$resp" -v t="$t" '/^csv,lookup,/ && $11 == r && $27 == t' "$run_out")
            [[ -n $line ]] || { echo "$0: no row for $resp B with $t threads in $run_out" >&2; exit 2; }
            IFS=, read -r _ _ _ _ _ _ _ _ _ _ _ _ rows_s gbs req_s _ _ _ _ _ _ wrong _ ps_us _ _ _ cmp_us <<<"$line"
            gather=$(gather_gbs "$t" "$resp")
            row=$(awk -v g="$gbs" -v p="$pf_gbs" -v r="$resp" -v u="$ps_us" -v c="$cmp_us" -v q="$req_s" -v gt="$gather" \
                'BEGIN { ps = (u > 0 ? r / (u * 1e3) : 0)
                         printf "%.0f %.3f %.0f %.0f %.0f %.0f", 100 * g / p, ps, 100 * ps / gt,
                                100 * c * q / 1e6, 100 * (u - c) * q / 1e6, 100 - 100 * u * q / 1e6 }')
            read -r pct ps_gbs gpct cmp_pct hdl_pct ucx_pct <<<"$row"
            v1=$(verdict "$((pct >= 80))")
            v2=$(verdict "$((gpct >= 80))")
            [[ $v1 == MISS ]] && misses=$((misses + 1))
            [[ $v2 == MISS ]] && misses=$((misses + 1))
            [[ $wrong == 0 ]] || { echo "$0: $wrong wrong replies at $resp B, $t threads" >&2; exit 2; }
            printf '%9s %3s | %11.4g %8.3f | %8.3f %4s%% %-10s | %8.2f %9.3f %4s%% %-10s | %4s%% %4s%% %4s%%\n' \
                "$resp" "$t" "$rows_s" "$gbs" "$pf_gbs" "$pct" "$v1" "$ps_us" "$ps_gbs" "$gpct" "$v2" \
                "$cmp_pct" "$hdl_pct" "$ucx_pct"
        done
    done
done
unset UCX_TLS
echo
echo "pf_GB/s: ucx_perftest -t ucp_am_bw at resp_B, window outstanding; ps_GB/s = resp_B / ps_us, the most the PS" \
    "serves whatever the network; %gth: ps_GB/s over row_gather --threads thr (the parallel gather limit);" \
    "cmp/hdl/ucx: the PS's wall time per request in its tables' compute, the rest of its handler, and outside" \
    "its handlers (UCX progress, sends, idle)"
echo "targets missed: $misses"
((misses == 0)) || exit 1

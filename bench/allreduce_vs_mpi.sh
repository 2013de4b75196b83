#!/usr/bin/env bash
# bench/allreduce_vs_mpi.sh: the host allreduce beside Open MPI's
# MPI_Allreduce, compare.sh's allreduce rows alone and at the sizes its target
# names (busbw >= Open MPI's from 1 MiB), in a few minutes instead of ten.
#
#   bench/allreduce_vs_mpi.sh              1..16 MiB, 2 and 4 ranks, tcp and sm
#   OUT=dir bench/allreduce_vs_mpi.sh      keep the raw outputs in dir
#
# Each round runs `ember-bench allreduce` and bench/peers/mpi_allreduce with
# compare.sh's flags, bound as compare.sh binds them (bench_bind), ember
# first in odd rounds and Open MPI first in even ones, so a slow phase of a
# shared machine hits both.  A figure is the median of the rounds' busbw
# (out of place, as compare.sh's table), a ratio the median of the rounds'
# ratios; "in" is the same ratio in place.  The load average before and
# after says how quiet the machine was.
#
# Environment: BUILD (default <repo>/build), REPEAT (5), TLS_LIST ("tcp sm":
# ember UCX_TLS tcp,self / sm,self, Open MPI btl self,tcp / self,vader),
# RANKS ("2 4"), AR_MIN (1M), AR_MAX (16M), AR_FACTOR (2), AR_ITERS (20),
# AR_WARMUP (50), and EMBER_* / UCX_* settings, which reach ember's ranks.
# Exit status: 0 every ratio >= 1, 1 some below, 2 an error.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
build=${BUILD:-$here/../build}
bench=$build/bench/ember-bench
launcher=$build/tools/ember-run
mpi_peer=$build/bench/peers/mpi_allreduce
repeat=${REPEAT:-5}
tls_list=${TLS_LIST:-"tcp sm"}
ranks_list=${RANKS:-"2 4"}
flags=(-b "${AR_MIN:-1M}" -e "${AR_MAX:-16M}" -f "${AR_FACTOR:-2}" -n "${AR_ITERS:-20}"
    -w "${AR_WARMUP:-50}" -c 1)
out=${OUT:-}
if [[ -z $out ]]; then
    out=$(mktemp -d /tmp/ember-ar-mpi.XXXXXX)
    trap 'rm -rf "$out"' EXIT
fi
mkdir -p "$out"
rm -f "$out"/ar-*.out
export UCX_NET_DEVICES=lo EMBER_LOG_LEVEL=warn

for tool in "$bench" "$launcher" "$mpi_peer"; do
    [[ -x $tool ]] || { echo "$0: $tool not built (MPI peer: apt-get install libopenmpi-dev)" >&2; exit 2; }
done
command -v mpirun >/dev/null || { echo "$0: mpirun not found (scripts/setup.sh --bench)" >&2; exit 2; }

# shellcheck source=perftest.sh
source "$here/perftest.sh"
mpi_bind=
ucx_tls() { case $1 in tcp) echo tcp,self ;; sm) echo sm,self ;; esac; }
mpi_btl() { case $1 in tcp) echo self,tcp ;; sm) echo self,vader ;; esac; }
load() { cut -d' ' -f1-3 /proc/loadavg; }

run_ember() { # TLS_NAME N OUT
    UCX_TLS=$(ucx_tls "$1") "$launcher" -n "$2" --no-prefix "$bench" allreduce "${flags[@]}" \
        >"$3" 2>&1 || { cat "$3" >&2; exit 2; }
}
run_mpi() { # TLS_NAME N OUT
    mpirun --allow-run-as-root --oversubscribe -n "$2" --bind-to "$mpi_bind" --mca pml ob1 \
        --mca btl "$(mpi_btl "$1")" --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo \
        "$mpi_peer" "${flags[@]}" >"$3" 2>&1 || { cat "$3" >&2; exit 2; }
}

echo "# bench/allreduce_vs_mpi.sh: $(nproc) CPUs, $(lscpu | sed -n 's/^Model name: *//p');" \
    "$(mpirun --version | head -n 1); $repeat rounds, the tools alternating"
echo "# ember-bench allreduce / mpi_allreduce ${flags[*]}; load average before: $(load)"
misses=0
for tls_name in $tls_list; do
    for n in $ranks_list; do
        bench_bind "$n"
        for ((round = 1; round <= repeat; round++)); do
            e_out=$out/ar-ember-$tls_name-$n-$round.out
            m_out=$out/ar-mpi-$tls_name-$n-$round.out
            if ((round % 2)); then
                run_ember "$tls_name" "$n" "$e_out"
                run_mpi "$tls_name" "$n" "$m_out"
            else
                run_mpi "$tls_name" "$n" "$m_out"
                run_ember "$tls_name" "$n" "$e_out"
            fi
            for f in "$e_out" "$m_out"; do
                grep -q '# Out of bounds values : 0 OK' "$f" ||
                    { echo "$0: $f: #wrong is not 0" >&2; cat "$f" >&2; exit 2; }
            done
        done
        # Per round and size: the out-of-place and in-place ratios.
        for ((round = 1; round <= repeat; round++)); do
            join <(busbw "$n" "$out/ar-ember-$tls_name-$n-$round.out") \
                <(busbw "$n" "$out/ar-mpi-$tls_name-$n-$round.out") |
                awk '$4 > 0 && $5 > 0 { print $1, $2 / $4, $3 / $5 }'
        done >"$out/ar-$tls_name-$n.ratios"
        echo
        echo "=== $n ranks, ember UCX_TLS=$(ucx_tls "$tls_name"), Open MPI btl $(mpi_btl "$tls_name")," \
            "binding $EMBER_BIND / $mpi_bind; busbw GB/s (out of place) ==="
        printf '%10s | %8s %8s | %6s %-5s | %6s\n' size ember mpi ratio ">=1" in
        join <(busbw "$n" "$out"/ar-ember-"$tls_name"-"$n"-*.out) \
            <(busbw "$n" "$out"/ar-mpi-"$tls_name"-"$n"-*.out) |
            while read -r size e _ m _; do
                r=$(awk -v s="$size" '$1 == s { print $2 }' "$out/ar-$tls_name-$n.ratios" | median)
                ri=$(awk -v s="$size" '$1 == s { print $3 }' "$out/ar-$tls_name-$n.ratios" | median)
                v=$(awk -v r="$r" 'BEGIN { print (r >= 1.0) ? "PASS" : "MISS" }')
                printf '%10s | %8.4f %8.4f | %6.2f %-5s | %6.2f\n' "$size" "$e" "$m" "$r" "$v" "$ri"
            done | tee "$out/ar-$tls_name-$n.table"
        misses=$((misses + $(grep -c MISS "$out/ar-$tls_name-$n.table" || true)))
    done
done
echo
echo "# load average after: $(load); outputs: ${OUT:-(removed)}"
if ((misses)); then
    echo "targets: $misses MISS"
    exit 1
fi
echo "targets: all PASS"

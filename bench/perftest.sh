# shellcheck shell=bash
# bench/perftest.sh: sourced by the comparison scripts (not run): perftest,
# median, paired_ratio, bench_bind, busbw.
#
# perftest DIR TEST SIZE ITERS WARMUP [OUTSTANDING]: run ucx_perftest as a
# server and a client on 127.0.0.1 (a free port, up to 3 tries) and print the
# client's final CSV line (iterations,typical_lat,avg_lat,overall_lat,avg_bw,
# overall_bw,avg_mr,overall_mr).  Logs go to DIR.  The caller keeps
# $server_pid to kill on exit and defines free_port.
#
# Binding: with EMBER_BIND=core (what bench_bind exports when the machine has
# a core per rank) the client runs on CPU 0 and the server on CPU 1, where
# ember-bench's rank 0 (client) and rank 1 (server/PS) are bound: both tools
# are measured pinned the same way.
server_pid=
perftest() {
    local dir=$1 test=$2 size=$3 n=$4 w=$5 outstanding=${6:-} port line extra=()
    local pin_client=() pin_server=()
    [[ -n $outstanding ]] && extra=(-O "$outstanding")
    if [[ ${EMBER_BIND:-} == core ]]; then
        pin_client=(taskset -c 0)
        pin_server=(taskset -c 1)
    fi
    for _ in 1 2 3; do
        port=$(free_port)
        timeout 120 "${pin_server[@]}" ucx_perftest -p "$port" </dev/null >"$dir/pf-server.log" 2>&1 &
        server_pid=$!
        # The client connects once; give the server a moment to listen.
        sleep 0.2
        if line=$(timeout 120 "${pin_client[@]}" ucx_perftest 127.0.0.1 -p "$port" -t "$test" -s "$size" \
            -n "$n" -w "$w" "${extra[@]}" -f -v </dev/null 2>"$dir/pf-client.err" |
            tail -n 1) && [[ $line =~ ^\ *[0-9] ]]; then
            wait "$server_pid" || true
            server_pid=
            echo "$line" | tr -d ' '
            return 0
        fi
        kill "$server_pid" 2>/dev/null || true
        wait "$server_pid" 2>/dev/null || true
        server_pid=
    done
    echo "$0: ucx_perftest -t $test -s $size failed:" >&2
    cat "$dir/pf-client.err" "$dir/pf-server.log" >&2
    return 1
}

# median: the middle of the numbers on stdin (the lower middle of an even count).
median() { sort -g | awk '{ v[NR] = $1 } END { if (NR) print v[int((NR + 1) / 2)]; else print 0 }'; }

# paired_ratio: "a b" per line on stdin, one line per round (a round runs the
# two tools back to back, so a slow phase of the machine hits both figures of
# a round) -> the median of a/b.
paired_ratio() { awk 'NF >= 2 && $2 > 0 { print $1 / $2 }' | median; }

# bench_bind RANKS: the binding both ember and its peers get for a run of
# RANKS processes on this machine, as Open MPI chooses by default: one core
# each when there are enough cores (EMBER_BIND=core, mpirun --bind-to core),
# else unbound within the NUMA node (EMBER_BIND=numa, mpirun --bind-to none).
# Sets EMBER_BIND (exported) and mpi_bind.
bench_bind() {
    if (($1 <= $(nproc))); then
        export EMBER_BIND=core
        mpi_bind=core
    else
        export EMBER_BIND=numa
        mpi_bind=none
    fi
}

# Per size, over the nccl-tests-format outputs of N ranks given as files:
# "size busbw busbw_in_place", each the median over the files, recomputed
# from the time columns (the printed busbw has two decimals, too few for
# small sizes).
busbw() { # N FILE...
    local n=$1
    shift
    awk -v n="$n" '!/^#/ && NF >= 13 {
        f = 2 * (n - 1) / n
        out[$1] = out[$1] " " $1 / ($6 * 1e3) * f
        inp[$1] = inp[$1] " " $1 / ($10 * 1e3) * f }
        function med(list,   v, k, i, j, t) {
            k = split(list, v, " ")
            for (i = 2; i <= k; i++)
                for (j = i; j > 1 && v[j - 1] + 0 > v[j] + 0; j--) { t = v[j]; v[j] = v[j - 1]; v[j - 1] = t }
            return v[int((k + 1) / 2)]
        }
        END { for (s in out) printf "%s %.6g %.6g\n", s, med(out[s]), med(inp[s]) }' "$@" |
        sort -k1,1 -g
}

# shellcheck shell=bash
# bench/perftest.sh: sourced by the comparison scripts (not run).
#
# perftest DIR TEST SIZE ITERS WARMUP [OUTSTANDING]: run ucx_perftest as a
# server and a client on 127.0.0.1 (a free port, up to 3 tries) and print the
# client's final CSV line (iterations,typical_lat,avg_lat,overall_lat,avg_bw,
# overall_bw,avg_mr,overall_mr).  Logs go to DIR.  The caller keeps
# $server_pid to kill on exit and defines free_port.
server_pid=
perftest() {
    local dir=$1 test=$2 size=$3 n=$4 w=$5 outstanding=${6:-} port line extra=()
    [[ -n $outstanding ]] && extra=(-O "$outstanding")
    for _ in 1 2 3; do
        port=$(free_port)
        timeout 120 ucx_perftest -p "$port" </dev/null >"$dir/pf-server.log" 2>&1 &
        server_pid=$!
        # The client connects once; give the server a moment to listen.
        sleep 0.2
        if line=$(timeout 120 ucx_perftest 127.0.0.1 -p "$port" -t "$test" -s "$size" \
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

#!/usr/bin/env bash
# bench/fp16_compare.sh: fp16 beside fp32 in one run on this machine, 1
# client + 1 PS: WHAT=rows, the PS storing its rows as fp16 (ember-bench
# lookup --dtype); WHAT=replies, the lookups answered in fp16
# (--reply-dtype).  ROUNDS rounds, each running both, the order alternating
# between rounds; per point it prints the median rows/s looked up, the PS's
# own time per lookup (ps_us) and the applied gradient rows/s of each, the
# median of the per-round ratios (above 1: fp16 is faster), and with rows
# the table's size on the PS.
#
# Environment: WHAT (rows), BUILD (default <repo>/build), UCX_TLS (default
# sm,self), ROWS (2000000: 488 MiB of fp32 rows, past any cache), DIM (64),
# BAGS (16,256,4096), POOL (indices per bag: 1,16), ITERS (2000), ROUNDS (4).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${BUILD:-$here/../build}
rows=${ROWS:-2000000} dim=${DIM:-64} bags=${BAGS:-16,256,4096} pool=${POOL:-1,16}
iters=${ITERS:-2000} rounds=${ROUNDS:-4} what=${WHAT:-rows}
case $what in
rows) flag=--dtype field=25 ;;
replies) flag=--reply-dtype field=26 ;;
*) echo "WHAT must be rows or replies, not '$what'" >&2; exit 2 ;;
esac
export UCX_TLS=${UCX_TLS:-sm,self} UCX_NET_DEVICES=${UCX_NET_DEVICES:-lo}
# shellcheck source=perftest.sh
source "$here/perftest.sh" # median, bench_bind
bench_bind 2
[ -x "$build/bench/ember-bench" ] || { echo "build ember first: $build/bench/ember-bench missing" >&2; exit 2; }
out=$(mktemp -d /tmp/ember-fp16.XXXXXX)
trap 'rm -rf "$out"' EXIT

cmd=("$build/tools/ember-run" -n 2 --no-prefix "$build/bench/ember-bench" lookup --ps 1
    --bags "$bags" --pool "$pool" --dim "$dim" --dist uniform --rows "$rows" -n "$iters" --csv)
echo "# $(nproc) CPUs, $(lscpu | sed -n 's/^Model name: *//p'), UCX_TLS=$UCX_TLS, EMBER_BIND=$EMBER_BIND"
echo "\$ ${cmd[*]#"$build"/} $flag fp32,fp16   # and fp16,fp32: $rounds rounds, the order alternating"
for ((round = 1; round <= rounds; round++)); do
    order=fp32,fp16
    ((round % 2 == 0)) && order=fp16,fp32
    EMBER_LOG_LEVEL=info "${cmd[@]}" "$flag" "$order" >"$out/$round.out" 2>&1 ||
        { cat "$out/$round.out" >&2; exit 1; }
    grep -q '^# wrong replies: 0 OK$' "$out/$round.out" || { cat "$out/$round.out" >&2; exit 1; }
done

# csv fields: 7 bags, 8 indices per bag, 13 rows/s, 21 grad rows/s, 24 ps_us,
# 25 the rows' dtype, 26 the replies'.
field() { # ROUND BAGS POOL DTYPE FIELD
    awk -F, -v b="$2" -v p="$3" -v t="$4" -v f="$5" -v at="$field" \
        '/^csv,lookup,/ && $7 == b && $8 == p && $at == t { print $f }' "$out/$1.out"
}
per_round() { # BAGS POOL FIELD -> "fp32 fp16" per round
    for ((round = 1; round <= rounds; round++)); do
        echo "$(field "$round" "$1" "$2" fp32 "$3") $(field "$round" "$1" "$2" fp16 "$3")"
    done
}
col() { awk -v c="$1" '{ print $c }' | median; }
ratio() { awk -v inv="$1" '{ print inv ? $1 / $2 : $2 / $1 }' | median; }

echo
echo "# $what"
printf '%6s %4s | %10s %10s %6s | %9s %9s %6s | %10s %10s %6s\n' bags idx "fp32rows/s" "fp16rows/s" ratio \
    fp32ps_us fp16ps_us ratio fp32grad/s fp16grad/s ratio
for b in ${bags//,/ }; do
    for p in ${pool//,/ }; do
        gbs=$(per_round "$b" "$p" 13) ps=$(per_round "$b" "$p" 24) grad=$(per_round "$b" "$p" 21)
        printf '%6s %4s | %10.4g %10.4g %6.2f | %9.2f %9.2f %6.2f | %10.4g %10.4g %6.2f\n' "$b" "$p" \
            "$(col 1 <<<"$gbs")" "$(col 2 <<<"$gbs")" "$(ratio 0 <<<"$gbs")" \
            "$(col 1 <<<"$ps")" "$(col 2 <<<"$ps")" "$(ratio 1 <<<"$ps")" \
            "$(col 1 <<<"$grad")" "$(col 2 <<<"$grad")" "$(ratio 0 <<<"$grad")"
    done
done
echo "# ratios: the median of the per-round ratios, fp16 over fp32 (rows/s, grad rows/s) and fp32 over fp16 (ps_us): above 1, fp16 is faster"
if [[ $what == rows ]]; then
    echo "# table on the PS: $(grep -o 'rows x [0-9]* fp32 ([0-9.]* MiB' "$out/1.out" | head -1 | grep -o '[0-9.]* MiB') fp32, $(grep -o 'rows x [0-9]* fp16 ([0-9.]* MiB' "$out/1.out" | head -1 | grep -o '[0-9.]* MiB') fp16"
fi

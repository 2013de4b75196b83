#!/bin/sh
# A rank for the ember-run tests: rank.sh MODE DIR [ARG]
#
# Every process a rank starts is recorded as DIR/pids/<pid> holding the
# process's start time, so the driver can tell, after the launcher exits,
# whether any of them is still running (and not confuse a reused pid).
mode=$1
dir=$2
arg=${3:-}
rank=${EMBER_RANK:?EMBER_RANK not set}

record() {
    # Field 22 of /proc/PID/stat; the 20th once "pid (comm) " is cut off.
    st=$(sed 's/^.*) //' "/proc/$1/stat" | cut -d' ' -f20)
    printf '%s\n' "$st" >"$dir/pids/$1.tmp" && mv "$dir/pids/$1.tmp" "$dir/pids/$1"
}

# Wait until at least $1 processes are recorded (at most 10 s).
wait_recorded() {
    i=0
    while [ "$(find "$dir/pids" -type f ! -name '*.tmp' | wc -l)" -lt "$1" ] &&
        [ $i -lt 100 ]; do
        sleep 0.1
        i=$((i + 1))
    done
}

case $mode in
env)
    # Identity first, then output in many small writes, so that lines
    # mixed by the launcher would show.
    echo "ENV rank=$rank world=${EMBER_WORLD_SIZE-} local=${EMBER_LOCAL_RANK-}" \
        "init=${EMBER_INIT-} ucx=${UCX_NET_DEVICES-}" \
        "secret_file=${EMBER_SECRET_FILE-} secret=${EMBER_SECRET-}"
    k=1
    while [ $k -le 100 ]; do
        printf 'L %s %s aaaa' "$rank" "$k"
        printf ' bbbb'
        printf ' %s %s\n' "$rank" "$k"
        printf 'E %s' "$rank" >&2
        printf ' %s\n' "$k" >&2
        k=$((k + 1))
    done
    ;;
long)
    # A line longer than any line buffer, then an unterminated last line.
    head -c 200000 /dev/zero | tr '\0' x
    echo
    echo short
    printf 'tail-without-newline'
    ;;
secret)
    f=${EMBER_SECRET_FILE:?EMBER_SECRET_FILE not set}
    echo "$f" >"$dir/secret.$rank"
    [ -f "$f" ] || { echo "no secret file $f" >&2; exit 10; }
    [ "$(stat -c %a "$f")" = 600 ] || { echo "secret mode $(stat -c %a "$f")" >&2; exit 11; }
    [ "$(stat -c %a "$(dirname "$f")")" = 700 ] || { echo "secret dir mode" >&2; exit 12; }
    [ "$(wc -c <"$f")" -eq 64 ] || { echo "secret size $(wc -c <"$f")" >&2; exit 13; }
    grep -Eq '^[0-9a-f]{64}$' "$f" || { echo "secret not hex" >&2; exit 14; }
    cat "$f" >"$dir/secret_value.$rank"
    echo SECRET_OK
    ;;
fail | term_ignored)
    # ARG: "R:exit:CODE" or "R:kill"; the other ranks wait to be stopped.
    # Each rank also leaves a grandchild sleeping in its process group.
    failing=${arg%%:*}
    how=${arg#*:}
    [ -n "${EMBER_SECRET_FILE-}" ] && echo "$EMBER_SECRET_FILE" >"$dir/secret.$rank"
    if [ "$rank" != "$failing" ]; then
        if [ "$mode" = term_ignored ]; then
            trap '' TERM # inherited by the sleeps: only SIGKILL ends them
        else
            trap 'echo TERM >"$dir/got.$rank"; exit 143' TERM
        fi
    fi
    record $$
    sleep 60 &
    record $!
    if [ "$rank" = "$failing" ]; then
        # every rank, its grandchild, and the other ranks' second sleep
        wait_recorded $((3 * EMBER_WORLD_SIZE - 1))
        case $how in
        kill) kill -KILL $$ ;;
        exit:*) exit "${how#exit:}" ;;
        esac
    fi
    sleep 60 &
    record $!
    wait
    ;;
forward)
    # Stops when the launcher forwards a signal, and says which one.
    trap 'echo TERM >"$dir/got.$rank"; exit 0' TERM
    trap 'echo INT >"$dir/got.$rank"; exit 0' INT
    [ -n "${EMBER_SECRET_FILE-}" ] && echo "$EMBER_SECRET_FILE" >"$dir/secret.$rank"
    record $$
    sleep 60 &
    record $!
    wait
    ;;
leftover)
    # Exit 0 at once, leaving one process in the group and one that left it.
    sleep 60 &
    record $!
    setsid sleep 60 &
    record $!
    ;;
flaky)
    # ARG "R:N:kill" or "R:N:exit:CODE": rank R fails on each of the job's
    # first N attempts (every rank counts its own starts in DIR), the other
    # ranks then wait to be stopped; later attempts all exit 0.  Each start
    # prints its attempt, EMBER_INIT and the arguments after ARG.  With
    # CKPT_DIR set, rank 0 leaves a torn checkpoint (no manifest) there on
    # every attempt and a complete one on attempt CKPT_AT.
    shift 3
    failing=${arg%%:*}
    rest=${arg#*:}
    fails=${rest%%:*}
    how=${rest#*:}
    echo x >>"$dir/starts.$rank"
    attempt=$(wc -l <"$dir/starts.$rank")
    echo "ARGS attempt=$attempt init=${EMBER_INIT-}:" "$@"
    if [ "$rank" = 0 ] && [ -n "${CKPT_DIR-}" ]; then
        mkdir -p "$CKPT_DIR/step-00000000000$attempt"
        if [ "$attempt" = "${CKPT_AT-}" ]; then
            mkdir -p "$CKPT_DIR/step-000000000050"
            : >"$CKPT_DIR/step-000000000050/manifest"
        fi
    fi
    [ "$attempt" -le "$fails" ] || exit 0
    trap 'exit 143' TERM
    record $$
    echo "$rank" >>"$dir/ready.$attempt"
    if [ "$rank" = "$failing" ]; then
        i=0 # every rank of this attempt set up (rank 0's checkpoint written)
        while [ "$(wc -l <"$dir/ready.$attempt")" -lt "$EMBER_WORLD_SIZE" ] && [ $i -lt 100 ]; do
            sleep 0.1
            i=$((i + 1))
        done
        case $how in
        kill) kill -KILL $$ ;;
        exit:*) exit "${how#exit:}" ;;
        esac
    fi
    sleep 60 &
    record $!
    wait
    ;;
*)
    echo "rank.sh: unknown mode '$mode'" >&2
    exit 64
    ;;
esac
exit 0

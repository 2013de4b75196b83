#!/usr/bin/env bash
# Driver of the ember-run tests: test_launcher.sh CASE PATH/TO/ember-run
#
# Each case runs the launcher on tests/launcher/rank.sh and checks its exit
# code, its output, and that no process of the job outlives it.  Exit 0 on
# success, 1 with a FAIL line on the first failed check.
set -u

if [ $# -ne 2 ]; then
    echo "usage: $0 CASE PATH/TO/ember-run" >&2
    exit 2
fi
CASE=$1
RUN=$2
HERE=$(cd "$(dirname "$0")" && pwd)
RANK=$HERE/rank.sh
WORK=$(mktemp -d "${TMPDIR:-/tmp}/ember-run-test.XXXXXX")
mkdir "$WORK/pids" "$WORK/tmp"
# The launcher's secret directories go here, where nothing else runs.
export TMPDIR=$WORK/tmp

# The launcher's defaults are under test: nothing may come from outside.
unset EMBER_INIT EMBER_SECRET EMBER_SECRET_FILE UCX_NET_DEVICES \
    EMBER_RANK EMBER_WORLD_SIZE EMBER_LOCAL_RANK

fail() {
    echo "FAIL [$CASE]: $*" >&2
    for f in out err; do
        if [ -s "$WORK/$f" ]; then
            echo "--- launcher std$f:" >&2
            head -c 4000 "$WORK/$f" >&2
        fi
    done
    exit 1
}

# Whether recorded process $1 still runs: same start time, and not a zombie.
alive() {
    local pid=$1 stat
    stat=$(cat "/proc/$pid/stat" 2>/dev/null) || return 1
    stat=${stat##*) }
    # shellcheck disable=SC2086
    set -- $stat
    [ "$1" != Z ] && [ "${20}" = "$(cat "$WORK/pids/$pid")" ]
}

# Never leave a process behind, even when a check fails.
cleanup() {
    local f
    for f in "$WORK"/pids/*; do
        [ -f "$f" ] || continue
        case $f in *.tmp) continue ;; esac
        alive "${f##*/}" && kill -KILL "${f##*/}" 2>/dev/null
    done
    rm -rf "$WORK"
}
trap cleanup EXIT

recorded() { find "$WORK/pids" -type f ! -name '*.tmp' | wc -l; }

check_all_gone() {
    local f left=""
    for f in "$WORK"/pids/*; do
        [ -f "$f" ] || continue
        case $f in *.tmp) continue ;; esac
        alive "${f##*/}" && left="$left ${f##*/}"
    done
    [ -z "$left" ] || fail "processes of the job still running:$left"
}

# check_got SIG RANKS...: these ranks were stopped by SIGSIG (not SIGKILL).
check_got() {
    local sig=$1 r
    shift
    for r in "$@"; do
        [ "$(cat "$WORK/got.$r" 2>/dev/null)" = "$sig" ] ||
            fail "rank $r did not get SIG$sig"
    done
}

check_recorded() {
    local n
    n=$(recorded)
    [ "$n" -eq "$1" ] || fail "expected $1 recorded processes, found $n"
}

# The secret of the job (as a rank saw it) must be gone with its directory.
check_secret_removed() {
    local f=$WORK/secret.0 path
    [ -s "$f" ] || fail "rank 0 did not report its EMBER_SECRET_FILE"
    path=$(cat "$f")
    case $path in
    "$TMPDIR"/ember-run.*/secret) ;;
    *) fail "unexpected secret path '$path'" ;;
    esac
    [ ! -e "$path" ] || fail "secret file $path left behind"
    [ ! -e "$(dirname "$path")" ] || fail "secret dir $(dirname "$path") left behind"
    [ -z "$(ls -A "$TMPDIR")" ] || fail "left in TMPDIR: $(ls -A "$TMPDIR")"
}

# run ARGS...: the launcher, output in $WORK/out and $WORK/err, code in $rc,
# seconds taken in $elapsed.
run() {
    local start end
    start=$(date +%s%N)
    "$RUN" "$@" >"$WORK/out" 2>"$WORK/err" </dev/null
    rc=$?
    end=$(date +%s%N)
    elapsed=$(((end - start) / 1000000))
    elapsed=$((elapsed / 1000)).$(printf %03d $((elapsed % 1000)))
}

expect_rc() {
    [ "$rc" -eq "$1" ] || fail "exit code $rc, expected $1"
}

# faster_than SECONDS
faster_than() {
    awk -v e="$elapsed" -v l="$1" 'BEGIN { exit !(e < l) }' ||
        fail "took ${elapsed}s, expected under ${1}s"
}

slower_than() {
    awk -v e="$elapsed" -v l="$1" 'BEGIN { exit !(e >= l) }' ||
        fail "took ${elapsed}s, expected at least ${1}s"
}

expect_err() {
    grep -Eq -- "$1" "$WORK/err" || fail "stderr does not match /$1/"
}

# Start the launcher in the background and wait until $2 processes of the
# job are recorded; sets $lpid.
start_background() {
    local want=$1 i=0
    shift
    "$RUN" "$@" >"$WORK/out" 2>"$WORK/err" </dev/null &
    lpid=$!
    while [ "$(recorded)" -lt "$want" ]; do
        sleep 0.1
        i=$((i + 1))
        [ $i -lt 150 ] || fail "only $(recorded) of $want processes started"
    done
}

case_success() {
    local n=4 r line init secret_file
    run -n $n "$RANK" env "$WORK"
    expect_rc 0
    # One identity line per rank, with that rank's variables.
    for ((r = 0; r < n; r++)); do
        line=$(grep -E "^\[$r\] ENV " "$WORK/out")
        [ "$(printf '%s\n' "$line" | grep -c .)" -eq 1 ] ||
            fail "rank $r: expected one ENV line, got '$line'"
        case $line in
        "[$r] ENV rank=$r world=$n local=$r init=tcp://127.0.0.1:"*" ucx=lo"*) ;;
        *) fail "rank $r: wrong environment: $line" ;;
        esac
        case $line in
        *" ucx=lo secret_file=/"*" secret=") ;;
        *) fail "rank $r: wrong environment: $line" ;;
        esac
    done
    init=$(sed -n 's/^.* init=\([^ ]*\) .*$/\1/p' "$WORK/out" | sort -u)
    [ "$(printf '%s\n' "$init" | wc -l)" -eq 1 ] || fail "ranks disagree on EMBER_INIT: $init"
    [[ $init =~ ^tcp://127\.0\.0\.1:([0-9]+)$ ]] || fail "bad EMBER_INIT '$init'"
    if [ "${BASH_REMATCH[1]}" -le 0 ] || [ "${BASH_REMATCH[1]}" -ge 65536 ]; then
        fail "bad port in '$init'"
    fi
    secret_file=$(sed -n 's/^.* secret_file=\([^ ]*\) .*$/\1/p' "$WORK/out" | sort -u)
    [ "$(printf '%s\n' "$secret_file" | wc -l)" -eq 1 ] ||
        fail "ranks disagree on EMBER_SECRET_FILE: $secret_file"
    [ ! -e "$secret_file" ] || fail "secret file $secret_file left behind"

    # Every line whole, with the prefix of the rank that wrote it.
    awk '
        /^\[[0-9]+\] ENV / { next }
        match($0, /^\[[0-9]+\] L [0-9]+ [0-9]+ aaaa bbbb [0-9]+ [0-9]+$/) {
            split($0, f, " "); r = substr(f[1], 2, length(f[1]) - 2)
            if (f[3] == r && f[7] == r && f[4] == f[8]) { count[r]++; next }
        }
        { print "bad stdout line: " $0; bad = 1 }
        END {
            for (r = 0; r < 4; r++)
                if (count[r] != 100) { print "rank " r ": " count[r] + 0 " lines"; bad = 1 }
            exit bad
        }' "$WORK/out" >"$WORK/check" || fail "stdout: $(head -5 "$WORK/check")"
    awk '
        match($0, /^\[[0-9]+\] E [0-9]+ [0-9]+$/) {
            split($0, f, " "); r = substr(f[1], 2, length(f[1]) - 2)
            if (f[3] == r) { count[r]++; next }
        }
        { print "bad stderr line: " $0; bad = 1 }
        END {
            for (r = 0; r < 4; r++)
                if (count[r] != 100) { print "rank " r ": " count[r] + 0 " lines"; bad = 1 }
            exit bad
        }' "$WORK/err" >"$WORK/check" || fail "stderr: $(head -5 "$WORK/check")"

    # PROGRAM found through PATH, ARGS passed as given.
    # shellcheck disable=SC2016 # expanded by the ranks
    run -n 2 sh -c 'echo "$EMBER_RANK:$1"' sh 'two words'
    expect_rc 0
    [ "$(sort "$WORK/out")" = "$(printf '[0] 0:two words\n[1] 1:two words')" ] ||
        fail "PATH lookup / arguments: $(cat "$WORK/out")"
}

case_env_preset() {
    local r want
    EMBER_INIT=tcp://127.0.0.1:4242 UCX_NET_DEVICES=mlx5_0:1 EMBER_SECRET=abcd \
        run -n 2 "$RANK" env "$WORK"
    expect_rc 0
    for r in 0 1; do
        want="[$r] ENV rank=$r world=2 local=$r init=tcp://127.0.0.1:4242"
        want="$want ucx=mlx5_0:1 secret_file= secret=abcd"
        grep -qxF "$want" "$WORK/out" || fail "rank $r: preset environment not kept"
    done
    echo 00 >"$WORK/given_secret"
    EMBER_SECRET_FILE=$WORK/given_secret run -n 1 "$RANK" env "$WORK"
    expect_rc 0
    grep -qE "^\[0\] ENV .* secret_file=$WORK/given_secret secret=$" "$WORK/out" ||
        fail "preset EMBER_SECRET_FILE not kept"
    [ -f "$WORK/given_secret" ] || fail "launcher removed a secret file it did not create"
}

case_long_line() {
    run -n 1 "$RANK" long "$WORK"
    expect_rc 0
    {
        printf '[0] '
        head -c 200000 /dev/zero | tr '\0' x
        printf '\n[0] short\n[0] tail-without-newline\n'
    } >"$WORK/expected"
    cmp -s "$WORK/out" "$WORK/expected" ||
        fail "long line or partial last line mangled ($(wc -c <"$WORK/out") bytes)"
}

case_no_prefix() {
    run --no-prefix -n 1 "$RANK" long "$WORK"
    expect_rc 0
    EMBER_RANK=0 "$RANK" long "$WORK" >"$WORK/expected"
    cmp -s "$WORK/out" "$WORK/expected" || fail "--no-prefix changed the output"
    run --no-prefix -n 3 "$RANK" env "$WORK"
    expect_rc 0
    [ "$(grep -c '^L [0-9]* [0-9]* aaaa bbbb [0-9]* [0-9]*$' "$WORK/out")" -eq 300 ] ||
        fail "--no-prefix: lines not whole"
    ! grep -q '^\[' "$WORK/out" || fail "--no-prefix: prefix present"
}

case_fail_fast() {
    run -n 4 "$RANK" fail "$WORK" 1:exit:3
    expect_rc 3
    faster_than 10
    expect_err 'rank 1 .*code 3'
    check_got TERM 0 2 3
    check_recorded 11
    check_all_gone
    check_secret_removed
}

case_signal_kill() {
    run -n 3 "$RANK" fail "$WORK" 2:kill
    expect_rc 137
    faster_than 10
    expect_err 'rank 2 .*signal 9'
    check_recorded 8
    check_all_gone
}

case_term_ignored() {
    # The other ranks ignore SIGTERM: only the SIGKILL after 3 s ends them.
    run -n 3 "$RANK" term_ignored "$WORK" 1:exit:5
    expect_rc 5
    slower_than 2.5
    faster_than 10
    check_recorded 8
    check_all_gone
}

case_leftover() {
    # Ranks exit 0 leaving processes behind, one of them in its own session.
    run -n 2 "$RANK" leftover "$WORK"
    expect_rc 0
    faster_than 10
    check_recorded 4
    check_all_gone
}

case_secret() {
    run -n 2 "$RANK" secret "$WORK"
    expect_rc 0
    [ "$(grep -c 'SECRET_OK' "$WORK/out")" -eq 2 ] || fail "ranks did not see a good secret"
    cmp -s "$WORK/secret.0" "$WORK/secret.1" || fail "ranks got different secret files"
    cmp -s "$WORK/secret_value.0" "$WORK/secret_value.1" || fail "ranks read different secrets"
    check_secret_removed
    cp "$WORK/secret_value.0" "$WORK/first_secret"
    run -n 1 "$RANK" secret "$WORK"
    expect_rc 0
    ! cmp -s "$WORK/secret_value.0" "$WORK/first_secret" || fail "two jobs got the same secret"
}

case_timeout() {
    run -n 2 --timeout 1 "$RANK" forward "$WORK"
    expect_rc 124
    slower_than 0.9
    faster_than 10
    expect_err 'timed out'
    check_got TERM 0 1
    check_recorded 4
    check_all_gone
}

case_missing_program() {
    run -n 2 "$WORK/no-such-program"
    expect_rc 127
    expect_err "$WORK/no-such-program"
    run -n 2 "ember-no-such-command-$$"
    expect_rc 127
    expect_err "ember-no-such-command-$$"
    printf '#!/bin/sh\ntouch %s/ran\n' "$WORK" >"$WORK/not-executable"
    chmod 0644 "$WORK/not-executable"
    run -n 2 "$WORK/not-executable"
    expect_rc 127
    expect_err "not-executable"
    run -n 2 "$WORK"
    expect_rc 127
    [ ! -e "$WORK/ran" ] || fail "a rank ran"
    [ ! -s "$WORK/out" ] || fail "unexpected stdout: $(cat "$WORK/out")"
    # No secret directory left behind by a job that never started.
    [ -z "$(ls -A "$TMPDIR")" ] || fail "left in TMPDIR: $(ls -A "$TMPDIR")"
}

case_usage() {
    local args
    for args in "" "-n" "-n 0" "-n -1" "-n x true" "-n 2" "--bogus -n 2 true" \
        "-n 2 --timeout 0 true" "-n 2 --timeout abc true" "true" \
        "-n 2 --max-restarts -1 true" "-n 2 --max-restarts x true" "-n 2 --max-restarts" \
        "-n 2 --max-restarts 99999999999999999999 true" "-n 2 --restart-delay -1 true" \
        "-n 2 --grace abc true" "-n 2 --grace=inf true" "-n 2 --maxrestarts 1 true"; do
        # shellcheck disable=SC2086
        run $args
        [ "$rc" -eq 2 ] || fail "'ember-run $args': exit code $rc, expected 2"
        grep -q '^usage: ember-run' "$WORK/err" || fail "'ember-run $args': no usage"
    done
    run --help
    expect_rc 0
    grep -q '^usage: ember-run' "$WORK/out" || fail "--help: no usage on stdout"
}

# signalled SIG CODE: the signal reaches every rank, the job ends with CODE.
signalled() {
    local sig=$1 code=$2 r start end
    start_background 6 -n 3 "$RANK" forward "$WORK"
    start=$(date +%s%N)
    kill -"$sig" "$lpid"
    wait "$lpid"
    rc=$?
    end=$(date +%s%N)
    elapsed=$(((end - start) / 1000000))
    elapsed=$((elapsed / 1000)).$(printf %03d $((elapsed % 1000)))
    expect_rc "$code"
    faster_than 10
    check_got "$sig" 0 1 2
    check_recorded 6
    check_all_gone
    check_secret_removed
}

case_sigterm() { signalled TERM 143; }
case_sigint() { signalled INT 130; }

# starts_are N: every rank of a 3-rank job was started N times.
starts_are() {
    local r n
    for r in 0 1 2; do
        n=$(cat "$WORK/starts.$r" 2>/dev/null | wc -l)
        [ "$n" -eq "$1" ] || fail "rank $r started $n times, expected $1"
    done
}

restart_lines() { grep -c '^ember-run: .*; restart [0-9]* of ' "$WORK/err"; }

case_restart() {
    # Rank 1 dies of SIGKILL on the first attempt only: the second succeeds.
    run -n 3 --max-restarts 1 --restart-delay 0.2 "$RANK" flaky "$WORK" 1:1:kill a b
    expect_rc 0
    faster_than 10
    grep -qxF 'ember-run: rank 1 was killed by SIGKILL; restart 1 of 1 from the start (no --checkpoint-dir)' \
        "$WORK/err" || fail "no restart line"
    [ "$(restart_lines)" -eq 1 ] || fail "expected one restart line"
    starts_are 2
    [ "$(grep -c '^\[[0-2]\] ARGS attempt=2 init=.*: a b$' "$WORK/out")" -eq 3 ] ||
        fail "the second attempt did not get the same arguments"
    local init1 init2
    init1=$(sed -n 's/^\[0\] ARGS attempt=1 init=\([^:]*:[^:]*:[0-9]*\):.*/\1/p' "$WORK/out")
    init2=$(sed -n 's/^\[0\] ARGS attempt=2 init=\([^:]*:[^:]*:[0-9]*\):.*/\1/p' "$WORK/out")
    [ -n "$init1" ] && [ "$init1" != "$init2" ] ||
        fail "the restart kept the rendezvous port ($init1, $init2)"
    check_all_gone
    [ -z "$(ls -A "$TMPDIR")" ] || fail "left in TMPDIR: $(ls -A "$TMPDIR")"
}

case_restart_none() {
    # Without --max-restarts the first failure ends the job, as before.
    run -n 3 "$RANK" flaky "$WORK" 1:1:kill
    expect_rc 137
    expect_err 'rank 1 .*signal 9'
    [ "$(restart_lines)" -eq 0 ] || fail "restarted without --max-restarts"
    starts_are 1
    run -n 3 --max-restarts 0 "$RANK" flaky "$WORK" 1:2:exit:6
    expect_rc 6
    [ "$(restart_lines)" -eq 0 ] || fail "restarted with --max-restarts 0"
    starts_are 2
    check_all_gone
}

case_restart_exhausted() {
    # Rank 2 fails every time: 1 + 2 attempts, the exit code the last one's.
    run -n 3 --max-restarts 2 --restart-delay 0 "$RANK" flaky "$WORK" 2:9:exit:3
    expect_rc 3
    grep -qxF 'ember-run: rank 2 exited with code 3; restart 1 of 2 from the start (no --checkpoint-dir)' \
        "$WORK/err" || fail "no first restart line"
    grep -qxF 'ember-run: rank 2 exited with code 3; restart 2 of 2 from the start (no --checkpoint-dir)' \
        "$WORK/err" || fail "no second restart line"
    grep -qxF 'ember-run: rank 2 exited with code 3; no restart left (2 done)' "$WORK/err" ||
        fail "no line for the last failure"
    starts_are 3
    check_all_gone
}

# args_of ATTEMPT: what rank 1 printed after the "ARGS attempt=N init=...:".
args_of() { sed -n "s/^\[1\] ARGS attempt=$1 init=[^ ]*: //p" "$WORK/out"; }

case_restart_resume() {
    # Attempt 1 fails with only a torn checkpoint in CK (no restart from it),
    # attempt 2 writes a complete one and fails: attempt 3 resumes from CK.
    local ck=$WORK/ck
    CKPT_DIR=$ck CKPT_AT=2 run -n 3 --max-restarts 2 --restart-delay 0 "$RANK" flaky "$WORK" \
        1:2:exit:4 --steps 9 --checkpoint-dir "$ck" --resume old --x
    expect_rc 0
    grep -qxF "ember-run: rank 1 exited with code 4; restart 1 of 2 from the start (no checkpoint in $ck yet)" \
        "$WORK/err" || fail "no 'from the start' line"
    grep -qxF "ember-run: rank 1 exited with code 4; restart 2 of 2 from the latest checkpoint in $ck" \
        "$WORK/err" || fail "no 'from the latest checkpoint' line"
    starts_are 3
    [ "$(args_of 1)" = "--steps 9 --checkpoint-dir $ck --resume old --x" ] || fail "attempt 1: $(args_of 1)"
    [ "$(args_of 2)" = "--steps 9 --checkpoint-dir $ck --resume old --x" ] || fail "attempt 2: $(args_of 2)"
    [ "$(args_of 3)" = "--steps 9 --checkpoint-dir $ck --x --resume $ck" ] || fail "attempt 3: $(args_of 3)"

    # The = forms, with a checkpoint there before the job starts.
    rm -f "$WORK"/starts.* "$WORK"/ready.*
    run -n 3 --max-restarts=1 --restart-delay=0 "$RANK" flaky "$WORK" \
        1:1:kill "--checkpoint-dir=$ck" --resume=elsewhere
    expect_rc 0
    [ "$(args_of 1)" = "--checkpoint-dir=$ck --resume=elsewhere" ] || fail "= forms, attempt 1: $(args_of 1)"
    [ "$(args_of 2)" = "--checkpoint-dir=$ck --resume $ck" ] || fail "= forms, attempt 2: $(args_of 2)"
    check_all_gone
}

case_restart_signalled() {
    # SIGTERM to the launcher while the job runs: forwarded, no restart.
    start_background 3 -n 3 --max-restarts 3 "$RANK" forward "$WORK"
    kill -TERM "$lpid"
    wait "$lpid"
    rc=$?
    expect_rc 143
    check_got TERM 0 1 2
    [ "$(restart_lines)" -eq 0 ] || fail "a signalled launcher restarted the job"
    check_all_gone
    # SIGTERM during the restart delay: no second attempt.
    rm -f "$WORK"/starts.* "$WORK"/ready.*
    "$RUN" -n 3 --max-restarts 3 --restart-delay 30 "$RANK" flaky "$WORK" 1:9:exit:5 \
        >"$WORK/out" 2>"$WORK/err" </dev/null &
    lpid=$!
    local i=0
    while [ "$(restart_lines)" -lt 1 ]; do
        sleep 0.1
        i=$((i + 1))
        [ $i -lt 150 ] || fail "no restart line"
    done
    kill -TERM "$lpid"
    wait "$lpid"
    rc=$?
    expect_rc 143
    expect_err 'received SIGTERM before restart 1: not restarting'
    starts_are 1
    # The deadline passing ends the job without a restart as well.
    rm -f "$WORK"/starts.* "$WORK"/ready.*
    run -n 3 --timeout 1 --max-restarts 3 --restart-delay 0 "$RANK" forward "$WORK"
    expect_rc 124
    [ "$(restart_lines)" -eq 0 ] || fail "a timed-out job was restarted"
    check_all_gone
}

case_grace() {
    # --grace 0.5: ranks ignoring SIGTERM get SIGKILL after half a second.
    run -n 3 --grace 0.5 "$RANK" term_ignored "$WORK" 1:exit:5
    expect_rc 5
    slower_than 0.4
    faster_than 2.5
    check_all_gone
}

if ! declare -F "case_$CASE" >/dev/null; then
    echo "$0: unknown case '$CASE'" >&2
    exit 2
fi
[ -x "$RUN" ] || fail "$RUN is not an executable"
"case_$CASE"
echo "PASS [$CASE]"

#!/usr/bin/env bash
# The two-tower example (examples/two_tower) on real processes under
# ember-run, real UCX (the transport CTest's UCX_TLS names), against its
# PyTorch reference (examples/two_tower/reference.py).
# usage: test_two_tower.sh CASE BUILD_DIR SOURCE_DIR [PYTHON]
#   (PYTHON: one with torch, /usr/bin/python3 by default)
#   ref:PS[:RUN]     2 trainers and PS parameter servers, run RUN's flags
#                    (default: SGD dense, row-wise Adagrad tables, averaged;
#                    adagrad: Adagrad both; adam_sum: Adam dense, SGD tables,
#                    summed; t3: 3 trainers, Adagrad dense, SGD tables,
#                    averaged): every step's loss of every trainer and every
#                    final weight within 1e-4 of the reference's.  Each run is
#                    one where PyTorch in float32 and in float64 agree within
#                    ~2e-6 (reference.py --dtype float64): element-wise
#                    Adagrad magnifies rounding on longer runs
#   ps_counts        the default run on 1 and on 3 PS: the same initial
#                    tables, bit for bit, the same training within 1e-5
#                    (compare_runs.py), and each within 1e-4 of the reference
#   wrong:WHAT       ember run with one setting off (lr: --lr 0.06 for 0.05;
#                    reduce: --sparse-reduce sum for mean, SGD tables), the
#                    reference with the right one: the comparison must fail,
#                    naming a loss (so the reference test can fail)
#   refused          bad flags refused before the job starts, a bad data file
#                    refused by the trainers (naming the file, the tensor and
#                    the entry) and the job torn down: nothing written
set -uo pipefail
case_name=$1
build=$(cd "$2" && pwd)
src=$(cd "$3" && pwd)
python=${4:-/usr/bin/python3}
example=$src/examples/two_tower
here=$(cd "$(dirname "$0")" && pwd)
run=$build/tools/ember-run
work=$(mktemp -d /tmp/ember-two-tower-test.XXXXXX)
trap 'rm -rf "$work"' EXIT
ln -s "$build/examples/two_tower/two_tower" "$work/two_tower" # a path of this test's own
fail() { echo "FAIL: $*"; echo "--- output:"; tail -40 "$work/out" 2>/dev/null; exit 1; }

# The data: 200 users, 500 items, 24 categories, 768 positives with 3
# negatives each: 3072 examples, 48 steps of 2 x 32 (32 of 3 x 32).
"$python" "$example/gen_data.py" --out "$work/data.st" --seed 7 >"$work/out" 2>&1 ||
    fail "gen_data.py exited $?"

# run_flags RUN: the flags both sides take.
run_flags() {
    case $1 in
    default) echo --steps 24 ;;
    adagrad) echo --steps 16 --optimizer adagrad --lr 0.01 --sparse-optimizer adagrad \
        --sparse-lr 0.05 ;;
    adam_sum) echo --steps 16 --optimizer adam --lr 0.01 --sparse-optimizer sgd \
        --sparse-lr 0.5 --sparse-reduce sum ;;
    t3) echo --trainers 3 --steps 16 --batch 16 --optimizer adagrad --lr 0.01 \
        --sparse-optimizer sgd --sparse-lr 5 ;;
    *) echo "unknown run $1" >&2; exit 2 ;;
    esac
}
trainers_of() { [[ $1 == t3 ]] && echo 3 || echo 2; }

# two_tower PS OUT ARGS...: the job on PS parameter servers (trainers as
# --trainers in ARGS says, else 2), its output in $work/out.  PS rest:N:
# N PS the program is not told of (no --ps: the ranks that are not trainers).
two_tower() {
    local ps=$1 out=$2 t=2 ps_flag
    shift 2
    [[ " $* " =~ " --trainers "([0-9]+)" " ]] && t=${BASH_REMATCH[1]}
    if [[ $ps == rest:* ]]; then
        ps=${ps#rest:}
        ps_flag=()
    else
        ps_flag=(--ps "$ps")
    fi
    timeout 150 "$run" -n $((t + ps)) "$work/two_tower" "${ps_flag[@]}" --data "$work/data.st" \
        --out "$out" "$@" >"$work/out" 2>&1
}
reference() { # reference OUT ARGS...
    local out=$1
    shift
    "$python" "$example/reference.py" --data "$work/data.st" --ember "$out" "$@" \
        >>"$work/out" 2>&1
}

case "$case_name" in
ref:*)
    IFS=: read -r _ ps name <<<"$case_name"
    name=${name:-default}
    # shellcheck disable=SC2046 # the flags split on purpose
    two_tower "$ps" "$work/ember.st" $(run_flags "$name") || fail "two_tower exited $?"
    grep -q 'two_tower: [0-9]* steps, the last step' "$work/out" || fail "no summary line"
    # shellcheck disable=SC2046
    reference "$work/ember.st" $(run_flags "$name") || fail "ember and PyTorch differ"
    grep 'reference: ok' "$work/out"
    ;;
ps_counts)
    # shellcheck disable=SC2046 # the flags split on purpose
    two_tower 1 "$work/ps1.st" $(run_flags default) || fail "two_tower on 1 PS exited $?"
    # shellcheck disable=SC2046
    # ember-run -n 5 without --ps: the 3 ranks that are not trainers serve
    two_tower rest:3 "$work/ps3.st" $(run_flags default) || fail "two_tower on 3 PS exited $?"
    grep -q "two_tower: 2 trainers and 3 PS" "$work/out" || fail "the job without --ps is not 2 trainers + 3 PS"
    "$python" "$here/compare_runs.py" "$example" "$work/ps1.st" "$work/ps3.st" >"$work/out" 2>&1 ||
        fail "1 PS and 3 PS differ"
    cat "$work/out"
    for ps in 1 3; do
        # shellcheck disable=SC2046
        reference "$work/ps$ps.st" $(run_flags default) || fail "ember on $ps PS and PyTorch differ"
    done
    grep 'reference: ok' "$work/out"
    ;;
wrong:*)
    what=${case_name#wrong:}
    case $what in
    lr) ember_flags=(--lr 0.06) ref_flags=(--lr 0.05) ;;
    reduce) ember_flags=(--sparse-optimizer sgd --sparse-lr 5 --sparse-reduce sum)
        ref_flags=(--sparse-optimizer sgd --sparse-lr 5 --sparse-reduce mean) ;;
    *) echo "unknown case $case_name"; exit 2 ;;
    esac
    two_tower 2 "$work/ember.st" --steps 8 "${ember_flags[@]}" || fail "two_tower exited $?"
    reference "$work/ember.st" --steps 8 "${ref_flags[@]}" && fail "the comparison passed"
    grep -q 'reference: MISMATCH loss' "$work/out" || fail "no loss named as a mismatch"
    grep 'reference: MISMATCH' "$work/out" | head -3
    ;;
refused)
    binary=$work/two_tower
    expect() { # expect TEXT CMD...: exits 2 and prints TEXT
        local text=$1
        shift
        "$@" >"$work/out" 2>&1
        local rc=$?
        [[ $rc == 2 ]] || fail "'$*' exited $rc, expected 2"
        grep -qF -- "$text" "$work/out" || fail "'$*' does not say '$text'"
    }
    expect "--data FILE is required" "$binary"
    expect "unknown flag '--bogus'" "$binary" --data x --bogus 1
    expect "--batch given twice" "$binary" --data x --batch 2 --batch 3
    expect "--batch '-1' is not an integer in [1, 1048576]" "$binary" --data x --batch -1
    expect "--steps '18446744073709551616' is not an integer" "$binary" --data x \
        --steps 18446744073709551616
    expect "--lr 'nan' is not valid" "$binary" --data x --lr nan
    expect "--sparse-optimizer 'adam' is not valid" "$binary" --data x --sparse-optimizer adam
    expect "--sparse-reduce 'avg' is not valid" "$binary" --data x --sparse-reduce avg
    expect "--steps needs a value" "$binary" --data x --steps
    "$binary" --help >"$work/out" 2>&1 || fail "--help exited $?"
    grep -q -- '--sparse-reduce' "$work/out" || fail "--help does not list the flags"

    # A history naming item 500 of 500: the trainers refuse the file.
    "$python" - "$work/data.st" "$work/bad.st" >"$work/out" 2>&1 <<'EOF' || fail "cannot break the data"
import json, struct, sys
raw = bytearray(open(sys.argv[1], "rb").read())
size = struct.unpack("<Q", raw[:8])[0]
begin = json.loads(raw[8:8 + size])["history"]["data_offsets"][0] + 8 + size
raw[begin + 8 * 3:begin + 8 * 4] = struct.pack("<q", 500)
open(sys.argv[2], "wb").write(raw)
EOF
    timeout 60 "$run" -n 4 "$work/two_tower" --data "$work/bad.st" --out "$work/never.st" \
        >"$work/out" 2>&1 && fail "a bad data file was taken"
    grep -qF "$work/bad.st: history[3] = 500 is not a row of item [0, 500)" "$work/out" ||
        fail "the error does not name the file, the tensor and the entry"
    [[ ! -e $work/never.st ]] || fail "--out was written"
    two_tower 2 "$work/never.st" --steps 49 && fail "49 steps of 3072 examples were taken"
    grep -qF "holds 3072 examples: 49 steps of 64 (--batch 32 x 2 trainers) need 3136" \
        "$work/out" || fail "too many steps: not said why"
    echo "ok"
    ;;
*)
    echo "unknown case $case_name"
    exit 2
    ;;
esac

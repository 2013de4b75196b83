#!/usr/bin/env bash
# scripts/same_bits.sh: does a change leave ember-train's results alone?
#
#     scripts/same_bits.sh REV_A REV_B
#
# Builds both revisions (git worktrees under a temporary directory, Release,
# no CUDA, no tests) and runs the same jobs with each, saving the model
# (--save): every golden replay of tests/data/golden (this checkout's) on 1
# and 3 PS, synthetic jobs with each optimizer, pooling mode, an MLP, fp16
# rows and fp16 replies, and the default tutorial job.  Prints "same" or
# "DIFF" per job and exits 1 unless every saved file is byte-identical
# (weights, dense layers and per-step losses), 2 on bad usage or a failed
# build.  For a refactor: the numerics must not move by one bit.
set -uo pipefail

if [[ $# -ne 2 ]]; then
    sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
fi
root=$(git -C "$(dirname "$0")" rev-parse --show-toplevel)
golden=$root/tests/data/golden
work=$(mktemp -d /tmp/ember-same-bits.XXXXXX)
cleanup() {
    git -C "$root" worktree remove --force "$work/a" >/dev/null 2>&1 || true
    git -C "$root" worktree remove --force "$work/b" >/dev/null 2>&1 || true
    rm -rf "$work"
}
trap cleanup EXIT

build_rev() { # side rev
    git -C "$root" worktree add --detach "$work/$1" "$2" >/dev/null 2>&1 ||
        { echo "same_bits.sh: cannot check out $2" >&2; exit 2; }
    cmake -S "$work/$1" -B "$work/$1/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
        -DEMBER_ENABLE_CUDA=OFF -DBUILD_TESTING=OFF >"$work/$1.cmake.log" 2>&1 &&
        cmake --build "$work/$1/build" --target ember-train ember-run >"$work/$1.build.log" 2>&1 ||
        { tail -30 "$work/$1.build.log" "$work/$1.cmake.log" >&2; exit 2; }
}
build_rev a "$1"
build_rev b "$2"

trainers_of() { # a golden file's trainer count, from its metadata
    head -c 8 "$1" | od -An -tu8 | { read -r n; head -c $((8 + n)) "$1" | tail -c "$n"; } |
        grep -o '"trainers": *"[0-9]*"' | grep -o '[0-9]*'
}

jobs=0 differ=0
run() { # name ranks ember-train-args...
    local name=$1 ranks=$2 side
    shift 2
    for side in a b; do
        UCX_TLS=sm,self timeout 300 "$work/$side/build/tools/ember-run" -n "$ranks" \
            "$work/$side/build/tools/ember-train" "$@" --save "$work/$name.$side.safetensors" \
            >"$work/$name.$side.log" 2>&1 ||
            { echo "$name: ${side^^} exited $?:"; tail -5 "$work/$name.$side.log"; }
    done
    jobs=$((jobs + 1))
    if cmp -s "$work/$name.a.safetensors" "$work/$name.b.safetensors"; then
        echo "same  $name"
    else
        echo "DIFF  $name"
        differ=$((differ + 1))
    fi
}

for file in "$golden"/*.safetensors; do
    t=$(trainers_of "$file")
    for ps in 1 3; do
        run "golden.$(basename "$file" .safetensors).ps$ps" $((t + 1 + ps)) --ps $ps --replay "$file"
    done
done
run synthetic.adam.mlp 5 --ps 2 --data synthetic --hidden 32,16 --optimizer adam --epochs 3 \
    --rows 5000 --dim 32
run synthetic.rowwise.max 5 --ps 2 --data synthetic --mode max --optimizer rowwise_adagrad \
    --epochs 3 --rows 5000 --dim 32
run synthetic.adagrad.mean.fp16_rows 5 --ps 2 --data synthetic --mode mean --optimizer adagrad \
    --table-dtype fp16 --epochs 3
run tutorial.weights.fp16_replies 4 --ps 1 --weights --reply-dtype fp16 --epochs 3
run tutorial 4
echo "same_bits: $((jobs - differ)) of $jobs saved models byte-identical ($1 vs $2)"
((differ == 0))

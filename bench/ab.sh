#!/usr/bin/env bash
# bench/ab.sh: the same benchmark on two revisions, alternating.
#
#     bench/ab.sh [-n ROUNDS] REV_A REV_B -- COMMAND [ARGS...]
#
# Builds each revision (git worktrees under a temporary directory, Release,
# no CUDA) and runs COMMAND ROUNDS times (5) for each, A then B in odd
# rounds and B then A in even ones, so a slow phase of a shared machine hits
# both builds alike.  COMMAND runs in the repository root with BUILD set to
# the revision's build directory: quote it so the shell does not expand
# $BUILD early, e.g.
#
#     bench/ab.sh 62c3b15 b6d5036 -- 'UCX_TLS=sm,self $BUILD/tools/ember-run -n 2 \
#         $BUILD/bench/ember-bench lookup --ps 1 --bags 256 --pool 1 --dim 64'
#
# Each run's output is printed after a line "== round R: A|B REV".  Exit 0
# when every run succeeded, 1 when one failed, 2 on bad usage.
set -euo pipefail

rounds=5
if [[ ${1:-} == -n ]]; then
    rounds=$2
    shift 2
fi
if [[ $# -lt 4 || $3 != -- ]]; then
    sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
fi
rev_a=$1 rev_b=$2
shift 3
command="$*"
root=$(git -C "$(dirname "$0")" rev-parse --show-toplevel)
work=$(mktemp -d /tmp/ember-ab.XXXXXX)
cleanup() {
    git -C "$root" worktree remove --force "$work/a" >/dev/null 2>&1 || true
    git -C "$root" worktree remove --force "$work/b" >/dev/null 2>&1 || true
    rm -rf "$work"
}
trap cleanup EXIT

for side in a b; do
    rev=$rev_a
    [[ $side == b ]] && rev=$rev_b
    git -C "$root" worktree add --detach "$work/$side" "$rev" >/dev/null 2>&1 ||
        { echo "ab.sh: cannot check out $rev" >&2; exit 2; }
    cmake -S "$work/$side" -B "$work/$side/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
        -DEMBER_ENABLE_CUDA=OFF >"$work/$side.cmake.log" 2>&1 ||
        { cat "$work/$side.cmake.log" >&2; exit 2; }
    cmake --build "$work/$side/build" >"$work/$side.build.log" 2>&1 ||
        { tail -30 "$work/$side.build.log" >&2; exit 2; }
done

status=0
for ((round = 1; round <= rounds; round++)); do
    # A then B, then B then A: whichever runs second in a round is not
    # always the same build (a machine that speeds up or slows down within
    # a round would otherwise favour one of them every time).
    order="a b"
    ((round % 2 == 0)) && order="b a"
    for side in $order; do
        rev=$rev_a
        [[ $side == b ]] && rev=$rev_b
        echo "== round $round: ${side^^} $rev"
        (cd "$root" && BUILD=$work/$side/build bash -c "$command") || status=1
    done
done
exit $status

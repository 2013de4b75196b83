#!/usr/bin/env bash
# ember-info and ember-train's binding line, run on this machine.
# usage: test_info.sh CASE BUILD_DIR SOURCE_DIR
#   info_all            every section is there, with the fields users look for
#   info_config         --config prints the whole EMBER_* table
#   info_placement_xml  --placement on an XML machine: one line per local rank
#   train_bind_line     each ember-train rank prints one binding line
#   train_bind_flag     --bind core / --bind bogus
set -uo pipefail
case_name=$1 build=$2 src=$3
info=$build/tools/ember-info
work=$(mktemp -d /tmp/ember-info-test.XXXXXX)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; echo "--- output:"; tail -40 "$work/out" 2>/dev/null; exit 1; }
need() { grep -qE "$1" "$work/out" || fail "no line matching: $1"; }

case "$case_name" in
info_all)
    timeout 30 "$info" >"$work/out" 2>&1 || fail "ember-info exited $?"
    need '^# topology$'
    need '^packages [0-9]+, NUMA nodes [1-9][0-9]*, cores [1-9][0-9]*, PUs [1-9]'
    need '^numa [0-9]+: cores [1-9][0-9]*, cpus [0-9]'
    need '^# gpus$'
    need '^cuda: (CUDA not built|[0-9]+ device\(s\))$'
    need '^# rdma \(libibverbs\)$'
    need '^(rdma devices: none|[^ ]+ port [0-9]+: )'
    need '^ucx version [0-9]+\.[0-9]+'
    need '^ucx headers [0-9]+\.[0-9]+$'
    need '^transport self +device '
    need '^transport tcp +device lo '
    need '^# config$'
    need '^EMBER_BIND='
    ;;
info_config)
    EMBER_BIND=core timeout 30 "$info" --config >"$work/out" 2>&1 || fail "exit $?"
    grep -q '^# topology' "$work/out" && fail "--config printed more than the table"
    # Every name of the table, with its current value and its help text.
    names=$(grep -o '{.name = "EMBER_[A-Z_]*"' "$src/../../common/config.c" | grep -o 'EMBER_[A-Z_]*')
    [ -n "$names" ] || fail "cannot read the table's names"
    for n in $names; do need "^$n="; done
    need '^EMBER_BIND=core$'
    need '^# type: enum \(one of numa, core, none\), default: numa$'
    ;;
info_placement_xml)
    timeout 30 "$info" --xml "$src/four_numa_4gpu_2hca.xml" --placement -n 4 >"$work/out" 2>&1 ||
        fail "exit $?"
    [ "$(grep -c '^ember-bind: ' "$work/out")" -eq 4 ] || fail "want 4 binding lines"
    need 'rank 2 local 2/4 host .*: numa 2 cpus 8-11 mode numa gpu 0000:b1:00.0 hca mlx5_1 \(near gpu\)'
    timeout 30 "$info" --xml "$src/one_numa.xml" --bind core -n 2 >"$work/out" 2>&1 ||
        fail "exit $?"
    need 'rank 1 local 1/2 .*: numa 0 cpus 1,5 mode core gpu none hca none \(spread\)'
    ;;
train_bind_line)
    timeout 60 "$build/tools/ember-run" -n 4 "$build/tools/ember-train" --epochs 1 \
        >"$work/out" 2>&1 || fail "ember-train exited $?"
    for r in 0 1 2 3; do
        [ "$(grep -c "^\[$r\] ember-bind: rank $r local $r/4 host [^ ]* pid [0-9]*: numa [0-9]* cpus [0-9]" "$work/out")" -eq 1 ] ||
            fail "rank $r: want one binding line"
    done
    need 'mode numa gpu [^ ]+ hca [^ ]+ \('
    ;;
train_bind_flag)
    timeout 60 "$build/tools/ember-run" -n 4 "$build/tools/ember-train" --epochs 1 --bind core \
        >"$work/out" 2>&1 || fail "ember-train --bind core exited $?"
    [ "$(grep -c 'ember-bind: .* mode core ' "$work/out")" -eq 4 ] || fail "want 4 core lines"
    timeout 60 "$build/tools/ember-run" -n 2 "$build/tools/ember-train" --bind socket \
        >"$work/out" 2>&1
    rc=$?
    [ $rc -eq 2 ] || fail "--bind socket: exit $rc, want 2"
    need 'want numa, core or none'
    ;;
*)
    echo "unknown case $case_name"; exit 2 ;;
esac
echo "$case_name: ok"

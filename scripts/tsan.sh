#!/usr/bin/env bash
# Build the tree with clang and ThreadSanitizer (build-tsan/, CUDA off) and
# run what runs on more than one thread: the worker pool and the tables
# over it (engine.test_table_threads), a checkpoint's copy-on-write under a
# training thread (engine.test_table_cow.threads), the PS's own tests (engine.ps.*, its
# processes on a pool of 3), the multi-table requests (engine.sparse.*), a
# checkpointed run (the PS's writer thread), and the golden replays with
# --ps-threads 1, 2, 4.  Every request
# is split as far as it goes (EMBER_PS_GRAIN=1).  Any report ends its test
# with a failure; scripts/tsan.supp holds what is not ember's (say why).
#   scripts/tsan.sh [CTEST ARGS...]   e.g. -R test_table_threads to run fewer
set -euo pipefail
cd "$(dirname "$0")/.."

build=build-tsan
CC=clang cmake -S . -B "$build" -G Ninja -DEMBER_SANITIZE=thread -DEMBER_ENABLE_CUDA=OFF \
  -DEMBER_WERROR=ON >/dev/null
# Only what the tests below run: the rest of the tree has no threads of its
# own to check, and building it all would double the time.
cmake --build "$build" -j2 --target test_table_threads test_table_cow test_ps test_ps_multi test_sparse \
  ember-train ember-run golden_compare

# Every process the tests start (ranks, ember-run's children) inherits these.
export TSAN_OPTIONS="halt_on_error=1:abort_on_error=1:second_deadlock_stack=1:suppressions=$PWD/scripts/tsan.supp:print_suppressions=0"
export EMBER_PS_GRAIN=1
junit=$PWD/$build/Testing/ctest-junit.xml
rc=0
ctest --test-dir "$build" --output-on-failure -j2 --output-junit "$junit" \
  -R 'engine\.test_table_threads|engine\.test_table_cow\.threads|engine\.ps\.|engine\.test_ps_multi|engine\.sparse\.|train\.threads\.|train\.checkpoint\.tutorial\.adam\.same' \
  "$@" || rc=$?
python3 scripts/ctest-skips.py "$junit" || true # CTest counts skips among the passed
exit "$rc"

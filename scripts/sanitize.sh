#!/usr/bin/env bash
# Build the tree with clang, AddressSanitizer and UBSan (build-asan/, CUDA
# off) and run the unit, transport, engine and security tests once under
# them; any report ends its test with a failure.  Leaks are reported too
# (scripts/lsan.supp suppresses what is not ember's, saying why).
#   scripts/sanitize.sh [CTEST ARGS...]   e.g. -R engine.ps to run fewer
set -euo pipefail
cd "$(dirname "$0")/.."

build=build-asan
CC=clang cmake -S . -B "$build" -G Ninja -DEMBER_SANITIZE=address,undefined \
  -DCMAKE_C_FLAGS=-fno-sanitize-recover=all -DEMBER_ENABLE_CUDA=OFF -DEMBER_WERROR=ON \
  >/dev/null
cmake --build "$build" -j2

# Every process the tests start (ranks, ember-run's children) inherits these.
export ASAN_OPTIONS=halt_on_error=1:abort_on_error=1:print_stacktrace=1:detect_leaks=1:strict_string_checks=1:check_initialization_order=1
export UBSAN_OPTIONS=halt_on_error=1:abort_on_error=1:print_stacktrace=1
export LSAN_OPTIONS=suppressions=$PWD/scripts/lsan.supp:print_suppressions=0
# hwloc's plugins (libhwloc-plugins, which Open MPI's packages pull in)
# are not loaded: its pci plugin leaves ~1 KB inside libpciaccess in every
# process that loads the topology, under frames LeakSanitizer cannot name
# (the plugin is unloaded by exit: no suppression can match them), and
# with the plugin loaded but its component excluded LeakSanitizer's own
# tracer crashes at exit.  The tests run as on a machine without the
# plugins: none here has a PCI GPU or HCA to find.
export HWLOC_PLUGINS_PATH=/nonexistent/ember-sanitize-no-hwloc-plugins
# Left out: slurm (a cluster), cuda (no CUDA here), torch (Python),
# memory (resident-memory bounds: a sanitizer's shadow memory is not ember's),
# timing (time ratios: a sanitizer's slowdown is not ember's either).
junit=$PWD/$build/Testing/ctest-junit.xml
rc=0
ctest --test-dir "$build" --output-on-failure -j2 -L 'unit|transport|engine|security' \
  -LE 'slurm|cuda|torch|memory|timing' --output-junit "$junit" "$@" || rc=$?
python3 scripts/ctest-skips.py "$junit" || true # CTest counts skips among the passed
exit "$rc"

#!/usr/bin/env bash
# Set up, build (warnings as errors) and run the whole test suite (ctest,
# then pytest over the Python package: scripts/pytest.sh); then the
# unit, transport and engine tests again under ASan + UBSan
# (scripts/sanitize.sh, build-asan/), the threaded ones under TSan
# (scripts/tsan.sh, build-tsan/) and every fuzz target for a bounded
# time (scripts/fuzz.sh, build-fuzz/; FUZZ_SECONDS, 90 s in all by default).
# Arguments go to the first ctest (e.g. -LE slurm).  Each ctest run is
# followed by the count of the tests it skipped, by name and reason.
set -euo pipefail
cd "$(dirname "$0")/.."
# Each part's time, so the whole stays within CI's 15 minutes on 2 cores.
phase() { echo "test.sh: $1 took $SECONDS s"; SECONDS=0; }
bash scripts/setup.sh
cmake -S . -B build -G Ninja -DEMBER_WERROR=ON
cmake --build build
phase build
# CTest counts a skipped test among the passed: say how many skipped and
# why (scripts/ctest-skips.py), whatever the run's outcome.
junit=$PWD/build/Testing/ctest-junit.xml
rc=0
ctest --test-dir build --output-on-failure -j2 --output-junit "$junit" "$@" || rc=$?
python3 scripts/ctest-skips.py "$junit" || true
[ "$rc" -eq 0 ] || exit "$rc"
phase tests
# The Python package, installed by pip into a venv, and its pytest suite.
bash scripts/pytest.sh
phase python
bash scripts/sanitize.sh
phase sanitizers
bash scripts/tsan.sh
phase threads
bash scripts/fuzz.sh
phase fuzzing

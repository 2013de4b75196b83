#!/usr/bin/env bash
# Set up, build (warnings as errors) and run the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cmake -S . -B build -G Ninja -DEMBER_WERROR=ON
cmake --build build
ctest --test-dir build --output-on-failure -j2 "$@"

#!/usr/bin/env bash
# Set up, build, and run the main job on this machine: the PyTorch tutorial's
# hybrid job (2 trainers, master, 1 PS; EmbeddingBag(100, 16, sum) on the PS,
# Linear(16, 8) replicated, SGD lr 0.05, 100 epochs of 10 batches).
# Extra arguments go to ember-train (see `ember-train --help`); set NP for a
# different process count (trainers + 1 + ps).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# Its own build folder: the test build (scripts/test.sh) uses warnings as
# errors and debug info, this one is optimised.
cmake -S . -B build-release -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build-release
np=${NP:-4}
exec build-release/tools/ember-run -n "$np" build-release/tools/ember-train "$@"

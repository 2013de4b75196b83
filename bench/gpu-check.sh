#!/usr/bin/env bash
# bench/gpu-check.sh: the whole GPU check in one command, for a machine with
# one NVIDIA GPU and no internet.
#
#   bench/gpu-check.sh [BUILD_DIR]        (default: build-gpucheck)
#
# 1. Builds ember: the full tree when UCX, hwloc, rdma-core, OpenBLAS and
#    OpenSSL are all found by pkg-config, else the GPU part only
#    (-DEMBER_GPU_ONLY=ON: common/ + cuda/ + the engine's ops; nothing beyond
#    the CUDA toolkit).  SASS for sm_90 only (the check machine is an H200).
# 2. Runs the `cuda` tests (every kernel against the CPU ops, NCCL 1 rank).
# 3. Runs ember-bench-gpu: EmbeddingBag fwd/bwd effective bandwidth against a
#    device-to-device copy measured in the same run, NCCL allreduce 1 rank;
#    with the full build also `ember-bench allreduce --backend nccl` (1 rank).
# 4. Prints a short table.  Exit 0 only when the build and every test passed
#    (a skip counts as a failure here: this script is for GPU machines).
# Its time is mostly the build (docs/PERFORMANCE.md, The GPU path, gives the
# machine).
set -u -o pipefail

src=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$src/build-gpucheck}
jobs=$(nproc 2>/dev/null || echo 8)
start=$(date +%s)
log=$build/gpu-check.log
mkdir -p "$build"
: > "$log"

say() { printf '%s\n' "$*" | tee -a "$log"; }
elapsed() { echo $(( $(date +%s) - start ))s; }

say "== ember gpu-check ($(date -u +%FT%TZ))"
if command -v nvidia-smi > /dev/null; then
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader \
        | sed 's/^/gpu: /' | tee -a "$log"
else
    say "gpu: nvidia-smi not found"
fi
export PATH=/usr/local/cuda/bin:$PATH
command -v nvcc > /dev/null || { say "FAIL: nvcc not found"; exit 1; }
say "nvcc: $(nvcc --version | tail -1)"

# Which build: the full one only when every host dependency is present.
mode=gpu-only
if command -v pkg-config > /dev/null &&
   pkg-config --exists ucx hwloc openblas libibverbs librdmacm libcrypto 2> /dev/null; then
    mode=full
fi
say "libraries: $(ldconfig -p 2>/dev/null | grep -oE 'lib(ucp|hwloc|openblas|ibverbs|nccl)\.so[^ ]*' \
    | sort -u | tr '\n' ' ')"
say "build: $mode ($build, -j$jobs)"

# RelWithDebInfo (-O2, as CI); nvcc warnings are errors in every build.
cmake_args=(-S "$src" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo
            -DCMAKE_CUDA_ARCHITECTURES=90)
command -v ninja > /dev/null && cmake_args+=(-G Ninja)
[ "$mode" = gpu-only ] && cmake_args+=(-DEMBER_GPU_ONLY=ON)
if ! cmake "${cmake_args[@]}" >> "$log" 2>&1; then
    say "FAIL: configure (see $log)"; tail -20 "$log"; exit 1
fi
grep -E "ember: CUDA backend|Found NCCL|Could NOT find NCCL" "$log" | sed 's/^-- /cmake: /'
targets=(--target test_cuda_ops ember-bench-gpu)
# The full build also runs ember-bench's NCCL backend (the trainer's path).
# The full build also runs the \`cuda\` tests of the engine: the PS's table on
# the GPU and the golden replays with --device cuda and --ps-device cuda.
[ "$mode" = full ] && targets+=(ember-bench ember-run ember-train ember-info
                                ember_cuda_plugin golden_compare test_table_device)
if ! cmake --build "$build" -j "$jobs" "${targets[@]}" >> "$log" 2>&1; then
    say "FAIL: build (see $log)"; grep -E "error|FAILED" "$log" | head -20; exit 1
fi
say "built in $(elapsed)"

# Tests: label cuda; a skip (no GPU visible) is a failure on this machine.
ctest_log=$build/gpu-check-ctest.log
(cd "$build" && ctest -L cuda --timeout 120 --output-on-failure) > "$ctest_log" 2>&1
ctest_rc=$?
cat "$ctest_log" >> "$log"
passed=$(grep -c " Passed " "$ctest_log" || true)
failed=$(grep -cE "\*\*\*Failed|\*\*\*Timeout|\*\*\*Exception| Not Run" "$ctest_log" || true)
skipped=$(grep -c "Skipped" "$ctest_log" || true)
# The "did not run" list repeats each skipped test once.
skipped=$(( skipped / 2 ))

bench_log=$build/gpu-check-bench.log
timeout 240 "$build/bench/ember-bench-gpu" > "$bench_log" 2>> "$log"
bench_rc=$?
cat "$bench_log" >> "$log"

# ember-bench allreduce --backend nccl: NCCL through the engine's device
# interface, nccl-tests format, 1 rank (one GPU), checked (#wrong).
nccl_log=$build/gpu-check-nccl.log
nccl_rc=skipped
if [ "$mode" = full ]; then
    UCX_TLS=sm,self UCX_NET_DEVICES=lo timeout 120 "$build/tools/ember-run" -n 1 --no-prefix \
        "$build/bench/ember-bench" allreduce --backend nccl -b 8 -e 256M -f 4 -n 20 -w 5 -c 1 \
        > "$nccl_log" 2>&1
    nccl_rc=$?
    cat "$nccl_log" >> "$log"
fi

echo
echo "==================== ember gpu-check summary ===================="
printf '%-22s %s\n' "build" "$mode, sm_90"
printf '%-22s %s passed, %s failed, %s skipped (ctest rc %s)\n' "cuda tests" \
    "$passed" "$failed" "$skipped" "$ctest_rc"
grep -E "\*\*\*(Failed|Timeout|Exception)|Not Run|\(Skipped\)" "$ctest_log" | head -20 | sed "s/^/    /"
printf '%-22s rc %s\n' "ember-bench-gpu" "$bench_rc"
sed 's/^/    /' "$bench_log"
printf '%-22s rc %s\n' "ember-bench nccl" "$nccl_rc"
[ -f "$nccl_log" ] && grep -v "^#  Rank" "$nccl_log" | sed "s/^/    /"
printf '%-22s %s\n' "wall time" "$(elapsed)"
echo "full log: $log"
echo "================================================================="

[ "$ctest_rc" -eq 0 ] && [ "$skipped" -eq 0 ] && [ "$bench_rc" -eq 0 ] &&
    { [ "$nccl_rc" = skipped ] || [ "$nccl_rc" -eq 0 ]; }

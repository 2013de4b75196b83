#!/usr/bin/env bash
# bench/gpu-check.sh: the whole GPU check in one command, for a machine with
# one NVIDIA GPU and no internet (docs/PERFORMANCE.md, The GPU path).
#
#   bench/gpu-check.sh [BUILD_DIR]        (default: build-gpucheck)
#
# 1. Builds ember.  With deps/gpu.tar.xz (or DEPS=PATH: a scripts/gpu-deps.sh
#    prefix or its archive, made on a Debian 12 machine and carried along)
#    the full tree, against that prefix's UCX (headers and libraries of one
#    version, with CUDA: bench/gpu-full-build.sh); else the full tree when
#    pkg-config finds UCX, hwloc, OpenBLAS, rdma-core and OpenSSL; else the
#    GPU part only (-DEMBER_GPU_ONLY=ON: common/ + cuda/ + the engine's ops).
#    SASS for sm_90 only (the check machine is an H200).
# 2. Runs the `cuda` tests: every kernel against the CPU ops (the fused
#    backward + optimizer too), NCCL 1 rank, and with the full build the
#    PS's table on the GPU and the golden replays with --device cuda.
# 3. ember-bench-gpu: EmbeddingBag forward and fused backward + optimizer
#    GB/s against a device-to-device copy of the same run, beside PyTorch's
#    nn.EmbeddingBag (bench/peers/torch_bag_gpu.py) on the same sizes.
# 4. With the full build: bench/gpudirect-check.sh (the GPUDirect crash's
#    reproducer, the golden replays with replies in GPU memory),
#    bench/dlrm_gpu.sh (DLRM examples/s on the GPU beside PyTorch's DLRM),
#    and ember-bench allreduce --backend nccl (1 rank).
# 5. Prints one summary.  Exit 0 only when the build and every part passed
#    (a skipped cuda test counts as a failure here: this is a GPU machine).
# QUICK=1: the benchmarks' --quick sizes (a second try inside the budget).
set -u -o pipefail

src=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$src/build-gpucheck}
jobs=$(nproc 2>/dev/null || echo 8)
quick=${QUICK:-0}
start=$(date +%s)
mkdir -p "$build"
build=$(cd "$build" && pwd)
log=$build/gpu-check.log
: > "$log"

say() { printf '%s\n' "$*" | tee -a "$log"; }
elapsed() { echo $(( $(date +%s) - start ))s; }
# The python with torch: the golden references' and the peers'.
torch_python=${PYTHON:-$(command -v python3)}
qflag=()
[ "$quick" = 1 ] && qflag=(--quick)

# ---- 1. the build -----------------------------------------------------------
gpu_banner() {
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
    say "libraries: $(ldconfig -p 2>/dev/null | grep -oE 'lib(ucp|hwloc|openblas|ibverbs|nccl)\.so[^ ]*' \
        | sort -u | tr '\n' ' ')"
}

# Which build: "deps" (the carried prefix), "full" (system libraries) or
# "gpu-only".
choose_mode() {
    deps=${DEPS:-}
    [ -z "$deps" ] && [ -e "$src/deps/gpu.tar.xz" ] && deps=$src/deps/gpu.tar.xz
    [ -z "$deps" ] && [ -d "$src/deps/gpu" ] && deps=$src/deps/gpu
    if [ -n "$deps" ]; then
        mode=deps
    elif command -v pkg-config > /dev/null &&
         pkg-config --exists ucx hwloc openblas libibverbs librdmacm libcrypto 2> /dev/null; then
        mode=full
    else
        mode=gpu-only
    fi
    say "build: $mode${deps:+ ($deps)} in $build, -j$jobs"
}

# The GPU-only and system-library builds; the carried prefix's is
# bench/gpu-full-build.sh's.
build_here() {
    local args=(-S "$src" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo
                -DCMAKE_CUDA_ARCHITECTURES=90)
    command -v ninja > /dev/null && args+=(-G Ninja)
    [ "$mode" = gpu-only ] && args+=(-DEMBER_GPU_ONLY=ON)
    args+=(-DEMBER_TORCH_PYTHON="$torch_python")
    cmake "${args[@]}" >> "$log" 2>&1 || { say "FAIL: configure (see $log)"; tail -20 "$log"; exit 1; }
    local targets=(--target test_cuda_ops test_cuda_bag_update ember-bench-gpu)
    [ "$mode" = full ] && targets=()  # all: the engine's cuda tests need most of the tree
    cmake --build "$build" -j "$jobs" "${targets[@]}" >> "$log" 2>&1 ||
        { say "FAIL: build (see $log)"; grep -E "error|FAILED" "$log" | head -20; exit 1; }
}

build_all() {
    if [ "$mode" = deps ]; then
        JOBS=$jobs CMAKE_ARGS="-DEMBER_TORCH_PYTHON=$torch_python" bash "$src/bench/gpu-full-build.sh" "$deps" "$build" 2>&1 | tee -a "$log"
        [ "${PIPESTATUS[0]}" -eq 0 ] || { say "FAIL: bench/gpu-full-build.sh"; exit 1; }
        local root
        root=$(sed -n 's/^EMBER_UCX_ROOT:[A-Z]*=//p' "$build/CMakeCache.txt")
        # shellcheck source=/dev/null
        source "$root/env.sh"
    else
        build_here
    fi
    say "built in $(elapsed)"
}

# ---- 2. the cuda tests ------------------------------------------------------
run_cuda_tests() {
    ctest_log=$build/gpu-check-ctest.log
    # gpudirect-check.sh runs the GPUDirect ones, with its own table.
    (cd "$build" && ctest -L cuda -E 'cuda_gpudirect|gpudirect_repro' -j4 --timeout 120 \
        --output-on-failure) > "$ctest_log" 2>&1
    ctest_rc=$?
    cat "$ctest_log" >> "$log"
    passed=$(grep -c " Passed " "$ctest_log" || true)
    failed=$(grep -cE "\*\*\*Failed|\*\*\*Timeout|\*\*\*Exception| Not Run" "$ctest_log" || true)
    skipped=$(grep -c "(Skipped)" "$ctest_log" || true)
}

# ---- 3. EmbeddingBag beside PyTorch -----------------------------------------
run_bag_bench() {
    bench_log=$build/gpu-check-bench.log
    timeout 300 "$build/bench/ember-bench-gpu" "${qflag[@]}" > "$bench_log" 2>> "$log"
    bench_rc=$?
    cat "$bench_log" >> "$log"
    peer_log=$build/gpu-check-torch-bag.log
    timeout 300 "$torch_python" "$src/bench/peers/torch_bag_gpu.py" --device cuda "${qflag[@]}" \
        > "$peer_log" 2>> "$log"
    peer_rc=$?
    cat "$peer_log" >> "$log"
}

# ember's backward + optimizer rows with PyTorch's time for the same case
# (its PEER lines), and the forward's, as ratios.
bag_side_by_side() {
    awk '
    FNR == NR {
        if ($1 != "PEER") next
        for (i = 2; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
        o = v["optim"]; dense = sub(/\(dense\)/, "", o)  # PyTorch has no sparse max
        key = v["dim"] " " v["mode"] " " o
        fwd[v["dim"] " " v["mode"]] = v["fwd_ms"]; upd[key] = v["upd_ms"]
        mark[key] = dense ? " (PyTorch dense)" : ""
        next
    }
    /^# backward \+ optimizer/ { in_upd = 1 }
    in_upd && $1 ~ /^[0-9]+$/ {
        key = $1 " " $2 " " $3
        t = (key in upd) ? sprintf("%9.3f %8.2fx%s", upd[key], upd[key] / $4, mark[key]) \
                         : "        -         -"
        printf "%-6s %-5s %-8s %9.3f %9.1f %6s %s\n", $1, $2, $3, $4, $5, $6, t
    }
    !in_upd && $1 ~ /^[0-9]+$/ && ($1 " " $2) in fwd {
        f[$1 " " $2] = sprintf("%-6s %-5s fwd %9.3f ms, PyTorch %9.3f ms: %.2fx", $1, $2, $3,
                               fwd[$1 " " $2], fwd[$1 " " $2] / $3)
        order[++nf] = $1 " " $2
    }
    END { for (i = 1; i <= nf; i++) print f[order[i]] }
    ' "$peer_log" "$bench_log"
}

# ---- 4. GPUDirect, DLRM, NCCL (full builds) ---------------------------------
run_full_parts() {
    gd_rc=skipped dlrm_rc=skipped nccl_rc=skipped
    [ "$mode" = gpu-only ] && return
    gd_log=$build/gpu-check-gpudirect.log
    LOG=$build/gpudirect-check.log bash "$src/bench/gpudirect-check.sh" "$build" > "$gd_log" 2>&1
    gd_rc=$?
    dlrm_log=$build/gpu-check-dlrm.log
    PYTHON=$torch_python STEPS=$([ "$quick" = 1 ] && echo 20 || echo 50) \
        bash "$src/bench/dlrm_gpu.sh" "$build" > "$dlrm_log" 2>&1
    dlrm_rc=$?
    nccl_log=$build/gpu-check-nccl.log
    UCX_TLS=sm,self UCX_NET_DEVICES=lo timeout 120 "$build/tools/ember-run" -n 1 --no-prefix \
        "$build/bench/ember-bench" allreduce --backend nccl -b 8 -e 256M -f 4 -n 20 -w 5 -c 1 \
        > "$nccl_log" 2>&1
    nccl_rc=$?
    cat "$gd_log" "$dlrm_log" "$nccl_log" >> "$log"
}

# ---- 5. the summary ---------------------------------------------------------
summary() {
    echo
    echo "==================== ember gpu-check summary ===================="
    printf '%-22s %s, sm_90%s\n' "build" "$mode" "$([ "$quick" = 1 ] && echo ", QUICK")"
    printf '%-22s %s passed, %s failed, %s skipped (ctest rc %s)\n' "cuda tests" \
        "$passed" "$failed" "$skipped" "$ctest_rc"
    grep -E "\*\*\*(Failed|Timeout|Exception)|Not Run|\(Skipped\)" "$ctest_log" | head -20 | sed "s/^/    /"
    printf '%-22s rc %s; PyTorch peer rc %s\n' "ember-bench-gpu" "$bench_rc" "$peer_rc"
    sed 's/^/    /' "$bench_log"
    if [ "$peer_rc" -eq 0 ]; then
        echo "    # beside PyTorch (torch_bag_gpu.py; x = PyTorch's time / ember's); both timed alike:"
        echo "    # one untimed call, then the timed ones back to back between two synchronizations"
        printf '    %-6s %-5s %-8s %9s %9s %6s %9s %9s\n' dim mode optim "upd ms" "GB/s" "%copy" \
            "torch ms" "ratio"
        bag_side_by_side | sed 's/^/    /'
    fi
    printf '%-22s rc %s\n' "gpudirect-check" "$gd_rc"
    [ -f "${gd_log:-}" ] && sed 's/^/    /' "$gd_log"
    printf '%-22s rc %s\n' "dlrm on the GPU" "$dlrm_rc"
    [ -f "${dlrm_log:-}" ] && sed 's/^/    /' "$dlrm_log"
    printf '%-22s rc %s\n' "ember-bench nccl" "$nccl_rc"
    [ -f "${nccl_log:-}" ] && grep -v "^#  Rank" "$nccl_log" | sed "s/^/    /"
    printf '%-22s %s\n' "wall time" "$(elapsed)"
    echo "full log: $log"
    echo "================================================================="
}

ok() { [ "$1" = skipped ] || [ "$1" -eq 0 ]; }

gpu_banner
choose_mode
build_all
run_cuda_tests
run_bag_bench
run_full_parts
summary
[ "$ctest_rc" -eq 0 ] && [ "$skipped" -eq 0 ] && [ "$bench_rc" -eq 0 ] && [ "$peer_rc" -eq 0 ] &&
    ok "$gd_rc" && ok "$dlrm_rc" && ok "$nccl_rc"

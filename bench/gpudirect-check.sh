#!/usr/bin/env bash
# bench/gpudirect-check.sh: the GPUDirect part of the GPU check (issue 25):
# the crash's reproducer (bench/gpudirect_repro.c) with GPU memory over
# UCX's own choice of transports, tcp and shared memory, one row per
# variant, and the golden replays with the replies in GPU memory
# (train.cuda_gpudirect.*: EMBER_GPUDIRECT=rdma, auto, staged).
#
#   bench/gpudirect-check.sh BUILD_DIR
#
# BUILD_DIR: a full build (bench/gpu-full-build.sh); the prefix it was built
# against (EMBER_UCX_ROOT in its cache) has its env.sh sourced, so the
# programs and UCX's modules find its libraries.  Without a GPU every CUDA
# row says "skipped", never "ok" or "passed"; the host-memory reproducer
# runs everywhere.  Prints a table; exit 0 when nothing failed or crashed
# (skips allowed: gpu-check.sh decides what a skip means there), else 1.
# About two minutes on the GPU machine (an estimate); LOG (default
# BUILD_DIR/gpudirect-check.log) gets every line of every run.
set -u -o pipefail

if [ $# -ne 1 ] || [ ! -f "$1/CMakeCache.txt" ]; then
    echo "usage: bench/gpudirect-check.sh BUILD_DIR (a configured build)" >&2
    exit 2
fi
build=$(cd "$1" && pwd)
log=${LOG:-$build/gpudirect-check.log}
: > "$log"
deps=$(sed -n 's/^EMBER_UCX_ROOT:[A-Z]*=//p' "$build/CMakeCache.txt")
if [ -n "$deps" ] && [ -f "$deps/env.sh" ]; then
    # shellcheck source=/dev/null
    source "$deps/env.sh"
fi
repro=$build/bench/gpudirect_repro
failed=0
row() { printf '%-58s %s\n' "$1" "$2"; }
note_failure() { case $1 in ok* | passed* | skipped*) ;; *) failed=1 ;; esac; }

echo "== gpudirect-check: $build (UCX prefix: ${deps:-none, the system one})"
[ -x "$repro" ] || { echo "gpudirect-check: no $repro (a build with CUDA and the transport)"; exit 1; }

# The reproducer: host memory once (the program itself), then GPU memory
# with each transport list.  Its own lines carry each variant's result.
run_repro() { # mem tls
    local out rc tls_name=all label
    [ -n "$2" ] && tls_name=$2
    label="repro mem=$1 UCX_TLS=$tls_name"
    local tls_env=(-u UCX_TLS) # none given: UCX's own choice, not an empty list
    [ -n "$2" ] && tls_env=("UCX_TLS=$2")
    out=$(env "${tls_env[@]}" UCX_NET_DEVICES="${UCX_NET_DEVICES:-lo}" timeout 300 "$repro" \
        --mem "$1" 2>>"$log")
    rc=$?
    printf '%s\n' "$out" >> "$log"
    [ "$1" = host ] && grep -m1 "UCX library" <<<"$out" | sed 's/^gpudirect_repro: /ucx: /'
    if [ $rc -eq 77 ]; then
        row "$label" "skipped (no CUDA GPU visible)"
        return
    fi
    local lines
    lines=$(grep "variant=" <<<"$out" | sed -E 's/^gpudirect_repro: mem=[a-z]+ variant=([a-z_]+) result=(.*) \([0-9]+ sizes.*$/\1 \2/')
    [ -n "$lines" ] || { row "$label" "FAILED (exit $rc, no result)"; failed=1; return; }
    while read -r variant result; do
        row "$label $variant" "$result"
        note_failure "$result"
    done <<<"$lines"
    [ $rc -eq 124 ] && { row "$label" "FAILED (timed out)"; failed=1; }
}
run_repro host ""
for tls in "" tcp,cuda_copy,self sm,cuda_copy,self; do
    run_repro cuda "$tls"
done

# The golden replays on the GPU path (tests/train/CMakeLists.txt).
out=$(ctest --test-dir "$build" -R '^train\.cuda_gpudirect\.' -j4 -V --timeout 200 2>&1)
printf '%s\n' "$out" >> "$log"
grep -qE 'Test +#[0-9]+: train\.cuda_gpudirect' <<<"$out" ||
    { row "golden train.cuda_gpudirect.*" "FAILED (no such tests in $build)"; failed=1; }
while read -r num name result; do
    case $result in
    Passed) result=passed ;;
    *Skipped*) result="skipped (no CUDA GPU visible)" ;;
    *) result="FAILED ($result; see $log)" ;;
    esac
    # The path its trainers said they took (tests/train/test_train.sh prints it).
    path=$(grep -E "^$num: .*GPU data path: " <<<"$out" | head -1 |
           sed -E 's/.*GPU data path: (lookup replies land in|lookup replies and gradient pushes staged).*/\1/;
                   s/lookup replies land in/rdma/; s/lookup replies and gradient pushes staged/staged/')
    row "golden ${name#train.cuda_gpudirect.}" "$result${path:+ (path: $path)}"
    note_failure "$result"
done < <(sed -nE 's/^ *[0-9]+\/[0-9]+ Test +#([0-9]+): (train\.cuda_gpudirect\.[^ ]+) \.+ *([^0-9]*[A-Za-z]+).*/\1 \2 \3/p' <<<"$out")

echo "== gpudirect-check: $([ $failed -eq 0 ] && echo "nothing failed" || echo "FAILURES (see $log)")"
exit $failed

#!/usr/bin/env bash
# bench/gpu-full-build.sh: configure and build the full tree against a
# prefix made by scripts/gpu-deps.sh (UCX with CUDA, headers and libraries of
# one version, and the other libraries the full build needs), for the GPU
# check machine, which has none of them installed.
#
#   bench/gpu-full-build.sh DEPS_DIR BUILD_DIR [TARGET...]   (no target: all)
#
# DEPS_DIR may be the prefix's archive (DEPS_DIR.tar.xz, as gpu-deps.sh
# writes it): it is unpacked into BUILD_DIR/deps first (tar, or Python's
# tarfile where tar has no xz).
# Exit 0 when configured and built, and the programs load UCX from DEPS_DIR
# (not a system copy); 1 otherwise, saying which step.  JOBS overrides the
# parallelism (default: every core); CMAKE_ARGS adds configure arguments.
# The programs find the prefix's libraries by their RPATH;
# DEPS_DIR/env.sh adds LD_LIBRARY_PATH for anything else
# (bench/gpudirect-check.sh sources it).
set -u -o pipefail

if [ $# -lt 2 ]; then
    echo "usage: bench/gpu-full-build.sh DEPS_DIR BUILD_DIR [TARGET...]" >&2
    exit 2
fi
src=$(cd "$(dirname "$0")/.." && pwd)
deps=$1
build=$2
shift 2
mkdir -p "$build"
if [ -f "$deps" ]; then
    case $deps in
    *.tar.xz) ;;
    *) echo "gpu-full-build: $deps: expected a folder or a .tar.xz" >&2; exit 1 ;;
    esac
    rm -rf "$build/deps" && mkdir -p "$build/deps"
    top=$(basename "$deps" .tar.xz)
    tar -C "$build/deps" -xJf "$deps" 2>/dev/null ||
        python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' \
            "$deps" "$build/deps" ||
        { echo "gpu-full-build: cannot unpack $deps" >&2; exit 1; }
    deps=$build/deps/$top
fi
[ -d "$deps" ] || { echo "gpu-full-build: no folder $deps" >&2; exit 1; }
deps=$(cd "$deps" && pwd)
[ -f "$deps/env.sh" ] && [ -d "$deps/lib/cmake/ucx" ] ||
    { echo "gpu-full-build: $deps is not a scripts/gpu-deps.sh prefix (env.sh, lib/cmake/ucx)" >&2; exit 1; }
# Debian 12's libraries need a glibc at least as new as the one they came with.
need=$(cat "$deps/GLIBC" 2>/dev/null || echo 0)
have=$(getconf GNU_LIBC_VERSION 2>/dev/null | awk '{print $2}')
if [ -n "$have" ] && [ "$(printf '%s\n%s\n' "$need" "$have" | sort -V | head -1)" != "$need" ]; then
    echo "gpu-full-build: FAIL: the prefix's libraries need glibc >= $need, this machine has $have"
    exit 1
fi
# shellcheck source=/dev/null
source "$deps/env.sh"
export PATH=/usr/local/cuda/bin:$PATH
jobs=${JOBS:-$(nproc 2>/dev/null || echo 8)}
log=$build/gpu-full-build.log
: > "$log"

args=(-S "$src" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CUDA_ARCHITECTURES=90
      -DEMBER_UCX_ROOT="$deps" -DCMAKE_PREFIX_PATH="$deps")
# CMAKE_ARGS: more (e.g. -DEMBER_TORCH_PYTHON=..., the python with torch).
read -r -a extra <<< "${CMAKE_ARGS:-}"
args+=("${extra[@]}")
command -v ninja > /dev/null && args+=(-G Ninja)
if ! cmake "${args[@]}" >> "$log" 2>&1; then
    echo "gpu-full-build: FAIL: configure (see $log)"; tail -15 "$log"; exit 1
fi
grep -E "ember: (UCX|CUDA backend)" "$log" | sed 's/^-- /gpu-full-build: /'
ucx_dir=$(sed -n 's/^ucx_DIR:[A-Z]*=//p' "$build/CMakeCache.txt")
case $ucx_dir in
"$deps"/*) ;;
*) echo "gpu-full-build: FAIL: UCX found at '$ucx_dir', not in $deps"; exit 1 ;;
esac
targets=()
for t in "$@"; do targets+=(--target "$t"); done
start=$(date +%s)
if ! cmake --build "$build" -j"$jobs" "${targets[@]}" >> "$log" 2>&1; then
    echo "gpu-full-build: FAIL: build (see $log)"; grep -E "error|FAILED" "$log" | head -15; exit 1
fi
echo "gpu-full-build: built in $(( $(date +%s) - start ))s (-j$jobs)"

# The programs must map this prefix's UCX, and load at all (its glibc).
prog=$build/tools/ember-info
if [ -x "$prog" ]; then
    ucp=$(ldd "$prog" | awk '/libucp/ {print $3}')
    missing=$(ldd "$prog" | grep -c "not found")
    case $ucp in
    "$deps"/*) ;;
    *) echo "gpu-full-build: FAIL: $prog maps libucp from '$ucp', not $deps"; exit 1 ;;
    esac
    [ "$missing" -eq 0 ] || { echo "gpu-full-build: FAIL: $prog:"; ldd "$prog" | grep "not found"; exit 1; }
    "$prog" > "$build/ember-info.txt" 2>&1 ||
        { echo "gpu-full-build: FAIL: $prog does not run:"; tail -5 "$build/ember-info.txt"; exit 1; }
    echo "gpu-full-build: $(grep -m1 '^ucx version' "$build/ember-info.txt")," \
         "$(grep -m1 '^ucx headers' "$build/ember-info.txt"), libucp from $ucp"
fi
exit 0

#!/usr/bin/env bash
# tests/example/test_example_install.sh BUILD_DIR SOURCE_DIR CMAKE GENERATOR CC LIBDIR PYTHON [SANITIZE]
# The two-tower example built from an installed ember, as its README says:
#   1. cmake --install BUILD --prefix P (a fresh prefix)
#   2. examples/two_tower copied out of the tree (nothing of the tree reachable
#      by a relative path), and built in fresh build folders
#      a. with find_package(ember) (CMAKE_PREFIX_PATH=P): ember_DIR must be P's
#      b. with pkg-config (PKG_CONFIG_PATH=P/LIBDIR/pkgconfig) and its Makefile
#   3. each binary links P's libember.so (ldd), not the build tree's, with no
#      LD_LIBRARY_PATH
#   4. a short job of each under P's ember-run (2 trainers + 2 PS and 2 + 1),
#      each compared with the copied reference.py within 1e-4
# Writes only under a temporary folder, but for BUILD/install_manifest.txt,
# which cmake --install always writes: put back as it was afterwards.
set -uo pipefail
build=$(cd "$1" && pwd) src=$(cd "$2" && pwd) cmake=$3 generator=$4 cc=$5
libdir=$6 python=$7 sanitize=${8:-}
san_flags=()
[[ -n $sanitize ]] && san_flags=(-fsanitize="$sanitize")
stem=ember-example-install
source "$(dirname "$0")/../common/install_work.sh"
unset LD_LIBRARY_PATH PKG_CONFIG_PATH CMAKE_PREFIX_PATH

step "cmake --install $build --prefix $prefix"
"$cmake" --install "$build" --prefix "$prefix" >"$work/out" 2>&1 || fail "cmake --install exited $?"
real_lib=$(readlink -f "$prefix/$libdir")
for f in bin/ember-run "$libdir/libember.so" "$libdir/cmake/ember/emberConfig.cmake" \
         "$libdir/pkgconfig/ember.pc"; do
    [[ -e $prefix/$f ]] || fail "not installed: $f"
done

# Two copies of the example's sources, outside the tree.
for copy in cmake-src make-src; do
    mkdir -p "$work/$copy" || fail "cannot make $work/$copy"
    cp -p "$src"/examples/two_tower/* "$work/$copy/" || fail "cannot copy examples/two_tower"
    rm -f "$work/$copy/two_tower" "$work/$copy"/*.o
done

step "find_package(ember): cmake -S two_tower -DCMAKE_PREFIX_PATH=$prefix"
"$cmake" -S "$work/cmake-src" -B "$work/cmake-build" -G "$generator" -DCMAKE_C_COMPILER="$cc" \
    -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_C_FLAGS="-Werror ${san_flags[*]}" \
    -DCMAKE_EXE_LINKER_FLAGS="${san_flags[*]}" >"$work/out" 2>&1 ||
    fail "configuring the example exited $?"
found=$(sed -n 's/^ember_DIR:PATH=//p' "$work/cmake-build/CMakeCache.txt")
[[ $(readlink -f "$found") == "$real_lib/cmake/ember" ]] || fail "find_package found ember in '$found'"
"$cmake" --build "$work/cmake-build" >"$work/out" 2>&1 || fail "building the example exited $?"

step "pkg-config: PKG_CONFIG_PATH=$prefix/$libdir/pkgconfig make"
PKG_CONFIG_PATH=$prefix/$libdir/pkgconfig make -C "$work/make-src" CC="$cc" \
    CFLAGS="-O2 -Werror ${san_flags[*]}" LDFLAGS="${san_flags[*]}" >"$work/out" 2>&1 ||
    fail "make exited $?"
# Without pkg-config's path (and no ember of the system's) the Makefile says
# what to set.
if ! pkg-config --exists ember; then
    make -C "$work/make-src" >"$work/out" 2>&1 && fail "make found an ember without PKG_CONFIG_PATH"
    grep -q 'set PKG_CONFIG_PATH' "$work/out" || fail "make without ember does not say what to set"
fi

binaries=("$work/cmake-build/two_tower" "$work/make-src/two_tower")
step "the binaries link the prefix's libember"
for exe in "${binaries[@]}"; do
    lib=$(ldd "$exe" | sed -n 's/^[[:space:]]*libember\.so\.[0-9]* => \([^ ]*\) .*/\1/p')
    [[ -n $lib && $(readlink -f "$lib") == "$real_lib"/libember.so.* ]] ||
        fail "$exe: ldd resolves libember to '$lib', not $real_lib"
done

step "a short job of each, against the reference"
example=$work/cmake-src
"$python" "$example/gen_data.py" --out "$work/data.st" --users 60 --items 150 --categories 10 \
    --positives 128 --seed 3 >"$work/out" 2>&1 || fail "gen_data.py exited $?"
flags=(--steps 6 --batch 16)
ps=2
for exe in "${binaries[@]}"; do
    : >"$work/out"
    timeout 120 "$prefix/bin/ember-run" -n $((2 + ps)) "$exe" --ps "$ps" --data "$work/data.st" \
        --out "$work/out.st" "${flags[@]}" >"$work/out" 2>&1 || fail "$exe on $ps PS exited $?"
    "$python" "$example/reference.py" --data "$work/data.st" --ember "$work/out.st" \
        "${flags[@]}" >>"$work/out" 2>&1 || fail "$exe on $ps PS: ember and PyTorch differ"
    grep 'reference: ok' "$work/out" | sed "s|^|$(basename "$(dirname "$exe")"): |"
    rm -f "$work/out.st"
    ps=1
done
echo "ok"

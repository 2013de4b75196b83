#!/usr/bin/env bash
# tests/install/test_install.sh BUILD_DIR SOURCE_DIR CMAKE GENERATOR CC LIBDIR HAVE_CUDA [SANITIZE]
# Install the build into a temporary prefix P and use it from outside:
#   1. cmake --install BUILD --prefix P: the programs, libember (shared and
#      static), the CMake package, ember.pc, the CUDA plugin
#   2. the installed headers: include/ember/*.h and version.h, exactly, and
#      none includes anything of the project but <ember/...>
#   3. libember.so: its SONAME libember.so.ABI_MAJOR (EMBER_ABI_VERSION_MAJOR
#      of the installed version.h), the file libember.so.ABI_MAJOR.ABI_MINOR,
#      ember_* symbols only, each in the version node EMBER_ABI_MAJOR
#      (install.exports checks them against the headers); the programs,
#      which link the engine statically, need no libember.so and export
#      what the CUDA plugin uses of it
#   4. tests/install/consumer/ built with find_package(ember) (ember::ember,
#      ember::ember_static) and with pkg-config (shared, and --static with
#      libember.a), each run: they check public functions' results; the
#      shared ones bind to ember_*@EMBER_ABI_MAJOR only
#   5. P/bin/ember-train --help; with CUDA, --device cuda loads P's plugin
#      (EMBER_LOG_LEVEL=debug says which file), and without it the error
#      names the paths tried
# Writes only under a temporary folder, but for BUILD/install_manifest.txt,
# which cmake --install always writes: put back as it was afterwards.
set -uo pipefail
build=$(cd "$1" && pwd) src=$(cd "$2" && pwd) cmake=$3 generator=$4 cc=$5
libdir=$6 have_cuda=$7 sanitize=${8:-}
# A sanitized libember wants its consumers built with the same sanitizer.
san_flags=()
[[ -n $sanitize ]] && san_flags=(-fsanitize="$sanitize")
stem=ember-install-test
source "$(dirname "$0")/../common/install_work.sh"
lib=$prefix/$libdir
unset LD_LIBRARY_PATH
runpath() { readelf -d "$1" | sed -n 's/.*(RUNPATH).*\[\(.*\)\]$/\1/p'; }

step "cmake --install $build --prefix $prefix"
"$cmake" --install "$build" --prefix "$prefix" >"$work/out" 2>&1 || fail "cmake --install exited $?"
for f in bin/ember-run bin/ember-train bin/ember-info bin/ember-bench \
         "$libdir"/libember.so "$libdir"/libember.a \
         "$libdir"/cmake/ember/emberConfig.cmake "$libdir"/cmake/ember/emberConfigVersion.cmake \
         "$libdir"/cmake/ember/emberTargets.cmake "$libdir"/pkgconfig/ember.pc; do
    [[ -e $prefix/$f ]] || fail "not installed: $f"
done
if [[ $have_cuda == ON ]]; then
    [[ -e $lib/libember-cuda.so ]] || fail "not installed: $libdir/libember-cuda.so"
fi

step "installed headers"
want=$( (cd "$src/include/ember" && ls -- *.h && echo version.h) | sort)
got=$(cd "$prefix/include/ember" && ls | sort)
[[ $got == "$want" ]] ||
    fail "installed headers: $(tr '\n' ' ' <<<"$got"); expected: $(tr '\n' ' ' <<<"$want")"
[[ $(ls "$prefix/include") == ember ]] || fail "more than ember/ in include/: $(ls "$prefix/include")"
# <ember/X.h> (installed) or a standard header (<name.h>); nothing in quotes,
# nothing of another folder (engine/, common/, transport/, cuda/...).
grep -HnE '^[[:space:]]*#[[:space:]]*include' "$prefix"/include/ember/*.h >"$work/includes"
bad=$(grep -vE '#[[:space:]]*include <(ember/[a-z_]+\.h|[a-z]+\.h)>' "$work/includes")
[[ -z $bad ]] || fail "an installed header includes a private or unknown header: $bad"
for h in $(grep -oE '<ember/[a-z_]+\.h>' "$work/includes" | tr -d '<>' | sort -u); do
    [[ -f $prefix/include/$h ]] || fail "<$h> is included but not installed"
done
for h in $got; do # the consumer compiles every one of them
    grep -q "^#include <ember/$h>" "$src/tests/install/consumer/consumer.c" ||
        fail "tests/install/consumer/consumer.c does not include <ember/$h>"
done

step "libember.so: SONAME, exports"
version=$(PKG_CONFIG_PATH=$lib/pkgconfig pkg-config --modversion ember) || fail "pkg-config ember"
abi_major=$(sed -n 's/^#define EMBER_ABI_VERSION_MAJOR \([0-9]*\)$/\1/p' "$prefix/include/ember/version.h")
abi_minor=$(sed -n 's/^#define EMBER_ABI_VERSION_MINOR \([0-9]*\)$/\1/p' "$prefix/include/ember/version.h")
[[ -n $abi_major && -n $abi_minor ]] || fail "no EMBER_ABI_VERSION_MAJOR/MINOR in version.h"
node=EMBER_$abi_major
soname=$(readelf -d "$lib/libember.so" | sed -n 's/.*(SONAME).*\[\(.*\)\]$/\1/p')
[[ $soname == "libember.so.$abi_major" ]] || fail "SONAME '$soname', ABI $abi_major.$abi_minor"
[[ $(readlink -f "$lib/libember.so") == "$(readlink -f "$lib")/libember.so.$abi_major.$abi_minor" ]] ||
    fail "libember.so -> $(readlink -f "$lib/libember.so"), expected libember.so.$abi_major.$abi_minor"
nm -D --defined-only "$lib/libember.so" >"$work/exports" || fail "nm -D $lib/libember.so"
others=$(awk '!($2 == "A" && $3 == "'"$node"'") && $3 !~ /^ember_[a-z0-9_]*@@'"$node"'$/ {print $3}' \
    "$work/exports")
[[ -z $others ]] ||
    fail "libember.so exports more than ember_*@@$node: $(tr '\n' ' ' <<<"$others" | head -c 300)"
echo "libember.so.$abi_major.$abi_minor (release $version): $(grep -c ' ember_' "$work/exports") ember_* functions in $node"

step "installed programs carry the engine and export its API to the plugin"
real_lib=$(readlink -f "$lib")
plugin_needs=""
if [[ $have_cuda == ON ]]; then
    plugin_needs=$(nm -D --undefined-only "$lib/libember-cuda.so" | awk '$2 ~ /^ember_/ {print $2}' |
        sed 's/@.*//' | sort -u)
fi
# ember-train is a program of the public API: it links libember.so (the
# prefix's, by its RUNPATH); ember-info and ember-bench use internals.
readelf -d "$prefix/bin/ember-train" | grep "NEEDED.*\[libember\.so\.$abi_major\]" >/dev/null ||
    fail "ember-train does not link libember.so.$abi_major"
rp=$(runpath "$prefix/bin/ember-train")
[[ $rp == '$ORIGIN'* && $rp != *"$build"* ]] || fail "ember-train: RUNPATH '$rp'"
for p in ember-info ember-bench; do
    readelf -d "$prefix/bin/$p" | grep 'NEEDED.*\[libember\.so' >/dev/null &&
        fail "$p needs libember.so (it links the engine statically)"
    rp=$(runpath "$prefix/bin/$p")
    [[ $rp != *"$build"* ]] || fail "$p: RUNPATH '$rp' points into the build tree"
    has=$(nm -D --defined-only "$prefix/bin/$p" | awk '$3 ~ /^ember_/ {print $3}' | sort -u)
    missing=$(comm -23 <(echo "$plugin_needs") <(echo "$has") | grep .)
    [[ -z $missing ]] || fail "$p does not export what the CUDA plugin uses: $missing"
done
if [[ $have_cuda == ON ]]; then
    plugin=$lib/libember-cuda.so
    readelf -d "$plugin" | grep "NEEDED.*\[libember\.so\.$abi_major\]" >/dev/null ||
        fail "the plugin does not link libember.so.$abi_major"
    rp=$(runpath "$plugin")
    [[ $rp == '$ORIGIN'* && $rp != *"$build"* ]] || fail "libember-cuda.so: RUNPATH '$rp'"
fi

step "consumer: find_package(ember)"
"$cmake" -S "$src/tests/install/consumer" -B "$work/consumer" -G "$generator" \
    -DCMAKE_C_COMPILER="$cc" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_C_FLAGS="${san_flags[*]}" \
    -DCMAKE_EXE_LINKER_FLAGS="${san_flags[*]}" >"$work/out" 2>&1 ||
    fail "configuring the consumer exited $?"
found=$(sed -n 's/^ember_DIR:PATH=//p' "$work/consumer/CMakeCache.txt")
[[ $found == "$lib/cmake/ember" ]] || fail "find_package found ember in '$found'"
"$cmake" --build "$work/consumer" >"$work/out" 2>&1 || fail "building the consumer exited $?"
# What a program of libember.so binds to: public functions of this ABI only.
binds() {
    local unversioned
    unversioned=$(nm -D --undefined-only "$1" | awk '$2 ~ /^ember_/ && $2 !~ /@'"$node"'$/ {print $2}')
    [[ -z $unversioned ]] || fail "$1 binds to ember_* outside $node: $unversioned"
    nm -D --undefined-only "$1" | grep "ember_abi_version@$node" >/dev/null ||
        fail "$1 does not bind to ember_abi_version@$node"
}
binds "$work/consumer/consumer"
readelf -d "$work/consumer/consumer_static" | grep 'NEEDED.*libember' >/dev/null &&
    fail "consumer_static (ember::ember_static) needs libember.so"
for exe in consumer consumer_static; do
    EMBER_LOG_LEVEL=fatal "$work/consumer/$exe" >"$work/out" 2>&1 || fail "$exe exited $?"
    cat "$work/out"
done

step "consumer: pkg-config ember"
export PKG_CONFIG_PATH=$lib/pkgconfig
consumer_c=$src/tests/install/consumer/consumer.c
flags=(-std=c11 -Wall -Wextra -Werror -pedantic "${san_flags[@]}")
# shellcheck disable=SC2046 # pkg-config's output is a list of flags
"$cc" "${flags[@]}" "$consumer_c" -o "$work/consumer_pc" $(pkg-config --cflags --libs ember) \
    -Wl,-rpath,"$lib" >"$work/out" 2>&1 || fail "cc with pkg-config --libs ember exited $?"
binds "$work/consumer_pc"
static_libs=()
for flag in $(pkg-config --static --libs ember); do
    [[ $flag == -lember ]] && flag=-l:libember.a # the archive, not the .so beside it
    static_libs+=("$flag")
done
# shellcheck disable=SC2046
"$cc" "${flags[@]}" "$consumer_c" -o "$work/consumer_pc_static" $(pkg-config --cflags ember) \
    "${static_libs[@]}" >"$work/out" 2>&1 || fail "cc with pkg-config --static --libs ember exited $?"
readelf -d "$work/consumer_pc_static" | grep 'NEEDED.*libember' >/dev/null &&
    fail "consumer_pc_static (libember.a) needs libember.so"
for exe in consumer_pc consumer_pc_static; do
    EMBER_LOG_LEVEL=fatal "$work/$exe" >"$work/out" 2>&1 || fail "$exe exited $?"
    cat "$work/out"
done

step "ember-train from the prefix"
"$prefix/bin/ember-train" --help >"$work/out" 2>&1 || fail "ember-train --help exited $?"
grep -q '^usage: ember-train' "$work/out" || fail "no usage text"

if [[ $have_cuda != ON ]]; then
    echo "== no CUDA backend in this build: the plugin checks skipped"
    echo "ok"
    exit 0
fi
step "ember-train --device cuda loads the prefix's plugin"
# EMBER_WORLD_SIZE=1: where a GPU is visible, ember-train stops right after
# (the job needs 4 processes) instead of waiting for a job to join.
export EMBER_WORLD_SIZE=1
EMBER_LOG_LEVEL=debug timeout 60 "$prefix/bin/ember-train" --device cuda >"$work/out" 2>&1
rc=$?
grep -qF "loaded the CUDA backend $real_lib/libember-cuda.so" "$work/out" ||
    fail "the plugin was not loaded from $real_lib (exit $rc)"
if grep -q 'no CUDA GPU is visible' "$work/out"; then
    echo "(no GPU here: ember-train stopped after loading the plugin, as expected)"
fi
step "ember-train --device cuda without the plugin names what it tried"
mv "$lib/libember-cuda.so" "$work/libember-cuda.so.hidden"
EMBER_LOG_LEVEL=warn timeout 60 "$prefix/bin/ember-train" --device cuda >"$work/out" 2>&1
mv "$work/libember-cuda.so.hidden" "$lib/libember-cuda.so"
if ! grep -q 'loaded the CUDA backend' "$work/out"; then # none in the configured libdir
    grep -qF "cannot load the CUDA backend: tried $real_lib/libember-cuda.so" "$work/out" ||
        fail "the error does not name $real_lib/libember-cuda.so"
    grep -q 'EMBER_CUDA_PLUGIN' "$work/out" || fail "the error does not name EMBER_CUDA_PLUGIN"
fi
EMBER_CUDA_PLUGIN=$work/none.so timeout 60 "$prefix/bin/ember-train" --device cuda >"$work/out" 2>&1
grep -qF "cannot load the CUDA backend EMBER_CUDA_PLUGIN=$work/none.so" "$work/out" ||
    fail "EMBER_CUDA_PLUGIN=$work/none.so: not named in the error"
echo "ok"

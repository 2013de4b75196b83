# tests/common/install_work.sh: sourced by the tests that install the build
# into a prefix (tests/install, tests/example).  Needs $build and $stem;
# sets $work (a temporary folder, removed at exit) and $prefix in it, keeps
# the build's install_manifest.txt as it was (cmake --install rewrites it),
# and defines fail (with the step's output) and step.
# shellcheck shell=bash
work=$(mktemp -d "/tmp/$stem.XXXXXX")
prefix=$work/prefix
manifest=$build/install_manifest.txt
[[ -f $manifest ]] && cp -p "$manifest" "$work/manifest.saved"
cleanup() {
    if [[ -f $work/manifest.saved ]]; then
        cp -p "$work/manifest.saved" "$manifest"
    else
        rm -f "$manifest"
    fi
    rm -rf "$work"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; echo "--- output:"; tail -40 "$work/out" 2>/dev/null; exit 1; }
step() { echo "== $*"; : >"$work/out"; }

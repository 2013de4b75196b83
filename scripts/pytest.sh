#!/usr/bin/env bash
# The Python package's tests: a venv over Debian's Python with its
# packages (python3-torch, numpy, pytest: --system-site-packages), ember
# installed into it by pip from python/ (built by this build directory's
# CMake: EMBERPY_BUILD_DIR, default build/), then pytest over tests/python.
# Arguments go to pytest (e.g. -k seed).  Prints pytest's counts; JUnit
# XML in BUILD/Testing/pytest-junit.xml.
#
#   scripts/pytest.sh [PYTEST ARGS...]
# Environment: EMBER_PY_VENV (default <repo>/.venv).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
build=${EMBERPY_BUILD_DIR:-$repo/build}
venv=${EMBER_PY_VENV:-$repo/.venv}
[[ -x $venv/bin/python ]] || /usr/bin/python3 -m venv --system-site-packages "$venv"
EMBERPY_BUILD_DIR=$build "$venv/bin/python" -m pip install -q --no-build-isolation \
  --no-deps --force-reinstall "$repo/python"
# Run from the tests' folder, so `import ember` is the installed package.
cd "$repo/tests/python"
mkdir -p "$build/Testing"
EMBERPY_BUILD_DIR=$build "$venv/bin/python" -m pytest -q -p no:cacheprovider \
  --junitxml="$build/Testing/pytest-junit.xml" "$@"

#!/usr/bin/env bash
# Install the Debian 12 packages ember needs to build and test.
#   scripts/setup.sh            build + test dependencies (python3-torch: the
#                               PyTorch references the tests compute)
#   scripts/setup.sh --bench    also the peers bench/ compares against
# As root it runs apt-get; otherwise it prints the exact apt-get line and stops.
set -euo pipefail

# libudev-dev: hwloc.pc's Libs.private (-ludev), for linking libember.a with
# pkg-config --static (tests/install).  clang, libclang-rt-14-dev (libFuzzer
# and the sanitizers' runtimes) and llvm (llvm-symbolizer: reports with file
# and line): scripts/sanitize.sh and scripts/fuzz.sh.  clang-format: the
# tree's layout (.clang-format, scripts/format.sh, CTest layering.format).
# iproute2 (ip, tc): the two-host cluster of network namespaces
# (tests/slurm/netns_cluster.sh).  python3-dev, python3-venv: the Python
# package (python/) and the venv its tests run in (scripts/pytest.sh);
# python3-pytest runs them.
packages=(build-essential cmake ninja-build pkg-config git
          libucx-dev ucx-utils libhwloc-dev hwloc libibverbs-dev librdmacm-dev
          libopenblas-dev libssl-dev libudev-dev slurm-wlm munge python3-torch
          python3-dev python3-venv python3-numpy python3-pytest
          clang libclang-rt-14-dev llvm clang-format iproute2)
if [[ "${1:-}" == "--bench" ]]; then
  packages+=(openmpi-bin libopenmpi-dev gnuplot-nox)
fi

missing=()
for p in "${packages[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
  [[ "$status" == "install ok installed" ]] || missing+=("$p")
done
if ((${#missing[@]} == 0)); then
  echo "setup: all ${#packages[@]} packages present"
  exit 0
fi

line="apt-get install -y --no-install-recommends ${missing[*]}"
if [[ $(id -u) -ne 0 ]]; then
  echo "setup: missing packages; run as root:" >&2
  echo "  apt-get update && $line" >&2
  exit 1
fi
echo "setup: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
$line

#!/usr/bin/env bash
# Gather, on this Debian 12 machine, the libraries a full ember build needs on
# the GPU check machine (which has CUDA 13 and no network, no UCX, hwloc,
# OpenBLAS or rdma-core: docs/PERFORMANCE.md, "The GPU machine") into one prefix
# that travels with the run (the device tool's carry, 64 MiB at most).
#
#   scripts/gpu-deps.sh [DIR]     DIR defaults to deps/gpu (git ignores deps/)
#
# What goes in, and why this way:
#   - UCX: ONE version, headers and libraries together, with CUDA support:
#     RAPIDS' libucx-cu13 wheel (UCX 1.22.0 for CUDA 13, manylinux_2_28; its
#     include/, lib/, lib/ucx modules cma, cuda; its CUDA memory hooks need
#     the wheel's own libcudart, which comes along).  Built --without-verbs:
#     tcp, shared memory (posix, sysv, cma) and cuda_copy/cuda_ipc, which is
#     what one GPU machine without an RDMA NIC can use.  ember builds against
#     these headers (EMBER_UCX_ROOT), so the ABI it was compiled for is the
#     one it runs with.
#   - Debian 12 packages, unpacked with dpkg -x into a scratch folder (never
#     into /) and flattened into DIR/{lib,include}: hwloc, OpenBLAS (pthread)
#     with libgfortran/libquadmath, rdma-core's libibverbs/librdmacm with
#     libnl, libnuma, libudev (hwloc), OpenSSL's libcrypto (ember's auth).
#     Static libraries, docs, LAPACK's separate copies and the rdma
#     providers (no RDMA NIC there) stay out.  pkgconf too (bin/pkg-config),
#     for a machine without pkg-config: env.sh puts it last on PATH.
#   - pkg-config files written for the flat layout, relative to themselves
#     (${pcfiledir}), and DIR/env.sh: source it for PKG_CONFIG_PATH and
#     LD_LIBRARY_PATH (a build names the prefix itself, -DEMBER_UCX_ROOT:
#     an EMBER_ variable in the environment is one ember's programs would
#     check, and warn about, at run time).  Every library finds its own
#     dependencies beside it ($ORIGIN), so programs built against the prefix
#     run without LD_LIBRARY_PATH (bin/ucx_info needs it).  The prefix can
#     move (before a build against it: programs record where it was).
#   - DIR.tar.xz beside it (about 8 MiB against about 53): carry either;
#     bench/gpu-full-build.sh takes the folder or the archive.
# Needs: pip (PyPI), apt-get (Debian's archive), dpkg, strip, objdump, xz.
set -euo pipefail

UCX_WHEEL="libucx-cu13==1.22.0"
DEBS=(libhwloc15 libhwloc-dev libopenblas0-pthread libopenblas-pthread-dev libgfortran5
      libquadmath0 libibverbs1 libibverbs-dev librdmacm1 librdmacm-dev libnl-3-200
      libnl-route-3-200 libnuma1 libudev1 libssl3 libssl-dev pkgconf-bin libpkgconf3)
LIMIT_MIB=64

root=$(cd "$(dirname "$0")/.." && pwd)
dir=${1:-$root/deps/gpu}
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

rm -rf "${dir:?}"/{lib,include,bin,env.sh,MANIFEST,GLIBC}
mkdir -p "$dir/lib/ucx" "$dir/lib/pkgconfig" "$dir/include" "$dir/bin"

# --- UCX from the wheel ------------------------------------------------------
echo "gpu-deps: downloading $UCX_WHEEL"
python3 -m pip download --quiet --no-deps "$UCX_WHEEL" -d "$scratch/wheel"
(cd "$scratch/wheel" && python3 -m zipfile -e ./*.whl x)
ucx=$scratch/wheel/x/libucx
cp -a "$ucx/include/." "$dir/include/"
# A wheel stores no symlinks (libucp.so, .so.0 and .so.0.0.0 are three
# copies): one file each, and the links made again.
for lib in lib/libucp lib/libuct lib/libucs lib/libucm lib/libucs_signal \
           lib/ucx/libuct_cma lib/ucx/libuct_cuda lib/ucx/libucm_cuda; do
  cp "$ucx/$lib.so.0.0.0" "$dir/$lib.so.0.0.0"
  ln -sf "$(basename "$lib").so.0.0.0" "$dir/$lib.so.0"
  ln -sf "$(basename "$lib").so.0" "$dir/$lib.so"
done
# perftest_cuda stays out (libstdc++, libgomp; perftest is not used).
cp -a "$ucx/lib/cmake" "$dir/lib/"
cp -a "$scratch"/wheel/x/libucx_cu13.libs/libcudart-*.so* "$dir/lib/"
install -m 755 "$ucx/bin/ucx_info" "$dir/bin/"
ucx_version=$(cat "$ucx/UCX_WHEEL_VERSION.txt")

# --- Debian packages ---------------------------------------------------------
echo "gpu-deps: downloading ${#DEBS[@]} Debian packages"
mkdir -p "$scratch/debs" "$scratch/root"
(cd "$scratch/debs" && apt-get download -q -o APT::Sandbox::User=root "${DEBS[@]}" >/dev/null)
for deb in "$scratch"/debs/*.deb; do
  dpkg -x "$deb" "$scratch/root"
done
multi=$scratch/root/usr/lib/x86_64-linux-gnu
for lib in libhwloc libgfortran libquadmath libibverbs librdmacm libnl-3 libnl-route-3 libnuma \
           libudev libcrypto libpkgconf; do
  cp -a "$multi/$lib".so* "$dir/lib/" 2>/dev/null || cp -a "$scratch/root/lib/x86_64-linux-gnu/$lib".so* "$dir/lib/"
done
cp -a "$multi"/openblas-pthread/libopenblas*.so* "$dir/lib/"
install -m 755 "$scratch/root/usr/bin/pkgconf" "$dir/bin/"
ln -sf pkgconf "$dir/bin/pkg-config"
cp -a "$scratch/root/usr/include/." "$dir/include/"
# Arch headers (openssl/configuration.h) and OpenBLAS's cblas.h beside the rest.
cp -a "$dir/include/x86_64-linux-gnu/." "$dir/include/"
cp -a "$dir/include/openblas-pthread/." "$dir/include/"
rm -rf "$dir/include/x86_64-linux-gnu" "$dir/include/openblas-pthread"
ls -l "$scratch"/debs/*.deb | awk '{print $NF}' | xargs -n1 basename >"$dir/MANIFEST"
echo "$UCX_WHEEL (UCX $ucx_version, CUDA 13)" >>"$dir/MANIFEST"

# --- pkg-config files, relative to themselves --------------------------------
pc() { # name version libs [requires]
  cat >"$dir/lib/pkgconfig/$1.pc" <<EOF
prefix=\${pcfiledir}/../..
libdir=\${prefix}/lib
includedir=\${prefix}/include
Name: $1
Description: $1 (ember's GPU-machine prefix, scripts/gpu-deps.sh)
Version: $2
Requires: ${4:-}
Libs: -L\${libdir} $3
Cflags: -I\${includedir}
EOF
}
pcver() { sed -n 's/^Version: *//p' "$1" | head -1; }
syspc=$scratch/root/usr/lib/x86_64-linux-gnu/pkgconfig
pc hwloc "$(pcver "$syspc/hwloc.pc")" -lhwloc
pc libibverbs "$(pcver "$syspc/libibverbs.pc")" -libverbs
pc librdmacm "$(pcver "$syspc/librdmacm.pc")" -lrdmacm libibverbs
pc openblas "$(dpkg-deb -f "$scratch"/debs/libopenblas0-pthread_*.deb Version | sed 's/[+-].*//')" -lopenblas
pc libcrypto "$(pcver "$syspc/libcrypto.pc")" -lcrypto
pc ucx-ucs "$ucx_version" "-lucs"
pc ucx-uct "$ucx_version" "-luct" ucx-ucs
pc ucx "$ucx_version" "-lucp" "ucx-uct, ucx-ucs"

# --- shrink, and let every library find its own dependencies here ----------
# Each library without a search path of its own gets $ORIGIN (UCX's modules
# $ORIGIN/..: the wheel's libcudart; OpenBLAS: libgfortran; hwloc: libudev),
# so a program linked against the prefix needs no LD_LIBRARY_PATH.
# patchelf from Debian's package, unpacked into the scratch folder only.
find "$dir/lib" -name '*.so*' -type f -exec strip --strip-unneeded {} +
(cd "$scratch/debs" && apt-get download -q -o APT::Sandbox::User=root patchelf >/dev/null)
dpkg -x "$scratch"/debs/patchelf_*.deb "$scratch/patchelf"
patchelf=$scratch/patchelf/usr/bin/patchelf
for lib in "$dir"/lib/*.so* "$dir"/lib/ucx/*.so*; do
  [ -L "$lib" ] && continue
  [ -n "$("$patchelf" --print-rpath "$lib")" ] && continue
  case $lib in
  */lib/ucx/*) "$patchelf" --set-rpath '$ORIGIN/..' "$lib" ;;
  *) "$patchelf" --set-rpath '$ORIGIN' "$lib" ;;
  esac
done
"$patchelf" --set-rpath '$ORIGIN/../lib' "$dir/bin/pkgconf"
# UCX's modules came with the wheel's own path ($ORIGIN/../../../libucx_cu13.libs).
for lib in "$dir"/lib/ucx/*.so.0.0.0; do "$patchelf" --set-rpath '$ORIGIN/..' "$lib"; done

# The newest glibc any of it needs (the GPU machine's must be as new:
# bench/gpu-full-build.sh checks DIR/GLIBC).
find "$dir/lib" -name '*.so.*' -type f -exec objdump -T {} + 2>/dev/null |
  grep -o 'GLIBC_[0-9.]*' | sed 's/GLIBC_//' | sort -uV | tail -1 >"$dir/GLIBC"
echo "gpu-deps: needs glibc >= $(cat "$dir/GLIBC")"

cat >"$dir/env.sh" <<'EOF'
# source DEPS/env.sh: build against and run with this prefix (scripts/gpu-deps.sh)
EMBER_DEPS=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export PKG_CONFIG_PATH=$EMBER_DEPS/lib/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}
export LD_LIBRARY_PATH=$EMBER_DEPS/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
# Last: its pkg-config only where the machine has none (ucx_info too).
export PATH=$PATH:$EMBER_DEPS/bin
EOF

size_kib=$(du -sk "$dir" | cut -f1)
echo "gpu-deps: $dir: UCX $ucx_version (CUDA 13) + ${#DEBS[@]} Debian packages," \
     "$((size_kib / 1024)) MiB (${size_kib} KiB)"
if ((size_kib > LIMIT_MIB * 1024)); then
  echo "gpu-deps: over the ${LIMIT_MIB} MiB a carried folder may have" >&2
  exit 1
fi
tar -C "$(dirname "$dir")" -cf - "$(basename "$dir")" | xz -T2 -6 >"$dir.tar.xz"
echo "gpu-deps: $dir.tar.xz: $(($(stat -c %s "$dir.tar.xz") / 1024)) KiB"

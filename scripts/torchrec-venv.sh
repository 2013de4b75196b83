#!/usr/bin/env bash
# The venv TorchRec's DLRM peer (bench/peers/torchrec_dlrm.py) runs in: torch
# 2.14.1, fbgemm-gpu-cpu 1.9.0 and torchrec 1.9.2 on the pyenv Python 3.11, as
# bench/peers/README.md describes (about 2 GB, from PyPI). Prints the
# venv's python. Idempotent: when the venv already imports torchrec at these
# versions, it only checks that and prints the path.
#
#   scripts/torchrec-venv.sh            create or check
#   PY=$(scripts/torchrec-venv.sh | tail -n 1)
#
# Environment: EMBER_TORCHREC_VENV (default <repo>/.venv-torchrec),
# EMBER_TORCHREC_BASE_PYTHON (default the newest ~/.pyenv/versions/3.11.*).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
venv=${EMBER_TORCHREC_VENV:-$repo/.venv-torchrec}
py=$venv/bin/python

torch_version=2.14.1
fbgemm_version=1.9.0
torchrec_version=1.9.2

# Imports what the peer needs and checks each version at full precision, so a
# venv left half-built by an interrupted run is not taken for a finished one.
check() {
    "$py" - "$torch_version" "$fbgemm_version" "$torchrec_version" <<'EOF'
import sys
import importlib.metadata as md
import torch, fbgemm_gpu, torchrec, safetensors, numpy  # noqa: F401
from torchrec.models.dlrm import DLRM  # noqa: F401
from torchrec.distributed.model_parallel import DistributedModelParallel  # noqa: F401
want = {"torch": sys.argv[1], "fbgemm-gpu-cpu": sys.argv[2], "torchrec": sys.argv[3]}
for name, version in want.items():
    have = md.version(name)
    if have.split("+")[0] != version:
        sys.exit(f"{name} {have} installed, {version} wanted")
EOF
}

if [ -x "$py" ] && check 2>/dev/null; then
    echo "$py"
    exit 0
fi

base=${EMBER_TORCHREC_BASE_PYTHON:-}
if [ -z "$base" ]; then
    base=$(ls -d "$HOME"/.pyenv/versions/3.11.* 2>/dev/null | sort -V | tail -n 1)
    [ -n "$base" ] || { echo "no pyenv Python 3.11 under $HOME/.pyenv/versions" \
        "(set EMBER_TORCHREC_BASE_PYTHON)" >&2; exit 2; }
    base=$base/bin/python3
fi
"$base" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))' || {
    echo "$base is not Python 3.11" >&2; exit 2; }

echo "creating $venv from $base (pip will say torch's CUDA wheels and fbgemm-gpu are" \
    "missing: expected, they are not needed on CPU)" >&2
"$base" -m venv "$venv"
pip=("$py" -m pip install --quiet)

# PyPI's Linux torch is the CUDA build: libtorch.so links libtorch_cuda.so,
# whose CUDA libraries come from /usr/local/cuda but for these four; the rest
# of torch's CUDA wheels (gigabytes) are not needed on CPU, hence --no-deps.
"${pip[@]}" --no-deps "torch==$torch_version"
"${pip[@]}" "nvidia-cufile==1.15.1.6.*" "nvidia-cusparselt-cu13==0.8.1" \
    "nvidia-nvshmem-cu13==3.4.5" "nvidia-nccl-cu13==2.30.7"
"${pip[@]}" filelock "typing-extensions>=4.10" "setuptools>=77.0.3" \
    "sympy>=1.13.3" "networkx>=2.5.1" jinja2 "fsspec>=0.8.5" numpy
# torchrec asks for fbgemm-gpu (CUDA) and these two for torch with its CUDA
# wheels: all four without their declared dependencies, which follow by hand.
"${pip[@]}" --no-deps "torchrec==$torchrec_version" "fbgemm-gpu-cpu==$fbgemm_version" \
    "tensordict==0.15.3" "torchmetrics==1.0.3"
"${pip[@]}" cloudpickle "pyvers<0.3" packaging "lightning-utilities>=0.7" tqdm \
    pyre-extensions iopath safetensors

check || { echo "$venv was built but does not import torchrec (see above)" >&2; exit 1; }
echo "$py"

"""ember with PyTorch from PyPI (current torch, CUDA wheel on a CPU
machine), beside Debian's 1.13 that the rest of the suite uses: the venv of
scripts/torchrec-venv.sh (EMBERPY_TORCH_VENV, default <repo>/.venv-torchrec,
about 2 GB: CI does not make it; the test skips without it).  The package
under test is this build's (PYTHONPATH), the same CPython 3.11 ABI."""
import os

import pytest

from conftest import BUILD, REPO, program, run

VENV = os.environ.get("EMBERPY_TORCH_VENV", os.path.join(REPO, ".venv-torchrec"))
PYTHON = os.path.join(VENV, "bin", "python")


@pytest.fixture(scope="module")
def current_torch():
    if not os.access(PYTHON, os.X_OK):
        pytest.skip(f"no venv with PyPI's torch at {VENV} (scripts/torchrec-venv.sh makes it)")
    return {"PYTHONPATH": os.path.join(BUILD, "python")}


def test_calls_and_refusals_on_current_torch(current_torch, ports):
    (port,) = ports(1)
    _, out = run([PYTHON, program("rpc_checks.py"), str(port)], env=current_torch, timeout=180)
    assert "ALL PASSED" in out, out[-4000:]


def test_one_trainer_matches_current_pytorch_rpc(current_torch, ports, tmp_path):
    import torch
    weights = {}
    for backend in ("ember", "torch"):
        rpc_port, ddp_port = ports(2)
        out_file = tmp_path / f"{backend}.pt"
        run([PYTHON, program("hybrid.py"), "--backend", backend, "--trainers", "1",
             "--epochs", "30", "--rpc-port", str(rpc_port), "--ddp-port", str(ddp_port),
             "--out", str(out_file)], env=current_torch, timeout=240)
        weights[backend] = torch.load(out_file)
    for key in ("emb", "fc.weight", "fc.bias"):
        diff = (weights["ember"][key] - weights["torch"][key]).abs().max().item()
        assert diff <= 1e-5, f"{key}: {diff} from PyTorch RPC's"

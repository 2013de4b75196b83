"""The tutorial's hybrid job (programs/hybrid.py: RemoteModule, DDP,
distributed autograd, DistributedOptimizer) on ember, in every launch mode,
and against PyTorch RPC."""
import fcntl
import os
import re
import shutil
import subprocess

import pytest
import torch

from conftest import REPO, program, run

HYBRID = program("hybrid.py")


def steps_done(output):
    return {int(t): int(n) for t, n in re.findall(r"trainer(\d+): (\d+) steps", output)}


def test_two_trainers_under_spawn(python, ports):
    rpc_port, ddp_port = ports(2)
    _, out = run([python, HYBRID, "--trainers", "2", "--epochs", "100",
                  "--rpc-port", str(rpc_port), "--ddp-port", str(ddp_port)])
    assert steps_done(out) == {0: 1000, 1: 1000}, out[-3000:]


@pytest.mark.parametrize("optimizer", ["sgd", "adagrad"])
def test_one_trainer_matches_pytorch_rpc(python, ports, tmp_path, optimizer):
    """Same seeds, same program: ember ends at PyTorch RPC's weights."""
    weights = {}
    for backend in ("ember", "torch"):
        rpc_port, ddp_port = ports(2)
        out_file = tmp_path / f"{backend}.pt"
        run([python, HYBRID, "--backend", backend, "--trainers", "1", "--epochs", "100",
             "--optimizer", optimizer, "--rpc-port", str(rpc_port), "--ddp-port", str(ddp_port),
             "--out", str(out_file)])
        weights[backend] = torch.load(out_file)
    for key in ("emb", "fc.weight", "fc.bias"):
        ours, theirs = weights["ember"][key], weights["torch"][key]
        assert ours.shape == theirs.shape
        diff = (ours - theirs).abs().max().item()
        assert diff <= 1e-5, f"{key}: {diff} from PyTorch RPC's"
    # The tables really trained: far from where PyTorch initialised them.
    assert weights["ember"]["emb"].abs().sum() > 0


def test_two_trainers_under_ember_run(python, ports, ember_run):
    rpc_port, ddp_port = ports(2)
    _, out = run([ember_run, "-n", "4", "--timeout", "150", python, HYBRID, "--trainers", "2",
                  "--epochs", "30", "--rpc-port", str(rpc_port), "--ddp-port", str(ddp_port)])
    assert steps_done(out) == {0: 300, 1: 300}, out[-3000:]


def test_spawn_under_a_launcher_needs_its_world(python, ports, ember_run):
    """Under ember-run the program's spawn runs this rank only: a world of
    another size is refused, naming both."""
    rpc_port, ddp_port = ports(2)
    code, out = run([ember_run, "-n", "3", "--timeout", "60", python, HYBRID, "--trainers", "2",
                     "--epochs", "1", "--rpc-port", str(rpc_port), "--ddp-port", str(ddp_port)],
                    check=False)
    assert code != 0
    assert "nprocs is 4 but the launcher started 3 ranks" in out, out[-3000:]


@pytest.fixture(scope="module")
def slurm_cluster(tmp_path_factory):
    """The private Slurm cluster of tests/slurm (munged, slurmctld, two
    slurmd on 127.0.0.1), started for these tests and stopped after."""
    if os.geteuid() != 0 or not shutil.which("srun") or not shutil.which("slurmctld"):
        pytest.skip("the local Slurm cluster needs root and slurm-wlm (scripts/setup.sh)")
    script = os.path.join(REPO, "tests", "slurm", "cluster.sh")
    cluster = tmp_path_factory.mktemp("slurm")
    lock = open("/tmp/ember-slurm.lock", "w")  # one private cluster on this host at a time
    fcntl.flock(lock, fcntl.LOCK_EX)
    try:
        subprocess.run(["bash", script, "start", str(cluster)], check=True, timeout=120,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        yield os.path.join(str(cluster), "slurm.conf")
    finally:
        subprocess.run(["bash", script, "stop", str(cluster)], timeout=120,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        fcntl.flock(lock, fcntl.LOCK_UN)
        lock.close()


def test_two_trainers_under_srun(python, ports, slurm_cluster, tmp_path):
    """srun starts the 4 ranks; the secret comes from a file every rank
    reads (EMBER_SECRET_FILE, as slurm/hybrid.sbatch makes one)."""
    rpc_port, ddp_port = ports(2)
    secret = tmp_path / "secret"
    secret.write_text(os.urandom(32).hex())
    secret.chmod(0o600)
    env = {"SLURM_CONF": slurm_cluster, "EMBER_SECRET_FILE": str(secret),
           "UCX_NET_DEVICES": "lo"}
    _, out = run(["srun", "-n", "4", "-K1", "--time=3", python, HYBRID, "--trainers", "2",
                  "--epochs", "30", "--rpc-port", str(rpc_port), "--ddp-port", str(ddp_port)],
                 env=env, timeout=170)
    assert steps_done(out) == {0: 300, 1: 300}, out[-3000:]


def test_with_a_plain_ember_ps(python, ports, ember_run):
    """The PS rank is ember-ps, a C program without Python: the tables are
    served all the same (the module is built on the master)."""
    rpc_port, ddp_port = ports(2)
    ember_ps = os.path.join(os.path.dirname(ember_run), "ember-ps")
    ranks = (f'if [ "$EMBER_RANK" = 3 ]; then exec {ember_ps}; fi; '
             f'exec {python} {HYBRID} --trainers 2 --epochs 30 '
             f'--rpc-port {rpc_port} --ddp-port {ddp_port}')
    _, out = run([ember_run, "-n", "4", "--timeout", "150", "sh", "-c", ranks])
    assert steps_done(out) == {0: 300, 1: 300}, out[-3000:]
    assert "ps: serving with" in out, out[-3000:]

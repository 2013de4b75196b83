"""A rank killed mid-run ends every other Python rank promptly, each with
an exception naming it: ranks started one by one, as a launcher would."""
import os
import signal
import subprocess
import time

import pytest

from conftest import program

HYBRID = program("hybrid.py")
NAMES = {0: "trainer0", 1: "trainer1", 2: "master", 3: "ps"}


def start_ranks(python, rpc_port, ddp_port, tmp_path):
    env = dict(os.environ, EMBER_WORLD_SIZE="4", EMBER_SECRET="ab" * 32)
    procs = {}
    for rank in range(4):
        log = open(tmp_path / f"rank{rank}.log", "w")
        procs[rank] = (subprocess.Popen(
            [python, HYBRID, "--trainers", "2", "--epochs", "100000", "--progress",
             "--rpc-port", str(rpc_port), "--ddp-port", str(ddp_port)],
            stdout=log, stderr=subprocess.STDOUT, env=dict(env, EMBER_RANK=str(rank))), log)
    return procs


def output(tmp_path, rank):
    return (tmp_path / f"rank{rank}.log").read_text()


@pytest.mark.parametrize("victim", [3, 1], ids=["ps", "trainer1"])
def test_a_killed_rank_ends_the_others_naming_it(python, ports, tmp_path, victim):
    rpc_port, ddp_port = ports(2)
    procs = start_ranks(python, rpc_port, ddp_port, tmp_path)
    try:
        deadline = time.time() + 90
        while "trainer1 epoch 2" not in output(tmp_path, 1):
            assert time.time() < deadline, output(tmp_path, 1)[-3000:]
            assert all(p.poll() is None for p, _ in procs.values()), "a rank ended early"
            time.sleep(0.1)
        procs[victim][0].send_signal(signal.SIGKILL)
        killed_at = time.time()
        for rank, (proc, _) in procs.items():
            if rank == victim:
                continue
            code = proc.wait(timeout=60)
            took = time.time() - killed_at
            text = output(tmp_path, rank)
            assert code != 0, f"{NAMES[rank]} exited 0 after {NAMES[victim]} was killed"
            assert f"{NAMES[victim]} (rank {victim}) was lost" in text, \
                f"{NAMES[rank]}'s output does not name {NAMES[victim]}:\n{text[-4000:]}"
            print(f"{NAMES[rank]} ended {took:.1f} s after {NAMES[victim]} was killed")
    finally:
        for proc, log in procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            log.close()

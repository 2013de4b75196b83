"""PyTorch RPC's calls on ember, and every refusal of the front end
(programs/rpc_checks.py runs them in a 3-rank job)."""
import re

from conftest import program, run

CHECKS = [
    "rpc_sync by name, rank and WorkerInfo",
    "a call to the PS runs there",
    "rpc_async, wait, then",
    "remote, RRef to_here/local_value/owner",
    "a remote exception comes back as itself",
    "a function the callee does not have",
    "an unknown worker, a func that is not callable",
    "RemoteModule refusals",
    "EmbeddingBag (sum, mean, max, weights, 2-D, last offset) and Embedding lookups equal "
    "PyTorch's",
    "a large weight comes from the PS in chunks",
    "DistributedOptimizer refusals",
    "a lookup on the master is refused",
    "bad tensors on a trainer, then a step",
]


def test_calls_and_refusals(python, ports):
    (port,) = ports(1)
    code, out = run([python, program("rpc_checks.py"), str(port)], timeout=120, check=False)
    passed = re.findall(r"^PASS (.*)$", out, re.M)
    failed = re.findall(r"^FAIL (.*)$", out, re.M)
    assert not failed, out[-6000:]
    assert passed == CHECKS, out[-6000:]
    assert "ALL PASSED" in out and code == 0, out[-6000:]

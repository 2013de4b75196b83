"""An outsider without the job secret, knowing a Python rank's worker
address, sends it pickles that would run a command: nothing runs, nothing
is answered, and the job goes on."""
import os
import pickle
import subprocess
import time

import pytest

from conftest import BUILD, program, run

OP_CALL, OP_INTENT = 512, 513


@pytest.fixture(scope="module")
def outsider():
    path = os.path.join(BUILD, "tests", "security", "outsider")
    if not os.access(path, os.X_OK):
        pytest.fail(f"no outsider at {path}: build the repository's tests")
    return path


def test_pickles_from_an_outsider_never_run(python, ports, tmp_path, outsider):
    (port,) = ports(1)
    marker = tmp_path / "the-outsider-ran-this"
    payload = tmp_path / "payload.pickle"
    payload.write_bytes(pickle.dumps(("call", os.system, (f"touch {marker}",), {})))
    job = subprocess.Popen([python, program("outsider_target.py"), str(tmp_path), str(port)],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.time() + 60
        while not all((tmp_path / f"{n}.addr").exists() for n in ("trainer0", "master")):
            assert job.poll() is None and time.time() < deadline, job.communicate()[0][-4000:]
            time.sleep(0.1)
        for name, rank in (("trainer0", 0), ("master", 1)):
            for op in (OP_CALL, OP_INTENT):
                code, out = run([outsider, "ucx-pickle", str(tmp_path), f"{name}.addr", str(rank),
                                 str(op), str(payload)], timeout=60, check=False)
                assert code == 0, f"{name}, op {op}: {out[-3000:]}"
                assert "0 of 20 requests" in out and "not answered" in out, out
        (tmp_path / "outsider.done").touch()
        out, _ = job.communicate(timeout=90)
    finally:
        if job.poll() is None:
            job.kill()
            job.wait()
    assert job.returncode == 0 and "JOB WENT ON" in out, out[-4000:]
    assert not marker.exists(), "the outsider's pickle ran"

"""Checkpoint and resume of the PyTorch DLRM over ember's collection
(ember.torch.checkpoint over the library's checkpoints, python/src/pyckpt.c):
a job cut after 5 of 10 steps (checkpoints every 2 steps and at its end),
resumed in new processes from the newest, ends with the weights of an
uninterrupted run; the tables (the PS's rows and Adagrad state) and the
dense weights and Adagrad state (the trainers' files) all count."""
import os

import numpy as np

from conftest import PYTHON, REPO, run_job, tool

import st_io  # tests/train

EXAMPLE = os.path.join(REPO, "examples", "dlrm_torch", "dlrm.py")
ROWS = "10,37,100,500,23,250,10,61,120,500,11,300,17,45,90,200,10,400,29,77,150,500,13,33,64,128"


def test_resume_equals_uninterrupted(tmp_path):
    import subprocess
    data = tmp_path / "data.tsv"
    subprocess.run([tool("ember-criteo-gen"), "--examples", "200", "--out", str(data), "--seed",
                    "13"], check=True, stdout=subprocess.DEVNULL)
    flags = ["--embedding-dim", "4", "--num-embeddings-per-feature", ROWS,
             "--dense-arch-layer-sizes", "8,4", "--over-arch-layer-sizes", "8,1",
             "--batch-size", "16", "--steps", "10", "--epochs", "2", "--optimizer", "adagrad",
             "--lr", "0.05", "--seed", "5", "--data", f"criteo:{data}"]
    job = [PYTHON, EXAMPLE, "--trainers", "2", "--ps", "1"] + flags
    full, half, resumed = (str(tmp_path / n) for n in ("full.st", "half.st", "resumed.st"))
    ck = str(tmp_path / "ck")
    run_job(3, job + ["--save", full])
    run_job(3, job + ["--checkpoint-dir", ck, "--checkpoint-every", "2", "--stop-after", "5",
                      "--save", half])
    steps = sorted(os.listdir(ck))
    assert steps[-1] == "step-000000000005" and os.path.exists(os.path.join(ck, steps[-1],
                                                                            "manifest")), steps
    run_job(3, job + ["--resume", ck, "--save", resumed])
    _, a = st_io.read(full)
    _, b = st_io.read(resumed)
    _, h = st_io.read(half)
    assert sorted(a) == sorted(b)
    assert any(k.startswith("sparse_arch.embedding_bag_collection.embedding_bags.t_cat_")
               for k in b)
    for k in a:
        assert np.allclose(a[k], b[k], rtol=0, atol=1e-6), (k, np.abs(a[k] - b[k]).max())
        # The resumed half trained: its end is not where the cut job ended.
        assert np.abs(b[k] - h[k]).max() > 1e-6, f"{k}: the resumed run did not move it"

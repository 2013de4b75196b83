"""ember.torch.EmbeddingBagCollection on a real job: programs/ebc_check.py
under ember-run (2 trainers + 1 PS), every check in that program."""
import os

from conftest import PROGRAMS, run_python_job


def test_ebc_collection():
    _, out = run_python_job(3, os.path.join(PROGRAMS, "ebc_check.py"), timeout=90)
    assert "trainer 0: ok" in out and "trainer 1: ok" in out, out[-3000:]

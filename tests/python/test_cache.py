"""The row cache through ember.torch (cache_rows=): programs/cache_check.py
under ember-run (2 trainers + 2 PS), every check in that program."""
import os

from conftest import PROGRAMS, run_python_job


def test_cache_collection():
    _, out = run_python_job(4, os.path.join(PROGRAMS, "cache_check.py"), timeout=120)
    assert "trainer 0: ok" in out and "trainer 1: ok" in out, out[-3000:]

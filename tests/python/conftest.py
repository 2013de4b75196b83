"""Fixtures of the Python package's tests: real processes, real ports.

EMBERPY_BUILD_DIR (scripts/pytest.sh sets it) is the build whose tools
(ember-run) the tests launch with; `ember` is the package pip installed
into the venv running pytest."""
import os
import socket
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
BUILD = os.environ.get("EMBERPY_BUILD_DIR", os.path.join(REPO, "build"))
PROGRAMS = os.path.join(HERE, "programs")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def program(name):
    return os.path.join(PROGRAMS, name)


def run(args, timeout=180, env=None, check=True):
    """Run @args to the end; (returncode, stdout + stderr)."""
    full_env = dict(os.environ)
    full_env.update(env or {})
    proc = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=timeout, env=full_env)
    if check and proc.returncode != 0:
        raise AssertionError(f"{' '.join(map(str, args))} exited {proc.returncode}:\n"
                             f"{proc.stdout[-6000:]}")
    return proc.returncode, proc.stdout


@pytest.fixture
def ports():
    return lambda n=1: [free_port() for _ in range(n)]


@pytest.fixture(scope="session")
def ember_run():
    path = os.path.join(BUILD, "tools", "ember-run")
    if not os.access(path, os.X_OK):
        pytest.fail(f"no ember-run at {path}: build the repository (EMBERPY_BUILD_DIR)")
    return path


@pytest.fixture(scope="session")
def python():
    return sys.executable

"""Fixtures and helpers of the Python package's tests: real processes, real
ports, jobs under ember-run.

EMBERPY_BUILD_DIR (scripts/pytest.sh sets it) is the build whose tools
(ember-run, ember-train, the outsider) the tests launch; `ember` is the
package pip installed into the venv running pytest (or, by hand,
PYTHONPATH=build/python), and the ranks run under this same Python."""
import os
import random
import socket
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
BUILD = os.environ.get("EMBERPY_BUILD_DIR", os.path.join(REPO, "build"))
PROGRAMS = os.path.join(HERE, "programs")
PYTHON = sys.executable


def _free(port):
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_ports(count=2):
    """The first of @count consecutive free TCP ports (a job's store and
    its gloo port after it), from EMBERPY_PORT_BASE..+999 (30000)."""
    base = int(os.environ.get("EMBERPY_PORT_BASE", "30000"))
    for _ in range(200):
        p = random.randrange(base, base + 1000 - count)
        if all(_free(p + i) for i in range(count)):
            return p
    raise RuntimeError("no free ports")


def program(name):
    return os.path.join(PROGRAMS, name)


def tool(name):
    path = os.path.join(BUILD, "tools", name)
    if not os.access(path, os.X_OK):
        pytest.fail(f"{path} missing: build ember first (EMBERPY_BUILD_DIR)")
    return path


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


def env_for(port):
    """A job's environment: its store at @port, loopback only, and the
    secret ember-run makes (none inherited)."""
    env = dict(os.environ)
    env["EMBER_INIT"] = f"tcp://127.0.0.1:{port}"
    env["UCX_NET_DEVICES"] = "lo"
    env["GLOO_SOCKET_IFNAME"] = "lo"
    env.pop("EMBER_SECRET", None)
    env.pop("EMBER_SECRET_FILE", None)
    return env


def run_job(n, argv, timeout=120, cwd=None, check=True):
    """argv under `ember-run -n N`: (returncode, output)."""
    port = free_ports(2)
    cmd = [tool("ember-run"), "-n", str(n), "--timeout", str(timeout)] + list(argv)
    proc = subprocess.run(cmd, env=env_for(port), cwd=cwd, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=timeout + 30)
    if check and proc.returncode != 0:
        pytest.fail(f"{' '.join(cmd)} exited {proc.returncode}:\n{proc.stdout[-6000:]}")
    return proc.returncode, proc.stdout


def run_python_job(n, script, args=(), **kw):
    return run_job(n, [PYTHON, script] + list(args), **kw)


@pytest.fixture
def ports():
    """@n distinct free ports: consecutive ones, each checked free (asking
    the kernel for port 0 twice may give the same port twice, its next
    pick once the first socket is closed)."""
    def take(n=1):
        first = free_ports(n)
        return list(range(first, first + n))
    return take


@pytest.fixture(scope="session")
def ember_run():
    return tool("ember-run")


@pytest.fixture(scope="session")
def python():
    return PYTHON


# The golden-run helpers of the C tests (tests/train), for the DLRM test.
sys.path.insert(0, os.path.join(REPO, "tests", "train"))

"""Shared helpers of the Python package's tests: the build, a port block of
this run's own, and jobs of real processes under ember-run."""
import os
import random
import socket
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.environ.get("EMBER_BUILD", os.path.join(REPO, "build"))
PYTHON = os.environ.get("EMBER_TEST_PYTHON", "/usr/bin/python3")
PROGRAMS = os.path.join(REPO, "tests", "python", "programs")


def _free(port):
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_ports(count=2):
    """@count consecutive free TCP ports (EMBER_PORT_BASE..+999, default
    30000-30999)."""
    base = int(os.environ.get("EMBER_PORT_BASE", "30000"))
    for _ in range(200):
        p = random.randrange(base, base + 1000 - count)
        if all(_free(p + i) for i in range(count)):
            return p
    raise RuntimeError("no free ports")


def tool(name):
    path = os.path.join(BUILD, "tools", name)
    if not os.access(path, os.X_OK):
        pytest.fail(f"{path} missing: build ember first (or set EMBER_BUILD)")
    return path


def env_for(port):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.path.join(BUILD, "python") + (
        os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
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


sys.path.insert(0, os.path.join(REPO, "tests", "train"))

"""The job secret, before libember reads its configuration.

Every rank of an ember job proves the job secret (HMAC) before any handler
of it runs, so nothing reaches a Python rank from a process without it.
Where it comes from:

- ember-run writes a fresh secret file and sets EMBER_SECRET_FILE for its
  ranks; slurm/hybrid.sbatch does the same on a shared directory;
- under srun or by hand, set EMBER_SECRET_FILE (a 0600 file) or EMBER_SECRET
  (hex) in the environment every rank inherits;
- otherwise the first `import ember` draws one and puts it in os.environ, so
  processes this one starts afterwards (torch.multiprocessing.spawn, as the
  PyTorch RPC tutorials do) inherit it.  A rank that drew its own secret
  and expects others refuses to join (`rpc.init_rpc` says so), since no
  other process can hold it.
"""
import os
import secrets

MADE_BY = "EMBERPY_SECRET_PID"


def ensure():
    if os.environ.get("EMBER_SECRET_FILE") or os.environ.get("EMBER_SECRET"):
        return
    os.environ["EMBER_SECRET"] = secrets.token_hex(32)
    os.environ[MADE_BY] = str(os.getpid())


def drawn_here():
    """True when this very process drew the secret (nobody else holds it)."""
    return os.environ.get(MADE_BY) == str(os.getpid()) and not os.environ.get("EMBER_SECRET_FILE")


ensure()

"""TensorPipeRpcBackendOptions, as torch.distributed.rpc has it."""
import os

DEFAULT_RPC_TIMEOUT_SEC = 60.0
DEFAULT_INIT_METHOD = "env://"


class TensorPipeRpcBackendOptions:
    """torch.distributed.rpc.TensorPipeRpcBackendOptions: what ember honours
    is init_method ("tcp://HOST:PORT": the rendezvous store, on rank 0;
    "env://": MASTER_ADDR and MASTER_PORT; either way a launcher's EMBER_INIT
    comes first) and rpc_timeout
    (seconds a call waits for its answer; 0 or less: ember's EMBER_RPC_TIMEOUT).
    num_worker_threads, device_maps and devices are accepted for
    compatibility: ember runs a rank's calls on its own thread, and moves
    only CPU tensors."""

    def __init__(self, *, num_worker_threads=16, rpc_timeout=DEFAULT_RPC_TIMEOUT_SEC,
                 init_method=DEFAULT_INIT_METHOD, device_maps=None, devices=None,
                 _transports=None, _channels=None):
        self.num_worker_threads = num_worker_threads
        self.rpc_timeout = rpc_timeout
        self.init_method = init_method
        self.device_maps = dict(device_maps or {})
        self.devices = list(devices or [])
        if self.device_maps or self.devices:
            raise ValueError("device_maps, devices: ember's Python calls move CPU tensors only")

    def set_device_map(self, to, device_map):
        raise ValueError("set_device_map: ember's Python calls move CPU tensors only")


def init_url(init_method):
    """The rendezvous URL ember joins through, from PyTorch's init_method.
    A launcher's EMBER_INIT (ember-run sets one) comes first, so every rank
    of the job, Python or not (ember-ps), meets at the launcher's store."""
    if os.environ.get("EMBER_INIT"):
        return None
    if init_method is None or init_method == "env://":
        if os.environ.get("EMBER_INIT"):
            return None  # ember's own (ember-run sets it)
        addr, port = os.environ.get("MASTER_ADDR"), os.environ.get("MASTER_PORT")
        if addr and port:
            return f"tcp://{addr}:{port}"
        return None  # under Slurm: the head node (ember's default)
    if not isinstance(init_method, str) or not init_method.startswith("tcp://"):
        raise ValueError(f"rpc_backend_options.init_method: {init_method!r}: ember joins through "
                         "tcp://HOST:PORT or env://")
    host_port = init_method[len("tcp://"):]
    host, _, port = host_port.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"rpc_backend_options.init_method: {init_method!r} is not tcp://HOST:PORT")
    if host == "localhost":
        host = "127.0.0.1"
    return f"tcp://{host}:{port}"

"""The process's RPC agent: one ember job per process, the Python calls it
carries, and the waiting that runs them.

Execution model: a rank runs the Python calls others make to it on its own
main thread, whenever that thread waits in ember (Future.wait, rpc_sync,
RRef.to_here, rpc.shutdown: the loop in `wait_until`), in the order they
came; a call may itself call other ranks and wait.  A parameter-server rank
serves from a thread of its own as soon as it joined (ember_ps_serve); the
calls made to it run on that thread, from inside the serving loop, and may
not call other ranks.  Payloads are pickles, and only ranks that proved the
job secret reach this code: ember's transport refuses everyone else before
any handler runs.
"""
import atexit
import pickle
import sys
import re
import threading
import traceback

from ember import _C, _secret

# The Python ops: a call carries a pickled (kind, ...) tuple; a shutdown
# intent (to the coordinator) carries nothing.
OP_CALL = _C.OP_APP_BASE
OP_INTENT = _C.OP_APP_BASE + 1
OP_COUNT = 2

# Seconds a wait sleeps in ember before looking at the queued requests.
_WAIT_SLICE = 0.05

_agent = None


def current(what="this call"):
    if _agent is None:
        raise RuntimeError(f"{what}: RPC is not initialised (call rpc.init_rpc first)")
    return _agent


def role_of(name):
    """ember's role for a rank named @name: PS for "ps", "ps1", "ps_..."
    and "parameter_server...", trainer for "trainer..." and "worker...",
    otherwise another rank (a coordinator such as "master")."""
    if re.fullmatch(r"ps(\d+|[_.-].*)?|parameter_?server.*", name):
        return "ps"
    if name.startswith("trainer") or name.startswith("worker"):
        return "trainer"
    return "other"


class WorkerInfo:
    """torch.distributed.rpc.WorkerInfo: a rank's name and id."""

    __slots__ = ("name", "id")

    def __init__(self, name, id):
        self.name, self.id = name, id

    def __eq__(self, other):
        return isinstance(other, WorkerInfo) and (self.name, self.id) == (other.name, other.id)

    def __hash__(self):
        return hash((self.name, self.id))

    def __repr__(self):
        return f"WorkerInfo(id={self.id}, name={self.name})"

    def __reduce__(self):
        return (WorkerInfo, (self.name, self.id))


class PeerLostError(RuntimeError):
    """Another rank of the job was lost (its process exited or went silent):
    the job cannot go on, and every wait of this rank says so."""


class RemoteError(Exception):
    """An exception raised by a remote function that could not travel as
    itself (it was not picklable)."""


def _encode_exception(exc, where):
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    try:
        blob = pickle.dumps(exc)
        pickle.loads(blob)
    except Exception:
        blob = None
    return pickle.dumps(("error", blob, type(exc).__name__, str(exc), f"On {where}:\n{text}"))


def _decode_error(payload):
    _, blob, type_name, message, remote_tb = payload
    exc = None
    if blob is not None:
        try:
            exc = pickle.loads(blob)
        except Exception:
            exc = None
    if exc is None:
        exc = RemoteError(f"{type_name}: {message}")
    exc.args = (f"{exc.args[0] if exc.args else message}\n{remote_tb}",) + tuple(exc.args[1:])
    return exc


class Future:
    """torch.futures.Future's interface for a call to another rank: wait(),
    value(), done(), then(), add_done_callback().  Waiting runs the calls
    others make to this rank meanwhile."""

    def __init__(self, agent, cfut, callee):
        self._agent, self._cfut, self._callee = agent, cfut, callee
        self._done, self._value, self._error = False, None, None
        self._callbacks = []
        self._parent = None  # then(): the future this one follows
        agent.outstanding.add(self)

    @classmethod
    def completed(cls, agent, value=None, error=None):
        f = cls.__new__(cls)
        f._agent, f._cfut, f._callee = agent, None, None
        f._done, f._value, f._error, f._callbacks = True, value, error, []
        f._parent = None
        return f

    def _finish(self):
        status, data = self._cfut.outcome()
        self._cfut = None
        self._agent.outstanding.discard(self)
        if status != "OK":
            name = self._agent.name_of(self._callee)
            lost = self._agent.job.peer_lost(self._callee) if not self._agent.job.left else None
            why = f"{name} was lost: {lost}" if lost else data.decode(errors="replace")
            self._error = RuntimeError(f"the call to {name} failed ({status}): {why}")
        else:
            try:
                payload = pickle.loads(data)
                if payload[0] == "error":
                    self._error = _decode_error(payload)
                else:
                    self._value = payload[1]
            except Exception as exc:  # a reply this rank cannot read
                self._error = exc
        self._done = True
        for cb in self._callbacks:
            cb(self)
        self._callbacks = []

    def _poll(self):
        if self._done:
            return True
        if self._cfut is None:  # then(): done when its parent's callback ran
            self._parent._poll()
        elif self._cfut.poll():
            self._finish()
        return self._done

    def done(self):
        return self._done or self._poll()

    def wait(self):
        if not self._done:
            self._agent.wait_until(self._poll)
        if self._error is not None:
            if not self._agent.job.left:
                self._agent.check_lost()  # a lost rank is the cause: name it
            raise self._error
        return self._value

    def value(self):
        return self.wait()

    def then(self, callback):
        result = Future.completed(self._agent)
        result._done, result._parent = False, self

        def run(fut):
            try:
                result._value = callback(fut)
            except Exception as exc:
                result._error = exc
            result._done = True
            for cb in result._callbacks:
                cb(result)

        self.add_done_callback(run)
        return result

    def add_done_callback(self, callback):
        if self._done:
            callback(self)
        else:
            self._callbacks.append(callback)

    def set_result(self, value):
        self._value, self._done = value, True


class Agent:
    def __init__(self, name, rank, world_size, init_url, role, timeout):
        if _secret.drawn_here() and world_size > 1:
            raise RuntimeError(
                "init_rpc: no job secret: this process drew its own, which no other rank "
                "holds. Start the ranks from one parent (torch.multiprocessing.spawn), "
                "under ember-run or slurm/hybrid.sbatch, or set EMBER_SECRET_FILE for every rank")
        self.timeout = timeout
        self.job = _C.join(trainers=_C.JOB_FROM_ROLES, num_ps=_C.JOB_FROM_ROLES, rank=rank, world_size=world_size, name=name,
                           role=role, init_url=init_url)
        self.rank, self.world_size, self.name = rank, world_size, name
        self.names = [self.job.name(r) for r in range(world_size)]
        self.ranks = {n: r for r, n in enumerate(self.names)}
        self.role = self.job.role(rank)[0]
        self.outstanding = set()
        self.owned = {}  # RRef values this rank owns, by id
        self.next_id = 0
        self.tables = {}  # table handles by name
        self.intents, self.intended = [], set()
        self.serve_thread, self.serve_error = None, None
        self.job.rpc_register(OP_CALL, OP_COUNT)
        if self.role == "ps":
            self.job.set_inline(self._inline)
            self.serve_thread = threading.Thread(target=self._serve, name="ember-ps", daemon=True)
            self.serve_thread.start()

    # ---- names ------------------------------------------------------------
    def name_of(self, rank):
        return self.names[rank] if 0 <= rank < self.world_size else f"rank {rank}"

    def rank_of(self, to, what):
        if isinstance(to, WorkerInfo):
            to = to.name
        if isinstance(to, int):
            if not 0 <= to < self.world_size:
                raise ValueError(f"{what}: rank {to} is outside the world of {self.world_size}")
            return to
        if not isinstance(to, str):
            raise TypeError(f"{what}: a worker name, rank or WorkerInfo, got {type(to).__name__}")
        if to not in self.ranks:
            raise ValueError(f"{what}: no rank is named {to!r} (the ranks: {', '.join(self.names)})")
        return self.ranks[to]

    def new_id(self):
        self.next_id += 1
        return (self.rank, self.next_id)

    # ---- calls ------------------------------------------------------------
    def call(self, to, message, timeout=None):
        rank = self.rank_of(to, "to")
        data = pickle.dumps(message)
        if rank == self.rank and self.role != "ps":
            return Future.completed(self, *self._local(data))
        t = self.timeout if timeout is None or timeout < 0 else timeout
        return Future(self, self.job.call_async(rank, OP_CALL, data, t), rank)

    def _local(self, data):
        """A call to this rank itself: run now (PyTorch runs it too)."""
        payload = pickle.loads(self._handle(self.rank, data))
        if payload[0] == "error":
            return None, _decode_error(payload)
        return payload[1], None

    # ---- running the calls others make ---------------------------------------
    def _handle(self, peer, data):
        """Run one request; its answer, pickled: ("ok", value) or an error."""
        try:
            kind, *rest = pickle.loads(data)
            if kind == "call":
                func, args, kwargs = rest
                return pickle.dumps(("ok", func(*args, **kwargs)))
            if kind == "remote":
                rref_id, func, args, kwargs = rest
                self.owned[rref_id] = func(*args, **kwargs)
                return pickle.dumps(("ok", None))
            if kind == "fetch":
                (rref_id,) = rest
                if rref_id not in self.owned:
                    raise LookupError(f"{self.name} owns no RRef {rref_id}")
                return pickle.dumps(("ok", self.owned[rref_id]))
            raise ValueError(f"{self.name}: unknown request kind {kind!r}")
        except BaseException as exc:  # everything goes back to the caller
            return _encode_exception(exc, f"{self.name} (called by {self.name_of(peer)})")

    def _inline(self, peer, op, data):
        if op != OP_CALL:
            return False, b"a PS takes no shutdown intents"
        return True, self._handle(peer, data)

    def run_requests(self):
        for req in self.job.take_requests():
            if req.op == OP_INTENT:
                self._intent(req)
                continue
            answer = self._handle(req.peer, req.data)
            if not req.oneway:
                req.reply(True, answer)

    def wait_until(self, ready):
        """Progress ember and run the calls others make until ready(); a
        rank lost meanwhile ends the wait (PeerLostError naming it)."""
        job = self.job
        while not ready():
            if job.wait(_WAIT_SLICE):
                self.run_requests()
            self.check_lost()

    def check_lost(self):
        # A rank that ended on a lost peer aborts with the cause before it
        # exits, so the abort arrives before its own loss is seen: the
        # cause names the rank that was lost first, not the ones that
        # ended on it.
        aborted = self.job.aborted
        lost = self.job.lost()
        if aborted or lost:
            text = aborted or self.lost_text(lost)
            # The ranks waiting on this one for shutdown learn it from here
            # (they may never have talked to the lost rank themselves).
            for req in self.intents:
                req.reply(False, text.encode())
            self.intents = []
            raise PeerLostError(text)

    def lost_text(self, lost):
        return "; ".join(f"{self.name_of(r)} (rank {r}) was lost: {why}" for r, why in lost)

    # ---- a PS serving --------------------------------------------------------
    def _serve(self):
        try:
            self.job.serve()
        except BaseException as exc:
            self.serve_error = exc

    # ---- shutdown ----------------------------------------------------------
    def _intent(self, req):
        """The coordinator: rank req.peer has nothing left of its own."""
        if self.rank != self.job.coordinator or self.job.role(req.peer)[0] == "ps":
            req.reply(False, f"{self.name} is not the coordinator".encode())
            return
        self.intents.append(req)
        self.intended.add(req.peer)
        self._maybe_proceed()

    def _clients(self):
        return [r for r in range(self.world_size) if self.job.role(r)[0] != "ps"]

    def _maybe_proceed(self):
        if set(self._clients()) <= self.intended:
            for req in self.intents:
                req.reply(True, pickle.dumps(("ok", None)))
            self.intents = []
            return True
        return False

    def drain(self):
        self.wait_until(lambda: all(f._poll() for f in list(self.outstanding)))

    def shutdown(self, graceful=True):
        global _agent
        try:
            if self.role == "ps":
                self.serve_thread.join()
                if self.serve_error is not None:
                    lost = self.job.lost_at_leave
                    if lost:
                        raise PeerLostError(f"{self.name}: {self.lost_text(lost)}") \
                            from self.serve_error
                    raise self.serve_error
                return
            if graceful:
                self.drain()
                coordinator = self.job.coordinator
                if self.rank == coordinator:
                    self.intended.add(self.rank)
                    self.wait_until(self._maybe_proceed)
                else:
                    # Answered once every other rank is done: however long
                    # they train (a lost coordinator still fails it at once).
                    cfut = self.job.call_async(coordinator, OP_INTENT, b"", 30 * 86400.0)
                    Future(self, cfut, coordinator).wait()
                self.drain()
            self.close_tables()
            self.job.leave(graceful)
        except BaseException as exc:
            if not self.job.left:
                self.fail(str(exc) if isinstance(exc, PeerLostError) else None)
            raise
        finally:
            _agent = None

    def fail(self, cause):
        """Leave as failed; with a @cause (a lost peer), abort with it
        first, so that the ranks that never talked to the lost one learn
        of it from here rather than of this rank's exit."""
        if cause and not self.job.aborted:
            self.job.abort(f"{self.name} ended: {cause}"[:250])
        else:
            self.job.leave(False)

    # ---- tables ------------------------------------------------------------
    def table(self, name):
        if name not in self.tables:
            self.tables[name] = self.job.table_open(name)
        return self.tables[name]

    def close_tables(self):
        from ember.torch.distributed.nn import remote_module
        remote_module.release_all(self)
        self.tables.clear()


def start(name, rank, world_size, init_url, role, timeout):
    global _agent
    if _agent is not None:
        raise RuntimeError(f"init_rpc: RPC is already initialised here as {_agent.name}")
    _agent = Agent(name, rank, world_size, init_url, role, timeout)
    atexit.register(_at_exit)
    return _agent


def _at_exit():
    """A rank that exits without rpc.shutdown (an exception ended it): the
    ranks waiting on it hear why, and of any rank it saw lost, before it
    leaves the job as failed."""
    agent = _agent
    if agent is None or agent.job.left or agent.role == "ps":
        return
    error = getattr(sys, "last_value", None)
    why = f"{type(error).__name__}: {error}".splitlines()[0] if error else "no rpc.shutdown"
    try:
        agent.job.wait(0.2)  # a rank lost just before is noticed now
        lost = agent.job.lost()
        text = f"{agent.name} exited ({why})"
        if lost:
            text += "; " + agent.lost_text(lost)
            print(f"ember: {text}", file=sys.stderr, flush=True)
        for req in agent.intents:
            req.reply(False, text.encode())
        agent.intents = []
        agent.fail(text if lost or isinstance(error, PeerLostError) else None)
    except Exception:
        pass

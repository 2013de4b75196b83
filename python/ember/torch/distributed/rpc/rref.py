"""RRef: a reference to a value owned by one rank (torch.distributed.rpc.RRef)."""
from ember.torch.distributed.rpc import agent as _agent_mod


def _rebuild(owner, owner_name, rref_id, type_name):
    r = RRef.__new__(RRef)
    r._owner, r._owner_name, r._id, r._type_name = owner, owner_name, rref_id, type_name
    r._created = None
    return r


class RRef:
    """RRef(value): a reference owned by this rank; rpc.remote returns one
    owned by the callee.  to_here() fetches a copy, local_value() is the
    owner's value, owner() its WorkerInfo.  An RRef passed in a call's
    arguments travels as a reference.  Values live on their owner until
    RPC shuts down (ember keeps no distributed reference counts)."""

    def __init__(self, value, type_hint=None):
        agent = _agent_mod.current("RRef")
        self._owner, self._owner_name = agent.rank, agent.name
        self._id = agent.new_id()
        self._type_name = type(value).__name__
        self._created = None
        agent.owned[self._id] = value

    @classmethod
    def _remote(cls, agent, owner, rref_id, type_name, created):
        r = _rebuild(owner, agent.name_of(owner), rref_id, type_name)
        r._created = created
        return r

    def owner(self):
        return _agent_mod.WorkerInfo(self._owner_name, self._owner)

    def owner_name(self):
        return self._owner_name

    def is_owner(self):
        return _agent_mod.current("RRef.is_owner").rank == self._owner

    def confirmed_by_owner(self):
        return self._created is None or self._created.done()

    def local_value(self):
        agent = _agent_mod.current("RRef.local_value")
        if agent.rank != self._owner:
            raise RuntimeError(f"RRef.local_value: the value is {self._owner_name}'s, this is "
                               f"{agent.name} (use to_here())")
        if self._created is not None:
            self._created.wait()
        return agent.owned[self._id]

    def to_here(self, timeout=None):
        agent = _agent_mod.current("RRef.to_here")
        if self._created is not None:
            self._created.wait()
        if agent.rank == self._owner:
            return agent.owned[self._id]
        return agent.call(self._owner, ("fetch", self._id), timeout).wait()

    def __reduce__(self):
        return (_rebuild, (self._owner, self._owner_name, self._id, self._type_name))

    def __repr__(self):
        return f"RRef({self._type_name} owned by {self._owner_name})"

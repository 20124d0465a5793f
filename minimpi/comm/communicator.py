"""The communicator classes: ``Comm``, ``Intracomm``, ``Topocomm`` (``Cartcomm``,
``Graphcomm``, ``Distgraphcomm``) and ``Intercomm``, as mpi4py has them.

A communicator is a group of world ranks, this process's rank in it, and two context ids
(one for point-to-point messages, one for collectives), so that messages never cross
communicators and a collective's messages never match a user's receive. The same classes
serve mpi4py code (``MPI.COMM_WORLD``) and native minimpi code.

The classes are thin. Each holds what a communicator *is* - its endpoint, plan, attributes,
error handler, handle and the argument checks every operation shares - and names its
operations, which live in plain modules by concern::

    pt2pt.py         send, recv, Sendrecv, probes, buffered, persistent, partitioned
    management.py    Dup, Split, Free, groups, error handlers, info, dynamic processes
    collectives/     the collective calls (arguments, buffers, the algorithm's run)
    persistent_coll  the persistent collectives (*_init)
    topology.py      Cartesian topologies;  graph.py: graph and distributed-graph ones
    ulfm.py          fault tolerance (Revoke, Agree, Shrink...)

Every public method reaches its operation through the API front (the metaclass
:class:`~minimpi.front.Fronted`): errors go to the communicator's error handler, calls are
published on the world's bus when someone listens. Lowercase methods move Python objects
(pickled), Capitalized ones move buffers (anything with the buffer protocol, or mpi4py
buffer specs such as ``[arr, MPI.DOUBLE]``).
"""
from __future__ import annotations

import copyreg
import operator
import os
import sys
import zlib
from typing import Any, Callable, List, Optional, Sequence, Tuple

from ..coll.mismatch import check_marker, watch_of
from ..coll.plan import Plan, Settings
from ..coll.registry import INTER, INTRA
from ..coll.slots import SEQ_MASK, create_group_tag
from ..constants import (
    ANY_SOURCE,
    ANY_TAG,
    CART,
    CONGRUENT,
    DIST_GRAPH,
    GRAPH,
    IDENT,
    PROC_NULL,
    SIMILAR,
    TAG_UB,
    UNDEFINED,
    UNEQUAL,
)
from ..data import serialization
from ..data.attributes import COMM_KEYVALS, Attributed, AttributeStore
from ..data.cint import as_int
from ..errors import USER_ERRORS, CommError, RankError, TagError
from ..front import Fronted
from ..handles import IntConversions, object_of, register
from ..p2p.endpoint import Endpoint
from ..p2p.engine import FIRST_FREE_CONTEXT, Engine
from ..p2p.request import Request
from ..transports.frames import F_OBJECT
from . import graph, intercomm, management, persistent_coll, pt2pt, ulfm
from . import topology as cartesian
from .collectives import (
    allgather_calls,
    allreduce_calls,
    alltoall_calls,
    barrier_calls,
    bcast_calls,
    gather_calls,
    inter_calls,
    neighbor_calls,
    reduce_calls,
    reduce_scatter_calls,
    scan_calls,
    scatter_calls,
)
from .collectives.common import note_slot
from .errhandlers import handle_error
from .graph import cart_neighbours
from .group import Group, GroupError, create_group, group_of
from .handle_types import ERRORS_RETURN, Errhandler, Info, refusing
from .management import dynamic_call
from .null import null_state, set_comm_null
from .topology import DimsError, TopologyError, keep_class
from .ulfm import check_not_revoked


def _check_int(comm: "Comm", value: Any, call: str, arg: str, expected: str,
               error: type = RankError) -> int:
    """A rank or tag as an int, read as mpi4py reads it (:func:`minimpi.data.cint.as_int`:
    numpy integers, and floats truncated, as ``send(dest=1.0)`` in mpi4py). Anything else
    (``send(dest='1')``) is an error that names the call, not a TypeError from deep inside
    the engine."""
    try:
        return as_int(value)
    except (TypeError, ValueError, OverflowError):
        raise error(f"rank {comm.rank}: {call}({arg}={value!r}): {arg} must be an integer "
                    f"({expected}), not {type(value).__name__}") from None


def _run_as_kind(name: str) -> Callable[..., Any]:
    """``Comm.<name>`` for a collective mpi4py's ``Comm`` class has: it runs as the
    ``Intracomm`` or ``Intercomm`` the handle is one of."""
    def collective_of_kind(self: "Comm", *args: Any, **kwargs: Any) -> Any:
        kind = self.__dict__.get("_intercomm_class") or Intracomm
        if isinstance(self, kind):      # that class lacks the call itself
            return refusing(name, f"{type(self).__name__}.{name}")()
        return getattr(kind(self), name)(*args, **kwargs)
    collective_of_kind.__name__ = collective_of_kind.__qualname__ = name
    collective_of_kind.__doc__ = (f"``{name}`` on this communicator, as the ``Intracomm`` or "
                                  f"``Intercomm`` it is.")
    return collective_of_kind


class Comm(Attributed, IntConversions, metaclass=Fronted):
    """A communicator (``MPI.Comm``): point-to-point communication and management.

    ``Comm(comm)`` / ``MPI.Intracomm(comm)`` / ``MySubclass(comm)`` make another Python object
    for the *same* communicator (as in mpi4py): the objects share their state, compare equal,
    and freeing one frees both. ``Comm()`` is a null communicator (equal to ``COMM_NULL``).
    """

    def __new__(cls, *args: Any, **kwargs: Any) -> "Comm":
        # mpi4py's subclassing idiom: ``def __new__(cls, comm=None): comm = comm.Clone();
        # return super().__new__(cls, comm)``. The handle is made from what reaches *here*:
        # Python then calls __init__ with the caller's original argument, which is ignored.
        self = super().__new__(cls)
        if len(args) == 1 and not kwargs and not isinstance(args[0], Engine):
            _share_handle(self, args[0])
        return self

    def __init__(self, engine: Any = None, group: Sequence[int] = (), rank: int = 0,
                 context: int = 0, name: str = "", settings: Optional[Settings] = None) -> None:
        if engine is None or not isinstance(engine, Engine):
            if not self.__dict__:           # (not already made by __new__)
                _share_handle(self, engine)
            return
        #: who we are to the p2p engine (shared with the collective algorithms' channels)
        self._ep = Endpoint(engine, group, rank, context, name or f"comm#{context}")
        self._freed = False
        self._attrs: dict = {}
        #: the collectives' settings: read from the environment for a world, inherited by a
        #: communicator made from another (``_derive``), changed by ``Set_info``
        self._settings = settings if settings is not None else Settings.from_environment()
        #: the collective plan (:mod:`minimpi.coll.plan`), made before the first collective
        #: call (when the ranks' hosts and wires are known) and kept: see :meth:`_make_plan`
        self._plan: Optional[Plan] = None

    def _make_plan(self) -> Plan:
        """This communicator's collective plan, made once (again only after ``Set_info``)."""
        # an intercommunicator's calls choose among the algorithms that serve two groups,
        # planned over its own group (its ``_ep`` addresses the remote one)
        local = self.__dict__.get("_local_endpoint")
        ep = self._ep if local is None else local
        plan = self._plan = Plan(ep.size, ep.rank, ep.hosts, self._settings,
                                 ep.wire_within_host(), INTRA if local is None else INTER)
        return plan

    # -- basic properties ---------------------------------------------------------------
    @property
    def rank(self) -> int:
        return self._ep.rank

    @property
    def size(self) -> int:
        return self._ep.size

    def Get_rank(self) -> int:
        return self._ep.rank

    def Get_size(self) -> int:
        return self._ep.size

    @property
    def name(self) -> str:
        """minimpi's label of the communicator (``COMM_WORLD.split(1)``...), used in every
        message about it; assigning it is ``Set_name``."""
        return self._ep.name

    @name.setter
    def name(self, value: str) -> None:
        self.Set_name(value)

    def Get_name(self) -> str:
        """The name as MPI reports it: what Set_name set, else ``MPI_COMM_WORLD``,
        ``MPI_COMM_SELF``, ``MPI_COMM_NULL`` or ``""`` (``.name`` is minimpi's label)."""
        return self.__dict__.get("_user_name", _MPI_NAMES.get(self._ep.name, ""))

    def Set_name(self, name: str) -> None:
        if not isinstance(name, str):
            raise TypeError(f"Set_name: expected a str, got {type(name).__name__}")
        self._alive("Set_name")
        self._ep.name = self._user_name = name

    @property
    def world_ranks(self) -> Tuple[int, ...]:
        """The world rank of each member, in communicator rank order."""
        return self._ep.group

    def _front_bus(self) -> Any:
        """The bus of this communicator's world (None for a null communicator)."""
        ep = self.__dict__.get("_ep")
        return ep.engine.bus if ep is not None else None

    @property
    def endpoint(self) -> Endpoint:
        """What the engine sees of this communicator (its group, rank and contexts): the
        seam that one-sided windows (minimpi.rma) send, receive and progress through."""
        return self._ep

    # A plain ``MPI.Comm(intercomm)`` handle is an intercommunicator too (its shared state
    # names the class, see _share_handle); Intercomm overrides these.
    def Is_inter(self) -> bool:
        self._alive("Is_inter")
        return "_intercomm_class" in self.__dict__

    def Is_intra(self) -> bool:
        return not self.Is_inter()

    @property
    def is_inter(self) -> bool:
        return self.Is_inter()

    @property
    def is_intra(self) -> bool:
        return not self.Is_inter()

    def __repr__(self) -> str:
        if self is COMM_NULL:
            return "MPI.COMM_NULL"
        if self.__dict__.get("_null"):
            return f"<{type(self).__name__} null (== MPI.COMM_NULL)>"
        return f"<{type(self).__name__} {self.name} rank {self.rank} of {self.size}>"

    # -- argument checks (each names rank, call, argument and what was expected) ---------
    def _alive(self, call: str) -> None:
        if self.__dict__.get("_null"):
            raise CommError(f"{call} on a null {type(self).__name__} (== MPI.COMM_NULL): "
                            f"expected a live communicator")
        if self._freed:
            raise CommError(f"rank {self._ep.engine.rank}: {call} on {self.name}, which was freed "
                            f"(Comm.Free); use a live communicator")

    # Each check returns the argument as an int (a float rank is truncated, as mpi4py's C
    # int arguments are), so callers go on with what the check returns.
    def _check_dest(self, dest: Any, call: str, arg: str = "dest") -> int:
        # the ranks a message can address: _ep.size (an intercommunicator's remote group)
        n = self._ep.size
        value = _check_int(self, dest, call, arg, f"0..{n - 1} or MPI.PROC_NULL")
        if not (0 <= value < n) and value != PROC_NULL:
            raise RankError(
                f"rank {self.rank}: {call}({arg}={dest!r}): invalid {arg} rank on {self.name}; "
                f"expected 0..{n - 1} or MPI.PROC_NULL")
        return value

    def _check_source(self, source: Any, call: str, arg: str = "source") -> int:
        n = self._ep.size
        value = _check_int(self, source, call, arg,
                           f"0..{n - 1}, MPI.ANY_SOURCE or MPI.PROC_NULL")
        if not (0 <= value < n) and value not in (ANY_SOURCE, PROC_NULL):
            raise RankError(
                f"rank {self.rank}: {call}({arg}={source!r}): invalid {arg} rank on {self.name}; "
                f"expected 0..{n - 1}, MPI.ANY_SOURCE or MPI.PROC_NULL")
        return value

    def _check_send_tag(self, tag: Any, call: str) -> int:
        value = _check_int(self, tag, call, "tag", f"0..{TAG_UB}", TagError)
        if not (0 <= value <= TAG_UB):
            raise TagError(f"rank {self.rank}: {call}(tag={tag!r}): invalid tag; expected "
                           f"0..{TAG_UB} (MPI.ANY_TAG is only for receives)")
        return value

    def _check_recv_tag(self, tag: Any, call: str) -> int:
        value = _check_int(self, tag, call, "tag", f"0..{TAG_UB} or MPI.ANY_TAG", TagError)
        if not (0 <= value <= TAG_UB) and value != ANY_TAG:
            raise TagError(f"rank {self.rank}: {call}(tag={tag!r}): invalid tag; expected "
                           f"0..{TAG_UB} or MPI.ANY_TAG")
        return value

    # -- the core operations all others use ----------------------------------------------
    # Each checks its arguments with one cheap test first (plain ints in range) and runs the
    # checks that name the problem (or accept numpy integers, or handle PROC_NULL) only when
    # that fails: a small message costs a few microseconds in all, so the checks must not
    # cost one of them.
    def _send_checks(self, dest: Any, tag: Any, call: str) -> Optional[Tuple[int, int]]:
        """(dest, tag) as ints, or None (the send goes nowhere) for PROC_NULL; raises for a
        bad argument."""
        self._alive(call)
        dest = self._check_dest(dest, call)
        tag = self._check_send_tag(tag, call)
        if dest == PROC_NULL:   # (other peers: the engine refuses a revoked context)
            check_not_revoked(self, call)
            return None
        return dest, tag

    def _recv_checks(self, source: Any, tag: Any, call: str) -> Optional[Tuple[int, int]]:
        """(source, tag) as ints, or None (nothing to receive) for PROC_NULL; raises for a
        bad argument."""
        self._alive(call)
        source = self._check_source(source, call)
        tag = self._check_recv_tag(tag, call)
        if source == PROC_NULL:
            check_not_revoked(self, call)
            return None
        return source, tag

    # -- communicator management ------------------------------------------------------------
    def _allocate_context(self) -> int:
        """Agree on a fresh context id with every member (an allreduce-max of the next free id).

        The id is unused on every member, so messages can never cross into another live
        communicator that shares a process with this one.
        """
        return self._agree_context(self._exchange(self._free_context(), "context"))

    def _free_context(self) -> int:
        """The lowest context id this process has not used yet (this thread's creation is in
        flight until :meth:`_agree_context`: see ``Engine.free_context``)."""
        return self._ep.engine.free_context(sys._getframe(1), self.name)

    def _agree_context(self, proposals: Sequence[int]) -> int:
        """Take the largest of the members' free context ids (so it is free on all of them)."""
        context = max(proposals)
        self._ep.engine.claim_contexts(context, 2)
        return context

    def _exchange(self, value: Any, what: str, members: Optional[Sequence[int]] = None,
                  tag: Optional[int] = None) -> List[Any]:
        """All-to-all exchange of one small object (for communicator creation).

        Among ``members`` (ranks of this communicator, default all; the first one leads) on
        the collective context, so it can never be confused with user messages: a linear
        gather to the leader and a release of the list of values (in ``members`` order).
        ``tag`` defaults to the next collective tag (then every member must call it).
        """
        if tag is None:   # a slot of the communicator's collective sequence
            seq = self._ep.next_coll_tag()
            tag = seq & SEQ_MASK
            low = watch_of(self._ep).register(seq, tag, 0, "exchange", what)
            note_slot(self, seq)
            check_marker(self._ep, low)
        members = list(range(self.size)) if members is None else list(members)
        ctx, call = self._ep.coll_context, f"{what} exchange"
        leader, others = members[0], members[1:]
        if not others:
            return [value]
        if self.rank == leader:
            reqs = [pt2pt.recv_object(self, src, tag, call, ctx) for src in others]
            values = [value] + [r.wait() for r in reqs]
            payload, nbytes = serialization.dumps(values)
            Request.waitall([self._ep.isend(payload, nbytes, dst, tag, F_OBJECT, call, ctx)
                             for dst in others])
            return values
        payload, nbytes = serialization.dumps(value)
        self._ep.isend(payload, nbytes, leader, tag, F_OBJECT, call, ctx).wait()
        return pt2pt.recv_object(self, leader, tag, call, ctx).wait()

    def _derive(self, group: Sequence[int], rank: int, context: int, name: str) -> "Intracomm":
        new = Intracomm(self._ep.engine, group, rank, context, name, settings=self._settings)
        if "__errhandler__" in self._attrs:   # MPI: a new communicator inherits the handler
            new._attrs["__errhandler__"] = self._attrs["__errhandler__"]
        return new

    def _derive_inter(self, local: Sequence[int], remote: Sequence[int], rank: int,
                      context: int, name: str) -> "Intercomm":
        """A new intercommunicator between the world ranks ``local`` (ours; ``rank`` is this
        process's rank in it) and ``remote``, on contexts ``context .. context + 3``."""
        return Intercomm._build(self._ep.engine, local, remote, rank, context, name)

    def _as_cart(self, dims: Sequence[int], periods: Sequence[bool]) -> "Cartcomm":
        """A Cartesian handle on this communicator's state (Create_cart, Cartcomm.Sub/Dup)."""
        cart = _topology_handle(Cartcomm, self)
        cart._dims = tuple(int(d) for d in dims)
        cart._periods = tuple(bool(p) for p in periods)
        if ".split" in self.name:
            cart._ep.name = self.name.replace(".split", ".cart", 1)
        return cart

    def _as_graph(self, index: Sequence[int], edges: Sequence[int]) -> "Graphcomm":
        """A graph handle on this communicator's state (Create_graph, Graphcomm.Dup)."""
        graph = _topology_handle(Graphcomm, self)
        graph._index = tuple(int(i) for i in index)
        graph._edges = tuple(int(e) for e in edges)
        if ".split" in self.name:
            graph._ep.name = self.name.replace(".split", ".graph", 1)
        return graph

    def _as_dist_graph(self, sources: Sequence[int], destinations: Sequence[int],
                       sourceweights: Optional[Sequence[int]],
                       destweights: Optional[Sequence[int]]) -> "Distgraphcomm":
        """A distributed-graph handle on this communicator's state (weights None:
        unweighted)."""
        graph = _topology_handle(Distgraphcomm, self)
        graph._sources = tuple(int(r) for r in sources)
        graph._destinations = tuple(int(r) for r in destinations)
        graph._sourceweights = None if sourceweights is None else tuple(sourceweights)
        graph._destweights = None if destweights is None else tuple(destweights)
        return graph

    def free(self) -> None:
        """``Free`` unless this is a null or predefined communicator (mpi4py 4): the
        constants stay as they are; another handle on ``COMM_WORLD``/``COMM_SELF``
        (``Intracomm(MPI.COMM_WORLD)``) becomes a null handle, the communicator stays."""
        if not self or any(self is comm for comm in _PREDEFINED.values()):
            return
        if self._ep.context < FIRST_FREE_CONTEXT:
            self.__dict__ = null_state()        # this handle only
            return
        self.Free()

    def _inherit_into(self, new: "Comm") -> None:
        """What a duplicate takes from this communicator: its error handler, and the user
        attributes whose keyval's copy_fn says so."""
        if "__errhandler__" in self._attrs:
            new._attrs["__errhandler__"] = self._attrs["__errhandler__"]
        store = self.__dict__.get("_user_attrs")
        if store:
            store.copy_into(self, new._attribute_store("Dup"))

    def _release_attributes(self) -> None:
        """Delete the user attributes (their delete_fn run) before the communicator goes."""
        store = self.__dict__.get("_user_attrs")
        if store:
            store.clear(self)

    def Compare(self, other: "Comm") -> int:
        """``IDENT`` (same communicator), ``CONGRUENT`` (same ranks in the same order), ``SIMILAR`` (same ranks) or ``UNEQUAL``."""
        for comm in (self, other):
            if not isinstance(comm, Comm) or comm.__dict__.get("_null"):
                raise CommError(f"Compare({self!r}, {other!r}): expected two communicators, "
                                f"not MPI.COMM_NULL or a non-communicator")
        if other is self or (isinstance(other, Comm) and vars(other) is vars(self)):
            return IDENT
        if isinstance(other, Comm) and other.Is_inter() != self.Is_inter():
            return UNEQUAL
        if isinstance(other, Comm) and other._ep.group == self._ep.group:
            return CONGRUENT
        if isinstance(other, Comm) and sorted(other._ep.group) == sorted(self._ep.group):
            return SIMILAR
        return UNEQUAL

    @classmethod
    def Get_parent(cls) -> "Intercomm":
        """The intercommunicator to the processes that spawned this one (``Spawn``); a
        null ``Intercomm``, equal to ``MPI.COMM_NULL``, in a process that was not spawned
        or after ``Disconnect``."""
        get_parent = dynamic_call("get_parent")
        if get_parent is not None:
            return get_parent()
        return Intercomm()

    def Abort(self, errorcode: int = 1) -> None:
        """End the whole job at once with exit code ``errorcode`` (never returns)."""
        self._ep.engine.abort_job(int(errorcode),
                                  f"rank {self.rank} called Abort({errorcode}) on {self.name}")

    # -- attributes ---------------------------------------------------------------------------
    _keyvals = COMM_KEYVALS

    def _attribute_store(self, call: str) -> AttributeStore:
        self._alive(call)
        store = self.__dict__.get("_user_attrs")
        if store is None:
            store = self.__dict__.setdefault("_user_attrs", AttributeStore())
        return store

    def _predefined_attr(self, keyval: int) -> Tuple[bool, Any]:
        """Predefined keyvals (``MPI.TAG_UB``, ``MPI.HOST``...) answered as MPICH does."""
        self._alive("Get_attr")
        if keyval == KEYVAL_TAG_UB:
            return True, TAG_UB
        if keyval in _PREDEFINED_ATTRS:
            return True, _PREDEFINED_ATTRS[keyval](self)
        return False, None

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Comm):
            return vars(self) is vars(other) or (not self and not other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]   (handles are unhashable, as mpi4py's)

    def __reduce__(self):
        """mpi4py's rule: ``COMM_WORLD``/``COMM_SELF`` (and null handles) pickle by name and
        unpickle to this process's own; any other communicator is a ValueError - its state
        (contexts, connections) means nothing in another process."""
        if self is COMM_NULL:
            return "COMM_NULL"              # this module's global: the same object back
        if self.__dict__.get("_null"):
            return (copyreg.__newobj__, (type(self), COMM_NULL))
        for name, comm in _PREDEFINED.items():
            if comm is self:
                return (_predefined, (name,))
            if comm is not None and vars(comm) is vars(self):
                return (_predefined_handle, (name, type(self)))
        raise ValueError(f"cannot serialize {self!r}: only MPI.COMM_WORLD, MPI.COMM_SELF and "
                         f"MPI.COMM_NULL can be pickled (their name is what travels)")

    # -- handles (mpi4py's handle / fromhandle / toint / fromint / py2f / f2py) -------------
    @property
    def handle(self) -> int:
        """An integer naming this communicator in this process (0 for a null handle); give
        it to ``fromhandle`` for another handle on the same communicator."""
        if self.__dict__.get("_null"):
            return 0
        h = self.__dict__.get("_handle")
        if h is None:
            h = self.__dict__["_handle"] = register(self)
        return h

    @classmethod
    def fromhandle(cls, handle: int) -> "Comm":
        """A handle of this class on the communicator ``handle`` names (0: a null one)."""
        handle = operator.index(handle)
        if handle == 0:
            return cls()
        comm = object_of(handle)
        if not isinstance(comm, Comm):
            raise ValueError(f"MPI.{cls.__name__}.fromhandle({handle}): no live communicator "
                             f"has this handle in this process")
        if cls is Comm and (comm.Is_inter() or isinstance(comm, Topocomm)):   # keeps the kind
            cls = type(comm)
        return cls(comm)

    def __bool__(self) -> bool:  # mpi4py: False for COMM_NULL and after Free
        return not (self.__dict__.get("_null") or self.__dict__.get("_freed"))

    # -- error handler, info (the state; the calls are in management.py) -------------------
    def _current_errhandler(self) -> Errhandler:
        return self._attrs.get("__errhandler__", ERRORS_RETURN)

    _handle_error = handle_error     # what the API front does with an error (minimpi.front)

    def _abort_on_error(self, code: int) -> None:
        self._ep.engine.abort_job(code, f"rank {self.rank}: an error on {self.name} with "
                                        f"a fatal error handler")

    @property
    def info(self) -> Info:
        """The communicator's hints (a copy); assigning it is ``Set_info``."""
        return self.Get_info()

    @info.setter
    def info(self, info: Info) -> None:
        self.Set_info(info)

    @property
    def group(self) -> Any:
        return self.Get_group()

    @property
    def topology(self) -> int:
        return self.Get_topology()

    @property
    def is_topo(self) -> bool:
        """Whether this communicator has a process topology."""
        return self.Get_topology() != UNDEFINED

    # -- point-to-point (pt2pt.py) ---------------------------------------------------------
    send, ssend, rsend, bsend = pt2pt.send, pt2pt.ssend, pt2pt.rsend, pt2pt.bsend
    isend, issend, ibsend = pt2pt.isend, pt2pt.issend, pt2pt.ibsend
    recv, irecv, sendrecv = pt2pt.recv, pt2pt.irecv, pt2pt.sendrecv
    probe, iprobe, mprobe, improbe = pt2pt.probe, pt2pt.iprobe, pt2pt.mprobe, pt2pt.improbe
    Send, Ssend, Rsend, Bsend = pt2pt.Send, pt2pt.Ssend, pt2pt.Rsend, pt2pt.Bsend
    Isend, Issend, Irsend, Ibsend = pt2pt.Isend, pt2pt.Issend, pt2pt.Irsend, pt2pt.Ibsend
    Recv, Irecv = pt2pt.Recv, pt2pt.Irecv
    Sendrecv, Isendrecv = pt2pt.Sendrecv, pt2pt.Isendrecv
    Sendrecv_replace, Isendrecv_replace = pt2pt.Sendrecv_replace, pt2pt.Isendrecv_replace
    Probe, Iprobe, Mprobe, Improbe = pt2pt.Probe, pt2pt.Iprobe, pt2pt.Mprobe, pt2pt.Improbe
    Send_init, Ssend_init, Bsend_init = pt2pt.Send_init, pt2pt.Ssend_init, pt2pt.Bsend_init
    Rsend_init, Recv_init = pt2pt.Rsend_init, pt2pt.Recv_init
    Psend_init, Precv_init = pt2pt.Psend_init, pt2pt.Precv_init
    Attach_buffer, Detach_buffer = pt2pt.Attach_buffer, pt2pt.Detach_buffer
    Flush_buffer, Iflush_buffer = pt2pt.Flush_buffer, pt2pt.Iflush_buffer

    # -- management (management.py) --------------------------------------------------------
    Dup, Idup, Idup_with_info = management.Dup, management.Idup, management.Idup_with_info
    Clone, Dup_with_info = management.Dup, management.Dup_with_info
    Split, Split_type, Free = management.Split, management.Split_type, management.Free
    Get_group, Create, Create_group = management.Get_group, management.Create, management.Create_group
    Create_errhandler = classmethod(management.Create_errhandler)
    Set_errhandler, Get_errhandler = management.Set_errhandler, management.Get_errhandler
    Call_errhandler = management.Call_errhandler
    Set_info, Get_info, Get_topology = management.Set_info, management.Get_info, management.Get_topology
    Spawn, Spawn_multiple = management.Spawn, management.Spawn_multiple
    Accept, Connect, Disconnect = management.Accept, management.Connect, management.Disconnect
    Join = classmethod(management.Join)
    Get_remote_group, Get_remote_size = management.Get_remote_group, management.Get_remote_size
    Create_intercomm = refusing("Intercomm", "Intracomm.Create_intercomm")

    # -- topologies (topology.py, graph.py) -----------------------------------------------
    Create_cart, Cart_map = cartesian.Create_cart, graph.Cart_map
    Create_graph, Graph_map = graph.Create_graph, graph.Graph_map
    Create_dist_graph, Create_dist_graph_adjacent = (graph.Create_dist_graph,
                                                     graph.Create_dist_graph_adjacent)

    # -- fault tolerance (ulfm.py) ---------------------------------------------------------
    Revoke, Is_revoked, Get_failed = ulfm.revoke, ulfm.is_revoked, ulfm.get_failed
    Ack_failed, Agree, Iagree = ulfm.ack_failed, ulfm.agree, ulfm.iagree
    Shrink, Ishrink = ulfm.shrink, ulfm.ishrink

    # -- the collectives of every communicator, run as the kind it is (a plain Comm handle
    #    on an intercommunicator runs them as one); Intracomm and Intercomm define their own
    Barrier, Ibarrier, barrier = (_run_as_kind("Barrier"), _run_as_kind("Ibarrier"),
                                  _run_as_kind("barrier"))
    Bcast, Ibcast, bcast = _run_as_kind("Bcast"), _run_as_kind("Ibcast"), _run_as_kind("bcast")
    Gather, Igather, gather = (_run_as_kind("Gather"), _run_as_kind("Igather"),
                               _run_as_kind("gather"))
    Gatherv, Igatherv = _run_as_kind("Gatherv"), _run_as_kind("Igatherv")
    Scatter, Iscatter, scatter = (_run_as_kind("Scatter"), _run_as_kind("Iscatter"),
                                  _run_as_kind("scatter"))
    Scatterv, Iscatterv = _run_as_kind("Scatterv"), _run_as_kind("Iscatterv")
    Allgather, Iallgather, allgather = (_run_as_kind("Allgather"), _run_as_kind("Iallgather"),
                                        _run_as_kind("allgather"))
    Allgatherv, Iallgatherv = _run_as_kind("Allgatherv"), _run_as_kind("Iallgatherv")
    Alltoall, Ialltoall, alltoall = (_run_as_kind("Alltoall"), _run_as_kind("Ialltoall"),
                                     _run_as_kind("alltoall"))
    Alltoallv, Ialltoallv = _run_as_kind("Alltoallv"), _run_as_kind("Ialltoallv")
    Alltoallw, Ialltoallw = _run_as_kind("Alltoallw"), _run_as_kind("Ialltoallw")
    Reduce, Ireduce, reduce = (_run_as_kind("Reduce"), _run_as_kind("Ireduce"),
                               _run_as_kind("reduce"))
    Allreduce, Iallreduce, allreduce = (_run_as_kind("Allreduce"), _run_as_kind("Iallreduce"),
                                        _run_as_kind("allreduce"))
    Reduce_scatter_block = _run_as_kind("Reduce_scatter_block")
    Ireduce_scatter_block = _run_as_kind("Ireduce_scatter_block")
    Reduce_scatter, Ireduce_scatter = (_run_as_kind("Reduce_scatter"),
                                       _run_as_kind("Ireduce_scatter"))

    # -- persistent collectives (persistent_coll.py): prepared and compiled at *_init
    Barrier_init, Bcast_init = persistent_coll.Barrier_init, persistent_coll.Bcast_init
    Gather_init, Gatherv_init = persistent_coll.Gather_init, persistent_coll.Gatherv_init
    Scatter_init, Scatterv_init = persistent_coll.Scatter_init, persistent_coll.Scatterv_init
    Allgather_init = persistent_coll.Allgather_init
    Allgatherv_init = persistent_coll.Allgatherv_init
    Alltoall_init, Alltoallv_init = persistent_coll.Alltoall_init, persistent_coll.Alltoallv_init
    Alltoallw_init = persistent_coll.Alltoallw_init
    Reduce_init, Allreduce_init = persistent_coll.Reduce_init, persistent_coll.Allreduce_init
    Reduce_scatter_block_init = persistent_coll.Reduce_scatter_block_init
    Reduce_scatter_init = persistent_coll.Reduce_scatter_init


KEYVAL_TAG_UB = 1
_MPI_NAMES = {"COMM_WORLD": "MPI_COMM_WORLD", "COMM_SELF": "MPI_COMM_SELF",
              "COMM_NULL": "MPI_COMM_NULL"}
# Other predefined attribute keyvals (MPI.HOST, MPI.IO, ...), answered as MPICH does.
KEYVAL_HOST, KEYVAL_IO, KEYVAL_WTIME_IS_GLOBAL, KEYVAL_UNIVERSE_SIZE, KEYVAL_APPNUM, \
    KEYVAL_LASTUSEDCODE = 2, 3, 4, 5, 6, 7
_PREDEFINED_ATTRS = {
    KEYVAL_HOST: lambda comm: PROC_NULL,
    KEYVAL_IO: lambda comm: comm.rank,
    KEYVAL_WTIME_IS_GLOBAL: lambda comm: False,
    KEYVAL_UNIVERSE_SIZE: lambda comm: comm._ep.engine.universe_size,
    KEYVAL_APPNUM: lambda comm: _appnum(),
    KEYVAL_LASTUSEDCODE: lambda comm: USER_ERRORS.last_used,
}


#: set for each rank by its start script (minimpi/_start/minimpi_rank.py): the index of its
#: program in an MPMD job (``minimpi run a.py : b.py``) or of its command in Spawn_multiple
ENV_APPNUM = "MINIMPI_APPNUM"


def _appnum() -> int:
    """``MPI.APPNUM``: read when asked, not at import (a rank forked from the fork server's
    template imported this module before it knew its program)."""
    try:
        return int(os.environ.get(ENV_APPNUM) or 0)
    except ValueError:
        return 0


def _share_handle(target: "Comm", source: Any) -> None:
    """Make ``target`` another object for the communicator ``source`` (None: COMM_NULL)."""
    if isinstance(source, Comm) and source.__dict__.get("_null"):
        target.__dict__ = null_state()      # a null handle of its own (nothing to share)
    elif isinstance(source, Comm) and not (isinstance(target, Intercomm)
                                         and not _is_inter(source) and source) \
            and not (isinstance(target, Intracomm) and _is_inter(source)):
        if isinstance(source, Intercomm):   # what a plain Comm handle on it runs as
            source.__dict__.setdefault("_intercomm_class", type(source))
        target.__dict__ = source.__dict__
    elif source is None:
        target.__dict__ = null_state()
    else:
        raise TypeError(f"MPI.{type(target).__name__}({source!r:.60}): expected a "
                        f"communicator (e.g. MPI.COMM_WORLD) or nothing")


def _is_inter(comm: "Comm") -> bool:
    """Whether ``comm`` (live or freed) is an intercommunicator (an ``Intercomm``, or a plain
    ``Comm`` handle on one)."""
    return isinstance(comm, Intercomm) or "_intercomm_class" in comm.__dict__


#: handle number -> communicator, for ``Comm.fromhandle`` (filled when ``.handle`` is read)

#: this process's COMM_WORLD and COMM_SELF (set by the runtime), what pickles by name
_PREDEFINED: dict = {"COMM_WORLD": None, "COMM_SELF": None}


#: ``MPI.COMM_NULL``: a null ``Comm`` (mpi4py's null handles are instances of their class);
#: it pickles by name to this very object (see ``Comm.__reduce__``)
COMM_NULL = Comm()
set_comm_null(COMM_NULL)


def set_predefined(world: "Comm", self_comm: "Comm") -> None:
    """Record the process's predefined communicators (the runtime calls this once)."""
    _PREDEFINED["COMM_WORLD"], _PREDEFINED["COMM_SELF"] = world, self_comm


def _predefined(name: str) -> "Comm":
    comm = _PREDEFINED.get(name)
    if comm is None:
        raise ValueError(f"cannot unpickle MPI.{name}: this process has no MPI world yet")
    return comm


def _predefined_handle(name: str, cls: type) -> "Comm":
    return cls(_predefined(name))


class Intracomm(Comm):
    """An intra-communicator: point-to-point plus every collective (``MPI.Intracomm``)."""

    # -- the collectives (collectives/): arguments, buffers, the algorithm's schedule -------
    Barrier, Ibarrier = barrier_calls.Barrier, barrier_calls.Ibarrier
    barrier, ibarrier = barrier_calls.barrier, barrier_calls.ibarrier
    Bcast, Ibcast, bcast, ibcast = bcast_calls.Bcast, bcast_calls.Ibcast, bcast_calls.bcast, bcast_calls.ibcast
    Gather, Igather, Gatherv, Igatherv = gather_calls.Gather, gather_calls.Igather, gather_calls.Gatherv, gather_calls.Igatherv
    gather, igather = gather_calls.gather, gather_calls.igather
    Scatter, Iscatter = scatter_calls.Scatter, scatter_calls.Iscatter
    Scatterv, Iscatterv = scatter_calls.Scatterv, scatter_calls.Iscatterv
    scatter, iscatter = scatter_calls.scatter, scatter_calls.iscatter
    Allgather, Iallgather = allgather_calls.Allgather, allgather_calls.Iallgather
    Allgatherv, Iallgatherv = allgather_calls.Allgatherv, allgather_calls.Iallgatherv
    allgather = allgather_calls.allgather
    Alltoall, Ialltoall = alltoall_calls.Alltoall, alltoall_calls.Ialltoall
    Alltoallv, Ialltoallv = alltoall_calls.Alltoallv, alltoall_calls.Ialltoallv
    Alltoallw, Ialltoallw = alltoall_calls.Alltoallw, alltoall_calls.Ialltoallw
    alltoall = alltoall_calls.alltoall
    Reduce, Ireduce, reduce, ireduce = reduce_calls.Reduce, reduce_calls.Ireduce, reduce_calls.reduce, reduce_calls.ireduce
    Allreduce, Iallreduce = allreduce_calls.Allreduce, allreduce_calls.Iallreduce
    allreduce = allreduce_calls.allreduce
    Reduce_scatter, Ireduce_scatter = reduce_scatter_calls.Reduce_scatter, reduce_scatter_calls.Ireduce_scatter
    Reduce_scatter_block = reduce_scatter_calls.Reduce_scatter_block
    Ireduce_scatter_block = reduce_scatter_calls.Ireduce_scatter_block
    Scan, Iscan, scan, iscan = scan_calls.Scan, scan_calls.Iscan, scan_calls.scan, scan_calls.iscan
    Exscan, Iexscan, exscan, iexscan = scan_calls.Exscan, scan_calls.Iexscan, scan_calls.exscan, scan_calls.iexscan
    Scan_init, Exscan_init = persistent_coll.Scan_init, persistent_coll.Exscan_init

    Create_intercomm = intercomm.create_intercomm

    @classmethod
    def Create_from_group(cls, group: Any, stringtag: str = "org.mpi4py", info: Any = None,
                          errhandler: Any = None) -> "Intracomm":
        """A communicator of ``group``'s members, made without a parent communicator (MPI
        4): collective over the group's members, who pass the same ``stringtag``."""
        if not isinstance(stringtag, str):
            raise TypeError(f"Create_from_group: stringtag must be a str, got "
                            f"{type(stringtag).__name__}")
        group._check("Create_from_group")
        engine = group._engine
        if engine is None:
            raise GroupError("Intracomm.Create_from_group: the group was not made from a "
                             "communicator of this process (Comm.Get_group and the Group "
                             "operations on its result)")
        world = Intracomm(engine, range(engine.size), engine.rank, 0, "COMM_WORLD")
        comm = create_group(world, group, zlib.crc32(stringtag.encode()) & 0x3FFFFFFF)
        if comm:
            comm._ep.name = f"group({stringtag})"
        if comm and info:
            comm.Set_info(info)
        if comm and cls is not Intracomm:
            same = object.__new__(cls)
            same.__dict__ = comm.__dict__
            comm = same
        return comm


class Intercomm(Comm):
    """``MPI.Intercomm``: point-to-point and collectives between two disjoint groups.

    ``Get_rank``/``Get_size``/``Get_group`` describe the local group, ``Get_remote_size``/
    ``Get_remote_group`` the other one; ranks given to ``Send``/``Recv`` (and collective
    roots) are ranks of the remote group. ``MPI.Intercomm()`` is a null handle.
    """

    @classmethod
    def _build(cls, engine: Any, local: Sequence[int], remote: Sequence[int], rank: int,
               context: int, name: str) -> "Intercomm":
        comm = cls(engine, remote, rank, context, name)
        comm._local_endpoint = Endpoint(engine, local, rank, context + 2, f"{name}(local group)")
        return comm

    # -- the two groups -----------------------------------------------------------------
    @property
    def size(self) -> int:
        return self.Get_size()

    def Get_size(self) -> int:
        """The size of the local group (0 for a null handle)."""
        return self.__dict__.get("_local_endpoint", self._ep).size

    @property
    def remote_size(self) -> int:
        return self._ep.size

    def Get_remote_size(self) -> int:
        """The size of the remote group."""
        self._alive("Get_remote_size")
        return self._ep.size

    def Get_group(self) -> Group:
        """The local group."""
        self._alive("Get_group")
        return group_of(self._local_endpoint.group, self._local_endpoint.group[self.rank], self._ep.engine)

    def Get_remote_group(self) -> Group:
        """The remote group (this process is not a member)."""
        self._alive("Get_remote_group")
        return group_of(self._ep.group, None, self._ep.engine)

    @property
    def group(self) -> Group:
        return self.Get_group()

    @property
    def remote_group(self) -> Group:
        return self.Get_remote_group()

    def __repr__(self) -> str:
        if self.__dict__.get("_null"):
            return "<Intercomm null (== MPI.COMM_NULL)>"
        return (f"<Intercomm {self.name} rank {self.rank} of {self.size}, remote group of "
                f"{self.remote_size}>")

    def Compare(self, other: Comm) -> int:
        """``IDENT`` (same communicator), ``CONGRUENT`` (both groups equal, in order),
        ``SIMILAR`` (both groups hold the same processes) or ``UNEQUAL`` (an
        intracommunicator is always UNEQUAL)."""
        if other is self or (isinstance(other, Comm) and vars(other) is vars(self)):
            return IDENT
        if not isinstance(other, Intercomm) or not other or not self:
            return UNEQUAL
        mine, theirs = (self._local_endpoint.group, self._ep.group), (other._local_endpoint.group, other._ep.group)
        if mine == theirs:
            return CONGRUENT
        if all(sorted(a) == sorted(b) for a, b in zip(mine, theirs)):
            return SIMILAR
        return UNEQUAL

    # -- agreement over the intercommunicator ----------------------------------------------
    def _agree(self, value: Any, what: str) -> Tuple[List[Any], List[Any]]:
        """Every member's ``value``, of both groups (a collective of both groups)."""
        return inter_calls.agree(self, value, what)

    def _derived(self, local: Sequence[int], remote: Sequence[int], rank: int, context: int,
                 name: str) -> "Intercomm":
        comm = Intercomm._build(self._ep.engine, local, remote, rank, context, name)
        cls = type(self)
        if cls is not Intercomm:     # a user subclass keeps its type (as Intracomm.Dup)
            same = object.__new__(cls)
            same.__dict__ = comm.__dict__
            comm = same
        return comm

    @classmethod
    def Create_from_groups(cls, local_group: Group, local_leader: int, remote_group: Group,
                           remote_leader: int, stringtag: str = "org.mpi4py", info: Any = None,
                           errhandler: Any = None) -> "Intercomm":
        """An intercommunicator from two disjoint groups, without a parent communicator
        (MPI 4): collective over both groups' members, who pass the same ``stringtag``."""
        if not isinstance(stringtag, str):
            raise TypeError(f"Intercomm.Create_from_groups: stringtag must be a str, got "
                            f"{type(stringtag).__name__}")
        local_comm = Intracomm.Create_from_group(local_group, stringtag)
        engine = local_comm._ep.engine
        remote = list(remote_group.world_ranks)
        local_leader, remote_leader = as_int(local_leader), as_int(remote_leader)
        if not 0 <= local_leader < local_comm.size:
            raise RankError(f"rank {local_comm.rank}: Intercomm.Create_from_groups("
                            f"local_leader={local_leader}): expected 0..{local_comm.size - 1}")
        if not 0 <= remote_leader < len(remote):
            raise RankError(f"rank {local_comm.rank}: Intercomm.Create_from_groups("
                            f"remote_leader={remote_leader}): expected 0..{len(remote) - 1}")
        # The leaders meet on COMM_WORLD's collective context with a tag of their own (never
        # a collective call's, never a user's message).
        world = Intracomm(engine, range(engine.size), engine.rank, 0, "COMM_WORLD")
        tag = create_group_tag((zlib.crc32(stringtag.encode()) + 1) & 0x3FFFFFFF)
        swap = intercomm.WorldSwap(world._ep, remote[remote_leader], tag)
        comm = intercomm.build_intercomm(local_comm, local_leader, swap, "Intercomm.Create_from_groups")
        local_comm.Free()
        if info:
            comm.Set_info(info)
        if cls is not Intercomm:
            same = object.__new__(cls)
            same.__dict__ = comm.__dict__
            comm = same
        return comm

    # -- operations (intercomm.py) ---------------------------------------------------------
    Dup, Clone, Idup = intercomm.Dup, intercomm.Dup, intercomm.Idup
    Split, Split_type, Create = intercomm.Split, intercomm.Split_type, intercomm.Create
    Create_group, Create_intercomm = intercomm.Create_group, intercomm.Create_intercomm
    Create_cart, Merge = intercomm.Create_cart, intercomm.Merge
    Free, Disconnect = intercomm.Free, intercomm.Disconnect

    def Is_inter(self) -> bool:
        self._alive("Is_inter")
        return True

    def Is_intra(self) -> bool:
        return not self.Is_inter()

    @property
    def is_inter(self) -> bool:
        return self.Is_inter()

    @property
    def is_intra(self) -> bool:
        return not self.Is_inter()

    # -- the collectives between the two groups (collectives/inter_calls.py) -----------------
    Barrier, Ibarrier = inter_calls.Barrier, inter_calls.Ibarrier
    barrier, ibarrier = inter_calls.barrier, inter_calls.ibarrier
    Bcast, Ibcast = inter_calls.Bcast, inter_calls.Ibcast
    bcast, ibcast = inter_calls.bcast, inter_calls.ibcast
    Gather, Igather = inter_calls.Gather, inter_calls.Igather
    Gatherv, Igatherv = inter_calls.Gatherv, inter_calls.Igatherv
    gather, igather = inter_calls.gather, inter_calls.igather
    Scatter, Iscatter = inter_calls.Scatter, inter_calls.Iscatter
    Scatterv, Iscatterv = inter_calls.Scatterv, inter_calls.Iscatterv
    scatter, iscatter = inter_calls.scatter, inter_calls.iscatter
    Allgather, Iallgather = inter_calls.Allgather, inter_calls.Iallgather
    Allgatherv, Iallgatherv = inter_calls.Allgatherv, inter_calls.Iallgatherv
    allgather, iallgather = inter_calls.allgather, inter_calls.iallgather
    Alltoall, Ialltoall = inter_calls.Alltoall, inter_calls.Ialltoall
    Alltoallv, Ialltoallv = inter_calls.Alltoallv, inter_calls.Ialltoallv
    Alltoallw, Ialltoallw = inter_calls.Alltoallw, inter_calls.Ialltoallw
    alltoall, ialltoall = inter_calls.alltoall, inter_calls.ialltoall
    Reduce, Ireduce = inter_calls.Reduce, inter_calls.Ireduce
    reduce, ireduce = inter_calls.reduce, inter_calls.ireduce
    Allreduce, Iallreduce = inter_calls.Allreduce, inter_calls.Iallreduce
    allreduce, iallreduce = inter_calls.allreduce, inter_calls.iallreduce
    Reduce_scatter, Ireduce_scatter = inter_calls.Reduce_scatter, inter_calls.Ireduce_scatter
    Reduce_scatter_block = inter_calls.Reduce_scatter_block
    Ireduce_scatter_block = inter_calls.Ireduce_scatter_block


class Topocomm(Intracomm):
    """A communicator with a process topology (``MPI.Topocomm``): neighbour lists, degrees
    and the neighbourhood collectives (see minimpi.comm.graph)."""

    Neighbor_allgather = neighbor_calls.Neighbor_allgather
    Ineighbor_allgather = neighbor_calls.Ineighbor_allgather
    Neighbor_allgatherv = neighbor_calls.Neighbor_allgatherv
    Ineighbor_allgatherv = neighbor_calls.Ineighbor_allgatherv
    Neighbor_alltoall = neighbor_calls.Neighbor_alltoall
    Ineighbor_alltoall = neighbor_calls.Ineighbor_alltoall
    Neighbor_alltoallv = neighbor_calls.Neighbor_alltoallv
    Ineighbor_alltoallv = neighbor_calls.Ineighbor_alltoallv
    Neighbor_alltoallw = neighbor_calls.Neighbor_alltoallw
    Ineighbor_alltoallw = neighbor_calls.Ineighbor_alltoallw
    neighbor_allgather, neighbor_alltoall = neighbor_calls.neighbor_allgather, neighbor_calls.neighbor_alltoall
    Neighbor_allgather_init = persistent_coll.Neighbor_allgather_init
    Neighbor_allgatherv_init = persistent_coll.Neighbor_allgatherv_init
    Neighbor_alltoall_init = persistent_coll.Neighbor_alltoall_init
    Neighbor_alltoallv_init = persistent_coll.Neighbor_alltoallv_init
    Neighbor_alltoallw_init = persistent_coll.Neighbor_alltoallw_init

    #: the topology a handle of this class must have (None: any topology)
    _required_topology: Optional[int] = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if args and isinstance(args[0], Comm) and self:   # a new handle on a communicator
            kind = management.Get_topology(self)
            wanted = self._required_topology
            if kind == UNDEFINED or (wanted is not None and kind != wanted):
                self.__dict__ = null_state()
                raise TypeError(f"MPI.{type(self).__name__}({args[0].name}): that "
                                f"communicator has {_TOPOLOGY_NAMES.get(kind, 'no')} topology")

    def _neighbours(self) -> Tuple[List[int], List[int], List[int]]:
        """``(in-neighbours, out-neighbours, order to post receives in)``, computed once."""
        cached = self.__dict__.get("_neighbour_lists")
        if cached is None:
            cached = self.__dict__["_neighbour_lists"] = self._compute_neighbours()
        return cached

    def _compute_neighbours(self) -> Tuple[List[int], List[int], List[int]]:
        raise TopologyError(f"rank {self.rank}: {self.name} has no process topology; "
                            f"neighbourhood calls need a Cartcomm, Graphcomm or Distgraphcomm")

    @property
    def degrees(self) -> Tuple[int, int]:
        """``(indegree, outdegree)``."""
        sources, destinations, _ = self._neighbours()
        return len(sources), len(destinations)

    @property
    def indegree(self) -> int:
        return self.degrees[0]

    @property
    def outdegree(self) -> int:
        return self.degrees[1]

    @property
    def inoutedges(self) -> Tuple[List[int], List[int]]:
        """``(in-neighbours, out-neighbours)`` in the topology's order."""
        sources, destinations, _ = self._neighbours()
        return list(sources), list(destinations)

    @property
    def inedges(self) -> List[int]:
        return self.inoutedges[0]

    @property
    def outedges(self) -> List[int]:
        return self.inoutedges[1]


class Cartcomm(Topocomm):
    """A communicator with a Cartesian topology (``MPI.Cartcomm``; see minimpi.comm.topology;
    state: ``_dims``, ``_periods``)."""

    _required_topology = CART

    def _compute_neighbours(self):
        return cart_neighbours(self)

    _dims: Tuple[int, ...]
    _periods: Tuple[bool, ...]

    # -- facts -----------------------------------------------------------------------------
    @property
    def dims(self) -> List[int]:
        return list(self._dims)

    @property
    def periods(self) -> List[bool]:
        return list(self._periods)

    @property
    def coords(self) -> List[int]:
        return self.Get_coords(self.rank)

    @property
    def ndim(self) -> int:
        return len(self._dims)

    @property
    def dim(self) -> int:
        return len(self._dims)

    @property
    def topo(self) -> Tuple[List[int], List[bool], List[int]]:
        return self.Get_topo()

    @property
    def topology(self) -> int:
        return CART

    def Get_dim(self) -> int:
        return len(self._dims)

    def Get_topology(self) -> int:
        return CART

    def Get_topo(self) -> Tuple[List[int], List[bool], List[int]]:
        """``(dims, periods, coords)`` of this process."""
        return list(self._dims), list(self._periods), self.Get_coords(self.rank)

    # -- rank <-> coordinates ----------------------------------------------------------------
    def Get_coords(self, rank: int) -> List[int]:
        rank = int(rank)
        if not 0 <= rank < self.size:
            raise RankError(f"Cartcomm.Get_coords({rank}): rank must be in 0..{self.size - 1}")
        coords = []
        for d in reversed(self._dims):
            coords.append(rank % d)
            rank //= d
        return coords[::-1]

    def Get_cart_rank(self, coords: Sequence[int]) -> int:
        coords = [int(c) for c in coords]
        if len(coords) != len(self._dims):
            raise DimsError(f"Cartcomm.Get_cart_rank({coords}): expected {len(self._dims)} "
                            f"coordinates")
        rank = 0
        for c, d, p in zip(coords, self._dims, self._periods):
            if p:
                c %= d
            elif not 0 <= c < d:
                raise RankError(f"Cartcomm.Get_cart_rank({coords}): coordinate {c} is outside "
                                f"0..{d - 1} of a non-periodic dimension")
            rank = rank * d + c
        return rank

    def Shift(self, direction: int, disp: int) -> Tuple[int, int]:
        """``(source, dest)``: the ranks ``disp`` steps before and after this one along
        ``direction`` (``MPI.PROC_NULL`` past the edge of a non-periodic dimension)."""
        direction, disp = int(direction), int(disp)
        if not 0 <= direction < len(self._dims):
            raise DimsError(f"Cartcomm.Shift(direction={direction}): expected 0.."
                            f"{len(self._dims) - 1}")
        me = self.Get_coords(self.rank)

        def neighbour(offset: int) -> int:
            c = list(me)
            c[direction] += offset
            d = self._dims[direction]
            if not self._periods[direction] and not 0 <= c[direction] < d:
                return PROC_NULL
            return self.Get_cart_rank(c)

        return neighbour(-disp), neighbour(disp)

    def Sub(self, remain_dims: Sequence[bool]) -> Any:
        """Split into lower-dimensional grids keeping the dimensions marked true (collective)."""
        remain = [bool(x) for x in remain_dims]
        if len(remain) != len(self._dims):
            raise DimsError(f"Cartcomm.Sub({remain_dims}): expected {len(self._dims)} flags")
        me = self.Get_coords(self.rank)
        color = key = 0
        for c, d, keep in zip(me, self._dims, remain):
            if keep:
                key = key * d + c
            else:
                color = color * d + c
        sub = self.Split(color, key)
        dims = [d for d, keep in zip(self._dims, remain) if keep]
        periods = [p for p, keep in zip(self._periods, remain) if keep]
        return sub._as_cart(dims, periods)

    def Dup(self, info: Any = None) -> Any:
        """A new communicator with the same members and the same topology."""
        return keep_class(self, super().Dup()._as_cart(self._dims, self._periods))

    Clone = Dup


class Graphcomm(Topocomm):
    """A communicator with a graph topology (``MPI.Graphcomm``; see minimpi.comm.graph;
    state: ``_index``, ``_edges``)."""

    _required_topology = GRAPH

    _index: Tuple[int, ...]
    _edges: Tuple[int, ...]

    def Get_topology(self) -> int:
        return GRAPH

    @property
    def topology(self) -> int:
        return GRAPH

    def Get_dims(self) -> Tuple[int, int]:
        """``(nnodes, nedges)``."""
        return len(self._index), len(self._edges)

    @property
    def dims(self) -> Tuple[int, int]:
        return self.Get_dims()

    @property
    def nnodes(self) -> int:
        return len(self._index)

    @property
    def nedges(self) -> int:
        return len(self._edges)

    def Get_topo(self) -> Tuple[List[int], List[int]]:
        """``(index, edges)`` as given to ``Create_graph`` (cumulative ``index``)."""
        return list(self._index), list(self._edges)

    @property
    def topo(self) -> Tuple[List[int], List[int]]:
        return self.Get_topo()

    @property
    def index(self) -> List[int]:
        return list(self._index)

    @property
    def edges(self) -> List[int]:
        return list(self._edges)

    def Get_neighbors(self, rank: int) -> List[int]:
        """The neighbours of node ``rank`` in the order of ``edges``."""
        rank = operator.index(rank)
        if not 0 <= rank < len(self._index):
            raise RankError(f"rank {self.rank}: Graphcomm.Get_neighbors({rank}): expected a "
                            f"node 0..{len(self._index) - 1}")
        start = self._index[rank - 1] if rank else 0
        return list(self._edges[start:self._index[rank]])

    def Get_neighbors_count(self, rank: int) -> int:
        return len(self.Get_neighbors(rank))

    @property
    def neighbors(self) -> List[int]:
        return self.Get_neighbors(self.rank)

    @property
    def nneighbors(self) -> int:
        return len(self.neighbors)

    def _compute_neighbours(self) -> Tuple[List[int], List[int], List[int]]:
        mine = self.Get_neighbors(self.rank)
        return mine, mine, list(range(len(mine)))

    def Dup(self, info: Any = None) -> Any:
        """A new communicator with the same members and the same graph."""
        return keep_class(self, super().Dup()._as_graph(self._index, self._edges))

    Clone = Dup


class Distgraphcomm(Topocomm):
    """A communicator with a distributed-graph topology (``MPI.Distgraphcomm``; state:
    ``_sources``, ``_destinations``, ``_sourceweights``, ``_destweights``, weights None
    when unweighted)."""

    _required_topology = DIST_GRAPH

    _sources: Tuple[int, ...]
    _destinations: Tuple[int, ...]
    _sourceweights: Optional[Tuple[int, ...]]
    _destweights: Optional[Tuple[int, ...]]

    def Get_topology(self) -> int:
        return DIST_GRAPH

    @property
    def topology(self) -> int:
        return DIST_GRAPH

    def Get_dist_neighbors_count(self) -> Tuple[int, int, bool]:
        """``(indegree, outdegree, weighted)``."""
        return len(self._sources), len(self._destinations), self._sourceweights is not None

    def Get_dist_neighbors(self) -> Tuple[List[int], List[int], Optional[Tuple[List[int], List[int]]]]:
        """``(sources, destinations, (sourceweights, destweights) or None)``."""
        weights = None
        if self._sourceweights is not None:
            weights = (list(self._sourceweights), list(self._destweights))
        return list(self._sources), list(self._destinations), weights

    def _compute_neighbours(self) -> Tuple[List[int], List[int], List[int]]:
        return list(self._sources), list(self._destinations), list(range(len(self._sources)))

    def Dup(self, info: Any = None) -> Any:
        """A new communicator with the same members and the same graph."""
        return keep_class(self, super().Dup()._as_dist_graph(
            self._sources, self._destinations, self._sourceweights, self._destweights))

    Clone = Dup


_TOPOLOGY_NAMES = {CART: "a Cartesian", GRAPH: "a graph", DIST_GRAPH: "a distributed-graph"}


def _topology_handle(cls: type, comm: "Comm") -> Any:
    """A handle of topology class ``cls`` sharing ``comm``'s state, before its topology is
    set (the class's constructor would refuse a communicator without one)."""
    handle = object.__new__(cls)
    handle.__dict__ = comm.__dict__
    return handle

def endpoint_of(obj: Any) -> Optional[Endpoint]:
    """The endpoint of communicator ``obj`` (None for anything else): how the layers above
    reach a communicator's engine without the mpi4py API exposing it."""
    return obj._ep if isinstance(obj, Comm) else None



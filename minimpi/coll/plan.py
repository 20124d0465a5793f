"""A communicator's collective plan: everything its collective calls share, decided once.

MPI libraries build their trees and node communicators when a communicator is created and
only repeat the communication afterwards. A :class:`Plan` is that for minimpi: the
communicator (``comm/``) makes one when it is created, and every collective call on it reads
it instead of deciding again:

* **settings** (:class:`Settings`): the cost model (built-in figures, the calibration file,
  ``MINIMPI_COST_*``) and the algorithms forced by ``MINIMPI_<COLLECTIVE>`` (``minimpi run
  --coll``), read from the environment *once*, when the world is made. A communicator made
  from another (``Dup``, ``Split``...) inherits them; ``Comm.Set_info`` changes them for
  one communicator with the info keys ``minimpi_<collective>`` (an algorithm name or
  ``auto``) and ``minimpi_cost_<field>`` (``minimpi_cost_alpha``...), as MPI reads hints -
  every member must pass the same (``Set_info`` is collective), so every member keeps
  choosing alike. A variable changed in ``os.environ`` mid-run is not seen.
* **layout**: where the ranks run (:class:`~minimpi.coll.cost.Layout`), the ranks of each
  host and their leaders (what the hierarchical algorithms use);
* **links**: which wire carries the messages between two ranks of one host (shared memory
  or TCP), so the model prices those with that wire's terms (:data:`LINK_TERMS`);
* **decisions**: a table from (collective, bytes, op kind, object form, algorithm
  argument) to the algorithm, filled on a signature's first call from values that every
  member has, so every member picks the same by construction;
* **prepared calls**: the API layer keeps, per call signature, what it checked and computed
  the first time (the op accepts the datatype, the mismatch signature bits), so a repeated
  call only parses its buffers and runs the schedule.

A plan never changes after it is made (``Set_info`` gives the communicator a new one), so
it needs no lock: ranks that are threads each have their own communicator objects.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from ..errors import AlgorithmError
from .cost import FIELDS, CostModel, Layout, model_sources
from .mismatch import KINDS
from .peers import host_groups, host_leaders
from .registry import INTRA, KIND_NAMES, Algorithm, algorithms, choose_among, forced
from .segment import SLOT_BYTES, HostSegment

#: Built-in terms of the link between two ranks of one host, per transport that can carry it:
#: (alpha seconds per message, beta seconds per byte; None: the model's ``alpha``/``beta``).
#: Shared memory moves bytes faster than loopback TCP (single copy through process_vm_readv:
#: 14.5 GB/s streamed on an idle 2-core machine, about 10 GB/s as a ping-pong slope, where
#: TCP gives the model's 4.3 GB/s). Its per-message term stays the model's: a collective step
#: costs its Python work (tens of microseconds: the schedule, the engine, the reduction), not
#: the wire's 6.6 us one-way latency - priced at 7 us, auto picked ring-like algorithms with
#: many steps that measured slower (issue 22's closing note has the table). A link field set
#: by a calibration file or the environment (``MINIMPI_COST_BETA_INTRA``...) wins over
#: these; a transport not listed (tcp, inproc) is priced with ``alpha``/``beta``.
LINK_TERMS: Dict[str, Tuple[Optional[float], Optional[float]]] = {
    "shm": (None, 1 / 10e9),
}

#: the wires between the ranks of one host over which they can also share memory (a
#: communicator's collective segment, :mod:`.segment`): shared memory, and the threads of
#: one process (tests, ``minimpi draw``)
SEGMENT_WIRES = ("shm", "inproc")

#: info keys: ``minimpi_cost_<field>`` sets a model field, ``minimpi_<collective>`` forces
INFO_COST_PREFIX = "minimpi_cost_"
INFO_PREFIX = "minimpi_"

#: how many distinct signatures one communicator decides and prepares before starting over
#: (a job whose calls see ever-new byte counts - Allgatherv with varying counts - must not
#: grow without bound)
TABLE_SIZE = 1024


@dataclass(frozen=True)
class Settings:
    """What a job's collectives are told: the cost model and forced algorithms, with where
    each came from. Read once (:meth:`from_environment`); changed per communicator only
    through info keys (:meth:`with_hints`)."""
    model: CostModel
    #: model field -> where its value came from ("built-in default", "file PATH", "env NAME")
    sources: Mapping[str, str]
    #: collective -> (algorithm name, where it was forced: "MINIMPI_ALLREDUCE", "info key ...")
    forced: Mapping[str, Tuple[str, str]] = field(default_factory=dict)

    @staticmethod
    def from_environment(env: Optional[Mapping[str, str]] = None) -> "Settings":
        """The settings in ``env`` (default: this process's environment), read now."""
        env = os.environ if env is None else env
        model, sources = model_sources(env)
        forced = {}
        for name, value in env.items():
            if name.startswith("MINIMPI_") and value and value != "auto":
                collective = name[len("MINIMPI_"):].lower()
                if collective in _collectives():
                    forced[collective] = (value, name)
        return Settings(model, dict(sources), forced)

    def with_hints(self, hints: Mapping[str, str], where: str = "info") -> "Settings":
        """These settings with the info keys of ``hints`` applied (other keys are ignored,
        as MPI ignores hints it does not know). Raises AlgorithmError / ValueError naming a
        key whose value cannot be used."""
        model, sources, forced = self.model, dict(self.sources), dict(self.forced)
        known = _collectives()
        for key, value in hints.items():
            key = key.lower()
            if key.startswith(INFO_COST_PREFIX):
                name = key[len(INFO_COST_PREFIX):]
                if name not in FIELDS:
                    continue
                try:
                    model = replace(model, **{name: FIELDS[name][1](value)})
                except ValueError:
                    raise ValueError(f"{where}: {key}={value!r} is not a number") from None
                sources[name] = f"{where} key {key}"
            elif key.startswith(INFO_PREFIX) and key[len(INFO_PREFIX):] in known:
                collective = key[len(INFO_PREFIX):]
                if value in ("", "auto"):
                    forced.pop(collective, None)
                else:
                    forced[collective] = (value, f"{where} key {key}")
        return Settings(model, sources, forced)


def _collectives() -> Sequence[str]:
    """The collectives a setting may force: the fixed table of collective kinds (reading it
    imports no algorithm module, so a world's creation stays cheap)."""
    return KINDS


class Plan:
    """The decided-once part of a communicator's collectives (see the module docstring).

    ``hosts``: the host index of each rank of the communicator (``Endpoint.hosts``);
    ``intra_wire``: the transport between two of its ranks on one host (None: unknown, or
    no two ranks share a host); ``kind``: the communicator's kind (``registry.INTRA``, or
    ``registry.INTER`` for an intercommunicator: then ``size`` and ``hosts`` are the remote
    group's, and its collectives choose among the intercommunicator algorithms).
    """

    __slots__ = ("size", "rank", "settings", "model", "layout", "groups", "leaders",
                 "intra_wire", "_decisions", "calls", "kept_bytes", "keepers", "segment_bytes",
                 "_segment", "fused", "kind")

    def __init__(self, size: int, rank: int, hosts: Sequence[int], settings: Settings,
                 intra_wire: Optional[str] = None, kind: str = INTRA) -> None:
        if kind not in KIND_NAMES:
            raise ValueError(f"Plan: kind must be one of {sorted(KIND_NAMES)}, got {kind!r}")
        self.size = size
        self.rank = rank
        self.kind = kind
        self.settings = settings
        self.intra_wire = intra_wire
        self.layout: Layout = Layout.of(hosts)
        #: the ranks of each host (ascending; hosts in order of their lowest rank)
        self.groups: List[List[int]] = host_groups(hosts)
        #: the lowest rank of each host
        self.leaders: List[int] = host_leaders(self.groups)
        self.model: CostModel = priced_for(settings, intra_wire)
        self._decisions: Dict[tuple, Algorithm] = {}
        #: call signature -> what the API layer prepared for it (:meth:`prepare`): its
        #: compiled call (:mod:`.compiled`)
        self.calls: Dict[tuple, Any] = {}
        #: the working-buffer bytes the compiled calls keep between calls, and the calls that
        #: keep some, least recently used first (:meth:`make_room`)
        self.kept_bytes = 0
        self.keepers: Dict[Any, None] = {}
        #: the slot of the shared segment the ranks can meet in (:mod:`.segment`): all on
        #: this host over shared memory (0: no segment)
        self.segment_bytes = SLOT_BYTES if size == 1 or (
            intra_wire in SEGMENT_WIRES and len(self.groups) == 1) else 0
        self._segment: Any = None
        #: (collective, op id, algorithm argument) -> the fused form of a blocking segment
        #: call (:mod:`.fused`), which the API layer tries first
        self.fused: Dict[tuple, Any] = {}

    def algorithm(self, collective: str, nbytes: int, op: Any = None,
                  requested: Optional[str] = None, objects: bool = False,
                  call: str = "") -> Algorithm:
        """The algorithm of a call: the call's ``algorithm=`` argument, else the forced one
        (environment or info key), else ``auto``'s least predicted time on this plan's
        model and layout. Decided on a signature's first call, then looked up."""
        key = (collective, nbytes, None if op is None else op.Is_commutative(), objects,
               requested)
        alg = self._decisions.get(key)
        if alg is None:
            alg = self._decide(collective, nbytes, op, requested, objects, call)
            if len(self._decisions) >= TABLE_SIZE:
                self._decisions.clear()
            self._decisions[key] = alg
        return alg

    def _decide(self, collective: str, nbytes: int, op: Any, requested: Optional[str],
                objects: bool, call: str) -> Algorithm:
        source = "algorithm="
        if requested is None or requested == "auto":
            requested, source = self.settings.forced.get(collective, (None, ""))
        table = algorithms(collective)
        where = f"rank {self.rank}: "
        call = call or collective
        if requested is not None:
            return forced(table, collective, requested, source, f"{where}{call}", self.size,
                          nbytes, op, objects, self.layout, self.segment_bytes, self.kind)
        # auto meets in a segment over shared memory between processes; between the
        # threads of one process (tests, drawings) only an algorithm= asks for it
        auto_segment = self.segment_bytes if self.intra_wire == "shm" else 0
        return choose_among(table, self.size, nbytes, op, objects, self.layout, self.model,
                            f"{where}{call}", auto_segment, self.kind)

    def segment(self, ep: Any) -> HostSegment:
        """The communicator's shared segment (mapped on first use; ``ep``: its endpoint)."""
        seg = self._segment
        if seg is None:
            seg = self._segment = HostSegment.of(ep, self.segment_bytes)
            if seg is None:
                raise AlgorithmError(f"rank {self.rank}: the shared segment of {ep.name} "
                                     f"cannot be made: its transport has no shared memory")
        return seg

    def close(self) -> None:
        """The communicator was freed: let its segment go (:meth:`HostSegment.close`)."""
        if self._segment is not None:
            self._segment.close()

    def prepare(self, key: tuple, value: Any) -> Any:
        """Keep ``value`` for call signature ``key`` (``calls[key]`` from now on); returns
        it. The API layer decides what a key holds; a value that names objects in its key
        by identity must keep them alive."""
        if len(self.calls) >= TABLE_SIZE:
            self.calls.clear()
            self.fused.clear()
            self.keepers.clear()
            self.kept_bytes = 0
        self.calls[key] = value
        return value

    def keeping(self, call: Any) -> None:
        """Compiled call ``call`` just kept an idle channel: it is the most recently used."""
        keepers = self.keepers
        if call in keepers:
            del keepers[call]
        keepers[call] = None

    def make_room(self, budget: int, caller: Any) -> None:
        """Let the idle channels of the least recently used calls (``caller``'s too) go until
        the kept bytes fit in ``budget`` or nothing else is kept."""
        keepers = self.keepers
        for call in list(keepers):
            if self.kept_bytes <= budget:
                return
            self.kept_bytes -= call.let_go()
            del keepers[call]

    def with_hints(self, hints: Mapping[str, str], where: str = "info") -> "Plan":
        """A plan for the same ranks with ``hints`` (info keys) applied to its settings."""
        settings = self.settings.with_hints(hints, where)
        if settings == self.settings:
            return self
        plan = Plan.__new__(Plan)
        plan.size, plan.rank, plan.settings = self.size, self.rank, settings
        plan.kind = self.kind
        plan.layout, plan.groups, plan.leaders = self.layout, self.groups, self.leaders
        plan.intra_wire = self.intra_wire
        plan.model = priced_for(settings, self.intra_wire)
        plan._decisions, plan.calls, plan.kept_bytes, plan.keepers = {}, {}, 0, {}
        plan.segment_bytes, plan._segment = self.segment_bytes, self._segment
        plan.fused = {}
        return plan

    def describe(self) -> str:
        """One line for reports: ranks, layout, the wire within a host, forced algorithms."""
        forced = ", ".join(f"{c}={a} ({w})" for c, (a, w) in sorted(self.settings.forced.items()))
        return (f"{self.size} ranks, {self.layout}, within a host: {self.intra_wire or 'n/a'}"
                + (f", forced: {forced}" if forced else ""))


def priced_for(settings: Settings, intra_wire: Optional[str]) -> CostModel:
    """The model of ``settings`` with the intra-host link priced for ``intra_wire``
    (:func:`priced_model`)."""
    return priced_model(settings.model, intra_wire)


def priced_model(model: CostModel, intra_wire: Optional[str]) -> CostModel:
    """``model`` with the intra-host link priced for ``intra_wire``: that transport's
    built-in terms (:data:`LINK_TERMS`) for each intra-host field nobody set (a calibration
    file, ``MINIMPI_COST_*_INTRA`` or an info key wins). ``minimpi explain`` prices with it
    too, so that it shows what a job picks."""
    terms = LINK_TERMS.get(intra_wire or "")
    if terms is None:
        return model
    alpha, beta = terms
    changes = {}
    if model.alpha_intra is None and alpha is not None:
        changes["alpha_intra"] = alpha
    if model.beta_intra is None and beta is not None:
        changes["beta_intra"] = beta
    return replace(model, **changes) if changes else model

"""Which algorithms exist for which collective, what they cannot do, and how one is chosen.

Each algorithm module registers its functions with :func:`algorithm`::

    @algorithm("bcast", "binomial", cost=lambda m, p, n: ceil_log2(p) * (m.alpha + n * m.beta),
               messages=lambda m, p, n: p - 1, volume=lambda p, n: (p - 1) * n)
    def bcast_binomial(ch, buf, root): ...

``cost`` is the alpha-beta-gamma formula (its docstring states the same); ``messages``
(a function of the model, p, n) the messages all ranks send in all, ``volume`` the bytes
all ranks send in all and ``local`` the bytes all ranks reduce or copy in all, from which
:func:`minimpi.coll.cost.contention` bounds the time when ranks share cores; ``path`` (a
function of the model, p, n) the sizes of the messages its critical path waits for one
after another, of which those above the eager limit are rendezvous, each priced α more
(RTS, CTS) and two more frames of work (:mod:`minimpi.coll.cost`, "Rendezvous"). The
prediction is ``max(cost + rendezvous, contention)`` (:meth:`Algorithm.predict`).

Choosing (:func:`choose`), in order: the call's ``algorithm=`` argument, the environment
variable ``MINIMPI_<COLLECTIVE>`` (``minimpi run --coll allreduce=ring`` sets it), else
``auto``: the algorithm with the least predicted time under the alpha-beta-gamma model
(:mod:`minimpi.coll.cost`) among those whose restrictions allow the call; between equal
predictions - algorithms at their contention bound within :data:`TIE` of the least, that
is the same bytes on the same cores, differing only in message counts - the one whose
formula (its critical path) is least, then the one registered first (:func:`tie_key`).

**Communicator kinds.** An algorithm serves intracommunicators (one group: the default) or
intercommunicators (two groups, and the data crosses between them: ``kinds=(INTER,)``);
one registry holds both, each collective's algorithms in its own module. A communicator
chooses among the algorithms of its kind (:meth:`Algorithm.refusal` refuses the others,
so ``auto`` never picks them, and a forced name of the other kind is an error that says
so). An intercommunicator algorithm is a generator of two channels - ``remote`` over the
other group, ``local`` over its own (:mod:`minimpi.coll.twogroups`) - and its formula's
``p`` is the size of each group.

**Hosts.** Predictions and refusals also take the call's :class:`~minimpi.coll.cost.Layout`
(how many ranks each host has; default: all on one host). A flat algorithm's formula is
evaluated over the slowest link the call may cross; a ``hierarchical`` algorithm's cost
functions take the layout as a fourth (``volume``, ``local``: third) argument and price
each phase on its own link (see :mod:`minimpi.coll.cost`, "Hosts").
"""
from __future__ import annotations

import os
import re
import threading
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from ..errors import AlgorithmError
from .cost import (
    RENDEZVOUS_ALPHAS,
    CostModel,
    Layout,
    Link,
    contention,
    default_model,
    formula_values,
    rendezvous_steps,
)

#: communicator kinds an algorithm may serve: one group, or two groups (an intercommunicator)
INTRA = "intra"
INTER = "inter"
#: how messages name each kind
KIND_NAMES = {INTRA: "intracommunicators", INTER: "intercommunicators"}


@dataclass(frozen=True)
class Algorithm:
    collective: str
    name: str
    function: Callable
    #: predicted seconds for p ranks and n bytes (per rank's contribution, see each module)
    cost: Callable[[CostModel, int, int], float]
    commutative_only: bool = False
    #: whether it also moves Python objects (lowercase API), not only buffers
    objects: bool = True
    #: buffer reductions: it reads the caller's ``sendbuf`` itself (``contribution=``), so
    #: the API layer need not copy the input into ``recvbuf`` first
    reads_sendbuf: bool = False
    summary: str = ""
    #: bytes all ranks send in all, for p ranks and n bytes (None: not stated)
    volume: Optional[Callable[[int, int], float]] = None
    #: bytes all ranks reduce or copy locally in all (None: none)
    local: Optional[Callable[[int, int], float]] = None
    #: messages all ranks send in all, for the model, p and n (None: not stated)
    messages: Optional[Callable[[CostModel, int, int], float]] = None
    #: it knows where ranks run: its cost functions also take the call's Layout (one host
    #: when not given) and price each phase on its own link
    hierarchical: bool = False
    #: it combines each host's ranks first, so rank order survives only when every host's
    #: ranks are contiguous: with a non-commutative op it refuses hosts that interleave
    order_needs_contiguous_hosts: bool = False
    #: hierarchical: (model, p, n, layout) -> [(what a step does, its predicted seconds)],
    #: which ``cost`` adds up (``minimpi explain`` shows them)
    phases: Optional[Callable[..., List[Tuple[str, float]]]] = None
    #: ``cost`` as a reader sees it, e.g. "⌈log2 p⌉·(α + n·β)" (see cost.evaluate: the
    #: tests check that it computes what ``cost`` computes)
    formula: str = ""
    #: it meets in the communicator's shared segment (:mod:`minimpi.coll.segment`): only
    #: for ranks that all share one host over shared memory (or are threads of a process)
    segment: bool = False
    #: the communicator kinds it serves (:data:`INTRA`, :data:`INTER`)
    kinds: Tuple[str, ...] = (INTRA,)
    #: (model, p, n) -> the sizes of the messages its critical path waits for one after
    #: another (a step that posts several at once: one of them); None: none is ever a
    #: rendezvous (a meeting in memory). A hierarchical algorithm's phases price their own
    #: rendezvous (:func:`flat_cost`); its path, for the frames of work, is its one-host form's.
    path: Optional[Callable[[CostModel, int, int], Sequence[float]]] = None

    def __call__(self, *args, **kwargs):
        """Run the algorithm: its schedule generator."""
        return self.function(*args, **kwargs)

    def predict(self, model: CostModel, p: int, nbytes: int,
                layout: Optional[Layout] = None) -> Tuple[float, float, float]:
        """(predicted time, formula, contention): the prediction is the larger of the two.
        ``layout``: where the p ranks run (default: one host)."""
        layout = layout or Layout.one_host(p)
        if self.hierarchical:          # it prices each phase on the link that phase uses
            formula = float(self.cost(model, p, nbytes, layout))
        else:                          # every step over the slowest link the call may cross
            link = model.slowest(layout)
            formula = (float(self.cost(model.over(link), p, nbytes))
                       + RENDEZVOUS_ALPHAS * link.alpha * self.rendezvous(model, p, nbytes))
        messages, volume, local = self.work(model, p, nbytes, layout)
        # CPU work: a byte costs the same to copy whichever link it then leaves on
        crowd = contention(model.over(model.intra), p, volume, local, messages, layout)
        return max(formula, crowd), formula, crowd

    def rendezvous(self, model: CostModel, p: int, nbytes: int) -> int:
        """R: the rendezvous messages on its critical path (those of :attr:`path` above the
        model's eager limit)."""
        return 0 if self.path is None else rendezvous_steps(model, self.path(model, p, nbytes))

    def work(self, model: CostModel, p: int, nbytes: int,
             layout: Optional[Layout] = None) -> Tuple[float, float, float]:
        """(messages, volume, local) of the call summed over all ranks: what the contention
        term prices. A rendezvous is three frames (RTS, CTS, data), so each rank's R
        rendezvous add 2·R frames."""
        extra: tuple = (layout or Layout.one_host(p),) if self.hierarchical else ()
        volume = float(self.volume(p, nbytes, *extra)) if self.volume is not None else 0.0
        local = float(self.local(p, nbytes, *extra)) if self.local is not None else 0.0
        messages = (float(self.messages(model, p, nbytes, *extra))
                    if self.messages is not None else 0.0)
        return messages + 2 * p * self.rendezvous(model, p, nbytes), volume, local

    def refusal(self, p: int, nbytes: int, op=None, objects: bool = False,
                layout: Optional[Layout] = None, segment_bytes: int = 0,
                kind: str = INTRA) -> Optional[str]:
        """Why this algorithm cannot serve the call, or None when it can. ``segment_bytes``:
        the slot a shared segment offers the communicator (0: it has none); ``kind``: the
        communicator's kind (:data:`INTRA`, :data:`INTER`)."""
        if kind not in self.kinds:
            return (f"serves {' and '.join(KIND_NAMES[k] for k in self.kinds)} only, and "
                    f"this call is on an {KIND_NAMES[kind][:-1]}")
        if objects and not self.objects:
            return "moves buffers only (the lowercase, Python-object call cannot use it)"
        if self.segment and not segment_bytes:
            return ("meets in a shared-memory segment, which needs every rank on one host "
                    "with the shared-memory transport")
        noncommutative = op is not None and not op.Is_commutative()
        if self.commutative_only and noncommutative:
            return (f"reorders operands, so it needs a commutative op "
                    f"({getattr(op, 'name', op)} is not commutative)")
        if (self.order_needs_contiguous_hosts and noncommutative and layout is not None
                and not layout.contiguous):
            return (f"combines each host's ranks first, which keeps rank order only when each "
                    f"host's ranks are contiguous; here hosts interleave, so it needs a "
                    f"commutative op ({getattr(op, 'name', op)} is not commutative)")
        return None


REGISTRY: Dict[str, Dict[str, Algorithm]] = {}


def algorithm(collective: str, name: str, *,
              cost: Optional[Callable[[CostModel, int, int], float]] = None,
              volume: Optional[Callable[[int, int], float]] = None,
              local: Optional[Callable[[int, int], float]] = None,
              messages: Optional[Callable[[CostModel, int, int], float]] = None,
              commutative_only: bool = False, objects: bool = True,
              reads_sendbuf: bool = False, hierarchical: bool = False,
              order_needs_contiguous_hosts: bool = False,
              phases: Optional[Callable[..., List[Tuple[str, float]]]] = None,
              formula: str = "", segment: bool = False,
              kinds: Tuple[str, ...] = (INTRA,),
              path: Optional[Callable[[CostModel, int, int], Sequence[float]]] = None) -> Callable:
    """Decorator: register an algorithm function under (collective, name). Without
    ``cost``, the cost is ``formula`` evaluated (:func:`~minimpi.coll.cost.formula_values`):
    the cost written once. ``kinds``: the communicator kinds it serves; ``path``: the sizes
    of its critical path's messages (:attr:`Algorithm.path`)."""
    if not kinds or set(kinds) - set(KIND_NAMES):
        raise ValueError(f"algorithm {collective}/{name}: kinds must be some of "
                         f"{sorted(KIND_NAMES)}, got {kinds!r}")
    if cost is None:
        if not formula:
            raise ValueError(f"algorithm {collective}/{name}: give its formula (or cost)")
        cost = _evaluated(formula)

    def register(fn: Callable) -> Callable:
        REGISTRY.setdefault(collective, {})[name] = Algorithm(
            collective, name, fn, cost, commutative_only, objects, reads_sendbuf,
            first_sentence(fn.__doc__ or ""), volume, local, messages, hierarchical,
            order_needs_contiguous_hosts, phases, formula, segment, tuple(kinds), path)
        return fn
    return register


def _evaluated(formula: str) -> Callable[[CostModel, int, int], float]:
    def cost(model: CostModel, p: int, n: int) -> float:
        return formula_values(formula, model, p, n)[0]
    return cost


def plain(text: str) -> str:
    """Docstring markup as a reader of a terminal wants it: ``x`` -> x,
    :func:`~a.b.name` -> name, :mod:`a.b` -> a.b."""
    text = re.sub(r":[a-z]+:`~?([^`]*)`", lambda m: m.group(1).rsplit(".", 1)[-1]
                  if m.group(0).split("`")[1].startswith("~") else m.group(1), text)
    return text.replace("``", "")


def first_sentence(doc: str) -> str:
    """The first sentence of a docstring's first paragraph, whole (lines joined, markup
    plain): a full stop ends it only where the next word starts with a capital or the
    paragraph ends, so "0 -> 1 -> ... -> p-1" and "(log2 p + f)·nγ, f = 0 or 2" survive."""
    para = " ".join(line.strip() for line in doc.strip().split("\n\n")[0].splitlines())
    para = plain(para)
    end = re.search(r"(?<![.])\.(?=\s+[A-Z(]|\s*$)", para)
    return para[:end.start() + 1] if end else para


def flat_cost(collective: str, name: str, model: CostModel, link: Link, p: int,
              nbytes: float) -> float:
    """The registered formula of flat algorithm ``name`` for p ranks whose every message
    goes over ``link``, with its rendezvous (α each): how a hierarchical algorithm prices
    each of its phases."""
    alg = REGISTRY[collective][name]
    return (float(alg.cost(model.over(link), p, nbytes))
            + RENDEZVOUS_ALPHAS * link.alpha * alg.rendezvous(model, p, nbytes))


def cheapest(collective: str, names: Tuple[str, ...], model: CostModel, link: Link, p: int,
             nbytes: float) -> str:
    """Of the flat algorithms ``names``, the one whose formula is least for p ranks over
    ``link`` (the first of equals): how a hierarchical algorithm picks what one of its steps
    runs. It depends only on values every rank of that step has, so they all agree."""
    return min(names, key=lambda name: flat_cost(collective, name, model, link, p, nbytes))


def algorithms(collective: str) -> Dict[str, Algorithm]:
    load_all()
    try:
        return REGISTRY[collective]
    except KeyError:
        raise AlgorithmError(f"unknown collective {collective!r}; known: "
                             f"{', '.join(sorted(REGISTRY))}") from None



#: predictions this close to the least count as equal: the model is no more accurate than
#: that. Ranks that share cores make several algorithms meet at the contention bound (the
#: same bytes moved on the same cores), a few percent apart in their message counts;
#: measured, the one with the shortest critical path wins there (at p = 4 on 2 cores: a
#: 64 MiB allreduce, the pipelined ring 1.25x faster than the binomial tree that was 0.06%
#: ahead in the prediction, and ~1.1x faster than Rabenseifner, 1.1% behind it; a 4 MiB
#: one, Rabenseifner 1.3-1.6x faster than the binomial tree, 1.9% ahead).
TIE = 0.03


def tie_key(predicted: float, formula: float) -> Tuple[float, float]:
    """How ``auto`` orders algorithms: the predicted time, then the formula (fewer steps
    and messages); equal keys go to the algorithm registered first. Both to 9 digits: the
    same terms added in another order (a hierarchical algorithm on one host is its flat
    phases) may differ in the last bit, and must still tie."""
    return (float(f"{predicted:.9e}"), float(f"{formula:.9e}"))


def best_of(candidates: Sequence[Tuple[float, float, float, "Algorithm"]]) -> "Algorithm":
    """What ``auto`` picks among ``(predicted, formula, contention, algorithm)`` in
    registration order: the first by :func:`tie_key` - unless its prediction is a
    contention bound; then, of the algorithms at their contention bound within :data:`TIE`
    of it, the least formula (the shortest critical path)."""
    least = min(candidates, key=lambda c: tie_key(c[0], c[1]))
    if least[2] < least[1]:            # bound by its critical path: a real prediction
        return least[3]
    tied = [c for c in candidates if c[0] <= least[0] * (1 + TIE) and c[2] >= c[1]]
    return min(tied, key=lambda c: tie_key(c[1], 0.0))[3]


def serving(table: Dict[str, Algorithm], kind: str) -> List[str]:
    """The names of ``table``'s algorithms that serve communicators of ``kind``."""
    return [name for name, alg in table.items() if kind in alg.kinds]


def forced(table: Dict[str, Algorithm], collective: str, requested: str, source: str,
           where: str, p: int, nbytes: int, op: Any, objects: bool, layout: Layout,
           segment_bytes: int, kind: str) -> Algorithm:
    """The algorithm ``requested`` by name (from ``source``: ``algorithm=``, a variable, an
    info key), or AlgorithmError naming why it cannot serve the call - an unknown name, or
    a restriction (another communicator kind among them) - and the names that can."""
    on = "" if kind == INTRA else f" on an {KIND_NAMES[kind][:-1]}"
    alg = table.get(requested)
    if alg is None:
        raise AlgorithmError(f"{where}: unknown algorithm {requested!r} (from {source}); "
                             f"{collective}{on} has: {', '.join(serving(table, kind))}, auto")
    why = alg.refusal(p, nbytes, op, objects, layout, segment_bytes, kind)
    if why:
        hint = (f" ({collective}{on} has: {', '.join(serving(table, kind))}, auto)"
                if kind not in alg.kinds else "")
        raise AlgorithmError(f"{where}: algorithm {requested!r} (from {source}) cannot "
                             f"serve this call: it {why}{hint}")
    return alg


def choose(collective: str, p: int, nbytes: int, op=None, requested: Optional[str] = None,
           *, objects: bool = False, rank: int = -1, call: str = "",
           layout: Optional[Layout] = None, model: Optional[CostModel] = None,
           segment_bytes: int = 0, kind: str = INTRA) -> Algorithm:
    """The algorithm a call would run (see the module docstring for the order of choice),
    read from this process's environment now: what ``minimpi explain`` and the tests ask.
    A communicator decides through its plan instead (:class:`minimpi.coll.plan.Plan`, the
    same rules on settings read once). ``layout``: where the p ranks run (default: one
    host); ``model``: another cost model than the environment's (``explain --cores``);
    ``segment_bytes``: the slot of a shared segment (0: none, as on several hosts);
    ``kind``: the communicator's kind (:data:`INTRA`, :data:`INTER`)."""
    table = algorithms(collective)
    layout = layout or Layout.one_host(p)
    source = "algorithm="
    if requested is None or requested == "auto":
        var = f"MINIMPI_{collective.upper()}"
        env = os.environ.get(var)
        if env and env != "auto":
            requested, source = env, var
    where = f"rank {rank}: " if rank >= 0 else ""
    call = call or collective
    if requested is not None and requested != "auto":
        return forced(table, collective, requested, source, f"{where}{call}", p, nbytes, op,
                      objects, layout, segment_bytes, kind)
    return choose_among(table, p, nbytes, op, objects, layout, model or default_model(),
                        f"{where}{call}", segment_bytes, kind)


def choose_among(table: Dict[str, Algorithm], p: int, nbytes: int, op: Any, objects: bool,
                 layout: Layout, model: CostModel, what: str,
                 segment_bytes: int = 0, kind: str = INTRA) -> Algorithm:
    """``auto``: the algorithm of ``table`` with the least predicted time under ``model``
    among those whose restrictions (the communicator ``kind`` among them) allow the call
    (:func:`best_of`); ``what`` names the call in the error when none can serve it."""
    candidates = [(*alg.predict(model, p, nbytes, layout), alg) for alg in table.values()
                  if alg.refusal(p, nbytes, op, objects, layout, segment_bytes, kind) is None]
    if not candidates:  # pragma: no cover - every collective has an unrestricted algorithm
        raise AlgorithmError(f"{what}: no algorithm can serve this call")
    return best_of(candidates)


_loaded = False
_load_lock = threading.Lock()


def load_all() -> None:
    """Import every algorithm module so that all registrations have run (once; ranks
    running as threads may ask at the same time, and none may see a partial registry)."""
    global _loaded
    if _loaded:
        return
    # Ranks that are threads (run_threads) may make their first collective call at once:
    # none may see the registry before every module has registered.
    with _load_lock:
        if _loaded:
            return
        import importlib
        for module in COLLECTIVE_MODULES:
            importlib.import_module(f"minimpi.coll.{module}")
        _loaded = True


#: one module per collective (adding a collective: one module and one line here)
COLLECTIVE_MODULES = [
    "bcast",
    "scatter", "gather", "reduce", "barrier", "scan",
    "allreduce", "allgather", "reduce_scatter", "alltoall",
    "neighbor",
]

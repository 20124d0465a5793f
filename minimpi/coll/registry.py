"""Which algorithms exist for which collective, what they cannot do, and how one is chosen.

Each algorithm module registers its functions with :func:`algorithm`::

    @algorithm("bcast", "binomial", cost=lambda m, p, n: ceil_log2(p) * (m.alpha + n * m.beta),
               messages=lambda m, p, n: p - 1, volume=lambda p, n: (p - 1) * n)
    def bcast_binomial(ch, buf, root): ...

``cost`` is the alpha-beta-gamma formula (its docstring states the same); ``messages``
(a function of the model, p, n) the messages all ranks send in all, ``volume`` the bytes
all ranks send in all and ``local`` the bytes all ranks reduce or copy in all, from which
:func:`minimpi.coll.cost.contention` bounds the time when ranks share cores. The
prediction is ``max(cost, contention)`` (:meth:`Algorithm.predict`).

Choosing (:func:`choose`), in order: the call's ``algorithm=`` argument, the environment
variable ``MINIMPI_<COLLECTIVE>`` (``minimpi run --coll allreduce=ring`` sets it), else
``auto``: the algorithm with the least predicted time under the alpha-beta-gamma model
(:mod:`minimpi.coll.cost`) among those whose restrictions allow the call; between equal
predictions - algorithms at their contention bound within :data:`TIE` of the least, that
is the same bytes on the same cores, differing only in message counts - the one whose
formula (its critical path) is least, then the one registered first (:func:`tie_key`).
"""
from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Callable, Dict, Optional, Sequence, Tuple

from ..errors import AlgorithmError
from .cost import CostModel, contention, default_model, env_get


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

    def __call__(self, *args, **kwargs):
        """Run the algorithm: its schedule generator."""
        return self.function(*args, **kwargs)

    def predict(self, model: CostModel, p: int, nbytes: int) -> Tuple[float, float, float]:
        """(predicted time, formula, contention): the prediction is the larger of the two."""
        formula = float(self.cost(model, p, nbytes))
        volume = float(self.volume(p, nbytes)) if self.volume is not None else 0.0
        local = float(self.local(p, nbytes)) if self.local is not None else 0.0
        messages = float(self.messages(model, p, nbytes)) if self.messages is not None else 0.0
        crowd = contention(model, p, volume, local, messages)
        return max(formula, crowd), formula, crowd

    def refusal(self, p: int, nbytes: int, op=None, objects: bool = False) -> Optional[str]:
        """Why this algorithm cannot serve the call, or None when it can."""
        if objects and not self.objects:
            return "moves buffers only (the lowercase, Python-object call cannot use it)"
        if self.commutative_only and op is not None and not op.Is_commutative():
            return (f"reorders operands, so it needs a commutative op "
                    f"({getattr(op, 'name', op)} is not commutative)")
        return None


REGISTRY: Dict[str, Dict[str, Algorithm]] = {}


def algorithm(collective: str, name: str, *, cost: Callable[[CostModel, int, int], float],
              volume: Optional[Callable[[int, int], float]] = None,
              local: Optional[Callable[[int, int], float]] = None,
              messages: Optional[Callable[[CostModel, int, int], float]] = None,
              commutative_only: bool = False, objects: bool = True,
              reads_sendbuf: bool = False) -> Callable:
    """Decorator: register an algorithm function under (collective, name)."""
    def register(fn: Callable) -> Callable:
        _auto_choices.clear()
        doc = (fn.__doc__ or "").strip().splitlines()
        REGISTRY.setdefault(collective, {})[name] = Algorithm(
            collective, name, fn, cost, commutative_only, objects, reads_sendbuf,
            doc[0] if doc else "", volume, local, messages)
        return fn
    return register


def algorithms(collective: str) -> Dict[str, Algorithm]:
    _load_all()
    try:
        return REGISTRY[collective]
    except KeyError:
        raise AlgorithmError(f"unknown collective {collective!r}; known: "
                             f"{', '.join(sorted(REGISTRY))}") from None



#: predictions this close to the least count as equal: the model is no more accurate than
#: that. Ranks that share cores make several algorithms meet at the contention bound (the
#: same bytes moved on the same cores), a fraction of a percent apart in their message
#: counts; measured, the one with the shortest critical path wins there (at p = 4 on 2
#: cores a 64 MiB allreduce: the pipelined ring, 1.25x faster than the binomial tree that
#: was 0.06% ahead in the prediction).
TIE = 0.01


def tie_key(candidates: Sequence[Tuple[float, float, float, "Algorithm"]]) -> "Algorithm":
    """What ``auto`` picks among ``(predicted, formula, contention, algorithm)`` in
    registration order: the least prediction - unless it is a contention bound, then of
    the algorithms at their contention bound within :data:`TIE` of it, the least formula
    (the shortest critical path, fewest steps); the first registered of equal ones."""
    least = min(candidates, key=lambda c: (c[0], c[1]))
    if least[2] < least[1]:            # bound by its critical path: a real prediction
        return least[3]
    tied = [c for c in candidates if c[0] <= least[0] * (1 + TIE) and c[2] >= c[1]]
    return min(tied, key=lambda c: c[1])[3]


def choose(collective: str, p: int, nbytes: int, op=None, requested: Optional[str] = None,
           *, objects: bool = False, rank: int = -1, call: str = "") -> Algorithm:
    """The algorithm a call runs (see the module docstring for the order of choice)."""
    table = algorithms(collective)
    source = "algorithm="
    if requested is None or requested == "auto":
        var = _ENV_NAMES.get(collective) or _ENV_NAMES.setdefault(collective, f"MINIMPI_{collective.upper()}")
        env = env_get(var)
        if env and env != "auto":
            requested, source = env, var
    where = f"rank {rank}: " if rank >= 0 else ""
    call = call or collective
    if requested is not None and requested != "auto":
        alg = table.get(requested)
        if alg is None:
            raise AlgorithmError(f"{where}{call}: unknown algorithm {requested!r} (from {source}); "
                                 f"{collective} has: {', '.join(table)}, auto")
        why = alg.refusal(p, nbytes, op, objects)
        if why:
            raise AlgorithmError(f"{where}{call}: algorithm {requested!r} (from {source}) cannot "
                                 f"serve this call: it {why}")
        return alg
    model = default_model()
    # auto's answer depends only on these (refusals look at p, commutativity and objects),
    # so repeated calls - the common case - skip the predictions.
    op_key = None if op is None else op.Is_commutative()
    memo_key = (collective, p, nbytes, op_key, objects, model)
    best = _auto_choices.get(memo_key)
    if best is not None:
        return best
    candidates = [(*alg.predict(model, p, nbytes), alg) for alg in table.values()
                  if alg.refusal(p, nbytes, op, objects) is None]
    if not candidates:  # pragma: no cover - every collective has an unrestricted algorithm
        raise AlgorithmError(f"{where}{call}: no {collective} algorithm can serve this call")
    best = tie_key(candidates)
    if len(_auto_choices) >= AUTO_MEMO_SIZE:   # a long job with ever-new sizes: start over
        _auto_choices.clear()
    _auto_choices[memo_key] = best
    return best


#: collective -> the variable that forces its algorithm (MINIMPI_ALLREDUCE, ...)
_ENV_NAMES: Dict[str, str] = {}

#: auto's choices remembered by (collective, p, bytes, op kind, objects, model)
_auto_choices: Dict[tuple, Algorithm] = {}
AUTO_MEMO_SIZE = 4096


_loaded = False
_load_lock = threading.Lock()


def _load_all() -> None:
    """Import every algorithm module so that all registrations have run."""
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
]

"""Which algorithms exist for which collective, what they cannot do, and how one is chosen.

Each algorithm module registers its functions with :func:`algorithm`::

    @algorithm("bcast", "binomial", cost=lambda m, p, n: ceil_log2(p) * (m.alpha + n * m.beta))
    def bcast_binomial(ch, buf, root): ...

Choosing (:func:`choose`), in order: the call's ``algorithm=`` argument, the environment
variable ``MINIMPI_<COLLECTIVE>`` (``minimpi run --coll allreduce=ring`` sets it), else
``auto``: the algorithm with the least predicted time under the alpha-beta-gamma model
(:mod:`minimpi.coll.cost`) among those whose restrictions allow the call.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Tuple

from ..errors import AlgorithmError
from .cost import CostModel, default_model


@dataclass(frozen=True)
class Algorithm:
    collective: str
    name: str
    function: Callable
    #: predicted seconds for p ranks and n bytes (per rank's contribution, see each module)
    cost: Callable[[CostModel, int, int], float]
    commutative_only: bool = False
    power_of_two_only: bool = False
    #: extra restriction: (p, nbytes, op) -> reason it cannot serve the call, or None
    check: Optional[Callable[..., Optional[str]]] = None
    #: whether it also moves Python objects (lowercase API), not only buffers
    objects: bool = True
    summary: str = ""

    def refusal(self, p: int, nbytes: int, op=None, objects: bool = False) -> Optional[str]:
        """Why this algorithm cannot serve the call, or None when it can."""
        if objects and not self.objects:
            return "moves buffers only (the lowercase, Python-object call cannot use it)"
        if self.power_of_two_only and p & (p - 1):
            return f"needs a power-of-two number of ranks (this communicator has {p})"
        if self.commutative_only and op is not None and not op.Is_commutative():
            return (f"reorders operands, so it needs a commutative op "
                    f"({getattr(op, 'name', op)} is not commutative)")
        if self.check is not None:
            return self.check(p, nbytes, op)
        return None


REGISTRY: Dict[str, Dict[str, Algorithm]] = {}


def algorithm(collective: str, name: str, *, cost: Callable[[CostModel, int, int], float],
              commutative_only: bool = False, power_of_two_only: bool = False,
              check: Optional[Callable[..., Optional[str]]] = None,
              objects: bool = True) -> Callable:
    """Decorator: register an algorithm function under (collective, name)."""
    def register(fn: Callable) -> Callable:
        doc = (fn.__doc__ or "").strip().splitlines()
        REGISTRY.setdefault(collective, {})[name] = Algorithm(
            collective, name, fn, cost, commutative_only, power_of_two_only, check, objects,
            doc[0] if doc else "")
        return fn
    return register


def algorithms(collective: str) -> Dict[str, Algorithm]:
    _load_all()
    try:
        return REGISTRY[collective]
    except KeyError:
        raise AlgorithmError(f"unknown collective {collective!r}; known: "
                             f"{', '.join(sorted(REGISTRY))}") from None


def predictions(collective: str, p: int, nbytes: int, op=None,
                model: Optional[CostModel] = None, objects: bool = False) -> List[Tuple[Algorithm, Optional[float], Optional[str]]]:
    """Every algorithm with its predicted time (None when refused) and refusal reason."""
    model = model or default_model()
    out = []
    for alg in algorithms(collective).values():
        why = alg.refusal(p, nbytes, op, objects)
        out.append((alg, None if why else alg.cost(model, p, nbytes), why))
    return out


def choose(collective: str, p: int, nbytes: int, op=None, requested: Optional[str] = None,
           *, objects: bool = False, rank: int = -1, call: str = "") -> Algorithm:
    """The algorithm a call runs (see the module docstring for the order of choice)."""
    table = algorithms(collective)
    source = "algorithm="
    if requested is None or requested == "auto":
        env = os.environ.get(f"MINIMPI_{collective.upper()}")
        if env and env != "auto":
            requested, source = env, f"MINIMPI_{collective.upper()}"
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
    best = None
    best_time = 0.0
    for alg, predicted, why in predictions(collective, p, nbytes, op, objects=objects):
        if why is None and (best is None or predicted < best_time):
            best, best_time = alg, predicted
    if best is None:  # pragma: no cover - every collective has an unrestricted algorithm
        raise AlgorithmError(f"{where}{call}: no {collective} algorithm can serve this call")
    return best


_loaded = False


def _load_all() -> None:
    """Import every algorithm module so that all registrations have run."""
    global _loaded
    if _loaded:
        return
    _loaded = True
    import importlib
    for module in COLLECTIVE_MODULES:
        importlib.import_module(f"minimpi.coll.{module}")


#: one module per collective (adding a collective: one module and one line here)
COLLECTIVE_MODULES = [
    "bcast",
    "scatter", "gather", "reduce", "barrier", "scan",
    "allreduce", "allgather", "reduce_scatter", "alltoall",
]

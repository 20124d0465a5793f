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
predictions (several algorithms at the same contention bound) the one whose formula is
less, then the one registered first (:func:`tie_key`).
"""
from __future__ import annotations

import os
import re
import threading
from dataclasses import dataclass
from typing import Callable, Dict, Optional, Tuple

from ..errors import AlgorithmError
from .cost import CostModel, contention, default_model


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
    #: ``cost`` as a reader sees it, e.g. "⌈log2 p⌉·(α + n·β)" (see cost.evaluate: the
    #: tests check that it computes what ``cost`` computes)
    formula: str = ""

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
              reads_sendbuf: bool = False, formula: str = "") -> Callable:
    """Decorator: register an algorithm function under (collective, name)."""
    def register(fn: Callable) -> Callable:
        _auto_choices.clear()
        REGISTRY.setdefault(collective, {})[name] = Algorithm(
            collective, name, fn, cost, commutative_only, objects, reads_sendbuf,
            first_sentence(fn.__doc__ or ""), volume, local, messages, formula)
        return fn
    return register


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


def algorithms(collective: str) -> Dict[str, Algorithm]:
    _load_all()
    try:
        return REGISTRY[collective]
    except KeyError:
        raise AlgorithmError(f"unknown collective {collective!r}; known: "
                             f"{', '.join(sorted(REGISTRY))}") from None



def tie_key(predicted: float, formula: float) -> Tuple[float, float]:
    """What ``auto`` minimises: the predicted time, then - between algorithms that the
    contention bound ties (the same bytes moved on the same cores) - the formula, i.e. the
    one with fewer steps and messages; equal keys go to the algorithm registered first."""
    return (float(f"{predicted:.9e}"), formula)


def choose(collective: str, p: int, nbytes: int, op=None, requested: Optional[str] = None,
           *, objects: bool = False, rank: int = -1, call: str = "",
           model: Optional[CostModel] = None) -> Algorithm:
    """The algorithm a call runs (see the module docstring for the order of choice);
    ``model``: another cost model than the job's (``minimpi explain --cores``)."""
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
    model = model or default_model()
    # auto's answer depends only on these (refusals look at p, commutativity and objects),
    # so repeated calls - the common case - skip the predictions.
    op_key = None if op is None else op.Is_commutative()
    memo_key = (collective, p, nbytes, op_key, objects, model)
    best = _auto_choices.get(memo_key)
    if best is not None:
        return best
    best_key = None
    for alg in table.values():
        if alg.refusal(p, nbytes, op, objects) is None:
            key = tie_key(*alg.predict(model, p, nbytes)[:2])
            if best is None or key < best_key:
                best, best_key = alg, key
    if best is None:  # pragma: no cover - every collective has an unrestricted algorithm
        raise AlgorithmError(f"{where}{call}: no {collective} algorithm can serve this call")
    if len(_auto_choices) >= AUTO_MEMO_SIZE:   # a long job with ever-new sizes: start over
        _auto_choices.clear()
    _auto_choices[memo_key] = best
    return best


#: auto's choices remembered by (collective, p, bytes, op kind, objects, model)
_auto_choices: Dict[tuple, Algorithm] = {}
AUTO_MEMO_SIZE = 4096


_loaded = False
_load_lock = threading.RLock()


def _load_all() -> None:
    """Import every algorithm module so that all registrations have run.

    Ranks that are threads (run_threads, minimpi draw) may all get here at once: the first
    imports under the lock, and none sees the table before every module has registered."""
    global _loaded
    if _loaded:
        return
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

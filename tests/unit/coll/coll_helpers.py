"""What the per-collective unit tests (tests/unit/coll/test_<collective>.py) share.

    algs("reduce", objects=True)     # registered algorithm names, optionally by restriction
    AUTO                             # algorithm=None (auto), as a parameter with id "auto"
    SIZES, ROOTED, rooted(pairs)     # p = 1..8 without 6; (p, root), 3 roots for each p
    contribution(rank, n, kind)      # a rank's data: int32/float64 ramp or a Python object
    summand(rank, kind)              # the same, but a number in object mode (for ops.SUM)
    everyone(p, n, kind)             # all ranks' contributions: gathered, or to scatter
    MATMUL.op, MATMUL.operand(...)   # a non-commutative op, its inputs and MATMUL.product
    CONCAT                           # a non-commutative op on objects
    rank_error(p, body, OpError)     # run on p ranks, expect a rank to raise; the exception

Algorithm lists come from the registry, so a newly registered algorithm runs through every
matrix automatically. (A module, not a conftest.py: a second ``conftest`` module would
shadow tests/conftest.py, which the integration tests import by that name.)
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional

import numpy as np
import pytest

from minimpi.coll.registry import INTRA, algorithms
from minimpi.data.datatypes import INT64_T, Datatype
from minimpi.data.ops import Op
from minimpi.runtime.inproc import RankFailed, run_threads

#: communicator sizes of the matrices: non-powers of two (3, 5, 7) and powers of two
SIZES = [1, 2, 3, 4, 5, 7, 8]
KINDS = ["int32", "float64", "object"]


def rooted(pairs) -> list:
    """(p, root) pairs as parameters with ids such as ``p5-root2``."""
    return [pytest.param(p, root, id=f"p{p}-root{root}") for p, root in pairs]


#: (p, root) for every size in SIZES and its first, a middle and its last rank as root
ROOTED = rooted((p, root) for p in SIZES for root in sorted({0, p // 2, p - 1}))


def algs(collective: str, *, objects: Optional[bool] = None,
         commutative_only: Optional[bool] = None, kind: str = INTRA) -> List[str]:
    """Names of the registered algorithms of ``collective`` that serve communicators of
    ``kind`` (default: intracommunicators), in registration order; with
    ``objects=``/``commutative_only=``, only those whose restriction has that value."""
    return [name for name, a in algorithms(collective).items()
            if kind in a.kinds and (objects is None or a.objects == objects)
            and (commutative_only is None or a.commutative_only == commutative_only)]


def for_objects(collective: str, alg: str) -> Optional[str]:
    """``alg`` where it serves the lowercase (Python-object) calls, else None (auto's choice):
    for tests that make both kinds of call with one algorithm name."""
    return alg if algorithms(collective)[alg].objects else None


#: ``algorithm=None``: the choice of ``auto`` (add to a list of algorithm names)
AUTO = pytest.param(None, id="auto")


def contribution(rank: int, n: int, kind: str):
    """Rank ``rank``'s data: n numbers increasing with the rank (so MAX is the last rank's
    and MIN the first's), or a Python object that differs from rank to rank."""
    if kind == "object":
        return {"a": rank + 1, "b": [rank] * (rank % 3)}
    return (np.arange(n) * (rank + 1) + rank).astype(kind)


def everyone(p: int, n: int, kind: str):
    """All p ranks' contributions in rank order: one array, or a list of objects."""
    parts = [contribution(r, n, kind) for r in range(p)]
    return parts if kind == "object" else np.concatenate(parts)


def summand(rank: int, kind: str, n: int = 7):
    """Like :func:`contribution`, but the object is a number (for ops.SUM, MAX...)."""
    return rank * 3 + 1 if kind == "object" else contribution(rank, n, kind)


# ------------------------------------------------------------------ non-commutative ops
def _matmul(inbuf, inoutbuf, datatype=None):
    """inoutbuf = inbuf @ inoutbuf on 2x2 matrices (inbuf: the lower ranks)."""
    b = np.asarray(inoutbuf).reshape(-1, 2, 2)
    b[...] = np.asarray(inbuf).reshape(-1, 2, 2) @ b


@dataclass(frozen=True)
class MatrixChain:
    """A non-commutative reduction that shows the order of its operands: each rank holds a
    stack of 2x2 matrices and ``op`` multiplies them, the lower ranks' on the left."""
    op: Op
    #: one item = one 2x2 int64 matrix, so blocks and windows are cut between matrices
    datatype: Datatype

    @staticmethod
    def operand(rank: int, count: int, dtype="i8") -> np.ndarray:
        """Rank ``rank``'s ``count`` matrices, shape (count, 2, 2)."""
        return np.random.default_rng(rank).integers(-2, 3, size=(count, 2, 2)).astype(dtype)

    def product(self, nranks: int, count: int, dtype="i8") -> np.ndarray:
        """The reduction over ranks 0..nranks-1 in order: operand(0) @ operand(1) @ ..."""
        out = self.operand(0, count, dtype)
        for r in range(1, nranks):
            out = out @ self.operand(r, count, dtype)
        return out


MATMUL = MatrixChain(Op.Create(_matmul, commute=False), INT64_T.Create_contiguous(4).Commit())
#: objects: concatenation (strings, lists), in rank order
CONCAT = Op.Create(lambda a, b: a + b, commute=False)


# ------------------------------------------------------------------------------- errors
def rank_error(p: int, body, *types: type, timeout: float = 30.0) -> BaseException:
    """Run ``body`` on p ranks; a rank must raise one of ``types``. Returns that exception
    (for checks of its message)."""
    with pytest.raises(RankFailed) as info:
        run_threads(p, body, timeout=timeout)
    assert isinstance(info.value.exc, types), info.value
    return info.value.exc

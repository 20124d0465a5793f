"""The element type in collective signatures (MPI's type-matching rule), op=None, Split's
C-int bounds. Mismatched types across real processes: tests/integration/test_type_mismatch.py."""
from __future__ import annotations

import numpy as np
import pytest

from minimpi.coll import mismatch
from minimpi.MPI import SUM
from minimpi.runtime.inproc import RankFailed, run_threads

CALLS = {
    "Allreduce": lambda comm, x: comm.Allreduce(x, np.empty_like(x)),
    "Bcast": lambda comm, x: comm.Bcast(x, root=0),
    "Reduce": lambda comm, x: comm.Reduce(x, np.empty_like(x), root=0),
    "Allgather": lambda comm, x: comm.Allgather(x, np.empty((comm.size,) + x.shape, x.dtype)),
    "Scan": lambda comm, x: comm.Scan(x, np.empty_like(x)),
    "Reduce_scatter_block": lambda comm, x: comm.Reduce_scatter_block(
        np.ones(comm.size * 2, x.dtype), np.empty(2, x.dtype)),
}


@pytest.mark.parametrize("call", sorted(CALLS))
def test_same_types_still_work(call):
    def body(comm):
        CALLS[call](comm, np.ones(4, np.int32))
        return True

    assert run_threads(3, body, timeout=20) == [True] * 3


def test_every_fixed_type_round_trips_through_the_signature():
    for name in mismatch.TYPES:
        for collective in ("bcast", "allreduce", "allgather"):
            sig = mismatch.signature(collective, "ring", 0 if collective == "bcast" else None,
                                     SUM if collective == "allreduce" else None, 32, False, name)
            assert mismatch.decode_full(sig)[4] == name
            kind, root, op, _ = mismatch.decode(sig)
            assert root == (0 if collective == "bcast" else None)
            assert op == ("SUM" if collective == "allreduce" else None)


def test_op_none_is_refused():
    def body(comm):
        x = np.ones(3)
        comm.Allreduce(x, np.empty_like(x), op=None)

    with pytest.raises(RankFailed) as info:
        run_threads(2, body, timeout=10)
    assert "op=None is not an MPI.Op" in str(info.value.exc)


def test_default_op_is_still_sum():
    def body(comm):
        y = np.empty(3)
        comm.Allreduce(np.full(3, comm.rank + 1.0), y)
        return comm.allreduce(comm.rank + 1), y.tolist()

    assert run_threads(3, body, timeout=10) == [(6, [6.0] * 3)] * 3


def test_split_color_beyond_a_c_int_is_refused():
    def body(comm):
        comm.Split(2 ** 70, 0)

    with pytest.raises(RankFailed) as info:
        run_threads(2, body, timeout=10)
    assert isinstance(info.value.exc, OverflowError)
    assert "C int" in str(info.value.exc)

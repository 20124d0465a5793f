"""``MPI.BOTTOM``, ``MPI.IN_PLACE`` and ``MPI.BUFFER_AUTOMATIC`` behave as mpi4py's (issue
29): integer addresses (MPICH's: 0, -1, -2) for ``int``, ``==``, ``!=`` and ``hash``; named
by ``repr``; pickled by name; only ``BOTTOM`` is an index. Checked against mpi4py 4.1.2 +
MPICH 5.0.2. minimpi still tells them apart by identity, so the calls that take them work."""
from __future__ import annotations

import copy
import operator
import pickle

import numpy as np
import pytest

from minimpi import MPI
from minimpi.runtime.inproc import run_threads

CONSTANTS = [("BOTTOM", 0, False), ("IN_PLACE", -1, True), ("BUFFER_AUTOMATIC", -2, True)]
TYPE_NAMES = {"BOTTOM": "BottomType", "IN_PLACE": "InPlaceType",
              "BUFFER_AUTOMATIC": "BufferAutomaticType"}


@pytest.mark.parametrize("name,address,truth", CONSTANTS)
def test_a_buffer_constant_is_its_integer_address(name, address, truth):
    const = getattr(MPI, name)
    assert int(const) == address
    assert const == int(const) and int(const) == const       # (issue 29: BOTTOM's was False)
    assert const == np.int64(address) and const == np.array(address)
    assert not const != address
    assert hash(const) == hash(address)
    assert {address: "x"}[const] == "x"
    assert bool(const) is truth
    for other in (address + 1, float(address), "x", None, [address], True if address else 1):
        assert const != other and not const == other, other
    assert repr(const) == str(const) == name
    assert type(const).__name__ == TYPE_NAMES[name] and type(const) is getattr(MPI, TYPE_NAMES[name])
    assert pickle.loads(pickle.dumps(const)) is const
    assert copy.copy(const) is const and copy.deepcopy(const) is const
    assert type(const)() is const
    with pytest.raises(AttributeError):
        const.anything = 1
    with pytest.raises(TypeError, match="not an acceptable base type"):
        type("Sub", (type(const),), {})


def test_only_bottom_is_an_index():
    assert operator.index(MPI.BOTTOM) == 0 and float(MPI.BOTTOM) == 0.0
    for const in (MPI.IN_PLACE, MPI.BUFFER_AUTOMATIC):
        with pytest.raises(TypeError):
            operator.index(const)


def test_the_calls_that_take_them_still_work():
    def body(comm):
        x = np.full(3, comm.rank + 1.0)
        comm.Allreduce(MPI.IN_PLACE, x, op=MPI.SUM)
        comm.Sendrecv([MPI.BOTTOM, 0, MPI.BYTE], comm.rank, 0, [MPI.BOTTOM, MPI.BYTE],
                      comm.rank, 0)
        return x.tolist()

    assert run_threads(3, body, timeout=20) == [[6.0] * 3] * 3
    MPI.Attach_buffer(MPI.BUFFER_AUTOMATIC)
    assert MPI.Detach_buffer() is MPI.BUFFER_AUTOMATIC

"""A received byte count that cannot match the receive datatype raises (issue 29): 12 bytes
of a ``struct{int32, float64}`` received as DOUBLE wrote one and a half doubles and raised
nothing; MPICH stops the job there (an assertion in its unpack, checked with mpi4py 4.1.2 +
MPICH 5.0.2). Now any buffer receive whose message ends inside a basic element of its
datatype (``Status.Get_elements`` would be ``UNDEFINED``) raises ``MPI.ERR_TYPE`` naming the
rank, the call, the source, the bytes and the type; through a temporary nothing is written.
A partial last item that ends on an element boundary stays legal."""
from __future__ import annotations

import numpy as np
import pytest

from minimpi import MPI
from minimpi.runtime.inproc import run_threads


def struct_12() -> MPI.Datatype:
    return MPI.Datatype.Create_struct([1, 1], [0, 4], [MPI.INT32_T, MPI.DOUBLE]).Commit()


def sends_then(receive, send=None):
    """Rank 0 sends 12 bytes (a struct{int32, float64}), rank 1 runs ``receive(comm, buf)``
    into 4 doubles of -1 and returns what it raised and the buffer; then both check that
    the communicator still carries a message."""
    def body(comm):
        if comm.rank == 0:
            if send is None:
                comm.Send([np.full(16, 7, np.uint8), 1, struct_12()], dest=1, tag=5)
            else:
                send(comm)
            comm.Send(np.array([42.0]), dest=1, tag=6)
            return None
        buf = np.full(4, -1.0)
        try:
            receive(comm, buf)
            raised = None
        except MPI.Exception as exc:
            raised = exc
        after = np.zeros(1)
        comm.Recv(after, source=0, tag=6)
        return raised, buf, after[0]

    raised, buf, after = run_threads(2, body, timeout=20)[1]
    assert after == 42.0
    return raised, buf


RECEIVES = {
    "Recv": lambda comm, buf: comm.Recv([buf, MPI.DOUBLE], source=0, tag=5),
    "Irecv": lambda comm, buf: comm.Irecv(buf, source=0, tag=5).Wait(),
    "Sendrecv": lambda comm, buf: comm.Sendrecv(None, MPI.PROC_NULL, 0, buf, 0, 5),
    "Message.Recv": lambda comm, buf: comm.Mprobe(0, 5).Recv(buf),
    "Recv_init": lambda comm, buf: _start_wait(comm.Recv_init(buf, source=0, tag=5)),
}


def _start_wait(req):
    req.Start()
    req.Wait()


@pytest.mark.parametrize("call", list(RECEIVES))
def test_a_message_that_ends_inside_a_double_raises_err_type(call):
    raised, buf = sends_then(RECEIVES[call])
    assert raised is not None, f"{call} raised nothing: {buf}"
    assert raised.Get_error_class() == MPI.ERR_TYPE
    text = str(raised)
    for part in ("rank 1", call, "from rank 0", "12 bytes", "DOUBLE", "Get_elements"):
        assert part in text, (part, text)
    # the zero-copy path has the bytes already (the message says so); the doubles past
    # the message are untouched
    assert "partial element" in text and buf[2:].tolist() == [-1.0, -1.0]


def test_through_a_temporary_nothing_is_written():
    vector = MPI.DOUBLE.Create_vector(2, 1, 2)
    raised, buf = sends_then(lambda comm, b: comm.Recv([b, 1, vector.Commit()], 0, 5))
    assert raised is not None and raised.Get_error_class() == MPI.ERR_TYPE
    assert "nothing was written" in str(raised) and buf.tolist() == [-1.0] * 4


def test_three_ints_received_as_doubles_raise():
    raised, _ = sends_then(RECEIVES["Recv"],
                           send=lambda comm: comm.Send(np.arange(3, dtype=np.int32), 1, 5))
    assert raised is not None and "12 bytes" in str(raised)


def test_counts_that_can_match_are_received():
    def body(comm):
        st = struct_12()
        if comm.rank == 0:
            comm.Send(np.arange(3.0), dest=1, tag=1)                    # 3 doubles into 4
            comm.Send([np.zeros(16, np.uint8), 1, st], dest=1, tag=2)   # struct into struct
            comm.Send([np.zeros(4, np.uint8), MPI.BYTE], dest=1, tag=3)  # 4 B: its int32
            comm.Send(np.arange(5, dtype=np.uint8), dest=1, tag=4)      # bytes into bytes
            return None
        s = [MPI.Status() for _ in range(4)]
        comm.Recv(np.zeros(4), 0, 1, s[0])
        comm.Recv([np.zeros(32, np.uint8), 2, st], 0, 2, s[1])
        comm.Recv([np.zeros(32, np.uint8), 2, st], 0, 3, s[2])
        comm.Recv(bytearray(8), 0, 4, s[3])
        return [s[0].Get_elements(MPI.DOUBLE), s[1].Get_elements(st), s[2].Get_elements(st),
                s[3].Get_count()]

    assert run_threads(2, body, timeout=20)[1] == [3, 2, 1, 5]


def test_a_partial_item_ending_on_an_element_is_legal():
    # a send of DOUBLEs received as DOUBLE_INT pairs matches MPI's rule as far as it goes
    # (a pair is a double then an int): 3 doubles = a pair and the next pair's double
    # (MPICH receives it: Get_elements 4 of its 12-byte pairs); a struct{int32, float64}
    # item cut after its int32 is legal as well
    def body(comm):
        if comm.rank == 0:
            comm.Send(np.arange(3.0), dest=1, tag=1)
            comm.Send(np.arange(1, dtype=np.int32), dest=1, tag=2)
            return None
        pairs = np.zeros(32, np.uint8)
        comm.Recv([pairs, 2, MPI.DOUBLE_INT], 0, 1)
        items = np.zeros(32, np.uint8)
        st = MPI.Status()
        comm.Recv([items, 2, struct_12()], 0, 2, st)
        return pairs[16:24].view(np.float64)[0], st.Get_elements(struct_12())

    assert run_threads(2, body, timeout=20)[1] == (2.0, 1)

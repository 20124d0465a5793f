"""Fault tolerance (ULFM: minimpi/comm/ulfm.py) on ranks that are threads: the calls on
healthy communicators, Revoke reaching ranks blocked elsewhere, and - with
``run_threads(fault_tolerant=True)``, where a rank whose function raises is a failed process
the others are told of - ERR_PROC_FAILED, ERR_PROC_FAILED_PENDING until Ack_failed, Agree
that reports unacknowledged failures, and Shrink to the survivors."""
from __future__ import annotations

import struct

import numpy as np
import pytest

from minimpi import MPI
from minimpi.runtime.inproc import RankFailed, run_threads


def error_class(call):
    """The MPI error class ``call()`` raises (SUCCESS if it returns)."""
    try:
        call()
    except MPI.Exception as exc:
        return exc.Get_error_class()
    return MPI.SUCCESS


@pytest.mark.parametrize("p", [1, 3, 5])
def test_agree_is_a_bitwise_and_and_the_same_everywhere(p):
    def body(comm):
        c = comm.Dup()
        flags = [c.Agree(0b1111 ^ (1 << (comm.rank % 4))) for _ in range(3)]
        c.Free()
        return flags
    expected = 0b1111
    for r in range(p):
        expected &= 0b1111 ^ (1 << (r % 4))
    assert run_threads(p, body, timeout=30) == [[expected] * 3] * p


def test_iagree_waits_for_every_member_and_writes_the_flag():
    def body(comm):
        buf = MPI.buffer.allocate(struct.calcsize("i"))
        flag = memoryview(buf).cast("i")
        flag[0] = 0b1011 if comm.rank == 1 else 0b1101
        if comm.rank == 1:
            req = comm.Iagree(flag)
            pending = not req.Test()      # the others have not called it yet
            comm.Barrier()
        else:
            comm.Barrier()
            req = comm.Iagree(flag)
            pending = None
        req.Wait()
        return pending, flag[0]
    results = run_threads(3, body, timeout=30)
    assert results[1] == (True, 0b1001)
    assert [r[1] for r in results] == [0b1001] * 3


def test_iagree_refuses_what_is_not_one_int():
    def body(comm):
        with pytest.raises(TypeError):
            comm.Iagree(0)
        with pytest.raises(ValueError, match="length one"):
            comm.Iagree(bytearray(8))
        return True
    assert run_threads(2, body, timeout=20) == [True, True]


def test_shrink_of_a_healthy_communicator_keeps_everyone():
    def body(comm):
        s = comm.Shrink()
        t, req = comm.Ishrink()
        assert req
        req.Wait()
        assert not req
        out = (s.Get_size(), s.Get_rank(), s.allreduce(comm.rank), t.allreduce(1),
               comm.Get_failed().Get_size(), comm.Ack_failed(), comm.Ack_failed(0))
        s.Free()
        t.Free()
        return out
    assert run_threads(3, body, timeout=30) == [(3, r, 3, 3, 0, 0, 0) for r in range(3)]


def test_revoke_reaches_ranks_blocked_in_other_calls():
    # Rank 0 revokes; rank 1 waits in Recv for rank 2, rank 2 in a Barrier: both leave with
    # ERR_REVOKED, and every later call on the communicator raises it (even to PROC_NULL).
    def body(comm):
        c = comm.Dup()
        comm.Barrier()
        if c.rank == 0:
            c.Revoke()
            got = MPI.ERR_REVOKED
        elif c.rank == 1:
            got = error_class(lambda: c.Recv(bytearray(4), source=2))
        else:
            got = error_class(c.Barrier)
        later = [error_class(lambda: c.Send([None, 0, MPI.BYTE], MPI.PROC_NULL)),
                 error_class(lambda: c.Recv([None, 0, MPI.BYTE], MPI.PROC_NULL)),
                 error_class(lambda: c.bcast(1)),
                 error_class(lambda: c.Isend(b"x", (c.rank + 1) % 3).Wait())]
        flag = c.Agree(1)                 # agreement and shrink still work
        s = c.Shrink()
        total = s.allreduce(1)
        return got, later, c.Is_revoked(), flag, total, comm.allreduce(1)
    for got, later, revoked, flag, total, world in run_threads(3, body, timeout=30):
        assert got == MPI.ERR_REVOKED
        assert later == [MPI.ERR_REVOKED] * 4
        assert revoked and flag == 1 and total == 3 and world == 3


class Death(Exception):
    """What a rank raises to die (run_threads(fault_tolerant=True) tells the others)."""


def run_with_a_death(size, dead, body, timeout=40):
    """Run ``body(comm)`` on ``size`` ranks, rank ``dead`` failing at once (before any
    communication); return the survivors' results (by rank)."""
    results = {}

    def rank_main(comm):
        if comm.rank == dead:
            raise Death("this rank fails")
        results[comm.rank] = body(comm)

    with pytest.raises(RankFailed) as info:
        run_threads(size, rank_main, timeout=timeout, fault_tolerant=True)
    assert info.value.rank == dead and isinstance(info.value.exc, Death), info.value
    return results


def test_point_to_point_with_a_failed_rank_raises_proc_failed_and_naming_it():
    def body(comm):
        texts = []
        for call in (lambda: comm.recv(source=3), lambda: comm.Send(b"abc", dest=3)):
            with pytest.raises(MPI.Exception) as info:
                call()
            assert info.value.Get_error_class() == MPI.ERR_PROC_FAILED
            texts.append(str(info.value))
        return texts
    results = run_with_a_death(5, 3, body)
    assert sorted(results) == [0, 1, 2, 4]
    for rank, (recv_text, send_text) in results.items():
        assert f"rank {rank}: recv(source=3" in recv_text and "world rank 3 failed" in recv_text
        assert "Send(dest=3" in send_text


def test_wildcard_receive_is_pending_until_the_failure_is_acknowledged():
    def body(comm):
        with pytest.raises(MPI.Exception) as info:   # known only once the notice is applied
            comm.recv(source=3)
        before = error_class(lambda: comm.recv(source=MPI.ANY_SOURCE))
        probes = [error_class(lambda: comm.Probe(source=3)),
                  error_class(lambda: comm.Iprobe(source=MPI.ANY_SOURCE)),
                  error_class(lambda: comm.mprobe(source=MPI.ANY_SOURCE))]
        failed = comm.Get_failed()
        members = failed.Translate_ranks(list(range(failed.Get_size())), comm.Get_group())
        acked = comm.Ack_failed()
        comm.Shrink().Free()     # (every survivor is done probing before anyone sends)
        # after the acknowledgement a wildcard receive gets messages from the living
        survivors = [0, 1, 2, 4]
        i = survivors.index(comm.rank)
        right, left = survivors[(i + 1) % 4], survivors[(i - 1) % 4]
        req = comm.isend(comm.rank, dest=right)
        got = comm.recv(source=MPI.ANY_SOURCE)
        req.wait()
        return info.value.Get_error_class(), before, probes, members, acked, got, left
    results = run_with_a_death(5, 3, body)
    for rank, (cls, before, probes, members, acked, got, left) in results.items():
        assert cls == MPI.ERR_PROC_FAILED
        assert before == MPI.ERR_PROC_FAILED_PENDING
        assert probes == [MPI.ERR_PROC_FAILED] + [MPI.ERR_PROC_FAILED_PENDING] * 2
        assert members == [3] and acked == 1
        assert got == left


def test_collectives_fail_on_every_survivor_then_shrink_and_agree_work():
    def body(comm):
        x = np.full(3, float(comm.rank))
        y = np.empty(3)
        first = error_class(lambda: [comm.Allreduce(x, y) for _ in range(20)])
        unacked = error_class(lambda: comm.Agree(1))    # failure not acknowledged by all
        comm.Ack_failed()
        agreed = comm.Agree(0b110 if comm.rank else 0b011)
        comm.Revoke()
        s = comm.Shrink()
        s.Allreduce(x, y)
        return first, unacked, agreed, s.Get_size(), s.Get_rank(), y.tolist()
    results = run_with_a_death(5, 3, body)
    ranks_after = {0: 0, 1: 1, 2: 2, 4: 3}
    for rank, (first, unacked, agreed, size, new_rank, total) in results.items():
        assert first == MPI.ERR_PROC_FAILED
        assert unacked == MPI.ERR_PROC_FAILED
        assert agreed == 0b010
        assert (size, new_rank) == (4, ranks_after[rank])
        assert total == [7.0] * 3


def test_agreement_survives_its_leader_failing():
    # Rank 0, the agreement's leader, dies: the others may vote to it, learn
    # that it failed, and agree under rank 1 instead. Nobody acknowledged the failure, so
    # every survivor raises ERR_PROC_FAILED, with the same agreed flag.
    def body(comm):
        with pytest.raises(MPI.Exception) as info:
            comm.Agree(0b1 | (comm.rank << 1))
        s = comm.Shrink()
        return info.value.Get_error_class(), info.value.flag, s.Get_size(), s.allreduce(1)
    results = run_with_a_death(4, 0, body)
    assert sorted(results) == [1, 2, 3]
    assert set(results.values()) == {(MPI.ERR_PROC_FAILED, 0b1, 3, 3)}


def test_iagree_with_a_failed_member_reports_it_and_acknowledged_it_agrees():
    def body(comm):
        buf = MPI.buffer.allocate(struct.calcsize("i"))
        flag = memoryview(buf).cast("i")
        flag[0] = 0b111
        with pytest.raises(MPI.Exception) as info:   # wait until the failure is known
            comm.recv(source=1)
        req = comm.Iagree(flag)
        first = error_class(req.Wait)
        comm.Ack_failed()
        flag[0] = 0b110 if comm.rank == 0 else 0b011
        comm.Iagree(flag).Wait()
        return info.value.Get_error_class(), first, flag[0]
    results = run_with_a_death(3, 1, body)
    assert results == {0: (MPI.ERR_PROC_FAILED, MPI.ERR_PROC_FAILED, 0b010),
                       2: (MPI.ERR_PROC_FAILED, MPI.ERR_PROC_FAILED, 0b010)}

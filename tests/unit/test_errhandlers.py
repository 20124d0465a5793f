"""Error handlers: user handlers run on a communicator's errors, fatal ones end the job,
ERRORS_RETURN raises; Get/Set/Call_errhandler, Dup inheritance and the 32-handler limit."""
from __future__ import annotations

import pickle

import numpy as np
import pytest

from minimpi import MPI
from minimpi.runtime.inproc import run_threads


@pytest.mark.parametrize("size", [3, 5])
def test_user_handler_runs_then_the_call_raises(size):
    def prog(comm):
        seen = []
        eh = MPI.Comm.Create_errhandler(lambda c, code: seen.append((c == dup, code)))
        dup = comm.Dup()
        dup.Set_errhandler(eh)
        raised = None
        try:
            dup.Send(np.zeros(1), dest=comm.size + 3)      # an invalid rank
        except MPI.Exception as exc:
            raised = exc.Get_error_class()
        dup.Call_errhandler(MPI.ERR_OTHER)
        dup.Call_errhandler(MPI.SUCCESS)                  # no error: nothing runs
        inherited = dup.Dup()                             # a duplicate keeps the handler
        split = dup.Split(comm.rank % 2, 0)              # so does any new communicator
        same = inherited.Get_errhandler() == eh and split.Get_errhandler() == eh
        inherited.Free()
        split.Free()
        dup.Set_errhandler(MPI.ERRORS_RETURN)
        dup.Call_errhandler(MPI.ERR_OTHER)                # ERRORS_RETURN: returns
        dup.Free()
        eh.Free()
        return seen, raised, same, eh == MPI.ERRHANDLER_NULL

    for seen, raised, same, freed in run_threads(size, prog):
        assert seen == [(True, MPI.ERR_RANK), (True, MPI.ERR_OTHER)]
        assert raised == MPI.ERR_RANK and same and freed


def test_fatal_handler_ends_the_job():
    def prog(comm):
        if comm.rank == 1:
            comm.Set_errhandler(MPI.ERRORS_ARE_FATAL)
            comm.Send(np.zeros(1), dest=99)
        comm.Barrier()

    with pytest.raises(Exception) as info:
        run_threads(3, prog, timeout=20)
    text = repr(info.value) + repr(info.value.__cause__)
    assert "abort" in text.lower() and "fatal error handler" in text


def test_handles_limit_and_kinds():
    handlers = [MPI.Win.Create_errhandler(lambda w, e: None) for _ in range(32)]
    try:
        with pytest.raises(RuntimeError, match="too many"):
            MPI.Win.Create_errhandler(lambda w, e: None)
        with pytest.raises(ValueError):
            pickle.dumps(handlers[0])
        copy = MPI.Errhandler(handlers[0])
        copy.Free()                                  # another handle: the slot stays taken
        with pytest.raises(RuntimeError):
            MPI.Win.Create_errhandler(lambda w, e: None)
        assert MPI.Errhandler.fromint(handlers[3].toint()) == handlers[3]
    finally:
        for eh in handlers:
            eh.Free()
    again = MPI.Win.Create_errhandler(lambda w, e: None)   # slots are free again
    assert again
    again.Free()
    assert pickle.loads(pickle.dumps(MPI.ERRORS_RETURN)) is MPI.ERRORS_RETURN

    def prog(comm):
        errors = []
        for bad in (MPI.Win.Create_errhandler(lambda w, e: None), MPI.ERRHANDLER_NULL, 3):
            try:
                comm.Set_errhandler(bad)
            except (MPI.Exception, TypeError) as exc:
                errors.append(type(exc).__name__)
        return errors, comm.Get_errhandler() == MPI.ERRORS_RETURN

    for errors, default in run_threads(3, prog):
        assert errors == ["ArgumentError", "ArgumentError", "TypeError"] and default

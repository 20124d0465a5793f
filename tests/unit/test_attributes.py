"""Attribute caching: keyvals, copy/delete callbacks on Dup, Free, Set_attr and Delete_attr."""
from __future__ import annotations

import pytest

from minimpi import MPI
from minimpi.runtime.inproc import run_threads


@pytest.mark.parametrize("size", [3, 5])
def test_comm_attributes_follow_dup_and_free(size):
    def prog(comm):
        log = []
        copy_fn = lambda o, k, v: v + [o.rank] if v[0] == "copy" else NotImplemented  # noqa: E731
        key = MPI.Comm.Create_keyval(copy_fn, lambda o, k, v: log.append(("del", v[0])))
        never = MPI.Comm.Create_keyval()          # no copy_fn: never copied
        same = MPI.Comm.Create_keyval(True)       # True: the value itself
        base = comm.Dup()
        token = ["x"]
        base.Set_attr(key, ["copy"])
        base.Set_attr(never, "local")
        base.Set_attr(same, token)
        dup = base.Dup()
        got = (dup.Get_attr(key), dup.Get_attr(never), dup.Get_attr(same) is token)
        base.Set_attr(key, ["skip"])             # replaces: the old value's delete_fn runs
        dup2 = base.Dup()                         # copy_fn says NotImplemented: not copied
        skipped = dup2.Get_attr(key)
        dup.Free()                                # its attribute is deleted
        base.Free()
        MPI.Comm.Free_keyval(key)
        return got, skipped, log, comm.Get_attr(MPI.TAG_UB) > 0

    for rank, (got, skipped, log, tag_ub) in enumerate(run_threads(size, prog)):
        assert got == (["copy", rank], None, True)
        assert skipped is None and tag_ub
        assert log == [("del", "copy"), ("del", "copy"), ("del", "skip")]


def test_callback_errors_and_bad_keyvals():
    def prog(comm):
        def boom(o, k, v):
            raise ValueError("boom")
        key = MPI.Comm.Create_keyval(None, boom)
        c = comm.Dup()
        c.Set_attr(key, 1)
        outcome = []
        try:
            c.Delete_attr(key)
        except MPI.Exception as exc:
            outcome.append(exc.Get_error_class() == MPI.ERR_OTHER and "ValueError" in str(exc))
        outcome.append(c.Get_attr(key) is None)     # gone even though delete_fn failed
        c.Free()                                    # nothing left to delete: no error
        assert MPI.Comm.Free_keyval(key) == MPI.KEYVAL_INVALID
        for call in (lambda: comm.Set_attr(key, 1),        # freed keyval
                     lambda: comm.Set_attr(MPI.TAG_UB, 1),  # predefined
                     lambda: MPI.Datatype.Free_keyval(12345)):
            try:
                call()
            except MPI.Exception as exc:
                outcome.append(exc.Get_error_class() == MPI.ERR_KEYVAL)
        return outcome

    for outcome in run_threads(3, prog):
        assert outcome == [True] * 5


def test_datatype_and_window_attributes():
    def prog(comm):
        key = MPI.Datatype.Create_keyval(lambda o, k, v: MPI.Datatype.Dup(v),
                                         lambda o, k, v: MPI.Datatype.Free(v))
        t = MPI.INT.Dup()
        inner = MPI.DOUBLE.Dup()
        t.Set_attr(key, inner)
        t2 = t.Dup()
        copied = t2.Get_attr(key)
        distinct = copied != inner and copied.Get_size() == 8
        t2.Free()
        freed_copy = copied == MPI.DATATYPE_NULL
        t.Delete_attr(key)
        wkey = MPI.Win.Create_keyval(delete_fn=lambda o, k, v: v.append("deleted"))
        win = MPI.Win.Create(MPI.BOTTOM, 1, MPI.INFO_NULL, comm)
        note = []
        win.Set_attr(wkey, note)
        size_attr = win.Get_attr(MPI.WIN_SIZE)
        win.Free()                               # collective; the delete_fn runs first
        return distinct, freed_copy, inner == MPI.DATATYPE_NULL, note, size_attr

    for distinct, freed_copy, inner_freed, note, size_attr in run_threads(5, prog):
        assert distinct and freed_copy and inner_freed
        assert note == ["deleted"] and size_attr == 0

"""mpi4py's subclassing idioms for handles: ``MyInfo.__new__`` calling ``MPI.Info.__new__(cls,
info)``, and a persistent-request subclass handle sharing the original's state."""
import pickle
import sys

from minimpi import MPI


class MyInfo(MPI.Info):
    def __new__(cls, info=None):
        return MPI.Info.__new__(cls, info)


class MyPrequest(MPI.Prequest):
    def __new__(cls, request=None):
        return super().__new__(cls, request)


def test_info_subclass_made_in_new_shares_the_info_and_keeps_its_type():
    info = MPI.Info.Create({"a": "1"})
    mine = MyInfo(info)
    assert type(mine) is MyInfo and mine == info
    mine["b"] = "2"
    assert info.Get("b") == "2"
    for made in (MyInfo.Create(), mine.Dup(), mine.copy()):
        assert type(made) is MyInfo
        made.Free()
    sys.modules[__name__].MyInfo = MyInfo
    back = pickle.loads(pickle.dumps(mine))
    assert type(back) is MyInfo and back.items() == [("a", "1"), ("b", "2")] and back != info
    null = pickle.loads(pickle.dumps(MyInfo(MPI.INFO_NULL)))
    assert type(null) is MyInfo and null == MPI.INFO_NULL and null is not MPI.INFO_NULL
    info.Free()


def test_prequest_subclass_handle_starts_and_completes_the_original():
    buf = bytearray(4)
    recv = MPI.COMM_SELF.Recv_init(buf, source=0, tag=3)
    mine = MyPrequest(recv)
    assert type(mine) is MyPrequest and mine == recv and mine
    for round_ in range(3):
        mine.Start()
        MPI.COMM_SELF.Send(bytes([round_] * 4), dest=0, tag=3)
        status = MPI.Status()
        recv.Wait(status)                  # the original sees the subclass handle's start
        assert buf == bytes([round_] * 4) and status.Get_source() == 0
        assert mine.Test()                 # and the handle sees it inactive again
    mine.Free()
    assert not recv and recv == MPI.REQUEST_NULL

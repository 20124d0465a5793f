"""mpi4py.util.pkl5 shim: minimpi always pickles with protocol 5 and out-of-band buffers."""
from minimpi.MPI import Comm, Intracomm, Message, Request  # noqa: F401

__all__ = ["Comm", "Intracomm", "Message", "Request"]

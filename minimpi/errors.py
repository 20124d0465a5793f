"""The minimpi exception hierarchy and MPI error classes.

Every error minimpi raises is a :class:`MinimpiError` (exported to mpi4py code as
``MPI.Exception``). Each carries an MPI error class (``MPI.ERR_TRUNCATE``, ...) so that
``Get_error_class()`` answers as in mpi4py, and a message that names the rank, the call,
the argument and what was expected.
"""
from __future__ import annotations

# MPI error classes, numbered as in MPICH so that printed codes look familiar.
SUCCESS = 0
ERR_BUFFER = 1
ERR_COUNT = 2
ERR_TYPE = 3
ERR_TAG = 4
ERR_COMM = 5
ERR_RANK = 6
ERR_ROOT = 7
ERR_GROUP = 8
ERR_OP = 9
ERR_TOPOLOGY = 10
ERR_DIMS = 11
ERR_ARG = 12
ERR_UNKNOWN = 13
ERR_TRUNCATE = 14
ERR_OTHER = 15
ERR_INTERN = 16
ERR_IN_STATUS = 17
ERR_PENDING = 18
ERR_REQUEST = 19
ERR_UNSUPPORTED_OPERATION = 44
# dynamic processes (minimpi/dynamic: Spawn, ports, the name service)
ERR_NAME = 33
ERR_PORT = 38
ERR_SERVICE = 41
ERR_SPAWN = 42
# info objects (MPI.Info)
ERR_INFO = 28
ERR_INFO_KEY = 29
ERR_INFO_VALUE = 30
ERR_INFO_NOKEY = 31
# MPI-IO error classes (minimpi/io raises them as FileError)
ERR_ACCESS = 20
ERR_AMODE = 21
ERR_BAD_FILE = 22
ERR_CONVERSION = 23
ERR_DUP_DATAREP = 24
ERR_FILE_EXISTS = 25
ERR_FILE_IN_USE = 26
ERR_FILE = 27
ERR_IO = 32
ERR_NO_SPACE = 36
ERR_NO_SUCH_FILE = 37
ERR_QUOTA = 39
ERR_READ_ONLY = 40
ERR_UNSUPPORTED_DATAREP = 43
# fault tolerance (ULFM: minimpi/comm/ulfm.py), numbered as MPICH's MPIX_ classes
ERR_PROC_FAILED = 101
ERR_PROC_FAILED_PENDING = 102
ERR_REVOKED = 103
ERR_LASTCODE = 0x3FFFFFFF

ERROR_STRINGS = {
    SUCCESS: "No MPI error",
    ERR_BUFFER: "Invalid buffer pointer",
    ERR_COUNT: "Invalid count",
    ERR_TYPE: "Invalid datatype",
    ERR_TAG: "Invalid tag",
    ERR_COMM: "Invalid communicator",
    ERR_RANK: "Invalid rank",
    ERR_ROOT: "Invalid root",
    ERR_GROUP: "Invalid group",
    ERR_OP: "Invalid reduce operation",
    ERR_TOPOLOGY: "Invalid topology",
    ERR_DIMS: "Invalid dimension argument",
    ERR_ARG: "Invalid argument",
    ERR_UNKNOWN: "Unknown error",
    ERR_TRUNCATE: "Message truncated",
    ERR_OTHER: "Other MPI error",
    ERR_INTERN: "Internal MPI error",
    ERR_IN_STATUS: "See the MPI_ERROR field in MPI_Status for the error code",
    ERR_PENDING: "Pending request",
    ERR_REQUEST: "Invalid request",
    ERR_UNSUPPORTED_OPERATION: "Unsupported operation",
    ERR_INFO: "Invalid MPI_Info",
    ERR_INFO_KEY: "Invalid key for MPI_Info",
    ERR_INFO_VALUE: "Invalid value for MPI_Info",
    ERR_INFO_NOKEY: "MPI_Info key is not defined",
    ERR_NAME: "Invalid service name",
    ERR_PORT: "Invalid port",
    ERR_SERVICE: "Invalid service",
    ERR_SPAWN: "Error in spawn call",
    ERR_ACCESS: "Permission denied",
    ERR_AMODE: "Invalid file access mode",
    ERR_BAD_FILE: "Invalid file name",
    ERR_CONVERSION: "Data conversion error",
    ERR_DUP_DATAREP: "Data representation already registered",
    ERR_FILE_EXISTS: "File exists",
    ERR_FILE_IN_USE: "File in use",
    ERR_FILE: "Invalid file handle",
    ERR_IO: "Input/output error",
    ERR_NO_SPACE: "Not enough space",
    ERR_NO_SUCH_FILE: "No such file or directory",
    ERR_QUOTA: "Quota exceeded",
    ERR_READ_ONLY: "Read-only file or file system",
    ERR_UNSUPPORTED_DATAREP: "Unsupported data representation",
    ERR_PROC_FAILED: "Process failure",
    ERR_PROC_FAILED_PENDING: "Process failure while a wildcard receive was pending",
    ERR_REVOKED: "Communicator revoked",
}


def error_string(code: int) -> str:
    """The description of an error code or class (a user one: what ``Add_error_string``
    gave it, else "")."""
    if code in USER_ERRORS.class_of:
        return USER_ERRORS.strings.get(code, "")
    return ERROR_STRINGS.get(code, f"MPI error code {code}")


def error_class_of(code: int) -> int:
    """The error class of ``code`` (``MPI.Get_error_class``): a predefined class is its own
    class, a user code the class it was added to."""
    return USER_ERRORS.class_of.get(code, code)


class UserErrors:
    """This process's user error classes and codes (``MPI.Add_error_class``,
    ``Add_error_code``, ``Add_error_string`` and MPI 4.1's ``Remove_*``).

    Classes and codes are numbered from one counter above ``ERR_LASTCODE``, so every value
    is unique and the ``MPI.LASTUSEDCODE`` attribute (the largest handed out) only grows;
    a removed value is never handed out again. As in MPI, they are local to the process.
    """

    def __init__(self) -> None:
        #: every live user class and code -> its class (a class maps to itself)
        self.class_of: dict = {}
        #: user class or code -> the string Add_error_string gave it
        self.strings: dict = {}
        #: ``MPI.LASTUSEDCODE``: the largest error value handed out
        self.last_used = ERR_LASTCODE

    def _next(self) -> int:
        self.last_used += 1
        return self.last_used

    def add_class(self) -> int:
        errorclass = self._next()
        self.class_of[errorclass] = errorclass
        return errorclass

    def add_code(self, errorclass: int) -> int:
        errorclass = int(errorclass)
        if not SUCCESS < errorclass < ERR_LASTCODE and self.class_of.get(errorclass) != errorclass:
            raise ArgumentError(f"MPI.Add_error_code(errorclass={errorclass}): not an error "
                                f"class (expected a predefined MPI.ERR_* class or one from "
                                f"MPI.Add_error_class)")
        code = self._next()
        self.class_of[code] = errorclass
        return code

    def _user(self, value: int, call: str) -> int:
        value = int(value)
        if value not in self.class_of:
            raise ArgumentError(f"MPI.{call}({value}): not a user error class or code (only "
                                f"values from MPI.Add_error_class/Add_error_code qualify)")
        return value

    def add_string(self, value: int, string: str) -> None:
        value = self._user(value, "Add_error_string")
        if not isinstance(string, str):
            raise TypeError(f"MPI.Add_error_string({value}, string): expected a str, got "
                            f"{type(string).__name__}")
        if len(string) >= MAX_ERROR_STRING:
            raise ArgumentError(f"MPI.Add_error_string({value}, ...): the string has "
                                f"{len(string)} characters; at most {MAX_ERROR_STRING - 1}")
        self.strings[value] = string

    def remove_string(self, value: int) -> None:
        self.strings.pop(self._user(value, "Remove_error_string"), None)

    def remove_code(self, code: int) -> None:
        code = self._user(code, "Remove_error_code")
        if self.class_of[code] == code:
            raise ArgumentError(f"MPI.Remove_error_code({code}): {code} is an error class; "
                                f"use MPI.Remove_error_class")
        self._remove(code, "Remove_error_code")

    def remove_class(self, errorclass: int) -> None:
        errorclass = self._user(errorclass, "Remove_error_class")
        if self.class_of[errorclass] != errorclass:
            raise ArgumentError(f"MPI.Remove_error_class({errorclass}): {errorclass} is an "
                                f"error code; use MPI.Remove_error_code")
        codes = [c for c, k in self.class_of.items() if k == errorclass and c != errorclass]
        if codes:
            raise ArgumentError(f"MPI.Remove_error_class({errorclass}): the class still has "
                                f"the codes {codes}; remove them first")
        self._remove(errorclass, "Remove_error_class")

    def _remove(self, value: int, call: str) -> None:
        if value in self.strings:
            raise ArgumentError(f"MPI.{call}({value}): it still has a string "
                                f"({self.strings[value]!r}); MPI.Remove_error_string first")
        del self.class_of[value]


#: the longest error string (``MPI.MAX_ERROR_STRING``, the terminating NUL included)
MAX_ERROR_STRING = 512
#: this process's user error classes, codes and strings
USER_ERRORS = UserErrors()


class MinimpiError(RuntimeError):
    """Base of every minimpi error (``MPI.Exception``, a ``RuntimeError`` as in mpi4py).

    Mistakes in the arguments of a call are raised as classes that are *also* the Python
    exception mpi4py raises for them (``ValueError`` for counts, displacements and buffer
    specs, ``TypeError`` for objects that are not buffers, ``BufferError`` for read-only or
    non-contiguous buffers, ``KeyError`` for unknown type codes), so ``except ValueError``
    written for mpi4py catches them, and ``Get_error_class()`` still gives the MPI class.
    """

    error_class: int = ERR_OTHER

    def __init__(self, message: str = "", error_class: int | None = None) -> None:
        code = None
        if isinstance(message, int) and error_class is None:
            # mpi4py style: MPI.Exception(MPI.ERR_TRUNCATE); a negative code is ERR_UNKNOWN
            code = message if message >= SUCCESS else ERR_UNKNOWN
            error_class = error_class_of(code)
            message = error_string(code)
        super().__init__(message)
        if error_class is not None:
            self.error_class = error_class
        if code is not None and code != error_class:
            self._error_code = code         # a user error code (MPI.Add_error_code)

    # mpi4py's MPI.Exception interface
    def Get_error_code(self) -> int:
        return self.__dict__.get("_error_code", self.error_class)

    def Get_error_class(self) -> int:
        return self.error_class

    def Get_error_string(self) -> str:
        return error_string(self.Get_error_code())

    @property
    def error_code(self) -> int:
        return self.Get_error_code()

    @property
    def error_string(self) -> str:
        """The error class's description (mpi4py's ``Exception.error_string``)."""
        return self.Get_error_string()

    # mpi4py's MPI.Exception is also its error code: an int, compared and hashed as one
    def __eq__(self, other: object) -> bool:
        if isinstance(other, (int, MinimpiError)):
            return self.Get_error_code() == int(other)
        return NotImplemented

    def __ne__(self, other: object) -> bool:
        if isinstance(other, (int, MinimpiError)):
            return self.Get_error_code() != int(other)
        return NotImplemented

    def __lt__(self, other: object) -> bool:
        return self.Get_error_code() < int(other) if isinstance(other, (int, MinimpiError)) \
            else NotImplemented

    def __le__(self, other: object) -> bool:
        return self.Get_error_code() <= int(other) if isinstance(other, (int, MinimpiError)) \
            else NotImplemented

    def __gt__(self, other: object) -> bool:
        return self.Get_error_code() > int(other) if isinstance(other, (int, MinimpiError)) \
            else NotImplemented

    def __ge__(self, other: object) -> bool:
        return self.Get_error_code() >= int(other) if isinstance(other, (int, MinimpiError)) \
            else NotImplemented

    def __int__(self) -> int:
        return self.Get_error_code()

    def __bool__(self) -> bool:
        return self.Get_error_code() != SUCCESS

    def __hash__(self) -> int:
        return hash(self.Get_error_code())

    def __repr__(self) -> str:
        if str(self) == error_string(self.Get_error_code()):   # made from a code alone
            return f"MPI.Exception({self.Get_error_code()})"
        return f"{type(self).__name__}({str(self)!r})"


class RankError(MinimpiError):
    """An invalid source, destination or root rank."""
    error_class = ERR_RANK


class RootError(RankError):
    error_class = ERR_ROOT


class TagError(MinimpiError):
    error_class = ERR_TAG


class TruncationError(MinimpiError):
    """A message larger than the receive buffer; the data is never silently cut."""
    error_class = ERR_TRUNCATE


class TypeMismatchError(MinimpiError):
    """A received message whose byte count cannot be the receive datatype's: it ends inside
    a basic element (``Status.Get_elements`` would be ``UNDEFINED``), so the sender's type
    signature does not match the receive's. MPICH stops the job there (an assertion)."""
    error_class = ERR_TYPE


class BufferSpecError(MinimpiError, ValueError):
    """A buffer argument that is not usable (a malformed spec, a bad displacement...)."""
    error_class = ERR_BUFFER


class NotABufferError(BufferSpecError, TypeError):
    """An object that exposes no buffer (a list, a dict, a class...) where one is needed."""


class BufferAccessError(BufferSpecError, BufferError):
    """A buffer that cannot be used this way: read-only for a receive, not contiguous,
    non-native byte order, device memory..."""


class CountError(MinimpiError, ValueError):
    error_class = ERR_COUNT


class DatatypeError(MinimpiError, ValueError):
    error_class = ERR_TYPE


class UnknownDatatypeError(DatatypeError, KeyError):
    """A type code or name that maps to no MPI datatype (a ``KeyError``, as in mpi4py)."""

    def __str__(self) -> str:   # not KeyError's quoted repr
        return Exception.__str__(self)


class OpError(MinimpiError, ValueError):
    error_class = ERR_OP


class ArgumentError(MinimpiError):
    error_class = ERR_ARG


class CommError(MinimpiError):
    """A freed or null communicator, or one used in a way it does not allow."""
    error_class = ERR_COMM


class RequestError(MinimpiError):
    error_class = ERR_REQUEST


class SerializationError(MinimpiError):
    """An object that cannot be pickled (raised at the sender, before anything is sent)."""
    error_class = ERR_ARG


class AlgorithmError(MinimpiError):
    """A collective algorithm that does not exist or cannot serve this call."""
    error_class = ERR_ARG


class CollectiveMismatchError(MinimpiError):
    """Ranks of one communicator called different collectives (or incompatible arguments)."""
    error_class = ERR_OTHER


class CollectiveAbortedError(MinimpiError):
    """Another rank failed in this collective call (it rejected its arguments, or an error
    stopped it midway), so this rank's part of the call cannot complete either."""
    error_class = ERR_OTHER


class JobAbortedError(MinimpiError):
    """The job was aborted (by a rank's Abort or failure); no further MPI calls are possible."""
    error_class = ERR_OTHER


class PeerLostError(MinimpiError):
    """A peer rank's connection closed or failed while a message was in flight to or from it."""
    error_class = ERR_OTHER


class ProcFailedError(PeerLostError):
    """A process this operation needs has failed (``MPI.ERR_PROC_FAILED``; under
    ``--fault-tolerant``, where the job goes on without it)."""
    error_class = ERR_PROC_FAILED


class ProcFailedPendingError(ProcFailedError):
    """A wildcard (``ANY_SOURCE``) receive cannot tell whether its sender failed: some member
    of the communicator failed and the failure is not acknowledged yet (``Comm.Ack_failed``;
    ``MPI.ERR_PROC_FAILED_PENDING``)."""
    error_class = ERR_PROC_FAILED_PENDING


class RevokedError(MinimpiError):
    """The communicator was revoked (``Comm.Revoke``, by any member; ``MPI.ERR_REVOKED``)."""
    error_class = ERR_REVOKED


class TransportError(MinimpiError):
    error_class = ERR_OTHER


class ProtocolError(TransportError):
    """A peer sent a frame the protocol does not allow here (a clear-to-send or data frame
    for a message this rank never offered or never asked for): a fault in that peer."""
    error_class = ERR_INTERN


class AuthenticationError(MinimpiError):
    """A connection of the job's control plane failed authentication: the two ends do not
    share the job's secret."""
    error_class = ERR_OTHER


class MPITimeoutError(MinimpiError):
    """A wait that passed its time limit (startup, job timeout, deadlock detection)."""
    error_class = ERR_OTHER


class UnsupportedError(MinimpiError, NotImplementedError):
    """An MPI feature minimpi does not implement (one-sided, MPI-IO, Spawn, ...)."""
    error_class = ERR_UNSUPPORTED_OPERATION


class SpawnError(MinimpiError):
    """``Spawn`` could not start its processes (no such command, a process that ended
    before it joined, more processes than the universe holds); the message names the
    command."""
    error_class = ERR_SPAWN


class PortError(MinimpiError):
    """``Accept``/``Connect``/``Close_port`` with a port name that is not open."""
    error_class = ERR_PORT


class ServiceNameError(MinimpiError):
    """``Lookup_name``/``Unpublish_name`` of a service name nobody published."""
    error_class = ERR_NAME


class FileError(MinimpiError):
    """An MPI-IO failure (``MPI.File``): its error class says which (``ERR_NO_SUCH_FILE``,
    ``ERR_ACCESS``, ``ERR_NO_SPACE``...); the message names the file, the rank, the call,
    the offset and the operating system's error."""
    error_class = ERR_IO

"""Turning a user's buffer argument into flat numpy views the engine can send or fill.

Every uppercase call (``Send``, ``Recv``, ``Bcast``, ``Reduce``...) starts with
:func:`parse_buffer` (or :func:`parse_vbuffer` / :func:`parse_wbuffer` for the v- and
w-variants). The result names the exact elements the call uses as a flat 1-D numpy array
**over the user's memory** (never a copy), its :class:`~minimpi.data.datatypes.Datatype`,
and the count in items of that datatype.

Accepted forms (mpi4py's message rules)::

    buf                          any buffer: numpy array (any shape, 0-d too), bytearray,
                                 bytes (send only), array.array, mmap, memoryview,
                                 MPI.buffer, or an object exporting __dlpack__ or
                                 __cuda_array_interface__ (host-reachable memory)
    [buf, TYPE]   (buf, TYPE)    TYPE: MPI datatype, typecode string ('i', 'd', 'f8'...)
                                 or numpy dtype
    [buf, count]                 count items of the buffer's own datatype
    [buf, count, TYPE]
    [buf, (count, displ), TYPE]  starting displ items into the buffer (a list works too)
    [buf, count, displ, TYPE]
    None, [None, TYPE]           an empty buffer (count 0); so is [MPI.BOTTOM, 0, TYPE]

A count or displacement may be None (inferred / 0). A list or tuple must have 2 to 4 items.

Rules worth knowing:

* An explicit TYPE reinterprets the buffer's bytes (``[float64_array, MPI.INT]`` is twice
  as many INTs), as in mpi4py.
* C- and Fortran-contiguous arrays are used in **memory order**, zero-copy (as mpi4py
  does). A buffer that is not contiguous (a numpy slice with steps such as ``a[:, 0]`` or
  ``a[::-1]``, a strided memoryview, a DLPack or CUDA-array-interface export) is refused
  with ``BufferError``, exactly where mpi4py refuses it, so a program written here also
  runs on a cluster; the message says what to do instead (:func:`not_contiguous`).
* Without a count, the buffer's length must be a whole number of items of TYPE.
* Without a TYPE, the element type comes from the buffer; a numpy array in non-native
  byte order then raises ``BufferError`` (with an explicit TYPE its bytes are sent as they are).
* For derived datatypes ``array`` holds ``count * datatype.base_count`` elements of
  ``datatype.dtype``: reductions work element-wise on it unchanged. Contiguous types view
  the user's memory; for a non-contiguous type (vector, subarray, struct...) ``array`` is the
  packed items (a send) or a temporary that :meth:`BufSpec.finish` scatters into the layout
  (a receive). The layout is relative to the buffer's first byte and may reach past a view
  into the memory of the array that owns it, as a C pointer would (see ``_owner_bytes``).

Mistakes raise :mod:`minimpi.errors` classes that are also the Python exceptions mpi4py
raises: ``ValueError`` (counts, displacements, spec shape), ``TypeError`` (not a buffer),
``BufferError`` (read-only for a receive, a non-contiguous export, foreign byte order),
``KeyError`` (unknown typecode).
"""
from __future__ import annotations

import mmap
import operator
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Sequence, Tuple

import numpy as np

from ..constants import BOTTOM, IN_PLACE
from ..errors import BufferAccessError, BufferSpecError, CountError, DatatypeError, NotABufferError
from .datatypes import BYTE, CHAR, Datatype, from_numpy_dtype, held_handle, resolve_datatype
from .foreign import FORMAT_DTYPES, Exported, array_at, from_cai, from_dlpack, is_cai, is_dlpack

__all__ = ["BufSpec", "VBufSpec", "WBufSpec", "parse_buffer", "parse_vbuffer",
           "parse_wbuffer", "is_buffer", "export", "get_address", "aint_add", "aint_diff",
           "byte_view", "hold_datatypes", "not_contiguous", "persistent_buffer"]

_FORMS = ("a numpy array, bytearray, array.array, memoryview or MPI.buffer, optionally as "
          "[buf, MPI.TYPE], [buf, count, MPI.TYPE] or [buf, (count, displ), MPI.TYPE]")


class _CopyBack:
    """``finish``/``is_temporary`` of a spec whose ``_finish`` copies a temporary back."""

    _finish: Callable[[Optional[int]], None] | None

    @property
    def is_temporary(self) -> bool:
        """True when ``array`` is a temporary (the packed items of a non-contiguous
        datatype), not the user's memory."""
        return self._finish is not None

    def finish(self, nbytes: Optional[int] = None) -> None:
        """Copy received data back into the user's buffer (no-op when ``array`` is the user's
        memory). ``nbytes``: how many bytes arrived, when fewer than the buffer holds (only
        those items are scattered into a non-contiguous datatype's layout)."""
        if self._finish is not None:
            fin, self._finish = self._finish, None
            fin(nbytes)


@dataclass
class BufSpec(_CopyBack):
    """The elements one call sends from or receives into.

    ``array``: flat 1-D numpy view (dtype ``datatype.dtype``) of exactly these elements;
    ``count``: items of ``datatype``. Receivers call :meth:`finish` once the data is in.
    """

    array: np.ndarray
    datatype: Datatype
    count: int
    _finish: Callable[[], None] | None = field(default=None, repr=False)

    @property
    def nbytes(self) -> int:
        return self.count * self.datatype.size

    @property
    def view(self) -> memoryview:
        """Byte-level memoryview of the data, zero-copy; writable if the buffer is."""
        return memoryview(_bytes_of(self.array))


@dataclass
class VBufSpec(_CopyBack):
    """A buffer split in per-rank blocks (``Scatterv``, ``Gatherv``, ``Alltoallv``...).

    ``array``: flat view of the whole buffer; ``counts``/``displs``: per rank, in items of
    ``datatype``; :meth:`block` gives rank ``i``'s elements.
    """

    array: np.ndarray
    datatype: Datatype
    counts: list[int]
    displs: list[int]
    _finish: Callable[[], None] | None = field(default=None, repr=False)

    def block(self, i: int) -> np.ndarray:
        k = self.datatype.base_count
        start = self.displs[i] * k
        return self.array[start:start + self.counts[i] * k]

    def block_view(self, i: int) -> memoryview:
        return memoryview(_bytes_of(self.block(i)))

    def block_nbytes(self, i: int) -> int:
        return self.counts[i] * self.datatype.size

    @property
    def nbytes(self) -> int:
        return self.array.size * self.array.itemsize

    @property
    def total_count(self) -> int:
        return sum(self.counts)


@dataclass
class WBufSpec:
    """An ``Alltoallw`` buffer: per rank a count, a byte displacement and a datatype.

    ``blocks[i]`` is rank ``i``'s block as a flat uint8 view (``counts[i] * types[i].size``
    bytes at byte offset ``displs[i]`` of ``array``, the whole buffer's bytes; with
    ``MPI.BOTTOM`` there is no ``array`` and the displacements are absolute addresses from
    ``MPI.Get_address``).
    """

    array: Optional[np.ndarray]
    blocks: list[np.ndarray]
    counts: list[int]
    displs: list[int]
    types: list[Datatype]
    #: receive blocks of non-contiguous datatypes: (datatype, temporary, memory, origin, count)
    scatters: list = field(default_factory=list, repr=False)

    def block_nbytes(self, i: int) -> int:
        return self.counts[i] * self.types[i].size

    def finish(self) -> None:
        """Scatter the blocks received in temporaries into their datatypes' layouts."""
        todo, self.scatters = self.scatters, []
        for datatype, temp, memory, origin, count in todo:
            datatype.typemap.unpack(temp, memory, count, origin=origin)


# ---------------------------------------------------------------------------- helpers
def _bytes_of(arr: np.ndarray) -> np.ndarray:
    if arr.dtype == np.uint8:
        return arr
    if arr.size == 0:
        return np.empty(0, np.uint8)
    return arr.view(np.uint8)


def _describe(obj: Any) -> str:
    if isinstance(obj, np.ndarray):
        return f"numpy array of dtype {obj.dtype}"
    return type(obj).__name__


class _Described:
    """What a buffer is, for error messages, worked out only when a message needs it."""

    __slots__ = ("obj",)

    def __init__(self, obj: Any) -> None:
        self.obj = obj

    def __str__(self) -> str:
        return _describe(self.obj)

    __format__ = lambda self, spec: format(str(self), spec)  # noqa: E731


def is_buffer(obj: Any) -> bool:
    """Whether ``obj`` exposes its memory: the buffer protocol, a numpy array, DLPack or
    ``__cuda_array_interface__``."""
    if isinstance(obj, np.ndarray):
        return True
    try:
        memoryview(obj)
    except TypeError:
        return hasattr(obj, "__array_interface__") or is_dlpack(obj) or is_cai(obj)
    return True


def _lower(call: str) -> str:
    return call[:1].lower() + call[1:]


def _not_a_buffer(obj: Any, call: str, arg: str, where: str = "") -> NotABufferError:
    if where:
        what = (f"{arg} is a list/tuple whose first item ({type(obj).__name__} {obj!r:.40}) "
                "is not a buffer")
    else:
        what = f"{arg} is {type(obj).__name__} {obj!r:.60}, not a buffer"
    return NotABufferError(
        f"{call}: {what}; expected {_FORMS}. To communicate Python objects use the "
        f"lowercase {_lower(call)}()")


def _foreign_array(ex: Exported, *, writable: bool, call: str, arg: str
                   ) -> tuple[np.ndarray, Datatype | None]:
    """A numpy array (typed by the exported element format) over DLPack/CAI memory."""
    raw = array_at(ex, f"{call}: {arg}", writable)
    dtype = FORMAT_DTYPES.get(ex.format)
    if ex.format == "B" or dtype is None or dtype.itemsize != ex.itemsize \
            or raw.size % dtype.itemsize:
        return raw, BYTE
    return raw.view(dtype), None


def export(obj: Any, *, writable: bool, call: str = "buffer", arg: str = "buf"
           ) -> tuple[np.ndarray, Datatype | None]:
    """The user's buffer as a numpy array over its memory (never a copy), and its default
    datatype (None: derive from the array's dtype). Raises what mpi4py raises for objects
    it cannot use as a buffer."""
    if isinstance(obj, np.ndarray):
        arr = obj
        default = BYTE if getattr(obj, "_mpi_bytes", False) else None
    elif obj is None or (isinstance(obj, (str, int, float, complex, list, tuple, dict, set))
                         and not isinstance(obj, np.generic)):
        # (numpy scalars export their bytes, float64 and complex128 too, though they
        # subclass Python's float and complex)
        raise _not_a_buffer(obj, call, arg)
    else:
        try:
            mv = memoryview(obj)
        except TypeError:
            mv = None
        if mv is not None:
            fmt = mv.format
            default = None
            if isinstance(obj, (bytes, bytearray, mmap.mmap)) or fmt == "B":
                default = BYTE
            elif fmt == "c":
                default = CHAR
            try:
                arr = np.asarray(mv)
            except (ValueError, TypeError, NotImplementedError):
                # a format numpy does not parse: fall back to the raw bytes
                if not mv.contiguous:
                    raise BufferAccessError(
                        f"{call}: {arg} ({type(obj).__name__}, format {fmt!r}) is neither "
                        "contiguous nor a format numpy understands") from None
                arr = np.asarray(mv.cast("B"))
                default = BYTE
        elif is_dlpack(obj):
            arr, default = _foreign_array(from_dlpack(obj, writable, f"{call}: {arg}"),
                                          writable=writable, call=call, arg=arg)
        elif is_cai(obj):
            arr, default = _foreign_array(from_cai(obj, writable, f"{call}: {arg}"),
                                          writable=writable, call=call, arg=arg)
        elif hasattr(obj, "__array_interface__"):
            arr, default = np.asarray(obj), None
        else:
            raise _not_a_buffer(obj, call, arg)
    if writable and not arr.flags.writeable:
        raise BufferAccessError(
            f"{call}: {arg} is read-only ({_describe(obj)}); a receive needs a writable "
            "buffer such as bytearray or a numpy array")
    if arr.dtype.hasobject:
        raise NotABufferError(
            f"{call}: {arg} is a numpy array of dtype object (Python object pointers), which "
            f"cannot be communicated as a buffer; use the lowercase {_lower(call)}() for "
            f"Python objects")
    return arr, default


def not_contiguous(arr: np.ndarray, obj: Any, call: str, arg: str) -> BufferAccessError:
    """The error for a buffer whose memory is not one contiguous block (mpi4py raises
    ``BufferError`` there too), saying how to communicate such data."""
    what = (f"a strided memoryview (shape {arr.shape}, strides {arr.strides})"
            if isinstance(obj, memoryview) else
            f"a {_describe(obj)} that is not contiguous in memory (shape {arr.shape}, strides "
            f"{arr.strides}: a view such as a[:, 0] or a[::2])")
    return BufferAccessError(
        f"{call}: {arg} is {what}; MPI reads and writes one contiguous block, and mpi4py "
        f"refuses this buffer with BufferError too. Send a contiguous copy "
        f"(np.ascontiguousarray(x)), receive into a contiguous array and copy it into place "
        f"(x[...] = received), or describe the layout with a derived datatype over the "
        f"contiguous array that holds it ([a, 1, MPI.DOUBLE.Create_vector(...)])")


def _flat_memory(arr: np.ndarray, obj: Any, call: str, arg: str) -> np.ndarray:
    """A flat 1-D view of ``arr`` in memory order (it must be C- or Fortran-contiguous)."""
    if arr.flags.c_contiguous or arr.flags.f_contiguous:
        return arr.ravel(order="K")
    raise not_contiguous(arr, obj, call, arg)


def _owner_bytes(arr: np.ndarray) -> Optional[np.ndarray]:
    """The bytes from ``arr``'s first element to the end of the memory that owns it (the
    outermost base array or buffer), as a flat uint8 array; None if that is not one
    contiguous block. A datatype's layout is relative to the buffer's first byte and may
    reach past a view's own elements (``[u[0, j:], 1, column_type]`` reads column j of u,
    as C and mpi4py do); it never reaches outside the owner's memory."""
    if arr.base is None and arr.flags.c_contiguous:      # an array that owns its memory
        return arr.reshape(-1).view(np.uint8)
    owner = arr
    while isinstance(owner.base, np.ndarray):
        owner = owner.base
    if owner.base is not None and not isinstance(owner.base, np.ndarray):
        try:
            outer = np.asarray(memoryview(owner.base).cast("B"))
        except (TypeError, ValueError):
            outer = None
        if outer is not None and outer.size:
            owner = outer
    if not (owner.flags.c_contiguous or owner.flags.f_contiguous) or arr.size == 0:
        return None
    lo = owner.__array_interface__["data"][0]
    start = arr.__array_interface__["data"][0]
    whole = owner.reshape(-1, order="A").view(np.uint8)
    if not lo <= start < lo + whole.size:
        return None
    if arr.flags.writeable and not whole.flags.writeable:
        return None
    return whole[start - lo:]


def get_address(obj: Any) -> int:
    """``MPI.Get_address``: the address of a buffer's first byte (``MPI.BOTTOM`` and
    ``None``: 0)."""
    if obj is BOTTOM or obj is None:
        return 0
    if getattr(type(obj), "_mpi_bytes", False):
        # an MPI.buffer knows its address: 0 for buffer(), fromaddress(0, 0) (a dynamic
        # window's memory) and a released buffer, where numpy has a pointer of its own
        return int(obj.address)
    arr, _ = export(obj, writable=False, call="Get_address", arg="location")
    if not (arr.flags.c_contiguous or arr.flags.f_contiguous):
        raise not_contiguous(arr, obj, "Get_address", "location")
    return int(arr.__array_interface__["data"][0] or 0)


def aint_add(base: int, disp: int) -> int:
    """``MPI.Aint_add``: the address ``disp`` bytes past ``base``."""
    return operator.index(base) + operator.index(disp)


def aint_diff(addr1: int, addr2: int) -> int:
    """``MPI.Aint_diff``: the distance in bytes from ``addr2`` to ``addr1``."""
    return operator.index(addr1) - operator.index(addr2)


def _index(value: Any, what: str, call: str, arg: str) -> int:
    """An integer argument as mpi4py reads it (``operator.index``: ints, numpy integers
    and 0-d integer arrays; a float is a TypeError)."""
    if isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{call}: {arg} {what} must be an integer, got {value!r}")
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(f"{call}: {arg} {what} must be an integer, got "
                        f"{type(value).__name__} {value!r:.40}") from None


def _typed_flat(buf: Any, dtype_spec: Any, *, writable: bool, call: str, arg: str
                ) -> tuple[np.ndarray, Datatype, Any, int]:
    """The whole buffer as a flat uint8 view, the datatype to use, a description, and the
    buffer's own length in bytes (a buffer that is not contiguous is refused).

    For a non-contiguous datatype the view runs from the buffer's first byte to the end of
    the memory owning it (see :func:`_owner_bytes`), so its layout can address that memory."""
    arr, default = export(buf, writable=writable, call=call, arg=arg)
    if dtype_spec is not None:
        datatype = resolve_datatype(dtype_spec, call=call, arg=f"{arg} datatype")
    elif default is not None:
        datatype = default
    else:
        if not arr.dtype.isnative:
            raise BufferAccessError(
                f"{call}: {arg} has dtype {arr.dtype.str}, not in native byte order; give an "
                f"explicit datatype ([buf, MPI.INT]) to send its bytes as they are, or convert "
                f"it with arr.astype(arr.dtype.newbyteorder('='))")
        try:
            datatype = from_numpy_dtype(arr.dtype)
        except DatatypeError as exc:
            raise DatatypeError(f"{call}: {arg}: {exc}") from None
    flat = _flat_memory(arr, buf, call, arg)
    if not datatype.is_contiguous:
        owned = _owner_bytes(arr)
        if owned is not None:
            return owned, datatype, _Described(buf), arr.nbytes
    raw = _bytes_of(flat)
    return raw, datatype, _Described(buf), raw.size


def _is_type_spec(x: Any) -> bool:
    """Whether the second item of ``[buf, x]`` names a datatype (not a count)."""
    return isinstance(x, (Datatype, str, np.dtype)) or (isinstance(x, type) and issubclass(x, np.generic))


def _spec_items(spec: Any, call: str, arg: str) -> int:
    n = len(spec)
    if not 2 <= n <= 4:
        raise BufferSpecError(
            f"{call}: {arg} is a {type(spec).__name__} of {n} items; expected 2 to 4 items: "
            "[buf, TYPE], [buf, count, TYPE], [buf, (count, displ), TYPE] or "
            "[buf, count, displ, TYPE]")
    return n


def _split_spec(spec: Any, call: str, arg: str) -> tuple[Any, Any, Any, Any]:
    """(buf, count, displ, type) from a list/tuple spec, as mpi4py reads it."""
    n = _spec_items(spec, call, arg)
    count = displ = tspec = None
    if n == 2:
        buf, count = spec
        if _is_type_spec(count):
            count, tspec = None, count
        elif isinstance(count, (tuple, list)):
            count, displ = _pair(count, call, arg)
    elif n == 3:
        buf, count, tspec = spec
        if isinstance(count, (tuple, list)):
            count, displ = _pair(count, call, arg)
    else:
        buf, count, displ, tspec = spec
    return buf, count, displ, tspec


def _pair(x: Any, call: str, arg: str) -> tuple[Any, Any]:
    if len(x) != 2:
        raise BufferSpecError(f"{call}: {arg}: expected (count, displ), got {x!r:.60}")
    return x[0], x[1]


# ------------------------------------------------------------------------ parse_buffer
_FAST_TYPES: dict[str, Datatype] = {  # keyed by dtype.char: int64 is 'l' or 'q', distinct
    t: from_numpy_dtype(t)
    for t in ("b", "B", "h", "H", "i", "I", "l", "L", "q", "Q", "f", "d", "g", "F", "D", "G", "?")
}


def parse_buffer(spec: Any, *, writable: bool, call: str = "Send", arg: str = "buf",
                 allow_in_place: bool = False, keep: bool = False) -> BufSpec:
    """Parse a buffer argument (see the module docstring for the accepted forms).

    ``writable=True`` for receive buffers. Returns :class:`BufSpec`, or the ``IN_PLACE``
    sentinel itself when ``allow_in_place`` and the user passed ``MPI.IN_PLACE``.
    ``keep``: the receive buffer's current contents are also an input (the other buffer was
    ``MPI.IN_PLACE``), so a temporary for a non-contiguous datatype starts with them.
    """
    if type(spec) is np.ndarray and spec.flags.c_contiguous and (spec.flags.writeable or not writable):
        # fast path for the most common case: a plain contiguous array of a predefined type
        datatype = _FAST_TYPES.get(spec.dtype.char)
        if datatype is not None and spec.dtype.isnative:
            return BufSpec(spec.reshape(-1), datatype, spec.size)
    if type(spec) in (list, tuple) and len(spec) == 3:
        # fast path for halo exchanges: [array, count, non-contiguous derived datatype]
        buf, count, datatype = spec
        if type(buf) is np.ndarray and type(count) is int and type(datatype) is Datatype \
                and count >= 0 and not datatype.is_null and not datatype.is_contiguous \
                and not buf.dtype.hasobject and (buf.flags.writeable or not writable) \
                and (buf.flags.c_contiguous or buf.flags.f_contiguous):
            raw = _owner_bytes(buf)
            if raw is not None:
                datatype = datatype._handle.held or held_handle(datatype)
                return _derived_spec(raw, buf.nbytes, datatype, count, 0,
                                     writable=writable, call=call, arg=arg,
                                     desc=_Described(buf), keep=keep)
    if spec is IN_PLACE:
        if allow_in_place:
            return IN_PLACE
        raise BufferSpecError(f"{call}: MPI.IN_PLACE is not allowed as {arg}")
    if isinstance(spec, (list, tuple)):
        buf, count, displ, tspec = _split_spec(spec, call, arg)
        if buf is not None and buf is not BOTTOM and not is_buffer(buf):
            raise _not_a_buffer(buf, call, arg, "[0]")
    elif spec is None or spec is BOTTOM or is_buffer(spec):
        buf, count, displ, tspec = spec, None, None, None
    else:
        raise _not_a_buffer(spec, call, arg)

    if count is not None:
        count = _index(count, "count", call, arg)
        if count < 0:
            raise CountError(f"{call}: {arg} count must be >= 0, got {count}")
    if displ is not None:
        displ = _index(displ, "displacement", call, arg)
        if displ < 0:
            raise CountError(f"{call}: {arg} displacement must be >= 0, got {displ}")
    if buf is None or buf is BOTTOM:
        what = "None (no buffer)" if buf is None else "MPI.BOTTOM"
        if tspec is None and buf is BOTTOM:
            datatype = BYTE
        else:
            datatype = BYTE if tspec is None else resolve_datatype(tspec, call=call,
                                                                   arg=f"{arg} datatype")
        if count and buf is BOTTOM and displ is None:
            return _absolute_spec(datatype, count, writable=writable, call=call, arg=arg)
        if count:
            raise BufferSpecError(
                f"{call}: {arg} is {what} but a count of {count} was given; pass an actual "
                "buffer, or MPI.BOTTOM with a datatype whose displacements are absolute "
                "addresses (MPI.Get_address)")
        if displ:
            raise BufferSpecError(f"{call}: {arg} is {what} but a displacement of {displ} "
                                  f"was given")
        return BufSpec(np.empty(0, dtype=datatype.dtype), datatype, 0)

    raw, datatype, desc, length = _typed_flat(buf, tspec, writable=writable, call=call, arg=arg)
    if not datatype.is_contiguous:
        return _derived_spec(raw, length, datatype, count, displ or 0,
                             writable=writable, call=call, arg=arg, desc=desc, keep=keep)
    ext = datatype.size
    total = raw.size
    displ = displ or 0
    if displ and ext <= 0:
        raise DatatypeError(f"{call}: {arg}: cannot apply a displacement with datatype "
                            f"{datatype.name} of extent {ext}")
    if displ * ext > total:
        raise CountError(
            f"{call}: {arg} displacement {displ} x {datatype.name} ({ext} bytes each) "
            f"is past the end of the buffer ({total} bytes, {desc})")
    if count is None:
        rest = total - displ * ext
        if rest == 0:
            count = 0
        elif ext <= 0:
            raise DatatypeError(f"{call}: {arg}: cannot infer a count with datatype "
                                f"{datatype.name} of extent {ext}")
        elif rest % ext:
            raise DatatypeError(
                f"{call}: {arg} is {total} bytes ({desc}), not a whole number of "
                f"{datatype.name} items ({ext} bytes each); give an explicit count or a "
                "datatype whose size divides the buffer")
        else:
            count = rest // ext
    elif (displ + count) * ext > total:
        at = f" at displacement {displ}" if displ else ""
        raise CountError(
            f"{call}: {arg} count {count}{at} needs {(displ + count) * ext} bytes "
            f"({count} x {datatype.name}, {ext} bytes each) but the buffer has only "
            f"{total} bytes ({desc})")
    array = raw[displ * ext:(displ + count) * ext].view(datatype.dtype)
    return BufSpec(array, datatype, count)


def _check_items(raw: np.ndarray, datatype: Datatype, origin: int, count: int, call: str,
                 arg: str, desc: str, what: str = "") -> None:
    """``count`` items of ``datatype`` starting at byte ``origin`` must lie inside ``raw``."""
    first, end = datatype.typemap.span(count)
    if count and (origin + first < 0 or origin + end > raw.size):
        raise CountError(
            f"{call}: {arg}{what}: {count} x {datatype.name} at byte {origin} touch bytes "
            f"{origin + first} to {origin + end} of the buffer, which has {raw.size} bytes "
            f"({desc}; the datatype's true lb is {datatype.true_lb}, true extent "
            f"{datatype.true_extent}, extent {datatype.extent})")


def _derived_spec(raw: np.ndarray, length: int, datatype: Datatype, count: Optional[int],
                  displ: int, *,
                  writable: bool, call: str, arg: str, desc: Any, keep: bool = False) -> BufSpec:
    """A non-contiguous datatype: a send packs the items into contiguous bytes (one copy);
    a receive gets a contiguous temporary that :meth:`BufSpec.finish` scatters back (filled
    with the current items first when ``keep``)."""
    ext = datatype.extent
    if ext <= 0 and (count is None or displ):
        what = "infer a count" if count is None else "apply a displacement"
        raise DatatypeError(f"{call}: {arg}: cannot {what} with datatype {datatype.name} of "
                            f"extent {ext}")
    origin = displ * ext
    if count is None:   # as many whole extents as the buffer's own length holds
        rest = length - origin
        count = rest // ext if rest > 0 else 0
    _check_items(raw, datatype, origin, count, call, arg, desc)
    tmap = datatype.typemap
    if not writable:
        packed = tmap.pack(raw, count, origin=origin, call=call, checked=True)
        return BufSpec(packed.view(datatype.dtype), datatype, count)
    if keep:
        temp = np.array(tmap.pack(raw, count, origin=origin, call=call, checked=True))
    else:
        temp = np.empty(count * datatype.size, np.uint8)

    def scatter(nbytes: Optional[int] = None) -> None:
        _unpack_received(datatype, temp, raw, origin, count, nbytes)
    return BufSpec(temp.view(datatype.dtype), datatype, count, scatter)


def _absolute_spec(datatype: Datatype, count: int, *, writable: bool, call: str,
                   arg: str) -> BufSpec:
    """``[MPI.BOTTOM, count, TYPE]``: the type's displacements are absolute addresses
    (``MPI.Get_address``), typically of separate objects: each byte run is mapped and
    copied on its own (one numpy copy per run of the type map)."""
    offsets, lengths = datatype.blocks(count)
    runs = [array_at(Exported(int(o), int(n), not writable, "B", 1, 0, None),
                     f"{call}: {arg} (MPI.BOTTOM + {int(o)}, run of {datatype.name})", writable)
            for o, n in zip(offsets, lengths)]
    if not writable:
        packed = np.concatenate(runs) if runs else np.empty(0, np.uint8)
        return BufSpec(packed.view(datatype.dtype), datatype, count)
    temp = np.empty(count * datatype.size, np.uint8)

    def scatter(nbytes: Optional[int] = None) -> None:
        at, limit = 0, temp.size if nbytes is None else min(nbytes, temp.size)
        for run in runs:
            n = min(run.size, limit - at)
            if n <= 0:
                break
            run[:n] = temp[at:at + n]
            at += n
    return BufSpec(temp.view(datatype.dtype), datatype, count, scatter)


def _unpack_received(datatype: Datatype, temp: np.ndarray, raw: np.ndarray, origin: int,
                     count: int, nbytes: Optional[int]) -> None:
    """Scatter the received part of ``temp`` (``nbytes``, or all of it) into ``raw``'s
    layout: whole items, and a partial last item over the user's own data."""
    size = datatype.size
    tmap = datatype.typemap
    if nbytes is None or nbytes >= count * size or size == 0:
        tmap.unpack(temp, raw, count, origin=origin, checked=True)
        return
    whole, part = divmod(nbytes, size)
    if part:    # keep what the message did not reach of the last, partial item
        temp[whole * size + part:(whole + 1) * size] = \
            tmap.pack(raw, 1, origin=origin + whole * datatype.extent)[part:]
        whole += 1
    tmap.unpack(temp, raw, whole, origin=origin)


# ----------------------------------------------------------------------- parse_vbuffer
def _is_seq(x: Any) -> bool:
    return isinstance(x, (list, tuple, np.ndarray, range))


def _is_integral(x: Any) -> bool:
    """mpi4py's rule: an index-like value that is not a sized sequence (a 0-d integer
    numpy array counts as an int)."""
    if isinstance(x, (bool, np.bool_)):
        return False
    if isinstance(x, np.ndarray):
        return x.ndim == 0 and x.dtype.kind in "iu"
    try:
        operator.index(x)
    except TypeError:
        return False
    return True


def int_list(x: Any, what: str, size: int, call: str, arg: str) -> list[int]:
    """One integer per rank: a sequence of ``size`` of them, or one for every rank."""
    if _is_integral(x):
        return [operator.index(x)] * size
    try:
        items = list(x)
    except TypeError:
        raise TypeError(
            f"{call}: {arg} {what} must be a sequence of {size} integers (one per rank) or "
            f"one integer, got {type(x).__name__} {x!r:.60}") from None
    out = [_index(v, what[:-1] if what.endswith("s") else what, call, arg) for v in items]
    if len(out) != size:
        raise CountError(
            f"{call}: {arg} has {len(out)} {what} but the communicator has {size} ranks; "
            f"give exactly one per rank")
    for i, v in enumerate(out):
        if v < 0:
            raise CountError(f"{call}: {arg} {what}[{i}] is {v}; it must be >= 0")
    return out


def _even_counts(total: int, size: int) -> list[int]:
    base, extra = divmod(total, size)
    return [base + 1 if i < extra else base for i in range(size)]


def _running_sum(counts: Sequence[int]) -> list[int]:
    displs, acc = [], 0
    for c in counts:
        displs.append(acc)
        acc += c
    return displs


def parse_vbuffer(spec: Any, comm_size: int, *, writable: bool, call: str = "Scatterv",
                  arg: str = "sendbuf", allow_in_place: bool = False,
                  keep: bool = False) -> VBufSpec:
    """Parse a v-variant buffer: ``[buf, (counts, displs), TYPE]``, ``[buf, counts, TYPE]``,
    ``[buf, counts, displs, TYPE]``, ``[buf, counts]``, ``[buf, TYPE]`` or ``buf``.

    As in mpi4py: a *tuple* in second place is ``(counts, displs)``; omitted counts split
    the buffer's items as evenly as possible over ``comm_size`` (the first ``n % size``
    ranks take one extra); a single int count means that count for every rank; omitted
    displs are the running sum of the counts; a single int displ ``d`` means strided blocks
    at ``0, d, 2d, ...``.
    """
    if spec is IN_PLACE:
        if allow_in_place:
            return IN_PLACE
        raise BufferSpecError(f"{call}: MPI.IN_PLACE is not allowed as {arg}")
    counts = displs = tspec = None
    if isinstance(spec, (list, tuple)):
        n = _spec_items(spec, call, arg)
        if n == 2:
            buf, x = spec
            if _is_type_spec(x):
                tspec = x
            elif isinstance(x, tuple):
                counts, displs = _pair(x, call, arg)
            else:
                counts = x
        elif n == 3:
            buf, counts, tspec = spec
            if isinstance(counts, tuple):
                counts, displs = _pair(counts, call, arg)
        else:
            buf, counts, displs, tspec = spec
        if buf is not None and buf is not BOTTOM and not is_buffer(buf):
            raise _not_a_buffer(buf, call, arg, "[0]")
    elif spec is None or spec is BOTTOM or is_buffer(spec):
        buf = spec
    else:
        raise _not_a_buffer(spec, call, arg)

    if buf is None or buf is BOTTOM:
        datatype = BYTE if tspec is None else resolve_datatype(tspec, call=call, arg=f"{arg} datatype")
        array = np.empty(0, dtype=datatype.dtype)
        n_items = 0
    else:
        raw, datatype, desc, length = _typed_flat(buf, tspec, writable=writable, call=call,
                                                  arg=arg)
        if not datatype.is_contiguous:
            return _derived_vspec(raw, length, datatype, counts, displs, comm_size,
                                  writable=writable, call=call, arg=arg, desc=desc, keep=keep)
        ext = datatype.size
        n_items = raw.size // ext if ext else 0
        if counts is None and raw.size and (ext <= 0 or raw.size % ext):
            raise DatatypeError(
                f"{call}: {arg} is {raw.size} bytes ({desc}), not a whole number of "
                f"{datatype.name} items ({ext} bytes each)")
        array = raw[:n_items * ext].view(datatype.dtype)

    counts_l, displs_l = _counts_displs(counts, displs, n_items, comm_size, call, arg)
    for i, (c, d) in enumerate(zip(counts_l, displs_l)):
        if c and d + c > n_items:
            where = "MPI.BOTTOM (no buffer)" if buf is BOTTOM else "the buffer"
            raise CountError(
                f"{call}: {arg} block for rank {i} (displ {d}, count {c}) ends at item {d + c} "
                f"but {where} holds only {n_items} {datatype.name} items")
    return VBufSpec(array, datatype, counts_l, displs_l)


def _counts_displs(counts: Any, displs: Any, n_items: int, comm_size: int, call: str,
                   arg: str) -> tuple[list[int], list[int]]:
    """Per-rank counts and displacements of a v-buffer, as mpi4py reads them."""
    if counts is None:
        counts_l = _even_counts(n_items, comm_size)
    else:
        counts_l = int_list(counts, "counts", comm_size, call, arg)
    if displs is None:
        displs_l = _running_sum(counts_l)
    elif _is_integral(displs):
        stride = operator.index(displs)
        if stride < 0:
            raise CountError(f"{call}: {arg} displacement stride must be >= 0, got {stride}")
        displs_l = [i * stride for i in range(comm_size)]
    else:
        displs_l = int_list(displs, "displs", comm_size, call, arg)
    return counts_l, displs_l


def _derived_vspec(raw: np.ndarray, length: int, datatype: Datatype, counts: Any, displs: Any,
                   comm_size: int, *,
                   writable: bool, call: str, arg: str, desc: Any,
                   keep: bool = False) -> VBufSpec:
    """A v-buffer of a non-contiguous datatype: the blocks are packed into (or received in)
    a contiguous array where item ``j`` sits at ``j * size`` bytes, so block ``i`` is still
    ``displs[i]`` items from its start; :meth:`VBufSpec.finish` scatters received blocks."""
    ext, size = datatype.extent, datatype.size
    if ext <= 0 and counts is None:
        raise DatatypeError(f"{call}: {arg}: cannot split the buffer into counts with "
                            f"datatype {datatype.name} of extent {ext}; give the counts")
    n_items = length // ext if ext > 0 else 0
    counts_l, displs_l = _counts_displs(counts, displs, n_items, comm_size, call, arg)
    used = [(c, d) for c, d in zip(counts_l, displs_l) if c]
    for i, (c, d) in enumerate(zip(counts_l, displs_l)):
        _check_items(raw, datatype, d * ext, c, call, arg, desc, f" block for rank {i}")
    n_needed = max((d + c for c, d in used), default=0)
    tmap = datatype.typemap
    temp = np.empty(n_needed * size, np.uint8)
    if not writable or keep:     # a send, or a receive whose current blocks are an input
        for c, d in used:
            temp[d * size:(d + c) * size] = tmap.pack(raw, c, origin=d * ext, call=call)
    if not writable:
        return VBufSpec(temp.view(datatype.dtype), datatype, counts_l, displs_l)

    def scatter(_nbytes: Optional[int] = None) -> None:
        for c, d in used:
            tmap.unpack(temp[d * size:(d + c) * size], raw, c, origin=d * ext, call=call)
    return VBufSpec(temp.view(datatype.dtype), datatype, counts_l, displs_l, scatter)


# ----------------------------------------------------------------------- parse_wbuffer
def parse_wbuffer(spec: Any, comm_size: int, *, writable: bool, call: str = "Alltoallw",
                  arg: str = "sendbuf") -> WBufSpec:
    """Parse an ``Alltoallw`` buffer: ``[buf, TYPES]`` (one item of each type at offset 0),
    ``[buf, (counts, displs), TYPES]`` or ``[buf, counts, displs, TYPES]``.

    ``displs`` are in **bytes**; ``TYPES`` is one datatype per rank. With ``MPI.BOTTOM`` as
    ``buf`` the displacements are absolute addresses (``MPI.Get_address``), each block then
    must be host memory this process can reach.
    """
    if not isinstance(spec, (list, tuple)):
        raise NotABufferError(f"{call}: {arg} must be a list or tuple [buf, counts, displs, "
                              f"TYPES], got {type(spec).__name__}")
    n = _spec_items(spec, call, arg)
    counts = displs = None
    if n == 2:
        buf, types = spec
    elif n == 3:
        buf, cd, types = spec
        counts, displs = _pair(cd, call, arg)
    else:
        buf, counts, displs, types = spec
    if buf is BOTTOM:
        if counts is None:
            raise BufferSpecError(f"{call}: {arg}: MPI.BOTTOM needs explicit counts")
        if displs is None:
            raise BufferSpecError(f"{call}: {arg}: MPI.BOTTOM needs explicit displacements")
        raw = None
    elif buf is None:
        raw = np.empty(0, np.uint8)
    else:
        arr, _ = export(buf, writable=writable, call=call, arg=arg)
        if not (arr.flags.c_contiguous or arr.flags.f_contiguous):
            raise not_contiguous(arr, buf, call, arg)
        raw = _bytes_of(arr.ravel(order="K"))
    if counts is None and displs is None:
        counts_l, displs_l = [1] * comm_size, [0] * comm_size
    else:
        counts_l = int_list(counts, "counts", comm_size, call, arg)
        displs_l = int_list(displs, "displs", comm_size, call, arg)
    if isinstance(types, Datatype) or not _is_seq(types):
        raise TypeError(f"{call}: {arg} types must be a sequence of {comm_size} MPI "
                        f"datatypes (one per rank), got {type(types).__name__}")
    if len(types) != comm_size:
        raise CountError(f"{call}: {arg} has {len(types)} types but the communicator has "
                         f"{comm_size} ranks")
    types_l = []
    for i, t in enumerate(types):
        if not isinstance(t, Datatype):
            raise TypeError(f"{call}: {arg} types[{i}] is {type(t).__name__} {t!r:.40}, "
                            f"not an MPI datatype")
        types_l.append(resolve_datatype(t, call=call, arg=f"{arg} types[{i}]"))
    blocks: list[np.ndarray] = []
    scatters: list = []
    for i, (c, d, t) in enumerate(zip(counts_l, displs_l, types_l)):
        nbytes = c * t.size
        if not t.is_contiguous:
            blocks.append(_derived_wblock(raw, t, c, d, writable, scatters, call,
                                          f"{arg} block for rank {i}"))
            continue
        if raw is not None:
            if nbytes and d + nbytes > raw.size:
                raise CountError(
                    f"{call}: {arg} block for rank {i} ({c} x {t.name} at byte {d}) ends at "
                    f"byte {d + nbytes} but the buffer has only {raw.size} bytes")
            blocks.append(raw[d:d + nbytes])
        else:
            readonly = not writable
            ex = Exported(d, nbytes, readonly, "B", 1, 0, None)
            blocks.append(array_at(ex, f"{call}: {arg} block for rank {i} (MPI.BOTTOM + {d})",
                                   writable))
    if any(not t.is_contiguous for t in types_l):
        raw = None     # blocks are packed copies / temporaries, not slices of the buffer
    return WBufSpec(raw, blocks, counts_l, displs_l, types_l, scatters)


def _derived_wblock(raw: Optional[np.ndarray], datatype: Datatype, count: int, displ: int,
                    writable: bool, scatters: list, call: str, what: str) -> np.ndarray:
    """One Alltoallw block of a non-contiguous datatype at byte ``displ`` (an absolute
    address with ``MPI.BOTTOM``): packed for a send; for a receive a temporary that
    :meth:`WBufSpec.finish` scatters."""
    first, end = datatype.typemap.span(count)
    if raw is None:       # MPI.BOTTOM: map just the bytes the items touch
        memory = array_at(Exported(displ + first, end - first, not writable, "B", 1, 0, None),
                          f"{call}: {what} (MPI.BOTTOM + {displ})", writable) \
            if count else np.empty(0, np.uint8)
        origin = -first
    else:
        memory, origin = raw, displ
        _check_items(raw, datatype, displ, count, call, what, "the buffer")
    if not writable:
        return datatype.typemap.pack(memory, count, origin=origin, call=call)
    temp = np.empty(count * datatype.size, np.uint8)
    scatters.append((datatype, temp, memory, origin, count))
    return temp


def persistent_buffer(spec: Any, call: str, arg: str = "buf") -> Any:
    """A ``*_init`` call's buffer argument as its persistent request keeps it: refused at
    once when its memory is not contiguous (mpi4py checks the buffer at ``*_init`` too),
    with its datatypes held (:func:`hold_datatypes`); the rest is checked at each Start."""
    buf = spec[0] if type(spec) in (list, tuple) and spec else spec
    if isinstance(buf, np.ndarray):
        if not (buf.flags.c_contiguous or buf.flags.f_contiguous):
            raise not_contiguous(buf, buf, call, arg)
    elif isinstance(buf, memoryview) and not buf.contiguous:
        raise not_contiguous(np.asarray(buf), buf, call, arg)
    return hold_datatypes(spec)


def hold_datatypes(spec: Any) -> Any:
    """``spec`` (a buffer argument) with each usable datatype handle in it replaced by the
    handle operations hold (:func:`~minimpi.data.datatypes.held_handle`): what a persistent
    request keeps at ``*_init``, so that every ``Start`` works after the program freed its
    handle (MPI binds the datatype at ``*_init``). Anything else is returned as it is."""
    if isinstance(spec, Datatype):
        return held_handle(spec) if not spec.is_null else spec
    if type(spec) in (list, tuple):
        return type(spec)(hold_datatypes(item) if isinstance(item, (Datatype, list, tuple))
                          else item for item in spec)
    return spec


def byte_view(buf: Any, writable: bool, call: str) -> Tuple[memoryview, Optional["BufSpec"]]:
    """The bytes of a point-to-point buffer argument, and its parsed spec when one was needed.

    Plain contiguous numpy arrays and bytearrays (the common case) take a fast path; every
    other form goes through :func:`parse_buffer` (whose spec knows how to copy a temporary
    back into a non-contiguous receive buffer).
    """
    kind = type(buf)
    if kind is np.ndarray and buf.dtype.isnative:
        # (a memoryview answers contiguity and writability cheaper than numpy's flags)
        try:
            view = memoryview(buf)
            if view.c_contiguous and not (writable and view.readonly):
                return view.cast("B"), None
        except (TypeError, ValueError):   # a dtype the buffer protocol cannot express
            pass
    elif kind is bytearray:
        return memoryview(buf), None
    spec = parse_buffer(buf, writable=writable, call=call, arg="buf")
    return spec.view, spec

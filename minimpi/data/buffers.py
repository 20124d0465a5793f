"""Turning a user's buffer argument into flat numpy views the engine can send or fill.

Every uppercase call (``Send``, ``Recv``, ``Bcast``, ``Reduce``...) starts with
:func:`parse_buffer` (or :func:`parse_vbuffer` for the v-variants). The result names the
exact elements the call uses as a flat 1-D numpy array **over the user's memory** (no copy
for contiguous input), its :class:`~minimpi.data.datatypes.Datatype`, and the count in items of
that datatype.

Accepted forms (as mpi4py accepts them)::

    buf                          any buffer: numpy array (any shape, 0-d too), bytearray,
                                 bytes (send only), array.array, mmap, memoryview
    [buf, TYPE]   (buf, TYPE)    TYPE: MPI datatype, typecode string ('i', 'd', 'f8'...)
                                 or numpy dtype
    [buf, count]                 count items of the buffer's own datatype
    [buf, count, TYPE]
    [buf, (count, displ), TYPE]  starting displ items into the buffer
    [buf, count, displ, TYPE]
    None, [None, TYPE]           an empty buffer (count 0)

Rules worth knowing:

* An explicit TYPE reinterprets the buffer's bytes (``[float64_array, MPI.INT]`` is twice
  as many INTs), as in mpi4py.
* C- and Fortran-contiguous arrays are used in **memory order**, zero-copy (as mpi4py
  does). Non-contiguous arrays (slices with steps, transposed views) are accepted where
  mpi4py refuses them: a send uses a C-order copy; a receive fills a C-order temporary
  that :meth:`BufSpec.finish` copies back into the user's array.
* Without a count, the buffer's length must be a whole number of items of TYPE.
* For derived (contiguous) datatypes ``array`` holds ``count * datatype.base_count``
  elements of the base dtype: reductions work element-wise on it unchanged.
"""
from __future__ import annotations

import mmap
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Sequence, Tuple

import numpy as np

from ..constants import IN_PLACE
from ..errors import BufferSpecError, CountError, DatatypeError
from .datatypes import BYTE, CHAR, Datatype, from_numpy_dtype, resolve_datatype

__all__ = ["BufSpec", "VBufSpec", "parse_buffer", "parse_vbuffer", "is_buffer"]

_FORMS = ("a numpy array, bytearray, array.array or memoryview, optionally as "
          "[buf, MPI.TYPE], [buf, count, MPI.TYPE] or [buf, (count, displ), MPI.TYPE]")


class _CopyBack:
    """``finish``/``is_temporary`` of a spec whose ``_finish`` copies a temporary back."""

    _finish: Callable[[], None] | None

    @property
    def is_temporary(self) -> bool:
        """True when ``array`` is a copy (non-contiguous user array), not the user's memory."""
        return self._finish is not None

    def finish(self) -> None:
        """Copy received data back into a non-contiguous user array (no-op otherwise)."""
        if self._finish is not None:
            fin, self._finish = self._finish, None
            fin()


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


def is_buffer(obj: Any) -> bool:
    """Whether ``obj`` exposes the buffer protocol (or is a numpy array)."""
    if isinstance(obj, np.ndarray):
        return True
    try:
        memoryview(obj)
    except TypeError:
        return hasattr(obj, "__array_interface__")
    return True


def _lower(call: str) -> str:
    return call[:1].lower() + call[1:]


def _not_a_buffer(obj: Any, call: str, arg: str, where: str = "") -> BufferSpecError:
    if where:
        what = (f"{arg} is a list/tuple whose first item ({type(obj).__name__} {obj!r:.40}) "
                "is not a buffer")
    else:
        what = f"{arg} is {type(obj).__name__} {obj!r:.60}, not a buffer"
    return BufferSpecError(
        f"{call}: {what}; expected {_FORMS}. To communicate Python objects use the "
        f"lowercase {_lower(call)}()")


def _to_array(obj: Any, *, writable: bool, call: str, arg: str
              ) -> tuple[np.ndarray, Datatype | None]:
    """The user's buffer as a numpy array over its memory, and its default datatype
    (None: derive from the array's dtype)."""
    if isinstance(obj, np.ndarray):
        arr = np.asarray(obj)
        default = None
    elif isinstance(obj, (str, int, float, complex, list, tuple, dict, set)) or obj is None:
        raise _not_a_buffer(obj, call, arg)
    else:
        try:
            mv = memoryview(obj)
        except TypeError:
            if hasattr(obj, "__array_interface__"):
                arr, default = np.asarray(obj), None
                mv = None
            else:
                raise _not_a_buffer(obj, call, arg) from None
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
                    raise BufferSpecError(
                        f"{call}: {arg} ({type(obj).__name__}, format {fmt!r}) is neither "
                        "contiguous nor a format numpy understands") from None
                arr = np.asarray(mv.cast("B"))
                default = BYTE
    if writable and not arr.flags.writeable:
        raise BufferSpecError(
            f"{call}: {arg} is read-only ({_describe(obj)}); a receive needs a writable "
            "buffer such as bytearray or a numpy array")
    if arr.dtype.hasobject:
        raise BufferSpecError(
            f"{call}: {arg} is a numpy array of dtype object (Python object pointers), which "
            f"cannot be communicated as a buffer; use the lowercase {_lower(call)}() for Python objects")
    return arr, default


def _flat_memory(arr: np.ndarray, *, writable: bool) -> tuple[np.ndarray, Callable[[], None] | None]:
    """A flat 1-D view of ``arr`` in memory order, or of a C-order copy if it is not
    contiguous (plus the copy-back for receives)."""
    if arr.flags.c_contiguous or arr.flags.f_contiguous:
        return arr.ravel(order="K"), None
    tmp = np.ascontiguousarray(arr)
    finish = None
    if writable:
        def finish(target=arr, tmp=tmp) -> None:
            target[...] = tmp
    return tmp.reshape(-1), finish


def _as_int(value: Any, what: str, call: str, arg: str) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise CountError(f"{call}: {arg} {what} must be an integer, got {type(value).__name__} {value!r:.40}")
    return int(value)


def _typed_flat(buf: Any, dtype_spec: Any, *, writable: bool, call: str, arg: str
                ) -> tuple[np.ndarray, Datatype, Callable[[], None] | None, str]:
    """The whole buffer as a flat uint8 view, the datatype to use, and the copy-back."""
    arr, default = _to_array(buf, writable=writable, call=call, arg=arg)
    if dtype_spec is not None:
        datatype = resolve_datatype(dtype_spec, call=call, arg=f"{arg} datatype")
    elif default is not None:
        datatype = default
    else:
        try:
            datatype = from_numpy_dtype(arr.dtype)
        except DatatypeError as exc:
            raise DatatypeError(f"{call}: {arg}: {exc}") from None
    flat, finish = _flat_memory(arr, writable=writable)
    return _bytes_of(flat), datatype, finish, _describe(buf)


def _is_type_spec(x: Any) -> bool:
    """Whether the second item of ``[buf, x]`` names a datatype (not a count)."""
    return isinstance(x, (Datatype, str, np.dtype)) or (isinstance(x, type) and issubclass(x, np.generic))


def _split_spec(spec: Any, call: str, arg: str) -> tuple[Any, Any, Any, Any]:
    """(buf, count-ish, displ-ish, type) from a list/tuple spec."""
    n = len(spec)
    if n == 1:
        return spec[0], None, None, None
    if n == 2:
        buf, x = spec
        if _is_type_spec(x):
            return buf, None, None, x
        if isinstance(x, tuple) and len(x) == 2:
            return buf, x[0], x[1], None
        return buf, x, None, None
    if n == 3:
        buf, x, t = spec
        if isinstance(x, tuple) and len(x) == 2:
            return buf, x[0], x[1], t
        return buf, x, None, t
    if n == 4:
        return spec[0], spec[1], spec[2], spec[3]
    raise BufferSpecError(
        f"{call}: {arg} is a {type(spec).__name__} of {n} items; expected a buffer or "
        "[buf, TYPE], [buf, count, TYPE], [buf, (count, displ), TYPE] or [buf, count, displ, TYPE]")


# ------------------------------------------------------------------------ parse_buffer
_FAST_TYPES: dict[str, Datatype] = {  # keyed by dtype.char: int64 is 'l' or 'q', distinct
    t: from_numpy_dtype(t)
    for t in ("b", "B", "h", "H", "i", "I", "l", "L", "q", "Q", "f", "d", "g", "F", "D", "G", "?")
}


def parse_buffer(spec: Any, *, writable: bool, call: str = "Send", arg: str = "buf",
                 allow_in_place: bool = False) -> BufSpec:
    """Parse a buffer argument (see the module docstring for the accepted forms).

    ``writable=True`` for receive buffers. Returns :class:`BufSpec`, or the ``IN_PLACE``
    sentinel itself when ``allow_in_place`` and the user passed ``MPI.IN_PLACE``.
    """
    if type(spec) is np.ndarray and spec.flags.c_contiguous and (spec.flags.writeable or not writable):
        # fast path for the most common case: a plain contiguous array of a predefined type
        datatype = _FAST_TYPES.get(spec.dtype.char)
        if datatype is not None and spec.dtype.isnative:
            return BufSpec(spec.reshape(-1), datatype, spec.size)
    if spec is IN_PLACE:
        if allow_in_place:
            return IN_PLACE
        raise BufferSpecError(f"{call}: MPI.IN_PLACE is not allowed as {arg}")
    if isinstance(spec, (list, tuple)):
        if len(spec) == 0:
            raise BufferSpecError(f"{call}: {arg} is an empty {type(spec).__name__}; expected {_FORMS}")
        buf, count, displ, tspec = _split_spec(spec, call, arg)
        if buf is not None and not is_buffer(buf):
            raise _not_a_buffer(buf, call, arg, "[0]")
    else:
        buf, count, displ, tspec = spec, None, None, None

    if buf is None:
        datatype = BYTE if tspec is None else resolve_datatype(tspec, call=call, arg=f"{arg} datatype")
        if count not in (None, 0) or displ not in (None, 0):
            raise BufferSpecError(
                f"{call}: {arg} is None (no buffer) but a count of {count} was given; "
                "pass an actual buffer (absolute addresses/MPI.BOTTOM are not supported)")
        return BufSpec(np.empty(0, dtype=datatype.dtype), datatype, 0)

    raw, datatype, finish, desc = _typed_flat(buf, tspec, writable=writable, call=call, arg=arg)
    ext = datatype.size
    total = raw.size
    displ = 0 if displ is None else _as_int(displ, "displacement", call, arg)
    if displ < 0:
        raise CountError(f"{call}: {arg} displacement must be >= 0, got {displ}")
    if count is None:
        if ext == 0:
            count = 0
        else:
            rest = total - displ * ext
            if rest < 0:
                raise CountError(
                    f"{call}: {arg} displacement {displ} x {datatype.name} ({ext} bytes each) "
                    f"is past the end of the buffer ({total} bytes, {desc})")
            if rest % ext:
                raise DatatypeError(
                    f"{call}: {arg} is {total} bytes ({desc}), not a whole number of "
                    f"{datatype.name} items ({ext} bytes each); give an explicit count or a "
                    "datatype whose size divides the buffer")
            count = rest // ext
    else:
        count = _as_int(count, "count", call, arg)
        if count < 0:
            raise CountError(f"{call}: {arg} count must be >= 0, got {count}")
        if (displ + count) * ext > total:
            at = f" at displacement {displ}" if displ else ""
            raise CountError(
                f"{call}: {arg} count {count}{at} needs {(displ + count) * ext} bytes "
                f"({count} x {datatype.name}, {ext} bytes each) but the buffer has only "
                f"{total} bytes ({desc})")
    array = raw[displ * ext:(displ + count) * ext].view(datatype.dtype)
    return BufSpec(array, datatype, count, finish)


# ----------------------------------------------------------------------- parse_vbuffer
def _is_seq(x: Any) -> bool:
    return isinstance(x, (list, tuple, np.ndarray, range))


def _int_list(x: Any, what: str, size: int, call: str, arg: str) -> list[int]:
    if isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_)):
        return [int(x)] * size
    if not _is_seq(x):
        raise CountError(
            f"{call}: {arg} {what} must be a sequence of {size} integers (one per rank), "
            f"got {type(x).__name__} {x!r:.60}")
    out = [_as_int(v, what[:-1] if what.endswith("s") else what, call, arg) for v in x]
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
                  arg: str = "sendbuf", allow_in_place: bool = False) -> VBufSpec:
    """Parse a v-variant buffer: ``[buf, (counts, displs), TYPE]``, ``[buf, (counts, None),
    TYPE]``, ``[buf, counts, TYPE]``, ``[buf, counts, displs, TYPE]``, ``[buf, counts]``,
    ``[buf, TYPE]`` or ``buf``.

    Omitted counts split the buffer's items as evenly as possible over ``comm_size`` (the
    first ``n % size`` ranks take one extra); omitted displs are the running sum of counts.
    A single int count means that count for every rank.
    """
    if spec is IN_PLACE:
        if allow_in_place:
            return IN_PLACE
        raise BufferSpecError(f"{call}: MPI.IN_PLACE is not allowed as {arg}")
    counts = displs = tspec = None
    if isinstance(spec, (list, tuple)):
        n = len(spec)
        if n == 1:
            buf = spec[0]
        elif n == 2:
            buf, x = spec
            if _is_type_spec(x):
                tspec = x
            elif _is_counts_displs(x):
                counts, displs = x
            else:
                counts = x
        elif n == 3:
            buf, x, tspec = spec
            if _is_counts_displs(x):
                counts, displs = x
            else:
                counts = x
        elif n == 4:
            buf, counts, displs, tspec = spec
        else:
            raise BufferSpecError(
                f"{call}: {arg} is a {type(spec).__name__} of {n} items; expected a buffer or "
                "[buf, (counts, displs), TYPE], [buf, counts, TYPE], [buf, counts] or [buf, TYPE]")
        if buf is not None and not is_buffer(buf):
            raise _not_a_buffer(buf, call, arg, "[0]")
    else:
        buf = spec

    if buf is None:
        datatype = BYTE if tspec is None else resolve_datatype(tspec, call=call, arg=f"{arg} datatype")
        array = np.empty(0, dtype=datatype.dtype)
        finish = None
        n_items = 0
    else:
        raw, datatype, finish, desc = _typed_flat(buf, tspec, writable=writable, call=call, arg=arg)
        ext = datatype.size
        n_items = raw.size // ext if ext else 0
        if counts is None and ext and raw.size % ext:
            raise DatatypeError(
                f"{call}: {arg} is {raw.size} bytes ({desc}), not a whole number of "
                f"{datatype.name} items ({ext} bytes each)")
        array = raw[:n_items * ext].view(datatype.dtype)

    if counts is None:
        counts_l = _even_counts(n_items, comm_size)
    else:
        counts_l = _int_list(counts, "counts", comm_size, call, arg)
    if displs is None:
        displs_l = _running_sum(counts_l)
    else:
        displs_l = _int_list(displs, "displs", comm_size, call, arg)
    for i, (c, d) in enumerate(zip(counts_l, displs_l)):
        if d + c > n_items:
            raise CountError(
                f"{call}: {arg} block for rank {i} (displ {d}, count {c}) ends at item {d + c} "
                f"but the buffer holds only {n_items} {datatype.name} items")
    return VBufSpec(array, datatype, counts_l, displs_l, finish)


def _is_counts_displs(x: Any) -> bool:
    """Whether a 2-tuple is (counts, displs) rather than a counts sequence of 2 ints."""
    if not (isinstance(x, tuple) and len(x) == 2):
        return False
    a, b = x
    return (a is None or _is_seq(a)) or (b is None or _is_seq(b))


def byte_view(buf: Any, writable: bool, call: str) -> Tuple[memoryview, Optional["BufSpec"]]:
    """The bytes of a point-to-point buffer argument, and its parsed spec when one was needed.

    Plain contiguous numpy arrays and bytearrays (the common case) take a fast path; every
    other form goes through :func:`parse_buffer` (whose spec knows how to copy a temporary
    back into a non-contiguous receive buffer).
    """
    kind = type(buf)
    if kind is np.ndarray:
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

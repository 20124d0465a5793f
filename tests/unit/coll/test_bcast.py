"""Bcast/bcast/Ibcast: every registered algorithm x p = 1..8 x every root x sizes from empty
to segmented, on several dtypes and strided layouts, Python objects, several outstanding
Ibcasts, an explicit ``segment=`` and refusals.

Every rank must end with the root's data, and nothing of its array outside the layout it
passed may change. A strided layout is passed as mpi4py takes one: a derived datatype over
the contiguous array that holds it (a strided numpy view itself is refused with
BufferError, as mpi4py refuses it). All on the in-process transport (run_threads).
"""
from __future__ import annotations

import dataclasses
import functools
import inspect

import numpy as np
import pytest
from coll_helpers import algs, rank_error, rooted

from minimpi.coll.registry import algorithms
from minimpi.data.datatypes import DOUBLE, INT
from minimpi.errors import AlgorithmError
from minimpi.runtime.inproc import run_threads
from minimpi.transports.frames import EAGER, RTS

BCAST = algs("bcast")
OBJECTS = algs("bcast", objects=True)
#: algorithms with a ``segment=`` argument (they pipeline; default: the cost model's)
SEGMENTING = [name for name, a in algorithms("bcast").items()
              if "segment" in inspect.signature(a.function).parameters]

EVERY_ROOT = rooted((p, root) for p in range(1, 9) for root in range(p))

#: the cost model's segment for the "segmented" size (MINIMPI_COST_SEGMENT): 36 bytes cut
#: through elements of 8 and 16 bytes
SEGMENT = 36
#: element counts by name (p: the communicator size); "segmented" is 2 (int8) to 20
#: (complex128) segments of SEGMENT bytes
COUNTS = {"empty": lambda p: 0, "one": lambda p: 1, "p-1": lambda p: p - 1,
          "odd": lambda p: 13, "segmented": lambda p: 45}

#: what a rank passes to Bcast: contiguous arrays of several dtypes and strided layouts
#: (the items of the numpy view named, passed as a derived datatype: see ``holding``)
LAYOUTS = ["int8", "int32", "float64", "complex128",
           "float64[1::2]", "int32[:, 1] of (n, 3)", "float64[::-1]"]
STRIDED = LAYOUTS[4:]


def root_data(root: int, n: int, dtype) -> np.ndarray:
    """What ``root`` broadcasts: n values that depend on the root and the position and are
    never -1 (the other ranks' fill)."""
    values = (np.arange(n) * 7 + 31 * root + 1) % 113
    data = values.astype(dtype)
    if data.dtype.kind == "c":
        data = data + 1j * values[::-1]
    return data


def holding(layout: str, n: int, root=None, strided_view: bool = False):
    """(whole, message): a rank's array (all -1) and what it passes to Bcast for the n items
    of the layout: the array itself, or for a strided layout the contiguous array with a
    derived datatype that picks those items (``strided_view``: the strided numpy view
    itself). With ``root``, the layout holds root_data(root) - the root's, and everyone's
    after."""
    if layout == "float64[1::2]":
        whole = np.full(2 * n, -1.0)
        view = whole[1::2]
        message = [whole[1:], 1, DOUBLE.Create_vector(n, 1, 2).Commit()]
    elif layout == "int32[:, 1] of (n, 3)":
        whole = np.full((n, 3), -1, np.int32)
        view = whole[:, 1]
        message = [whole.reshape(-1)[1:], 1, INT.Create_vector(n, 1, 3).Commit()]
    elif layout == "float64[::-1]":
        whole = np.full(n, -1.0)
        view = whole[::-1]
        message = [whole, 1, DOUBLE.Create_indexed([1] * n, list(range(n - 1, -1, -1))).Commit()]
    else:
        whole = np.full(n, -1, layout)
        view = message = whole
    if root is not None:
        view[...] = root_data(root, n, view.dtype)
    return whole, view if strided_view else message


def bcast_layouts(comm, root: int, alg, counts, layouts=LAYOUTS):
    """Bcast each (count, layout) in turn; returns the wholes in that order."""
    wholes = []
    for n in counts:
        for layout in layouts:
            whole, message = holding(layout, n, root if comm.rank == root else None)
            comm.Bcast(message, root=root, algorithm=alg)
            wholes.append(whole)
    return wholes


def check_layouts(results, root: int, counts, layouts=LAYOUTS):
    """Every rank's wholes (from bcast_layouts) are the root's."""
    cases = [(n, layout) for n in counts for layout in layouts]
    for rank, wholes in enumerate(results):
        assert len(wholes) == len(cases)
        for (n, layout), whole in zip(cases, wholes):
            np.testing.assert_array_equal(whole, holding(layout, n, root)[0],
                                          err_msg=f"rank {rank}: {n} x {layout}")


def payload(root: int, n: int):
    """A Python object of n items that names its root."""
    return {"root": root, "items": [(i, f"{root}:{i}") for i in range(n)],
            "blob": bytes(range(n % 256))}


# ------------------------------------------------------------------------------ buffers
@pytest.mark.parametrize("size", list(COUNTS))
@pytest.mark.parametrize("p,root", EVERY_ROOT)
@pytest.mark.parametrize("alg", BCAST)
def test_Bcast(alg, p, root, size, monkeypatch):
    if size == "segmented":
        monkeypatch.setenv("MINIMPI_COST_SEGMENT", str(SEGMENT))
    counts = [COUNTS[size](p)]
    results = run_threads(p, bcast_layouts, root, alg, counts, timeout=10)
    check_layouts(results, root, counts)


@pytest.mark.parametrize("p,root", EVERY_ROOT)
@pytest.mark.parametrize("alg", SEGMENTING)
def test_Bcast_segment_argument(alg, p, root, monkeypatch):
    """The algorithm's own segment= (7 bytes: through every element), through the API."""
    registered = algorithms("bcast")[alg]
    monkeypatch.setitem(algorithms("bcast"), alg, dataclasses.replace(
        registered, function=functools.partial(registered.function, segment=7)))
    counts = [0, 1, p - 1, 13]
    layouts = ["int8", "float64", "float64[1::2]"]
    results = run_threads(p, bcast_layouts, root, alg, counts, layouts, timeout=10)
    check_layouts(results, root, counts, layouts)


def _messages(p, root, alg, n, segment=None):
    """Messages (eager or rendezvous) a Bcast of n float64 sends, with MINIMPI_COST_SEGMENT
    at ``segment`` bytes (None: the default)."""
    sent = []
    with pytest.MonkeyPatch.context() as mp:
        if segment is not None:
            mp.setenv("MINIMPI_COST_SEGMENT", str(segment))
        results = run_threads(p, bcast_layouts, root, alg, [n], ["float64"], timeout=10,
                              recorder=lambda src, dst, h: sent.append(h.kind in (EAGER, RTS)))
    check_layouts(results, root, [n], ["float64"])
    return sum(sent)


@pytest.mark.parametrize("alg", SEGMENTING)
@pytest.mark.parametrize("p,root", rooted([(2, 1), (5, 3)]))
def test_Bcast_segmented_size_is_really_segmented(alg, p, root):
    """The "segmented" size does cut the message: 45 float64 = 360 B = 10 segments of 36 B,
    so each of the p-1 hops carries 9 more messages than unsegmented."""
    extra = _messages(p, root, alg, 45, SEGMENT) - _messages(p, root, alg, 45)
    assert extra == 9 * (p - 1)


@pytest.mark.parametrize("alg", BCAST)
@pytest.mark.parametrize("p,root", rooted([(3, 2), (5, 1)]))
def test_Bcast_large_default_segment(alg, p, root):
    """320 KB: more than the default segment (256 KiB) and sent by rendezvous."""
    counts = [40_000]
    layouts = ["float64", "float64[1::2]"]
    results = run_threads(p, bcast_layouts, root, alg, counts, layouts, timeout=20)
    check_layouts(results, root, counts, layouts)


@pytest.mark.parametrize("layout", STRIDED)
def test_Bcast_refuses_a_strided_view_as_mpi4py_does(layout):
    """A strided numpy view is refused on every rank (BufferError, naming what to pass
    instead) before anything is sent, so the next Bcast still works."""
    n = 5

    def body(comm):
        whole, view = holding(layout, n, 1 if comm.rank == 1 else None, strided_view=True)
        with pytest.raises(BufferError, match="not contiguous.*ascontiguousarray"):
            comm.Bcast(view, root=1)
        with pytest.raises(BufferError):
            comm.Ibcast(view, root=1)
        whole, message = holding(layout, n, 1 if comm.rank == 1 else None)
        comm.Bcast(message, root=1)
        return whole

    for whole in run_threads(3, body, timeout=10):
        np.testing.assert_array_equal(whole, holding(layout, n, 1)[0])


# ------------------------------------------------------------------------------ objects
@pytest.mark.parametrize("p,root", EVERY_ROOT)
@pytest.mark.parametrize("alg", OBJECTS)
def test_bcast_objects(alg, p, root):
    """Objects of n items for n in COUNTS, then None; the other ranks' obj is ignored."""
    counts = [count(p) for count in COUNTS.values()]

    def body(comm):
        mine = comm.rank == root
        got = [comm.bcast(payload(root, n) if mine else "ignored", root=root, algorithm=alg)
               for n in counts]
        return got + [comm.bcast(None if mine else "ignored", root=root, algorithm=alg)]

    expect = [payload(root, n) for n in counts] + [None]
    assert run_threads(p, body, timeout=10) == [expect] * p


@pytest.mark.parametrize("alg", algs("bcast", objects=False))
def test_bcast_objects_refused(alg):
    exc = rank_error(3, lambda c: c.bcast("x", root=1, algorithm=alg), AlgorithmError)
    assert "moves buffers only" in str(exc) and alg in str(exc)


# ----------------------------------------------------------------------------- Ibcast
@pytest.mark.parametrize("p", [1, 2, 3, 5, 7, 8], ids="p{}".format)
@pytest.mark.parametrize("alg", BCAST)
def test_Ibcast_several_outstanding(alg, p, monkeypatch):
    """Five Ibcasts at once, each with its own root, size and layout (plus an ibcast of an
    object where the algorithm moves objects), completed in reverse order."""
    monkeypatch.setenv("MINIMPI_COST_SEGMENT", str(SEGMENT))
    calls = [(i % p, n, layout) for i, (n, layout) in enumerate(
        [(0, "int32"), (1, "complex128"), (13, "float64[1::2]"), (45, "float64"),
         (p - 1, "int32[:, 1] of (n, 3)")])]
    objects = alg in OBJECTS

    def body(comm):
        wholes, reqs = [], []
        for root, n, layout in calls:
            whole, message = holding(layout, n, root if comm.rank == root else None)
            reqs.append(comm.Ibcast(message, root=root, algorithm=alg))
            wholes.append(whole)
        if objects:
            oreq = comm.ibcast(payload(p - 1, 5) if comm.rank == p - 1 else None, root=p - 1,
                               algorithm=alg)
        for req in reversed(reqs):
            req.Wait()
        return wholes, oreq.wait() if objects else None

    for rank, (wholes, obj) in enumerate(run_threads(p, body, timeout=10)):
        for (root, n, layout), whole in zip(calls, wholes):
            np.testing.assert_array_equal(whole, holding(layout, n, root)[0],
                                          err_msg=f"rank {rank}: root {root}, {n} x {layout}")
        assert obj == (payload(p - 1, 5) if objects else None)

"""minimpi/io without processes: run arithmetic, file views (with a stand-in for the
datatype seam's ``blocks``), the collective plan and OS error classes."""
from __future__ import annotations

import errno

import numpy as np
import pytest

from minimpi.data.datatypes import BYTE, DOUBLE, INT
from minimpi.errors import ERR_ACCESS, ERR_NO_SPACE, ERR_NO_SUCH_FILE, ERR_READ_ONLY
from minimpi.io import runs as R
from minimpi.io.posix import os_error
from minimpi.io.two_phase import Summary, plan
from minimpi.io.view import FileView


class Vector:
    """Answers the datatype seam like MPI_Type_vector(count, blocklen, stride) of bytes."""
    name = "VECTOR_DOUBLE"
    is_contiguous = False

    def __init__(self, count, blocklen, stride):
        self.count, self.blocklen, self.stride = count, blocklen, stride
        self.size = count * blocklen
        self.extent = (count - 1) * stride + blocklen

    def __bool__(self):
        return True

    def blocks(self, n):
        one = np.arange(self.count, dtype=np.int64) * self.stride
        offs = (np.arange(n)[:, None] * self.extent + one).ravel()
        return offs, np.full(len(offs), self.blocklen, np.int64)


def a(*xs):
    return np.array(xs, np.int64)


def test_merge_trim_split_clip():
    offs, lens = R.merge_adjacent(a(0, 4, 10, 12), a(4, 2, 2, 0))
    assert offs.tolist() == [0, 10] and lens.tolist() == [6, 2]
    offs, lens = R.trim(a(0, 10, 20), a(5, 5, 5), 3, 9)
    assert offs.tolist() == [3, 10, 20] and lens.tolist() == [2, 5, 2]
    p_off, p_len, dom, pos = R.split_at(a(0, 10), a(8, 8), a(0, 5, 12, 18))
    assert p_off.tolist() == [0, 5, 10, 12] and p_len.tolist() == [5, 3, 2, 6]
    assert dom.tolist() == [0, 1, 1, 2] and pos.tolist() == [0, 5, 8, 10]
    assert R.clip_to(a(0, 10), a(5, 5), 12) == 7
    assert R.clip_to(a(0, 10), a(5, 5), 100) == 10
    assert R.clip_to(a(0, 10), a(5, 5), 0) == 0


@pytest.mark.parametrize("lengths", [[4, 3, 4, 4], [3] * 40, [600, 600, 5], [2] * 3])
def test_gather_pieces(lengths):
    rng = np.random.default_rng(1)
    src = rng.integers(0, 255, 4000, dtype=np.uint8)
    lengths = np.array(lengths, np.int64)
    src_pos = rng.integers(0, 4000 - lengths.max(), len(lengths))
    out = np.zeros(int(lengths.sum()), np.uint8)
    R.gather_pieces(src, src_pos, lengths, out)
    expect = np.concatenate([src[s:s + n] for s, n in zip(src_pos, lengths)])
    assert np.array_equal(out, expect)


def test_contiguous_view_is_one_run():
    v = FileView(100, INT, INT, "native")
    offs, lens = v.runs(3, 40)
    assert offs.tolist() == [112] and lens.tolist() == [40]
    assert v.byte_offset(5) == 120
    assert v.position_of_end(130) == 7


def test_strided_view_runs_and_offsets():
    # 3 blocks of 8 bytes every 32 bytes; extent 72; tiles at 10, 82, 154...
    v = FileView(10, DOUBLE, Vector(3, 8, 32), "native")
    offs, lens = v.runs(0, 48)
    # (the last block of a tile touches the next tile's first: one run of 16)
    assert offs.tolist() == [10, 42, 74, 114, 146] and lens.tolist() == [8, 8, 16, 8, 8]
    offs, lens = v.runs(2, 16)            # third double of tile 0, first of tile 1
    assert offs.tolist() == [74] and lens.tolist() == [16]   # adjacent: 74+8 == 82, merged
    assert v.byte_offset(4) == 114
    assert v.position_of_end(122) == 5     # tile 0 (3 doubles) and [82,90), [114,122)


def test_view_rejects_bad_types():
    with pytest.raises(Exception, match="whole number of etype"):
        FileView(0, DOUBLE, Vector(3, 4, 8), "native")
    with pytest.raises(Exception, match="data representation"):
        FileView(0, BYTE, BYTE, "big-endian-please")
    with pytest.raises(Exception, match="increasing"):
        FileView(0, BYTE, Vector(2, 8, -16), "native")


def test_plan_chooses_by_pattern():
    # each rank one long run, no interleaving: independent
    blocks = [Summary(r * 2**20, (r + 1) * 2**20, 2**20, 1) for r in range(4)]
    assert plan(blocks, {}, write=True).method == "independent"
    # interleaved 1 KiB runs: two-phase, 4 domains covering the whole range in order
    strided = [Summary(r * 1024, 2**22 - (3 - r) * 1024, 2**20, 1024) for r in range(4)]
    p = plan(strided, {}, write=True)
    assert p.method == "two_phase", p.explain()
    assert p.bounds[0] == 0 and p.bounds[-1] == 2**22 and list(p.bounds) == sorted(p.bounds)
    assert len(p.aggregators) == 4 and "aggregator rank" in p.explain()
    assert plan(strided, {"romio_cb_write": "disable"}, write=True).method == "independent"
    assert plan(blocks, {"romio_cb_write": "enable"}, write=True).method == "two_phase"
    assert len(plan(strided, {"cb_nodes": "2"}, write=True).aggregators) == 2
    assert len(plan(strided, {"cb_nodes": "many"}, write=True).aggregators) == 4
    assert p.rounds == 1 and len(p.bounds) == 5          # 1 MiB domains: one round each
    small = plan(strided, {"cb_buffer_size": str(2**18)}, write=True)
    assert small.rounds == 4 and len(small.bounds) == 4 * 4 + 1
    assert list(small.bounds) == sorted(small.bounds) and small.bounds[4] == p.bounds[1]
    assert "in 4 rounds" in small.explain()
    # reads: a preadv is cheap and runs close together are sieved (one call per 4 MiB of
    # extent), so 4 KiB and 256 B runs of 4 ranks read independently; with 16 ranks each
    # would read 16 times its data, and two phases win
    reads4k = [Summary(r * 4096, 2**24 - (3 - r) * 4096, 2**22, 1024) for r in range(4)]
    assert plan(reads4k, {}, write=False).method == "independent"
    reads256 = [Summary(r * 256, 2**24 - (3 - r) * 256, 2**22, 2**14) for r in range(4)]
    assert plan(reads256, {}, write=False).method == "independent"
    reads256_16 = [Summary(r * 256, 2**24 - (15 - r) * 256, 2**20, 2**12) for r in range(16)]
    assert plan(reads256_16, {}, write=False).method == "two_phase"
    # a 2-D block distribution over 2 x 2 ranks: rows of 11 KiB alternate between ranks;
    # written independently they take turns in the kernel, so two-phase wins for writes
    rows = [Summary(r * 11584, 2**26 - (3 - r) * 11584, 2**24, 1448) for r in range(4)]
    assert plan(rows, {}, write=True).method == "two_phase"
    assert plan(rows, {}, write=False).method == "independent"


def test_os_errors_get_mpi_classes():
    for code, cls in [(errno.ENOENT, ERR_NO_SUCH_FILE), (errno.EACCES, ERR_ACCESS),
                      (errno.ENOSPC, ERR_NO_SPACE), (errno.EROFS, ERR_READ_ONLY)]:
        e = os_error(OSError(code, "boom"), call="File.Write_at", path="/x/y", rank=2,
                     offset=4096)
        assert e.Get_error_class() == cls
        assert "/x/y" in str(e) and "rank 2" in str(e) and "4096" in str(e)
        assert errno.errorcode[code] in str(e)

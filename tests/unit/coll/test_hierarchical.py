"""Hierarchical collectives (bcast, reduce, allreduce, allgather) on ranks spread over pretend
hosts: host arithmetic, results against numpy/Python for many layouts (uneven hosts, hosts
interleaved in rank order, one rank per host, one host), every root, non-commutative ops,
objects, Allgatherv, nonblocking calls, which messages cross hosts, drawings, and how the
cost model chooses between flat and hierarchical (including measured times over emulated
slow links, and calibration of both links).

The per-collective matrices (test_bcast.py, ...) run these algorithms too, on one host.
"""
from __future__ import annotations

import io
import json
import time

import numpy as np
import pytest
from coll_helpers import CONCAT, KINDS, MATMUL, contribution, everyone, summand
from emulated_hosts import SlowLinks
from minimpi.launcher import cli
from minimpi.launcher import run as run_cmd
from minimpi.launcher.explain_cmd import explain

from minimpi.coll import cost, peers, registry
from minimpi.coll.cost import CostModel, Layout
from minimpi.constants import IN_PLACE
from minimpi.data import ops
from minimpi.data.datatypes import DOUBLE
from minimpi.errors import AlgorithmError
from minimpi.runtime.inproc import RankFailed, run_threads
from minimpi.tools import calibrate, draw
from minimpi.transports.frames import EAGER, RTS

HIER = "hierarchical"
COLLECTIVES = ["bcast", "reduce", "allreduce", "allgather"]
#: every hierarchical allreduce (the leaders run different flat algorithms)
ALLREDUCES = [name for name, alg in registry.algorithms("allreduce").items() if alg.hierarchical]
MiB = 1 << 20

#: host of each rank, one letter per rank: contiguous, interleaved, uneven, one rank per
#: host, one host; p = 1..8 with 3, 5, 7 among them
LAYOUTS = ["a", "ab", "aab", "aba", "abc", "aabb", "abab", "aaab", "ababa", "aaabb",
           "abcab", "aabbbcc", "abcabca", "aaaabbbb", "abacabad"]
CONTIGUOUS = [h for h in LAYOUTS if Layout.of(h).contiguous]
INTERLEAVED = [h for h in LAYOUTS if not Layout.of(h).contiguous]


def layouts(names):
    return [pytest.param(h, id=h) for h in names]


def rooted(names):
    return [pytest.param(h, root, id=f"{h}-root{root}") for h in names for root in range(len(h))]


@pytest.fixture(autouse=True)
def clean_model(monkeypatch, tmp_path):
    """Built-in defaults, no calibration file, no env overrides; 2 cores."""
    monkeypatch.setenv("MINIMPI_COST_FILE", str(tmp_path / "absent.json"))
    for var, _ in cost.FIELDS.values():
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("MINIMPI_COST_CORES", "2")
    cost.clear_cache()
    yield
    cost.clear_cache()


def on(hosts: str, body, **kwargs):
    """Run ``body`` on one rank per letter of ``hosts``, each letter a host."""
    return run_threads(len(hosts), body, hosts=list(hosts), timeout=20, **kwargs)


# ----------------------------------------------------------------------- host arithmetic
def test_host_groups_leaders_and_layout():
    hosts = list("ababa")
    groups = peers.host_groups(hosts)
    assert groups == [[0, 2, 4], [1, 3]]
    assert [peers.host_of(r, groups) for r in range(5)] == [0, 1, 0, 1, 0]
    assert peers.host_leaders(groups) == [0, 1]
    assert peers.host_leaders(groups, root=3) == [0, 3]
    assert peers.host_leaders(groups, root=4) == [4, 1]
    # hosts are numbered by their lowest rank, whatever their labels
    assert peers.host_groups(["z", "z", "y", "x", "y"]) == [[0, 1], [2, 4], [3]]
    lay = Layout.of(hosts)
    assert (lay.counts, lay.hosts, lay.widest, lay.p, lay.contiguous) == ((3, 2), 2, 3, 5, False)
    assert Layout.of("aabbb") == Layout((2, 3), True) and Layout.of("aaaa") == Layout.one_host(4)
    assert str(Layout.of("aaaabbbb")) == "2 hosts x 4 ranks"
    assert str(Layout.of("abab")) == "2 hosts x 2 ranks (hosts interleaved in rank order)"
    assert str(Layout.of("aaabbc")) == "3 hosts of 3+2+1 ranks"


def test_endpoint_hosts_reach_the_algorithms():
    """What the algorithms read (``ch.ep.hosts``) is the layout run_threads pretends."""
    got = on("abab", lambda comm: comm._ep.hosts)
    assert got == [(0, 1, 0, 1)] * 4


# --------------------------------------------------------------------------- results
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("hosts,root", rooted(["a", "ab", "aba", "abc", "aaabb", "ababa",
                                              "aabbbcc", "abcabca"]))
def test_bcast(hosts, root, kind):
    n = 11

    def body(comm):
        if kind == "object":
            mine = contribution(root, n, kind) if comm.rank == root else "ignored"
            return comm.bcast(mine, root=root, algorithm=HIER)
        buf = contribution(root, n, kind) if comm.rank == root else np.full(n, -1, kind)
        comm.Bcast(buf, root=root, algorithm=HIER)
        return buf

    for got in on(hosts, body):
        if kind == "object":
            assert got == contribution(root, n, kind)
        else:
            np.testing.assert_array_equal(got, contribution(root, n, kind))


@pytest.mark.parametrize("beta_inter", ["auto", "1e-8", "1e-6"])
@pytest.mark.parametrize("hosts,root", rooted(["aabbb", "abcab", "abcdabcd"]))
def test_bcast_large(hosts, root, beta_inter, monkeypatch):
    """Rendezvous-sized data in a strided layout (every other double: a vector datatype
    over the whole array, as mpi4py takes one); the leaders run the tree, van de Geijn or
    the pipelined ring, depending on the inter-host link (8 KiB segments)."""
    monkeypatch.setenv("MINIMPI_COST_BETA_INTER", beta_inter)
    monkeypatch.setenv("MINIMPI_COST_SEGMENT", "8192")
    cost.clear_cache()
    n = 30_001

    def body(comm):
        whole = np.full(2 * n, -1.0)
        if comm.rank == root:
            whole[1::2] = np.arange(n) + root
        every_other = DOUBLE.Create_vector(n, 1, 2).Commit()
        comm.Bcast([whole[1:], 1, every_other], root=root, algorithm=HIER)
        return whole

    want = np.full(2 * n, -1.0)
    want[1::2] = np.arange(n) + root
    for got in on(hosts, body):
        np.testing.assert_array_equal(got, want)


def test_bcast_leaders_choose_by_the_inter_host_link():
    phases = registry.algorithms("bcast")[HIER].phases
    lay = Layout.of("abcdabcd")
    pick = lambda model, n: phases(model, 8, n, lay)[0][0].split()[2]
    assert pick(CostModel(), 8) == "binomial"
    assert pick(CostModel(alpha_inter=1e-6), 64 * MiB) == "ring"          # streams
    # slow in both: fewer bytes per leader and fewer rendezvous (the scatter's halves and
    # the ring's quarters against the binomial's whole vectors) win
    assert pick(CostModel(alpha_inter=1e-3, beta_inter=1e-7), MiB) == "scatter_allgather"


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("hosts,root", rooted(["a", "ab", "aba", "abc", "aaabb", "ababa",
                                              "aabbbcc", "abcabca"]))
def test_reduce(hosts, root, kind):
    p = len(hosts)

    def body(comm):
        mine = summand(comm.rank, kind)
        if kind == "object":
            return comm.reduce(mine, op=ops.SUM, root=root, algorithm=HIER)
        recv = np.full(mine.size, -1, kind) if comm.rank == root else None
        before = mine.copy()
        comm.Reduce(mine, recv, op=ops.SUM, root=root, algorithm=HIER)
        assert np.array_equal(mine, before), "sendbuf must not change"
        return recv

    want = sum(summand(r, kind) for r in range(p))
    for r, got in enumerate(on(hosts, body)):
        if r != root:
            assert got is None
        elif kind == "object":
            assert got == want
        else:
            np.testing.assert_array_equal(got, np.asarray(want).astype(kind))


def _objsum(x, y):
    """Commutative for real (hosts that interleave combine ranks out of order)."""
    return {"a": x["a"] + y["a"], "b": sorted(x["b"] + y["b"])}


@pytest.mark.parametrize("hosts", layouts(LAYOUTS))
@pytest.mark.parametrize("alg,kind", [   # buffers-only ones refuse objects (test_allreduce.py)
    pytest.param(a, k, id=f"{a}-{k}") for a in ALLREDUCES for k in KINDS
    if k != "object" or registry.algorithms("allreduce")[a].objects])
def test_allreduce(alg, kind, hosts):
    p, n = len(hosts), 13

    def body(comm):
        if kind == "object":
            return comm.allreduce(contribution(comm.rank, n, kind),
                                  op=ops.Op.Create(_objsum, commute=True), algorithm=alg)
        recv = np.full(n, -1, kind)
        comm.Allreduce(contribution(comm.rank, n, kind), recv, algorithm=alg)
        inplace = contribution(comm.rank, n, kind)
        comm.Allreduce(IN_PLACE, inplace, op=ops.MAX, algorithm=alg)
        return recv, inplace

    got = on(hosts, body)
    if kind == "object":
        want = contribution(0, n, kind)
        for r in range(1, p):
            want = _objsum(want, contribution(r, n, kind))
        assert got == [want] * p
        return
    for recv, inplace in got:
        np.testing.assert_array_equal(recv, sum(contribution(r, n, kind) for r in range(p)))
        np.testing.assert_array_equal(inplace, contribution(p - 1, n, kind))


@pytest.mark.parametrize("hosts", layouts(["aabb", "aaabb", "abcab", "aaaabbbb"]))
@pytest.mark.parametrize("n", [0, 1, 3, 50_001], ids="n{}".format)
@pytest.mark.parametrize("alg", ALLREDUCES)
def test_allreduce_sizes(alg, hosts, n, monkeypatch):
    """Empty and tiny vectors, and one large enough for rendezvous messages and both of the
    leaders' algorithms (Rabenseifner where bandwidth decides)."""
    monkeypatch.setenv("MINIMPI_COST_BETA_INTER", "1e-8")      # large n: Rabenseifner
    cost.clear_cache()
    p = len(hosts)

    def body(comm):
        recv = np.empty(n, np.float32)
        comm.Allreduce(np.arange(n, dtype=np.float32) * (comm.rank + 1), recv, algorithm=alg)
        return recv

    for got in on(hosts, body):
        np.testing.assert_allclose(got, np.arange(n, dtype=np.float32) * (p * (p + 1) // 2),
                                   rtol=1e-6)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("hosts", layouts(LAYOUTS))
def test_allgather(hosts, kind):
    p, n = len(hosts), 3

    def body(comm):
        if kind == "object":
            return comm.allgather(contribution(comm.rank, n, kind), algorithm=HIER)
        recv = np.full(n * p, -1, kind)
        comm.Allgather(contribution(comm.rank, n, kind), recv, algorithm=HIER)
        return recv

    for got in on(hosts, body):
        if kind == "object":
            assert got == everyone(p, n, kind)
        else:
            np.testing.assert_array_equal(got, everyone(p, n, kind))


@pytest.mark.parametrize("hosts", layouts(["abab", "aaabb", "abcabca", "abacabad"]))
def test_allgatherv_uneven_with_gaps(hosts):
    """Blocks of 0..3 items, laid out in reverse rank order with a gap after each: a host's
    blocks are scattered over the buffer, and the gaps must stay untouched."""
    p = len(hosts)
    counts = [(3 * r + 1) % 4 for r in range(p)]
    displs, pos = [0] * p, 0
    for r in reversed(range(p)):
        displs[r] = pos
        pos += counts[r] + 1

    def body(comm):
        recv = np.full(pos, -1.0)
        comm.Allgatherv(contribution(comm.rank, counts[comm.rank], "float64"),
                        [recv, counts, displs, "d"], algorithm=HIER)
        return recv

    for got in on(hosts, body):
        for r in range(p):
            np.testing.assert_array_equal(got[displs[r]:displs[r] + counts[r]],
                                          contribution(r, counts[r], "float64"))
            assert got[displs[r] + counts[r]] == -1


# ------------------------------------------------------------------ operand order
@pytest.mark.parametrize("hosts,root", rooted(["aab", "aaabb", "abbccc", "aabbbcc"]))
def test_non_commutative_keeps_rank_order_on_contiguous_hosts(hosts, root):
    p, count = len(hosts), 3

    def body(comm):
        mine = MATMUL.operand(comm.rank, count).reshape(-1)
        all_ = np.zeros(count * 4, np.int64)
        comm.Allreduce([mine, MATMUL.datatype], [all_, MATMUL.datatype], op=MATMUL.op,
                       algorithm=HIER)
        at_root = np.zeros(count * 4, np.int64)
        comm.Reduce([mine, MATMUL.datatype], [at_root, MATMUL.datatype], op=MATMUL.op,
                    root=root, algorithm=HIER)
        words = comm.allreduce(f"<{comm.rank}>", op=CONCAT, algorithm=HIER)
        word = comm.reduce(f"<{comm.rank}>", op=CONCAT, root=root, algorithm=HIER)
        return all_, at_root, words, word

    expect = MATMUL.product(p, count)
    text = "".join(f"<{r}>" for r in range(p))
    for r, (all_, at_root, words, word) in enumerate(on(hosts, body)):
        np.testing.assert_array_equal(all_.reshape(-1, 2, 2), expect)
        assert words == text
        if r == root:
            np.testing.assert_array_equal(at_root.reshape(-1, 2, 2), expect)
            assert word == text


@pytest.mark.parametrize("collective", ["reduce", "allreduce"])
@pytest.mark.parametrize("hosts", layouts(INTERLEAVED))
def test_non_commutative_refused_when_hosts_interleave(collective, hosts):
    def body(comm):
        if collective == "reduce":
            comm.reduce(str(comm.rank), op=CONCAT, algorithm=HIER)
        else:
            comm.allreduce(str(comm.rank), op=CONCAT, algorithm=HIER)

    with pytest.raises(RankFailed) as info:
        on(hosts, body)
    assert isinstance(info.value.exc, AlgorithmError)
    assert "contiguous" in str(info.value.exc) and "commutative" in str(info.value.exc)
    # auto never picks it then, and a commutative op is fine
    p, lay = len(hosts), Layout.of(hosts)
    slow = CostModel(cores=2, alpha_inter=1e-3, beta_inter=1e-7)
    for n in (8, MiB, 64 * MiB):
        assert registry.choose(collective, p, n, CONCAT, layout=lay).name != HIER
        assert registry.algorithms(collective)[HIER].refusal(p, n, ops.SUM, False, lay) is None
        assert registry.algorithms(collective)[HIER].predict(slow, p, n, lay)[0] > 0
    assert on(hosts, lambda comm: comm.allreduce(str(comm.rank), op=ops.SUM,
                                                  algorithm=HIER))[0] != ""


def test_sub_communicator_uses_its_own_layout():
    """A communicator split from the world sees its members' hosts in its own rank order
    (reversed here), and the hierarchical algorithms group by them."""
    def body(comm):
        sub = comm.Split(comm.rank % 2, -comm.rank)     # world a,a,b,b,a,a,b,b
        out = np.zeros(3)
        sub.Allreduce(np.full(3, float(comm.rank)), out, algorithm=HIER)
        b = np.full(2, float(comm.rank)) if sub.rank == 1 else np.zeros(2)
        sub.Bcast(b, root=1, algorithm=HIER)
        g = sub.allgather(comm.rank, algorithm=HIER)
        return sub._ep.hosts, out, b, g

    got = on("aabbaabb", body)
    evens, odds = [0, 2, 4, 6], [1, 3, 5, 7]
    for world, (hosts, out, b, g) in enumerate(got):
        members = evens if world % 2 == 0 else odds
        assert hosts == (1, 0, 1, 0)                    # b,a,b,a in either half
        np.testing.assert_array_equal(out, np.full(3, float(sum(members))))
        np.testing.assert_array_equal(b, np.full(2, float(members[::-1][1])))
        assert g == members[::-1]


def test_over_tcp_sockets():
    """The same calls over real loopback sockets (the transport every job uses)."""
    hosts = "aabab"

    def body(comm):
        r = comm.rank
        b = np.arange(4.0) if r == 3 else np.zeros(4)
        comm.Bcast(b, root=3, algorithm=HIER)
        s = np.zeros(70_000)                     # rendezvous-sized
        comm.Allreduce(np.full(70_000, r + 1.0), s, algorithm=HIER)
        red = np.zeros(2) if r == 1 else None
        comm.Reduce(np.full(2, float(r)), red, root=1, algorithm=HIER)
        return b, s, red, comm.allgather(r, algorithm=HIER)

    got = run_threads(5, body, hosts=list(hosts), transport="tcp", timeout=30)
    for r, (b, s, red, g) in enumerate(got):
        np.testing.assert_array_equal(b, np.arange(4.0))
        assert np.all(s == 15) and g == list(range(5))
        if r == 1:
            np.testing.assert_array_equal(red, np.full(2, 10.0))


def test_calibrate_refuses_a_pretend_layout(capsys):
    assert cli.main(["explain", "--calibrate", "--hosts", "2x2"]) == 2
    assert "real hosts" in capsys.readouterr().err


# --------------------------------------------------------------------- nonblocking
@pytest.mark.parametrize("hosts", layouts(["aabbb", "abcab"]))
def test_several_outstanding_nonblocking(hosts):
    p = len(hosts)

    def body(comm):
        r = comm.rank
        b = np.arange(5.0) if r == p - 1 else np.zeros(5)
        s = np.zeros(4)
        red = np.zeros(3) if r == 1 else None
        g = np.zeros(2 * p)
        reqs = [comm.Ibcast(b, root=p - 1, algorithm=HIER),
                comm.Iallreduce(np.full(4, r + 1.0), s, algorithm=HIER),
                comm.Ireduce(np.full(3, float(r)), red, root=1, algorithm=HIER),
                comm.Iallgather(np.full(2, float(r)), g, algorithm=HIER)]
        for req in reversed(reqs):
            req.Wait()
        return b, s, red, g

    for r, (b, s, red, g) in enumerate(on(hosts, body)):
        np.testing.assert_array_equal(b, np.arange(5.0))
        np.testing.assert_array_equal(s, np.full(4, p * (p + 1) / 2))
        if r == 1:
            np.testing.assert_array_equal(red, np.full(3, p * (p - 1) / 2))
        np.testing.assert_array_equal(g, np.repeat(np.arange(p, dtype=float), 2))


# ------------------------------------------------------ what crosses between hosts
def crossing(hosts: str, collective: str, algorithm: str, n: int = 1000) -> int:
    """Messages (eager or rendezvous) between different hosts in one call."""
    sent = []

    def recorder(src, dst, header):
        if header.kind in (EAGER, RTS) and hosts[src] != hosts[dst]:
            sent.append((src, dst))

    def body(comm):
        x = np.full(n, comm.rank + 1.0)
        out = np.zeros(n * (comm.size if collective == "allgather" else 1))
        if collective == "bcast":
            comm.Bcast(x, root=0, algorithm=algorithm)
        elif collective == "reduce":
            comm.Reduce(x, out, root=0, algorithm=algorithm)
        elif collective == "allreduce":
            comm.Allreduce(x, out, algorithm=algorithm)
        else:
            comm.Allgather(x, out, algorithm=algorithm)

    on(hosts, body, recorder=recorder)
    return len(sent)


@pytest.mark.parametrize("collective", COLLECTIVES)
@pytest.mark.parametrize("hosts", layouts(["abababab", "aaaabbbb", "abcabcab", "aabbbcc"]))
def test_only_the_leaders_step_crosses_hosts(collective, hosts):
    """H hosts: a tree among the leaders crosses H-1 times; the leaders' allreduce and
    allgather exchange among H leaders - whatever the number of ranks per host."""
    H = Layout.of(hosts).hosts
    got = crossing(hosts, collective, HIER)
    if collective in ("bcast", "reduce"):
        assert got == H - 1
    elif collective == "allgather":        # Bruck: every leader sends once per step
        assert got == H * cost.ceil_log2(H)
    else:                                  # recursive doubling among the leaders (small n)
        q = 1 << cost.floor_log2(H)
        assert got == q * cost.floor_log2(q) + 2 * (H - q)
    # a flat tree over interleaved hosts sends across much more often
    if hosts == "abababab":
        assert crossing(hosts, collective, "binomial") > 2 * got


# ------------------------------------------------------------------------ drawings
def test_draw_on_two_hosts():
    s = draw.record("allreduce", HIER, 8, hosts=list("aaaabbbb"))
    assert s.steps == 5 and "hosts: a=0,1,2,3 b=4,5,6,7" in s.summary
    assert [(m.src, m.dst) for m in s.messages_in(2)] == [(0, 4), (4, 0)]   # leaders only
    assert {m.label for m in s.messages_in(2)} == {"ABCD0-7", "EFGH0-7"}
    assert all(draw.compress(row[-1]["recv"]) == "Σ0-7" for row in s.states)
    s = draw.record("bcast", HIER, 6, root=5, hosts=list("aaaabb"))
    assert [(m.src, m.dst) for m in s.messages_in(0)] == [(5, 0)]
    for collective in COLLECTIVES:                      # hosts interleaved, 3 hosts
        s = draw.record(collective, HIER, 7, root=3, hosts=list("abcabca"))
        assert all(not any(c in ("?", "·") for cells in row[-1].values() for c in cells)
                   for row in s.states), collective


def test_draw_and_explain_command_lines(capsys, monkeypatch):
    assert cli.main(["draw", "bcast", "--algorithm", HIER, "-n", "8", "--hosts", "2x4"]) == 0
    out = capsys.readouterr().out
    assert "hosts: host0=0,1,2,3 host1=4,5,6,7" in out and "step 1: 0->4 A0-7" in out
    assert cli.main(["draw", "allgather", "-a", HIER, "--hosts", "a:3,b:2"]) == 0
    assert "p=5" in capsys.readouterr().out
    assert cli.main(["draw", "bcast", "-a", HIER, "-n", "9", "--hosts", "2x4"]) == 2
    assert "do not fit" in capsys.readouterr().err
    assert cli.main(["explain", "bcast", "--hosts", "a:0"]) == 2
    assert "positive" in capsys.readouterr().err
    monkeypatch.setenv("MINIMPI_COST_BETA_INTER", "8.5e-9")
    cost.clear_cache()
    assert cli.main(["explain", "allreduce", "--bytes", "64MiB", "--hosts", "2x4"]) == 0
    out = capsys.readouterr().out
    assert "on 8 ranks" in out and "hosts: 2 hosts x 4 ranks" in out
    assert "* hierarchical" in out and "between hosts: rabenseifner allreduce over 2 leaders" in out
    assert "; env MINIMPI_COST_BETA_INTER]" in out


# ------------------------------------------------------------------- the cost model
SLOW = CostModel(cores=2, alpha_inter=100e-6, beta_inter=1 / 117e6)   # about 1 Gbit/s


def test_one_host_never_picks_hierarchical():
    """On one host a hierarchical algorithm is its flat phases, priced as such: never less
    than the best flat algorithm, which is registered first and wins ties."""
    for cores in (2, 64):
        model = CostModel(cores=cores)
        for collective in COLLECTIVES:
            table = registry.algorithms(collective)
            for p in (1, 2, 3, 5, 7, 8, 16):
                for n in (0, 8, 4096, MiB, 64 * MiB):
                    flat = min(registry.tie_key(*a.predict(model, p, n)[:2])
                               for a in table.values() if not a.hierarchical and registry.INTRA in a.kinds)
                    for alg in table.values():
                        if alg.hierarchical:
                            assert registry.tie_key(*alg.predict(model, p, n)[:2]) >= flat, (
                                collective, alg.name, p, n)
    for collective in COLLECTIVES:
        for p in (2, 5, 8):
            for n in (8, MiB, 64 * MiB):
                for op in (ops.SUM, MATMUL.op):
                    assert not registry.choose(collective, p, n, op).hierarchical
                    assert not registry.choose(collective, p, n, op,
                                               layout=Layout.one_host(p)).hierarchical


def test_hierarchical_cost_is_its_phases():
    m, lay = SLOW, Layout.of("aaaabbbb")
    bcast = registry.algorithms("bcast")[HIER]
    expect = 1 * m.inter.time(MiB) + 2 * m.intra.time(MiB)       # log2 2 + log2 4 steps
    # each step's 1 MiB is a rendezvous (above the 64 KiB eager limit): α more on its link
    expect += 1 * m.inter.alpha + 2 * m.intra.alpha
    assert bcast.cost(m, 8, MiB, lay) == pytest.approx(expect)
    steps = registry.algorithms("allreduce")[HIER].phases(m, 8, 64 * MiB, lay)
    assert [what for what, _ in steps] == [
        "inside hosts: binomial reduce over 4 ranks",
        "between hosts: rabenseifner allreduce over 2 leaders",
        "inside hosts: binomial bcast over 4 ranks"]
    rabenseifner = registry.algorithms("allreduce")["rabenseifner"]
    rab = rabenseifner.cost(m.over(m.inter), 2, 64 * MiB)
    # its path over 2 leaders: a 32 MiB half each way, both rendezvous
    assert rabenseifner.rendezvous(m, 2, 64 * MiB) == 2
    assert steps[1][1] == pytest.approx(rab + 2 * m.inter.alpha)
    # small vectors: latency decides, the leaders exchange whole vectors
    assert "recursive_doubling" in registry.algorithms("allreduce")[HIER].phases(m, 8, 8, lay)[1][0]


def test_flat_algorithms_pay_the_slower_link_on_every_step():
    lay = Layout.of("aaaabbbb")
    ring = registry.algorithms("allreduce")["ring"]
    as_if_all_slow = CostModel(cores=2, alpha=SLOW.inter.alpha, beta=SLOW.inter.beta)
    # (its 14 block steps of 128 KiB are rendezvous: α each, on the link it pays)
    assert ring.rendezvous(SLOW, 8, MiB) == 14
    assert ring.predict(SLOW, 8, MiB, lay)[1] == pytest.approx(
        ring.cost(as_if_all_slow, 8, MiB) + 14 * SLOW.inter.alpha)
    # one host: the intra-host link, whatever the inter-host one
    assert ring.predict(SLOW, 8, MiB)[1] == pytest.approx(
        ring.cost(CostModel(cores=2), 8, MiB) + 14 * CostModel().alpha)
    # contention: each host's own cores (2 hosts x min(4 ranks, 2 cores) = 4)
    # (its messages with the RTS and CTS of each rank's 14 rendezvous)
    _, _, crowd = ring.predict(SLOW, 8, MiB, lay)
    messages = ring.messages(SLOW, 8, MiB) + 2 * 8 * 14
    assert ring.work(SLOW, 8, MiB, lay) == (messages, ring.volume(8, MiB), ring.local(8, MiB))
    assert crowd == pytest.approx(cost.contention(CostModel(cores=4), 8, ring.volume(8, MiB),
                                                  ring.local(8, MiB), messages))


@pytest.mark.parametrize("collective", COLLECTIVES)
def test_slow_links_make_auto_go_hierarchical(collective, monkeypatch):
    # uncalibrated (both links alike), a flat tree over contiguous hosts is the same tree as
    # the hierarchical one, and ties go to the flat one
    if collective in ("bcast", "reduce"):
        for hosts in ("aaaabbbb", "aabb"):
            lay = Layout.of(hosts)
            for n in (8, MiB, 64 * MiB):
                assert registry.choose(collective, lay.p, n, ops.SUM, layout=lay).name != HIER
    monkeypatch.setenv("MINIMPI_COST_ALPHA_INTER", str(SLOW.alpha_inter))
    monkeypatch.setenv("MINIMPI_COST_BETA_INTER", str(SLOW.beta_inter))
    cost.clear_cache()
    for hosts in ("aaaabbbb", "aabb", "abababab"):
        lay = Layout.of(hosts)
        for n in (MiB, 64 * MiB):
            got = registry.choose(collective, lay.p, n, ops.SUM, layout=lay)
            assert got.hierarchical, (hosts, n, got.name)
            if collective == "allreduce":      # keeping rank order: the other one
                assert registry.choose(collective, lay.p, n, MATMUL.op, layout=lay).name == (
                    HIER if lay.contiguous else "rabenseifner")
    # one rank per host: nothing to gain, and a flat algorithm wins
    assert not registry.choose(collective, 3, MiB, ops.SUM, layout=Layout.of("abc")).hierarchical
    # 3 hosts: Rabenseifner among the leaders pays for the fold, the ring does not
    if collective == "allreduce":
        lay = Layout.of("aaabbbccc")
        assert registry.choose(collective, 9, 64 * MiB, ops.SUM, layout=lay).name == \
            "hierarchical_ring"


def test_auto_in_a_job_uses_the_layout(monkeypatch):
    """The communicator's plan holds its layout: the same call picks hierarchical over slow
    links between hosts, a flat algorithm on one host."""
    monkeypatch.setenv("MINIMPI_COST_BETA_INTER", "1e-8")
    cost.clear_cache()

    def body(comm):
        out = np.zeros(1 << 16)
        comm.Allreduce(np.ones(1 << 16), out)
        return out, comm._plan.algorithm("allreduce", out.nbytes, ops.SUM).name

    results = on("aabb", body)
    for got, _ in results:
        assert np.all(got == 4)
    picked = [name for _, name in results]
    assert len(set(picked)) == 1
    assert registry.algorithms("allreduce")[picked[0]].hierarchical
    picked = [name for _, name in run_threads(4, body)]
    assert picked and not any(registry.algorithms("allreduce")[a].hierarchical for a in picked)


def test_link_fields_from_file_env_and_launcher(monkeypatch, tmp_path):
    model, sources = cost.model_sources()
    assert model.alpha_inter is None and model.inter == cost.Link(model.alpha, model.beta)
    assert sources["beta_inter"] == "= beta (not calibrated)"
    path = tmp_path / "cost.json"
    path.write_text(json.dumps({"alpha": 3e-5, "alpha_inter": 2e-4, "beta_inter": 1e-8}))
    monkeypatch.setenv("MINIMPI_COST_FILE", str(path))
    monkeypatch.setenv("MINIMPI_COST_BETA_INTRA", "auto")
    cost.clear_cache()
    model, sources = cost.model_sources()
    assert model.inter == cost.Link(2e-4, 1e-8) and model.intra == cost.Link(3e-5, model.beta)
    assert sources["alpha_inter"] == f"file {path}"
    assert sources["beta_intra"] == "env MINIMPI_COST_BETA_INTRA"
    # the launcher hands every rank the same model; an unset link field travels as None
    exported = run_cmd.cost_model_env({})
    assert exported["MINIMPI_COST_ALPHA_INTER"] == "0.0002"
    assert exported["MINIMPI_COST_ALPHA_INTRA"] == "None"
    monkeypatch.setenv("MINIMPI_COST_FILE", "")
    for var, value in exported.items():
        monkeypatch.setenv(var, value)
    cost.clear_cache()
    assert cost.default_model() == model
    monkeypatch.setenv("MINIMPI_COST_ALPHA_INTER", "fast")
    cost.clear_cache()
    with pytest.raises(ValueError, match="MINIMPI_COST_ALPHA_INTER"):
        cost.model_sources()


def test_explain_single_host_output_is_unchanged():
    """--hosts with one host, or no --hosts: no host lines, the same text."""
    plain, one = io.StringIO(), io.StringIO()
    explain("allreduce", MiB, 8, ops.SUM, out=plain)
    explain("allreduce", MiB, 8, ops.SUM, out=one, layout=Layout.one_host(8))
    assert plain.getvalue() == one.getvalue()
    assert "hosts:" not in plain.getvalue() and "inter" not in plain.getvalue()


# ------------------------------------------------- measured, over emulated slow links
def timed(hosts: str, algorithm: str, n: int, links: SlowLinks, calls: int = 3) -> float:
    """Median over ``calls`` of the slowest rank's time of an Allreduce of n bytes."""
    def body(comm):
        x, out = np.ones(n // 8), np.zeros(n // 8)
        times = []
        for _ in range(calls):
            comm.Barrier()
            t = time.perf_counter()
            comm.Allreduce(x, out, algorithm=algorithm)
            times.append(time.perf_counter() - t)
        assert np.all(out == len(hosts))
        return times

    per_rank = on(hosts, body, recorder=links)
    return float(np.median([max(ts) for ts in zip(*per_rank)]))


def test_model_ranks_flat_and_hierarchical_as_measured_over_slow_links():
    """Links between hosts emulated at 4 ms + 40 us/KiB (about 25 MB/s), ranks a,b,a,b:
    every step of a flat ring and of a flat binomial tree crosses hosts, the hierarchical
    algorithm crosses once. The model, told those numbers, must rank them as the clock
    does, and predict the hierarchical time within a small factor (the emulation charges
    each frame of a rendezvous its latency, which the model's one alpha per message does
    not, so it runs slower than predicted)."""
    hosts, n = "abab", 256 << 10
    alpha, beta = 4e-3, 40e-6 / 1024
    links = SlowLinks(hosts, alpha, beta)
    measured = {alg: timed(hosts, alg, n, links) for alg in ("ring", "binomial", HIER)}
    model = CostModel(cores=2, alpha_inter=alpha, beta_inter=beta)
    lay = Layout.of(hosts)
    table = registry.algorithms("allreduce")
    predicted = {alg: table[alg].predict(model, 4, n, lay)[0] for alg in measured}
    assert measured[HIER] < 0.75 * min(measured["ring"], measured["binomial"]), measured
    assert predicted[HIER] < 0.75 * min(predicted["ring"], predicted["binomial"]), predicted
    assert 0.5 < measured[HIER] / predicted[HIER] < 4, (measured, predicted)


def test_calibration_measures_both_links():
    """The calibration worker, on ranks a,a,b,b whose inter-host link is emulated slow,
    finds a slower alpha and beta between hosts than within one."""
    alpha, beta = 2e-3, 2e-8                  # 2 ms, 50 MB/s
    links = SlowLinks("aabb", alpha, beta)
    assert calibrate.link_pairs(list("aabb")) == {"intra": (0, 1), "inter": (0, 2)}
    assert calibrate.link_pairs(list("ab")) == {"inter": (0, 1)}
    assert calibrate.link_pairs(list("aa")) == {"intra": (0, 1)}
    assert calibrate.link_pairs(list("abb")) == {"intra": (1, 2), "inter": (0, 1)}
    got = on("aabb", lambda comm: calibrate.measure_links(comm, quick=True, gamma=False),
             recorder=links)
    result = got[0]
    assert got[1:] == [None] * 3
    assert set(result) >= {"alpha", "beta", "alpha_intra", "beta_intra", "alpha_inter",
                           "beta_inter"}
    assert result["alpha"] == result["alpha_intra"] < alpha <= result["alpha_inter"] < 3 * alpha
    # threads copying under the GIL on a busy machine: intra is fast, but not very fast
    assert result["beta_intra"] < beta / 2
    assert 0.5 * beta < result["beta_inter"] < 1.5 * beta + result["beta_intra"]


def test_calibration_file_merges(tmp_path, monkeypatch):
    path = tmp_path / "cost.json"
    monkeypatch.setenv("MINIMPI_COST_FILE", str(path))
    calibrate.save({"alpha": 4e-5, "beta": 4e-10, "gamma": 8e-11, "segment": 65536})
    calibrate.save({"alpha_inter": 1e-4, "beta_inter": 1e-8, "alpha": 3e-5})
    assert cost.read_config(str(path)) == {"alpha": 3e-5, "beta": 4e-10, "gamma": 8e-11,
                                           "segment": 65536, "alpha_inter": 1e-4,
                                           "beta_inter": 1e-8}
    model = cost.default_model()
    assert model.inter == cost.Link(1e-4, 1e-8) and model.intra == cost.Link(3e-5, 4e-10)

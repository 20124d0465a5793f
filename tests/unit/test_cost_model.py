"""The cost model's contention term and the properties ``auto`` relies on (see
minimpi/coll/cost.py): every registration states its work, ranks that share cores make
bandwidth-lean algorithms win, a flat tree beats a binomial one for small blocks, and the
launcher hands its model to every rank."""
from __future__ import annotations

import argparse
import io

import pytest
from minimpi.launcher import run as run_cmd
from minimpi.launcher.explain_cmd import explain

from minimpi.coll import cost, registry
from minimpi.data import ops

MiB = 1 << 20


@pytest.fixture(autouse=True)
def clean_model(monkeypatch, tmp_path):
    """Built-in defaults, no calibration file, no env overrides; 2 cores unless a test says."""
    monkeypatch.setenv("MINIMPI_COST_FILE", str(tmp_path / "absent.json"))
    for var, _ in cost.FIELDS.values():
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("MINIMPI_COST_CORES", "2")
    cost.clear_cache()
    yield
    cost.clear_cache()


def cores(monkeypatch, n: int) -> None:
    monkeypatch.setenv("MINIMPI_COST_CORES", str(n))
    cost.clear_cache()


def pick(collective: str, p: int, n: int, op=None) -> str:
    return registry.choose(collective, p, n, op).name


def test_every_registration_states_its_work():
    registry.algorithms("bcast")
    model = cost.CostModel(cores=2)
    registry.load_all()
    for collective in sorted(registry.REGISTRY):
        for alg in registry.algorithms(collective).values():
            assert alg.volume is not None and alg.messages is not None, (collective, alg.name)
            for p in (1, 2, 3, 8):
                for n in (0, 8, 4 * MiB):
                    total, formula, crowd = alg.predict(model, p, n)
                    assert total == max(formula, crowd) and crowd >= 0
                    assert alg.volume(p, n) >= 0 and alg.messages(model, p, n) >= 0


def test_contention_formula():
    m = cost.CostModel(alpha=4e-5, beta=1e-9, gamma=1e-10, cores=2)
    # (messages·α/4 + 2·volume·β + local·γ) / min(p, cores)
    assert cost.contention(m, 8, 1000, 500, 4) == pytest.approx((4e-5 + 2e-6 + 5e-8) / 2)
    assert cost.contention(m, 1, 1000) == pytest.approx(2e-6)      # one rank: one core
    assert [cost.tree_volume(p) for p in (1, 2, 4, 8, 5)] == [0, 1, 4, 12, 5]
    assert [cost.xor_exchanges(p) for p in (1, 2, 4, 3)] == [0, 2, 8, 4]


def test_cores_source(monkeypatch):
    model, sources = cost.model_sources()
    assert model.cores == 2 and sources["cores"] == "env MINIMPI_COST_CORES"
    monkeypatch.delenv("MINIMPI_COST_CORES")
    cost.clear_cache()
    model, sources = cost.model_sources()
    assert sources["cores"].startswith("this host") and model.cores >= 1


def test_shared_cores_favour_the_bandwidth_lean_bcast(monkeypatch):
    # 8 ranks on 2 cores: van de Geijn moves more bytes in all than the tree, and loses
    assert pick("bcast", 8, 4 * MiB) == "binomial"
    assert pick("bcast", 8, 64 * MiB) == "binomial"
    # with a core per rank the formula decides, and van de Geijn's bandwidth wins
    cores(monkeypatch, 64)
    assert pick("bcast", 8, 4 * MiB) == "scatter_allgather"


def test_large_reductions_on_shared_cores():
    assert pick("reduce", 8, 16 * MiB, ops.SUM) == "binomial"
    assert pick("reduce", 4, 4 * MiB, ops.SUM) == "binomial"
    assert pick("reduce_scatter", 8, 4 * MiB, ops.SUM) in ("ring", "pairwise")
    # p = 2: recursive halving does the ring's exchange, plus a copy of the whole input
    assert pick("reduce_scatter", 2, 4 * MiB, ops.SUM) == "ring"
    assert pick("allreduce", 8, 1 * MiB, ops.SUM) == "binomial"
    # at the contention bound, within registry.TIE of the binomial tree, the shorter
    # critical path: Rabenseifner (measured at p = 4, 5 and 8 on 2 cores: 1.2-1.6x faster),
    # and for 64 MiB the pipelined ring (~1.1x faster than Rabenseifner at p = 4)
    assert pick("allreduce", 8, 4 * MiB, ops.SUM) == "rabenseifner"
    assert pick("allreduce", 4, 4 * MiB, ops.SUM) == "rabenseifner"
    assert pick("allreduce", 4, 64 * MiB, ops.SUM) == "ring"


def test_flat_tree_beats_binomial_for_small_blocks():
    m = cost.CostModel(cores=2)
    for collective in ("gather", "scatter"):
        table = registry.algorithms(collective)
        for p in (4, 8):
            linear = table["linear"].predict(m, p, 8)[0]
            assert linear < table["binomial"].predict(m, p, 8)[0]
            assert pick(collective, p, 8) == "linear"
            assert pick(collective, p, 256 << 10) == "linear"


def test_alltoall_bruck_pays_for_its_copies():
    assert pick("alltoall", 8, 8) == "bruck"                   # fewest messages
    assert pick("alltoall", 8, 256 << 10) == "scattered"
    assert pick("alltoall", 4, 256 << 10) == "scattered"


def test_ties_go_to_the_smaller_formula():
    # at p = 8 on 2 cores ring, scattered (alltoall) - and ring, recursive doubling
    # (allgather) - send the same bytes; the one with fewer steps wins
    assert pick("alltoall", 8, 4 * MiB) == "scattered"
    assert pick("allgather", 8, 4 * MiB) != "ring"


def test_explain_prints_cores_and_both_terms():
    out = io.StringIO()
    assert explain("bcast", 4 * MiB, 8, out=out) == 0
    text = out.getvalue()
    assert "cores    = 2" in text and "[env MINIMPI_COST_CORES]" in text
    assert "contention" in text and "formula" in text and "min(p, cores)" in text


def test_launcher_exports_its_model(monkeypatch):
    exported = run_cmd.cost_model_env({})
    assert set(exported) == {var for var, _ in cost.FIELDS.values()} - {"MINIMPI_COST_CORES"}
    model = cost.default_model()
    assert float(exported["MINIMPI_COST_ALPHA"]) == model.alpha
    assert int(exported["MINIMPI_COST_SEGMENT"]) == model.segment
    monkeypatch.delenv("MINIMPI_COST_CORES")
    cost.clear_cache()
    exported = run_cmd.cost_model_env({"MINIMPI_COST_BETA": "1e-9"})   # as from -x
    assert "MINIMPI_COST_BETA" not in exported
    assert int(exported["MINIMPI_COST_CORES"]) == cost.CostModel().cores


def test_run_extra_env_carries_the_model(monkeypatch):
    monkeypatch.delenv("MINIMPI_COST_CORES")
    cost.clear_cache()
    parser = argparse.ArgumentParser()
    run_cmd.add_arguments(parser)
    args, _ = parser.parse_known_args(["-n", "2", "-x", "MINIMPI_COST_ALPHA=1e-5", "prog.py"])
    env = run_cmd.extra_env(args)
    assert env["MINIMPI_COST_ALPHA"] == "1e-5"
    assert all(var in env for var, _ in cost.FIELDS.values())


def test_auto_survives_more_distinct_sizes_than_it_remembers():
    """A long job whose collectives see ever-new byte counts (Allgatherv with varying counts)
    makes auto choose for more keys than its memo holds; every choice must still be made."""
    from minimpi.coll.plan import TABLE_SIZE, Plan, Settings
    from minimpi.data.ops import SUM
    plan = Plan(4, 0, (0, 0, 0, 0), Settings.from_environment())
    for nbytes in range(TABLE_SIZE + 500):
        alg = plan.algorithm("allreduce", nbytes, SUM)
        assert alg.name in registry.algorithms("allreduce")
        assert alg is registry.choose("allreduce", 4, nbytes, SUM)
    assert len(plan._decisions) <= TABLE_SIZE


def test_near_ties_go_to_the_shortest_critical_path():
    # 64 MiB at p = 4 on 2 cores: binomial, Rabenseifner and the ring meet at the contention
    # bound (the same bytes on the same cores), binomial 0.06% ahead only by message counts;
    # the ring's critical path is the shortest, and measured it is the fastest (the binomial
    # tree's root reduces and sends whole vectors while its core-mate needs the core)
    table = registry.algorithms("allreduce")
    m = cost.default_model()
    predicted = {name: table[name].predict(m, 4, 64 * MiB)[0]
                 for name in ("binomial", "rabenseifner", "ring")}
    assert min(predicted, key=predicted.get) == "binomial"
    assert max(predicted.values()) <= min(predicted.values()) * (1 + registry.TIE)
    assert pick("allreduce", 4, 64 * MiB, ops.SUM) == "ring"
    # a real difference is not a tie: 9% apart, the binomial bcast keeps its lead
    assert pick("bcast", 8, 4 * MiB) == "binomial"


# -- rendezvous: messages above the eager limit -------------------------------------------

def test_the_models_eager_limit_is_the_engines(monkeypatch):
    from minimpi.p2p.engine import DEFAULT_EAGER_LIMIT, eager_limit_from_env
    assert cost.CostModel().eager == DEFAULT_EAGER_LIMIT
    # the engine's variable, read the engine's way (sizes such as 32KiB)
    monkeypatch.setenv("MINIMPI_EAGER_LIMIT", "32KiB")
    model, sources = cost.model_sources()
    assert model.eager == eager_limit_from_env() == 32 * 1024
    assert sources["eager"] == "env MINIMPI_EAGER_LIMIT"
    monkeypatch.setenv("MINIMPI_EAGER_LIMIT", "lots")
    with pytest.raises(ValueError, match="MINIMPI_EAGER_LIMIT='lots' is not a number"):
        cost.model_sources()


def test_rendezvous_steps_count_the_path_above_the_eager_limit():
    m = cost.CostModel(cores=2)
    assert cost.rendezvous_steps(m, [8, 64 * 1024, 64 * 1024 + 1, MiB]) == 2
    ring = registry.algorithms("allreduce")["ring"]
    # a ring step moves n/p: 256 KiB is 87 KiB per step at p = 3 (rendezvous), 64 KiB at
    # p = 4 (eager)
    assert ring.rendezvous(m, 3, 256 * 1024) == 4 and ring.rendezvous(m, 4, 256 * 1024) == 0
    # the formula pays α per rendezvous and the work two frames per rank's rendezvous
    plain = ring.cost(m, 3, 256 * 1024)
    assert ring.predict(m, 3, 256 * 1024)[1] == pytest.approx(plain + 4 * m.alpha)
    messages, _, _ = ring.work(m, 3, 256 * 1024)
    assert messages == ring.messages(m, 3, 256 * 1024) + 2 * 3 * 4
    # a larger eager limit: no rendezvous, the plain formula
    roomy = cost.CostModel(cores=2, eager=MiB)
    assert ring.rendezvous(roomy, 3, 256 * 1024) == 0
    assert ring.predict(roomy, 3, 256 * 1024)[1] == pytest.approx(plain)
    # Rabenseifner's halving: n/2, n/4 down and back up; p = 5 adds the fold's whole vectors
    rab = registry.algorithms("allreduce")["rabenseifner"]
    assert list(rab.path(m, 5, 256 * 1024)) == [131072, 65536, 65536, 131072, 262144, 262144]
    assert rab.rendezvous(m, 5, 256 * 1024) == 4
    # a meeting in the segment has no messages, so no rendezvous
    assert registry.algorithms("allreduce")["segment"].rendezvous(m, 3, 4 * MiB) == 0


def test_every_algorithm_that_sends_has_a_path():
    registry.load_all()
    m = cost.CostModel(cores=2)
    for collective in sorted(registry.REGISTRY):
        table = registry.algorithms(collective)
        with_path = {name for name, alg in table.items() if alg.path is not None}
        if not with_path:
            continue         # barrier (no bytes), neighbour and two-group calls: one choice
        for name, alg in table.items():
            if registry.INTRA not in alg.kinds:
                continue
            # within a collective all or none: a missing path would make an algorithm look
            # cheaper above the eager limit than it is
            assert (alg.path is not None) != alg.segment, (collective, name)
            for p in (1, 2, 3, 5, 8):
                for n in (0, 8, 100_000, 4 * MiB):
                    sizes = list(alg.path(m, p, n)) if alg.path else []
                    assert all(0 <= s <= max(n, 1) * max(p, 1) for s in sizes), (collective, name)


def test_the_rendezvous_decides_at_256_kib(monkeypatch):
    """The picks the eager limit decides on 2 shared cores over shared memory, measured with
    benchmarks/collectives.py: at p = 3 a ring's 87 KiB steps are rendezvous, so the
    allgather meets in the segment and the allreduce doubles; at p = 5 the ring's 52 KiB
    steps are eager while Rabenseifner's first halves are not, and the ring wins."""
    from minimpi.coll.plan import Settings, priced_for
    from minimpi.coll.segment import SLOT_BYTES
    model = priced_for(Settings.from_environment(), "shm")
    choose = lambda coll, p, n, op=None: registry.choose(
        coll, p, n, op, model=model, segment_bytes=SLOT_BYTES).name
    assert choose("allgather", 3, 3 * 87381) == "segment"
    assert choose("allreduce", 3, 256 * 1024, ops.SUM) == "recursive_doubling"
    assert choose("allreduce", 5, 256 * 1024, ops.SUM) == "ring"
    # with the eager limit raised above every step, the old picks come back
    roomy = priced_for(Settings.from_environment({"MINIMPI_EAGER_LIMIT": "1MiB",
                                                  "MINIMPI_COST_CORES": "2"}), "shm")
    assert registry.choose("allgather", 3, 3 * 87381, model=roomy,
                           segment_bytes=SLOT_BYTES).name == "ring"


def test_segment_pieces_cost_more_when_ranks_outnumber_cores():
    seg = registry.algorithms("allgather")["segment"]
    crowded, roomy = cost.CostModel(cores=2), cost.CostModel(cores=8)
    n = 4 * MiB                                  # 5 ranks: 52 pieces of 16 KiB each
    c = -(-n // 5 // 16384)
    extra = (c - 1) * (5 / 2 - 1) * crowded.alpha / 4
    assert seg.cost(crowded, 5, n) == pytest.approx(seg.cost(roomy, 5, n) + extra)
    # one piece, or a core per rank: no extra
    assert seg.cost(crowded, 5, 8) == pytest.approx(seg.cost(roomy, 5, 8))
    assert seg.cost(crowded, 2, n) == pytest.approx(seg.cost(roomy, 2, n))
    # and auto leaves the segment for Bruck there over shared memory (measured 1.27x slower
    # than the ring, Bruck within 2% of it)
    from minimpi.coll.plan import priced_model
    shm = priced_model(crowded, "shm")
    assert registry.choose("allgather", 5, n, model=shm, segment_bytes=16384).name == "bruck"

"""The collective plan of a communicator (minimpi/coll/plan.py): settings read once, the
decision table, info keys, per-transport link terms, and the per-call cost of a repeated
small collective, counted in Python function calls so that it cannot silently grow."""
from __future__ import annotations

import sys

import numpy as np
import pytest

from minimpi.coll import cost, registry
from minimpi.coll.plan import LINK_TERMS, TABLE_SIZE, Plan, Settings, priced_for
from minimpi.comm.handle_types import Info
from minimpi.data import ops
from minimpi.errors import AlgorithmError
from minimpi.runtime.inproc import run_threads

#: Python function calls one repeated 8 B Allreduce at p = 2 over the in-process transport
#: may make on a rank (measured: about 96 - argument parsing 12, the plan's look-up and
#: channel 11, the schedule and its reduction 30, the engine, requests and transport 35;
#: it was about 157 before the plan; the call prepared as an object that a persistent
#: collective keeps for its Starts took 2 more). The fused path that auto takes between
#: processes on one host makes at most 25 (tests/unit/test_segment_collectives.py).
ALLREDUCE_CALLS = 98
#: the same for an 8 B Bcast (measured about 53 at the root, 65 at the receiver; 75 and
#: 116 before the plan; 3 of them the prepared call of ALLREDUCE_CALLS' note)
BCAST_CALLS = 68


@pytest.fixture(autouse=True)
def clean_model(monkeypatch, tmp_path):
    monkeypatch.setenv("MINIMPI_COST_FILE", str(tmp_path / "absent.json"))
    for var, _ in cost.FIELDS.values():
        monkeypatch.delenv(var, raising=False)
    monkeypatch.delenv("MINIMPI_ALLREDUCE", raising=False)


def calls_per_op(op, repeats: int = 200) -> float:
    """Python function calls (profile 'call' events) this thread makes per ``op()``."""
    count = [0]

    def profile(frame, event, arg):
        if event == "call":
            count[0] += 1

    sys.setprofile(profile)
    try:
        for _ in range(repeats):
            op()
    finally:
        sys.setprofile(None)
    return count[0] / repeats


def measured(p: int, make_op):
    def body(comm):
        op = make_op(comm)
        for _ in range(20):                         # the first call of a signature plans it
            op()
        comm.Barrier()
        return calls_per_op(op)
    return run_threads(p, body, timeout=60)


def test_repeated_small_allreduce_stays_cheap():
    def make(comm):
        a, b = np.ones(1), np.empty(1)
        return lambda: comm.Allreduce(a, b, op=ops.SUM)
    counts = measured(2, make)
    assert max(counts) <= ALLREDUCE_CALLS, counts


def test_repeated_small_bcast_stays_cheap():
    def make(comm):
        a = np.ones(1)
        return lambda: comm.Bcast(a, root=0)
    counts = measured(2, make)
    assert max(counts) <= BCAST_CALLS, counts


def test_settings_are_read_when_the_world_is_made(monkeypatch):
    """A forced algorithm in the environment applies to the world made after it is set;
    changing the environment mid-run changes nothing (Set_info does)."""
    import os
    monkeypatch.setenv("MINIMPI_ALLREDUCE", "ring")

    def body(comm):
        before = comm.endpoint and pick(comm)
        os.environ["MINIMPI_ALLREDUCE"] = "binomial"    # mid-run: not seen
        after_env = pick(comm)
        comm.Set_info(Info.Create({"minimpi_allreduce": "recursive_doubling"}))
        after_info = pick(comm)
        dup = comm.Dup()                                 # inherits the hints' settings
        return before, after_env, after_info, pick(dup)

    def pick(comm):
        recv = np.zeros(4)
        comm.Allreduce(np.ones(4), recv)
        assert (recv == comm.size).all()
        return comm._plan.algorithm("allreduce", recv.nbytes, ops.SUM).name

    for got in run_threads(3, body):
        assert got == ("ring", "ring", "recursive_doubling", "recursive_doubling")


def test_info_key_errors_name_the_key():
    def body(comm):
        comm.Set_info(Info.Create({"minimpi_cost_alpha": "fast"}))
    with pytest.raises(Exception, match="minimpi_cost_alpha"):
        run_threads(1, body)

    def bad_algorithm(comm):
        comm.Set_info(Info.Create({"minimpi_bcast": "nonexistent"}))
        comm.Bcast(np.zeros(2), root=0)
    with pytest.raises(Exception, match="nonexistent.*info key minimpi_bcast"):
        run_threads(2, bad_algorithm)


def test_every_rank_decides_alike_and_the_table_is_bounded():
    settings = Settings.from_environment({})
    plans = [Plan(5, r, (0, 0, 0, 1, 1), settings) for r in range(5)]
    for n in (0, 8, 4096, 1 << 20, 1 << 24):
        for collective in ("allreduce", "bcast", "allgather", "reduce_scatter", "scan"):
            names = {p.algorithm(collective, n, ops.SUM).name for p in plans}
            assert len(names) == 1, (collective, n, names)
    # ever-new sizes (Allgatherv with varying counts) never grow the table past its bound
    plan = plans[0]
    for n in range(TABLE_SIZE + 10):
        assert plan.algorithm("allreduce", n, ops.SUM).name in registry.algorithms("allreduce")
    assert len(plan._decisions) <= TABLE_SIZE


def test_plan_layout_groups_and_leaders():
    plan = Plan(5, 0, (0, 1, 0, 1, 1), Settings.from_environment({}))
    assert plan.layout == cost.Layout((2, 3), contiguous=False)
    assert plan.groups == [[0, 2], [1, 3, 4]] and plan.leaders == [0, 1]


def test_intra_host_link_is_priced_for_its_wire():
    settings = Settings.from_environment({})
    shm = priced_for(settings, "shm")
    alpha, beta = LINK_TERMS["shm"]
    assert shm.intra.beta == beta < settings.model.beta    # shared memory: faster bytes
    assert shm.intra.alpha == (settings.model.alpha if alpha is None else alpha)
    assert shm.inter == settings.model.inter            # between hosts: unchanged
    assert priced_for(settings, "tcp") == settings.model
    # a calibrated intra-host link wins over the built-in figures
    calibrated = Settings.from_environment({"MINIMPI_COST_BETA_INTRA": "3e-10"})
    assert priced_for(calibrated, "shm").intra.beta == 3e-10


def test_forced_algorithm_refusal_names_its_source():
    settings = Settings.from_environment({"MINIMPI_ALLREDUCE": "ring"})
    plan = Plan(3, 0, (0, 0, 0), settings)
    with pytest.raises(AlgorithmError, match="from MINIMPI_ALLREDUCE"):
        plan.algorithm("allreduce", 0, None, objects=True, call="allreduce")


def test_calls_of_ever_new_sizes_keep_bounded_working_buffers():
    """A program whose collectives see ever-new sizes (the soak's mix) must not grow: the
    compiled calls keep at most KEEP_BYTES of working buffers, letting the least recently
    used go - and a repeated large call still keeps its own (no new buffers per call)."""
    from minimpi.coll.compiled import KEEP_BYTES

    def body(comm):
        for i in range(48):           # 48 sizes of 1-1.4 MiB: ~58 MiB if all were kept
            n = (1 << 17) + 1024 * i
            out = np.empty(n)
            comm.Allreduce(np.ones(n), out, algorithm="recursive_doubling")
            assert out[0] == comm.size
        kept_mixed = comm._plan.kept_bytes
        big = np.empty(9 << 19)           # 36 MiB: more than KEEP_BYTES alone
        comm.Allreduce(np.ones(9 << 19), big, algorithm="recursive_doubling")
        comm.Allreduce(np.ones(9 << 19), big, algorithm="recursive_doubling")
        return kept_mixed, comm._plan.kept_bytes

    for kept_mixed, kept_big in run_threads(3, body, timeout=120):
        assert 0 < kept_mixed <= KEEP_BYTES, kept_mixed
        assert kept_big > KEEP_BYTES, kept_big          # the large call's own, alone

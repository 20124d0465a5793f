"""`minimpi explain`: every registered algorithm is listed with a predicted time or a reason
it is refused; byte sizes parse; a saved calibration file feeds the cost model."""
from __future__ import annotations

import argparse
import io
import json
import re

import pytest
from minimpi.launcher import cli, explain_cmd
from minimpi.launcher.argtypes import byte_size as parse_size
from minimpi.launcher.explain_cmd import explain, make_op

from minimpi.coll import cost, registry
from minimpi.coll.registry import algorithm

FAKE = "explain_test_collective"


@pytest.fixture
def fake_collective():
    """A collective of our own whose algorithms cover each kind of restriction."""
    registry.algorithms("bcast")          # load the real modules first
    algorithm(FAKE, "tree", cost=lambda m, p, n: cost.ceil_log2(p) * (m.alpha + n * m.beta))(
        lambda ch, data: None)
    algorithm(FAKE, "reorder", commutative_only=True,
              cost=lambda m, p, n: m.alpha)(lambda ch, data: None)
    algorithm(FAKE, "bufonly", objects=False, cost=lambda m, p, n: 0.1 * m.alpha)(
        lambda ch, data: None)
    yield FAKE
    registry.REGISTRY.pop(FAKE, None)


@pytest.fixture(autouse=True)
def clean_model(monkeypatch, tmp_path):
    """No user calibration file and no env overrides leak into these tests."""
    monkeypatch.setenv("MINIMPI_COST_FILE", str(tmp_path / "absent.json"))
    for var, _ in cost.FIELDS.values():
        monkeypatch.delenv(var, raising=False)
    monkeypatch.delenv(f"MINIMPI_{FAKE.upper()}", raising=False)
    cost.clear_cache()
    yield
    cost.clear_cache()


def rows(text: str) -> dict:
    """algorithm name -> (marked by auto, rest of its line) from explain's table."""
    out = {}
    table = text.split("algorithm", 1)[1].split("\n\n")[0].splitlines()[1:]
    for line in table:
        m = re.match(r"  ([* ]) (\S+)\s+(.*)", line)
        if m:
            out[m.group(2)] = (m.group(1) == "*", m.group(3))
    return out


def run_explain(*args, **kwargs) -> str:
    out = io.StringIO()
    explain(*args, out=out, **kwargs)
    return out.getvalue()


@pytest.mark.parametrize("p", [1, 2, 6, 8])
def test_every_registered_algorithm_has_a_time_or_a_reason(p):
    registry.algorithms("bcast")
    for collective in sorted(registry.REGISTRY):
        if collective == FAKE:
            continue
        table = registry.REGISTRY[collective]
        for op in (None, make_op("sum"), make_op("noncommutative")):
            for inter in (False, True):
                kind = registry.INTER if inter else registry.INTRA
                if not registry.serving(table, kind):
                    continue
                text = run_explain(collective, 4 << 20, p, op, inter=inter)
                got = rows(text)
                # the algorithms of the communicator's kind, each with a time or a reason
                assert set(got) == set(registry.serving(table, kind)), (collective, text)
                marked = [name for name, (star, _) in got.items() if star]
                assert len(marked) == 1, text
                for name, (_, rest) in got.items():
                    assert re.match(r"[\d.]+ (us|ms|s) ", rest) or rest.startswith("refused "), rest


def test_marks_the_algorithm_auto_chooses(fake_collective):
    text = run_explain(fake_collective, 64, 8, make_op("sum"))
    got = rows(text)
    assert got["bufonly"][0] and not any(star for n, (star, _) in got.items() if n != "bufonly")
    assert registry.choose(fake_collective, 8, 64, make_op("sum")).name == "bufonly"
    assert "* bufonly: what auto picks" in text


def test_refusals_show_their_reasons(fake_collective):
    text = run_explain(fake_collective, 4096, 6, make_op("noncommutative"), objects=True)
    got = rows(text)
    assert "refused" in got["reorder"][1] and "commutative" in got["reorder"][1]
    assert "refused" in got["bufonly"][1] and "buffers only" in got["bufonly"][1]
    assert got["tree"][0]                      # the only one left is what auto picks
    # with buffers and a commutative op, the same algorithms get times
    got = rows(run_explain(fake_collective, 64, 8, make_op("sum")))
    assert all("refused" not in rest for _, rest in got.values())


def test_forced_algorithm_is_reported(fake_collective, monkeypatch):
    monkeypatch.setenv(f"MINIMPI_{FAKE.upper()}", "tree")
    text = run_explain(fake_collective, 64, 8, make_op("sum"))
    assert rows(text)["tree"][0]
    assert f"forced by MINIMPI_{FAKE.upper()}=tree" in text
    monkeypatch.setenv(f"MINIMPI_{FAKE.upper()}", "bufonly")
    out = io.StringIO()
    assert explain(fake_collective, 64, 6, None, out=out, objects=True) == 1
    assert "buffers only" in out.getvalue() and "auto cannot pick" in out.getvalue()


def test_unknown_collective_is_a_usage_error(capsys):
    assert explain("no_such_collective", 8, 4, None, out=io.StringIO()) == 2
    assert "unknown collective" in capsys.readouterr().err


@pytest.mark.parametrize("text, n", [("8", 8), ("64KiB", 65536), ("4MiB", 4 << 20),
                                     ("1GiB", 1 << 30), ("64k", 65536), ("1MB", 10**6),
                                     (" 2 MiB ", 2 << 20)])
def test_parse_size(text, n):
    assert parse_size(text) == n


@pytest.mark.parametrize("text", ["", "lots", "4XB", "-8", "MiB"])
def test_parse_size_rejects(text):
    with pytest.raises(argparse.ArgumentTypeError, match="not a byte size"):
        parse_size(text)


def test_make_op():
    assert make_op("SUM").Is_commutative() and make_op("max").name == "MAX"
    assert not make_op("noncommutative").Is_commutative()
    assert make_op(None) is None
    with pytest.raises(argparse.ArgumentTypeError, match="unknown op"):
        make_op("median")


def test_model_inputs_and_their_sources(monkeypatch, tmp_path):
    path = tmp_path / "cost.json"
    path.write_text(json.dumps({"alpha": 2e-5, "beta": 1e-9, "measured": {"host": "x"}}))
    monkeypatch.setenv("MINIMPI_COST_FILE", str(path))
    monkeypatch.setenv("MINIMPI_COST_BETA", "5e-10")
    cost.clear_cache()
    model, sources = cost.model_sources()
    assert model.alpha == 2e-5 and sources["alpha"] == f"file {path}"
    assert model.beta == 5e-10 and sources["beta"] == "env MINIMPI_COST_BETA"
    assert model.gamma == cost.CostModel().gamma and sources["gamma"] == "built-in default"
    assert cost.default_model() == model
    text = run_explain("bcast", 1 << 20, 4, None)
    assert "20.00 us per message" in text and f"[file {path}]" in text
    assert "[env MINIMPI_COST_BETA]" in text and "[built-in default]" in text


def test_saved_calibration_round_trips(monkeypatch, tmp_path):
    from minimpi.tools import calibrate
    path = tmp_path / "sub" / "cost.json"
    monkeypatch.setenv("MINIMPI_COST_FILE", str(path))
    result = {"alpha": 4.5e-5, "beta": 4e-10, "gamma": 8e-11, "measured": {"how": "test"}}
    assert calibrate.save(result) == str(path)
    assert cost.read_config(str(path)) == {"alpha": 4.5e-5, "beta": 4e-10, "gamma": 8e-11}
    model = cost.default_model()
    assert (model.alpha, model.beta, model.gamma) == (4.5e-5, 4e-10, 8e-11)


@pytest.mark.parametrize("content, message", [
    ("{not json", "not valid JSON"),
    ("[1, 2]", "expected a JSON object"),
    ('{"alpha": -1}', "alpha must be a positive number"),
    ('{"beta": "fast"}', "beta must be a positive number"),
])
def test_bad_calibration_file(tmp_path, monkeypatch, capsys, content, message):
    path = tmp_path / "cost.json"
    path.write_text(content)
    with pytest.raises(ValueError, match=message):
        cost.read_config(str(path))
    monkeypatch.setenv("MINIMPI_COST_FILE", str(path))
    cost.clear_cache()
    assert cost.default_model() == cost.CostModel()       # ignored, with one warning
    cost.default_model()
    assert capsys.readouterr().err.count("ignoring the cost-model file") == 1


def test_config_path(monkeypatch):
    assert cost.config_path({"MINIMPI_COST_FILE": ""}) is None
    assert cost.config_path({"MINIMPI_COST_FILE": "/x.json"}) == "/x.json"
    assert cost.config_path({"XDG_CONFIG_HOME": "/cfg"}) == "/cfg/minimpi/cost.json"


def test_fit_line():
    from minimpi.tools.calibrate import fit_line
    a, b = fit_line([1.0, 2.0, 3.0], [5.0, 7.0, 9.0])
    assert a == pytest.approx(3.0) and b == pytest.approx(2.0)


def test_cli_subcommand(capsys):
    assert cli.main(["explain", "--list"]) == 0
    out = capsys.readouterr().out
    for collective, table in registry.REGISTRY.items():
        if collective != FAKE:
            assert f"{collective}:" in out and all(name in out for name in table)
    assert cli.main(["explain", "bcast", "--bytes", "64KiB", "-n", "6"]) == 0
    assert "bcast of 64 KiB (65536 B) on 6 ranks" in capsys.readouterr().out
    assert cli.main(["explain"]) == 2
    assert "name a collective" in capsys.readouterr().err
    assert "explain" in explain_cmd.__doc__


# -- explain teaches the model (issue 13) -----------------------------------------------------
def _real_algorithms():
    registry.algorithms("bcast")
    return [alg for collective, table in sorted(registry.REGISTRY.items()) if collective != FAKE
            for alg in table.values()]


def test_every_algorithm_states_a_formula_that_computes_its_cost():
    from dataclasses import replace
    models = [cost.CostModel(), replace(cost.CostModel(), alpha=3e-6, beta=1e-11, gamma=7e-10,
                                        segment=8192)]
    for alg in _real_algorithms():
        if alg.hierarchical:       # priced step by step (alg.phases), each on its own link
            assert alg.phases is not None and not alg.formula, alg.name
            continue
        assert alg.formula and "α" in alg.formula, (alg.collective, alg.name)
        for model in models:
            for p in (2, 3, 4, 6, 8, 13, 16):
                for n in (0, 8, 5000, 300_000, 4 << 20):
                    got, _ = cost.formula_values(alg.formula, model, p, n)
                    assert got == pytest.approx(alg.cost(model, p, n), rel=1e-12, abs=1e-18), (
                        alg.collective, alg.name, p, n)


def test_formula_check_can_fail():
    with pytest.raises(ValueError, match="cannot evaluate"):
        cost.formula_values("2·(p-1·α", cost.CostModel(), 4, 8)
    got, _ = cost.formula_values("(p-1)·α", cost.CostModel(), 4, 8)
    assert got != pytest.approx(cost.CostModel().alpha * 4)


def test_terms_add_up_and_show_the_numbers():
    model = cost.CostModel()
    for alg in _real_algorithms():
        if alg.hierarchical:
            continue
        a, b, g = cost.split_terms(alg.cost, model, 8, 1 << 20)
        assert a + b + g == pytest.approx(alg.cost(model, 8, 1 << 20))
    # (over TCP: the model's own beta, which the figures below are written with)
    text = run_explain("allreduce", 4 << 20, 8, make_op("sum"), transport="tcp")
    details = text.split("how each prediction is made", 1)[1]
    for name in ("ring", "rabenseifner", "binomial", "recursive_doubling"):
        block = details.split(f"\n  {name}: ", 1)[1].split("\n  ", 1)[1]
        assert block.startswith("    time       = ")
    ring = details.split("\n  ring: ", 1)[1]
    assert "2·(p-1)·α + (p-1)·(S-1)·α/4 + 2·(p-1)/p·n·β" in ring
    assert "(S = min(8, max(1, ⌈n/p/segment⌉)) = 2)" in ring
    assert "= 15.75·α + 7 MiB·β + 1.8 MiB·γ" in ring
    assert "15.75 × 46.00 us + 7 MiB × 0.2326 ns/B" in ring
    assert "724.5 us latency (α) + 1.707 ms bandwidth (β) + 135.9 us reduction (γ) = 2.567 ms" in ring
    # its 14 block steps move 256 KiB pieces: each a rendezvous, α more, and 2 frames per rank
    assert ("rendezvous = 14 messages above the eager limit (64 KiB) on the critical path × 1·α"
            in ring)
    assert "formula    = 2.567 ms + 644.0 us = 3.211 ms" in ring
    assert "(392 messages × α/4" in ring and "include 224 RTS and CTS frames" in ring
    assert "eager    = 64 KiB (65536 B)" in text
    assert "/ min(p=8, cores=2)" in ring and "contention decides" in ring
    assert "(2·⌊log2 p⌋ + 2·f)·α" in details.split("\n  rabenseifner: ", 1)[1]
    assert "Why contention:" in text and "share cores" in text


def test_cores_show_how_the_choice_changes(monkeypatch):
    laptop = rows(run_explain("allreduce", 1 << 20, 8, make_op("sum"), cores=2))
    cluster = rows(run_explain("allreduce", 1 << 20, 8, make_op("sum"), cores=8))
    pick = lambda got: [name for name, (star, _) in got.items() if star][0]
    assert (pick(laptop), pick(cluster)) == ("binomial", "rabenseifner")
    text = run_explain("allreduce", 1 << 20, 8, make_op("sum"), cores=2)
    assert "cores    = 2 " in text and "[--cores]" in text
    assert "  2 cores (this model): binomial" in text
    assert "  8 cores - a core per rank, as on a cluster: rabenseifner" in text
    monkeypatch.setenv("MINIMPI_COST_CORES", "8")         # the documented variable
    cost.clear_cache()
    assert pick(rows(run_explain("allreduce", 1 << 20, 8, make_op("sum")))) == "rabenseifner"
    assert "[env MINIMPI_COST_CORES]" in run_explain("allreduce", 1 << 20, 8, make_op("sum"))


def test_cli_cores(capsys):
    assert cli.main(["explain", "allreduce", "--bytes", "4MiB", "-n", "8", "--cores", "8"]) == 0
    assert "* rabenseifner" in capsys.readouterr().out


def test_summaries_are_whole_sentences():
    for alg in _real_algorithms():
        text = alg.summary
        para = registry.plain(" ".join(line.strip() for line in
                                       alg.function.__doc__.strip().split("\n\n")[0].splitlines()))
        assert text.endswith(".") and para.startswith(text), (alg.name, text)
        rest = para[len(text):]
        assert rest == "" or re.match(r"\s+[A-Z(]", rest), (alg.name, text, rest[:20])
        assert "``" not in text and ":func:" not in text
    assert registry.first_sentence("Pipelined chain 0 -> 1 -> ... -> p-1, in ``segment``s.\n"
                                   "  Next one.") == "Pipelined chain 0 -> 1 -> ... -> p-1, in segments."
    out = io.StringIO()
    explain_cmd.list_all(out)
    assert "Binomial gather to rank 0, then binomial broadcast of everything: 2·ceil(log2 p) " \
           "steps; time" in out.getvalue()


def test_registry_loads_once_for_ranks_that_start_together():
    # Thread ranks used to see a half-filled registry ("unknown collective 'allreduce'") when
    # one of them was still importing the algorithm modules.
    import subprocess
    import sys
    code = ("import threading\n"
            "from minimpi.coll import registry\n"
            "go, bad = threading.Barrier(8), []\n"
            "def rank():\n"
            "    go.wait()\n"
            "    try:\n"
            "        registry.algorithms('allreduce'); registry.algorithms('scan')\n"
            "    except Exception as e:\n"
            "        bad.append(e)\n"
            "ts = [threading.Thread(target=rank) for _ in range(8)]\n"
            "[t.start() for t in ts]; [t.join() for t in ts]\n"
            "print(bad)\n")
    for _ in range(3):
        res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             timeout=60)
        assert res.stdout.strip() == "[]", res.stdout + res.stderr


def test_a_hierarchical_algorithm_is_explained_by_its_steps():
    from minimpi.coll.cost import Layout
    text = run_explain("allreduce", 64 << 20, 8, make_op("sum"), layout=Layout((4, 4)))
    details = text.split("how each prediction is made", 1)[1]
    block = details.split("\n  hierarchical: ", 1)[1].split("\n  ", 1)[1]
    assert block.startswith("    time       = the sum of its steps: ")
    assert "1. " in details.split("\n  hierarchical: ", 1)[1] and \
           "/ sum over hosts of min(ranks, cores=" in details


def test_inter_explains_the_intercommunicator_algorithms(monkeypatch):
    """``--inter``: the algorithms that serve two groups, priced, picked and taken apart;
    the intracommunicator ones are not candidates there (nor the reverse), and a forced
    name of the other kind is named as the reason auto cannot pick."""
    registry.algorithms("bcast")
    monkeypatch.delenv("MINIMPI_ALLREDUCE", raising=False)
    text = run_explain("allreduce", 64, 3, make_op("sum"), inter=True)
    assert "on an intercommunicator of two groups of 3 ranks" in text
    assert rows(text) == {"leaders_swap": (True, rows(text)["leaders_swap"][1])}
    assert "leaders_swap: what auto picks (least predicted time among the algorithms for " \
           "intercommunicators" in text
    assert "time       = (2·⌈log2 p⌉ + 1)·(α + n·β) + ⌈log2 p⌉·n·γ" in text
    assert "leaders_swap" not in rows(run_explain("allreduce", 64, 3, make_op("sum")))
    monkeypatch.setenv("MINIMPI_ALLREDUCE", "ring")
    forced = run_explain("allreduce", 64, 3, make_op("sum"), inter=True)
    assert ("auto cannot pick: allreduce: algorithm 'ring' (from MINIMPI_ALLREDUCE) cannot "
            "serve this call: it serves intracommunicators only, and this call is on an "
            "intercommunicator (allreduce on an intercommunicator has: leaders_swap, auto)"
            ) in forced


@pytest.mark.parametrize("transport", ["shm", "tcp"])
def test_explain_picks_what_a_job_over_that_transport_picks(transport, monkeypatch):
    """explain prices the link between ranks of one host as the job's plan does (shared
    memory moves bytes faster than TCP, and only it has a segment), so its pick is the
    job's: once it priced every job as over TCP and named binomial for a 256 KiB Allreduce
    at p = 4 that the job ran with Rabenseifner."""
    from minimpi.coll.plan import Plan, Settings
    for var in [f for f, _ in cost.FIELDS.values()] + ["MINIMPI_COST_FILE"]:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("MINIMPI_COST_FILE", "")
    monkeypatch.setenv("MINIMPI_COST_CORES", "2")
    cost.clear_cache()
    differ = 0
    for collective, p, nbytes in [("allreduce", 4, 256 << 10), ("allreduce", 3, 256 << 10),
                                  ("allgather", 5, 4 << 20), ("bcast", 4, 8),
                                  ("reduce_scatter", 4, 4 << 20), ("allreduce", 4, 8)]:
        op = make_op("sum") if "reduce" in collective else None
        plan = Plan(p, 0, [0] * p, Settings.from_environment(), intra_wire=transport)
        job = plan.algorithm(collective, nbytes, op).name
        got = rows(run_explain(collective, nbytes, p, op, transport=transport))
        marked = [name for name, (star, _) in got.items() if star]
        assert marked == [job], (collective, p, nbytes, transport, marked, job)
        other = rows(run_explain(collective, nbytes, p, op,
                                 transport="tcp" if transport == "shm" else "shm"))
        differ += [n for n, (star, _) in other.items() if star] != marked
    assert differ, "the transport changed no pick: the test would not see the old bug"
    cost.clear_cache()

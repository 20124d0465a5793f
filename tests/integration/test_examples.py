"""Every teaching program in examples/ runs on 4 ranks and passes its own serial check."""
from __future__ import annotations

import json
import pathlib

import pytest
from jobhelpers import marker_args, run_minimpi

EXAMPLES = pathlib.Path(__file__).resolve().parents[2] / "examples"
PROGRAMS = sorted(p.name for p in EXAMPLES.glob("*.py"))


def test_the_examples_are_there():
    for name in ["coll_bcast.py", "coll_scatter.py", "coll_gather.py", "coll_allgather.py",
                 "coll_reduce.py", "coll_allreduce.py", "coll_reduce_scatter.py",
                 "coll_alltoall.py", "coll_scan.py", "coll_barrier.py", "data_parallel.py",
                 "tensor_parallel.py", "pipeline_parallel.py", "expert_parallel.py"]:
        assert name in PROGRAMS


@pytest.mark.parametrize("program", PROGRAMS)
def test_example_runs_on_4_ranks(program, job_marker):
    res = run_minimpi("-n", "4", *marker_args(job_marker), str(EXAMPLES / program), timeout=60)
    assert res.returncode == 0, f"{program} failed:\n{res.stdout}\n{res.stderr}"


@pytest.mark.parametrize("alg", ["ring", "recursive_doubling", "rabenseifner", "binomial"])
def test_data_parallel_with_each_allreduce(alg, job_marker):
    res = run_minimpi("-n", "4", "--coll", f"allreduce={alg}", *marker_args(job_marker),
                      str(EXAMPLES / "data_parallel.py"), timeout=60)
    assert res.returncode == 0, res.stderr


def test_a_wrong_result_fails_the_job(tmp_path, job_marker):
    """The examples' checks really bite: break Allreduce's op and data_parallel must fail."""
    broken = tmp_path / "dp_broken.py"
    broken.write_text((EXAMPLES / "data_parallel.py").read_text().replace(
        "op=MPI.SUM)   # sum", "op=MPI.MAX)   # wrong on purpose"))
    res = run_minimpi("-n", "4", *marker_args(job_marker), str(broken), timeout=60)
    assert res.returncode != 0 and "differ from serial" in res.stderr


def test_pipeline_trace_shows_fill_and_drain(tmp_path, job_marker):
    out = tmp_path / "pp.json"
    res = run_minimpi("-n", "4", *marker_args(job_marker), "--trace", str(out),
                      str(EXAMPLES / "pipeline_parallel.py"), timeout=90)
    assert res.returncode == 0, res.stderr
    ev = json.loads(out.read_text())["traceEvents"]
    flows = [e for e in ev if e["ph"] == "s" and e["cat"] == "msg"]
    # 8 micro-batches forward over 3 links (stage s -> s+1), and their gradients backward
    assert sorted((e["tid"], e["args"]["peer"]) for e in flows) == \
        sorted([(s, s + 1) for s in range(3)] * 8 + [(s + 1, s) for s in range(3)] * 8)
    calls = {tid: sorted((e for e in ev if e["ph"] == "X" and e["cat"] == "mpi"
                          and e["tid"] == tid), key=lambda e: e["ts"]) for tid in range(4)}
    end = lambda e: e["ts"] + e["dur"]
    recvs = {tid: [e for e in calls[tid] if e["name"].startswith("Recv")] for tid in range(4)}
    # the fill: stage s gets micro-batch 0 only after stages 0..s-1 computed it
    fill = [end(recvs[s][0]) for s in (1, 2, 3)]
    assert fill == sorted(fill) and len(set(fill)) == 3, fill
    # the drain: the last gradient reaches stage 2, then 1, then 0
    drain = [end(recvs[s][-1]) for s in (2, 1, 0)]
    assert drain == sorted(drain) and len(set(drain)) == 3, drain
    # enough work per stage to see: computing (the gaps between MPI calls) takes milliseconds
    for tid in range(4):
        computing = sum(b["ts"] - end(a) for a, b in zip(calls[tid], calls[tid][1:]))
        assert computing > 5000, (tid, computing)      # microseconds


def test_tensor_parallel_says_why_it_gathers():
    import ast
    source = (EXAMPLES / "tensor_parallel.py").read_text()
    doc = ast.get_docstring(ast.parse(source))
    assert "Why the Allgather" in doc and "does not need it" in doc
    # ... and the code agrees: the row-parallel product uses the local slice, not Y
    assert "np.maximum(Y_mine, 0) @ B[cols, :]" in source

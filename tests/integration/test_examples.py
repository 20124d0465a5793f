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


def test_pipeline_trace_shows_stages(tmp_path, job_marker):
    out = tmp_path / "pp.json"
    res = run_minimpi("-n", "4", *marker_args(job_marker), "--trace", str(out),
                      str(EXAMPLES / "pipeline_parallel.py"), timeout=60)
    assert res.returncode == 0, res.stderr
    ev = json.loads(out.read_text())["traceEvents"]
    flows = [e for e in ev if e["ph"] == "s" and e["cat"] == "msg"]
    # 6 micro-batches over 3 links, each flow from stage s to s+1
    assert sorted((e["tid"], e["args"]["peer"]) for e in flows) == \
        sorted([(s, s + 1) for s in range(3)] * 6)

"""A real 2-D Jacobi program whose column halos travel as derived datatypes (3 processes)."""
from __future__ import annotations

import pathlib

import pytest
from jobhelpers import marker_args, run_minimpi

PROGRAM = pathlib.Path(__file__).resolve().parents[2] / "examples" / "jacobi_halo.py"


@pytest.mark.parametrize("datatype", ["vector", "subarray"])
def test_jacobi_column_halos_match_the_serial_grid(datatype, job_marker):
    res = run_minimpi("-n", "3", *marker_args(job_marker), str(PROGRAM), "--datatype", datatype,
                      "--rows", "33", "--cols", "29", "--iterations", "20", timeout=90)
    assert res.returncode == 0, f"{res.stdout}\n{res.stderr}"
    assert f"3 ranks, 33x29 grid, 20 iterations, {datatype} columns: max error 0 OK" in res.stdout

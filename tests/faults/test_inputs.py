"""Smaller items of issue 14: a bad argument type, the secret kept from child processes,
running out of file descriptors."""
from __future__ import annotations

import errno
import socket
import subprocess
import sys

import pytest
from jobhelpers import marker_args, run_minimpi

from minimpi.errors import TransportError
from minimpi.transports.tcp import TcpTransport


def test_send_to_a_string_rank_is_a_clear_error():
    # a float rank or tag is truncated, as mpi4py's C int arguments are (dest=0.0 is rank 0;
    # tests/unit/test_mpi4py_api.py); a string, None or NaN is refused, naming the call
    code = ("from minimpi import MPI\n"
            "MPI.COMM_WORLD.send('ok', dest=0.0, tag=0.5)\n"
            "print(MPI.COMM_WORLD.recv(source=0.0, tag=0))\n"
            "for call in (lambda: MPI.COMM_WORLD.send(1, dest='0'),\n"
            "             lambda: MPI.COMM_WORLD.Recv(bytearray(1), source='0'),\n"
            "             lambda: MPI.COMM_WORLD.send(1, dest=0, tag=None),\n"
            "             lambda: MPI.COMM_WORLD.send(1, dest=1.0)):\n"
            "    try:\n"
            "        call()\n"
            "    except MPI.Exception as e:\n"
            "        print(type(e).__name__, e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == "ok"
    assert lines[1] == ("RankError rank 0: send(dest='0'): dest must be an integer "
                        "(0..0 or MPI.PROC_NULL), not str")
    assert lines[2].startswith("RankError rank 0: Recv(source='0'): source must be an integer")
    assert lines[3].startswith("TagError rank 0: send(tag=None): tag must be an integer")
    assert lines[4].startswith("RankError rank 0: send(dest=1.0): invalid dest rank")


def test_the_job_secret_does_not_reach_processes_a_rank_starts(write_script, job_marker):
    # not even one started before MPI is imported: the rank start script takes it out
    script = write_script("child.py", """
        import os, subprocess, sys
        had = "MINIMPI_SECRET" in os.environ
        early = subprocess.run([sys.executable, "-c",
                                "import os; print('MINIMPI_SECRET' in os.environ)"],
                               capture_output=True, text=True).stdout.strip()
        from minimpi import MPI
        MPI.COMM_WORLD.Barrier()
        child = subprocess.run([sys.executable, "-c",
                                "import os; print('MINIMPI_SECRET' in os.environ)"],
                               capture_output=True, text=True).stdout.strip()
        print("before", had, "early", early, "after", "MINIMPI_SECRET" in os.environ,
              "child", child)
    """)
    res = run_minimpi("-n", 2, *marker_args(job_marker), script, timeout=60)
    assert res.returncode == 0, res.stderr
    assert res.stdout.count("before False early False after False child False") == 2, res.stdout


def test_a_forked_child_that_exits_normally_does_not_finalize_the_rank(write_script,
                                                                       job_marker):
    script = write_script("fork.py", """
        import os, sys
        import numpy as np
        from mpi4py import MPI
        comm = MPI.COMM_WORLD
        comm.Barrier()
        if comm.rank == 0:
            pid = os.fork()
            if pid == 0:
                sys.exit(0)            # runs the exit hooks the parent registered
            os.waitpid(pid, 0)
        x = np.full(3, comm.rank + 1.0)
        comm.Allreduce(MPI.IN_PLACE, x)
        print("sum", x[0], flush=True)
    """)
    for transport in ("shm", "tcp"):
        res = run_minimpi("-n", 3, "--transport", transport, *marker_args(job_marker), script,
                          timeout=60)
        assert res.returncode == 0, res.stderr
        assert res.stdout.count("sum 6.0") == 3, res.stdout + res.stderr


def test_out_of_descriptors_is_a_transport_error_naming_the_limit(monkeypatch):
    t = TcpTransport(0, 2, b"s" * 32)
    t.set_peers(["127.0.0.1:1", "127.0.0.1:1"])

    def no_more(*args, **kwargs):
        raise OSError(errno.EMFILE, "Too many open files")

    monkeypatch.setattr(socket, "socket", no_more)
    with pytest.raises(TransportError, match=r"rank 0: cannot open a connection to rank 1 .*"
                                             r"Too many open files .*ulimit -n"):
        t.send(1, b"\0" * 32, (), None)
    t.close()

"""Point-to-point over real processes started by `minimpi run`: over TCP sockets and over
shared memory (``transport`` parameter), and what only TCP has (strangers on a port)."""
from __future__ import annotations

import re
import socket
import time

import pytest
from jobhelpers import finish, marker_args, run_minimpi, start_minimpi

#: the transports every data-moving test runs over
over_each_transport = pytest.mark.parametrize("transport", ["tcp", "shm"])


@over_each_transport
def test_pingpong_objects_and_arrays_of_many_sizes(transport, write_script, job_marker):
    script = write_script("pingpong.py", """
        import numpy as np
        from minimpi import MPI
        comm = MPI.COMM_WORLD
        other = 1 - comm.rank
        sizes = [0, 1, 8, 1000, 65535, 65536, 65537, 1 << 20, (64 << 20) + 3]
        for n in sizes:
            if comm.rank == 0:
                a = (np.arange(n) % 251).astype(np.uint8)
                comm.Send(a, 1, tag=n % 1000)
                b = np.empty(n, np.uint8)
                comm.Recv(b, 1, tag=n % 1000)
                assert np.array_equal(a, b), n
            else:
                b = np.empty(n, np.uint8)
                st = MPI.Status()
                comm.Recv(b, 0, tag=MPI.ANY_TAG, status=st)
                assert st.Get_count() == n and st.tag == n % 1000
                comm.Send(b, 0, tag=n % 1000)
        for obj in [None, 0, "x" * 100000, {"arr": np.arange(3_000_000), "k": [1, 2]}, b"", list(range(1000))]:
            got = comm.sendrecv(obj, other, source=other)
            if isinstance(obj, dict):
                assert np.array_equal(got["arr"], obj["arr"]) and got["k"] == [1, 2]
            else:
                assert got == obj
        print("pingpong ok", comm.rank)
    """)
    r = run_minimpi("-n", "2", "--transport", transport, *marker_args(job_marker), script, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "[0] pingpong ok 0" in r.stdout and "[1] pingpong ok 1" in r.stdout


@over_each_transport
def test_ordering_any_source_and_64mib_sendrecv_ring(transport, write_script, job_marker):
    script = write_script("order.py", """
        import numpy as np
        from minimpi import MPI
        comm = MPI.COMM_WORLD
        rank, size = comm.rank, comm.size
        # non-overtaking: 200 messages, mixed eager/rendezvous sizes, same tag
        if rank == 1:
            for i in range(200):
                comm.Send(np.full(10 if i % 3 else 100000, i, np.int32), 0, tag=3)
        elif rank == 0:
            for i in range(200):
                buf = np.empty(100000, np.int32)
                comm.Recv(buf, 1, tag=3)
                assert buf[0] == i
        # 64 MiB Sendrecv exchange around the ring
        a = np.full(8 << 20, rank, np.float64)
        b = np.empty_like(a)
        comm.Sendrecv(a, (rank + 1) % size, 0, b, (rank - 1) % size, 0)
        assert (b == (rank - 1) % size).all()
        # ring of 1 MiB Isend/Irecv/Waitall
        x = np.full(1 << 17, rank, np.float64)
        y = np.empty_like(x)
        MPI.Request.Waitall([comm.Irecv(y, (rank - 1) % size, 5), comm.Isend(x, (rank + 1) % size, 5)])
        assert (y == (rank - 1) % size).all()
        # ANY_SOURCE in arrival order, each sender once
        if rank == 0:
            st = MPI.Status()
            got = []
            for _ in range(size - 1):
                got.append(comm.recv(source=MPI.ANY_SOURCE, tag=9, status=st))
                assert got[-1] == st.source
            assert sorted(got) == list(range(1, size))
        else:
            comm.send(rank, 0, tag=9)
        print("order ok")
    """)
    r = run_minimpi("-n", "3", "--transport", transport, *marker_args(job_marker), script, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.count("order ok") == 3


@over_each_transport
def test_32_ranks_oversubscribed_to_any_source(transport, write_script, job_marker):
    script = write_script("many.py", """
        import numpy as np
        from minimpi import MPI
        comm = MPI.COMM_WORLD
        if comm.rank == 0:
            total = 0
            buf = np.empty(1 << 16, np.float64)  # 512 KiB: rendezvous from every sender
            for _ in range(comm.size - 1):
                st = MPI.Status()
                comm.Recv(buf, MPI.ANY_SOURCE, 1, st)
                assert (buf == st.source).all()
                total += st.source
            assert total == sum(range(comm.size))
            print("received from all", comm.size - 1)
        else:
            comm.Send(np.full(1 << 16, comm.rank, np.float64), 0, 1)
    """)
    r = run_minimpi("-n", "32", "--transport", transport, *marker_args(job_marker), script, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "received from all 31" in r.stdout


@over_each_transport
def test_small_both_send_completes_large_both_send_waits(transport, write_script, job_marker):
    script = write_script("bothsend.py", """
        import sys, numpy as np
        from minimpi import MPI
        comm = MPI.COMM_WORLD
        n = int(sys.argv[1])
        other = 1 - comm.rank
        comm.Send(np.ones(n, np.uint8), other)   # both send first: unsafe above the eager limit
        comm.Recv(np.empty(n, np.uint8), other)
        print("exchanged", n)
    """)
    small = run_minimpi("-n", "2", "--transport", transport, *marker_args(job_marker), script, "1000",
                        timeout=30)
    assert small.returncode == 0 and small.stdout.count("exchanged 1000") == 2
    # Above the eager limit a standard send waits for its receive, as in MPI: this deadlocks,
    # and the job must end (here by --timeout) with every process gone.
    big = run_minimpi("-n", "2", "--timeout", "3", "--transport", transport,
                      *marker_args(job_marker), script, str(16 << 20), timeout=30)
    assert big.returncode == 124 and "exchanged" not in big.stdout, big.stderr
    # Raising the eager limit makes the same program complete (buffered at the receiver).
    eager = run_minimpi("-n", "2", "--eager-limit", "32MiB", "--transport", transport,
                        *marker_args(job_marker), script, str(16 << 20), timeout=30)
    assert eager.returncode == 0, eager.stderr
    assert eager.stdout.count("exchanged") == 2


@over_each_transport
def test_split_and_dup_isolation(transport, write_script, job_marker):
    script = write_script("split.py", """
        from minimpi import MPI
        world = MPI.COMM_WORLD
        row = world.Split(color=world.rank // 2, key=world.rank)
        dup = world.Dup()
        # every rank sends to its row neighbour on row, and to rank 0 on dup and world
        peer = (row.rank + 1) % row.size
        row.send(("row", world.rank), peer, tag=1)
        if world.rank != 0:
            dup.send(("dup", world.rank), 0, tag=1)
            world.send(("world", world.rank), 0, tag=1)
        else:
            got = [world.recv(source=MPI.ANY_SOURCE, tag=1) for _ in range(world.size - 1)]
            assert all(kind == "world" for kind, _ in got), got
            got = [dup.recv(source=MPI.ANY_SOURCE, tag=1) for _ in range(world.size - 1)]
            assert all(kind == "dup" for kind, _ in got), got
        kind, src = row.recv(source=MPI.ANY_SOURCE, tag=1)
        assert kind == "row" and src // 2 == world.rank // 2
        print("isolated", world.rank, row.rank, row.size)
    """)
    r = run_minimpi("-n", "5", "--transport", transport, *marker_args(job_marker), script, timeout=30)
    assert r.returncode == 0, r.stderr
    assert r.stdout.count("isolated") == 5 and "isolated 4 0 1" in r.stdout


@over_each_transport
def test_truncation_error_reaches_the_user(transport, write_script, job_marker):
    script = write_script("trunc.py", """
        import numpy as np
        from minimpi import MPI
        comm = MPI.COMM_WORLD
        if comm.rank == 0:
            comm.Send(np.arange(100, dtype=np.int64), 1)
        else:
            try:
                comm.Recv(np.empty(10, np.int64), 0)
            except MPI.Exception as e:
                print("caught", e.Get_error_class() == MPI.ERR_TRUNCATE, str(e))
    """)
    r = run_minimpi("-n", "2", "--transport", transport, *marker_args(job_marker), script, timeout=30)
    assert r.returncode == 0, r.stderr
    assert "caught True" in r.stdout and "800 bytes" in r.stdout and "80 bytes" in r.stdout


@over_each_transport
def test_crash_while_others_wait_ends_job_fast(transport, write_script, job_marker):
    script = write_script("crash.py", """
        from minimpi import MPI
        comm = MPI.COMM_WORLD
        if comm.rank == 2:
            raise RuntimeError("rank two fails on purpose")
        comm.recv(source=2)   # would wait forever
    """)
    t = time.monotonic()
    r = run_minimpi("-n", "4", "--transport", transport, *marker_args(job_marker), script, timeout=30)
    assert time.monotonic() - t < 5
    assert r.returncode == 1
    assert "rank 2" in r.stderr and "rank two fails on purpose" in r.stderr


@over_each_transport
def test_kill_9_of_a_rank_ends_job(transport, write_script, job_marker):
    script = write_script("kill9.py", """
        import os, signal
        from minimpi import MPI
        comm = MPI.COMM_WORLD
        comm.Barrier() if hasattr(comm, "Barrier") else None
        if comm.rank == 1:
            os.kill(os.getpid(), signal.SIGKILL)
        comm.recv(source=1)
    """)
    t = time.monotonic()
    r = run_minimpi("-n", "3", "--transport", transport, *marker_args(job_marker), script, timeout=30)
    assert time.monotonic() - t < 5
    assert r.returncode == 128 + 9
    assert "rank 1" in r.stderr and "SIGKILL" in r.stderr


def test_stranger_connecting_to_a_rank_is_refused_and_job_goes_on(write_script, job_marker, tmp_path):
    script = write_script("stranger.py", f"""
        import time
        from minimpi import MPI
        from minimpi.runtime import world as runtime
        comm = MPI.COMM_WORLD
        if comm.rank == 1:
            tcp = runtime.world_state().engine.transport.member("tcp")
            sock = tcp._listener.sock
            host, port = sock.getsockname()[:2]
            open({str(tmp_path / 'port')!r}, "w").write(str(port))
        # wait until the test has poked the port, while making progress
        deadline = time.monotonic() + 10
        import os
        while not os.path.exists({str(tmp_path / 'poked')!r}) and time.monotonic() < deadline:
            comm.Iprobe()
            time.sleep(0.02)
        x = comm.sendrecv(comm.rank, 1 - comm.rank, source=1 - comm.rank)
        print("still fine", x)
    """)
    proc = start_minimpi("-n", "2", "--transport", "tcp", *marker_args(job_marker), script)
    port_file = tmp_path / "port"
    deadline = time.monotonic() + 10
    while not port_file.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    port = int(port_file.read_text())
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(b"GET / HTTP/1.0\r\n\r\nxxxxxxxxxxxxxxxxxxxxxxxxx")
    s2 = socket.create_connection(("127.0.0.1", port))
    # a fake peer with a valid-looking hello but no secret
    import os as _os
    import struct

    from minimpi.transports.tcp import MAGIC, UID_SHIFT
    rank0 = (0 + 1) << UID_SHIFT | 0            # universe id of rank 0 of the launched job
    s2.sendall(struct.pack("<8sI16s", MAGIC, rank0, _os.urandom(16)))
    s2.recv(48)
    s2.sendall(b"\0" * 32)
    time.sleep(0.3)
    (tmp_path / "poked").write_text("1")
    r = finish(proc, timeout=30)
    s.close()
    s2.close()
    assert r.returncode == 0, r.stderr
    assert "[0] still fine 1" in r.stdout and "[1] still fine 0" in r.stdout
    assert re.search(r"refused a connection .*bad hello", r.stderr)
    assert re.search(r"refused a connection .*did not prove the job secret", r.stderr)


@over_each_transport
def test_buffers_and_objects_above_2_gib(transport, write_script, job_marker):
    script = write_script("huge.py", """
        import numpy as np
        from minimpi import MPI
        comm = MPI.COMM_WORLD
        n = (1 << 31) + 4096 + 3          # just above 2 GiB: 64-bit lengths on the wire
        if comm.rank == 0:
            a = np.empty(n, np.uint8)
            a[:: 1 << 20] = 7
            a[-1] = 9
            comm.Send(a, 1, tag=1)
            del a
            comm.send({"big": np.full(n // 8 + 1, 3, np.int64)}, 1, tag=2)
        else:
            b = np.zeros(n, np.uint8)
            comm.Recv(b, 0, tag=1)
            assert b[-1] == 9 and (b[:: 1 << 20] == 7).all() and b[1] == 0
            del b
            obj = comm.recv(source=0, tag=2)
            assert obj["big"].size == n // 8 + 1 and obj["big"][-1] == 3 and obj["big"][0] == 3
            print("huge ok")
    """)
    r = run_minimpi("-n", "2", "--transport", transport, *marker_args(job_marker), script, timeout=180)
    assert r.returncode == 0, r.stderr
    assert "huge ok" in r.stdout


def test_comm_abort_ends_the_job_with_its_code(write_script, job_marker):
    script = write_script("abort.py", """
        import time
        from minimpi import MPI
        comm = MPI.COMM_WORLD
        if comm.rank == 1:
            comm.Abort(7)
        time.sleep(30)
    """)
    t = time.monotonic()
    r = run_minimpi("-n", "3", *marker_args(job_marker), script, timeout=30)
    assert time.monotonic() - t < 5
    assert r.returncode == 7, r.stderr
    assert "Abort(7)" in r.stderr


def test_singleton_without_launcher(tmp_path):
    import subprocess
    import sys
    path = tmp_path / "single.py"
    path.write_text(
        "from minimpi import MPI\n"
        "import numpy as np\n"
        "c = MPI.COMM_WORLD\n"
        "a = np.arange(5.0); b = np.empty(5)\n"
        "c.Sendrecv(a, 0, 1, b, 0, 1)\n"
        "print(c.Get_rank(), c.Get_size(), c.sendrecv('me', 0, source=0), b.sum())\n")
    r = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "0 1 me 10.0"

"""The pieces that keep a job's start-up short, one by one: minimpi.MPI's layers that load
at first use, the coordinator client's reading of its monitor's events (without pyzmq's
asyncio-based helper), the short OpenBLAS spin while numpy loads, and the launcher's
text of blocked states (without the engine's modules)."""
from __future__ import annotations

import json
import os
import struct
import subprocess
import sys

import pytest
import zmq

from minimpi import MPI
from minimpi._start import minimpi_rank
from minimpi.runtime.bootstrap import monitor_event


def _modules_after(code: str) -> list[str]:
    """The modules a fresh interpreter has after running ``code``."""
    out = subprocess.run([sys.executable, "-c", code + "\nimport json, sys\n"
                          "print(json.dumps(sorted(sys.modules)))"],
                         capture_output=True, text=True, timeout=60,
                         env={k: v for k, v in os.environ.items() if not k.startswith("MINIMPI_")})
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.splitlines()[-1])


def test_importing_mpi_loads_no_window_file_or_session_layer():
    loaded = _modules_after("from minimpi import MPI; MPI.COMM_WORLD.Barrier()")
    for layer in ("minimpi.rma", "minimpi.io", "minimpi.runtime.session", "asyncio", "ssl"):
        assert layer not in loaded, layer


@pytest.mark.parametrize("name, module", [("Win", "minimpi.rma"), ("WIN_NULL", "minimpi.rma"),
                                          ("File", "minimpi.io"), ("FILE_NULL", "minimpi.io"),
                                          ("Session", "minimpi.runtime.session"),
                                          ("SESSION_NULL", "minimpi.runtime.session")])
def test_a_lazy_name_is_its_layers_object(name, module):
    import importlib
    assert getattr(MPI, name) is getattr(importlib.import_module(module), name)
    assert name in dir(MPI) and name in MPI.__all__


def test_star_import_gives_the_lazy_names_too():
    namespace: dict = {}
    exec("from minimpi.MPI import *", namespace)
    assert namespace["Win"] is MPI.Win and namespace["File"] is MPI.File
    assert namespace["COMM_WORLD"] is MPI.COMM_WORLD


def test_the_rma_error_classes_are_the_one_sided_layers():
    from minimpi.rma.errors import ERROR_CLASSES
    assert {name: getattr(MPI, name) for name in ERROR_CLASSES} == ERROR_CLASSES


def test_a_window_on_comm_self_by_default():
    win = MPI.Win.Create(bytearray(16))
    try:
        assert win.Get_group().Get_size() == 1
    finally:
        win.Free()


def test_monitor_events_are_read_as_zmq_writes_them():
    frame = struct.pack("=Hi", int(zmq.EVENT_HANDSHAKE_SUCCEEDED), 0)
    assert monitor_event([frame, b"tcp://127.0.0.1:5"]) == zmq.EVENT_HANDSHAKE_SUCCEEDED
    frame = struct.pack("=Hi", int(zmq.EVENT_HANDSHAKE_FAILED_AUTH), 400)
    assert monitor_event([frame, b""]) == zmq.EVENT_HANDSHAKE_FAILED_AUTH
    assert monitor_event([b"short", b""]) is None and monitor_event([frame]) is None


def test_a_real_monitor_reports_the_handshake():
    ctx = zmq.Context()
    try:
        server = ctx.socket(zmq.ROUTER)
        port = server.bind_to_random_port("tcp://127.0.0.1")
        client = ctx.socket(zmq.DEALER)
        monitor = client.get_monitor_socket(zmq.EVENT_HANDSHAKE_SUCCEEDED)
        client.connect(f"tcp://127.0.0.1:{port}")
        assert monitor.poll(10000), "no monitor event within 10 s"
        assert monitor_event(monitor.recv_multipart()) == zmq.EVENT_HANDSHAKE_SUCCEEDED
        client.disable_monitor()
        for sock in (monitor, client, server):
            sock.close(linger=0)
    finally:
        ctx.term()


def test_numpy_loads_with_a_short_blas_spin_that_leaves_no_trace(monkeypatch):
    for name in minimpi_rank._BLAS_TIMEOUT_VARS:
        monkeypatch.delenv(name, raising=False)
    with minimpi_rank.short_blas_spin():
        assert os.environ["OPENBLAS_THREAD_TIMEOUT"] == str(minimpi_rank.BLAS_SPIN)
    assert "OPENBLAS_THREAD_TIMEOUT" not in os.environ
    monkeypatch.setenv("GOTO_THREAD_TIMEOUT", "25")          # the user's: left alone
    with minimpi_rank.short_blas_spin():
        assert "OPENBLAS_THREAD_TIMEOUT" not in os.environ
    assert os.environ["GOTO_THREAD_TIMEOUT"] == "25"


def test_the_launchers_text_of_states_loads_no_engine():
    loaded = _modules_after("import minimpi.runtime.states, minimpi.launcher.deadlock")
    heavy = [m for m in loaded if m.split(".")[0] == "numpy" or m.startswith(
        ("minimpi.p2p", "minimpi.coll", "minimpi.comm", "minimpi.rma"))]
    assert heavy == []
    from minimpi.runtime import diagnose, states
    assert diagnose.format_state is states.format_state      # one text, two importers
    assert states.format_state({"blocked": True, "where": "x.py:3", "items": [
        {"dir": "recv", "call": "recv", "peer": 1, "world": 1, "tag": 7,
         "comm": "COMM_WORLD"}]}) == "blocked in recv(source=1, tag=7) on COMM_WORLD at x.py:3"

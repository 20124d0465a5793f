"""mpi4py 4.1.2's own futures tests (demo/futures/test_futures.py) on minimpi's pool: the
classes that use the public API - wait, as_completed, submit/map/starmap (chunksize,
timeout, buffersize, unordered), shutdown, pickling failures, collect, compose - under
``minimpi run -n 1`` (spawned pools). The module's private names (``futures._core``,
``futures.aplus``) are stubbed so that it imports; the two tests that use them error and
are the only ones allowed to. Skipped when the extracted sources are missing (see
tests/conformance/README.md for the suite)."""
from __future__ import annotations

import os
import re

import pytest
from jobhelpers import marker_args, run_minimpi

CACHE = os.path.expanduser("~/.cache/minimpi/conformance")
DEMO = os.path.join(CACHE, "src-futures", "mpi4py-4.1.2", "demo", "futures", "test_futures.py")
SUITE = os.path.join(CACHE, "mpi4py-4.1.2", "test")          # mpitestutil
CLASSES = ("ProcessPoolWaitTest,ProcessPoolAsCompletedTest,ProcessPoolExecutorTest,"
           "ProcessPoolSubmitTest,ProcessPoolPickleTest,CollectTest,ComposeTest")
#: tests that reach mpi4py's private implementation (futures._core)
PRIVATE = {"test_mpi_serialized_support", "test_exc_unpickle"}

RUNNER = r'''
import concurrent.futures as cf, importlib, sys, types, unittest
from mpi4py import futures
# the demo reads these private names of mpi4py's own implementation; the workers run this
# file as __mp_main__, so they get the stubs too
futures._core = types.SimpleNamespace(SharedPool=None, MAIN_RUN_NAME="__worker__")
aplus = types.ModuleType("mpi4py.futures.aplus")
aplus.ThenableFuture = cf.Future
sys.modules["mpi4py.futures.aplus"] = aplus

if __name__ == "__main__":
    T = importlib.import_module("test_futures")
    loader = unittest.defaultTestLoader
    suite = unittest.TestSuite(loader.loadTestsFromTestCase(getattr(T, name))
                               for name in sys.argv[1].split(","))
    res = unittest.TextTestRunner(verbosity=2, stream=sys.stdout).run(suite)
    bad = [t.id().rsplit(".", 1)[1] for t, _ in res.failures + res.errors]
    print("RESULT", res.testsRun, "BAD", ",".join(bad) or "-", flush=True)
'''


@pytest.mark.skipif(not (os.path.exists(DEMO) and os.path.isdir(SUITE)),
                    reason="mpi4py 4.1.2's demo/futures sources not extracted")
def test_mpi4py_futures_demo_tests_pass(write_script, job_marker, tmp_path):
    runner = write_script("run_demo.py", RUNNER)
    (tmp_path / "test_futures.py").write_text(open(DEMO).read())
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [SUITE, str(tmp_path)] + [p for p in [os.environ.get("PYTHONPATH")] if p]))
    res = run_minimpi("-n", 1, "--timeout", 240, *marker_args(job_marker), runner, CLASSES,
                      timeout=270, env=env)
    found = re.search(r"RESULT (\d+) BAD (\S+)", res.stdout)
    assert found, res.stdout[-3000:] + res.stderr[-3000:]
    bad = set() if found.group(2) == "-" else set(found.group(2).split(","))
    assert int(found.group(1)) >= 50
    assert bad <= PRIVATE, res.stdout[-6000:]

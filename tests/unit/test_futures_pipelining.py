"""mpi4py.futures' pipelining: the client's bookkeeping (``Flight``), the worker loop's
batches, and the pool on threads (``run_threads``: rank 0 the client, the others workers)
- results in order, exceptions carried back, calls sent ahead neither cancellable nor lost,
queued calls cancelled and never run, calls that do not pickle, a worker that dies holding
calls."""
from __future__ import annotations

import collections
import concurrent.futures as cf
import functools
import pickle
import threading
import time

import pytest

from minimpi._shim.mpi4py.futures import protocol as P
from minimpi._shim.mpi4py.futures.pool import Flight, MPICommExecutor
from minimpi.runtime.inproc import RankFailed, run_threads


def queued(n: int) -> collections.deque:
    return collections.deque((cf.Future(), abs, (-i,), {}) for i in range(n))


# -- Flight: the client's bookkeeping ---------------------------------------------------------
def test_flight_sends_one_call_per_worker_until_calls_are_measured():
    flight = Flight([1, 2])
    queue = queued(5)
    batches = flight.assign(queue)
    assert {r: len(b) for r, b in batches.items()} == {1: 1, 2: 1}
    assert len(queue) == 3 and len(flight.running) == 2
    assert all(call[1].running() for b in batches.values() for call in b)
    assert not flight.hungry(queue) and flight.assign(queue) == {}


def test_flight_depth_follows_each_functions_measured_call_time():
    flight = Flight([1])
    for seconds, depth in ((1e-6, Flight.MAX_DEPTH), (0.01, 2), (1.0, 1)):
        for _ in range(30):       # the average settles on the new duration
            flight.running[-1] = (cf.Future(), 1, abs)
            flight.held[1] += 1
            flight.finished(1, [(-1, True, None, seconds)])
        assert flight.depth_for(abs) == depth, seconds
    assert flight.depth_for(pow) == 1                   # not measured: nothing sent ahead
    assert Flight.key(P.apply_chunk, (pow, [(2, 3)])) is pow     # a map's chunks: its fn
    assert Flight.key(functools.partial(functools.partial(pow, 2), 3), ()) is pow


def test_flight_forgets_times_beyond_max_keys():
    flight = Flight([1])
    for i in range(Flight.MAX_KEYS + 10):
        key = ("fn", i)
        flight.running[i] = (cf.Future(), 1, key)
        flight.held[1] += 1
        flight.finished(1, [(i, True, None, 1e-6)])
    assert 0 < len(flight.means) <= Flight.MAX_KEYS


def test_flight_refills_a_worker_at_half_depth_and_spreads_calls():
    flight = Flight([1, 2])
    tick = Flight.AHEAD_S / 8                           # calls of abs: depth 8
    flight.means[abs] = tick
    queue = queued(20)
    batches = flight.assign(queue)
    assert [len(batches[1]), len(batches[2])] == [8, 8]
    order = [call[0] for call in batches[1]]
    assert order == sorted(order)                       # one worker's calls in order
    ids = sorted(call[0] for b in batches.values() for call in b)
    flight.finished(1, [(t, True, 0, tick) for t, *_ in batches[1][:3]])
    assert flight.assign(queue) == {}                   # 5 left at worker 1: above half
    flight.finished(1, [(batches[1][3][0], True, 0, tick)])     # 4 left: half
    again = flight.assign(queue)
    assert list(again) == [1] and len(again[1]) == 4 and len(queue) == 0
    assert ids == list(range(16))


def test_flight_is_hungry_exactly_when_assign_would_take_the_next_call():
    """A manager woken for a call no worker takes would spin: the two must agree, also
    once a function's measured time (so its depth) changed."""
    flight = Flight([1, 2])
    flight.means[abs] = 1e-6                           # deep: 64 each
    queue = queued(200)
    flight.assign(queue)
    assert len(queue) == 200 - 2 * Flight.MAX_DEPTH and not flight.hungry(queue)
    flight.means[abs] = Flight.AHEAD_S / 4             # now slower: depth 4
    t = next(iter(flight.running))
    flight.finished(flight.running[t][1], [(t, True, 0, Flight.AHEAD_S / 4)])
    assert not flight.hungry(queue) and flight.assign(queue) == {}
    assert flight.hungry(collections.deque()) is False


def test_flight_gives_single_calls_to_the_least_busy_worker():
    flight = Flight([1, 2, 3])
    flight.means[abs] = Flight.AHEAD_S / 8
    for _ in range(6):
        flight.assign(queued(1))
    assert flight.held == {1: 2, 2: 2, 3: 2}


def test_flight_sends_a_new_function_one_call_at_a_time():
    flight = Flight([1, 2])
    flight.means[abs] = 1e-6                            # abs: deep
    queue = queued(3)
    queue.extend((cf.Future(), pow, (2, i), {}) for i in range(4))   # pow: not measured
    batches = flight.assign(queue)
    assert sorted(len(b) for b in batches.values()) == [1, 2]
    assert len(queue) == 4                              # pow waits for an idle worker


def test_flight_drops_cancelled_calls_and_drains_by_worker():
    flight = Flight([1, 2])
    queue = queued(4)
    queue[0][0].cancel()
    batches = flight.assign(queue)
    assert sorted(call[2:4] for b in batches.values() for call in b) == [(abs, (-2,)),
                                                                         (abs, (-1,))]
    gone = flight.drain([1])
    assert [r for r, _ in gone] == [1] and flight.held == {1: 0, 2: 1}
    assert len(flight.running) == 1
    (task, future, *_), = batches[2]
    flight.withdraw(2, task)
    assert flight.running == {} and flight.held[2] == 0


# -- the worker loop ------------------------------------------------------------------------
def worker_replies(comm, batches):
    """Rank 0 plays the client by hand: SETUP, then each batch of (task id, fn, args) in one
    TASK message; [(RESULT message's replies as (task id, ok), seconds since the batch
    was sent)]."""
    if comm.Get_rank() == 1:
        P.serve(comm, 0)
        return None
    comm.send(P.setup_message(None, (), main=""), dest=1, tag=P.SETUP)
    assert comm.recv(source=1, tag=P.READY) is None
    got = []
    for batch in batches:
        comm.send([(t, pickle.dumps((fn, a, {}))) for t, fn, a in batch], dest=1, tag=P.TASK)
        sent = time.monotonic()
        for _ in batch:
            replies = comm.recv(source=1, tag=P.RESULT)
            assert all(seconds >= 0 for *_, seconds in replies)
            got.append(([(t, ok) for t, ok, _, _ in replies], time.monotonic() - sent))
    comm.send(None, dest=1, tag=P.STOP)
    return got


def test_worker_runs_a_batch_in_order_and_answers_each_call_at_once():
    batch = [(0, abs, (-1,)), (1, time.sleep, (0.5,)), (2, int, ("x",)), (3, abs, (3,))]
    got = run_threads(2, worker_replies, [batch], timeout=20)[0]
    assert [r for r, _ in got] == [[(0, True)], [(1, True)], [(2, False)], [(3, True)]]
    assert got[0][1] < 0.4 <= got[1][1]          # the first result did not wait for sleep


# -- the pool on threads --------------------------------------------------------------------
def on_pool(size, client, **kwargs):
    """``client(executor)`` at rank 0 of ``size`` threads, the others serving."""
    def body(comm):
        with MPICommExecutor(comm, root=0) as ex:
            return None if ex is None else client(ex)
    return run_threads(size, body, timeout=60, **kwargs)[0]


def nap(x, seconds=0.0):
    time.sleep(seconds)
    if x == "boom":
        raise KeyError(x)
    return x


def test_map_results_in_order_with_uneven_calls_and_an_exception():
    def client(ex):
        list(ex.map(nap, range(200)))                     # nap measured: deep pipelines
        got = list(ex.map(nap, range(60), [0.002 * (i % 3) for i in range(60)]))
        assert got == list(range(60))
        it = ex.map(nap, [1, 2, "boom", 4])
        assert [next(it), next(it)] == [1, 2]
        with pytest.raises(KeyError):
            next(it)
        return sorted(ex.map(abs, range(-50, 0), unordered=True))
    assert on_pool(3, client) == list(range(1, 51))


RAN: list = []              # what record() ran (the workers are threads of this process)
RAN_LOCK = threading.Lock()


def record(i, seconds):
    time.sleep(seconds)
    with RAN_LOCK:
        RAN.append(i)
    return i


def test_calls_sent_ahead_run_and_queued_ones_cancel():
    ran, lock = RAN, RAN_LOCK
    ran.clear()

    def client(ex):
        list(ex.map(record, range(50), [0.001] * 50))   # record measured: depth grows
        with lock:
            ran.clear()
        futures = [ex.submit(record, i, 0.001) for i in range(200)]
        time.sleep(0.02)
        cancelled = [f for f in futures if f.cancel()]
        kept = [f for f in futures if not f.cancelled()]
        assert [f.result(timeout=10) for f in kept] == sorted(f.result() for f in kept)
        ex.shutdown(wait=True)
        with lock:
            assert sorted(ran) == sorted(f.result() for f in kept)   # cancelled never ran
        return len(cancelled), len(kept)
    cancelled, kept = on_pool(3, client)
    assert cancelled > 0 and kept > 2           # more than one call held per worker ran


def test_shutdown_cancel_futures_keeps_calls_sent_ahead():
    def client(ex):
        list(ex.map(nap, range(100)))
        futures = [ex.submit(nap, i, 0.002) for i in range(300)]
        time.sleep(0.01)
        ex.shutdown(wait=True, cancel_futures=True)
        done = [f for f in futures if not f.cancelled()]
        assert all(f.done() and f.result() == futures.index(f) for f in done)
        assert done == futures[:len(done)]        # first come, first run
        return len(done)
    assert 0 < on_pool(3, client) < 300


class Unpicklable:
    def __reduce__(self):
        raise TypeError("no pickling this")


def refuse_to_load():
    raise ZeroDivisionError("no unpickling this")


class Unloadable:
    def __reduce__(self):
        return refuse_to_load, ()


def make_unpicklable(x):
    return Unpicklable() if x == 3 else x


def test_a_call_or_result_that_does_not_pickle_or_unpickle_fails_alone():
    def client(ex):
        list(ex.map(abs, range(100)))
        futures = [ex.submit(abs, Unpicklable() if i == 5 else -i) for i in range(10)]
        errors = [type(f.exception(timeout=10)).__name__ if f.exception(timeout=10) else None
                  for f in futures]
        loads = [ex.submit(abs, Unloadable() if i == 2 else i) for i in range(5)]
        assert isinstance(loads[2].exception(timeout=10), ZeroDivisionError)
        assert [f.result() for i, f in enumerate(loads) if i != 2] == [0, 1, 3, 4]
        back = [ex.submit(Unloadable), ex.submit(abs, 2), ex.submit(abs, 3)]
        assert isinstance(back[0].exception(timeout=10), ZeroDivisionError)   # result
        assert [f.result() for f in back[1:]] == [2, 3]
        results = [ex.submit(make_unpicklable, i) for i in range(6)]
        failed = [i for i, f in enumerate(results) if f.exception(timeout=10) is not None]
        return errors, failed, [f.result() for i, f in enumerate(results) if i != 3]
    errors, failed, rest = on_pool(3, client)
    assert errors[5] == "TypeError" and errors[:5] + errors[6:] == [None] * 9
    assert failed == [3] and rest == [0, 1, 2, 4, 5]


def test_a_worker_that_dies_fails_the_calls_it_held_naming_it():
    outcome = {}

    def dying_worker(comm):
        """Worker 1: answers the warm-up calls, then dies holding two calls of nap."""
        comm.recv(source=0, tag=P.SETUP)
        comm.send(None, dest=0, tag=P.READY)
        held = 0
        while True:
            calls = comm.recv(source=0, tag=P.TASK)
            calls = [(t, *pickle.loads(blob)) for t, blob in calls]
            held += sum(a[1:] == (0.05,) for _, _, a, _ in calls)
            if held >= 2:
                raise RuntimeError("worker 1 dies")
            if not held:
                comm.send([P.reply(t, True, fn(*a, **k), 0.01) for t, fn, a, k in calls],
                          dest=0, tag=P.RESULT)

    def body(comm):
        if comm.Get_rank() == 1:
            return dying_worker(comm)
        with MPICommExecutor(comm, root=0) as ex:
            if ex is None:
                return None
            list(ex.map(nap, range(40)))           # nap measured: depth grows
            futures = [ex.submit(nap, i, 0.05) for i in range(8)]
            outcome["errors"] = [str(f.exception(timeout=20)) if f.exception(timeout=20)
                                 else None for f in futures]
            outcome["results"] = [f.result() for f in futures if not f.exception()]
            with pytest.raises(cf.BrokenExecutor):
                ex.submit(abs, 1)
        return None

    with pytest.raises(RankFailed) as failed:
        run_threads(3, body, timeout=60, fault_tolerant=True)
    assert failed.value.rank == 1
    died = [e for e in outcome["errors"] if e is not None]
    assert len(died) >= 2 and all("worker 1 failed" in e for e in died)
    assert len(died) + len(outcome["results"]) == 8        # worker 2's calls finished
    assert outcome["results"] == sorted(outcome["results"]) and outcome["results"]


def test_map_buffersize_reads_the_iterable_as_results_are_consumed():
    def client(ex):
        read = []

        def items():
            for i in range(20):
                read.append(i)
                yield i
        it = ex.map(abs, items(), chunksize=2, buffersize=3)
        first = next(it)
        seen = len(read)
        rest = list(it)
        with pytest.raises(ValueError):
            ex.map(abs, [1], buffersize=0)
        with pytest.raises(ValueError):
            ex.map(abs, [1], buffersize=2, unordered=True)
        return first, seen, rest
    first, seen, rest = on_pool(3, client)
    assert first == 0 and seen <= 8 and rest == list(range(1, 20))

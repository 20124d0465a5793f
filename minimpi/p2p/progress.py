"""How a blocked rank waits: it polls for a short while before it sleeps, as MPI libraries do.

On the virtual machines CI and cloud users run on, a process that blocks in ``poll`` lets
its virtual CPU halt, and waking it again costs about 30-35 us - several times what a small
message takes; and on a machine where another process takes a core, the peer a rank waits
for is often descheduled for a scheduler slice (milliseconds), after which a sleeping rank
pays that wake-up on top, per message. A rank that keeps making non-blocking progress for
up to a few milliseconds before it sleeps catches those replies without paying it.
Spinning only pays while every rank has a core of its own, though: ranks that outnumber cores would take turns
spinning while the rank that has the data waits for a core. Hence the policies
(``minimpi run --progress``, env ``MINIMPI_PROGRESS``):

``spin``
    call ``progress(0)`` for up to the spin budget (:data:`SPIN_BUDGET`), then sleep in
    ``progress(timeout)``; after :data:`SPIN_ALONE` of it, each poll also yields the core
    (``sched_yield()``).
``yield``
    the same with ``sched_yield()`` between polls and a shorter budget (:data:`MAX_SPIN`,
    more where ranks crowd the cores), so that a rank
    sharing our core (maybe the one we wait for) runs instead of us.
``block``
    sleep in ``progress(timeout)`` at once: an idle rank costs no CPU at all.
``auto`` (default)
    ``spin`` when the ranks on this host are no more than the cores this process may run
    on (``os.sched_getaffinity``), ``yield`` up to :data:`YIELD_UP_TO` times that, ``block``
    beyond. A rank that ``--bind-to`` pinned counts instead the ranks bound to its own
    CPUs and those CPUs (:func:`set_binding`): after the binding it may run on one core,
    which is not the cores its host's ranks share. A rank that yields gives its core to a
    rank that has work, so ranks that outnumber cores can wait as long as spinning ranks
    do: 8 B ``Allreduce`` on 2 cores at p = 4 / 8 / 16 took 74 / 419 / 975 us per call with
    a 30 us yield budget (p = 8 and 16 then blocked) and 35 / 106 / 784 us with 3 ms (a
    sleeping rank pays a wake-up per call, and so does the rank that wakes it). A wait on
    a large transfer yields only :data:`BULK_SPIN`: there a waiter's yields take slices
    from the rank on its core that reduces or copies, and a wake-up is little beside the
    transfer (1 MiB ``Allreduce`` at p = 4 on 2 cores: 2.85 ms a call with 3 ms for every
    wait, 2.19 ms with 30 us for these). With the collectives that meet in a shared
    segment, a repeated 8 B ``Allreduce`` + ``Barrier`` on 2 cores took 526 / 2386 / 25693 us
    per pair yielding at p = 16 / 32 / 64 and 2154 / 8665 / 25039 us blocking (the cores
    busy either way: blocking, the kernel's sleeps and wake-ups took the CPU time - 16.4 ms
    of it per pair at p = 32 against 4.7 ms yielding); so ``auto`` yields up to 16 ranks per
    core, and blocks beyond, where the two are alike. Beyond :data:`CROWDED` ranks per core
    its budget grows with them (a wait lasts until every rank it waits for had a core).

The budget follows whether spinning pays, over the last :data:`WINDOW` waits: a wait
*paid* when its message came while it spun, or so soon after it gave up (within
:data:`NEAR` spins: the wake-up, tens of microseconds on a VM, is what it cost) that a longer
spin would have caught it - or, for a wait on memory a peer writes (a shared segment, woken
without a message), when it was over that soon. While at least :data:`PAYING` of the last :data:`WINDOW` paid, the
budget is ``max_spin``; below that, ``min_spin``. So one long wait (a ``Barrier`` while
another rank computes) among quick replies changes nothing, and two quick replies after a
quiet phase bring the spin back; but when most waits outlast the spin - a rank whose
messages come late, or a machine so busy that its peer is rarely running - it stops
burning, on spins that never pay, the CPU time the scheduler would give it when its message
arrives. (It used to halve on every long wait and grow back only from a wait that ended
within ``max_spin``, which a wake-up through the kernel rarely does: after one long
``Barrier`` a rank could stay at the minimum spin, paying a wake-up per message, for the rest
of a run, and the same program ran 5-10x slower from one run to the next.)
``MINIMPI_SPIN_US`` sets ``max_spin``.
"""
from __future__ import annotations

import os
import time
from typing import Callable, Mapping, Optional, Tuple

from ..errors import ArgumentError

MODES = ("auto", "spin", "yield", "block")
#: the longest spin (or yield) before sleeping (s), in both modes: a yielding rank hands
#: its core to one with work. Longer than a wake-up: on a machine where another
#: process takes a core, the peer waits its turn for a scheduler slice (milliseconds); a rank
#: that slept meanwhile paid a wake-up per message on top (8 B one-way with one busy process
#: on 2 cores: 175 us with a 100 us spin, 13-50 us with 3-10 ms). Waits that outlast it turn
#: it down to MIN_SPIN (below), so an idle rank still sleeps within a few milliseconds.
MAX_SPIN = 3e-3
#: the longest spin of a ``spin`` rank (each rank has a core): longer, since yielding costs
#: such a rank nothing while its peers run, and an unrelated busy process deschedules a peer
#: for a scheduler slice (milliseconds); a rank that gave up and slept meanwhile paid a
#: wake-up, and several such waits turned its budget down to MIN_SPIN (8 B one-way with a
#: busy shell loop on 2 cores, 3 pairs of runs of 5 jobs each, the same run's MPICH at
#: 2.8-3.5 us: 14.5 / 10.2 / 10.8 us, p90/median 1.29 / 2.34 / 2.30 with 3 ms; 10.7 / 10.2 /
#: 10.3 us, p90/median 1.42 / 1.18 / 1.02 with 10 ms). An idle rank still sleeps after it.
SPIN_BUDGET = 10e-3
#: beyond this many ranks per core, ``auto``'s yield budget grows with the ranks per core
#: (MAX_SPIN x ranks per core / CROWDED): a wait there lasts as long as it takes every rank
#: it waits for to get a core, milliseconds at 16 ranks per core; a budget shorter than that
#: stops paying, falls to MIN_SPIN, and the ranks then sleep and wake through the kernel for
#: every wait, which makes the waits longer still (8 B ``Allreduce`` at p = 32 on 2 cores,
#: five jobs each: 703-1824 us with 6 ms, 1273-7838 us with 3 ms). Not below: where waits
#: are short, a longer budget keeps idle ranks yielding, and yielding is not free - an
#: ``mpi4py.futures`` pool of 4 workers on 2 cores ran 17,700 tiny tasks/s with 3 ms and
#: 11,200 with 10 ms (its manager shares the cores with four yielding workers), and 8 B
#: ``Allreduce`` at p = 16 took 259 us with 3 ms, 398 us with 6 ms
CROWDED = 8
#: ``auto`` yields up to this many ranks per core, and blocks beyond
YIELD_UP_TO = 16
#: how long a spinning wait polls alone; after that it yields the core between polls, so
#: that on a machine where another process takes a core, the peer it waits for (maybe
#: queued behind us) runs sooner: 8 B one-way with one busy process on 2 cores, median of
#: 3 jobs, 51.6 us spinning alone, 26.7 us yielding after 25 us, 24.6 us yielding at once;
#: the quiet figure stays 11.1-11.6 us (yielding at once: 12.2), since a message that comes
#: sooner - the usual case - pays no system call
SPIN_ALONE = 25e-6
#: a yielding rank's budget for a wait on a large transfer - a receive into a buffer larger
#: than the eager limit, or a send whose receiver pulls its data (a rendezvous) - which
#: neither reads nor changes the budget that follows whether spinning pays: such a wait
#: lasts as long as its peer takes to reduce or copy the data, hundreds of microseconds
#: from 64 KiB on, so a wake-up (30-35 us) is little beside it, while a waiter's yields take
#: slices from the rank on its core that does that work. 1 MiB ``Allreduce`` at p = 4 on 2
#: cores (binomial, auto's choice; 30 calls a loop, the median of 12 loops a job, 8 rounds
#: of three jobs): 2.10-3.67 ms a call (median 2.85) with the 3 ms budget for every wait,
#: 1.97-2.58 (2.19) with 30 us for such waits, 1.81-2.59 (2.41) for the code before the 3 ms
#: budget; small waits keep the 3 ms
BULK_SPIN = 30e-6
#: the budget never adapts below this (s)
MIN_SPIN = 5e-6
#: how many recent waits decide whether spinning pays
WINDOW = 8
#: of the last WINDOW waits, how many must have paid for the budget to stay at max_spin
PAYING = 2
#: a wait woken with data within NEAR x max_spin of its start paid (a longer spin would
#: have caught it; the rest was the wake-up)
NEAR = 2.0
_ALL = (1 << WINDOW) - 1


def usable_cores() -> int:
    """How many cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


#: (ranks, CPUs) of this process's binding, if ``--bind-to`` pinned it (:func:`set_binding`)
_binding: Optional[Tuple[int, int]] = None


def set_binding(sharing: Optional[Tuple[int, int]]) -> None:
    """This process was pinned to CPUs that ``sharing = (ranks, cpus)`` describes: how many
    of its host's ranks are pinned to them (itself included) and how many there are; None:
    not pinned. Said by the binding when the rank starts
    (:func:`minimpi._start.binding.bind_this_process`), before any policy is chosen: what
    ``auto`` decides from for this process (:meth:`ProgressPolicy.from_env`)."""
    global _binding
    _binding = sharing


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


class ProgressPolicy:
    """Spin, yield or block before/while waiting (see the module docstring)."""

    __slots__ = ("mode", "spin", "max_spin", "min_spin", "bulk_spin", "yield_after", "reason",
                 "recent")

    def __init__(self, mode: str = "block", max_spin: Optional[float] = None,
                 reason: str = "") -> None:
        if mode not in MODES[1:]:
            raise ArgumentError(f"progress policy {mode!r}: expected one of {', '.join(MODES)}")
        self.mode = mode
        #: how long a wait polls before each further poll also yields the core (s)
        self.yield_after = 0.0 if mode == "yield" else SPIN_ALONE
        if mode == "block":
            self.max_spin = 0.0
        elif max_spin is not None:
            self.max_spin = max_spin
        else:
            self.max_spin = SPIN_BUDGET if mode == "spin" else MAX_SPIN
        self.min_spin = min(MIN_SPIN, self.max_spin)
        #: the budget of a wait on a large transfer; None: such a wait is like any other (a
        #: spinning rank's peers have cores of their own: its spin takes nothing from them)
        self.bulk_spin = min(BULK_SPIN, self.max_spin) if mode == "yield" else None
        self.spin = self.max_spin
        #: the last WINDOW waits, one bit each, newest lowest: 1 = spinning paid
        self.recent = _ALL
        #: why ``auto`` chose this mode (for diagnostics)
        self.reason = reason

    @classmethod
    def choose(cls, setting: str, ranks_here: int, cores: Optional[int] = None,
               max_spin: Optional[float] = None, bound: bool = False) -> "ProgressPolicy":
        """The policy for ``setting`` (one of :data:`MODES`) with ``ranks_here`` ranks of the
        job on this host sharing ``cores`` cores (default: this process's); ``bound``: they
        are the ranks ``--bind-to`` bound to this rank's CPUs, and ``cores`` those CPUs."""
        setting = (setting or "auto").strip().lower()
        if setting not in MODES:
            raise ArgumentError(f"MINIMPI_PROGRESS={setting!r}: expected one of {', '.join(MODES)}")
        if setting != "auto":
            return cls(setting, max_spin, "asked for")
        cores = usable_cores() if cores is None else cores
        if ranks_here <= cores:
            mode = "spin"
        elif ranks_here <= YIELD_UP_TO * cores:
            mode = "yield"
            if max_spin is None:
                max_spin = MAX_SPIN * max(1.0, ranks_here / (CROWDED * cores))
        else:
            mode = "block"
        where = (f"{_count(ranks_here, 'rank')} bound to this rank's {_count(cores, 'CPU')}"
                 if bound else f"{ranks_here} ranks on this host, {cores} cores")
        return cls(mode, max_spin, f"auto: {where}")

    @classmethod
    def from_env(cls, env: Mapping[str, str], ranks_here: int) -> "ProgressPolicy":
        """The policy ``MINIMPI_PROGRESS`` and ``MINIMPI_SPIN_US`` ask for, for
        ``ranks_here`` ranks on this host sharing the cores this process may use - or, if
        it was pinned (:func:`set_binding`), for the ranks pinned to its CPUs (see
        :meth:`choose`)."""
        spin_us = env.get("MINIMPI_SPIN_US")
        try:
            max_spin = float(spin_us) * 1e-6 if spin_us else None
        except ValueError:
            raise ArgumentError(f"MINIMPI_SPIN_US={spin_us!r} is not a number") from None
        setting = env.get("MINIMPI_PROGRESS", "auto")
        if _binding is not None:
            ranks, cpus = _binding
            return cls.choose(setting, ranks, cpus, max_spin, bound=True)
        return cls.choose(setting, ranks_here, max_spin=max_spin)

    def wait(self, transport, timeout: float,
             ready: Optional[Callable[[], bool]] = None, bulk: bool = False) -> bool:
        """One round of waiting: spin on ``progress(0)`` for the budget, then sleep at most
        ``timeout`` s. True if anything moved. ``ready``: what the wait waits for, when
        it may come true without a message (memory a peer writes: a shared segment); the
        spin looks at it too, and ends when it is true (else such a wait would spin its
        whole budget, up to milliseconds, for data that came in microseconds). ``bulk``:
        it waits for a large transfer (:data:`BULK_SPIN`)."""
        bulk = bulk and self.bulk_spin is not None
        spin = self.bulk_spin if bulk else self.spin
        if not spin:
            return transport.progress(timeout)
        progress = transport.progress
        clock = time.perf_counter
        start = clock()
        deadline = start + spin
        yield_from = start + self.yield_after
        while True:
            if progress(0) or ready is not None and ready():
                self._paid(True)
                return True
            now = clock()
            if now >= deadline:
                break
            if now >= yield_from:
                os.sched_yield()
        moved = progress(timeout)
        # a wait on memory a peer writes is woken without a frame: that it is over says
        # whether the sleep caught its data, as ``moved`` says for a message (judged by
        # ``moved`` alone, every such wait that slept counted as unpaid, so once the budget
        # fell to min_spin, ranks that only meet in a segment slept through every later
        # wait: 8 B Allreduce at p = 32 on 2 cores, 1.4-3.9 ms a call against 0.4)
        if not bulk:
            over = moved or ready is not None and ready()
            self._paid(over and clock() - start < NEAR * self.max_spin)
        return moved

    def spin_until(self, ready: Callable[[], bool]) -> bool:
        """Look at ``ready()`` for the spin budget (yielding the core between looks as
        :meth:`wait` does): whether it came true. A wait on memory another process writes
        (a shared segment) calls this before it waits through the engine."""
        spin = self.spin
        if not spin:
            return ready()
        clock = time.perf_counter
        start = clock()
        deadline = start + spin
        yield_from = start + self.yield_after
        while not ready():
            now = clock()
            if now >= deadline:
                return False
            if now >= yield_from:
                os.sched_yield()
        return True

    def _paid(self, paid: bool) -> None:
        """Record whether this wait's spin paid, and set the budget from the last WINDOW."""
        recent = self.recent = ((self.recent << 1) | paid) & _ALL
        self.spin = self.max_spin if recent.bit_count() >= PAYING else self.min_spin

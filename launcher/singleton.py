"""The launcher of a singleton: what lets a program started with plain ``python`` spawn.

A program started without ``minimpi run`` is a world of one process (MPI's "singleton
init") with no launcher. At its first request for other processes (``Spawn``, ports, names)
its runtime (``minimpi/runtime/launcher_link.py``) starts this module on demand, as MPICH's
singleton starts a process manager::

    python -m minimpi.launcher.singleton PID REPLY_FD

It runs a :class:`~minimpi.launcher.job.Job` of size 1 whose rank 0 is the singleton
process ``PID`` itself (attached, not started: :class:`AttachedProcess`), so spawned
processes are started, watched, forwarded and torn down by the same code as under
``minimpi run -n 1`` (``launcher/dynamic.py`` in the job's loop). The job's fresh secret,
its coordinator's address and job id go to the singleton over the pipe ``REPLY_FD`` (never
argv or an environment); the singleton then registers with the coordinator as rank 0 (the
same authentication every rank makes) and sends its requests there.

Lifetime. This process is in a session of its own (Ctrl-C in the terminal reaches the
program only) and watches the singleton through a pidfd (readable when it ends, whichever
thread started this process). When the singleton ends without finalizing MPI (killed,
``os._exit``), the job fails at once: its spawned processes get SIGTERM, SIGKILL a second
later, and this process exits. When it finalized, the spawned processes still running get
:data:`LINGER` seconds to end by themselves (those it disconnected are on their way out),
then they are ended the same way. A spawned process that fails is named at once and what
was spawned is ended, as under ``minimpi run``; the singleton goes on: it is told which of
the processes it was joined with are gone, and why (a ``proc_failed`` notice each), so that
its pending and later calls with them raise ``PeerLostError`` naming them (the spawned
job, the rank, how it ended) - even with a process that never connected to it - and its
later requests are refused naming that failure. Nothing it started outlives it: spawned processes die
with it (parent-death signal and lifeline pipe, as every rank does).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Optional

from minimpi.transports.tcp import UID_SHIFT

from .forkserver import ForkServer
from .job import Failure, Job, JobSpec
from .processes import RankProcess
from .run import extra_env, rank_start

#: seconds the spawned processes still running may take to end by themselves once the
#: singleton finalized MPI and ended
LINGER = 5.0
#: how long the singleton's finalize message may trail the end of its process
FINALIZE_WAIT = 0.5
#: the singleton's exit code is unknown here (it is not our child): what the job records
EXIT_ATTACHED_ENDED = 0


class _AttachedPopen:
    """The part of ``subprocess.Popen`` the job's code reads, for a process it did not start
    (no pipes: its output goes where it always went)."""

    stdout = None
    stderr = None

    def __init__(self, pid: int) -> None:
        self.pid = pid

    def poll(self) -> Optional[int]:
        return None if _running(self.pid) else EXIT_ATTACHED_ENDED

    def wait(self, timeout: Optional[float] = None) -> Optional[int]:
        return self.poll()


class AttachedProcess(RankProcess):
    """Rank 0 of a singleton's job: the running program, watched through a pidfd, its end
    seen through :class:`_AttachedPopen`; the launcher never signals it (it is not the
    launcher's to end)."""

    @classmethod
    def attach(cls, pid: int) -> "AttachedProcess":
        pidfd: Optional[int] = None
        if hasattr(os, "pidfd_open"):
            try:
                pidfd = os.pidfd_open(pid)
            except OSError:
                pidfd = None
        return cls(rank=0, popen=_AttachedPopen(pid), pidfd=pidfd)

    def reap_exited(self, timeout: float = 1.0) -> Optional[int]:
        """Its pidfd says it ended: it has (not our child, there is no zombie to wait for)."""
        self.returncode = EXIT_ATTACHED_ENDED
        self.close_pidfd()
        return self.returncode

    def signal_group(self, sig: int) -> None:
        """Not ours to end: the singleton's own program decides when it exits."""


def _running(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie waiting for its parent counts as ended)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] not in (b"Z", b"X")
    except (OSError, IndexError):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True


class SingletonJob(Job):
    """A job of size 1 whose rank 0 is the already running singleton ``parent``; the start
    details go to it over ``reply_fd`` once the coordinator listens."""

    def __init__(self, spec: JobSpec, parent: int, reply_fd: int) -> None:
        super().__init__(spec)
        self.parent = parent
        self.reply_fd = reply_fd
        self.attached: Optional[AttachedProcess] = None
        self._ended_at: Optional[float] = None

    def _start_ranks(self, coord_address: str, lifeline_r: int,
                     fork_server: Optional[ForkServer]) -> None:
        rp = AttachedProcess.attach(self.parent)
        self.attached = rp
        self.ranks.append(rp)
        if os.getppid() != self.parent or not _running(self.parent):
            raise OSError(f"the singleton process {self.parent} is gone")
        reply = {"coord": coord_address, "secret": self.secret.hex(), "job_id": self.job_id,
                 "heartbeat": 0.0,   # none: see _check_heartbeats
                 "startup_timeout": self.spec.startup_timeout, "pid": os.getpid()}
        try:
            os.write(self.reply_fd, json.dumps(reply).encode() + b"\n")
        finally:
            os.close(self.reply_fd)

    def _reap(self, rp) -> None:
        if rp is not self.attached:
            return super()._reap(rp)
        if rp.reap_exited() is None:
            return
        st = self.coord.ranks[0]
        # its last message (finalize) may still be on its way when its end is seen
        deadline = time.monotonic() + FINALIZE_WAIT
        while not st.finalized and self.coord.socket.poll(
                max(0, int((deadline - time.monotonic()) * 1000))):
            for ev in self.coord.receive():
                self._on_coord_event(ev)
        st.exit_status = "ended" + (" after MPI finalize" if st.finalized else "")
        if self.failure is not None:
            return
        if not st.finalized:
            self.fail(Failure("vanished", 1, f"minimpi: the singleton process {self.parent} "
                                             f"ended without finalizing MPI; ending the "
                                             f"processes it spawned"))
        else:
            self._ended_at = time.monotonic()

    def _check_heartbeats(self, now: float) -> Optional[float]:
        """In place of the job's heartbeat check (the singleton sends none: stopping it with
        Ctrl-Z or a debugger is its own business; the spawned processes' heartbeats are
        checked by launcher/dynamic.py): the end of the processes that still run
        :data:`LINGER` seconds after the singleton finalized and ended."""
        due = None
        if self._ended_at is None or self.failure is not None:
            return due
        until = self._ended_at + LINGER
        if now < until:
            return until
        still = [f"  {sj.name(r)} (`{sj.command}`)" for sj in self.dynamic.jobs.values()
                 for r, process in enumerate(sj.processes) if process.alive]
        self.fail(Failure("vanished", 0, f"minimpi: the singleton process {self.parent} ended; "
                                         f"ending the spawned processes still running after "
                                         f"{LINGER:g} s", details=still))
        return due


    def fail(self, failure: Failure) -> None:
        """End what was spawned, and say why at once (the singleton may run on for long;
        under ``minimpi run`` the summary comes at the job's end). The singleton goes on:
        it is told which of the processes it was joined with are gone and why
        (:meth:`_tell_singleton`), so that its calls with them raise ``PeerLostError``
        instead of waiting for a process that never connected."""
        first = self.failure is None
        ending = self._joined_processes(failure) if first else []
        super().fail(failure)
        if not first:
            return
        self.log(failure.summary)
        for line in failure.details:
            self.log(line)
        self._tell_singleton(failure, ending)
        # spawns not answered yet: their processes are being ended, so say so (under
        # `minimpi run` the rank that waits for the answer would be ended too)
        why = failure.summary.removeprefix("minimpi: ")
        for sj in self.dynamic.jobs.values():
            if not sj.answered:
                sj.answered = True
                coord, rank, number = sj.requester
                self.dynamic.reply(coord, rank, number, ok=False,
                                   error=f"spawned job {sj.number} (`{sj.command}`) was ended "
                                         f"by the launcher of this singleton after: {why}")

    def _joined_processes(self, failure: Failure) -> list[tuple[int, int]]:
        """(spawned job, rank) of the processes the singleton is joined with (their spawn
        was answered) that this failure ends: those still running, and the failed one."""
        ending = [(sj.number, r) for sj in self.dynamic.jobs.values() if sj.answered
                  for r, process in enumerate(sj.processes) if process.alive]
        if failure.spawned is not None and failure.spawned not in ending:
            ending.append(failure.spawned)
        return ending

    def _tell_singleton(self, failure: Failure, ending: list[tuple[int, int]]) -> None:
        """A ``proc_failed`` notice per process in ``ending`` (its universe id, and why: the
        failure itself for the process that failed, else that the launcher ended it after
        it), which the singleton's runtime hands to its engine (``minimpi.runtime.failures``):
        its pending and later operations with those processes fail with PeerLostError
        naming them, as a closed connection makes them under ``minimpi run``."""
        why = failure.summary.removeprefix("minimpi: ")
        for number, rank in ending:
            uid = ((number + 1) << UID_SHIFT) | rank
            reason = why if (number, rank) == failure.spawned else \
                f"ended by the launcher of this singleton after: {why}"
            self.coord.send(0, {"t": "proc_failed", "rank": uid, "why": reason})

    def _finish(self) -> int:
        """The summary was said when the failure happened (:meth:`fail`)."""
        if self.forward is not None:
            self.forward.release()
        return 0 if self.failure is None else self.failure.exit_code

    def _on_coord_event(self, ev) -> None:
        """The singleton's requests; once a failure ended what it spawned, they are refused
        with that failure (under ``minimpi run`` the job, rank 0 too, would be over)."""
        if ev.data is not None and self.failure is not None:
            why = self.failure.summary.removeprefix("minimpi: ")
            self.dynamic.reply(self.coord, ev.rank, (ev.data or {}).get("n"), ok=False,
                               error=f"the launcher of this singleton starts nothing more "
                                     f"after: {why}")
            return
        super()._on_coord_event(ev)


def spec_from_environment(environ=os.environ) -> JobSpec:
    """The job of a singleton's launcher: one rank, the settings ``minimpi run`` would use
    by default (``MINIMPI_STARTUP_TIMEOUT``, ``MINIMPI_FORK_SERVER`` read from the
    singleton's environment), spawned output prefixed ``[jobK:R]``."""
    try:
        startup = float(environ.get("MINIMPI_STARTUP_TIMEOUT") or 60.0)
    except ValueError:
        startup = 60.0
    options = argparse.Namespace(nprocs=1, eager_limit=None, transport=None, progress=None,
                                 coll=[], env=[], mpi4py_shim=True)
    return JobSpec(nprocs=1, env=extra_env(options), startup_timeout=startup,
                   rank_start=rank_start, deadlock_timeout=0.0,
                   fork_server=environ.get("MINIMPI_FORK_SERVER", "1") != "0")


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m minimpi.launcher.singleton",
                                description="the launcher a singleton starts to spawn")
    p.add_argument("parent", type=int, help="pid of the singleton process (rank 0)")
    p.add_argument("reply_fd", type=int, help="pipe for the job's secret and coordinator")
    args = p.parse_args(argv)
    return SingletonJob(spec_from_environment(), args.parent, args.reply_fd).run()


if __name__ == "__main__":
    sys.exit(main())

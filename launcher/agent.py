"""The agent: the launcher's hands on one host of a multi-host job.

``minimpi run --hosts a:4,b:4`` starts one agent per host, over ssh (or srun, or directly for
``localhost``):

    ssh b /path/to/python -m minimpi.launcher.agent --host b

The agent reads its orders from stdin - the first frame carries the job secret, so that it
never appears in a command line - spawns that host's ranks, and forwards their output, the
results of ``minimpi.launch`` and their exit statuses to the launcher on stdout. Then:

* stdin is the launcher's lifeline: sshd sends a remote command no signal when the ssh client
  dies (there is no terminal), but the command's stdin reaches EOF. EOF here means "the
  launcher is gone": the agent ends its ranks' process groups (SIGTERM, SIGKILL after the
  grace period) and exits. Its ranks also die with it (PR_SET_PDEATHSIG, and their lifeline
  pipe, as under a local launcher).
* the launcher ends a job by sending ``signal`` frames; the agent passes the signal to every
  rank's process group, including what finished ranks left behind.
* once every rank has exited and its pipes are drained, the agent says ``bye`` and exits 0
  (with ``"spawns": true`` in the start frame it first waits for the launcher's ``end``, as
  the launcher may still ask it to start processes of a ``Spawn``; an agent may also start
  with no ranks at all, for spawned processes only). An agent (or ssh connection) that ends
  without ``bye`` is a lost host to the launcher.

Wire format, both ways: frames of a 4-byte big-endian length and a msgpack map; the agent
first writes MAGIC, so that whatever a login script prints to stdout before it is skipped.
Within ssh or srun the channel is already authenticated, so frames carry no MAC.

launcher -> agent
    {"t": "start", "secret": HEX, "job": ID, "ranks": [R...], "size": N, "argv": [...],
     "cwd": DIR, "env": {...}, "coord_port": P, "coord_hosts": [...], "multihost": BOOL,
     "iface": SPEC|None, "bind": ADDR|None, "stdin_rank": R|None, "rank_stdin": BYTES|None,
     "result_fd": BOOL, "grace": S, "shim_dir": DIR|None, "keepalive": S, "silence": S}
    {"t": "signal", "sig": N}      (every process of this host; with "j": K only spawned
                                    job K's, with "r": R too only its rank R)
    {"t": "spawn", "j": K, "job": ID, "coord_port": P, "local": [R...],
     "procs": [{"r": R, "argv": [...], "python": BOOL, "cwd": DIR|None, "env": {...}}]}
                                   (start processes of spawned job K here: launcher/dynamic.py;
                                    "python": argv runs under this host's Python and start
                                    script; "local": job K's ranks on this host)
    {"t": "end"}                   (with "spawns" in the start frame: nothing more will be
                                    started here; exit once every process has ended)
    {"t": "ping"}                  (every ``keepalive`` s; 0: never)
    {"t": "stdin", "d": BYTES} / {"t": "stdin_eof"}      (for stdin_rank)
    {"t": "output", "on": BOOL}    (flow control: off while the launcher's own stdout or
                                    stderr is full; the ranks' output pipes are then left
                                    unread, so they wait, while exits still flow)
agent -> launcher
    {"t": "hello", "host": IDENTITY, "hostname": NAME, "pid": PID, "coord": URL, "bind": ADDR}
    {"t": "out", "r": R, "s": 1|2|3, "d": BYTES}   (stdout, stderr, launch() result)
    {"t": "exit", "r": R, "rc": RC}
        (both with "j": K for a process of spawned job K)
    {"t": "spawn_failed", "j": K, "r": R, "msg": TEXT}   (that process could not start)
    {"t": "stdin_ack", "n": BYTES}                  (flow control of forwarded stdin)
    {"t": "error", "msg": TEXT}                     (the agent cannot go on; it exits)
    {"t": "ping"}                                   (every ``keepalive`` s)
    {"t": "bye"}

**Keepalives.** EOF on stdin is not enough of a lifeline: a host whose network goes silent
(a link down, a switch lost) gives neither end EOF for many minutes. So both ends send a
``ping`` every ``keepalive`` seconds. The launcher declares a host lost when its agent is
silent for ``--heartbeat-timeout``; the agent, when it has heard nothing from the launcher
for ``silence`` seconds (twice that: the launcher judges first, and a launcher that was only
stopped for a while is not given up on at once), ends its ranks and exits, as on EOF. A write
to the launcher that stays blocked that long is the same silence.
"""
from __future__ import annotations

import argparse
import errno
import os
import select
import signal
import socket
import struct
import subprocess
import sys
import time
from typing import Callable, Optional, Sequence

import msgpack

from minimpi.runtime.bootstrap import (
    ENV_BIND,
    ENV_COORD,
    ENV_LAUNCHER_PID,
    ENV_LIFELINE,
    ENV_RANK,
    ENV_SECRET,
    host_identity,
)
from minimpi.runtime.netaddr import AddressError, data_plane_address, is_loopback
from minimpi.transports.shm import ENV_LOCAL_RANKS, cleanup_job, format_ranks

from .processes import RankProcess, signal_together, spawn_rank

ENV_RESULT_FD = "MINIMPI_RESULT_FD"    # where a rank of minimpi.launch writes its result
MAX_FRAME = 256 << 20
#: the agent's first bytes on stdout: what a login script printed before it is skipped
MAGIC = b"\0minimpi-agent-1\0"
READ_SIZE = 65536
START_WAIT_S = 30.0        # for the launcher's first frame
PROBE_WAIT_S = 3.0         # for a TCP connection to one of the coordinator's addresses
DRAIN_S = 2.0              # for the pipes of exited ranks (leftover children may hold them)
STDOUT, STDERR, RESULT = 1, 2, 3


class ProtocolError(Exception):
    """A frame that is not one: too long, or not a msgpack map."""


def encode(message: dict) -> bytes:
    body = msgpack.packb(message, use_bin_type=True)
    return struct.pack(">I", len(body)) + body


class FrameReader:
    """Cuts a byte stream into frames; ``feed`` returns the complete messages so far."""

    def __init__(self) -> None:
        self.buf = bytearray()

    def feed(self, data: bytes) -> list[dict]:
        self.buf += data
        out = []
        while len(self.buf) >= 4:
            (size,) = struct.unpack(">I", self.buf[:4])
            if size > MAX_FRAME:
                raise ProtocolError(f"a frame of {size} bytes (at most {MAX_FRAME})")
            if len(self.buf) < 4 + size:
                break
            body = bytes(self.buf[4:4 + size])
            del self.buf[:4 + size]
            try:
                msg = msgpack.unpackb(body, raw=False)
            except Exception as exc:
                raise ProtocolError(f"a frame that is not msgpack ({exc})") from None
            if not isinstance(msg, dict):
                raise ProtocolError("a frame that is not a map")
            out.append(msg)
        return out


def write_all(fd: int, data: bytes, give_up: Optional[Callable[[], bool]] = None) -> None:
    """Blocking write of everything (the launcher reads continuously); while the write waits,
    ``give_up()`` is asked every second whether to stop (then BrokenPipeError)."""
    view = memoryview(data)
    while view:
        try:
            n = os.write(fd, view)
        except InterruptedError:
            continue
        except BlockingIOError:
            if not select.select([], [fd], [], 1.0)[1] and give_up is not None and give_up():
                raise BrokenPipeError("the launcher takes no more output") from None
            continue
        view = view[n:]


def probe(candidates: list[str], port: int, timeout: float = PROBE_WAIT_S) -> tuple[Optional[str], list[str]]:
    """The first of ``candidates`` (in order of preference) that accepts a TCP connection on
    ``port``, trying all at once; (None, what went wrong with each) if none does."""
    pending: dict[int, tuple[int, socket.socket]] = {}
    results: dict[int, Optional[str]] = {}      # index -> None (connected) or the error
    for i, host in enumerate(candidates):
        try:
            s = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
            s.setblocking(False)
            err = s.connect_ex((host, port))
        except OSError as exc:
            results[i] = str(exc)
            continue
        if err in (0, errno.EINPROGRESS):
            pending[s.fileno()] = (i, s)
        else:
            results[i] = os.strerror(err)
            s.close()
    deadline = time.monotonic() + timeout
    while True:
        best = next((i for i in range(len(candidates)) if results.get(i, "") is None), None)
        undecided_before = best is not None and any(i not in results for i in range(best))
        if (best is not None and not undecided_before) or not pending:
            break
        left = deadline - time.monotonic()
        if left <= 0:
            break
        _, writable, _ = select.select([], list(pending), [], left)
        for fd in writable:
            i, s = pending.pop(fd)
            err = s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            results[i] = None if err == 0 else os.strerror(err)
            s.close()
    for i, s in pending.values():
        results[i] = f"no answer within {timeout:g} s"
        s.close()
    best = next((i for i in range(len(candidates)) if results.get(i, "") is None), None)
    if best is not None:
        return candidates[best], []
    return None, [f"{candidates[i]}:{port} ({results.get(i)})" for i in range(len(candidates))]


class _Feed:
    """Bytes on their way into one rank's stdin."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.buf = bytearray()
        self.eof = False      # close once buf is written


class Agent:
    def __init__(self, start: dict, in_fd: int = 0, out_fd: int = 1,
                 reader: Optional[FrameReader] = None, early: Sequence[dict] = ()) -> None:
        self.start = start
        self.in_fd, self.out_fd = in_fd, out_fd
        self.ranks: list[RankProcess] = []          # the job's ranks, then spawned processes
        self.pipes: dict[int, tuple[RankProcess, int]] = {}    # fd -> (process, stream)
        self.pidfds: dict[int, RankProcess] = {}
        self.feeds: dict[int, _Feed] = {}              # rank -> its stdin feed
        self.reader = reader or FrameReader()
        self.early = list(early)          # frames that arrived with the start frame
        self.kill_at: Optional[float] = None
        self.launcher_gone = False
        self.grace = float(start.get("grace", 1.0))
        self.output_on = True     # the launcher takes the ranks' output ("output" frames)
        #: keepalives (see the module doc): how often we ping, how much silence ends the job
        self.keepalive = float(start.get("keepalive", 0) or 0)
        self.silence = float(start.get("silence", 0) or 0)
        self.last_heard = time.monotonic()     # the launcher's last frame (or the start)
        self.next_ping = self.last_heard + self.keepalive
        #: the launcher may send ``spawn`` frames until it sends ``end``
        self.wait_for_end = bool(start.get("spawns"))
        self.ended = False
        self.coord_host: Optional[str] = None    # the coordinators' address as reached from here
        self.bind: Optional[str] = None          # this host's data-plane address
        self.spawned_jobs: set[str] = set()      # job ids of spawned jobs with processes here
        self.lifelines: list[int] = []           # write ends: the processes' lifeline pipes
        self.poller = None                       # the loop's poll object, once it runs
        self.need_reap_poll = False              # some process has no pidfd

    def launcher_silent_for(self, now: float) -> Optional[float]:
        """How long the launcher has been silent, when that is longer than allowed."""
        quiet = now - self.last_heard
        return quiet if self.silence > 0 and quiet > self.silence else None

    # -- to the launcher ------------------------------------------------------------------
    def send(self, message: dict) -> None:
        if self.launcher_gone:
            return
        try:
            write_all(self.out_fd, encode(message), self.stalled)
        except OSError:            # the launcher side of the pipe is closed: it is gone
            self.on_launcher_gone()

    def stalled(self) -> bool:
        """Called while a write to the launcher waits: give up once it is silent too long
        (a host whose network went away: the ssh channel stops taking our output)."""
        quiet = self.launcher_silent_for(time.monotonic())
        if quiet is not None:
            self.say_launcher_silent(quiet)
        return quiet is not None

    def say_launcher_silent(self, quiet: float) -> None:
        print(f"minimpi agent on {socket.gethostname()}: no word from the launcher for "
              f"{quiet:.0f} s (its host or the network between us is gone?): ending this "
              f"host's ranks", file=sys.stderr, flush=True)

    def fail(self, text: str) -> int:
        self.send({"t": "error", "msg": text})
        return 1

    # -- start ----------------------------------------------------------------------------
    def coordinator_host(self) -> tuple[Optional[str], str]:
        """(host, why not) of the launcher's coordinator as reachable from here."""
        start = self.start
        candidates: list[str] = []
        conn = os.environ.get("SSH_CONNECTION", "").split()
        if start.get("ssh_client_first") and conn:
            candidates.append(conn[0])   # the launcher's address as this host's sshd saw it
        candidates += [h for h in start.get("coord_hosts", []) if h not in candidates]
        if start.get("multihost"):
            # ranks of other hosts must reach ours, so no rank may sit on loopback
            candidates = [h for h in candidates if not is_loopback(h)]
        if not candidates:
            return None, "the launcher sent no address of its coordinator that is not loopback"
        host, errors = probe(candidates, int(start["coord_port"]))
        return host, "tried " + "; ".join(errors)

    def rank_env(self, rank: int, coord: str, bind: str, lifeline: int,
                 extra: Optional[dict] = None, local: Optional[list] = None) -> dict[str, str]:
        """A process's environment: the agent's, the launcher's settings, ``extra`` (a
        spawned process's own: its job, size, parents), and what only this host knows."""
        env = dict(os.environ)
        env.update({str(k): str(v) for k, v in self.start.get("env", {}).items()})
        env.update({str(k): str(v) for k, v in (extra or {}).items()})
        shim = self.start.get("shim_dir")
        if shim and "PYTHONPATH" in env:
            # the launcher's mpi4py shim directory -> this host's (another install may live
            # at another path)
            from minimpi import _shim
            here = os.path.dirname(os.path.abspath(_shim.__file__))
            env["PYTHONPATH"] = os.pathsep.join(here if p == shim else p
                                                for p in env["PYTHONPATH"].split(os.pathsep))
        env.update({
            ENV_RANK: str(rank),
            ENV_COORD: coord,
            ENV_SECRET: self.start["secret"],
            ENV_BIND: bind,
            ENV_LIFELINE: str(lifeline),
            ENV_LAUNCHER_PID: str(os.getpid()),
            # this host's ranks of the process's job (shm.py)
            ENV_LOCAL_RANKS: format_ranks(self.start["ranks"] if local is None else local),
        })
        return env

    def spawn(self) -> Optional[str]:
        """Start this host's ranks; an error text if that cannot be done."""
        start = self.start
        cwd = start.get("cwd") or None
        if cwd and not os.path.isdir(cwd):
            return (f"the working directory {cwd} does not exist on {socket.gethostname()} "
                    f"(multi-host jobs expect the same paths on every host)")
        host, why = self.coordinator_host()
        if host is None:
            return f"cannot reach the launcher's coordinator from {socket.gethostname()}: {why}"
        try:
            bind = data_plane_address(host, start.get("iface"), start.get("bind"))
        except AddressError as exc:
            return f"on {socket.gethostname()}: {exc}"
        self.coord_host, self.bind = host, bind
        coord = f"tcp://{host}:{int(start['coord_port'])}"
        argv = [sys.executable, *local_start_script(start["argv"])]
        lifeline_r, lifeline_w = os.pipe()
        self.lifelines.append(lifeline_w)
        payload = start.get("rank_stdin")
        try:
            for rank in start["ranks"]:
                fds = [lifeline_r]
                env = self.rank_env(rank, coord, bind, lifeline_r)
                result_r = result_w = None
                if start.get("result_fd"):
                    result_r, result_w = os.pipe()
                    fds.append(result_w)
                    env[ENV_RESULT_FD] = str(result_w)
                wants_stdin = payload is not None or rank == start.get("stdin_rank")
                try:
                    rp = spawn_rank(rank, argv, env, stdin_inherit=False, pass_fds=tuple(fds),
                                    cwd=cwd, stdin=subprocess.PIPE if wants_stdin else None)
                except OSError as exc:
                    return f"cannot start rank {rank} on {socket.gethostname()}: {exc}"
                finally:
                    if result_w is not None:
                        os.close(result_w)
                self.watch(rp)
                if result_r is not None:
                    os.set_blocking(result_r, False)
                    self.pipes[result_r] = (rp, RESULT)
                if wants_stdin:
                    fd = rp.popen.stdin.fileno()
                    os.set_blocking(fd, False)
                    feed = self.feeds[rank] = _Feed(fd)
                    if payload is not None:
                        feed.buf += payload
                        feed.eof = True
        finally:
            os.close(lifeline_r)
        self.send({"t": "hello", "host": host_identity(), "hostname": socket.gethostname(),
                   "pid": os.getpid(), "coord": coord, "bind": bind})
        return None

    def watch(self, rp: RankProcess) -> None:
        """Forward the output and the exit of a process started here."""
        self.ranks.append(rp)
        for stream, pipe in ((STDOUT, rp.popen.stdout), (STDERR, rp.popen.stderr)):
            os.set_blocking(pipe.fileno(), False)
            self.pipes[pipe.fileno()] = (rp, stream)
        if rp.pidfd is not None:
            self.pidfds[rp.pidfd] = rp
            if self.poller is not None:
                self.poller.register(rp.pidfd, select.POLLIN)
        else:
            self.need_reap_poll = True

    def spawn_more(self, msg: dict) -> None:
        """A ``spawn`` frame: start processes of a spawned job here (launcher/dynamic.py),
        as this host's ranks were started; one that cannot start is reported
        (``spawn_failed``) and the launcher ends the rest of that spawn."""
        job_no, job_id = int(msg["j"]), str(msg["job"])
        coord = f"tcp://{self.coord_host}:{int(msg['coord_port'])}"
        local = [int(r) for r in msg.get("local", [])]
        self.spawned_jobs.add(job_id)
        lifeline_r, lifeline_w = os.pipe()
        self.lifelines.append(lifeline_w)
        try:
            for proc in msg.get("procs", []):
                rank = int(proc["r"])
                argv = [str(a) for a in proc["argv"]]
                if proc.get("python"):
                    argv = [sys.executable, *local_start_script(argv)]
                env = self.rank_env(rank, coord, self.bind or "", lifeline_r,
                                    proc.get("env"), local)
                cwd = proc.get("cwd") or None
                try:
                    if cwd and not os.path.isdir(cwd):
                        raise OSError(f"its working directory {cwd} does not exist here")
                    rp = spawn_rank(rank, argv, env, stdin_inherit=False,
                                    pass_fds=(lifeline_r,), cwd=cwd)
                except OSError as exc:
                    why = exc.strerror or str(exc)
                    if exc.filename:
                        why += f": {exc.filename}"
                    self.send({"t": "spawn_failed", "j": job_no, "r": rank,
                               "msg": f"on {socket.gethostname()}: {why}"})
                    continue
                rp.job = job_no
                self.watch(rp)
        finally:
            os.close(lifeline_r)

    # -- teardown -------------------------------------------------------------------------
    def signal_all(self, sig: int, job: Optional[int] = None, rank: Optional[int] = None) -> None:
        """Signal every process (or spawned job ``job``'s, or its rank ``rank``'s), all at
        once (:func:`~launcher.processes.signal_together`)."""
        signal_together([rp for rp in self.ranks if (job is None or rp.job == job)
                         and (rank is None or rp.rank == rank)], sig)

    def on_launcher_gone(self) -> None:
        if self.launcher_gone:
            return
        self.launcher_gone = True
        self.signal_all(signal.SIGTERM)
        self.kill_at = time.monotonic() + self.grace

    # -- the loop -------------------------------------------------------------------------
    def on_frame(self, msg: dict) -> None:
        kind = msg.get("t")
        if kind == "signal":
            sig = int(msg.get("sig", signal.SIGTERM))
            job, rank = msg.get("j"), msg.get("r")
            self.signal_all(sig, None if job is None else int(job),
                            None if rank is None else int(rank))
        elif kind == "spawn":
            if not self.launcher_gone and not self.ended:
                self.spawn_more(msg)
        elif kind == "end":
            self.ended = True
        elif kind == "stdin":
            feed = self.feeds.get(self.start.get("stdin_rank"))
            if feed is not None and not feed.eof:
                feed.buf += msg.get("d", b"")
        elif kind == "stdin_eof":
            feed = self.feeds.get(self.start.get("stdin_rank"))
            if feed is not None:
                feed.eof = True
        elif kind == "output":
            self.output_on = bool(msg.get("on", True))

    def sync_output(self, poller, polled: set[int]) -> bool:
        """Poll the ranks' stdout/stderr only while the launcher takes output (results and
        the launcher gone: always); True while some are left unread."""
        on = self.output_on or self.launcher_gone
        want = {fd for fd, (_, stream) in self.pipes.items() if on or stream == RESULT}
        for fd in polled - want:
            poller.unregister(fd)
        for fd in want - polled:
            poller.register(fd, select.POLLIN)
        polled.clear()
        polled.update(want)
        return len(want) < len(self.pipes)

    def write_feeds(self) -> None:
        for rank, feed in list(self.feeds.items()):
            n = 0
            if feed.buf:
                try:
                    n = os.write(feed.fd, feed.buf)
                    del feed.buf[:n]
                except BlockingIOError:
                    pass
                except OSError:          # the rank closed its stdin or exited: drop the rest
                    n = len(feed.buf)
                    feed.buf.clear()
                    feed.eof = True
            if n and rank == self.start.get("stdin_rank") and self.start.get("rank_stdin") is None:
                self.send({"t": "stdin_ack", "n": n})
            if feed.eof and not feed.buf:
                try:
                    os.close(feed.fd)
                except OSError:
                    pass
                del self.feeds[rank]

    def reap(self, rp: RankProcess) -> None:
        rc = rp.reap()
        if rc is None:
            try:
                rc = rp.popen.wait(timeout=1.0)
            except subprocess.TimeoutExpired:
                return
            rp.returncode = rc
            rp.close_pidfd()
        self.send({"t": "exit", **ident(rp), "rc": rc})

    def finished(self) -> bool:
        """Every process has ended, and nothing more will be started here."""
        return all(not rp.alive for rp in self.ranks) and \
            (not self.wait_for_end or self.ended or self.launcher_gone)

    def run(self) -> int:
        error = self.spawn()
        if error is not None:
            self.signal_all(signal.SIGKILL)
            for rp in self.ranks:
                rp.popen.wait()
            return self.fail(error)
        poller = self.poller = select.poll()
        poller.register(self.in_fd, select.POLLIN)
        for fd in self.pidfds:
            poller.register(fd, select.POLLIN)
        polled: set[int] = set()     # the ranks' pipes being read (sync_output)
        for msg in self.early:
            self.on_frame(msg)
        all_done_at: Optional[float] = None
        stdin_open = True
        while True:
            now = time.monotonic()
            if self.kill_at is not None and now >= self.kill_at:
                self.signal_all(signal.SIGKILL)
                self.kill_at = None
            if not self.launcher_gone:
                quiet = self.launcher_silent_for(now)
                if quiet is not None:
                    self.say_launcher_silent(quiet)
                    self.on_launcher_gone()
                elif self.keepalive > 0 and now >= self.next_ping:
                    self.next_ping = now + self.keepalive
                    self.send({"t": "ping"})
            if self.sync_output(poller, polled) and all_done_at is not None:
                all_done_at = now   # output held back for the launcher: not drained yet
            if self.finished():
                if all_done_at is None:
                    all_done_at = now
                    self.signal_all(signal.SIGKILL)   # leftovers may hold the pipes open
                if not self.pipes or now - all_done_at > DRAIN_S:
                    break
            for rank, feed in self.feeds.items():
                if feed.buf:
                    poller.register(feed.fd, select.POLLOUT)
            waits = [d for d in (self.kill_at,
                                 all_done_at + DRAIN_S if all_done_at else None) if d]
            if not self.launcher_gone and self.keepalive > 0:
                waits.append(self.next_ping)
            if not self.launcher_gone and self.silence > 0:
                waits.append(self.last_heard + self.silence + 0.01)
            timeout = max(0.0, min(waits) - now) if waits else 60.0
            if self.need_reap_poll:
                timeout = min(timeout, 0.1)
            try:
                events = poller.poll(int(timeout * 1000) + 1)
            except InterruptedError:
                continue
            feed_fds = {feed.fd for feed in self.feeds.values()}
            for fd, ev in events:
                if fd == self.in_fd and stdin_open:
                    try:
                        data = os.read(fd, READ_SIZE)
                    except OSError:
                        data = b""
                    if not data:
                        stdin_open = False
                        poller.unregister(fd)
                        self.on_launcher_gone()
                        continue
                    self.last_heard = time.monotonic()
                    try:
                        for msg in self.reader.feed(data):
                            self.on_frame(msg)
                    except ProtocolError as exc:
                        print(f"minimpi agent: bad frame from the launcher: {exc}",
                              file=sys.stderr, flush=True)
                        stdin_open = False
                        poller.unregister(fd)
                        self.on_launcher_gone()
                elif fd in self.pipes:
                    rp, stream = self.pipes[fd]
                    try:
                        data = os.read(fd, READ_SIZE)
                    except BlockingIOError:
                        continue
                    except OSError:
                        data = b""
                    if data:
                        self.send({"t": "out", **ident(rp), "s": stream, "d": data})
                    else:
                        poller.unregister(fd)
                        polled.discard(fd)
                        del self.pipes[fd]
                        os.close(fd)
                elif fd in self.pidfds:
                    rp = self.pidfds.pop(fd)
                    poller.unregister(fd)
                    self.reap(rp)
                elif fd in feed_fds:
                    poller.unregister(fd)
            self.write_feeds()
            if self.need_reap_poll:
                for rp in self.ranks:
                    if rp.pidfd is None and rp.alive and rp.reap() is not None:
                        self.send({"t": "exit", **ident(rp), "rc": rp.returncode})
        for fd in list(self.pipes):
            os.close(fd)
        for feed in self.feeds.values():
            try:
                os.close(feed.fd)
            except OSError:
                pass
        self.send({"t": "bye"})
        return 0 if not self.launcher_gone else 1


def ident(rp: RankProcess) -> dict:
    """How the frames name a process: its rank, and its spawned job's number if it has one."""
    return {"r": rp.rank, "j": rp.job} if rp.job else {"r": rp.rank}


def read_start(fd: int, timeout: float = START_WAIT_S) -> tuple[dict, FrameReader, list[dict]]:
    """The launcher's first frame (with the secret), read within ``timeout`` seconds; also
    the reader (it may hold the start of the next frame) and frames that came along."""
    reader = FrameReader()
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            raise ProtocolError(f"no start frame from the launcher within {timeout:g} s")
        data = os.read(fd, READ_SIZE)
        if not data:
            raise ProtocolError("stdin closed before the start frame arrived")
        frames = reader.feed(data)
        if frames:
            if frames[0].get("t") != "start":
                raise ProtocolError(f"the first frame is {frames[0].get('t')!r}, not 'start'")
            return frames[0], reader, frames[1:]


def local_start_script(argv: Sequence[str]) -> list[str]:
    """The rank command with the launcher's start script replaced by this host's own: minimpi
    may be installed at another path here than on the launcher's host."""
    argv = list(argv)
    if argv and argv[0].endswith(os.path.join("_start", "minimpi_rank.py")):
        import minimpi._start
        argv[0] = os.path.join(os.path.dirname(os.path.abspath(minimpi._start.__file__)),
                               "minimpi_rank.py")
    return argv


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m minimpi.launcher.agent",
                                description="minimpi's per-host agent (started by the launcher; "
                                            "orders on stdin)")
    p.add_argument("--host", help="the name the launcher knows this host by (for ps)")
    p.parse_args(argv)
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    # SIGTERM (e.g. the launcher died: PDEATHSIG) unwinds through main's cleanup below
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    try:
        write_all(1, MAGIC)
    except OSError:
        return 2           # nobody is listening
    try:
        start, reader, early = read_start(0)
    except (ProtocolError, OSError) as exc:
        print(f"minimpi agent on {socket.gethostname()}: {exc}", file=sys.stderr, flush=True)
        return 2
    agent = Agent(start, reader=reader, early=early)
    try:
        return agent.run()
    except BaseException as exc:
        agent.signal_all(signal.SIGKILL)  # never leave ranks behind, whatever went wrong
        if not isinstance(exc, Exception):
            raise
        agent.fail(f"agent on {socket.gethostname()} failed: {type(exc).__name__}: {exc}")
        raise
    finally:
        # shared-memory segments of this host's ranks that died before unlinking their own
        cleanup_job(str(start.get("job", "")))
        for job_id in agent.spawned_jobs:
            cleanup_job(job_id)


if __name__ == "__main__":
    sys.exit(main())

"""``minimpi clean``: remove what jobs that were killed outright left on this host.

A rank unlinks its shared-memory inbox as soon as every peer on its host mapped it, and the
launcher removes what is left when the job ends, however it ends. Only a launcher killed with
``kill -9`` during start-up (its ranks then die by the parent-death signal, before their
peers mapped them) leaves files behind:

* ``/dev/shm/minimpi-<job>-<rank>``: an inbox. Its control block names the rank that created
  it (pid and pid namespace, :func:`minimpi.transports.shm.owner_alive`);
* ``/dev/shm/minimpi-<job>-wake/``: the job's directory of wake-up sockets. A socket there
  that still accepts a datagram connection has a live owner;
* ``$TMPDIR/minimpi-observe-<pid>-*/``: the directory ``--trace``/``--stats`` collect in,
  named after the launcher's pid.

Something is removed only when it belongs to the caller's user and nothing of its job runs
any more: no process of this user has the job's id (``MINIMPI_JOBID``) or directory
(``MINIMPI_OBSERVE_DIR``) in its environment, no owner recorded in the files is alive, and
(for what cannot be told otherwise) it is old. What cannot be judged from here (an owner in
another pid namespace) is left alone. ``minimpi run`` does the same, quietly, before it starts.
"""
from __future__ import annotations

import argparse
import glob
import os
import re
import shutil
import socket
import stat
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import Iterable, Optional

from minimpi.runtime.bootstrap import ENV_JOBID
from minimpi.runtime.observe_env import ENV_DIR as ENV_OBSERVE_DIR
from minimpi.transports.shm import PREFIX, SHM_DIR, owner_alive

OBSERVE_PREFIX = "minimpi-observe-"
#: an observe directory of the old naming (no launcher pid in it) is removed only when it is
#: empty, referenced by no process, and older than this
OLD_OBSERVE_AGE_S = 600.0
#: an inbox whose owner is not written yet (it is being created) is left alone this long
NEW_SEGMENT_AGE_S = 60.0

_SEGMENT = re.compile(re.escape(PREFIX) + r"(?P<job>.+)-(?P<rank>\d+|wake)$")
_OBSERVE = re.compile(re.escape(OBSERVE_PREFIX) + r"(?:(?P<pid>\d+)-)?[^/]*$")


@dataclass
class Leftover:
    path: str
    what: str           # "inbox", "wake-up sockets", "observe directory"
    job: str            # job id, or the observe directory's launcher pid


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dry-run", action="store_true",
                   help="only list what would be removed")
    p.add_argument("-q", "--quiet", action="store_true", help="print nothing")
    p.add_argument("--shm-dir", default=SHM_DIR, help=argparse.SUPPRESS)
    p.add_argument("--tmp-dir", default=None, help=argparse.SUPPRESS)


def main(args: argparse.Namespace) -> int:
    found = leftovers(args.shm_dir, args.tmp_dir or tempfile.gettempdir())
    for item in found:
        if not args.dry_run:
            _remove(item.path)
        if not args.quiet:
            verb = "would remove" if args.dry_run else "removed"
            print(f"minimpi clean: {verb} {item.path} ({item.what} of job {item.job}, "
                  f"whose processes are all gone)")
    if not found and not args.quiet:
        print("minimpi clean: nothing left behind by ended jobs")
    return 0


def sweep() -> list[str]:
    """What ``minimpi run`` calls before it starts: remove leftovers quietly; the paths."""
    try:
        found = leftovers(SHM_DIR, tempfile.gettempdir())
    except OSError:
        return []
    for item in found:
        _remove(item.path)
    return [item.path for item in found]


def leftovers(shm_dir: str = SHM_DIR, tmp_dir: Optional[str] = None) -> list[Leftover]:
    """The files of this user's ended jobs (see the module doc)."""
    tmp_dir = tmp_dir or tempfile.gettempdir()
    segments = _own(glob.glob(os.path.join(shm_dir, glob.escape(PREFIX) + "*")))
    observe = _own(glob.glob(os.path.join(tmp_dir, glob.escape(OBSERVE_PREFIX) + "*")))
    if not segments and not observe:
        return []                      # the usual case: /proc is not read at all
    jobs, dirs = _running_jobs()
    now = time.time()
    by_job: dict[str, list[str]] = {}
    for path in segments:
        m = _SEGMENT.match(os.path.basename(path))
        if m:
            by_job.setdefault(m.group("job"), []).append(path)
    found = []
    for job, paths in sorted(by_job.items()):
        if job in jobs or any(_in_use(p, now) for p in paths):
            continue
        for path in sorted(paths):
            what = "wake-up sockets" if path.endswith("-wake") else "inbox"
            found.append(Leftover(path, what, job))
    for path in observe:
        m = _OBSERVE.match(os.path.basename(path))
        if m is None or path in dirs or not os.path.isdir(path):
            continue
        pid = m.group("pid")
        if pid is not None:
            if _pid_alive(int(pid)):
                continue
        elif os.listdir(path) or now - os.lstat(path).st_mtime < OLD_OBSERVE_AGE_S:
            continue
        found.append(Leftover(path, "observe directory", f"of launcher {pid or '?'}"))
    return found


def _own(paths: Iterable[str]) -> list[str]:
    """Those of ``paths`` that are this user's (never through a symbolic link)."""
    uid = os.getuid()
    out = []
    for path in paths:
        try:
            st = os.lstat(path)
        except OSError:
            continue
        if st.st_uid == uid and not stat.S_ISLNK(st.st_mode):
            out.append(path)
    return out


def _in_use(path: str, now: float) -> bool:
    """Whether the inbox or wake-up directory ``path`` may still belong to a running job."""
    try:
        st = os.lstat(path)
    except OSError:
        return False
    if stat.S_ISDIR(st.st_mode):
        return any(_bound(os.path.join(path, name)) for name in _listdir(path))
    alive = owner_alive(path)
    if alive is None:       # being created, or another pid namespace's: cannot tell
        return now - st.st_mtime < NEW_SEGMENT_AGE_S or _foreign(path)
    return alive


def _foreign(path: str) -> bool:
    """An inbox complete but owned by a process of another pid namespace."""
    from minimpi.transports.shm import segment_owner
    return segment_owner(path) is not None


def _bound(path: str) -> bool:
    """Whether a process still holds the datagram socket bound at ``path``."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    try:
        s.connect(path)
        return True
    except ConnectionRefusedError:
        return False
    except OSError:
        return False
    finally:
        s.close()


def _listdir(path: str) -> list[str]:
    try:
        return os.listdir(path)
    except OSError:
        return []


def _pid_alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, exited but not yet reaped, does not)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except (OSError, IndexError):
        return False


def _running_jobs() -> tuple[set[str], set[str]]:
    """Job ids and observe directories named in the environment of this user's processes."""
    jobs: set[str] = set()
    dirs: set[str] = set()
    uid = os.getuid()
    job_key, dir_key = f"{ENV_JOBID}=".encode(), f"{ENV_OBSERVE_DIR}=".encode()
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            if os.stat(f"/proc/{name}").st_uid != uid:
                continue
            with open(f"/proc/{name}/environ", "rb") as f:
                env = f.read()
        except OSError:
            continue
        for entry in env.split(b"\0"):
            if entry.startswith(job_key):
                jobs.add(entry[len(job_key):].decode("utf-8", "replace"))
            elif entry.startswith(dir_key):
                dirs.add(entry[len(dir_key):].decode("utf-8", "replace"))
    return jobs, dirs


def _remove(path: str) -> None:
    try:
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            os.unlink(path)
    except FileNotFoundError:
        pass
    except OSError as exc:
        print(f"minimpi clean: cannot remove {path}: {exc}", file=sys.stderr)

"""The launcher signals a job's processes as one event (launcher.processes.signal_together)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
from minimpi.launcher.processes import signal_together

#: a process that polls another's exit with SIGTERM blocked, as a rank that delivers frames
#: holds it back, and says whether its own SIGTERM had come when it saw the other gone
_WATCHER = r"""
import os, select, signal, sys
signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
fd = os.pidfd_open(int(sys.argv[1]))
poller = select.poll()
poller.register(fd, select.POLLIN)
print("ready", flush=True)
while not poller.poll(1000):
    pass
mine = signal.SIGTERM in signal.sigpending()
with open(sys.argv[2], "w") as out:
    out.write("signalled" if mine else "not signalled")
signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
"""


class _Group:
    """A process leading its own process group, as a rank does. Each signal sent to it is
    followed by a pause: the launcher losing its core between two signals, as on a loaded
    machine (where the race was seen)."""

    def __init__(self, argv):
        self.popen = subprocess.Popen(argv, start_new_session=True, stdout=subprocess.PIPE,
                                      text=True)

    def signal_group(self, sig):
        try:
            os.killpg(self.popen.pid, sig)
        except ProcessLookupError:
            pass
        time.sleep(0.05)


class _Recorder:
    def __init__(self, name, log):
        self.name, self.log = name, log

    def signal_group(self, sig):
        self.log.append((self.name, sig))


def test_every_process_is_stopped_before_any_gets_the_signal_and_continued_after():
    log = []
    signal_together([_Recorder("a", log), _Recorder("b", log), _Recorder("c", log)],
                    signal.SIGTERM)
    sigs = [sig for _, sig in log]
    assert sigs == [signal.SIGSTOP] * 3 + [signal.SIGTERM] * 3 + [signal.SIGCONT] * 3
    assert [name for name, _ in log] == ["a", "b", "c"] * 3


def test_one_process_or_a_stop_signal_is_sent_alone():
    log = []
    signal_together([_Recorder("a", log)], signal.SIGTERM)
    signal_together([_Recorder("a", log), _Recorder("b", log)], signal.SIGCONT)
    assert log == [("a", signal.SIGTERM), ("a", signal.SIGCONT), ("b", signal.SIGCONT)]


def test_the_processes_are_continued_even_when_a_signal_fails():
    log = []

    class Failing(_Recorder):
        def signal_group(self, sig):
            super().signal_group(sig)
            if sig == signal.SIGTERM:
                raise OSError("refused")

    with pytest.raises(OSError):
        signal_together([Failing("a", log), _Recorder("b", log)], signal.SIGTERM)
    assert log[-2:] == [("a", signal.SIGCONT), ("b", signal.SIGCONT)]


@pytest.mark.skipif(not hasattr(os, "pidfd_open"), reason="needs os.pidfd_open (Linux 5.3+)")
def test_a_process_never_sees_another_gone_before_its_own_signal_came(tmp_path):
    """The job's end as the launcher makes it: the first process dies at its SIGTERM at
    once; the second, which holds SIGTERM back and watches the first, must find its own
    SIGTERM pending when it sees the first gone (it used to report the peer lost)."""
    for i in range(3):
        first = _Group([sys.executable, "-c", "import time; time.sleep(60)"])
        verdict = tmp_path / f"verdict{i}"
        second = _Group([sys.executable, "-c", _WATCHER, str(first.popen.pid), str(verdict)])
        try:
            assert second.popen.stdout.readline().strip() == "ready"
            signal_together([first, second], signal.SIGTERM)
            assert first.popen.wait(timeout=10) == -signal.SIGTERM
            assert second.popen.wait(timeout=10) == -signal.SIGTERM
            assert verdict.read_text() == "signalled"
        finally:
            for proc in (first, second):
                if proc.popen.poll() is None:
                    proc.signal_group(signal.SIGKILL)
                    proc.popen.wait(timeout=10)
                proc.popen.stdout.close()

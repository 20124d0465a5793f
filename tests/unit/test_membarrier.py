"""The process-wide barrier the shared-memory transport's sleepers issue (minimpi.transports
.membarrier): offered exactly where the kernel has it, registered per process."""
from __future__ import annotations

import os

import pytest

from minimpi.transports import membarrier


def test_registration_succeeds_exactly_where_the_kernel_offers_the_barrier():
    assert membarrier.register() == membarrier.supported()
    if membarrier.supported():
        assert membarrier.register()          # (again: once per process)
        assert membarrier.barrier() is None


@pytest.mark.skipif(not membarrier.supported(), reason="no membarrier(GLOBAL_EXPEDITED) here")
def test_a_forked_child_registers_itself_again():
    # registration belongs to a process (its memory map): a child a rank forks is not
    # registered, so register() must ask the kernel again there, not trust the parent's
    assert membarrier.register()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(read)
            asked = []
            call = membarrier._call
            membarrier._call = lambda command: asked.append(command) or call(command)
            ok = membarrier.register() and membarrier.barrier() is None
            os.write(write, b"%d %d" % (ok, membarrier._CMD_REGISTER_GLOBAL_EXPEDITED in asked))
        finally:
            os._exit(0)
    os.close(write)
    answer = os.read(read, 64)
    os.close(read)
    os.waitpid(pid, 0)
    assert answer == b"1 1"

"""verbs_compat against stand-in pyverbs packages of both shapes (rdma-core <= 58 and >= 59),
and the availability probe's one-line reasons. The real pyverbs 44 is exercised in the
soft-RoCE guest (test_verbs_device.py)."""
from __future__ import annotations

import logging
import sys
import textwrap

import pytest

from minimpi.transports import verbs, verbs_compat

COMMON = {
    "pyverbs_error.py": """
        class PyverbsError(Exception):
            pass
        class PyverbsRDMAError(PyverbsError):
            def __init__(self, msg, error_code=-1):
                super().__init__(msg)
                self.error_code = error_code
    """,
    "addr.py": "", "mr.py": "", "pd.py": "", "qp.py": "", "wr.py": "",
    "device.py": """
        from .pyverbs_error import PyverbsRDMAError
        def get_device_list():
            raise PyverbsRDMAError("Failed to get devices list", -1)
    """,
}
OLD = {
    # pyverbs.base configures the root logger at import time, as the real one does
    "__init__.py": "import logging\nlogging.basicConfig(level=logging.INFO)\n",
    "enums.py": "IBV_QPT_RC = 2\nIBV_ACCESS_REMOTE_WRITE = 2\n",
    "cq.py": """
        class CompChannel:
            def __init__(self, ctx):
                pass
            def close(self):
                pass
    """,
}
NEW = {
    "__init__.py": "",
    "libibverbs_enums.py": """
        import enum
        class ibv_qp_type(enum.IntEnum):
            IBV_QPT_RC = 2
        class ibv_access_flags(enum.IntEnum):
            IBV_ACCESS_REMOTE_WRITE = 2
    """,
    "cq.py": """
        class CompChannel:
            def __init__(self, ctx):
                self._fd = 42
            @property
            def fd(self):
                return self._fd
    """,
}


@pytest.fixture
def fake_pyverbs(tmp_path, monkeypatch):
    def install(files):
        pkg = tmp_path / "pyverbs"
        pkg.mkdir()
        for name, text in {**COMMON, **files}.items():
            (pkg / name).write_text(textwrap.dedent(text))
        for name in [m for m in sys.modules if m == "pyverbs" or m.startswith("pyverbs.")]:
            monkeypatch.delitem(sys.modules, name)
        monkeypatch.syspath_prepend(str(tmp_path))
        monkeypatch.setattr(verbs_compat, "_loaded", None)
        return verbs_compat.load()
    yield install
    for name in [m for m in sys.modules if m == "pyverbs" or m.startswith("pyverbs.")]:
        sys.modules.pop(name, None)


def test_flat_enums_of_rdma_core_up_to_58(fake_pyverbs):
    root = logging.getLogger()
    before = (list(root.handlers), root.level)
    pv = fake_pyverbs(OLD)
    assert (list(root.handlers), root.level) == before     # the import's basicConfig undone
    assert pv.const("IBV_QPT_RC") == 2 and pv.const("IBV_ACCESS_REMOTE_WRITE") == 2
    with pytest.raises(AttributeError, match="no enum member IBV_NOPE"):
        pv.const("IBV_NOPE")


def test_grouped_enums_and_channel_fd_of_rdma_core_59(fake_pyverbs):
    pv = fake_pyverbs(NEW)
    assert pv.const("IBV_QPT_RC") == 2 and pv.const("IBV_ACCESS_REMOTE_WRITE") == 2
    channel, fd = pv.open_channel(object())
    assert fd == 42


def test_channel_without_fd_attribute_is_found_or_refused_clearly(fake_pyverbs):
    pv = fake_pyverbs(OLD)
    # No '[infinibandevent]' descriptor appears for this stand-in: say so instead of guessing.
    with pytest.raises(RuntimeError, match="cannot find the completion channel's file descriptor"):
        pv.open_channel(object())


def test_probe_reports_a_missing_device_in_one_line(fake_pyverbs):
    fake_pyverbs(OLD)
    reason = verbs.probe({})
    assert reason.startswith("verbs: no RDMA device") and "\n" not in reason


def test_probe_reports_a_missing_pyverbs_with_how_to_get_it(monkeypatch):
    monkeypatch.setattr(verbs_compat, "_loaded", None)
    monkeypatch.setitem(sys.modules, "pyverbs", None)       # import pyverbs -> ImportError
    reason = verbs.probe({})
    assert "pyverbs is not importable" in reason and "python3-pyverbs" in reason
    assert "\n" not in reason

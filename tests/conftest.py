"""Fixtures shared by every test folder; the helpers they use are in ``jobhelpers.py``.

(Test modules import helpers from ``jobhelpers``, never from ``conftest``: several folders
have a conftest.py, and whichever pytest loads first would win the name.)
"""
from __future__ import annotations

import textwrap
import uuid

import pytest
from jobhelpers import assert_no_leftovers


@pytest.fixture
def job_marker():
    marker = uuid.uuid4().hex
    yield marker
    assert_no_leftovers(marker)


@pytest.fixture
def write_script(tmp_path):
    """write_script("name.py", source) -> path (source is dedented)."""
    def write(name: str, source: str) -> str:
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(source))
        return str(path)
    return write

"""The Python client's example in docs/controller.md runs as printed, against a real daemon."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest

from malleable.controller.daemon._hostpool import HostPool
from tests.controller._daemon_util import TOKEN, daemon_thread

pytestmark = pytest.mark.timeout(120)

DOC = Path(__file__).resolve().parents[2] / "docs" / "controller.md"


def test_client_example_in_the_docs_runs(monkeypatch, tmp_path):
    from malleable.controller import Client
    from malleable.controller.daemon._client import Client as Inner

    assert Client is Inner                                   # exported from malleable.controller
    text = DOC.read_text()
    section = text[text.index("## The Python client"):]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    printed = re.search(r"prints `(.*?)` on a fresh controller", section).group(1)
    monkeypatch.setenv("MALLEABLE_TOKEN", TOKEN)
    monkeypatch.setenv("MALLEABLE_CONTROLLER_STATE", str(tmp_path / "ctl.sqlite"))
    monkeypatch.delenv("MALLEABLE_CONTROLLER", raising=False)
    monkeypatch.chdir(tmp_path)
    out = io.StringIO()
    with daemon_thread(tmp_path / "ctl.sqlite", HostPool.local(1)), contextlib.redirect_stdout(out):
        exec(compile(code, str(DOC), "exec"), {})  # noqa: S102 - the documented example itself
    assert out.getvalue() == printed + "\n"
    assert (tmp_path / "hello.out").read_text() == "hello from job 1\n"

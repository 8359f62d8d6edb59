"""A file system for the stager's tests: one metadata and two data servers on 127.0.0.1, stopped after the test."""

from __future__ import annotations

import pytest

SECRET = "stager-tests"


@pytest.fixture
def stager_fs(tmp_path, monkeypatch):
    from malleable.adhocfs._deploy import start_fs

    monkeypatch.setenv("MALLEABLE_TOKEN", SECRET)
    d = start_fs("127.0.0.1", ["127.0.0.1", "127.0.0.1"], token=SECRET.encode(), state=str(tmp_path / "fs"))
    yield d
    d.stop()

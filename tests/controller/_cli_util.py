"""The environment of command-line tests: the test secret, no daemon address inherited, user ``ann``, a fresh cwd
(a test module makes it its ``env`` fixture: ``env = pytest.fixture(cli_env, name="env")``)."""

from __future__ import annotations

from tests.controller._daemon_util import TOKEN


def cli_env(monkeypatch, tmp_path):
    monkeypatch.setenv("MALLEABLE_TOKEN", TOKEN)
    monkeypatch.delenv("MALLEABLE_CONTROLLER", raising=False)
    monkeypatch.setenv("USER", "ann")
    monkeypatch.setenv("LOGNAME", "ann")
    monkeypatch.chdir(tmp_path)
    return tmp_path

"""Every failure of a controller command is one line naming it and exit code 1, never a traceback (a closed
output pipe, an unreachable or misnamed daemon, a refused key, a bad host); the daemon answers a bug in its own
handlers with an error and goes on serving; hosts that do not answer at start are down with the reason."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from malleable.controller.daemon import _protocol as P
from malleable.controller.daemon._hostpool import HostPool
from malleable.controller.daemon._views import VIEWS
from tests.controller._daemon_util import TOKEN, cli, daemon_thread, isolate, wait_final, wait_for

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def env(monkeypatch, tmp_path):
    return isolate(monkeypatch, tmp_path)


def one_line(result: tuple[int, str, str], command: str, text: str) -> None:
    code, _, err = result
    assert code == 1, result
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith(f"malleable {command}: error: ") and text in err, err


def run(*argv: str, env: dict | None = None, closed_stdout: bool = False) -> tuple[int, str, str]:
    """``malleable ARGV`` as its own process (stdout a pipe whose reader is gone, if asked)."""
    cmd = [sys.executable, "-m", "malleable", *argv]
    if not closed_stdout:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=60, env=env)
        return p.returncode, p.stdout, p.stderr
    r, w = os.pipe()
    os.close(r)                                        # like `| head -3` once head has what it wants
    try:
        p = subprocess.run(cmd, stdout=w, stderr=subprocess.PIPE, text=True, timeout=60, env=env)
    finally:
        os.close(w)
    return p.returncode, "", p.stderr


def test_command_failures_are_one_line(env):
    state = str(env / "ctl.sqlite")
    with daemon_thread(env / "ctl.sqlite", HostPool.local(1)) as (d, c):
        jid = c.submit(["sh", "-c", "exit 0"], 1, out=str(env / "o"))
        wait_final(c, [jid], 30)
        code, out, _ = run("info", "--state", state, str(jid))
        assert code == 0 and len(out.splitlines()) > 3
        one_line(run("info", "--state", state, str(jid), closed_stdout=True), "info", "broken pipe")
        one_line(run("history", "--state", state, closed_stdout=True), "history", "broken pipe")
        ann = c.add_user("ann")
        other = c.submit(["sleep", "60"], 1, out=str(env / "o2"), user="bob")
        as_ann = dict(os.environ, MALLEABLE_KEY=ann.text)
        one_line(run("cancel", "--state", state, str(other), env=as_ann), "cancel",
                 f"job {other}: job {other} belongs to bob: user ann may cancel only their own jobs")
        one_line(run("controller", "stop", "--state", state, env=as_ann), "controller",
                 "shutdown: only the operator may do this (user ann may not)")
        one_line(run("queue", "--state", state, env=dict(os.environ, MALLEABLE_KEY="user:ann:zz")), "queue",
                 "MALLEABLE_KEY is not a malleable key")
        one_line(run("queue", "--state", state, env={**os.environ, "MALLEABLE_TOKEN": "wrong"}), "queue",
                 "did not accept the shared secret")
        assert [r["state"] for r in c.rows(P.Queue())] == ["RUNNING"]       # nothing refused changed anything
    one_line(cli("queue", "--controller", "tcp://127.0.0.1:9", "--timeout", "0.5"), "queue", "did not answer")
    one_line(cli("queue", "--controller", "tcp://no such host:1"), "queue", "cannot connect to tcp://no such host:1")
    one_line(cli("nodes", "--state", state, "--timeout", "0.5"), "nodes", "no controller running for state")
    one_line(cli("history", "--state", str(env / "missing" / "x.sqlite")), "history", "no controller state file")
    one_line(cli("controller", "add-user", "nobody", "--state", state, "--key-file", str(env)), "controller",
             "is a directory")


def test_a_bug_in_a_handler_is_answered_and_the_daemon_goes_on(env, monkeypatch):
    def broken(d, m):
        raise ZeroDivisionError("a bug")

    with daemon_thread(env / "ctl.sqlite", HostPool.local(1)) as (d, c):
        monkeypatch.setitem(VIEWS, P.Nodes, broken)
        from malleable.errors import MalleableError

        for _ in range(3):
            with pytest.raises(MalleableError, match="ZeroDivisionError: a bug"):
                c.rows(P.Nodes())
        monkeypatch.undo()
        monkeypatch.setenv("MALLEABLE_TOKEN", TOKEN)
        assert [r["name"] for r in c.rows(P.Nodes())] == ["local1"]
        assert c.status()["rejected"] == 3


def test_unreachable_hosts_are_down_at_start_and_jobs_wait(env):
    state = str(env / "ctl.sqlite")
    code, out, err = cli("controller", "start", "--hosts", "badhost.invalid", "--state", state, "--tick", "0.2")
    try:
        assert code == 0 and out.startswith("controller started: "), err
        assert err.startswith("malleable controller start: warning: host badhost.invalid is down: check failed")
        code, out, _ = cli("nodes", "--state", state)
        assert code == 0 and out.splitlines()[1].startswith("badhost.invalid down")
        assert "(down: check failed" in out
        code, out, _ = cli("submit", "--state", state, "--parsable", "--", "true")
        jid = int(out)
        code, out, _ = cli("nodes", "--state", state, "--json")
        assert json.loads(out)["nodes"] == [{"name": "badhost.invalid", "state": "down", "job": None,
                                             "drain": None}]
        code, out, _ = cli("queue", "--state", state, "--json")
        assert [(j["id"], j["state"]) for j in json.loads(out)["jobs"]] == [(jid, "PENDING")]   # never draining
    finally:
        assert cli("controller", "stop", "--state", state, "--cancel-jobs")[0] == 0
    wait_for(lambda: not (env / "ctl.sqlite.addr").exists(), 10, "the daemon to stop")

"""kill -9 of the daemon in the middle of a workload, then a restart: nothing lost, nothing run twice."""

from __future__ import annotations

import json
import os
import sys

import pytest

from malleable.controller.daemon import _protocol as P
from malleable.controller.daemon._client import Client
from malleable.controller.daemon._hostpool import scan_tagged
from malleable.controller.daemon._paths import addr_file
from tests._procs import kill9
from tests.controller._daemon_util import HEAT, TOKEN, cli, kill_leftovers, states, wait_final, wait_for

pytestmark = pytest.mark.timeout(180)


def _start(state: str) -> int:
    code, out, err = cli("controller", "start", "--local", "3", "--policy", "malleable-fill", "--state", state,
                         "--tick", "0.2")
    assert code == 0, err
    return json.loads(addr_file(state).read_text())["pid"]


def test_kill_9_and_restart(monkeypatch, tmp_path):
    monkeypatch.setenv("MALLEABLE_TOKEN", TOKEN)
    monkeypatch.delenv("MALLEABLE_CONTROLLER", raising=False)
    monkeypatch.chdir(tmp_path)
    state = str(tmp_path / "ctl.sqlite")
    log = tmp_path / "starts.log"
    pid = _start(state)
    cid = None
    try:
        c = Client(state=state, token=TOKEN.encode())
        cid = c.status()["controller_id"]

        def job(name, seconds, code=0):
            # one line per job, from its first rank only (a rigid job runs the command once per process)
            return ["sh", "-c", f'[ "${{PMI_RANK:-0}}" = 0 ] && echo {name} >> {log}; sleep {seconds}; exit {code}']

        env = dict(os.environ, PROG_ITERS="120", PROG_SLEEP="0.05", MALLEABLE_ADAPT_TIMEOUT="30")
        m = c.submit([sys.executable, HEAT], 1, 1, 2, True, out=str(tmp_path / "m.out"), env=env)
        a = c.submit(job("a", 1, 5), 1)
        b = c.submit(job("b", 6), 1)
        cc = c.submit(job("c", 0.5), 2)
        d = c.submit(job("d", 0.5), 1)
        wait_for(lambda: {k: v for k, v in states(c).items() if v == "RUNNING"}.keys() == {m, a, b}, 30,
                 "m, a, b running")
        wait_for(lambda: log.exists() and len(log.read_text().split()) == 2, 10, "a and b to start")
        c.close()
        kill9(pid)
        wait_for(lambda: (tmp_path / "ctl.sqlite.d" / "jobs" / f"{a}.rc").exists(), 10, "a to end meanwhile")
        pid = _start(state)                                         # same state: re-attach and go on
        c = Client(state=state, token=TOKEN.encode())
        final = wait_final(c, [m, a, b, cc, d], 90)
        assert final == {m: "COMPLETED", a: "FAILED", b: "COMPLETED", cc: "COMPLETED", d: "COMPLETED"}
        hist = {r["id"]: r for r in c.rows(P.History(0))}
        assert hist[a]["exit_code"] == 5                            # learned from the shepherd's file
        assert sorted(log.read_text().split()) == ["a", "b", "c", "d"]  # each started exactly once
        assert log.read_text().split().index("c") < log.read_text().split().index("d")  # queue order kept
        out = [json.loads(x) for x in (tmp_path / "m.out").read_text().splitlines() if x.startswith("{")]
        assert out[-1]["done"] and out[-1]["ok"], out
        events = [e["kind"] for e in c.info(b).events + c.info(m).events]
        assert events.count("reattach") == 2
        c.close()
        assert cli("controller", "stop", "--state", state)[0] == 0
        pid = 0
    finally:
        kill_leftovers(pid, cid)
    assert cid and not scan_tagged(cid + "."), "job processes left behind"
